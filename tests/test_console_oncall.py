"""The console as the on-call engineer meets it (issue 27), over plain HTTP on a real server, on both backends:
the queue's order and filters, one runbook order on a page, links back to the sender, a vote taken back, the
explorer's pages, Markdown drawn safely, and incidents per service counted as incidents."""

from __future__ import annotations

import copy
import html
import json
import re

import httpx
import pytest

from tests.serving import serving
from tests.test_console_http import csrf_of, signed_in
from tests.test_webhooks import GRAFANA, PAGERDUTY, sign

pytestmark = pytest.mark.embedded_default  # Postgres: in the slow suite (tests/conftest.py)


def _alert(summary: str, service: str, fingerprint: str, severity: str, status: str = "firing") -> dict:
    return {
        "version": "4",
        "status": status,
        "alerts": [
            {
                "status": status,
                "labels": {"alertname": fingerprint, "service": service, "severity": severity},
                "annotations": {"summary": summary},
                "startsAt": "2026-11-30T10:00:00Z",
                "fingerprint": fingerprint,
            }
        ],
    }


@pytest.fixture
def served(grandbo):
    acme = grandbo.org("acme", create=True)
    acme.runbooks.add("RB-FRESH", "Runbook: restart the walrus-cache warmer", ["restart it"], services=["walrus-cache"])
    acme.runbooks.add("RB-PROVEN", "Runbook: shed load at the walrus-cache proxy", ["shed"], services=["walrus-cache"])
    acme.remember({"id": "F-TOP", "title": "walrus-cache stampede after a cold start", "kind": "finding",
                   "body": "walrus-cache stampede after a cold start; the warmer was restarted",
                   "services": ["walrus-cache"], "meta": {"runbook_id": "RB-FRESH"}})  # fmt: skip
    acme.remember({"id": "F-LOW", "title": "walrus-cache latency after a deploy", "kind": "finding",
                   "body": "walrus-cache stampede during a deploy; load was shed", "services": ["walrus-cache"],
                   "meta": {"runbook_id": "RB-PROVEN"}})  # fmt: skip
    for n in range(6):
        acme.ledger.record("RB-PROVEN", "succeeded", service="walrus-cache", incident_id=f"INC-P{n}")
    keys = {scope: acme.keys.create(scope, name=f"acme {scope}")[1] for scope in ("read", "write")}
    with serving(grandbo) as running:
        running.keys = keys  # type: ignore[attr-defined]
        running.api = httpx.Client(  # type: ignore[attr-defined]
            base_url=running.url, timeout=30, headers={"Authorization": f"Bearer {keys['write']}"}
        )
        yield running
        running.api.close()  # type: ignore[attr-defined]


def _post(served, source: str, body: dict) -> list[str]:
    response = served.api.post(f"/v1/webhooks/{source}", json=body)
    assert response.status_code == 202, response.text
    return [alert["id"] for alert in response.json()["alerts"]]


def _queue(page: str) -> dict[str, list[str]]:
    """The queue's sections, in the order drawn, each with its items' titles in order."""
    nav = page[page.index('<nav class="queue"') : page.index("</nav>", page.index('<nav class="queue"'))]
    sections = {}
    for name in ("incidents", "firing", "resolved"):
        # to the list's own end (a group's folded alerts are a list inside it), not the first </ul>
        found = re.search(rf'<ul aria-labelledby="q-{name}"[^>]*>(.*?)</ul>\s*(?=<h2|<p|$)', nav, re.S)
        if found:
            sections[name] = [html.unescape(t) for t in re.findall(r'<bdi class="title">(.*?)</bdi>', found[1])]
    order = sorted(sections, key=lambda name: nav.index(f'id="q-{name}"'))
    return {name: sections[name] for name in order}


def test_the_queue_puts_open_incidents_then_firing_alerts_by_severity_then_resolved_ones(served):
    """The queue was newest first with resolved alerts mixed in and open incidents below every alert."""
    _post(served, "alertmanager", _alert("walrus-cache down everywhere", "walrus-cache", "w-crit", "critical"))
    _post(served, "alertmanager", _alert("walrus-cache hit rate low", "walrus-cache", "w-warn", "warning"))
    _post(served, "alertmanager", _alert("zebra-queue backlog growing", "zebra-queue", "z-high", "high"))
    _post(served, "alertmanager", _alert("otter-db replica lag", "otter-db", "o-res", "critical", "resolved"))
    served.grandbo.org("acme").incidents.open("walrus-cache stampede again", services=["walrus-cache"],
                                              severity="sev2", incident_id="INC-OPEN-1")  # fmt: skip
    client = signed_in(served, served.keys["read"])
    page = client.get("/ui/triage").text
    assert _queue(page) == {
        "incidents": ["walrus-cache stampede again"],
        # The two walrus-cache alerts are one alert group: one row (titled after its first alert) at the place of its
        # most urgent alert, its alerts folded under it by severity.
        "firing": [
            "walrus-cache down everywhere",
            "walrus-cache down everywhere",
            "walrus-cache hit rate low",
            "zebra-queue backlog growing",
        ],
        "resolved": ["otter-db replica lag"],
    }
    assert 'aria-current="true"' in page.split('id="q-firing"')[0]  # the top of the queue is shown

    filtered = client.get("/ui/triage", params={"severity": "sev1"}).text
    assert _queue(filtered) == {"firing": ["walrus-cache down everywhere"], "resolved": ["otter-db replica lag"]}
    assert '<option value="sev1" selected>' in filtered
    assert re.search(r'href="/ui/triage\?alert=[^"]+&amp;severity=sev1"', filtered)  # the links keep the filters
    by_service = client.get("/ui/triage", params={"service": "walrus-cache", "status": "firing"}).text
    assert _queue(by_service) == {"incidents": ["walrus-cache stampede again"],
                                  "firing": ["walrus-cache down everywhere", "walrus-cache down everywhere",
                                             "walrus-cache hit rate low"]}  # fmt: skip  # their group's row first
    resolved = client.get("/ui/triage", params={"status": "resolved"}).text
    assert _queue(resolved) == {"resolved": ["otter-db replica lag"]}
    assert _queue(client.get("/ui/triage", params={"source": "grafana"}).text) == {}
    assert _queue(client.get("/ui/triage", params={"severity": "nonsense"}).text) == _queue(page)  # ignored


def _ids(block: str, pattern: str) -> list[str]:
    return re.findall(pattern, block)


def test_the_plan_and_the_ranked_runbooks_list_runbooks_in_one_order(served):
    """The plan lists the proven runbook before the untried one recall ranked first; the cards below listed
    them in the order of the matches, the other way round."""
    served.grandbo.org("acme").incidents.open("walrus-cache stampede after a cold start",
                                              services=["walrus-cache"], incident_id="INC-W")  # fmt: skip
    page = signed_in(served, served.keys["read"]).get("/ui/triage?incident=INC-W").text
    plan = page[page.index('<ol class="plan-runbooks">') :].split("</ol>")[0]
    planned = _ids(plan, r"<strong>([A-Z-]+)</strong>")
    ranked = _ids(page[page.index('id="runbooks-h"') :], r'<li id="runbook-([A-Z-]+)"')
    assert planned == ["RB-PROVEN", "RB-FRESH"]
    assert ranked == planned


def test_an_alert_links_to_the_sender_its_panel_and_runbook_only_over_http(served):
    pd = copy.deepcopy(PAGERDUTY)
    memory = served.grandbo.org("acme")
    memory.webhook_secrets.add("pagerduty", "pd-secret")
    body = json.dumps(pd).encode()
    response = served.api.post("/v1/webhooks/pagerduty", content=body, headers={
        "Content-Type": "application/json", "X-PagerDuty-Signature": sign(body, "pd-secret")})  # fmt: skip
    (pd_alert,) = [a["id"] for a in response.json()["alerts"]]
    (grafana_alert,) = _post(served, "grafana", GRAFANA)
    hostile = _alert("walrus-cache evictions", "walrus-cache", "w-links", "critical")
    hostile["alerts"][0]["generatorURL"] = "javascript:alert(document.cookie)"
    hostile["alerts"][0]["annotations"]["runbook_url"] = 'https://wiki.example/rb?a=1&b="><script>x</script>'
    (am_alert,) = _post(served, "alertmanager", hostile)
    client = signed_in(served, served.keys["read"])

    page = client.get("/ui/triage", params={"alert": pd_alert}).text
    assert '<a href="https://acme.pagerduty.com/incidents/PGR0VU2" rel="noopener noreferrer"' in page
    page = client.get("/ui/triage", params={"alert": grafana_alert}).text
    links = dict(re.findall(r'<li><a href="([^"]+)" rel="noopener noreferrer" target="_blank">([^<]+)</a>', page))
    assert links == {
        "https://grafana.example/alerting/grafana/abc/view": "Source (the alert&#39;s graph or rule) (grafana)",
        "https://grafana.example/d/x?viewPanel=1": "Grafana panel",
        "https://grafana.example/d/x": "Grafana dashboard",
    }
    page = client.get("/ui/triage", params={"alert": am_alert}).text
    assert "javascript:" not in page and "<script>x" not in page
    assert 'href="https://wiki.example/rb?a=1&amp;b=&#34;&gt;&lt;script&gt;x&lt;/script&gt;"' in page
    assert ">Runbook</a>" in page
    kept = served.api.get(f"/v1/alerts/{am_alert}").json()["alert"]["links"]
    assert set(kept) == {"runbook"}  # the javascript: URL was never kept
    memory.incidents.open("checkout-api errors after the deploy", services=["checkout-api"],
                          alerts=[grafana_alert], incident_id="INC-LINKED")  # fmt: skip
    page = client.get("/ui/triage", params={"incident": "INC-LINKED"}).text
    assert '<a href="https://grafana.example/d/x?viewPanel=1" rel="noopener noreferrer"' in page  # its alert's


def _record(page: str, runbook: str) -> str:
    return re.search(rf'data-runbook="{runbook}">.*?class="attempts">([^<]+)<', page, re.S)[1]


def test_a_vote_can_be_taken_back_once(served):
    """A vote could not be undone: a mistaken click stayed in the runbook's record."""
    (alert,) = _post(served, "alertmanager", _alert("walrus-cache stampede after a cold start", "walrus-cache",
                                                    "w-vote", "critical"))  # fmt: skip
    ledger = served.grandbo.org("acme").ledger
    client = signed_in(served, served.keys["write"])
    path = f"/ui/triage?alert={alert}"
    before = ledger.effectiveness("RB-PROVEN").attempts
    form = {"csrf": csrf_of(client, path), "kind": "alert", "subject": alert, "runbook": "RB-PROVEN"}
    assert client.post("/ui/triage/vote", data={**form, "worked": "no"}).status_code == 303
    assert ledger.effectiveness("RB-PROVEN").attempts == before + 1
    page = client.get(path).text
    assert 'action="/ui/triage/unvote"' in page and "Undo vote" in page

    undone = client.post("/ui/triage/unvote", data=form)
    assert undone.status_code == 303
    assert ledger.effectiveness("RB-PROVEN").attempts == before
    page = client.get(undone.headers["location"]).text
    assert "Vote taken back" in page and _record(page, "RB-PROVEN").startswith(f"{before} attempts")
    assert 'value="yes"' in page  # it can be voted on again

    again = client.post("/ui/triage/unvote", data=form)
    assert "No vote on RB-PROVEN for this alert to take back" in client.get(again.headers["location"]).text
    assert ledger.effectiveness("RB-PROVEN").attempts == before  # moved back once only
    kept = client.post("/ui/triage/vote", data={**form, "worked": "yes", "queue": "severity=sev1&status=x"})
    assert kept.headers["location"] == f"/ui/triage?alert={alert}&severity=sev1#runbook-RB-PROVEN"  # the filters
    page = client.get(f"/ui/triage?alert={alert}&severity=sev1").text
    assert 'name="queue" value="severity=sev1"' in page
    reader = signed_in(served, served.keys["read"])
    refused = reader.post("/ui/triage/unvote", data={**form, "csrf": csrf_of(reader, path)})
    assert refused.status_code == 403


def test_the_explorer_pages_through_every_entry_newest_first(served):
    """The explorer showed the newest 50 with no way to the rest."""
    memory = served.grandbo.org("acme")
    for n in range(57):
        memory.remember({"id": f"PAGE-{n:02d}", "title": f"paging fact {n}", "kind": "fact", "services": ["otter"]})
    client = signed_in(served, served.keys["read"])
    first = client.get("/ui/memory", params={"service": "otter"}).text
    assert "Active entries, 1–50 shown (newest first)" in first
    rows = re.findall(r'<a href="/ui/memory/(PAGE-\d+)">', first)
    assert rows[0] == "PAGE-56" and len(rows) == 50 and 'rel="prev"' not in first
    older = re.search(r'<a href="([^"]+)" rel="next">', first)[1]
    assert "service=otter" in older and "before=" in older and "start=50" in older
    second = client.get(html.unescape(older)).text
    assert "Active entries, 51–57 shown (newest first)" in second
    assert re.findall(r'<a href="/ui/memory/(PAGE-\d+)">', second) == [f"PAGE-{n:02d}" for n in range(6, -1, -1)]
    newer = re.search(r'<a href="([^"]+)" rel="prev">', second)[1]
    assert 'rel="next"' not in second and "service=otter" in newer and "after=" in newer
    back = client.get(html.unescape(newer)).text
    assert re.findall(r'<a href="/ui/memory/(PAGE-\d+)">', back) == rows and 'rel="prev"' not in back
    for odd in ({"offset": "nonsense"}, {"before": "not-a-cursor", "start": "²"}, {"after": "%00"}):
        assert client.get("/ui/memory", params=odd).status_code == 200


def test_a_memory_body_is_drawn_as_markdown_and_its_html_escaped(served):
    """Markdown showed raw; drawn, it must never let the body's own HTML or a javascript: link through."""
    served.grandbo.org("acme").remember({
        "id": "MD-1", "title": "Markdown body", "kind": "fact",
        "body": "## Steps\n\n1. **Drain** the `walrus` pool\n2. See [the wiki](https://wiki.example/w)\n\n"
                "<script>alert(1)</script> <img src=x onerror=alert(2)> [bad](javascript:alert(3))",
    })  # fmt: skip
    page = signed_in(served, served.keys["read"]).get("/ui/memory/MD-1").text
    assert "<h2>Steps</h2>" in page and "<strong>Drain</strong>" in page and "<code>walrus</code>" in page
    assert '<a href="https://wiki.example/w" rel="noopener noreferrer">the wiki</a>' in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert "<img" not in page and 'href="javascript:' not in page


def test_incidents_per_service_counts_incidents_not_their_memories(served):
    """Every finding and post-mortem counted as an incident: three findings and a post-mortem of one incident
    made four."""
    memory = served.grandbo.org("acme")
    for n in (1, 2, 3):
        memory.remember({"id": f"INC-900-F{n}", "title": f"heron-api finding {n}", "kind": "finding",
                         "services": ["heron-api"]})  # fmt: skip
    memory.remember({"id": "PM-INC-900", "title": "heron-api post-mortem", "kind": "post-mortem",
                     "services": ["heron-api"]})  # fmt: skip
    memory.remember({"id": "INC-901-F1", "title": "heron-api other finding", "kind": "finding",
                     "services": ["heron-api"], "meta": {"incident_id": "INC-901"}})  # fmt: skip
    page = signed_in(served, served.keys["read"]).get("/ui/analytics").text
    chart = page[page.index('id="chart-incidents"') :]
    assert "heron-api: 2" in chart
