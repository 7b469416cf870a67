"""Purge (issue 12, part 6): an entry's text and vector erased for good, the purge itself audited."""

from __future__ import annotations

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
