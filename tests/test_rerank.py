"""The composite re-ranker: the operationally proven match outranks the closer text match, and says why."""

from datetime import timedelta

import pytest

from grandbo.model import Entry, Hit, RerankWeights, utcnow
from grandbo.retrieval import rerank
from grandbo.retrieval.policy import DEFAULT_POLICY

TOPIC = "Redis connection reset during key eviction spike; auth-service latency > 1200ms"
CATALOG = """
services:
  - name: auth-service
    depends_on: [redis-sessions, users-db]
  - name: redis-sessions
  - name: users-db
  - name: checkout-api
    depends_on: [payments-gateway]
  - name: payments-gateway
"""


@pytest.fixture
def scenario(memory):
    memory.catalog.import_text(CATALOG)
    books = memory.runbooks
    books.add(
        "RB-REDIS-VOLATILE-LRU-SCALE",
        "Switch redis-sessions to volatile-lru and scale memory",
        ["Check evicted_keys and used_memory", "Set maxmemory-policy volatile-lru", "Add a shard"],
        services=["redis-sessions"],
    )
    books.add(
        "RB-REDIS-REBUILD-TOPOLOGY",
        "Rebuild the redis-sessions cluster topology",
        ["Freeze writes", "CLUSTER RESET on the minority side", "Re-add nodes"],
        services=["redis-sessions"],
    )
    ledger = memory.ledger
    for n in range(50):
        ledger.record(
            "RB-REDIS-VOLATILE-LRU-SCALE",
            "succeeded" if n < 47 else "failed",
            service="redis-sessions",
            time_to_mitigate_s=600 + n,
        )
    for n in range(10):
        ledger.record("RB-REDIS-REBUILD-TOPOLOGY", "succeeded" if n < 2 else "failed", service="redis-sessions")
    incidents = memory.incidents
    started = utcnow() - timedelta(days=40)
    incidents.open(
        "Redis connection reset",
        services=["redis-sessions"],
        severity="sev3",
        started_at=started,
        incident_id="INC-012",
    )
    incidents.add_finding(
        "INC-012",
        "connection reset during key spike, auth-service latency above 1200ms",
        status="corroborated",
        mechanism="network partition between redis nodes",
        component="redis-sessions",
        symptom="redis connection reset, latency 1200ms",
        runbook_id="RB-REDIS-REBUILD-TOPOLOGY",
    )
    incidents.close("INC-012")
    incidents.open(
        "Eviction storm",
        services=["redis-sessions", "auth-service"],
        severity="sev2",
        started_at=started,
        incident_id="INC-044",
    )
    incidents.add_finding(
        "INC-044",
        "maxmemory reached and keys evicted",
        status="corroborated",
        mechanism="eviction storm under allkeys-lru",
        component="redis-sessions",
        symptom="slow logins",
        runbook_id="RB-REDIS-VOLATILE-LRU-SCALE",
    )
    incidents.close("INC-044")
    return memory


def test_bonuses_never_lift_a_clearly_weaker_match_over_a_stronger_one(scenario):
    # INC-012's finding repeats the topic almost word for word (idf coverage 0.9 against INC-044's 0.4): the
    # proven runbook and the closer severity give INC-044 the higher composite score, but it cannot pass.
    answer = scenario.recall(TOPIC, 5, severity="sev2")
    findings = [hit for hit in answer.hits if hit.entry.kind.value == "finding"]
    first, second = findings[0], findings[1]
    assert first.entry.meta["incident_id"] == "INC-012" and second.entry.meta["incident_id"] == "INC-044"
    assert second.why.rerank.final > first.why.rerank.final  # the composite alone would have buried the text match
    assert second.sort_score < first.sort_score  # sort scores fall with rank: the held-back hit sorts just below
    assert second.composite == second.why.rerank.final > first.composite  # its composite score says it as it is
    assert second.score == second.sort_score  # the old name of sort_score, kept for clients
    assert first.why.lexical.coverage - second.why.lexical.coverage > DEFAULT_POLICY.rerank.coverage_band
    why, other = second.why.rerank, first.why.rerank
    assert why.service.value == 1.0 and why.service.note == "same service"  # auth-service is named
    assert other.service.value == 0.5 and other.service.note == "direct dependency"
    assert why.severity.value == 1.0 and other.severity.value == 0.75
    assert why.effectiveness.value == pytest.approx(48 / 52, abs=1e-4)  # Beta(1+47, 1+3) mean
    assert "47/50 succeeded" in why.effectiveness.note
    assert other.effectiveness.value == pytest.approx(3 / 12, abs=1e-4)
    for evidence in (why, other):
        parts = [evidence.similarity, evidence.service, evidence.severity, evidence.effectiveness]
        total = sum(part.contribution for part in parts) + evidence.age.contribution
        assert evidence.final == pytest.approx(total, abs=1e-3)
    assert (
        first.sort_score == first.composite == other.final
        and first.why.fused_rank == 1
        and first.why.lexical is not None
    )


def test_the_bands_are_the_ranking_policy_s(grandbo, scenario):
    # The same scenario under a policy whose coverage band is wide enough: the operationally proven INC-044
    # may now pass the closer text match (the re-ranker reads its bands from the policy, not a constant).
    wide = DEFAULT_POLICY.rerank.model_copy(update={"coverage_band": 1.0, "cosine_band": 1.0})
    grandbo.policy = grandbo.policy.model_copy(update={"rerank": wide})
    answer = grandbo.org("acme").recall(TOPIC, 5, severity="sev2")
    findings = [hit for hit in answer.hits if hit.entry.kind.value == "finding"]
    assert [hit.entry.meta["incident_id"] for hit in findings[:2]] == ["INC-044", "INC-012"]
    assert [hit.sort_score for hit in findings[:2]] == [hit.composite for hit in findings[:2]]  # nothing held back


def _candidate(name, fused_rank, cosine, coverage):
    now = utcnow()
    entry = Entry(
        id=name, org_id="acme", title="t", body="b", kind="finding", source="admin", tags=[], services=[],
        severity=None, occurred_at=now, status="active", created_at=now, updated_at=now, seq=fused_rank,
    )  # fmt: skip
    return rerank.Candidate(entry, 1 / (60 + fused_rank), fused_rank, cosine, coverage)


def _scored(candidate, final):
    context = rerank.Context(services=[], severity=None, now=utcnow())
    return rerank.Scored(final, (0, 0, 0, 0, 0), RerankWeights(), candidate, context, None, "", 0.0)


def test_a_hit_stored_before_sort_score_existed_reads_with_both():
    entry = _candidate("stored", 1, 0.5, 0.5).entry.model_dump()
    old = Hit.model_validate({"rank": 1, "score": 0.42, "entry": entry, "why": {"method": "reranked"}})
    assert (old.sort_score, old.score, old.composite) == (0.42, 0.42, None)  # an alert's result kept before
    new = Hit.model_validate(
        {"rank": 1, "sort_score": 0.41, "composite": 0.43, "entry": entry, "why": {"method": "rrf"}}
    )
    assert new.model_dump()["score"] == 0.41  # sort_score under its old name, for the clients that read it


def test_bonuses_reorder_near_ties_only():
    strong = _candidate("strong", 1, 0.69, 0.79)
    near = _candidate("near", 2, 0.66, 0.75)  # within both bands of the strongest
    weak = _candidate("weak", 3, 0.57, 0.38)  # clearly weaker on both arms
    lexical_only = _candidate("lexical-only", 4, None, 0.80)
    ranked = rerank.order(
        [_scored(strong, 0.80), _scored(near, 0.85), _scored(weak, 0.95), _scored(lexical_only, 0.9)],
        DEFAULT_POLICY.rerank,
    )
    assert [s.candidate.entry.id for s in ranked] == ["near", "strong", "weak", "lexical-only"]
    # With no bonus anywhere the order is the fused order.
    plain = rerank.order([_scored(c, 0.5) for c in (weak, strong, lexical_only, near)], DEFAULT_POLICY.rerank)
    assert [s.candidate.entry.id for s in plain] == ["strong", "near", "weak", "lexical-only"]


def test_the_first_places_of_an_order_are_the_whole_orders_first():
    finals = (0.2, 0.9, 0.4, 0.95, 0.3, 0.99, 0.1, 0.5)
    cosines = (0.7, 0.7, 0.7, 0.7, 0.7, 0.5, 0.7, 0.7)  # the sixth clearly weaker: it waits for its turn
    scored = [_scored(_candidate(f"c{rank}", rank, cosines[rank - 1], 0.8), finals[rank - 1]) for rank in range(1, 9)]
    whole = rerank.order(scored, DEFAULT_POLICY.rerank)
    assert [s.candidate.entry.id for s in whole] == ["c4", "c2", "c8", "c3", "c5", "c1", "c6", "c7"]
    for places in range(len(scored) + 2):
        assert rerank.order(scored, DEFAULT_POLICY.rerank, places) == whole[:places]


def test_a_runbook_scores_same_service_where_it_was_used(scenario):
    scenario.runbooks.add("RB-SESSIONS-FLUSH", "Flush expired session keys", ["Run the flush job"])  # no services
    for _ in range(4):
        scenario.ledger.record("RB-SESSIONS-FLUSH", "succeeded", service="redis-sessions")
    hit = next(
        h
        for h in scenario.recall("flush expired session keys in the cache", 10, services=["redis-sessions"]).hits
        if h.entry.id == "RB-SESSIONS-FLUSH"
    )
    assert hit.entry.services == [] and hit.why.rerank.service.note == "same service"
    other = next(h for h in scenario.recall("flush expired session keys in the cache", 10, services=["checkout-api"]).hits
                 if h.entry.id == "RB-SESSIONS-FLUSH")  # fmt: skip
    assert other.why.rerank.service.note == "unrelated service"


def test_a_runbook_an_incident_cited_scores_same_service_on_that_incident_service(scenario):
    # RB-REDIS-REBUILD-TOPOLOGY names redis-sessions itself; INC-012 cited it, so it was used there too.
    scenario.runbooks.add("RB-DRAIN", "Drain the gateway pods one at a time", ["Cordon", "Drain"])
    incidents = scenario.incidents
    incidents.open("Gateway resets", services=["payments-gateway"], severity="sev3", incident_id="INC-090")
    incidents.add_finding("INC-090", "pods killed mid-request", status="corroborated", runbook_id="RB-DRAIN")
    incidents.close("INC-090")
    hit = next(h for h in scenario.recall("drain the gateway pods one at a time", 10,
                                          services=["payments-gateway"]).hits if h.entry.id == "RB-DRAIN")  # fmt: skip
    assert hit.why.rerank.service.note == "same service"


def test_without_a_catalog_the_service_note_names_the_missing_catalog_not_the_question(memory):
    """The README's tour recalls before it imports the catalog: a topic naming redis-sessions was told "the
    question names no service", when the org had no catalog to recognise any service in."""
    memory.remember({"title": "Eviction storm on redis-sessions", "body": "keys evicted; auth-service slow",
                     "services": ["redis-sessions", "auth-service"]})  # fmt: skip
    topic = "logins slow while redis-sessions evicts keys under memory pressure"
    (hit,) = memory.recall(topic, 5).hits
    assert hit.why.rerank.service.value == 0.0
    assert hit.why.rerank.service.note == rerank.NO_CATALOG
    assert "no service catalog yet" in rerank.NO_CATALOG and "grandbo catalog import FILE" in rerank.NO_CATALOG
    (given,) = memory.recall(topic, 5, services=["checkout-api"]).hits  # no catalog to relate them either
    assert given.why.rerank.service.note == rerank.NO_CATALOG
    assert memory.recall(topic, 5, services=["redis-sessions"]).hits[0].why.rerank.service.note == "same service"
    memory.catalog.import_text(CATALOG)
    (hit,) = memory.recall(topic, 5).hits
    assert hit.why.rerank.service.note == "same service" and hit.why.rerank.service.value == 1.0
    (unnamed, *_) = memory.recall("logins slow while the cache evicts keys under memory pressure", 5).hits
    assert unnamed.why.rerank.service.note == "the question names no service"


def test_weights_are_configurable_per_organization(scenario):
    scenario.org_settings.set_rerank(
        RerankWeights(similarity=1.0, service=0.0, severity=0.0, effectiveness=0.0, age=0.0)
    )
    findings = [h for h in scenario.recall(TOPIC, 5).hits if h.entry.kind.value == "finding"]
    assert findings[0].entry.meta["incident_id"] == "INC-012"  # similarity alone: the text match wins again
    assert findings[0].why.rerank.service.weight == 0.0


def test_explicit_services_override_the_ones_named_in_the_topic(scenario):
    answer = scenario.recall(TOPIC, 5, services=["checkout-api"])
    for hit in answer.hits:
        assert hit.why.rerank.service.value == 0.0


def test_next_recall_reflects_a_new_outcome(scenario):
    before = next(h for h in scenario.recall(TOPIC, 5).hits if h.entry.id == "RB-REDIS-REBUILD-TOPOLOGY")
    ledger = scenario.ledger
    for _ in range(30):
        ledger.record("RB-REDIS-REBUILD-TOPOLOGY", "succeeded", service="redis-sessions")
    after = next(h for h in scenario.recall(TOPIC, 5).hits if h.entry.id == "RB-REDIS-REBUILD-TOPOLOGY")
    assert after.why.rerank.effectiveness.value > before.why.rerank.effectiveness.value
    assert after.score > before.score


def test_old_memories_pay_an_age_penalty(memory):
    memory.remember(
        {
            "title": "disk full on the batch node",
            "body": "logs filled the disk",
            "occurred_at": (utcnow() - timedelta(days=900)).isoformat(),
        }
    )
    memory.remember(
        {
            "title": "disk full on the batch node again",
            "body": "logs filled the disk",
            "occurred_at": (utcnow() - timedelta(days=10)).isoformat(),
        }
    )
    hits = memory.recall("disk full on the batch node because logs filled it").hits
    old = next(h for h in hits if "again" not in h.entry.title)
    assert old.why.rerank.age.value == pytest.approx((900 - 180) / (3 * 365), abs=1e-3)
    assert old.why.rerank.age.contribution == pytest.approx(-0.02 * old.why.rerank.age.value, abs=1e-4)
    assert hits[0].entry.title.endswith("again")


def test_answers_say_whether_anything_close_was_seen_before(memory):
    for n in range(4):
        memory.remember(
            {
                "title": f"redis-sessions eviction storm number {n}",
                "body": "keys evicted under maxmemory",
                "services": ["redis-sessions"],
                "occurred_at": (utcnow() - timedelta(days=10 * n)).isoformat(),
            }
        )
    seen = memory.recall("redis-sessions eviction storm with keys evicted under maxmemory")
    assert seen.seen_before is True and seen.evidence >= 0.31
    assert {hit.label for hit in seen.hits} == {"frequent"}
    novel = memory.recall("the quarterly marketing newsletter storm had a typo in its title about keys")
    assert novel.seen_before is False
    assert all(hit.label == "novel" for hit in novel.hits)
    assert novel.hits  # the nearest memories are still returned, labelled novel, with the honest note
    assert any(note.startswith("no similar past incident") for note in novel.notes)


def test_a_match_is_frequent_from_three_recent_alike_memories():
    from grandbo.model import Entry
    from grandbo.retrieval.verdict import recurrence

    def entry(n, services, kind="finding"):
        now = utcnow()
        return Entry(
            id=f"e{n}", org_id="acme", title="t", body="b", kind=kind, source="admin", tags=[], services=services,
            severity=None, occurred_at=now, status="active", created_at=now, updated_at=now, seq=n,
        )  # fmt: skip

    policy = DEFAULT_POLICY.verdict
    redis = [entry(0, ["redis"]), entry(1, ["redis", "auth"]), entry(2, ["auth"]), entry(3, ["billing"])]
    assert recurrence(redis[0], redis, policy) == "rare"  # two share redis
    assert recurrence(redis[1], redis, policy) == "frequent"  # three share redis or auth
    assert recurrence(redis[3], redis, policy) == "rare"
    facts = [entry(4, [], "fact"), entry(5, [], "fact"), entry(6, [], "runbook"), entry(7, [], "fact")]
    assert recurrence(facts[0], facts, policy) == "frequent"  # no services: three of its kind
    assert recurrence(facts[2], facts, policy) == "rare"


def test_a_memory_two_hops_away_scores_by_hop_distance_not_zero(scenario):
    """Before, the service component was 0 past one hop; now it falls with each hop (0.5, then 0.25)."""
    deeper = CATALOG.replace("  - name: redis-sessions\n", "  - name: redis-sessions\n    depends_on: [redis-disk]\n")
    scenario.catalog.import_text(deeper + "  - name: redis-disk\n")
    scenario.remember({"id": "auth-latency", "kind": "finding", "title": "auth-service latency above 1200ms",
                       "body": "Redis connection reset during key eviction spike; auth-service latency > 1200ms",
                       "services": ["auth-service"]})  # fmt: skip
    answer = scenario.recall(TOPIC, 10, services=["redis-disk"])
    notes = {hit.entry.id: (hit.why.rerank.service.value, hit.why.rerank.service.note) for hit in answer.hits}
    assert notes["RB-REDIS-VOLATILE-LRU-SCALE"] == (0.5, "direct dependency")  # on redis-sessions: one hop
    assert notes["auth-latency"] == (0.25, "2 hops away")  # auth-service -> redis-sessions -> redis-disk
    assert DEFAULT_POLICY.rerank.by_hops(3) == 0.125 and DEFAULT_POLICY.rerank.by_hops(None) == 0.0
