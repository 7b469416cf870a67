"""Scoring recall and fitting the verdict on an organization's own history (`eval/history.py`).

The set is written in BEIR layout to a temporary folder and goes through the same runner and the same fit as a
shipped set (`eval/runner.py`, `eval/calibration.py`): loaded into a temporary organization (a temporary embedded
store, or a temporary org of the configured store for `eval`), every query through `recall`. The organization the
history is read from is only read; `calibrate_history` returns the fitted calibration and the caller stores it.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grandbo.config import Settings
from grandbo.errors import InvalidInputError
from grandbo.eval import beir
from grandbo.eval.calibration import Labelled, fit, labelled_queries, scores
from grandbo.eval.history import ANSWERABLE, UNANSWERABLE, HistorySet
from grandbo.eval.metrics import recall_at
from grandbo.eval.runner import ArmRun, Progress, evaluate, score_arm, separation
from grandbo.model import Calibration
from grandbo.retrieval import verdict

SPLITS = ("dev", "test")
MIN_ANSWERABLE, MIN_UNANSWERABLE = 20, 5  # on the dev split, which the verdict is fit on


@dataclass
class HistoryReport:
    summary: dict[str, Any]
    lines: list[dict[str, Any]]  # one per split and arm
    separations: list[dict[str, Any]]  # one per split that has unanswerable queries


@dataclass
class HistoryCalibration:
    summary: dict[str, Any]
    calibration: Calibration
    dev: dict[str, Any]  # how the verdict does on the queries it was fit on
    test: dict[str, Any]  # and on the newer ones it never saw


def evaluate_history(
    built: HistorySet, settings: Settings, embedding: str, *, cache: bool = True, progress: Progress = lambda _: None
) -> HistoryReport:
    """Every arm scored on the history set, dev and test apart."""
    if not built.count(ANSWERABLE):
        raise InvalidInputError(
            f"Organization {built.org!r} has {len(built.incidents)} past incidents but none to score recall on: "
            f"{_roles(built)}. An incident is asked when it says what was seen (a record's symptoms, or a "
            "post-mortem's summary, impact or timeline) and another incident shares one of its labels or it has none.",
            detail=built.summary(),
        )
    with tempfile.TemporaryDirectory(prefix="grandbo-history-") as folder:
        built.write(Path(folder))
        report = evaluate(Path(folder), settings, embedding, cache=cache, split="dev+test", progress=progress)
    assert report.dataset is not None
    lines: list[dict[str, Any]] = []
    separations: list[dict[str, Any]] = []
    for split in SPLITS:
        part = _part(report.dataset, built, split)
        if not part.judged and not part.unanswerable:
            continue
        for arm, run in report.runs.items():
            line = score_arm(part.name, arm, run, part)
            lines.append({**line, "split": split, "R@10_own": _own_recall(run, part)})
        found = separation(report.runs, part)
        if found is not None:
            separations.append({**found, "split": split})
    return HistoryReport(built.summary(), lines, separations)


def _part(dataset: beir.Dataset, built: HistorySet, split: str) -> beir.Dataset:
    queries = [query for query in dataset.queries if query.metadata.get("split") == split]
    return replace(dataset, name=f"{built.org} history", queries=queries, split=split)


def _own_recall(run: ArmRun, dataset: beir.Dataset) -> float:
    """Share of each judged query's own incident memories (grade 2) in its top 10: did recall find the incident
    itself, whatever it did with the rest of its category."""
    rows = [
        recall_at(run.rankings.get(query.id, []), {d: g for d, g in dataset.qrels[query.id].items() if g >= 2}, 10)
        for query in dataset.judged
    ]
    return round(statistics.fmean(rows), 4) if rows else 0.0


def _roles(built: HistorySet) -> str:
    counts = built.summary()
    asked = {role: built.count(role) for role in (ANSWERABLE, UNANSWERABLE)}
    return (
        f"{asked[ANSWERABLE]} answerable, {asked[UNANSWERABLE]} unanswerable (their category seen once), "
        f"{counts['not_asked']['no_symptoms']} with too little said of what was seen, "
        f"{counts['not_asked']['nothing_left']} with nothing left to find once that is taken out"
    )


def missing(built: HistorySet) -> tuple[int, int]:
    """How many answerable and unanswerable incidents the dev split lacks to fit the verdict on."""
    return (
        max(0, MIN_ANSWERABLE - built.count(ANSWERABLE, "dev")),
        max(0, MIN_UNANSWERABLE - built.count(UNANSWERABLE, "dev")),
    )


def _refuse(built: HistorySet, answerable: int, unanswerable: int, short: tuple[int, int]) -> None:
    raise InvalidInputError(
        f"Not enough history in organization {built.org!r} to fit its own verdict, so nothing was stored: its "
        f"dev split (the older incidents, and the undated ones) has {answerable} answerable and {unanswerable} "
        f"unanswerable incidents, and fitting needs at least {MIN_ANSWERABLE} and {MIN_UNANSWERABLE}: "
        f"{short[0]} more answerable and {short[1]} more unanswerable are missing. An incident is unanswerable "
        "when no other one has its category (its labels): import more history (`grandbo import-from`) with "
        "its categories as labels, or fit on a labelled set with `grandbo calibrate DIR`.",
        detail={"answerable": answerable, "unanswerable": unanswerable, "missing_answerable": short[0],
                "missing_unanswerable": short[1], **built.summary()},
    )  # fmt: skip


def calibrate_history(built: HistorySet, settings: Settings, embedding: str, cache: bool = True) -> HistoryCalibration:
    """The verdict's calibration fit on the dev split (older incidents) and scored on the test split (newer);
    refused, before anything is embedded, when the dev split is short of `MIN_ANSWERABLE` answerable or
    `MIN_UNANSWERABLE` unanswerable incidents."""
    short = missing(built)
    if any(short):
        _refuse(built, built.count(ANSWERABLE, "dev"), built.count(UNANSWERABLE, "dev"), short)
    with tempfile.TemporaryDirectory(prefix="grandbo-history-") as folder:
        built.write(Path(folder))
        _, provider, rows = labelled_queries(Path(folder), settings, embedding, "dev+test", cache=cache)
    dev = [row for row in rows if built.split[row.query_id] == "dev"]
    test = [row for row in rows if built.split[row.query_id] == "test"]
    answerable = sum(1 for row in dev if row.answerable)
    short = (max(0, MIN_ANSWERABLE - answerable), max(0, MIN_UNANSWERABLE - (len(dev) - answerable)))
    if any(short):  # recall refused some questions as too short to recall by
        _refuse(built, answerable, len(dev) - answerable, short)
    calibration = fit(dev, provider.name, provider.model, f"{built.org} history dev")
    return HistoryCalibration(
        built.summary(), calibration, verdict_scores(dev, calibration), verdict_scores(test, calibration)
    )


def verdict_scores(rows: Sequence[Labelled], calibration: Calibration) -> dict[str, Any]:
    """`calibration.scores` and the accuracy: the share of queries the verdict says right (seen before when
    answerable, novel when not)."""
    right = [(verdict.probability(calibration, row.values) >= calibration.threshold) == row.answerable for row in rows]
    return {**scores(rows, calibration), "accuracy": round(statistics.fmean(right), 4) if right else None}
