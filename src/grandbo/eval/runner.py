"""`grandbo eval`: load a BEIR-layout set into a fresh temporary org and score every arm of `recall`.

The corpus goes in through the same write seam as any memory, in strict mode (anything short of a
vector for every document is an error), and every query goes through `OrgMemory.recall`, so the
numbers measure the product, not a side path.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.embeddings.base import Provider, get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.errors import InvalidInputError, InvalidTopicError, ProviderMismatchError
from grandbo.eval import beir
from grandbo.eval.metrics import mrr_at, ndcg_at, percentile, recall_at
from grandbo.eval.orgs import new_eval_org, stale_eval_orgs
from grandbo.files import writable
from grandbo.memory import OrgMemory
from grandbo.model import Arm, utcnow
from grandbo.service import Grandbo
from grandbo.tiers.transfer import entry_from_record

ARMS: tuple[Arm, ...] = (Arm.LEXICAL, Arm.VECTOR, Arm.HYBRID, Arm.RERANKED)
LOAD_BATCH = 1_000
Progress = Callable[[str], None]


@dataclass
class ArmRun:
    """Rankings and timings of one arm over every query."""

    rankings: dict[str, list[str]] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)  # the score of each ranked entry
    top_scores: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, float] = field(default_factory=dict)  # re-ranked recall's best-match evidence
    seen_before: dict[str, bool] = field(default_factory=dict)
    recall_ms: list[float] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)
    refused: int = 0


@dataclass
class EvalReport:
    name: str
    lines: list[dict[str, Any]]
    separation: dict[str, Any] | None
    corpus_size: int
    queries: int
    runs: dict[str, ArmRun] = field(default_factory=dict)
    dataset: beir.Dataset | None = None

    def line(self, arm: str) -> dict[str, Any]:
        for line in self.lines:
            if line["arm"] == arm:
                return line
        raise InvalidInputError(
            f"no arm {arm!r} in this evaluation; arms: {', '.join(line['arm'] for line in self.lines)}",
            detail={"arm": arm},
        )


def _round(value: float) -> float:
    return round(value, 4)


def _mean(values: Iterable[float]) -> float | None:
    """The mean, rounded; None when there is nothing to average (a split of unanswerable queries only)."""
    listed = list(values)
    return _round(statistics.fmean(listed)) if listed else None


def score_arm(name: str, arm: str, run: ArmRun, dataset: beir.Dataset) -> dict[str, Any]:
    """The metrics line of one arm (judged queries only; refused queries count as misses)."""
    judged = dataset.judged
    rows = [(run.rankings.get(query.id, []), dataset.qrels[query.id]) for query in judged]
    mean = statistics.fmean if rows else (lambda _: 0.0)
    return {
        "set": name,
        "arm": arm,
        "nDCG@10": _round(mean([ndcg_at(ranked, rel, 10) for ranked, rel in rows])),
        "R@5": _round(mean([recall_at(ranked, rel, 5) for ranked, rel in rows])),
        "R@10": _round(mean([recall_at(ranked, rel, 10) for ranked, rel in rows])),
        "MRR@10": _round(mean([mrr_at(ranked, rel, 10) for ranked, rel in rows])),
        "recall_p50_ms": _round(percentile(run.recall_ms, 50)),
        "recall_p95_ms": _round(percentile(run.recall_ms, 95)),
        "embed_p50_ms": _round(percentile(run.embed_ms, 50)),
        "refused": run.refused,
    }


def separation(runs: dict[str, ArmRun], dataset: beir.Dataset) -> dict[str, Any] | None:
    """Mean top score of answerable vs unanswerable queries, per arm, when the set marks some."""
    unanswerable = [query.id for query in dataset.unanswerable]
    if not unanswerable:
        return None
    answerable = [query.id for query in dataset.judged]
    figures: dict[str, Any] = {}
    for arm, run in runs.items():
        figures[arm] = {
            "answerable_mean_top": _mean(run.top_scores.get(qid, 0.0) for qid in answerable),
            "unanswerable_mean_top": _mean(run.top_scores.get(qid, 0.0) for qid in unanswerable),
            "unanswerable_empty": sum(1 for qid in unanswerable if not run.rankings.get(qid)),
        }
        if run.seen_before:
            said_yes = [run.seen_before.get(qid, False) for qid in answerable]
            said_no = [not run.seen_before.get(qid, False) for qid in unanswerable]
            figures[arm] |= {
                "answerable_mean_evidence": _mean(run.evidence.get(q, 0.0) for q in answerable),
                "unanswerable_mean_evidence": _mean(run.evidence.get(q, 0.0) for q in unanswerable),
                "seen_before_when_answerable": _mean(said_yes),
                "novel_when_unanswerable": _mean(said_no),
                "precision_seen_before": _round(sum(said_yes) / max(1, sum(said_yes) + len(said_no) - sum(said_no))),
            }
    return {
        "set": dataset.name,
        "separation": figures,
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
    }


def load_corpus(memory: OrgMemory, dataset: beir.Dataset, progress: Progress) -> None:
    """The set's catalog and ledger, if it has them, then the corpus through the write seam (strict): a bad
    topology.yaml or outcomes.jsonl is refused before minutes of embedding, not after."""
    if dataset.catalog:
        memory.catalog.import_text(dataset.catalog, actor="eval")
    if dataset.outcomes:
        count = memory.ledger.import_outcomes(dataset.outcomes, prefix="eval", actor="eval")
        progress(f"loaded {count} runbook outcomes")
    entries = [entry_from_record(record) for record in dataset.corpus]
    for start in range(0, len(entries), LOAD_BATCH):
        memory.remember_many(entries[start : start + LOAD_BATCH], actor="eval", strict=True)
        progress(f"loaded {min(start + LOAD_BATCH, len(entries))}/{len(entries)} documents")


def reference_time(dataset: beir.Dataset) -> datetime:
    """'Now' for the set: its newest memory, so that ages (and results) do not drift with the calendar."""
    dated = [r for r in dataset.corpus if r.get("metadata", {}).get("occurred_at")]
    # Read as the write seam reads them (ISO text with or without an offset, or epoch seconds), so "now" is
    # the newest memory's own time, whatever form the set gives it in.
    parsed = [entry_from_record(record).occurred_at for record in dated]
    return max((when for when in parsed if when is not None), default=utcnow())


def run_queries(memory: OrgMemory, dataset: beir.Dataset, arms: Sequence[Arm], k: int = 10) -> dict[str, ArmRun]:
    queries = dataset.judged + dataset.unanswerable
    now = reference_time(dataset)
    runs: dict[str, ArmRun] = {}
    for arm in arms:
        run = runs[arm.value] = ArmRun()
        for query in queries:
            try:
                result = memory.recall(
                    query.text,
                    k,
                    arm=arm,
                    services=query.metadata.get("services"),
                    severity=query.metadata.get("severity"),
                    now=now,
                )
            except InvalidTopicError:
                run.refused += 1
                continue
            run.rankings[query.id] = [hit.entry.id for hit in result.hits]
            run.scores[query.id] = [hit.sort_score for hit in result.hits]
            run.top_scores[query.id] = result.hits[0].sort_score if result.hits else 0.0
            if result.evidence is not None and result.seen_before is not None:
                run.evidence[query.id], run.seen_before[query.id] = result.evidence, result.seen_before
            run.recall_ms.append(result.timings.total_ms)
            if arm is not Arm.LEXICAL:
                run.embed_ms.append(result.timings.embed_ms)
    return runs


def evaluate(
    directory: Path,
    settings: Settings,
    embedding: str,
    *,
    arms: Sequence[Arm] = ARMS,
    cache: bool = True,
    split: str = "test",
    progress: Progress = lambda _: None,
) -> EvalReport:
    """Score `arms` of recall on the `split` of the data set in `directory` with the named provider."""
    dataset = beir.load(directory, split)
    if not dataset.judged:  # only unanswerable queries: every metric would be a 0 that means nothing
        raise InvalidInputError(
            f"{directory}: the {split!r} split has {len(dataset.unanswerable)} unanswerable queries and none with a "
            f"relevant document in qrels/{split}.tsv, and the metrics score judged queries only. Add judgments, "
            "or fit the verdict on these with `grandbo calibrate`.",
            detail={"unanswerable": len(dataset.unanswerable)},
        )
    if dataset.problems:
        progress(f"{len(dataset.problems)} repairs while loading {dataset.name}; the first ones:")
        for problem in dataset.problems[:5]:
            progress(f"  {problem}")
    with tempfile.TemporaryDirectory(prefix="grandbo-eval-") as scratch:
        # Inside the configured database (a temporary org), else in a scratch store.
        run_settings = settings if settings.database_url else settings.at_home(Path(scratch))
        provider: Provider = get_provider(embedding, settings)
        cached = CachedProvider(provider, settings.home / "cache" / "embeddings.db") if cache else None
        try:
            grandbo = Grandbo.init(run_settings, embedding=embedding, provider=cached or provider)
        except ProviderMismatchError as error:  # the configured store's space is not the one to evaluate
            if cached:
                cached.close()
            space = error.detail.get("store_space")
            raise ProviderMismatchError(
                f"grandbo eval runs inside the configured store (GRANDBO_DATABASE_URL), in a temporary "
                f"organization, and that store's embedding space is {space}: it can evaluate only that provider "
                f"here. Evaluate {embedding!r} in a temporary embedded store instead by running the command "
                f"without GRANDBO_DATABASE_URL (never reembed a store to evaluate a provider).",
                detail=error.detail,
            ) from error
        if settings.database_url:  # what killed runs left in the configured store (`eval/orgs.py`)
            for stale in stale_eval_orgs(grandbo.org_created()):
                grandbo.drop_org(stale)
                progress(f"removed {stale}, the temporary organization of an evaluation that did not finish")
        org_id = new_eval_org()
        try:
            memory = grandbo.org(org_id, create=True)
            load_corpus(memory, dataset, progress)
            runs = run_queries(memory, dataset, arms)
        finally:
            grandbo.drop_org(org_id)
            grandbo.close()
            if cached:
                cached.close()
    lines = [score_arm(dataset.name, arm, run, dataset) for arm, run in runs.items()]
    return EvalReport(
        dataset.name, lines, separation(runs, dataset), len(dataset.corpus), len(dataset.judged), runs, dataset
    )


def run_file(path: Path, arm: str) -> Path:
    """Where `write_runs` puts an arm's run: `run.trec` becomes `run.lexical.trec`, `run.hybrid.trec`, ..."""
    return path.with_name(f"{path.stem}.{arm}{path.suffix or '.trec'}")


def check_run_files(path: Path, arms: Sequence[Arm] = ARMS) -> None:
    """Refuse, before any work, a run-file path whose files could not be written (an evaluation can take
    minutes): a folder given for a file, a parent that is a file, a folder or file without write access."""
    if path.is_dir():
        raise InvalidInputError(
            f"--run-file {path} is a folder; give a file name in it, e.g. {path / 'run.trec'} "
            "(each arm's run is written beside it: run.lexical.trec, run.hybrid.trec, ...).",
            detail={"path": str(path)},
        )
    for target in (run_file(path, arm.value) for arm in arms):
        writable(target, "--run-file's run")


def write_runs(report: EvalReport, path: Path) -> list[Path]:
    """One TREC run file per arm (`qid Q0 docid rank score tag`), the documents under their own ids:
    `run.trec` becomes `run.lexical.trec`, `run.hybrid.trec`, ... Returns the files written."""
    assert report.dataset is not None
    written = []
    path.parent.mkdir(parents=True, exist_ok=True)
    for arm, run in report.runs.items():
        target = run_file(path, arm)
        with target.open("w", encoding="utf-8") as handle:
            for query_id, ranked in run.rankings.items():
                for rank, (entry_id, score) in enumerate(zip(ranked, run.scores[query_id], strict=True), start=1):
                    handle.write(f"{query_id} Q0 {report.dataset.original(entry_id)} {rank} {score:.6f} {arm}\n")
        written.append(target)
    return written


def parse_gates(specs: Sequence[str]) -> list[tuple[str, float]]:
    """`nDCG@10=0.7` -> ("nDCG@10", 0.7); an unknown metric or a bad value is an error with the remedy."""
    gates = []
    for spec in specs:
        metric, _, value = spec.partition("=")
        metric = metric.strip()
        try:
            bar = float(value)
        except ValueError:
            bar = float("nan")
        if metric not in GATED or not 0.0 <= bar <= 1.0:  # NaN fails the comparison too
            raise InvalidInputError(
                f"--min {spec!r}: expected METRIC=VALUE with METRIC one of {', '.join(GATED)} and VALUE between 0 "
                "and 1 (every metric is), e.g. --min nDCG@10=0.7",
                detail={"min": spec},
            )
        gates.append((metric, bar))
    return gates


GATED = ("nDCG@10", "R@5", "R@10", "MRR@10")


def shortfalls(report: EvalReport, gates: Sequence[tuple[str, float]], arm: str = "hybrid") -> list[str]:
    """The gates the named arm misses, as sentences (empty: all met)."""
    line = report.line(arm)
    return [f"{arm} {metric} {line[metric]:.4f} < {bar}" for metric, bar in gates if line[metric] < bar]


def shipped_set(name: str = "incidents") -> Path:
    """A data set that ships inside the package."""
    return Path(__file__).parent / "data" / name
