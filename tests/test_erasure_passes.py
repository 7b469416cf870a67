"""An erasure finds the documents it rewrites in a read of its own, before its write (`store.sql.erasing`): while
it reads and rewrites an org's documents in memory, every organization's writes go on (on SQLite they all waited
for the whole pass: 2.7 s at 250 MB of documents; on Postgres the org's own writes did), and what was written
meanwhile is erased too."""

from __future__ import annotations

import json
import threading

import pytest

import grandbo.store.postgres.documents as postgres_documents
import grandbo.store.sqlite.erasure as sqlite_erasure
import grandbo.tiers.erasure as tier_erasure

SECRET = "hunter2-quokka-credential"
WAIT_S = 30.0  # how long the pass waits for the writes it lets through; on the code before, they never came


def test_writes_go_on_while_an_erasure_finds_what_it_rewrites_and_what_they_wrote_is_erased(grandbo, raw, monkeypatch):
    memory, other = grandbo.org("acme", create=True), grandbo.org("beta", create=True)
    memory.incidents.open("login failures", incident_id="INC-1")
    memory.incidents.add_finding("INC-1", f"the key {SECRET} was pasted in the channel")
    done: dict[str, bool] = {}

    def meanwhile() -> None:  # the same org's writes (one naming the text again) and another org's
        memory.incidents.add_finding("INC-1", f"and again: {SECRET}")
        memory.incidents.open(f"leak of {SECRET}", incident_id="INC-2")
        other.remember({"title": "beta's memory written meanwhile", "body": "replica lag on beta's database"})
        done["writes"] = True

    module = sqlite_erasure if grandbo.settings.database_url is None else postgres_documents
    erase_text = module.erase_text

    def finding(data, pattern, *, own_id):  # type: ignore[no-untyped-def]
        if not done:
            done["started"] = True
            writer = threading.Thread(target=meanwhile)
            writer.start()
            writer.join(WAIT_S)
        return erase_text(data, pattern, own_id=own_id)

    monkeypatch.setattr(module, "erase_text", finding)
    memory.erasure.purge_text(SECRET, reason="a credential", actor="alice")
    assert done.get("writes"), "the writes waited for the erasure's pass over the documents"

    held = raw("SELECT data FROM documents WHERE org_id = %s", ("acme",), org="acme")
    held += raw("SELECT data FROM document_events WHERE org_id = %s", ("acme",), org="acme")
    texts = [value if isinstance(value, str) else json.dumps(value) for (value,) in held]
    assert not [text for text in texts if SECRET in text]  # the documents written meanwhile too
    assert len(memory.incidents.get("INC-1").findings) == 2 and memory.incidents.get("INC-2")
    assert other.stats().total == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_purge_reads_no_document_under_the_write_but_those_written_since(grandbo, monkeypatch):
    """The purge's copies in documents are found before its write; inside it, the rows found are read again by
    their keys and the events written since are the only others read (no scan of the org's documents)."""
    from grandbo.store.sql import erasing

    memory = grandbo.org("acme", create=True)
    memory.remember({"id": "P1", "title": f"entry naming {SECRET}", "body": "replica lag"})
    memory.incidents.open("login failures", incident_id="INC-1")
    statements: list[str] = []
    apply = erasing.DocumentRewrite.apply

    def traced(self, conn):  # type: ignore[no-untyped-def]
        conn.set_trace_callback(statements.append)
        try:
            return apply(self, conn)
        finally:
            conn.set_trace_callback(None)

    monkeypatch.setattr(erasing.DocumentRewrite, "apply", traced)
    memory.purge("P1", reason="a credential", actor="alice")
    keyed = ("doc_id =", "doc_id IN (")  # one by its key, or those the events written since name by theirs
    scans = [s for s in statements if "FROM documents WHERE org_id" in s and not any(k in s for k in keyed)]
    assert statements and not scans, scans


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_purge_s_write_reads_none_of_the_documents_written_since_that_hold_no_copy(grandbo, monkeypatch):
    """Inside the purge's write, the documents written since its read were each read by its key and decoded, whatever
    they held: an alert storm during a long purge lengthened every batch's hold of the lock (review 30). Only those
    that mention a purged entry are read now (the database's filter); a copy among them is still erased."""
    from grandbo.ports import DocumentWrite
    from grandbo.store.sql import erasing

    memory = grandbo.org("acme", create=True)
    memory.remember({"id": "P1", "title": "replica lag", "body": f"the runbook naming {SECRET}"})
    copy = {"recall": {"hits": [{"entry": {"id": "P1", "kind": "finding", "title": "replica lag", "body": SECRET}}]}}
    storm = [DocumentWrite("alert", f"storm-{n}", {"summary": f"disk full {n}"}, "alert.received") for n in range(20)]
    find, apply, decoded = erasing.DocumentRewrite.find, erasing.DocumentRewrite.apply, list[str]()

    def then_a_storm(self, conn):  # type: ignore[no-untyped-def]  # after the purge's read, before its write
        find(self, conn)
        grandbo._store.put_documents(memory.org, [*storm, DocumentWrite("alert", "quoting", copy, "alert.received")],
                                     "test")  # fmt: skip

    def decoding(self, conn):  # type: ignore[no-untyped-def]  # what the write decodes
        decode = self._decode
        self._decode = lambda held: (decoded.append(held), decode(held))[1]
        return apply(self, conn)

    monkeypatch.setattr(erasing.DocumentRewrite, "find", then_a_storm)
    monkeypatch.setattr(erasing.DocumentRewrite, "apply", decoding)
    memory.purge("P1", reason="a credential", actor="alice")
    assert SECRET not in json.dumps(memory._documents.get("alert", "quoting").data)
    read = [held for held in decoded if "disk full" in str(held)]
    assert not read, read  # before: each of the 20 read by its key and decoded


def test_only_a_text_json_writes_as_it_is_sieves_the_stored_rows():
    from grandbo.erased import sieves

    assert sieves("hunter2") and sieves("Zürich-Passwort 日本") and sieves("a b/c:d")
    assert not sieves('say "hi"') and not sieves("C:\\temp") and not sieves("two\nlines") and not sieves("tab\there")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_purge_text_decodes_only_the_rows_its_text_may_be_in_and_misses_none(grandbo, raw, monkeypatch):
    """A purge-text decoded every row of the org's documents and their history and walked it in Python (most of a
    13 s pass at 250 MB, with every other request of the process waiting for the interpreter). A row whose stored
    JSON text the pattern finds nothing in is not decoded, unless it escapes a character (`\\u....`, as rows an
    older release wrote did): a case variant such as the Kelvin sign, which the pattern matches, could hide there."""
    memory = grandbo.org("acme", create=True)
    for n in range(30):
        memory.incidents.open(f"unrelated incident {n}", incident_id=f"INC-{n}")
    memory.incidents.open("the KELP-SECRET was pasted", incident_id="INC-LOUD")
    held = raw("SELECT data FROM documents WHERE org_id = %s AND doc_id = %s", ("acme", "INC-0"))[0][0]
    escaped = json.dumps({**json.loads(held), "title": "the \u212aelp-secret, escaped"}, ensure_ascii=True)
    raw("UPDATE documents SET data = %s WHERE org_id = %s AND doc_id = %s", (escaped, "acme", "INC-0"))
    decoded: list[object] = []
    loads = sqlite_erasure.loads_json

    def counted(value):  # type: ignore[no-untyped-def]
        decoded.append(value)
        return loads(value)

    walked: list[object] = []
    holds = tier_erasure._holds

    def walking(value, pattern):  # type: ignore[no-untyped-def]
        walked.append(value)
        return holds(value, pattern)

    monkeypatch.setattr(sqlite_erasure, "loads_json", counted)
    monkeypatch.setattr(tier_erasure, "_holds", walking)
    report = memory.erasure.purge_text("kelp-secret", reason="a credential", actor="alice")
    assert report.documents == 2  # the loud one and the escaped one
    assert len(decoded) < 10, len(decoded)  # of 32 documents and their history: the ones it may be in
    assert len(walked) < 40, len(walked)  # the checks before it walk only those too (and the entries' events)
    for doc_id in ("INC-0", "INC-LOUD"):
        assert "elp-secret" not in memory.incidents.get(doc_id).title.lower()


def test_an_event_written_while_the_rows_are_found_is_rewritten_and_counted_once(grandbo, raw, monkeypatch):
    """On Postgres the rows are found in a read whose statements each see what committed before them: an event
    written between the read of the last history event and the scan was found by the scan and again as written
    since, rewritten twice and its bytes taken off the org's count twice."""
    from grandbo.store.sql import erasing
    from tests.test_storage_limit import logged_bytes

    memory = grandbo.org("acme", create=True)
    memory.incidents.open("login failures", incident_id="INC-1")
    memory.incidents.add_finding("INC-1", f"the key {SECRET} was pasted in the channel")
    rows = erasing.DocumentRewrite._rows
    wrote: list[bool] = []

    def between(self, table, key):  # type: ignore[no-untyped-def]
        if table == "document_events" and not wrote:
            wrote.append(True)  # after the mark, before the scan of the history
            memory.incidents.add_finding("INC-1", f"and again: {SECRET} " + "padding " * 50)
        return rows(self, table, key)

    monkeypatch.setattr(erasing.DocumentRewrite, "_rows", between)
    memory.erasure.purge_text(SECRET, reason="a credential", actor="alice")
    assert wrote and memory.stats().stored_bytes == logged_bytes(raw, "acme")
    texts = [v if isinstance(v, str) else json.dumps(v) for (v,) in raw("SELECT data FROM document_events", org="acme")]
    assert not [text for text in texts if SECRET in text]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_row_an_older_release_kept_with_a_lone_surrogate_is_erased_and_sized(grandbo, raw):
    """The store reads a row an older release wrote with an escaped lone surrogate, but pydantic-core cannot write
    one: sizing it for the storage count, sieving it and rewriting it failed the whole purge-text."""
    memory = grandbo.org("acme", create=True)
    memory.incidents.open(f"login failures after {SECRET} leaked", incident_id="INC-1")
    (held,) = raw("SELECT data FROM documents WHERE org_id = %s AND doc_id = %s", ("acme", "INC-1"))[0]
    legacy = json.dumps({**json.loads(held), "symptoms": ["odd byte \ud800 in a log line"]})
    raw("UPDATE documents SET data = %s WHERE org_id = %s AND doc_id = %s", (legacy, "acme", "INC-1"))
    report = memory.erasure.purge_text(SECRET, reason="a credential", actor="alice")
    assert report.documents == 1
    (after,) = raw("SELECT data FROM documents WHERE org_id = %s AND doc_id = %s", ("acme", "INC-1"))[0]
    assert SECRET not in after and "\\ud800" in after
