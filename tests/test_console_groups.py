"""The console's alert groups in a real browser (Debian's Chromium, Playwright) against a real server on
loopback: a group's firing alerts are folded under one row of the queue, and the incident opens from it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.service import Grandbo
from tests.console_browser import Console, alertmanager, axe_problems, dumps, screenshot, sign_in, watched_page
from tests.serving import serving

CATALOG = """
services:
  - name: checkout-api
    depends_on: [payments-gateway]
  - name: payments-gateway
  - name: search-api
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    home = tmp_path_factory.mktemp("console-groups-home")
    with Grandbo.init(Settings(home=home, database_url=None), embedding="deterministic") as grandbo:
        acme = grandbo.org("acme", create=True)
        acme.catalog.import_text(CATALOG)
        keys = {f"acme-{scope}": acme.keys.create(scope, name=f"acme {scope}")[1] for scope in ("read", "write")}
        with serving(grandbo) as served:
            yield Console(served, keys)


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A fresh browser context whose console errors and failed requests fail the test."""
    with watched_page(browser, console.url) as (tab, errors):
        yield tab
    assert errors == [], errors


def _delivery() -> dict[str, Any]:
    body = alertmanager("Checkout 5xx rate above five percent", "checkout-api", "checkout-5xx")
    body["alerts"] += [
        {**alertmanager("Payments gateway p99 latency over two seconds", "payments-gateway", "pay-p99")["alerts"][0],
         "startsAt": "2026-11-30T10:03:00.000Z"},
        {**alertmanager("Search queries slower than usual today", "search-api", "search-slow", "warning")["alerts"][0],
         "startsAt": "2026-11-30T10:01:00.000Z"},
    ]  # fmt: skip
    return body


def test_the_queue_folds_a_groups_alerts_under_one_row_and_opens_the_incident_from_it(page, console):
    console.post_alert(_delivery())
    sign_in(page, console.keys["acme-write"])
    group = page.locator("ul.q-firing li.q-group")
    assert group.count() == 1
    folded = group.locator("ul.q-group-alerts a .title").all_inner_texts()
    assert sorted(folded) == ["Checkout 5xx rate above five percent", "Payments gateway p99 latency over two seconds"]
    assert "2 alerts · checkout-api, payments-gateway · open" in group.locator(".group-head .meta").inner_text()
    alone = page.locator("ul.q-firing > li:not(.q-group) a .title").all_inner_texts()
    assert alone == ["Search queries slower than usual today"]
    page.click("ul.q-group-alerts a:has-text('Payments gateway p99')")
    assert page.inner_text("p.plan-group").startswith("For the group of 2 alerts on checkout-api, payments-gateway")
    assert axe_problems(page) == [], dumps(axe_problems(page))
    screenshot(page, "triage-alert-group")
    group.locator("button:has-text('Open incident from 2 alerts')").click()
    page.wait_for_url(re.compile(r"/ui/triage\?incident=inc-"))
    flash = page.inner_text(".flash")
    assert flash.startswith("Opened inc-") and "Checkout 5xx rate above five percent (2 alerts on checkout-api" in flash
    assert page.inner_text("#subject-title").startswith("Checkout 5xx rate above five percent")
    assert page.locator("ul.q-incidents a .title").all_inner_texts() == [page.inner_text("#subject-title")]
    head = page.locator("ul.q-firing li.q-group .group-head")
    assert "opened as inc-" in " ".join(head.inner_text().split())
    assert head.locator("a").inner_text() == page.url.split("incident=")[1]
    assert page.locator("ul.q-firing li.q-group form.open-group").count() == 0  # opened once


def test_a_read_key_sees_the_group_without_the_button(page, console):
    sign_in(page, console.keys["acme-read"])
    assert page.locator("ul.q-firing li.q-group").count() == 1
    assert page.locator("form.open-group").count() == 0
