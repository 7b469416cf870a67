"""Same data, same answers: the embedded store and Postgres rank identically, on the same score scale."""

import random

import pytest

from grandbo.config import Settings
from grandbo.eval import beir
from grandbo.eval.bench import synthetic_entry, synthetic_query
from grandbo.eval.runner import shipped_set
from grandbo.model import Arm
from grandbo.service import Grandbo
from grandbo.tiers.transfer import entry_from_record
from tests.conftest import reset_postgres

pytestmark = pytest.mark.postgres


def load_both(tmp_path, pg_database, entries):
    reset_postgres(pg_database)
    opened = []
    for name, url in (("sqlite", None), ("postgres", pg_database)):
        grandbo = Grandbo.init(Settings(home=tmp_path / name, database_url=url), embedding="deterministic")
        grandbo.org("acme", create=True).remember_many(entries, strict=True)
        opened.append(grandbo)
    return opened


def tie_groups(hits):
    """A ranking as a list of (score, ids) groups: order between tied hits is not compared."""
    groups = []
    for hit in hits:
        if groups and abs(groups[-1][0] - hit.sort_score) <= 1e-9:
            groups[-1][1].add(hit.entry.id)
        else:
            groups.append((hit.sort_score, {hit.entry.id}))
    return groups


def assert_same(sqlite_result, postgres_result):
    a, b = sqlite_result.hits, postgres_result.hits
    assert len(a) == len(b), (sqlite_result.topic, [h.entry.id for h in a], [h.entry.id for h in b])
    assert [s for s, _ in tie_groups(a)] == pytest.approx([s for s, _ in tie_groups(b)], abs=1e-5)
    groups_a, groups_b = tie_groups(a), tie_groups(b)
    for (_, ids_a), (_, ids_b) in zip(groups_a[:-1], groups_b[:-1], strict=True):
        assert ids_a == ids_b, sqlite_result.topic  # the last group may be cut differently by k
    for hit_a, hit_b in zip(a, b, strict=True):
        if hit_a.entry.id == hit_b.entry.id:
            for arm in ("lexical", "vector"):
                ea, eb = getattr(hit_a.why, arm), getattr(hit_b.why, arm)
                assert (ea is None) == (eb is None)
    return len(a)


@pytest.mark.parametrize("arm", [Arm.LEXICAL, Arm.VECTOR, Arm.HYBRID])
def test_shipped_incident_set_ranks_the_same_on_both_backends(tmp_path, pg_database, arm):
    dataset = beir.load(shipped_set())
    sqlite, postgres = load_both(tmp_path, pg_database, [entry_from_record(r) for r in dataset.corpus])
    compared = 0
    try:
        for query in dataset.queries:
            compared += assert_same(
                sqlite.org("acme", create=True).recall(query.text, 10, arm=arm),
                postgres.org("acme", create=True).recall(query.text, 10, arm=arm),
            )
    finally:
        sqlite.close()
        postgres.close()
    assert compared > 100


def test_bm25_scores_and_term_shares_match_on_a_larger_corpus(tmp_path, pg_database, store):
    rng = random.Random(11)
    entries = [synthetic_entry(rng, n).model_copy(update={"id": f"S{n:05d}"}) for n in range(1500)]
    sqlite, postgres = load_both(tmp_path, pg_database, entries)
    try:
        for _ in range(40):
            topic = synthetic_query(rng)
            a = sqlite.org("acme", create=True).recall(topic, 10, arm=Arm.LEXICAL)
            b = postgres.org("acme", create=True).recall(topic, 10, arm=Arm.LEXICAL)
            assert_same(a, b)
            shares_b = {h.entry.id: h.why.lexical for h in b.hits}
            for hit in a.hits:
                if hit.entry.id in shares_b:
                    other = shares_b[hit.entry.id]
                    assert hit.why.lexical.terms == pytest.approx(other.terms, abs=1e-9)
                    assert hit.why.lexical.coverage == pytest.approx(other.coverage, abs=1e-9)
        # Retirement changes statistics identically on both.
        for grandbo in (sqlite, postgres):
            memory = grandbo.org("acme", create=True)
            for entry in store.entries("acme")[:200:3]:
                memory.retire(entry.id)
        topic = synthetic_query(rng)
        assert_same(
            sqlite.org("acme", create=True).recall(topic, 10, arm=Arm.LEXICAL),
            postgres.org("acme", create=True).recall(topic, 10, arm=Arm.LEXICAL),
        )
    finally:
        sqlite.close()
        postgres.close()
