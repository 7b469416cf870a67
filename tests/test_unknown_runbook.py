"""An outcome for a runbook the organization has no trace of (a typo) is refused, naming close ids, on every
interface; runbooks an org's memories or incidents cite, without an entry of their own, still take outcomes."""

from __future__ import annotations

import difflib
import random
import sqlite3

import anyio
import psycopg
import pytest

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.tiers.ledger import HINT_CANDIDATES, HINT_COMPARED
from tests.plain_ledger import every_outcome
from tests.serving import serving
from tests.test_mcp import http_client, session


@pytest.fixture
def acme(grandbo):
    memory = grandbo.org("acme", create=True)
    memory.runbooks.add("RB-REDIS-FLUSH", "Flush the session cache", ["flush it"])
    memory.remember({"id": "INC-7-F1", "title": "pool exhausted", "kind": "finding",
                     "meta": {"runbook_id": "RB-WIKI-POOL"}})  # fmt: skip
    return memory


def test_a_mistyped_runbook_is_refused_naming_the_close_one_and_nothing_is_recorded(acme):
    with pytest.raises(NotFoundError, match="No runbook 'RB-REDIS-FLSH'") as refused:
        acme.ledger.record("RB-REDIS-FLSH", "succeeded")
    assert "Did you mean 'RB-REDIS-FLUSH'?" in refused.value.message
    assert refused.value.detail["close"] == ["RB-REDIS-FLUSH"]
    with pytest.raises(InvalidInputError, match="is a finding, not a runbook"):
        acme.ledger.record("INC-7-F1", "succeeded")
    assert every_outcome(acme) == []


def test_runbooks_cited_by_memories_or_incidents_or_with_outcomes_take_outcomes(acme):
    acme.ledger.record("RB-REDIS-FLUSH", "succeeded")
    acme.ledger.record("RB-WIKI-POOL", "failed")  # a runbook kept elsewhere that a finding names
    acme.incidents.open("checkout down", incident_id="INC-8")
    acme.incidents.close("INC-8", runbook_used="RB-ELSEWHERE", succeeded=True)  # the incident names it
    acme.ledger.record("RB-ELSEWHERE", "succeeded")  # and from then on it is known
    assert {o.runbook_id for o in every_outcome(acme)} == {"RB-REDIS-FLUSH", "RB-WIKI-POOL", "RB-ELSEWHERE"}


def test_rest_and_mcp_refuse_the_typo_with_the_remedy(grandbo, acme):
    _, key = acme.keys.create("write")
    with serving(grandbo) as served:
        with served.client(key) as client:
            response = client.post("/v1/runbooks/RB-REDIS-FLSH/outcomes", json={"kind": "succeeded"})
        answer = anyio.run(session, http_client(served.url, key), lambda client: client.call_tool(
            "report_outcome", {"runbook_id": "RB-REDIS-FLSH", "outcome": "succeeded"}))  # fmt: skip
    assert response.status_code == 404 and response.json()["error"]["detail"]["close"] == ["RB-REDIS-FLUSH"]
    assert answer.is_error and "Did you mean 'RB-REDIS-FLUSH'?" in answer.content[0].text
    assert every_outcome(acme) == []


def test_the_cli_refuses_the_typo_with_the_remedy(cli):
    cli("runbook", "add", "RB-DNS", "--title", "Flush DNS", "--step", "flush")
    refused = cli("outcome", "RB-DSN", "--kind", "succeeded", code=2)
    assert "No runbook 'RB-DSN'" in refused.stderr and "Did you mean 'RB-DNS'?" in refused.stderr
    cli("outcome", "RB-DNS", "--kind", "succeeded")


def test_an_org_of_long_near_miss_runbook_ids_cannot_make_a_refusal_costly(acme, monkeypatch):
    """Probe 17 F1: an unknown runbook read every entry of the org, then ran difflib against every runbook id its
    entries cite, each as long as the org made it. 20,000 entries citing 120-character ids of ten letters took 18 s
    of the shared process a refusal (its GIL held), and 40 calls left every org, and /healthz, unanswered for
    minutes. The ids are now read from indexes (migration 23), at most HINT_CANDIDATES of each source, and only the
    HINT_COMPARED of most letters in common are compared in full; a near id is still named."""
    rng = random.Random(17)
    ids = ["".join(rng.choice("abcdefghij") for _ in range(120)) for _ in range(HINT_CANDIDATES + 300)]
    acme.remember_many([{"title": f"finding {n}", "body": "pool exhausted", "kind": "finding",
                         "meta": {"runbook_id": cited}} for n, cited in enumerate(ids)])  # fmt: skip
    compared = []
    full_ratio = difflib.SequenceMatcher.ratio
    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", lambda self: compared.append(1) or full_ratio(self))
    with pytest.raises(NotFoundError, match="No runbook"):
        acme.ledger.record("".join(rng.choice("abcdefghij") for _ in range(120)), "succeeded")
    assert len(compared) <= HINT_COMPARED
    for meant in (min(ids), max(ids)):  # the first and the last in the index's order: its neighbours are offered
        typo = meant[:-1] + ("a" if meant[-1] != "a" else "b")
        with pytest.raises(NotFoundError) as refused:
            acme.ledger.record(typo, "succeeded")
        assert refused.value.detail["close"][0] == meant
    assert every_outcome(acme) == []


def test_a_runbook_cited_by_a_retired_memory_is_known_and_a_number_is_no_citation(acme):
    acme.retire("INC-7-F1", actor="alice")  # any status, as before
    acme.ledger.record("RB-WIKI-POOL", "failed")
    acme.remember({"title": "cites a number", "body": "b", "meta": {"runbook_id": 42}})
    with pytest.raises(NotFoundError, match="No runbook '42'"):
        acme.ledger.record("42", "succeeded")


def test_the_cited_runbook_is_sought_in_an_index(acme, settings, backend):
    """Migration 23: the runbook an entry cites is a column the database derives from its meta, indexed (on Postgres
    an index on `meta ->> ...` is not sought under row-level security), and runbook entries have one of their own."""
    query = "SELECT 1 FROM memory_entries WHERE org_id = {p} AND runbook_id = {p} LIMIT 1"
    runbooks = "SELECT DISTINCT entry_id FROM memory_entries WHERE org_id = {p} AND kind = 'runbook' ORDER BY entry_id LIMIT 500"
    if backend == "sqlite":
        with sqlite3.connect(settings.home / "grandbo.db") as db:
            cited = " ".join(str(s[-1]) for s in db.execute("EXPLAIN QUERY PLAN " + query.format(p="?"), ("acme", "x")))
            listed = " ".join(str(s[-1]) for s in db.execute("EXPLAIN QUERY PLAN " + runbooks.format(p="?"), ("acme",)))
        db.close()
        assert "INDEX memory_entries_by_runbook_id" in cited and "INDEX memory_entries_runbooks" in listed, (
            cited,
            listed,
        )
        return
    acme.remember_many([{"title": f"finding {n}", "body": "b", "meta": {"runbook_id": f"RB-{n}"}} for n in range(3000)])
    with psycopg.connect(settings.database_url) as conn:  # as the runtime role, under row-level security
        conn.execute("SELECT set_config('grandbo.org_id', 'acme', true)")
        conn.execute("ANALYZE memory_entries")
        cited = "\n".join(row[0] for row in conn.execute("EXPLAIN " + query.format(p="%s"), ("acme", "RB-7")))
        listed = "\n".join(row[0] for row in conn.execute("EXPLAIN " + runbooks.format(p="%s"), ("acme",)))
    assert "memory_entries_by_runbook_id" in cited and "memory_entries_runbooks" in listed, (cited, listed)
