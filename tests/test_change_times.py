"""A change's time as each source sends it, through `POST /v1/changes/{source}` on a real server and `grandbo change
add`: a time the sender left unset (Go's zero time, the Unix epoch) is absent, never a date in year 1 or 1970, and
a time before 2000 is refused as one far ahead is (probe 20b C1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandbo.ingest.adapters import parse as parse_alerts
from grandbo.values import unset_time
from tests.serving import serving
from tests.test_change_sources import SECRET, body, github, org  # noqa: F401  (org: the fixture)

DATA = Path(__file__).parent / "data" / "changes"
GO_ZERO = "0001-01-01T00:00:00Z"
# Go's zero time as senders write it: RFC 3339, with nanoseconds, in a zone east and west of UTC (Go's zero time
# in America/New_York is 0000-12-31T19:03:58-04:56), time.Time.String(); and a zero Unix timestamp formatted.
UNSET = [GO_ZERO, "0001-01-01T00:00:00.000000000Z", "0001-01-01T01:00:00+01:00", "0000-12-31T19:03:58-04:56",
         "0001-01-01 00:00:00 +0000 UTC", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"]  # fmt: skip


def _post(client, source: str, sent: bytes):  # type: ignore[no-untyped-def]
    if source == "github":
        return github(client, "", "deployment", raw=sent)
    return client.post(f"/v1/changes/{source}", content=sent, headers={"Content-Type": "application/json"})


def _argocd(**times: str) -> bytes:
    sent = {"app": "shop", "revision": "def456", "phase": "Running", **times}
    return json.dumps(sent).encode()


def test_an_argocd_sync_whose_finished_at_is_unset_is_dated_at_its_start(grandbo, org):  # noqa: F811
    # Failed before: 202, stored at 0001-01-01T00:00:00Z (`finished_at or started_at`), outside every triage window.
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        for n, unset in enumerate(UNSET):
            sent = _argocd(revision=f"rev{n}", started_at="2026-12-06T09:50:00Z", finished_at=unset)
            assert _post(client, "argocd", sent).status_code == 202, unset
        window = client.get("/v1/changes", params={"since": "2026-12-06T09:00:00Z", "limit": 100}).json()["items"]
        listed = client.get("/v1/changes", params={"limit": 100}).json()["items"]
    assert len(window) == len(listed) == len(UNSET)  # each in the window before an alert at 10:00
    assert {change["at"] for change in listed} == {"2026-12-06T09:50:00Z"}
    assert {change["id"] for change in listed} == {f"shop@rev{n}@2026-12-06T09:50:00Z" for n in range(len(UNSET))}


def test_an_argocd_sync_whose_only_time_is_unset_is_refused_naming_the_field(grandbo, org):  # noqa: F811
    _, key = org
    with serving(grandbo) as served, served.client(key) as client:
        for times, field in (({"finished_at": GO_ZERO}, "finished_at"),
                             ({"finished_at": GO_ZERO, "started_at": GO_ZERO}, "finished_at"),
                             ({"started_at": "1970-01-01T00:00:00Z", "finished_at": "<no value>"}, "started_at")):  # fmt: skip
            refused = _post(client, "argocd", _argocd(**times))
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert f"`{field}` is " in error["message"], error
            assert "an unset field in the sender's template" in error["message"]
            assert "send the deploy's time or leave the field out" in error["message"]
            assert error["detail"]["fields"] == [field]
        assert "Go's zero time" in _post(client, "argocd", _argocd(finished_at=GO_ZERO)).json()["error"]["message"]
        assert client.get("/v1/changes").json()["items"] == []


def test_a_late_running_argocd_delivery_never_undoes_how_its_sync_ended(grandbo, org):  # noqa: F811
    # Failed before: the Running delivery was `updated` (202): the change read "...: Running" and its `at` went back
    # to `started_at`, moving it in triage windows.
    _, key = org
    start = {"started_at": "2026-12-06T00:00:00Z"}
    with serving(grandbo) as served, served.client(key) as client:
        for phase, times, outcome in [("Succeeded", {"finished_at": "2026-12-06T00:05:00Z"}, "new"),
                                      ("Running", {}, "unchanged"), ("Terminating", {"finished_at": GO_ZERO}, "unchanged"),
                                      ("", {}, "unchanged"),  # no phase: the sync status, OutOfSync
                                      ("Failed", {"finished_at": "2026-12-06T00:06:00Z"}, "updated"),
                                      ("running", {}, "unchanged")]:  # fmt: skip
            sent = json.loads(_argocd(**start, **times))
            sent.update(phase=phase, sync_status="OutOfSync")
            answer = _post(client, "argocd", json.dumps(sent).encode()).json()
            assert answer[outcome] == 1, (phase, answer)
        kept = client.get("/v1/changes/argocd:shop@def456@2026-12-06T00:00:00Z").json()
    assert kept["summary"] == "Argo CD sync of shop to def456: Failed"  # a later final phase is a correction
    assert kept["at"] == "2026-12-06T00:06:00Z"


UNSET_BODIES = {  # each source's one time, unset; with the field each refusal must name
    "generic": ("at", lambda t: json.dumps([{"id": "ok", "service": "cart", "at": "2026-11-30T10:00:00Z"},
                                            {"id": "zero", "service": "cart", "at": t}]).encode()),
    "pagerduty": ("payload.timestamp",
                  lambda t: body("pagerduty.json").replace(b"2026-11-30T13:40:05.120+0000", t.encode())),
    "github": ("deployment.created_at",
               lambda t: body("github_deployment.json").replace(b"2026-11-30T14:02:11Z", t.encode())),
}  # fmt: skip


@pytest.mark.parametrize("unset", [GO_ZERO, "0001-01-01T00:00:00+00:00", "1970-01-01T00:00:00Z"])
def test_a_change_whose_time_is_unset_is_refused_by_every_source_naming_its_field(grandbo, org, unset):  # noqa: F811
    # Failed before: generic and pagerduty stored the change at 0001-01-01 (202); github too.
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served, served.client(key) as client:
        for source, (field, make) in UNSET_BODIES.items():
            sent = make(unset)
            assert unset.encode() in sent
            refused = _post(client, source, sent)
            assert refused.status_code == 422, (source, refused.text)
            error = refused.json()["error"]
            why = "the Unix epoch" if unset.startswith("1970") else "Go's zero time"
            assert f"`{field}` is {why} ({unset}), an unset field in the sender's template" in error["message"]
            assert ("or leave the field out" in error["message"]) is (source == "pagerduty")  # optional there only
            assert error["detail"]["fields"] == [field]
        assert client.get("/v1/changes").json()["items"] == []  # the whole delivery refused, nothing half-stored


OLD_BODIES = {
    "generic": lambda t: json.dumps({"id": "old", "service": "cart", "at": t}).encode(),
    "argocd": lambda t: body("argocd.json").replace(b"2026-11-30T13:59:47Z", t.encode()),
    "pagerduty": lambda t: body("pagerduty.json").replace(b"2026-11-30T13:40:05.120+0000", t.encode()),
    "github": lambda t: body("github_deployment.json").replace(b"2026-11-30T14:02:11Z", t.encode()),
}  # fmt: skip


@pytest.mark.parametrize("old", ["1999-12-31T23:59:59Z", "1601-01-01T00:00:00Z", "1899-12-30T00:00:00"])
def test_a_change_dated_before_2000_is_refused_by_every_source(grandbo, org, old):  # noqa: F811
    # Failed before: any past date was stored (Windows' zero time 1601-01-01, a spreadsheet's 1899-12-30 ...).
    memory, key = org
    memory.webhook_secrets.add("github", SECRET)
    with serving(grandbo) as served, served.client(key) as client:
        for source, make in OLD_BODIES.items():
            refused = _post(client, source, make(old))
            assert refused.status_code == 422, (source, refused.text)
            error = refused.json()["error"]
            assert f"is dated {old[:10]} " in error["message"] and "before 2000" in error["message"]
            assert "when the change took effect" in error["message"]
            assert error["detail"]["fields"] == ["at"] and error["detail"]["earliest"] == "2000-01-01T00:00:00+00:00"
        assert client.get("/v1/changes").json()["items"] == []
        first = {"id": "y2k", "service": "cart", "at": "2000-01-01T00:00:00Z"}  # the bound itself is a time
        assert client.post("/v1/changes/generic", json=first).status_code == 202


def test_change_add_refuses_an_unset_or_implausibly_old_time(cli):
    cli("orgs", "create", "acme")
    for at in (GO_ZERO, "1970-01-01T00:00:00Z", "1999-06-01"):
        refused = cli("change", "add", "--service", "cart", "--summary", "s", "--at", at, "--org", "acme", code=2)
        assert "before 2000" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert "No changes yet" in cli("change", "list", "--org", "acme").stdout
    assert cli("change", "list", "--since", "1990-01-01", "--org", "acme").stdout.startswith("No change matches")


def test_the_alert_webhooks_and_the_change_webhooks_read_an_unset_time_alike():
    assert [unset_time(text) for text in UNSET] == ["Go's zero time"] * 5 + ["the Unix epoch"] * 2
    for real in ("2026-11-30T10:00:00Z", "1970-01-01T00:00:01Z", "", "not a time", None, 0):
        assert unset_time(real) is None
    alert = {"status": "firing", "labels": {"alertname": "HighLatency", "service": "cart"}, "annotations": {},
             "fingerprint": "f1", "endsAt": GO_ZERO}  # fmt: skip
    for starts, expected in (("1970-01-01T00:00:00Z", None), (GO_ZERO, None), ("2026-11-30T10:00:00Z", 2026)):
        (parsed,) = parse_alerts("alertmanager", json.dumps({"alerts": [{**alert, "startsAt": starts}]}).encode())
        assert (parsed.started_at.year if parsed.started_at else None) == expected
