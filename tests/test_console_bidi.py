"""A title is the writer's text: a right-to-left override in it (U+202E, as an attacker or a pasted log line may
carry) reordered the console's own words after it on the line, in a real browser: "(incident INC-9)" or "confidence
80% · 3/4 worked" drawn before the title, reversed. Each title is isolated now (`<bdi>`, or `dir="auto"` where it is
a block of its own), so the override reaches its own text only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.console_browser import sign_in, watched_page
from tests.serving import serving

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)

OVERRIDE = "\u202e"


def _title_and_after(page: Any, line: str) -> tuple[dict[str, float], dict[str, float]]:
    """The box of the overridden title's text and that of the console's words after it (`span.muted`), on the
    first of the elements `line` whose text holds the override."""
    return page.evaluate(  # type: ignore[no-any-return]
        """([selector, mark]) => {
            const line = [...document.querySelectorAll(selector)].find(e => e.textContent.includes(mark));
            const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
            let text;
            while ((text = walker.nextNode()) && !text.data.includes(mark)) {}
            const range = document.createRange();
            range.selectNodeContents(text);
            const box = r => ({left: r.left, right: r.right, top: r.top});
            return [box(range.getBoundingClientRect()), box(line.querySelector('.muted').getBoundingClientRect())];
        }""",
        [line, OVERRIDE],
    )


def test_an_override_in_a_title_leaves_the_consoles_words_after_it_in_place(grandbo, browser):
    acme = grandbo.org("acme", create=True)
    acme.runbooks.add(
        "RB-WARM", f"{OVERRIDE}restart the walrus-cache warmer", ["restart it"], services=["walrus-cache"]
    )
    acme.remember({"id": "F-RTL", "title": f"{OVERRIDE}walrus-cache stampede after a cold start", "kind": "finding",
                   "body": "walrus-cache stampede after a cold start; the warmer was restarted",
                   "services": ["walrus-cache"], "meta": {"runbook_id": "RB-WARM", "incident_id": "INC-9"}})  # fmt: skip
    acme.incidents.open("walrus-cache stampede after a cold start", services=["walrus-cache"], incident_id="INC-W")
    key = acme.keys.create("read", name="acme read")[1]
    with serving(grandbo) as served, watched_page(browser, served.url) as (page, errors):
        sign_in(page, key, "/ui/triage?incident=INC-W")
        for line in ("ol.plan-runbooks li", "section[aria-labelledby=findings-h] li p"):
            title, after = _title_and_after(page, line)
            assert after["top"] == title["top"] and after["left"] >= title["right"] - 1, (line, title, after)
        assert errors == []
