"""What an organization is shown never counts other organizations' work: no store-wide number, no process-wide one.

Migration 32 numbered the embedded store's memory events per org (`test_seq_per_org`). A walk of every face for the
other numbers that are store- or process-wide (document events, epochs and incarnations, the vector counter) found
three that reached an org: an incident's history (`grandbo incident show --history`) gave each event the store's
document-event number; the console's charts were named by a count of the charts the process drew for every org;
the console's session cookie, which its holder can read, carried the org's incarnation, a store-wide number.
"""

from __future__ import annotations

import base64
import json
import re
from contextlib import closing

from typer.testing import CliRunner

from grandbo.cli import app
from grandbo.tiers.learning_model import FOLD_EVERY, FOLDS, FoldCursor
from tests.serving import serving
from tests.test_console_http import signed_in


def _cli(settings, monkeypatch, *args: str) -> str:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))
    if settings.database_url:
        monkeypatch.setenv("GRANDBO_DATABASE_URL", settings.database_url)
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return str(result.stdout)


def _beta_writes(beta, tag: str) -> None:  # type: ignore[no-untyped-def]
    for n in range(3):
        beta.incidents.open(f"beta queue backlog {tag}{n}", incident_id=f"INC-B{tag}{n}", services=["queue"])
    beta.runbooks.add(f"RB-B{tag}", "Drain the queue", ["drain it"], services=["queue"])
    beta.remember({"id": f"B-{tag}", "title": f"beta disk pressure {tag}", "body": "Volumes filled."})


def test_an_incidents_history_counts_its_own_events_whatever_other_orgs_write(grandbo, settings, monkeypatch):
    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    _beta_writes(beta, "1")
    alpha.incidents.open("alpha payments down", incident_id="INC-A", services=["payments"])

    def shown() -> list[int]:
        out = json.loads(_cli(settings, monkeypatch, "incident", "show", "INC-A", "--history", "--org", "alpha"))
        return [event["seq"] for event in out["history"]]

    before = shown()
    _beta_writes(beta, "2")
    alpha.incidents.add_finding("INC-A", "the gateway certificate expired")
    # The store's numbers were 4 and 8 here (beta's writes before and between): they showed beta's volume.
    assert (before, shown()) == ([1], [1, 2])


def test_the_consoles_charts_are_named_alike_whatever_other_orgs_view(grandbo):
    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    alpha.remember({"id": "A-1", "title": "Alpha replica lag", "body": "The orders replica lagged 40 s."})
    _, alpha_key = alpha.keys.create("read", name="console")
    _, beta_key = beta.keys.create("read", name="console")

    def names(client) -> list[str]:  # type: ignore[no-untyped-def]
        return re.findall(r'<title id="([^"]+)"', client.get("/ui/analytics").text)

    with (
        serving(grandbo) as served,
        closing(signed_in(served, alpha_key)) as seen,
        closing(signed_in(served, beta_key)) as other,
    ):
        before = names(seen)
        for tag in ("1", "2"):
            _beta_writes(beta, tag)
            other.get("/ui/analytics")
        after = names(seen)
    assert len(before) >= 4 and len(set(before)) == len(before)  # one name a chart, none shared on the page
    assert after == before  # a count of the charts drawn moved by beta's views (chart1-t.., then chart16-t..)


def _cookie(client) -> dict[str, object]:  # type: ignore[no-untyped-def]
    body = client.cookies["gb_session"].split(".")[0]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


def test_a_console_session_cookie_holds_no_store_wide_number(grandbo):
    for n in range(3):  # each org created, and dropped, moves the store's counter of incarnations
        grandbo.org(f"beta{n}", create=True).remember({"id": "B-1", "title": "beta", "body": "Beta's note."})
    grandbo.drop_org("beta0")
    alpha = grandbo.org("alpha", create=True)
    alpha.remember({"id": "A-1", "title": "Alpha replica lag", "body": "The orders replica lagged 40 s."})
    _, key = alpha.keys.create("read", name="console")
    with (
        serving(grandbo) as served,
        closing(signed_in(served, key)) as first,
        closing(signed_in(served, key)) as second,
    ):
        cookies = [_cookie(first), _cookie(second)]
        pages = [client.get("/ui/memory/A-1") for client in (first, second)]
    assert alpha.incarnation is not None and alpha.incarnation > 1
    for cookie in cookies:
        assert sorted(cookie) == ["exp", "key", "nonce", "org", "sealed_inc"]
        assert alpha.incarnation not in cookie.values()  # it was `"inc": <the store's number>`
    assert cookies[0]["sealed_inc"] != cookies[1]["sealed_inc"]  # each session's pad is its own
    assert [page.status_code for page in pages] == [200, 200] and "Alpha replica lag" in pages[0].text


def _folds(path) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    """The fold cursors of an exported log, its documents' and its document events'."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    held = [r.get("document") or r.get("document_event") for r in records]
    return [record["data"] for record in held if record and record["collection"] == FOLDS]


def test_an_exported_fold_cursor_holds_no_store_wide_number(grandbo, settings, monkeypatch, tmp_path):
    alpha, beta = grandbo.org("alpha", create=True), grandbo.org("beta", create=True)
    _beta_writes(beta, "1")
    for n in range(FOLD_EVERY):  # a fold: its cursor kept the store's number of its signal's write, and the epoch
        alpha.learning.record_edit(f"Please utilize step {n}.", f"Please use step {n}.",
                                   content_type="status-update", author="dana")  # fmt: skip
    _cli(settings, monkeypatch, "export", str(tmp_path / "alpha.jsonl"), "--org", "alpha")
    folds = _folds(tmp_path / "alpha.jsonl")
    assert folds and all(sorted(data) == ["folded", "through"] for data in folds), folds
    replayed = grandbo.org("gamma", create=True)
    replayed.import_log(tmp_path / "alpha.jsonl")
    for n in range(FOLD_EVERY, 2 * FOLD_EVERY):  # the replayed cursor is found by its signal: folds go on
        replayed.learning.record_edit(f"Please utilize step {n}.", f"Please use step {n}.",
                                      content_type="status-update", author="dana")  # fmt: skip
    assert FoldCursor.model_validate(replayed.learning.documents.get(FOLDS, "vocabulary").data).folded == 2 * FOLD_EVERY
