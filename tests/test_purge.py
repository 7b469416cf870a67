"""Purge (issue 12, part 6): an entry's text and vector erased for good, the purge itself audited."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.model import EventType, Status

SECRET = "quokkaleak"  # a word no other entry holds
TOPIC = f"{SECRET} replication lag on the orders database after failover"


def seed(memory):
    memory.remember_many(
        [
            {"id": "P1", "title": TOPIC, "body": f"the {SECRET} credential was pasted here by mistake", "tags": ["T1"]},
            {"id": "P2", "title": "replication lag on the orders database", "body": "raise wal_keep_size"},
        ]
    )
    memory.correct("P1", {"body": f"{SECRET} again, corrected"}, reason="typo")  # a second version to purge too


def hits(memory, arm):
    return [hit.entry.id for hit in memory.recall(TOPIC, 10, arm=arm).hits]


def test_purge_erases_text_and_vector_from_every_read(memory, tmp_path, backend, settings):
    seed(memory)
    successor = next(e.id for e in memory.entries() if e.supersedes == "P1")
    assert successor in hits(memory, "lexical") and successor in hits(memory, "vector")
    assert memory.vectors([successor])

    for entry_id in (successor, "P1"):
        memory.purge(entry_id, reason="credential pasted into a memory", actor="alice")

    for entry_id in (successor, "P1"):
        entry = memory.get(entry_id)
        assert SECRET not in entry.model_dump_json() and entry.title == "[purged]" and entry.body == ""
        assert entry.status is not Status.ACTIVE
        history = memory.history(entry_id)
        assert all(SECRET not in str(event.payload) for event in history)
        assert history[-1].type is EventType.PURGED and history[-1].actor == "alice"
        assert history[-1].payload == {"reason": "credential pasted into a memory"}
    assert memory.vectors([successor, "P1"]) == {}
    for arm in ("lexical", "vector", "hybrid", "reranked"):
        assert not {successor, "P1"} & set(hits(memory, arm)), arm
    assert "P2" in hits(memory, "lexical")  # the other entry is untouched
    memory.export_log(tmp_path / "log.jsonl")
    memory.export_file(tmp_path / "entries.jsonl")
    for name in ("log.jsonl", "entries.jsonl"):
        assert SECRET not in (tmp_path / name).read_text()
    assert memory.rebuild().identical  # the projection is what the redacted log yields
    assert memory.stats().pending == 0
    if backend == "sqlite":  # not in the file either: freed pages zeroed, the write-ahead log checkpointed
        files = list(settings.home.glob("grandbo.db*"))
        assert files
        for path in files:
            assert SECRET.encode() not in path.read_bytes(), path


# the embedded store's file; Postgres's dead row versions are vacuumed after an erasure
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_text_written_over_before_its_purge_leaves_no_copy_in_the_file(memory, settings, backend):
    """A purge set `secure_delete` off again once done, so every later write left what it freed in the file: an
    entry retired after one purge kept its old row's text in a page's free space, and its own purge later left the
    secret there. Every write zeroes what it frees."""
    secret = "zq-secret-wolfram-7731"
    first = memory.remember({"title": "first thing to purge", "body": "nothing much"})
    second = memory.remember({"title": "second memory about redis", "body": f"the password was {secret} here " * 3})
    memory.purge(first.id, reason="test", actor="alice")
    memory.retire(second.id, actor="alice")
    memory.remember_many([{"title": f"filler {n}", "body": "lag " * 50} for n in range(50)])
    memory.purge(second.id, reason="test", actor="alice")
    files = list(settings.home.glob("grandbo.db*"))
    assert files and not [path.name for path in files if secret.encode() in path.read_bytes()]


def test_purging_a_purged_entry_again_writes_nothing(memory):
    """Each purge of an already purged entry appended a `purged` event (its reason up to 2,000 characters, never
    refused by the storage limit) and gave the org a new epoch, so its next recall rebuilt its index: a loop of them
    grew the org past its limit and kept the shared process busy. A purge of a purged entry is a no-op."""
    seed(memory)
    memory.purge("P1", reason="credential pasted into a memory", actor="alice")
    before = (memory.stats().stored_bytes, len(memory.history("P1")), memory.generation())
    again = memory.purge("P1", reason="again " * 300, actor="mallory")
    assert again.title == "[purged]" and again.body == ""
    assert (memory.stats().stored_bytes, len(memory.history("P1")), memory.generation()) == before


def test_purge_needs_a_reason_and_an_entry(memory):
    seed(memory)
    with pytest.raises(InvalidInputError, match="reason"):
        memory.purge("P2", reason=" ", actor="alice")
    with pytest.raises(NotFoundError):
        memory.purge("nope", reason="x", actor="alice")
    assert memory.get("P2").title == "replication lag on the orders database"


def test_a_purged_log_replays_without_the_text(memory, grandbo, tmp_path):
    seed(memory)
    memory.purge("P1", reason="pasted secret", actor="alice")
    memory.export_log(tmp_path / "log.jsonl")
    copy = grandbo.org("copy", create=True)
    copy.import_log(tmp_path / "log.jsonl")
    assert copy.get("P1").title == "[purged]" and copy.history("P1")[-1].type is EventType.PURGED


def test_cli_purge(cli):
    cli("remember", "--title", f"{TOPIC}", "--id", "C1")
    out = cli("purge", "C1", "--reason", "pasted a token", "--actor", "bob")
    assert "purged C1" in out.stdout
    shown = cli("show", "C1", "--history")
    assert SECRET not in shown.stdout and '"bob"' in shown.stdout
    cli("purge", "C1", code=2)  # --reason is required


def test_a_purged_finding_is_not_written_again_by_incident_sync(memory):
    from tests.test_incidents import investigate

    investigate(memory.incidents)
    memory.incidents.close("INC-100", runbook_used="RB-LRU", succeeded=True, time_to_mitigate_s=600)
    (finding,) = [e for e in memory.entries() if "evicted" in e.title.lower()]
    memory.purge(finding.id, reason="the finding quoted a customer's email", actor="alice")
    report = memory.incidents.sync("INC-100")
    assert report.purged == ["f1"] and report.written == []
    assert not [e for e in memory.entries(include_inactive=True) if "evicted" in e.title.lower()]
    assert memory.incidents.sync("INC-100").purged == ["f1"]  # and stays so


PASSPHRASE = "tangerine-falcon-7731"  # a pasted passphrase no redaction pattern masks: only a purge erases it


def _everything(memory, tmp_path):
    """Every way to read the org back: documents and their history, entries, their history, exports."""
    memory.export_log(tmp_path / "log.jsonl")
    memory.export_file(tmp_path / "entries.jsonl")
    log = memory._documents.log()
    return "\n".join(
        [
            *(json.dumps(d.data) for d in log.documents),
            *(json.dumps(e.data) for e in log.events),
            *(e.model_dump_json() for e in memory.entries(include_inactive=True)),
            *(str(ev.payload) for e in memory.entries(include_inactive=True) for ev in memory.history(e.id)),
            memory.incidents.get("INC-1").model_dump_json(),
            json.dumps(memory.profile.get().model_dump(mode="json")),
            (tmp_path / "log.jsonl").read_text(),
            (tmp_path / "entries.jsonl").read_text(),
        ]
    )


def test_purge_text_erases_a_secret_from_documents_entries_and_the_file(memory, settings, backend, raw, tmp_path):
    memory.incidents.open(f"checkout outage, vault passphrase {PASSPHRASE} in the notes", incident_id="INC-1")
    memory.incidents.add_finding("INC-1", f"the deploy used {PASSPHRASE} to unseal", status="hypothesis")
    memory.profile.update({"facts": {"vault": f"unseal with {PASSPHRASE}"}})
    leaked = memory.remember({"title": "vault unseal runbook", "body": f"passphrase {PASSPHRASE}"})
    kept = memory.remember({"title": "vault unseal runbook, without secrets", "body": "ask the vault owner"})
    assert PASSPHRASE in _everything(memory, tmp_path)  # stored as typed: the test can fail

    report = memory.erasure.purge_text(PASSPHRASE, reason="passphrase pasted into notes", actor="alice")

    assert report.entries == [leaked.id] and report.documents >= 2 and report.document_events >= 3
    assert PASSPHRASE not in _everything(memory, tmp_path)
    assert "[purged]" in memory.incidents.get("INC-1").title
    assert [h.entry.id for h in memory.recall("vault unseal runbook").hits] == [kept.id]
    (audit,) = memory._documents.find("erasures")
    assert audit.data["actor"] == "alice" and audit.data["entries"] == [leaked.id]
    assert PASSPHRASE not in json.dumps(audit.data)
    if backend == "sqlite":  # not in the file's free pages nor its write-ahead log either
        for path in settings.home.glob("grandbo.db*"):
            assert PASSPHRASE.encode() not in path.read_bytes(), path
    else:  # nor in any row the runtime role can read; the dead row versions are vacuumed (MAINTAIN granted)
        assert raw("SELECT has_table_privilege('document_events', 'MAINTAIN')") == [(True,)]
        for table in ("documents", "document_events", "memory_events", "memory_entries"):
            rows = raw(f"SELECT count(*) FROM {table} WHERE org_id = 'acme' AND row_to_json({table})::text LIKE %s",
                       (f"%{PASSPHRASE}%",), org="acme")  # fmt: skip
            assert rows == [(0,)], table


def test_purge_text_of_digits_leaves_every_document_readable_and_every_key_working(grandbo, memory):
    """Digits of a phone or card number, or part of a date, occur in timestamps and key hashes: erasing them
    there made incidents and keys unreadable (tracebacks) and silently killed the keys."""
    record, key = memory.keys.create("read", name="on-call")
    incident = memory.incidents.open("checkout outage, customer called from 555-0142", incident_id="INC-1")
    key_hash = memory._documents.get("api_key", record.id).data["key_hash"]
    stamp = incident.started_at.isoformat()
    for text in ("555-0142", key_hash[20:28], stamp[:7], stamp[-12:-6]):  # each occurs in a hash or a time
        memory.erasure.purge_text(text, reason="a number pasted into notes", actor="alice")
    assert memory.incidents.get("INC-1").title == "checkout outage, customer called from [purged]"
    assert memory.incidents.get("INC-1").started_at == incident.started_at
    assert [k.id for k in memory.keys.all()] == [record.id]
    assert grandbo.authenticate(key)[1].id == record.id


def test_purge_text_needs_a_reason_and_a_real_text(memory):
    with pytest.raises(InvalidInputError, match="at least 4"):
        memory.erasure.purge_text("ab", reason="x", actor="alice")
    with pytest.raises(InvalidInputError, match="reason"):
        memory.erasure.purge_text(PASSPHRASE, reason=" ", actor="alice")


def test_cli_purge_text_reads_the_secret_from_stdin(cli):
    from typer.testing import CliRunner

    from grandbo.cli import app

    cli("remember", "--title", f"passphrase {PASSPHRASE} in a memory")
    result = CliRunner().invoke(app, ["purge-text", "-", "--reason", "pasted"], input=PASSPHRASE + "\n")
    assert result.exit_code == 0, result.output
    assert "1 entry purged" in result.stdout
    assert PASSPHRASE not in cli("recall", "passphrase in a memory").stdout


def test_purge_text_matches_any_case_unless_exact(memory):
    memory.incidents.open("refund failed for JANE ROE after the deploy", incident_id="INC-1")
    memory.profile.update({"facts": {"vip": "Jane Roe is our largest customer"}})
    shouted = memory.remember({"title": "refunds for jane roe stuck in the queue", "body": "retry the job"})
    versions = memory._documents.version()
    exact = memory.erasure.purge_text("Jane roe", reason="customer name leaked", actor="alice", exact=True)
    assert not exact.found and exact.erasure_id == "" and memory._documents.version() == versions
    report = memory.erasure.purge_text("Jane roe", reason="customer name leaked", actor="alice")
    assert report.found and report.entries == [shouted.id] and report.documents >= 2
    assert memory.incidents.get("INC-1").title == "refund failed for [purged] after the deploy"
    assert "roe" not in json.dumps(memory.profile.get().model_dump(mode="json")).lower()
    (audit,) = memory._documents.find("erasures")
    assert audit.data["exact"] is False and audit.data["entries"] == [shouted.id]


def test_purge_text_found_nowhere_erases_and_records_nothing(memory):
    memory.remember({"title": "vault unseal runbook, without secrets", "body": "ask the vault owner"})
    before = (memory._documents.version(), [e.id for e in memory.entries()])
    report = memory.erasure.purge_text("no such customer", reason="asked to erase", actor="alice")
    assert not report.found and report.to_dict()["found"] is False and report.erasure_id == ""
    assert memory._documents.find("erasures") == []
    assert (memory._documents.version(), [e.id for e in memory.entries()]) == before


def test_cli_purge_text_says_found_nowhere_and_exits_1(cli):
    cli("remember", "--title", "refund failed for JANE ROE after the deploy")
    nowhere = cli("purge-text", "Jane Roe", "--reason", "pasted", "--exact", code=1)
    assert "found nowhere" in nowhere.stderr and "nothing erased, no erasure recorded" in nowhere.stderr
    assert "drop --exact" in nowhere.stderr
    assert "1 entry purged" in cli("purge-text", "Jane Roe", "--reason", "pasted").stdout
    again = cli("purge-text", "Jane Roe", "--reason", "pasted", code=1)
    assert "found nowhere" in again.stderr and "(in any case)" in again.stderr


def test_purge_text_of_a_field_name_is_refused_before_anything_is_erased(memory):
    memory.incidents.open("Status page down after the deploy", incident_id="INC-1")
    memory.profile.update({"facts": {"Status page vendor": "statuspal"}})
    written = memory.remember({"title": "status page runbook", "body": "fail over to the static page"})
    with pytest.raises(InvalidInputError, match=r"field name.*status.*nothing was erased"):
        memory.erasure.purge_text("Status", reason="vendor name", actor="alice")
    assert memory.incidents.get("INC-1").title == "Status page down after the deploy"  # still readable, untouched
    assert memory.get(written.id).title == "status page runbook" and memory._documents.find("erasures") == []
    report = memory.erasure.purge_text("Status page", reason="vendor name", actor="alice")  # the words around it
    assert report.entries == [written.id] and memory.incidents.get("INC-1").title == "[purged] down after the deploy"
    assert list(memory.profile.get().facts) == ["[purged] vendor"]  # a name a person typed is erased


def test_an_admin_erases_a_text_over_rest(grandbo, memory):
    from tests.serving import serving

    memory.remember({"id": "LEAK", "title": "customer Jane Roe could not log in", "body": "ticket for Jane Roe"})
    memory.incidents.open("login failures for Jane Roe's team", incident_id="INC-9")
    memory.remember({"id": "KEPT", "title": "cache eviction under memory pressure"})
    _, admin = memory.keys.create("admin", name="dpo")
    _, writer = memory.keys.create("write", name="agent")
    with serving(grandbo) as served, served.client(admin) as client, served.client(writer) as agent:
        refused = agent.post("/v1/erasures", json={"text": "jane roe", "reason": "erasure request"})
        assert refused.status_code == 403  # an admin's business
        done = client.post("/v1/erasures", json={"text": "jane roe", "reason": "GDPR request 42"})
        assert done.status_code == 200, done.text
        report = done.json()
        assert report["found"] and report["entries"] == ["LEAK"] and report["documents"] >= 1
        assert report["erasure_id"].startswith("erasure-")
        assert "Jane Roe" not in client.get("/v1/incidents/INC-9").text
        hits = client.post("/v1/recall", json={"topic": "Jane Roe could not log in"}).json()["hits"]
        assert "Jane Roe" not in json.dumps(hits)
        nowhere = client.post("/v1/erasures", json={"text": "John Doe", "reason": "erasure request"}).json()
        assert nowhere == {"found": False, "exact": False, "entries": [], "documents": 0, "document_events": 0,
                           "erasure_id": ""}  # fmt: skip
        short = client.post("/v1/erasures", json={"text": "Jan", "reason": "too short"})
        assert short.status_code == 422 and "at least 4 characters" in short.json()["error"]["message"]
        field = client.post("/v1/erasures", json={"text": "status", "reason": "a field name"})
        assert field.status_code == 422 and "field name" in field.json()["error"]["message"]
    assert memory.get("KEPT").title == "cache eviction under memory pressure"


def test_purge_text_that_would_lengthen_a_field_past_its_limit_is_refused_before_anything_is_erased(memory):
    # "[purged]" is longer than a four-letter name: a title near its 500 characters would grow past them, and
    # the incident (every listing of incidents with it) could never be read again.
    title = ("acme checkout retries " * 30)[:497]
    memory.incidents.open(title, incident_id="INC-7")
    memory.incidents.open("acme invoices late", incident_id="INC-8")
    written = memory.remember({"title": "acme refunds runbook", "body": "retry the refund job"})
    versions = memory._documents.version()
    with pytest.raises(
        InvalidInputError, match=r"incident INC-7 \(title\) unreadable: longer than its limit.*nothing was erased"
    ):
        memory.erasure.purge_text("acme", reason="customer name", actor="alice")
    assert memory._documents.version() == versions and memory.get(written.id).title == "acme refunds runbook"
    assert {incident.id for incident in memory.incidents.find()} == {"INC-7", "INC-8"}  # every one still readable
    # The remedy the message names: the longer text first (it shortens the title), then the name itself.
    assert memory.erasure.purge_text("acme checkout", reason="customer name", actor="alice").found
    report = memory.erasure.purge_text("acme", reason="customer name", actor="alice")
    assert report.found and report.entries == [written.id]
    assert memory.incidents.get("INC-8").title == "[purged] invoices late"
    assert all("acme" not in incident.title for incident in memory.incidents.find())


def test_purge_text_keeps_a_received_alert_cut_to_its_limit_readable(memory):
    from grandbo.ingest.alert import Alert

    summary = ("acme checkout 5xx above threshold " * 80)[:2000]  # what an adapter cuts a long message to
    memory.alerts.receive([Alert(source="opsgenie", event_id="og-1", fingerprint="og-1", summary=summary)])
    with pytest.raises(InvalidInputError, match=r"alert alert-\w+ \(alert\.summary\).*nothing was erased"):
        memory.erasure.purge_text("acme", reason="customer name", actor="alice")
    assert len(memory.alerts.recent()) == 1  # the triage queue still reads
    memory.erasure.purge_text("acme checkout", reason="customer name", actor="alice")
    assert "acme" not in memory.alerts.recent()[0].alert.summary


def test_purge_text_in_an_incidents_id_keeps_the_incident_reachable_by_its_id(memory):
    # The store cannot rename a document (its id is the key every reference uses, as a purged entry keeps its
    # id): erasing the text from the id inside the incident listed it under an id that found nothing.
    memory.incidents.open("refund failed for acme after the deploy", incident_id="INC-acme-1")
    memory.incidents.add_finding("INC-acme-1", "acme refunds hit the pool limit", actor="alice")
    report = memory.erasure.purge_text("acme", reason="customer name", actor="alice")
    assert report.found
    (incident,) = memory.incidents.find()
    assert incident.id == "INC-acme-1" and incident.title == "refund failed for [purged] after the deploy"
    assert incident.findings[0].summary == "[purged] refunds hit the pool limit"
    memory.incidents.add_finding(incident.id, "pool raised", actor="alice")  # still updated under its id
    assert [i.id for i in memory.incidents.find()] == ["INC-acme-1"]
    assert len(memory.incidents.get("INC-acme-1").findings) == 2


def test_purge_text_is_not_refused_for_a_document_that_was_unreadable_before_it(memory):
    # An alert stored over its limit (masking lengthened it before the masked text was cut again) never read: the
    # check that an erasure leaves documents readable must not hold every later erasure back because of it.
    from grandbo.ports import DocumentWrite

    alert = {"source": "opsgenie", "event_id": "og-1", "fingerprint": "og-1", "summary": "acme " * 500}
    stored = {"id": "alert-og-1", "alert": alert, "query": "acme", "deliveries": 1}
    memory._documents.put([DocumentWrite("alert", "alert-og-1", stored, "alert.received", ref="opsgenie")], "test")
    written = memory.remember({"title": "acme refunds runbook", "body": "retry the refund job"})
    report = memory.erasure.purge_text("acme", reason="customer name", actor="alice")
    assert report.found and report.entries == [written.id]
    assert "acme" not in json.dumps(memory._documents.get("alert", "alert-og-1").data)


def test_purge_text_inside_one_of_the_organization_s_redaction_patterns_is_refused(memory):
    """An erasure rewrote the regular expressions of the organization's own redaction patterns like any text:
    erasing "ACME" turned `ACME-\\d{6}` into `[purged]-\\d{6}` (one of the letters p, u, r, g, e, d before
    the digits), so every account number written afterwards was stored unmasked, silently."""
    memory.org_settings.set_redaction(add={"account": r"ACME-\d{6}"})
    memory.profile.update({"facts": {"customer": "ACME Corporation"}})
    with pytest.raises(InvalidInputError, match="redaction pattern 'account'") as refused:
        memory.erasure.purge_text("acme", reason="customer left", actor="alice")
    assert "grandbo settings redaction --remove account" in refused.value.message
    assert memory.org_settings.redaction()["extra"] == {"account": r"ACME-\d{6}"}
    assert memory.profile.get().facts == {"customer": "ACME Corporation"}  # nothing was erased
    stored = memory.remember({"title": "Refund for ACME-123456", "body": "account ACME-123456 was charged twice"})
    assert "ACME-123456" not in stored.body


@pytest.mark.parametrize("word", ["read", "admin", "failed", "rejected"])
def test_purge_text_of_a_word_from_a_fixed_list_is_refused_before_any_record_becomes_unreadable(memory, word):
    """A key's scope, an outcome's kind and a note's status are words from a fixed list: erased to "[purged]"
    the record no longer reads (a key of that scope then authenticates nothing, an admin can lock themselves
    out), so such an erasure is refused first, naming the records, as an overlong one is."""
    from grandbo.model import Kind

    _, key = memory.keys.create("read", name="reader")
    memory.keys.create("admin", name="owner")
    memory.remember({"id": "RB-1", "title": "restart the pool", "body": "one step", "kind": Kind.RUNBOOK.value})
    memory.ledger.record("RB-1", "failed", actor="alice")
    for n in range(3):  # three edits of one kind fold into a learned note
        memory.learning.record_edit(f"Users saw errors {n}.", f"Customers saw errors {n}.",
                                    content_type="status-update", author="alice")  # fmt: skip
    note = memory.learning.pending()[0]
    memory.learning.reject_note(note.id)
    versions = memory._documents.version()
    with pytest.raises(InvalidInputError, match=r"unreadable.*nothing was erased"):
        memory.erasure.purge_text(word, reason="a fixed word", actor="alice")
    assert memory._documents.version() == versions
    assert {k.scope for k in memory.keys.all()} == {"read", "admin"}
    assert memory.keys.verify(key) is not None


def test_purge_erases_the_copies_a_received_alert_keeps_of_the_entry(memory, settings, backend, raw, tmp_path):
    """A received alert keeps what recall and its plan said: the memories' titles and (cut) bodies, the mechanism
    line a plan quotes, the citations' titles. A purge left all of them in the alert, its history, every export
    and the file; it now rewrites them in its own transaction, as the purged entry reads, and leaves the rest."""
    from grandbo.ingest import flow

    name = "Priya Raman-Okafor"  # personal data typed into a finding by mistake
    memory.remember_many([
        {"id": "F-EVICT", "kind": "finding", "services": ["redis-sessions"], "title": f"Evictions paged {name}",
         "body": f"Mechanism: maxmemory reached, keys evicted; {name} raised maxmemory by hand.\\nMore notes."},
        {"id": "F-OTHER", "kind": "finding", "services": ["redis-sessions"], "title": "Redis evictions again",
         "body": "Mechanism: an eviction storm after a deploy doubled the key count."},
    ], strict=True)  # fmt: skip
    delivery = {"version": "4", "status": "firing", "alerts": [{"status": "firing", "fingerprint": "ev-1",
                "labels": {"alertname": "RedisEvictions", "service": "redis-sessions"},
                "annotations": {"summary": "redis-sessions evicting keys, maxmemory reached"},
                "startsAt": "2026-12-01T10:00:00Z"}]}  # fmt: skip
    ((stored, _),) = flow.receive(memory, "alertmanager", json.dumps(delivery).encode(), {})
    kept = memory.alerts.get(stored.id)
    assert kept.plan is not None and {"F-EVICT", "F-OTHER"} <= {c.id for c in kept.plan.citations}
    assert name in kept.model_dump_json()  # the test can fail
    stamp = memory._documents.stamp(["erasures"])

    memory.purge("F-EVICT", reason="a person's name in a finding", actor="alice")

    # The rewrite writes no event of the alert (its collection's version stays): its audit record tells every
    # reader that keeps documents (the org keeps its epoch, so that its index is not built again).
    (record,) = memory._documents.find("erasures")
    assert record.data["entries"] == ["F-EVICT"] and record.data["documents"] >= 1 and record.data["actor"] == "alice"
    assert memory._documents.stamp(["erasures"]) != stamp and memory._documents.stamp([])[0] == stamp[0]
    after = memory.alerts.get(stored.id)
    assert name not in after.model_dump_json()
    history = memory._documents.history("alert", stored.id)
    assert len(history) >= 2 and name not in json.dumps(history)
    memory.export_log(tmp_path / "log.jsonl")
    assert name not in (tmp_path / "log.jsonl").read_text()
    (hit,) = [h for h in after.recall.hits if h.entry.id == "F-EVICT"]
    assert (hit.entry.title, hit.entry.body) == ("[purged]", "")
    assert {c.id: c.title for c in after.plan.citations}["F-OTHER"] == "Redis evictions again"  # the rest stays
    assert any("eviction storm after a deploy" in m.text for m in after.plan.mechanisms)
    assert after.alert == kept.alert and after.plan.query == kept.plan.query
    if backend == "sqlite":
        for path in settings.home.glob("grandbo.db*"):
            assert name.encode() not in path.read_bytes(), path
    else:
        for table in ("documents", "document_events"):
            rows = raw(f"SELECT count(*) FROM {table} WHERE org_id = 'acme' AND data::text LIKE %s", (f"%{name}%",),
                       org="acme")  # fmt: skip
            assert rows == [(0,)], table


def test_a_purge_erases_a_narrative_written_from_the_entry_and_nothing_shaped_otherwise():
    """The LLM's narrative of a plan: a step citing the purged entry loses its text and the summary (written from
    the steps) goes; a step citing only others stays. A record of another shape that shares the id (an incident
    named like the entry) is not a copy of it."""
    from grandbo.erased import entry_erased
    from grandbo.triage.plan import Narrative, NarrativeStep

    narrative = Narrative(summary="Jane Roe's fix again", steps=[NarrativeStep(text="Ask Jane Roe", cites=["E1"]),
                                                                 NarrativeStep(text="Scale out", cites=["E2"])])  # fmt: skip
    erased = entry_erased({"plan": {"narrative": narrative.model_dump(mode="json")}}, "E1")["plan"]["narrative"]
    assert erased["summary"] == "[purged]" and [s["text"] for s in erased["steps"]] == ["[purged]", "Scale out"]
    incident = {"id": "E1", "title": "Checkout down", "status": "open", "findings": []}
    assert entry_erased(incident, "E1") == incident
    untouched = {"plan": {"narrative": Narrative(summary="s", steps=[NarrativeStep(text="t", cites=["E2"])])
                                   .model_dump(mode="json")}}  # fmt: skip
    assert entry_erased(untouched, "E1") == untouched


def test_purging_again_erases_copies_written_since_and_nothing_else(memory):
    """A triage in flight may keep a recall quoting the entry after its purge committed: purging again erases
    those copies (and writes no event of the entry, only the erasure's audit record)."""
    from grandbo.ingest.alert import Alert

    seed(memory)
    successor = next(e.id for e in memory.entries() if e.supersedes == "P1")
    result = memory.recall(TOPIC, 10)  # what a triage in flight holds
    assert successor in [hit.entry.id for hit in result.hits]
    memory.purge(successor, reason="credential pasted into a memory", actor="alice")
    before = (len(memory.history(successor)), memory.generation())
    ((stored, _),) = memory.alerts.receive([Alert(source="alertmanager", event_id="late", fingerprint="fp-late",
                                                  service="orders-db", summary="orders replica lag")])  # fmt: skip
    memory.alerts.record_recall(stored, result, None)  # kept after the purge

    def kept_copy():  # type: ignore[no-untyped-def]
        recall = memory.alerts.get(stored.id).recall
        assert recall is not None
        (hit,) = [hit for hit in recall.hits if hit.entry.id == successor]
        return hit.entry.title, hit.entry.body

    assert kept_copy() != ("[purged]", "")
    erased = memory._documents.version(["erasures"])
    memory.purge(successor, reason="again", actor="alice")
    assert kept_copy() == ("[purged]", "")
    assert (len(memory.history(successor)), memory.generation()) == before
    assert memory._documents.version(["erasures"]) > erased  # readers that keep documents read them again
