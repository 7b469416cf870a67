"""The web console in a real browser: Debian's Chromium driven by Playwright against a real server on
loopback. Every test fails on a console error or a failed request (the `page` fixture)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from grandbo.config import Settings
from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, shipped_set
from grandbo.service import Grandbo
from tests.console_browser import (
    BRAVO_SECRET,
    Console,
    alertmanager,
    axe_problems,
    dumps,
    screenshot,
    sign_in,
    tab_to,
    watched_page,
)
from tests.plain_ledger import every_outcome
from tests.serving import serving


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """Org acme holds the shipped incident set (memories, catalog, ledger); org bravo holds one secret."""
    home = tmp_path_factory.mktemp("console-home")
    with Grandbo.init(Settings(home=home, database_url=None), embedding="deterministic") as grandbo:
        acme = grandbo.org("acme", create=True)
        load_corpus(acme, beir.load(shipped_set()), lambda message: None)
        bravo = grandbo.org("bravo", create=True)
        bravo.remember(BRAVO_SECRET)
        keys = {
            f"acme-{scope}": acme.keys.create(scope, name=f"acme {scope}")[1] for scope in ("read", "write", "admin")
        }
        keys["bravo-admin"] = bravo.keys.create("admin", name="bravo admin")[1]
        with serving(grandbo) as served:
            yield Console(served, keys)


LOAD_FAILED = re.compile(r"^Failed to load resource: the server responded with a status of (\d{3})")


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A fresh browser context (no cookies) whose console errors and failed requests fail the test.

    Chromium logs every 4xx page it loads as a console error; a test that asks for one on purpose (a wrong
    key, a missing entry, a refused form) names its status in `page.expected_statuses`, and only the
    message for that status is forgiven."""
    with watched_page(browser, console.url) as (tab, errors):
        tab.expected_statuses = set()
        yield tab
    unexpected = [e for e in errors if not ((m := LOAD_FAILED.match(e)) and int(m.group(1)) in tab.expected_statuses)]
    assert unexpected == [], unexpected


REDIS_ALERT = "Redis connection resets during key eviction spike; auth-service latency above 1200ms"
NOVEL_ALERT = "GPU driver crash on the machine learning inference nodes"  # novel to the feature-hash provider too


def _win_rate(page, runbook: str) -> tuple[str, str]:
    record = page.locator(f'p.record[data-runbook="{runbook}"]')
    return record.locator(".winrate strong").inner_text(), record.locator(".attempts").inner_text()


def test_the_api_s_swagger_ui_renders_every_operation_offline(page):
    """`/docs` renders from the server alone (a request off it fails the `page` fixture: nothing here reaches the
    internet), with the recall operation and the bearer key's Authorize button."""
    page.goto("/docs")
    page.wait_for_selector("#operations-recall-recall", timeout=60_000)  # a loaded machine took over 15 s
    assert page.locator(".opblock").count() > 40
    assert page.locator("button.authorize").count() == 1


def test_signing_in_needs_a_valid_key_and_signing_out_ends_the_session(page, console):
    page.expected_statuses.add(401)  # the wrong key below
    page.goto("/ui/analytics")
    assert "/ui/sign-in" in page.url  # no session: sent to sign in
    page.fill("#key", console.keys["acme-read"][:-3] + "xyz")
    page.click("button[type=submit]")
    assert "unknown, revoked or mistyped" in page.inner_text("#sign-in-error")
    page.fill("#key", console.keys["acme-read"])
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/ui/analytics$"))  # and back where it was going
    assert "read key" in page.inner_text(".who")
    page.click("text=Sign out")
    page.wait_for_url(re.compile(r"/ui/sign-in"))
    page.goto("/ui/triage")
    assert "/ui/sign-in" in page.url


def test_an_alert_shows_its_matches_with_the_breakdown_and_a_vote_moves_the_win_rate(page, console):
    console.post_alert(alertmanager(REDIS_ALERT, "auth-service", "redis-resets-1"))
    sign_in(page, console.keys["acme-write"])
    page.click(f"nav.queue a:has-text('{REDIS_ALERT[:40]}')")
    assert page.inner_text("#query").startswith("Redis connection resets during key eviction spike")
    assert page.inner_text("#verdict") == "Seen before"
    first = page.locator("li.match").first
    labels = first.locator("table.breakdown th").all_inner_texts()
    assert labels == ["lexical rank", "vector rank", "service", "severity", "runbook win rate", "age"]
    assert first.locator("svg.bar").count() == 6
    widths = [
        float(w)
        for w in first.locator("svg.bar rect:nth-child(2)").evaluate_all("rs => rs.map(r => r.getAttribute('width'))")
    ]
    assert max(widths) > 0  # some part of the score is drawn
    assert page.locator("ul.findings li").count() >= 1  # the findings the matches cite
    runbook = page.locator("li.runbook").first.get_attribute("id").removeprefix("runbook-")
    before = _win_rate(page, runbook)
    screenshot(page, "triage-before-vote")
    page.click(f'#runbook-{runbook} button[value="yes"]')
    page.wait_for_selector(".flash[role=status]")
    assert f"Recorded: {runbook} worked" in page.inner_text(".flash")
    after = _win_rate(page, runbook)
    assert after[0] != before[0], (before, after)  # the win rate itself, as drawn
    assert int(after[1].split()[0]) == int(before[1].split()[0]) + 1  # one more attempt
    assert page.inner_text(f"#runbook-{runbook} .voted") == "Recorded for this alert: it worked."
    screenshot(page, "triage-after-vote")
    page.reload()  # the next view reflects it too: the ledger holds it
    assert _win_rate(page, runbook) == after


def test_an_alert_nothing_resembles_says_no_similar_past_incident(page, console):
    console.post_alert(alertmanager(NOVEL_ALERT, "address-ml", "gpu-crash-1", "warning"))
    sign_in(page, console.keys["acme-read"])
    page.click(f"nav.queue a:has-text('{NOVEL_ALERT[:30]}')")
    assert page.inner_text("#verdict") == "No similar past incident"
    assert page.locator("form.vote").count() == 0  # a read key is offered no vote
    screenshot(page, "triage-novel")


def test_the_explorer_searches_filters_and_shows_an_entry_history_with_corrections(page, console):
    sign_in(page, console.keys["acme-write"], "/ui/memory")
    page.fill("#q", "redis connection resets while keys are evicted under memory pressure")
    page.select_option("#kind", "finding")
    page.click("form.search button")
    page.wait_for_url(re.compile(r"q=redis"))
    kinds = page.locator("li.match .kind").all_inner_texts()
    assert kinds and set(kinds) == {"finding"}
    page.locator("li.match details summary").first.click()
    assert page.locator("li.match table.breakdown").first.is_visible()
    screenshot(page, "memory-search")
    page.locator("li.match .match-head a").first.click()
    entry_id = page.url.rsplit("/", 1)[1]
    assert page.locator("ol.history .ev-type").all_text_contents() == ["remembered"]
    assert "Embedded in the active space" in page.inner_text("#embed-h + p")
    page.fill("#c-title", "Corrected: redis evictions reset auth-service connections")
    page.fill("#c-reason", "the title named the wrong symptom")
    page.click("text=Save correction")
    page.wait_for_selector("text=Corrects")
    new_id = page.url.rsplit("/", 1)[1]
    assert new_id != entry_id
    page.click(f"a:text-is('{entry_id}')")
    page.wait_for_url(re.compile(f"/ui/memory/{re.escape(entry_id)}$"))  # read the page it went to (a loaded machine)
    page.wait_for_selector("ol.history .ev-type")
    assert page.locator("ol.history .ev-type").all_text_contents() == ["remembered", "corrected"]
    assert "the title named the wrong symptom" in page.inner_text("ol.history")
    screenshot(page, "entry-history")
    page.goto(f"/ui/memory/{new_id}")
    page.fill("#r-reason", "test retirement")
    page.click("text=Retire entry")
    page.wait_for_selector(".flash")
    assert page.locator("ol.history .ev-type").all_text_contents() == ["remembered", "retired"]
    page.goto("/ui/memory?status=retired")
    assert new_id in page.inner_text("table.entries")


def test_analytics_draws_every_chart(page, console):
    sign_in(page, console.keys["acme-read"], "/ui/analytics")
    for chart in ("runbooks", "mttr", "incidents", "embedded", "growth"):
        svg = page.locator(f"#chart-{chart} svg.chart")
        assert svg.count() == 1, chart
        assert svg.locator("title").text_content(), chart
    tried = page.locator("#chart-runbooks tbody tr").count()
    assert tried > 3 and page.locator("#chart-runbooks svg circle").count() == tried
    assert page.locator("#chart-mttr svg polyline").count() >= 1
    assert int(page.inner_text("#unembedded")) == 0
    screenshot(page, "analytics")


def test_learned_notes_are_reviewed_by_an_admin(page, console):
    learning = console.served.grandbo.org("acme").learning_with(None)
    for n in range(3):  # every third edit of a kind teaches a note
        learning.record_edit(
            f"We are very sorry, maybe the queue {n} broke.",
            f"The queue {n} broke.",
            content_type="status-update",
            author="sam",
        )
    sign_in(page, console.keys["acme-admin"], "/ui/profile")
    note = page.locator("li.note").first
    assert "awaiting review" in note.inner_text()
    note.locator("text=Accept").click()
    page.wait_for_selector(".flash")
    assert "reviewed" in page.locator("li.note").first.inner_text()
    page.locator("li.note input[name=text]").first.fill("In status updates, never apologise or hedge.")
    page.locator("li.note >> text=Save edit").first.click()
    page.wait_for_selector(".flash")
    assert "never apologise" in page.locator("li.note .note-text").first.inner_text()
    screenshot(page, "profile")
    page.locator("li.note >> text=Reject").first.click()
    page.wait_for_selector(".flash")
    assert "rejected" in page.locator("li.note").first.inner_text()
    page.locator("text=Delete the rejected and archived notes").click()  # room under GRANDBO_NOTES_PER_ORG
    page.wait_for_selector(".flash")
    assert "Deleted 1 rejected and 0 archived notes" in page.inner_text(".flash")
    assert page.locator("li.note").count() == 0 and learning.notes(include_inactive=True) == []


def test_every_action_works_with_the_keyboard_alone(page, console):
    console.post_alert(
        alertmanager("Redis evicting keys under maxmemory on redis-sessions", "redis-sessions", "redis-evict-kb")
    )
    page.goto("/ui/sign-in")
    if not page.locator("#key").evaluate("element => element === document.activeElement"):
        tab_to(page, "#key")  # autofocus normally puts it there
    page.keyboard.type(console.keys["acme-write"])
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/triage"))
    tab_to(page, "a.skip")
    assert page.locator("a.skip").is_visible()  # the skip link shows when focused
    tab_to(page, "nav[aria-label=Console] a[href$='/memory']")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/memory$"))
    tab_to(page, "#q")
    page.keyboard.type("redis evicting keys under maxmemory on redis-sessions")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"q=redis"))
    tab_to(page, "li.match details summary")
    page.keyboard.press("Enter")
    assert page.locator("li.match table.breakdown").first.is_visible()
    tab_to(page, "nav[aria-label=Console] a[href$='/triage']")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/triage"))
    tab_to(page, "nav.queue a:has-text('Redis evicting keys under maxmemory')")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"alert="))
    runbook = page.locator("li.runbook:has(form.vote)").first.get_attribute("id")
    tab_to(page, f"#{runbook} button[value=no]")
    page.keyboard.press("Enter")
    page.wait_for_selector(".flash[role=status]")
    assert "did not work" in page.inner_text(".flash")
    tab_to(page, "header form button")  # sign out
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/sign-in"))


def test_adding_correcting_retiring_and_reviewing_work_with_the_keyboard_alone(page, console):
    """The write and admin actions, not only navigation and votes: Tab to each field and button, type, Enter."""
    learning = console.served.grandbo.org("acme").learning_with(None)
    for n in range(3):
        learning.record_edit(
            f"Hopefully the keyboard-path {n} might be back soon.",
            f"The keyboard-path {n} is back.",
            content_type="keyboard-update",
            author="kim",
        )
    (note,) = [n for n in learning.pending() if n.content_type == "keyboard-update"]
    sign_in(page, console.keys["acme-admin"], "/ui/memory")
    tab_to(page, "#add-title")
    page.keyboard.type("Keyboard-only entry: the parcel label printer queue stalls")
    tab_to(page, "#add-services")
    page.keyboard.type("label-printer")
    tab_to(page, "form.grid-form button:has-text('Remember')")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=Remembered")
    added = page.url.rsplit("/", 1)[1]
    assert page.inner_text("#entry-h").startswith("Keyboard-only entry")
    tab_to(page, "#c-title")
    page.keyboard.press("Control+A")
    page.keyboard.type("Keyboard-only entry: the label printer queue stalls on a full spool")
    tab_to(page, "#c-reason")
    page.keyboard.type("named the cause")
    tab_to(page, "button:has-text('Save correction')")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=Corrects")
    corrected = page.url.rsplit("/", 1)[1]
    assert corrected != added and "full spool" in page.inner_text("#entry-h")
    tab_to(page, "#r-reason")
    page.keyboard.type("printer replaced")
    tab_to(page, "button:has-text('Retire entry')")
    page.keyboard.press("Enter")
    page.wait_for_selector(".flash")
    assert page.locator("ol.history .ev-type").all_text_contents() == ["remembered", "retired"]
    assert console.served.grandbo.org("acme").get(corrected).status.value == "retired"
    tab_to(page, "nav[aria-label=Console] a[href$='/profile']")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/ui/profile"))
    tab_to(page, f"#note-{note.id} button:has-text('Accept')")
    page.keyboard.press("Enter")
    page.wait_for_selector(".flash")
    assert "reviewed" in page.inner_text(f"#note-{note.id}")
    tab_to(page, f"#note-{note.id} button:has-text('Reject')")
    page.keyboard.press("Enter")
    page.wait_for_selector(".flash")
    assert "rejected" in page.inner_text(f"#note-{note.id}")
    assert {n.id: n.status for n in learning.notes(include_inactive=True)}[note.id] == "rejected"


def test_no_page_has_serious_accessibility_problems_and_each_is_captured(page, console):
    page.expected_statuses.add(404)  # the not-found page
    console.post_alert(alertmanager(REDIS_ALERT, "auth-service", "redis-resets-axe"))
    console.served.grandbo.org("acme").incidents.open(
        "booking-api returns 500s; orders-db refuses new connections",
        services=["booking-api"],
        severity="sev2",
        symptoms=["FATAL: sorry, too many clients already"],
        incident_id="INC-AXE-1",
    )
    page.goto("/ui/sign-in")
    problems = {"sign-in": axe_problems(page)}
    screenshot(page, "sign-in")
    sign_in(page, console.keys["acme-admin"])
    page.goto("/ui/triage?incident=INC-AXE-1")
    voted = page.locator("li.runbook").first.get_attribute("id").removeprefix("runbook-")
    page.click(f'#runbook-{voted} button[value="yes"]')  # so that the page draws its undo form too
    page.wait_for_selector(f"#runbook-{voted} form.unvote")
    entry = "INC-003-F1"
    pages = {
        "triage": "/ui/triage",
        "triage-incident": "/ui/triage?incident=INC-AXE-1",
        "triage-filtered": "/ui/triage?status=firing&severity=sev1&service=auth-service",
        "memory": "/ui/memory",
        "memory-search": "/ui/memory?q=booking-api+connection+pool+exhausted+against+orders-db",
        "entry": f"/ui/memory/{entry}",
        "analytics": "/ui/analytics",
        "profile": "/ui/profile",
        "not-found": "/ui/memory/NO-SUCH-ENTRY",
    }
    for name, path in pages.items():
        response = page.goto(path)
        assert response.status == (404 if name == "not-found" else 200), name
        page.locator("details").evaluate_all("ds => ds.forEach(d => d.open = true)")  # check what they hide too
        problems[name] = axe_problems(page)
        screenshot(page, name)
    assert all(not found for found in problems.values()), dumps(problems)


def test_a_read_key_sees_but_cannot_change_anything(page, console):
    acme = console.served.grandbo.org("acme")
    sign_in(page, console.keys["acme-read"], "/ui/memory/INC-003-F1")
    assert page.locator("form[action$='/correct'], form[action$='/retire']").count() == 0
    csrf = page.locator("header input[name=csrf]").get_attribute("value")
    before = (acme.stats().total, len(every_outcome(acme)), acme.get("INC-003-F1").status.value)
    attempts = [
        ("/ui/memory", {"title": "a reader writes", "kind": "fact"}),
        ("/ui/memory/INC-003-F1/retire", {"reason": "a reader retires"}),
        ("/ui/memory/INC-003-F1/correct", {"title": "a reader corrects"}),
        ("/ui/triage/vote", {"kind": "alert", "subject": "x", "runbook": "RB-PG-POOL-RESIZE", "worked": "yes"}),
        ("/ui/profile/facts", {"name": "owner", "value": "a reader"}),
        ("/ui/notes/prune", {}),
    ]
    for path, form in attempts:
        response = page.request.post(path, form={**form, "csrf": csrf}, max_redirects=0)
        assert response.status == 403, (path, response.status)
        assert "read scope" in response.text()
    assert (acme.stats().total, len(every_outcome(acme)), acme.get("INC-003-F1").status.value) == before


def test_another_organizations_data_never_appears(page, console):
    console.post_alert(alertmanager("Acme-only alert: ledger-db replica lag after a vacuum", "ledger-db", "acme-lag"))
    acme_alert = console.served.grandbo.org("acme").alerts.recent(1)[0].id
    page.expected_statuses.add(404)  # acme's alert and entry, asked for by id, are not bravo's
    sign_in(page, console.keys["bravo-admin"])
    acme_titles = [e.title for e in console.served.grandbo.org("acme").entries()[:20]]
    paths = [
        "/ui/triage",
        f"/ui/triage?alert={acme_alert}",
        "/ui/memory",
        "/ui/memory?status=any",
        "/ui/memory?q=too+many+clients+on+the+orders+database+pool",
        "/ui/memory/INC-003-F1",
        "/ui/analytics",
        "/ui/profile",
    ]
    for path in paths:
        page.goto(path)
        text = page.content()
        assert "Acme-only alert" not in text and "ledger-db replica lag" not in text, path
        assert not [title for title in acme_titles if title in text], path
        assert "acme" not in page.inner_text(".who")
    page.goto("/ui/memory?status=any")
    assert BRAVO_SECRET["id"] in page.inner_text("table.entries")  # bravo sees its own
