"""The composite re-ranker: the operationally proven match outranks the closer text match, and says why."""

from datetime import timedelta

import pytest

from grandbo.model import RerankWeights, utcnow

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


def test_proven_runbook_on_the_same_service_outranks_the_closer_text_match(scenario):
    by_text = scenario.recall(TOPIC, 5, arm="hybrid")
    text_order = [hit.entry.meta.get("incident_id") for hit in by_text.hits if hit.entry.kind.value == "finding"]
    assert text_order[0] == "INC-012"  # the closer text match

    answer = scenario.recall(TOPIC, 5, severity="sev2")
    findings = [hit for hit in answer.hits if hit.entry.kind.value == "finding"]
    first, second = findings[0], findings[1]
    assert first.entry.meta["incident_id"] == "INC-044" and second.entry.meta["incident_id"] == "INC-012"
    why, other = first.why.rerank, second.why.rerank
    assert why.service.value == 1.0 and why.service.note == "same service"  # auth-service is named
    assert other.service.value == 0.5 and other.service.note == "direct dependency"
    assert why.severity.value == 1.0 and other.severity.value == 0.75
    assert why.effectiveness.value == pytest.approx(48 / 52, abs=1e-4)  # Beta(1+47, 1+3) mean
    assert "47/50 succeeded" in why.effectiveness.note
    assert other.effectiveness.value == pytest.approx(3 / 12, abs=1e-4)
    assert why.similarity.value < other.similarity.value  # INC-012 is closer by text, and it shows
    for evidence in (why, other):
        parts = [evidence.similarity, evidence.service, evidence.severity, evidence.effectiveness]
        total = sum(part.contribution for part in parts) + evidence.age.contribution
        assert evidence.final == pytest.approx(total, abs=1e-3)
    assert first.score == why.final and first.why.fused_rank is not None and first.why.lexical is not None


def test_weights_are_configurable_per_organization(scenario):
    scenario.settings.set_rerank(RerankWeights(similarity=1.0, service=0.0, severity=0.0, effectiveness=0.0, age=0.0))
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
    from grandbo.retrieval.recall import recurrence

    def entry(n, services, kind="finding"):
        now = utcnow()
        return Entry(
            id=f"e{n}", org_id="acme", title="t", body="b", kind=kind, source="admin", tags=[], services=services,
            severity=None, occurred_at=now, status="active", created_at=now, updated_at=now, seq=n,
        )  # fmt: skip

    redis = [entry(0, ["redis"]), entry(1, ["redis", "auth"]), entry(2, ["auth"]), entry(3, ["billing"])]
    assert recurrence(redis[0], redis) == "rare"  # two share redis
    assert recurrence(redis[1], redis) == "frequent"  # three share redis or auth
    assert recurrence(redis[3], redis) == "rare"
    facts = [entry(4, [], "fact"), entry(5, [], "fact"), entry(6, [], "runbook"), entry(7, [], "fact")]
    assert recurrence(facts[0], facts) == "frequent"  # no services: three of its kind
    assert recurrence(facts[2], facts) == "rare"
