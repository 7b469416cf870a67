"""The ranking policy: one object says how recall ranks, read from the settings that have a knob."""

import json
from pathlib import Path

from grandbo.config import Settings
from grandbo.model import RerankWeights
from grandbo.retrieval.policy import DEFAULT_POLICY, RankingPolicy

ARCHITECTURE = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()


def _shown(value):
    return (
        ", ".join(str(part) for part in value) if isinstance(value, tuple) else "unset" if value is None else str(value)
    )


def test_the_knobs_with_a_setting_keep_its_name_and_default(monkeypatch):
    assert RankingPolicy.from_settings(Settings()) == DEFAULT_POLICY  # the defaults are the settings' own
    monkeypatch.setenv("GRANDBO_LEXICAL_LIMIT", "40")
    monkeypatch.setenv("GRANDBO_VECTOR_MIN_SIMILARITY", "0.3")
    monkeypatch.setenv("GRANDBO_RRF_K", "20")
    policy = RankingPolicy.from_settings(Settings())
    assert (policy.lexical.limit, policy.vector.min_similarity, policy.fusion.rrf_k) == (40, 0.3, 20)
    assert policy.weakest_fused == 1 / (20 + 40)


def test_an_organization_s_weights_replace_the_defaults_only():
    weights = RerankWeights(similarity=1.0, service=0.0)
    policy = DEFAULT_POLICY.with_weights(weights)
    assert policy.rerank.weights == weights and policy.rerank.cosine_band == DEFAULT_POLICY.rerank.cosine_band
    assert DEFAULT_POLICY.with_weights(RerankWeights()) is DEFAULT_POLICY


def test_docs_architecture_lists_every_number_of_the_policy():
    missing = [
        name for name, value, _ in DEFAULT_POLICY.rows() if f"| `{name}` | {_shown(value)} |" not in ARCHITECTURE
    ]
    assert missing == []


def test_a_recall_ranks_with_the_policy_it_explains(grandbo, memory):
    memory.remember({"title": "Redis evicted session keys", "body": "Raise maxmemory.", "kind": "fact"})
    grandbo.policy = RankingPolicy.from_settings(grandbo.settings.model_copy(update={"rrf_k": 7}))
    memory.org_settings.set_rerank(RerankWeights(similarity=0.9, service=0.0, severity=0.0))
    acme = grandbo.org("acme")
    hit = acme.recall("redis evicted session keys", 3).hits[0]
    assert hit.why.rrf_k == 7 and hit.why.rerank.similarity.weight == 0.9
    assert acme.ranking_policy().rerank.weights.similarity == 0.9 and acme.ranking_policy().fusion.rrf_k == 7


def test_settings_policy_shows_the_organization_s_policy(cli):
    cli("settings", "rerank", "--similarity", "0.9")
    shown = json.loads(cli("settings", "policy", "--json").stdout)
    assert shown["rerank"]["weights"]["similarity"] == 0.9 and shown["fusion"]["rrf_k"] == 60
    table = cli("settings", "policy").stdout
    assert "rerank.weights.similarity" in table and "rerank.cosine_band" in table and "GRANDBO_RRF_K" in table
