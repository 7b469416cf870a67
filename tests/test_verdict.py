"""The shipped incident set with the real local model: the re-ranker never buries the clear match, and the
calibrated verdict answers the demo's questions; a provider without a calibration gives no verdict."""

import json

import pytest

from grandbo.config import Settings
from grandbo.errors import InvalidInputError
from grandbo.eval import beir
from grandbo.eval.calibration import Labelled, fit
from grandbo.eval.runner import load_corpus, reference_time, shipped_set
from grandbo.model import Calibration
from grandbo.retrieval import verdict
from grandbo.service import Grandbo


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, model_dir, local_model, shipped_vectors):
    settings = Settings(home=tmp_path_factory.mktemp("verdict"), local_model_dir=model_dir)
    dataset = beir.load(shipped_set(), "dev+test")
    with Grandbo.init(settings, provider=local_model) as grandbo:
        memory = grandbo.org("quillroute", create=True)
        load_corpus(memory, dataset, lambda _: None)
        yield memory, reference_time(dataset)


def ask(shipped, topic, **situation):
    memory, now = shipped
    return memory.recall(topic, 10, now=now, **situation)


@pytest.mark.model
def test_the_exact_identifier_match_stays_first(shipped):
    result = ask(shipped, "Have we seen ERR_CONN_RESET from payments-gateway during a deploy before?")
    first = result.hits[0]
    assert first.entry.id == "INC-038-F1"  # first on both arms; proven runbooks of its neighbours pushed it to #4
    assert first.why.lexical.rank == 1 and first.why.vector.rank == 1
    assert any(hit.why.rerank.final > first.why.rerank.final for hit in result.hits[1:])  # it would have moved
    assert all(a.sort_score > b.sort_score for a, b in zip(result.hits, result.hits[1:], strict=False))
    assert result.seen_before is True


@pytest.mark.model
def test_the_redis_case_ranks_the_eviction_storm_over_the_partition(shipped):
    hits = ask(shipped, "Redis connection reset during key eviction spike; auth-service latency > 1200ms",
               severity="sev2").hits  # fmt: skip
    order = [hit.entry.id for hit in hits]
    assert order[0] == "INC-044-F1" and order.index("INC-044-F1") < order.index("INC-012-F1")
    assert hits[0].why.rerank.service.note == "same service"  # auth-service is named in the topic


@pytest.mark.model
def test_the_readme_paraphrase_is_seen_before(shipped):
    result = ask(shipped, "logins slow while the session cache throws keys away under memory pressure")
    assert result.seen_before is True and result.evidence >= 0.5
    assert result.calibration.startswith("shipped: local:sentence-transformers/all-MiniLM-L6-v2")
    assert {"INC-044-F1", "INC-044-F2", "PM-INC-069"} & {hit.entry.id for hit in result.hits[:3]}


@pytest.mark.model
def test_a_home_printer_with_the_same_error_code_is_not_seen_before(shipped):
    result = ask(shipped, "my home printer shows ERR_CONN_RESET when the kids print homework")
    assert result.seen_before is False and result.evidence < 0.5
    assert any(note.startswith("no similar past incident") for note in result.notes)
    assert all(hit.label == "novel" for hit in result.hits)


@pytest.mark.model
def test_the_context_block_says_the_verdict_first_and_never_offers_weak_hits_as_precedent(shipped):
    memory, _ = shipped
    novel = memory.context(topic="my home printer shows ERR_CONN_RESET when the kids print homework")
    lines = novel.recall.splitlines()
    assert novel.verdict == "no similar past incident" and lines[0].startswith("Verdict: no similar past incident")
    assert lines[1] == "Weakly related memories (not precedent: none of them is this incident):"
    assert len(lines) > 2 and "Relevant past memories:" not in novel.recall  # the hits are there, labelled
    seen = memory.context(topic="logins slow while the session cache throws keys away under memory pressure")
    assert (
        seen.verdict == "seen before"
        and seen.recall.splitlines()[:2] == [seen.recall.splitlines()[0], "Relevant past memories:"]
        and seen.recall.startswith("Verdict: seen before (evidence 0.")
    )


@pytest.mark.model
def test_an_unanswerable_question_of_the_demo_is_not_seen_before(shipped):
    result = ask(shipped, "Has a GPU driver crash ever taken down the address recognition model servers?")
    assert result.seen_before is False


@pytest.mark.model
def test_the_organizations_calibration_wins_over_the_shipped_one(shipped):
    memory, now = shipped
    topic = "logins slow while the session cache throws keys away under memory pressure"
    strict = Calibration(provider="local", model="sentence-transformers/all-MiniLM-L6-v2",
                         features=["top_cosine", "top_coverage"], coefficients=[10.0, 0.0], intercept=-9.0)  # fmt: skip
    memory.org_settings.set_calibration(strict)
    try:
        result = memory.recall(topic, 10, now=now)
        assert result.calibration.startswith("organization:") and result.seen_before is False  # cos 0.52 < 0.9
        other = strict.model_copy(update={"model": "another-model"})
        memory.org_settings.set_calibration(other)  # for another model: the shipped one applies
        assert memory.recall(topic, 10, now=now).calibration.startswith("shipped:")
    finally:
        memory.org_settings.set_calibration(None)
    assert memory.org_settings.calibration() is None


def test_a_provider_without_a_calibration_gives_no_verdict(memory, monkeypatch, tmp_path):
    monkeypatch.setattr(verdict, "SHIPPED", tmp_path)  # as for a hosted provider: nothing shipped
    verdict.shipped.cache_clear()
    try:
        memory.remember({"title": "Eviction storm on redis-sessions", "body": "keys evicted under maxmemory"})
        result = memory.recall("keys evicted on redis-sessions under maxmemory pressure")
    finally:
        verdict.shipped.cache_clear()
    assert result.hits and result.seen_before is None and result.evidence is None
    assert result.calibration == "uncalibrated"
    assert any(note.startswith("uncalibrated") and "grandbo calibrate" in note for note in result.notes)
    assert all(hit.label is None for hit in result.hits)


def test_every_shipped_calibration_loads_for_its_provider():
    files = sorted(verdict.SHIPPED.glob("*.json"))
    assert {path.stem for path in files} >= {"local", "deterministic"}
    for path in files:
        found = Calibration.model_validate(json.loads(path.read_text()))
        assert found.provider == path.stem and found.features == list(verdict.FEATURES)
        assert verdict.shipped(found.provider, found.model) == found
        assert verdict.shipped(found.provider, "some-other-model") is None


def test_a_fit_separates_the_classes_it_was_given():
    rows = [Labelled(f"a{n}", {"top_cosine": 0.6 + n / 100, "top_coverage": 0.5}, True) for n in range(6)]
    rows += [Labelled(f"u{n}", {"top_cosine": 0.3 + n / 100, "top_coverage": 0.1}, False) for n in range(6)]
    calibration = fit(rows, "local", "m", "toy")
    assert all((verdict.probability(calibration, row.values) >= 0.5) == row.answerable for row in rows)
    assert calibration.fitted_on == "toy: 6 answerable, 6 unanswerable queries"
    with pytest.raises(InvalidInputError, match="answerable"):
        fit(rows[:6] + rows[6:8], "local", "m", "toy")  # two unanswerable queries are too few


@pytest.mark.model
def test_the_readme_tour_s_two_questions_get_the_verdicts_its_text_explains(tmp_path, model_dir):
    """The tour asked only the paraphrase, over its four memories, and printed NO SIMILAR PAST INCIDENT (0.09)
    where the text suggested a match: it now asks as an investigator would first, and says why the paraphrase
    is not a recurrence there (README, "The command line")."""
    from pathlib import Path

    settings = Settings(home=tmp_path / "tour", local_model_dir=model_dir)
    with Grandbo.init(settings, embedding="local") as grandbo:
        memory = grandbo.org("default", create=True)
        storm = memory.remember({
            "title": "Eviction storm on redis-sessions", "kind": "finding",
            "body": "maxmemory reached; keys evicted under allkeys-lru; auth-service p99 above 1200ms",
            "tags": ["INC-044", "maxmemory-policy"], "services": ["redis-sessions", "auth-service"], "severity": "sev2",
        })  # fmt: skip
        memory.import_file(Path(__file__).resolve().parent.parent / "examples" / "incidents.jsonl")
        named = memory.recall("logins slow while redis-sessions evicts keys under memory pressure")
        paraphrase = memory.recall("logins slow while the session cache throws keys away under memory pressure")
    assert named.seen_before is True and named.hits[0].entry.id == storm.id
    assert paraphrase.seen_before is False and paraphrase.hits[0].entry.id == storm.id
    assert paraphrase.hits[0].why.vector.rank == 1 and paraphrase.hits[0].label == "novel"
    # The paraphrase does share two words with the storm; the tour's text said it shared none.
    assert set(paraphrase.hits[0].why.lexical.terms) == {"session", "key"}
    tour = (Path(__file__).resolve().parent.parent / "README.md").read_text().split("## The command line")[1]
    explained = " ".join(tour.split("```")[2].split())
    assert "no shared term" not in explained and "naming nothing the memory names" not in explained
    assert "cos 0.38" in explained and "(0.09)" in explained and "(0.96)" in explained


def test_an_organization_removes_its_own_calibration_and_the_model_s_shipped_one_applies_again(memory):
    """An org that fit a bad calibration could only fit again: nothing removed it. Removal leaves the history,
    recall goes back to the shipped calibration, and removing what is not there says so with the remedy."""
    from grandbo.errors import NotFoundError

    space = "deterministic:feature-hash-v1"
    memory.remember({"title": "Eviction storm on redis-sessions", "body": "keys evicted under maxmemory"})
    topic = "keys evicted on redis-sessions under maxmemory pressure"
    shipped = memory.org_settings.calibration_in_force()
    assert shipped.applies == "shipped" and shipped.space == space and shipped.unused is None
    assert shipped.calibration == verdict.shipped("deterministic", "feature-hash-v1")
    bad = Calibration(provider="deterministic", model="feature-hash-v1", features=["top_cosine", "top_coverage"],
                      coefficients=[0.0, 0.0], intercept=-9.0, fitted_on="a bad fit")  # fmt: skip
    memory.org_settings.set_calibration(bad, actor="alice")
    assert memory.org_settings.calibration_in_force().applies == "organization"
    assert memory.recall(topic).calibration.startswith("organization:")

    after = memory.org_settings.remove_calibration(actor="bob")
    assert after.applies == "shipped" and after.calibration == shipped.calibration
    assert memory.org_settings.calibration() is None
    assert memory.recall(topic).calibration == shipped.calibration.label
    history = memory._documents.history("settings", "calibration")
    assert [(event["type"], event["actor"]) for event in history][-2:] == [
        ("settings.calibration", "alice"), ("settings.calibration", "bob")
    ]  # fmt: skip
    assert history[-2]["data"]["fitted_on"] == "a bad fit" and history[-1]["data"] is None

    with pytest.raises(NotFoundError) as refused:
        memory.org_settings.remove_calibration()
    assert "has no calibration of its own to remove" in refused.value.message
    assert f"the calibration shipped for {space}" in refused.value.message
    assert "grandbo calibrate DIR --org acme" in refused.value.message

    # Fit for another model (the org changed provider): kept, shown as unused, and removable.
    memory.org_settings.set_calibration(bad.model_copy(update={"model": "another-model"}))
    now = memory.org_settings.calibration_in_force()
    assert now.applies == "shipped" and now.unused is not None and now.unused.model == "another-model"
    assert memory.org_settings.remove_calibration().unused is None


def test_each_candidates_own_probability_is_that_of_its_features_as_a_recalls_best():
    calibration = Calibration(
        provider="p", model="m", features=list(verdict.FEATURES), coefficients=[4.0, 2.5], intercept=-3.0
    )
    cosines, coverages = [0.91, None, 0.2, 0.55], [0.4, 0.75, None, 1.0]
    alone = verdict.each_alone(calibration, cosines, coverages)
    assert alone == [verdict.probability(calibration, verdict.features([c], [v])) for c, v in zip(cosines, coverages)]
    assert len(set(alone)) == 4  # each candidate's own features moved its probability
