"""The seed's Redis case end to end with the real local model, on both backends: an Alertmanager alert through
the webhook of a real server -> the plan kept with the alert -> first runbook RB-REDIS-VOLATILE-LRU-SCALE,
citing INC-044, with its win rate and attempts from the shipped ledger (Postgres under `make test-all`)."""

from __future__ import annotations

import pytest

from grandbo.eval import beir
from grandbo.eval.runner import load_corpus, shipped_set
from grandbo.service import Grandbo
from tests.serving import serving

pytestmark = pytest.mark.model

SUMMARY = "Redis connection reset during key eviction spike; auth-service latency > 1200ms"
ALERTMANAGER = {
    "version": "4", "status": "firing", "receiver": "grandbo", "groupKey": "{}:{alertname=\"RedisEvictions\"}",
    "truncatedAlerts": 0, "groupLabels": {"alertname": "RedisEvictions"}, "commonLabels": {}, "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "alerts": [{"status": "firing",
                "labels": {"alertname": "RedisEvictions", "service": "auth-service", "severity": "critical"},
                "annotations": {"summary": SUMMARY},
                "startsAt": "2026-11-30T18:05:00Z", "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph", "fingerprint": "6e1f0c0f2a1b9d3c"}],
}  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True)
def test_the_seed_redis_alert_gets_the_volatile_lru_runbook_first_with_its_record(settings, model_dir):
    with Grandbo.init(settings.model_copy(update={"local_model_dir": model_dir}), embedding="local") as grandbo:
        memory = grandbo.org("quillroute", create=True)
        load_corpus(memory, beir.load(shipped_set(), "dev+test"), lambda _: None)
        _, key = memory.keys.create("write")
        with serving(grandbo) as served, served.client(key) as client:
            (received,) = client.post("/v1/webhooks/alertmanager", json=ALERTMANAGER).json()["alerts"]
            plan = client.get(f"/v1/alerts/{received['id']}").json()["plan"]
            asked = client.post("/v1/triage", json={"alert_id": received["id"]}).json()
        record = memory.ledger.effectiveness("RB-REDIS-VOLATILE-LRU-SCALE")
    for answer in (plan, asked):
        first = answer["runbooks"][0]
        assert first["id"] == "RB-REDIS-VOLATILE-LRU-SCALE"
        assert (first["attempts"], first["successes"], first["win_rate"]) == (50, 47, record.win_rate)
        assert "INC-044" in {c["incident_id"] for c in answer["citations"]}
        assert set(first["cites"]) <= {c["id"] for c in answer["citations"]}
        assert answer["seen_before"] is True and answer["no_precedent"] is None
        assert answer["mechanisms"][0]["incident_id"] == "INC-044"
