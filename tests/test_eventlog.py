"""Export and replay of whole organizations (issue 12, part 4): SQLite -> Postgres -> SQLite, nothing lost."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from grandbo.config import Settings
from grandbo.errors import ImportFormatError, InvalidInputError
from grandbo.memory import OrgMemory
from grandbo.model import Status
from grandbo.service import Grandbo
from grandbo.tiers import eventlog

NOW = datetime(2026, 11, 1, tzinfo=UTC)
TOPICS = [
    "redis keys evicted under maxmemory on the session cache",
    "checkout-api connection pool exhausted during a deploy",
    "certificate expired on the payments gateway",
]


def build(memory: OrgMemory) -> None:
    """An org with every kind of record: entries with history, incidents, the ledger, catalog, settings, profile."""
    memory.catalog.import_text(
        "services:\n- {name: checkout-api, depends_on: [payments-db]}\n- {name: payments-db}\n"
        "- {name: auth-service, depends_on: [redis-sessions]}\n- {name: redis-sessions}\n"
    )
    memory.remember_many(
        [
            {"id": f"E{n}", "title": f"{topic} (case {n})", "body": f"what we saw and did, case {n}",
             "services": ["checkout-api" if n % 2 else "redis-sessions"], "severity": f"sev{1 + n % 4}",
             "tags": [f"ERR_{n}"], "occurred_at": f"2026-0{1 + n % 9}-1{n % 9}T08:00:00+00:00"}
            for n, topic in enumerate(TOPICS * 5)
        ]
    )  # fmt: skip
    memory.correct("E1", {"body": "the pool was sized for 10 connections, not 100"}, reason="root cause found")
    memory.retire("E2", reason="obsolete")
    memory.runbooks.add("RB-FLUSH", "Flush the session cache", ["run the flush script"])
    incident = memory.incidents.open("Login latency spike", services=["auth-service"], severity="sev2",
                                     incident_id="INC-1")  # fmt: skip
    memory.incidents.add_finding(incident.id, "Keys evicted under maxmemory", status="corroborated",
                                 mechanism="eviction storm", component="redis-sessions", runbook_id="RB-FLUSH",
                                 services=["redis-sessions"])  # fmt: skip
    memory.incidents.close("INC-1", runbook_used="RB-FLUSH", succeeded=True, time_to_mitigate_s=600,
                           postmortem="we flushed the cache and raised maxmemory")  # fmt: skip
    memory.ledger.record("RB-FLUSH", "failed", service="redis-sessions")
    memory.profile.update({"facts": {"cloud": "we run on AWS eu-west-1"}})
    memory.org_settings.set_auto_apply_learned(True)


def snapshot(memory: OrgMemory) -> dict[str, object]:
    """Everything an org holds, minus what a store numbers itself (sequence numbers, time spellings)."""
    entries = [
        {**e.model_dump(mode="json", exclude={"org_id", "seq", "occurred_at", "created_at", "updated_at"}),
         "times": [e.occurred_at.timestamp(), e.created_at.timestamp(), e.updated_at.timestamp()]}
        for e in memory.entries(include_inactive=True)
    ]  # fmt: skip
    history = {
        e["id"]: [(ev.type.value, ev.payload, ev.actor, ev.at.timestamp()) for ev in memory.history(str(e["id"]))]
        for e in entries
    }
    log = memory._documents.log()
    documents = sorted((d.collection, d.doc_id, d.ref, d.data, d.version, d.updated_at.timestamp())
                       for d in log.documents)  # fmt: skip
    doc_events = [(d.collection, d.doc_id, d.type, d.data, d.actor, d.at.timestamp()) for d in log.events]
    rankings = {
        topic: [(h.entry.id, round(h.sort_score, 6)) for h in memory.recall(topic, 10, now=NOW).hits]
        for topic in TOPICS
    }
    vectors = memory.vectors([e.id for e in memory.entries()])  # the active ones: an export carries those
    return {
        "entries": sorted(entries, key=lambda e: str(e["id"])),
        "history": history,
        "documents": documents,
        "document_events": doc_events,
        "ledger": memory.ledger.effectiveness("RB-FLUSH").model_dump(mode="json"),
        "rankings": rankings,
        "vectors": {k: v.tolist() for k, v in sorted(vectors.items())},
    }


def _settings(home: Path, url: str | None) -> Settings:
    return Settings(home=home, database_url=url)


def test_sqlite_to_postgres_to_sqlite_keeps_everything(tmp_path, pg_database):
    from tests.conftest import reset_postgres

    reset_postgres(pg_database)
    with Grandbo.init(_settings(tmp_path / "a", None), embedding="deterministic") as first:
        origin = first.org("acme", create=True)
        build(origin)
        expected = snapshot(origin)
        first_counts = origin.export_log(tmp_path / "one.jsonl")
    assert first_counts["events"] >= 18 and first_counts["documents"] >= 5
    assert len(expected["rankings"][TOPICS[0]]) > 3  # type: ignore[index]
    with Grandbo.init(_settings(tmp_path / "b", pg_database), embedding="deterministic") as second:
        middle = second.org("copy", create=True)
        report = middle.import_log(tmp_path / "one.jsonl")
        assert report.embedded == 0 and report.vectors_kept == len(expected["vectors"])  # type: ignore[arg-type]
        assert snapshot(middle) == expected
        middle.export_log(tmp_path / "two.jsonl")
    with Grandbo.init(_settings(tmp_path / "c", None), embedding="deterministic") as third:
        last = third.org("again", create=True)
        last.import_log(tmp_path / "two.jsonl")
        assert snapshot(last) == expected
        assert last.rebuild().identical


def test_replay_checks_before_writing(tmp_path, grandbo):
    origin = grandbo.org("acme", create=True)
    build(origin)
    path = tmp_path / "out.jsonl"
    origin.export_log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[2])
    record["event"]["payload"]["title"] = "tampered"
    tampered = tmp_path / "bad.jsonl"
    tampered.write_bytes(b"".join([*lines[:2], (json.dumps(record) + "\n").encode(), *lines[3:]]))
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    target = grandbo.org("copy", create=True)
    with pytest.raises(ImportFormatError, match="fails its checksum"):
        target.import_log(tampered)
    with pytest.raises(ImportFormatError, match="no checksum line"):
        target.import_log(cut)
    with pytest.raises(ImportFormatError, match="import-events"):
        target.import_file(path)
    assert target.entries(include_inactive=True) == [] and target._documents.version() == 0
    with pytest.raises(InvalidInputError, match="not empty"):
        origin.import_log(path)
    report = target.import_log(path, reembed=True)
    assert report.vectors_kept == 0 and report.embedded == len(origin.entries())
    assert [h.entry.id for h in target.recall(TOPICS[1], now=NOW).hits] == [
        h.entry.id for h in origin.recall(TOPICS[1], now=NOW).hits
    ]


def test_cli_export_and_import_events(cli, tmp_path):
    cli("orgs", "create", "acme")
    cli("remember", "--title", "redis keys evicted under maxmemory", "--org", "acme")
    out = cli("export", str(tmp_path / "log.jsonl"), "--org", "acme")
    assert "1 entry events" in out.stdout
    cli("orgs", "create", "copy")
    out = cli("import-events", str(tmp_path / "log.jsonl"), "--org", "copy")
    assert "1 entries" in out.stdout
    out = cli("import-events", str(tmp_path / "log.jsonl"), "--org", "copy", code=2)
    assert "not empty" in out.stderr + out.stdout
    out = cli("export", "--entries", str(tmp_path / "entries.jsonl"), "--org", "acme")
    assert "exported 1 entries" in out.stdout


def test_an_export_is_read_from_one_snapshot_a_concurrent_write_cannot_tear(settings, memory, tmp_path):
    """A write committed (by another process's store) between the export's first read and its last is wholly
    out of the export: before one snapshot, its document was in the file and its entry was not."""
    from grandbo.tiers.log_export import export_log

    memory.remember({"id": "E-BEFORE", "title": "disk full on the batch node"})
    memory.profile.update({"facts": {"team": "platform"}})

    class WriteDuringTheExport:
        """The org's documents, with a write from another Grandbo committed just before they are read."""

        def __init__(self, documents):
            self._documents = documents

        def pages(self, holding, limit):
            with Grandbo.open(settings) as other:  # its own connection, as another process would have
                late = other.org("acme")
                late.remember({"id": "E-LATE", "title": "certificate expired on the gateway"})
                late.profile.update({"facts": {"team": "platform", "pager": "late write"}})
            return self._documents.pages(holding, limit)

        def __getattr__(self, name):
            return getattr(self._documents, name)

    counts = export_log("acme", memory._entries, WriteDuringTheExport(memory._documents), tmp_path / "log.jsonl")
    text = (tmp_path / "log.jsonl").read_text()
    assert "E-BEFORE" in text and "E-LATE" not in text and "late write" not in text
    assert counts["events"] == 1
    assert {e.id for e in memory.entries()} == {"E-BEFORE", "E-LATE"}  # the write itself was stored


def test_an_export_holding_webhook_secrets_is_readable_by_its_owner_only(memory, tmp_path):
    import os
    import stat

    memory.webhook_secrets.add("pagerduty", "a-signing-secret-in-clear")
    (tmp_path / "old.jsonl").write_text("an older export, world-readable")
    (tmp_path / "old.jsonl").chmod(0o644)
    previous = os.umask(0o022)
    try:
        memory.export_log(tmp_path / "log.jsonl", with_secrets=True)
        memory.export_log(tmp_path / "old.jsonl", with_secrets=True)  # written over: its mode goes too
    finally:
        os.umask(previous)
    assert "a-signing-secret-in-clear" in (tmp_path / "log.jsonl").read_text()
    for name in ("log.jsonl", "old.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_an_export_made_before_migration_30_is_imported_with_its_service_names_as_kept_now(grandbo, tmp_path):
    """An export of a store before migration 30 holds its documents' service names as they were sent (a fullwidth
    `ｃｈｅｃｋｏｕｔ-api`, a zero-width space); its entries' names are normalized by the replay (`projection.apply`),
    and its documents now are too, as the migration put the stored ones: the filters find them, and the catalog's
    look-alike takes its name's id (merged into the service of that name)."""
    from grandbo.model import utcnow
    from grandbo.tiers.change_model import NewChange
    from grandbo.tiers.log_export import line as _line

    origin = grandbo.org("acme", create=True)
    origin.catalog.import_text("services:\n- {name: checkout-api, depends_on: [payments-db]}\n- {name: web}\n")
    origin.changes.add(NewChange(id="d1", service="checkout-api", summary="deploy", at=utcnow()))
    origin.export_log(tmp_path / "x.jsonl")
    fullwidth, zero_width = "\uff43\uff48\uff45\uff43\uff4b\uff4f\uff55\uff54-api", "checkout\u200b-api"
    lines = []
    for line in (tmp_path / "x.jsonl").read_text().splitlines()[:-1]:  # the checksum line written again below
        record = json.loads(line)
        if "document" in record and record["document"]["collection"] == "service":
            if record["document"]["doc_id"] == "web":  # a second look-alike of checkout-api, with its own dependency
                record["document"].update(doc_id=zero_width, ref=zero_width)
                record["document"]["data"].update(name=zero_width, depends_on=["users-db"])
            else:
                record["document"].update(doc_id=fullwidth, ref=fullwidth)
                record["document"]["data"]["name"] = fullwidth
        elif "document" in record and record["document"]["collection"] == "change":
            record["document"]["data"]["service"] = fullwidth
        lines.append(_line(record))
    checksum = {"sha256": hashlib.sha256(b"".join(lines)).hexdigest(), "lines": len(lines)}
    (tmp_path / "x.jsonl").write_bytes(b"".join([*lines, _line({"checksum": checksum})]))

    copy = grandbo.org("copy", create=True)
    copy.import_log(tmp_path / "x.jsonl")

    topology = copy.catalog.topology()
    assert sorted(topology.services) == ["checkout-api"]
    assert topology.services["checkout-api"].depends_on == ["payments-db", "users-db"]
    assert [c.id for c in copy.changes.find(service="checkout-api")[0]] == ["d1"]
    copy.catalog.import_text("services:\n- {name: checkout-api, depends_on: [payments-db]}\n")
    assert sorted(copy.catalog.topology().services) == ["checkout-api"]  # one service, not a second beside it


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # counted through SQLite's trace
def test_a_replay_writes_its_entries_a_chunk_a_transaction_keeping_other_orgs_writes_unheld(
    grandbo, tmp_path, monkeypatch
):
    """One org's whole log was appended in one transaction: on the embedded store its write lock, and every other
    org's writes, were held for the whole replay (40,000 entries: 4.4 s; past 10 s they are refused, probe 24).
    Counted through SQLite's trace: the events each write transaction logs. A chunk of 200 here (2,000 in use): the
    same chunking over a tenth of the entries."""
    monkeypatch.setattr(eventlog, "REPLAY_CHUNK", 200)
    source = grandbo.org("acme", create=True)
    count = eventlog.REPLAY_CHUNK + eventlog.REPLAY_CHUNK // 2
    kept = source.remember_many([{"title": f"replica {n} lost its lease", "body": f"node {n}"} for n in range(count)])
    source.retire(kept[0].id, reason="one entry with two events")
    source.export_log(tmp_path / "acme.log")
    logged: list[int] = []

    def count_events(statement: str) -> None:
        if statement.startswith("BEGIN"):
            logged.append(0)
        elif statement.startswith("INSERT INTO memory_events") and logged:
            logged[-1] += 1

    copy = grandbo.org("copy", create=True)
    grandbo._store.trace(count_events)
    try:
        report = copy.import_log(tmp_path / "acme.log")
    finally:
        grandbo._store.trace(None)
    assert report.entries == count and max(logged) <= eventlog.REPLAY_CHUNK < sum(logged)
    assert (copy.stats().total, copy.stats().readable) == (count - 1, count - 1)  # all active but one, embedded
    assert copy.get(kept[0].id).status is Status.RETIRED
