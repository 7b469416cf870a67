"""How recall ranks, in one declarative object (the way Graphiti's `SearchConfig` recipes are declared).

    topic ─► lexical arm (BM25, evidence floor) ─┐
          └► vector arm (cosine, floor) ─────────┴► RRF (k) ─► composite re-rank within bands ─► k ─► verdict

`RankingPolicy` holds every number that shapes a ranking: the arms and their candidate depths, the RRF
constant, the floors, the relevance bands, the re-rank weights and the components' constants, and the
verdict's calibration rules. Those with a setting (`GRANDBO_LEXICAL_LIMIT`, `GRANDBO_RRF_K`, ...) are read
from `Settings` by `RankingPolicy.from_settings`; the others are fixed here, each with the reason it has
its value. Recall, the re-ranker, `grandbo settings policy`, docs/architecture.md ("The ranking policy",
checked by a test) and every hit's explanation read from it. An organization's own re-rank weights
(`grandbo settings rerank`) replace `rerank.weights` for its recalls (`with_weights`).

Some fields are read from `DEFAULT_POLICY`, this module's declaration, not from a process's policy: BM25's
`bm25_k1` and `bm25_b` (each org's index is built with them, and kept), the ledger's
`min_service_results` and `win_rate_prior` (its summaries, also shown by `grandbo runbook stats`, are
computed with them) and the plan's `changes` (triage ranks changes with it; `grandbo bench changes` tunes a
copy). Changing one is changing its declaration here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from grandbo.config import Settings
from grandbo.model import RerankWeights

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _setting(name: str) -> Any:
    """The default of a setting: a knob with a setting has its default there, once."""
    return Settings.model_fields[name].default


class Floor(NamedTuple):
    """The lexical arm's evidence floor (`LexicalIndex.search`): the share of the topic's idf a match must
    carry, at most `cap` idfs of a term found in one document, over at most `terms` of the topic's terms."""

    min_coverage: float = 0.0
    cap: float | None = None
    terms: int | None = None


NO_FLOOR = Floor()  # the arm alone, and an exact identifier


class LexicalPolicy(BaseModel):
    """The lexical arm: BM25 over the org's index, its candidates held to an evidence floor beside the vector arm."""

    model_config = _FROZEN

    limit: int = Field(_setting("lexical_limit"), description="Candidates the arm returns (GRANDBO_LEXICAL_LIMIT).")
    min_coverage: float = Field(
        _setting("lexical_min_coverage"),
        description="Evidence floor beside the vector arm: the share of the topic's idf a match must carry "
        "(GRANDBO_LEXICAL_MIN_COVERAGE); the arm alone has none.",
    )
    floor_cap: float | None = Field(
        _setting("lexical_floor_cap"),
        description="The most the floor asks, in idfs of a term found in one memory (GRANDBO_LEXICAL_FLOOR_CAP).",
    )
    floor_terms: int | None = Field(
        _setting("lexical_floor_terms"),
        description="A longer topic is held to the floor of one this many terms long (GRANDBO_LEXICAL_FLOOR_TERMS).",
    )
    bm25_k1: float = Field(1.2, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(
        0.75, description="BM25 length normalisation (Lucene's; as good or better than 0.5 on the dev splits)."
    )

    @property
    def floor(self) -> Floor:
        """The evidence floor the arm's list is held to beside the vector arm."""
        return Floor(self.min_coverage, self.floor_cap, self.floor_terms)


class VectorPolicy(BaseModel):
    """The vector arm: exact cosine over the active embedding space (HNSW on large Postgres orgs)."""

    model_config = _FROZEN

    limit: int = Field(_setting("vector_limit"), description="Candidates the arm returns (GRANDBO_VECTOR_LIMIT).")
    min_similarity: float | None = Field(
        _setting("vector_min_similarity"),
        description="Cosine floor (GRANDBO_VECTOR_MIN_SIMILARITY); unset: the provider's calibrated floor.",
    )


class FusionPolicy(BaseModel):
    """Reciprocal Rank Fusion of the two arms: rrf(d) = sum of 1 / (k + rank)."""

    model_config = _FROZEN

    rrf_k: int = Field(_setting("rrf_k"), description="RRF constant (GRANDBO_RRF_K; Cormack et al. 2009).")


class RerankPolicy(BaseModel):
    """The composite re-ranker (`retrieval.rerank`): operational evidence on top of fused relevance."""

    model_config = _FROZEN

    weights: RerankWeights = Field(
        default_factory=RerankWeights,
        description="Weights of similarity, service, severity, effectiveness and age: an organization's own "
        "(`grandbo settings rerank`) replace these defaults.",
    )
    cosine_band: float = Field(
        0.05,
        description="A candidate whose cosine is more than this below the strongest remaining fused candidate's "
        "cannot take its place (chosen on the dev splits, docs/evaluation.md).",
    )
    coverage_band: float = Field(
        0.10, description="The same band on the lexical arm's idf coverage (chosen on the dev splits)."
    )
    neutral: float = Field(0.5, description="A component's value when nothing is known (severity, untried runbook).")
    same_service: float = Field(1.0, description="Service component of a memory on a service the question names.")
    direct_dependency: float = Field(0.5, description="Service component one dependency hop away.")
    hop_decay: float = Field(
        0.5,
        description="Each hop past the first multiplies the service component by this (two hops: 0.25, three: "
        "0.125); before it, a service two hops away scored 0.",
    )
    severity_tiers: float = Field(4.0, description="Severity component: 1 - |tier difference| / this.")
    min_service_results: int = Field(
        3, description="Results a runbook needs on the question's service before that service's win rate is used."
    )
    win_rate_prior: tuple[float, float] = Field(
        (1.0, 1.0), description="Beta prior (successes, failures) of a runbook's win rate: untried reads 0.5."
    )
    age_grace_days: float = Field(180, description="Days before the age penalty starts.")
    age_full_days: float = Field(3 * 365, description="Days over which the age penalty then grows to 1.")
    score_step: float = Field(
        1e-6, description="A hit kept by a band under one of lower composite is ranked this far below it."
    )

    def by_hops(self, hops: int | None) -> float:
        """The service component of a memory `hops` dependency hops from the question's service (None: unrelated)."""
        if hops is None:
            return 0.0
        if hops == 0:
            return self.same_service
        return self.direct_dependency * self.hop_decay ** (hops - 1)


class ChangePolicy(BaseModel):
    """How a plan ranks the changes before an alert (`triage.changes`): score = sum of weight x component. The
    weights, the half-life, the burst gap and `blame_at` were chosen on the scenario generator's dev seeds 0-9
    (`benchmarks/changes.py --tune`); its report is on held-out seeds."""

    model_config = _FROZEN

    recency_half_life_minutes: float = Field(
        40.0,
        description="Recency component: 1 for a change at the first alert it could explain (of the alert's burst, "
        "on its service or one depending on it), halving every this many minutes before.",
    )
    after_start: float = Field(
        0.1, description="Recency component of a change after the first alert it could explain (too late to cause it)."
    )
    burst_gap_minutes: float = Field(
        8.0,
        description="Alerts on the path belong to this alert's burst while each is at most this many minutes before "
        "the next; the burst's first alert is when the trouble began.",
    )
    same_service: float = Field(1.0, description="Nearness of a change to an alerting service when on that service.")
    direct_dependency: float = Field(0.7, description="Nearness of a change one dependency hop upstream of it.")
    hop_decay: float = Field(0.7, description="Each further hop upstream multiplies the nearness by this.")
    recency_weight: float = Field(
        0.25, description="Weight of recency (how shortly before the first alert the change could explain)."
    )
    topology_weight: float = Field(
        0.25, description="Weight of topology: how near (by hops) it is to the alerting services it is upstream of."
    )
    explains_weight: float = Field(
        0.6,
        description="Weight of how much of the burst it explains: the share of the services alerting in this alert's "
        "burst that its service is upstream of (or is).",
    )
    blame_at: float = Field(
        0.9,
        description="The top change is named the probable origin when its score is this or more (and it came "
        "before the first alert it could explain).",
    )
    history_days: int = Field(90, description="How far back earlier changes of the same kind are looked for.")
    history_changes: int = Field(5, description="The most earlier changes one record counts (the latest).")
    explained: int = Field(3, description="The top changes whose record (what followed earlier ones) is read.")
    max_changes: int = Field(10, description="Changes a plan lists, best first.")
    related_hops: int = Field(3, description="Open incidents this many hops away or fewer are related.")

    def by_hops(self, hops: int) -> float:
        """The nearness of a change `hops` hops upstream of an alerting service (1 on the service itself)."""
        return self.same_service if hops == 0 else self.direct_dependency * self.hop_decay ** (hops - 1)


class VerdictPolicy(BaseModel):
    """The seen-before verdict (`retrieval.verdict`): a calibrated probability, never a bar on raw scores."""

    model_config = _FROZEN

    features: tuple[str, ...] = Field(
        ("top_cosine", "top_coverage"), description="Features of a recall the calibration weighs."
    )
    calibrations: tuple[str, ...] = Field(
        ("organization", "shipped"),
        description="Whose calibration applies, first found first: the organization's own (`grandbo calibrate`), "
        "then the one shipped for the provider and model; none: no verdict (uncalibrated).",
    )
    # A question whose only precedent waits for its vector would hear "no similar past incident" about this
    # often. 10% keeps that under half of the calibration's own misses (27% of the incident set's answerable
    # test questions) and lets an org of 20 memories keep its verdict with one in flight.
    max_waiting: float = Field(
        0.10,
        description="No verdict while this share of memories or more wait for their vector (docs/architecture.md, "
        "'Answering honestly').",
    )
    recent_days: int = Field(365, description="A hit's recurrence label counts strong matches this recent.")
    frequent_at: int = Field(3, description="Strong matches sharing a service that make a hit 'frequent'.")


class RankingPolicy(BaseModel):
    """Every number that shapes a ranking: the arms, fusion, re-ranking and the verdict."""

    model_config = _FROZEN

    arms: tuple[str, ...] = Field(
        ("lexical", "vector", "hybrid", "reranked"),
        description="What recall can run: one arm alone, their fusion, or the fusion re-ranked (the default).",
    )
    max_k: int = Field(100, description="The most hits one recall returns.")
    lexical: LexicalPolicy = Field(default_factory=LexicalPolicy)
    vector: VectorPolicy = Field(default_factory=VectorPolicy)
    fusion: FusionPolicy = Field(default_factory=FusionPolicy)
    rerank: RerankPolicy = Field(default_factory=RerankPolicy)
    verdict: VerdictPolicy = Field(default_factory=VerdictPolicy)
    changes: ChangePolicy = Field(default_factory=ChangePolicy)

    @classmethod
    def from_settings(cls, settings: Settings) -> RankingPolicy:
        """The policy of a process: the knobs that have a setting read from it, the rest as declared here."""
        return cls(
            lexical=LexicalPolicy(
                limit=settings.lexical_limit,
                min_coverage=settings.lexical_min_coverage,
                floor_cap=settings.lexical_floor_cap,
                floor_terms=settings.lexical_floor_terms,
            ),
            vector=VectorPolicy(limit=settings.vector_limit, min_similarity=settings.vector_min_similarity),
            fusion=FusionPolicy(rrf_k=settings.rrf_k),
        )

    def with_weights(self, weights: RerankWeights) -> RankingPolicy:
        """This policy with an organization's own re-rank weights."""
        if weights == self.rerank.weights:
            return self
        return self.model_copy(update={"rerank": self.rerank.model_copy(update={"weights": weights})})

    @property
    def weakest_fused(self) -> float:
        """The weakest fused score a candidate can have: last place in one arm only."""
        return 1.0 / (self.fusion.rrf_k + max(self.lexical.limit, self.vector.limit))

    def rows(self) -> Iterator[tuple[str, Any, str]]:
        """(dotted name, value, meaning) of every number of the policy, in declaration order (the table of
        docs/architecture.md and `grandbo settings policy`)."""
        yield from _rows(self, "")


def _rows(model: BaseModel, prefix: str) -> Iterator[tuple[str, Any, str]]:
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, RerankWeights):
            for weight, about in type(value).model_fields.items():
                meaning = about.description or f"weight of the {weight} component"
                yield f"{prefix}{name}.{weight}", getattr(value, weight), meaning
        elif isinstance(value, BaseModel):
            yield from _rows(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value, field.description or ""


DEFAULT_POLICY = RankingPolicy()
