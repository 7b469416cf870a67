"""What the console's browser tests share: a served Grandbo holding two organizations, Debian's Chromium
driven by Playwright, axe-core from npm (both installed by `make browser`), and screenshots kept as artifacts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.serving import Served

ROOT = Path(__file__).parent.parent
CHROMIUM = Path("/usr/bin/chromium")
AXE = ROOT / ".browser" / "node_modules" / "axe-core" / "axe.min.js"
SHOTS = ROOT / "artifacts" / "console"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]

BRAVO_SECRET = {
    "id": "BRAVO-ONLY-7731",
    "title": "Bravo zebra-queue poison message loop",
    "body": "bravo-private: the zebra-queue consumer retried one poison message forever",
    "kind": "finding",
    "services": ["zebra-queue"],
}


def alertmanager(summary: str, service: str, fingerprint: str, severity: str = "critical") -> dict[str, Any]:
    """One firing alert, shaped as Alertmanager's v4 webhook sends it."""
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{fingerprint}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "grandbo",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": fingerprint, "service": service, "severity": severity},
                "annotations": {"summary": summary},
                "startsAt": "2026-11-30T10:00:00.000Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.example:9090/graph",
                "fingerprint": fingerprint,
            }
        ],
    }


@dataclass
class Console:
    """The served app, its keys by name, and what the tests found wrong in the browser."""

    served: Served
    keys: dict[str, str]
    console_errors: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.served.url

    def post_alert(self, payload: dict[str, Any], key: str = "acme-write") -> dict[str, Any]:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.keys[key]}"}) as client:
            response = client.post("/v1/webhooks/alertmanager", json=payload, timeout=30)
            assert response.status_code == 202, response.text
            body: dict[str, Any] = response.json()
            return body


def sign_in(page: Any, key: str, next_path: str = "/ui/triage") -> None:
    page.goto(f"/ui/sign-in?next={next_path}")
    page.fill("#key", key)
    page.click("button[type=submit]")
    # The path, not the whole URL: the sign-in page's own URL carries `next_path` in its query, so a pattern
    # matched anywhere would return before the form's answer has loaded.
    path = next_path.split("?")[0]
    page.wait_for_url(lambda url: urlsplit(url).path == path)


def axe_problems(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it stands."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make browser` (npm install axe-core)")
    page.evaluate(AXE.read_text())  # evaluated by the debugger protocol, so the page's CSP allows it
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def screenshot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def tab_to(page: Any, selector: str, limit: int = 250) -> None:
    """Press Tab until the element `selector` names has the focus (keyboard only, as a person would)."""
    target = page.locator(selector).first
    target.wait_for()
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("element => element === document.activeElement"):
            return
    raise AssertionError(f"Tab never reached {selector}")


def wait_settled(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)


@contextmanager
def watched_page(browser: Any, url: str) -> Iterator[tuple[Any, list[str]]]:
    """A fresh browser context's page, and the console errors and failed requests it meets (for the test to
    judge once the page is done)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("requestfailed", lambda request: errors.append(f"request failed: {request.url}"))
    try:
        yield tab, errors
    finally:
        context.close()
