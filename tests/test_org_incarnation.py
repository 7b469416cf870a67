"""A handle's writes stay with the organization it wrote to first: once that org is dropped, and maybe created
again under its name (a new org), they are refused (`OrgDroppedError`) and the new org holds none of them.

Probe 21 (F7) deleted an org with the CLI while its REST import ran, created it again at once, and the new org
received the old import's later chunks (154 entries and their incidents on Postgres, 22 on SQLite), listed with the
new org's key: the store's writes checked only that an org of that name existed. Every org now has an incarnation
(`grandbo.incarnation`), which each write of a handle compares inside its transaction, under the org's lock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grandbo.config import Settings
from grandbo.errors import OrgDroppedError
from grandbo.history.importer import CHUNK, import_history
from grandbo.history.record import HistoricIncident, Refusal, Skipped
from grandbo.history.registry import reader
from grandbo.memory import OrgMemory
from grandbo.ports import EmbedResult
from grandbo.service import Grandbo
from grandbo.tiers.imported import HISTORY, Imported
from grandbo.tiers.incident_model import INCIDENTS
from tests.test_history_import import MAP, ROW, write_jsonl

OLD = {"id": "OLD-1", "title": "walrus-cache stampede after a cold start", "body": "the old org's finding"}


@pytest.fixture
def operator(settings: Settings) -> Iterator[Grandbo]:
    """Another process on the same store (the CLI of `grandbo orgs delete` and `grandbo orgs create`), with no key
    cache to wait out: it creates an org of a dropped name a quarter of a second after the drop."""
    with Grandbo.open(settings.model_copy(update={"key_cache_seconds": 0})) as opened:
        yield opened


def _replace(operator: Grandbo, org: str, *, again: bool = True) -> OrgMemory | None:
    """Drop `org` and (`again`) create it anew, as `grandbo orgs delete --yes` then `grandbo orgs create` do."""
    operator.drop_org(org)
    if not again:
        return None
    operator.create_org(org)
    return operator.org(org)


def _holdings(memory: OrgMemory) -> dict[str, object]:
    """What the org holds: its entries (any status), incidents, import records and API keys."""
    documents = memory.incidents.documents
    return {
        "entries": [entry.id for entry in memory.entries(include_inactive=True)],
        "incidents": [doc.doc_id for doc in documents.find(INCIDENTS)],
        "history": [doc.doc_id for doc in documents.find(HISTORY)],
        "keys": [key.name for key in memory.keys.all()],
    }


NOTHING = {"entries": [], "incidents": [], "history": [], "keys": []}


def test_a_handle_of_a_dropped_org_writes_nothing_into_the_org_created_again_under_its_name(grandbo, operator):
    old = grandbo.org("acme", create=True)
    old.remember(OLD)  # its first write: the handle writes for this org from now on
    new = _replace(operator, "acme")
    assert new is not None
    writes: list[Callable[[], object]] = [
        lambda: old.remember({"title": "a late write of the old org", "body": "one entry"}),
        lambda: old.remember_many([{"title": f"a late bulk write {n}", "body": "many"} for n in range(50)]),
        lambda: old.keys.create("admin", name="late"),  # a document: a key into the new org
        lambda: old.profile.update({"facts": {"name": "the old org"}}),
    ]
    for write in writes:
        with pytest.raises(OrgDroppedError) as refused:
            write()
        assert refused.value.code == "org_dropped" and refused.value.status == 404
        assert "'acme' was deleted while this work ran" in refused.value.message
    assert _holdings(new) == NOTHING
    assert new.profile.get().facts == {}
    new.remember({"title": "the new org's own entry"})  # the new org's own handles write as ever
    assert new.stats().total == 1


def test_a_dropped_org_s_erasures_and_purges_never_touch_the_new_org(grandbo, operator):
    old = grandbo.org("acme", create=True)
    old.remember(OLD)
    new = _replace(operator, "acme")
    assert new is not None
    new.remember({"id": "OLD-1", "title": "walrus-cache stampede, the new org's own", "body": "kept"})
    with pytest.raises(OrgDroppedError):
        old.purge("OLD-1", reason="the old org's purge", actor="admin")
    with pytest.raises(OrgDroppedError):
        old.erasure.purge_text("walrus-cache", reason="the old org's erasure", actor="admin")
    kept = new.get("OLD-1")
    assert kept.title == "walrus-cache stampede, the new org's own" and kept.status.value == "active"
    assert [event.type.value for event in new.history("OLD-1")] == ["remembered"]


def test_a_handle_pinned_before_the_drop_writes_nothing_after_it(grandbo, operator):
    """A REST import pins its handle before it uploads: its first write comes after the upload, which may outlast a
    drop and a re-creation of the org."""
    old = grandbo.org("acme", create=True)
    old.pin()  # no write yet: its org is fixed all the same
    new = _replace(operator, "acme")
    assert new is not None
    with pytest.raises(OrgDroppedError):
        old.remember(OLD)
    with pytest.raises(OrgDroppedError):
        old.pin()
    assert _holdings(new) == NOTHING


def test_a_handle_opened_after_the_re_creation_writes_to_the_new_org(grandbo, operator):
    """Handles are made per request, never kept: one opened once the name is taken again is the new org's."""
    grandbo.org("acme", create=True).remember(OLD)
    _replace(operator, "acme")
    grandbo.org("acme").remember({"title": "written by this process to the new org"})
    assert [entry.title for entry in operator.org("acme").entries()] == ["written by this process to the new org"]


class _Interrupted:
    """The jsonl reader, with the org dropped (and created again) by another process between the import's first
    chunk and its second: after the first CHUNK records were read and filed, before the next is read."""

    name = "jsonl"

    def __init__(self, operator: Grandbo, again: bool) -> None:
        self.operator, self.again = operator, again
        self.successor: OrgMemory | None = None

    def read(self, path: Path, mapping: dict[str, str] | None = None) -> Iterator[HistoricIncident | Refusal | Skipped]:
        for number, record in enumerate(reader("jsonl").read(path, mapping), start=1):
            if number == CHUNK + 1:
                self.successor = _replace(self.operator, "acme", again=self.again)
            yield record


@pytest.mark.parametrize("again", [True, False], ids=["created-again", "dropped"])
def test_an_import_interrupted_by_a_drop_stops_there_and_files_nothing_into_the_new_org(
    grandbo, operator, tmp_path, again
):
    rows = [{**ROW, "id": f"INC-{n}", "title": f"incident {n}"} for n in range(3 * CHUNK)]
    path = write_jsonl(tmp_path / "export.jsonl", rows)
    memory = grandbo.org("acme", create=True)
    interrupted = _Interrupted(operator, again)
    with pytest.raises(OrgDroppedError) as stopped:  # one clear error, not a refusal per record, nor a 409
        import_history(memory, interrupted, path, mapping=MAP, actor="api")
    assert "nothing more of it was written" in stopped.value.message
    if again:
        assert interrupted.successor is not None
        assert _holdings(interrupted.successor) == NOTHING
        Imported(interrupted.successor.incidents).check()  # no lease of the old import holds the new org
    else:
        assert "acme" not in operator.orgs()


def test_the_lease_of_a_dropped_org_s_import_is_not_renewed_in_the_new_org(grandbo, operator):
    """The probe's import answered `409 import_running` at its end: its lease's renewal, finding no lease in the new
    org, took it for another import's. It is the org's drop, said as such."""
    memory = grandbo.org("acme", create=True)
    lease = Imported(memory.incidents)
    version = lease.begin("api")
    new = _replace(operator, "acme")
    assert new is not None
    with pytest.raises(OrgDroppedError):
        lease.renew(version, "api")
    lease.end(version, "api")  # the lease went with the org: nothing to give back, nothing raised
    assert new.incidents.documents.find(HISTORY) == []
    Imported(new.incidents).begin("api")  # the new org's own import finds its org free


def test_a_dropped_org_s_embed_jobs_file_no_vector_in_the_org_created_again(grandbo, settings, operator):
    """A worker claims the old org's job; the org is dropped and created again with the same entry (the same id and
    text) waiting for its own job. The old job's vector is not filed: only a job still queued files one."""
    with Grandbo.open(settings, background=True, embed_here=False) as server:
        server.org("acme", create=True).remember(OLD)  # its job waits for a worker
        store = server._store
        jobs = store.claim_jobs(10, 5)
        assert [job.entry_id for job in jobs] == ["OLD-1"]
        vectors = server.provider().embed([job.text for job in jobs], "document")
        _replace(operator, "acme")
        new = server.org("acme")
        new.remember(OLD)  # the same entry, its own job waiting
        results = [EmbedResult(job, vector) for job, vector in zip(jobs, vectors, strict=True)]
        assert store.complete_jobs(server.space, results) == 0
        assert new.vectors(["OLD-1"]) == {}
        assert [job.entry_id for job in store.claim_jobs(10, 5)] == ["OLD-1"]  # the new org's own job, still there
