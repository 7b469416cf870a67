"""`grandbo eval --from-history` and `grandbo calibrate --from-history`: an organization learns from its own past
incidents (`eval/history.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

from grandbo.cli.app import _errors, _open, _print_json, state
from grandbo.cli.terminal import say


def _print_summary(summary: dict[str, Any]) -> None:
    dev, test = summary["dev"], summary["test"]
    say(
        f"history of {summary['org']!r}: {summary['incidents']} past incidents ({summary['imported']} imported, "
        f"{summary['native']} closed here, {summary['unlabelled']} without labels), {summary['documents']} memories "
        f"in the set ({summary['documents_cut']} left empty once their incident's question was cut out)"
    )
    say(
        f"  dev  (older, and {summary['undated']} undated): {dev['answerable']} answerable, "
        f"{dev['unanswerable']} unanswerable (category seen once, held out)"
    )
    since = f"from {summary['test_from'][:10]}" if summary["test_from"] else "none dated"
    say(f"  test (newer, {since}): {test['answerable']} answerable, {test['unanswerable']} unanswerable")
    skipped = summary["not_asked"]
    if any(skipped.values()):
        say(
            f"  not asked: {skipped['no_symptoms']} say too little of what was seen, {skipped['nothing_left']} "
            "have nothing left to find once that is taken out (their memories stay in the corpus)"
        )


def eval_from_history(
    org: str | None, embedding: str | None, as_json: bool, cache: bool, gates: Sequence[tuple[str, float]], arm: str
) -> None:
    """Score every arm on the org's history set; exit 1 when the test split's `arm` misses a gate."""
    from grandbo.cli.evaluation import _print_separation
    from grandbo.embeddings.base import get_provider
    from grandbo.eval.history import build
    from grandbo.eval.history_runs import evaluate_history

    with _errors():
        with _open() as grandbo:  # read through the org's handle, then closed: the org is not written to
            built = build(grandbo.org(org))
            name = embedding or state.settings.embedding_provider or grandbo.space.provider
        get_provider(name, state.settings)  # an unknown name, before the corpus is embedded
        report = evaluate_history(built, state.settings, name, cache=cache, progress=lambda m: say(m, err=True))
    if as_json:
        for item in [report.summary, *report.lines, *report.separations]:
            _print_json(item)
    else:
        _print_summary(report.summary)
        for line in report.lines:
            say(
                f"{line['split']:<5} {line['arm']:<8} nDCG@10 {line['nDCG@10']:.4f}  R@5 {line['R@5']:.4f}  "
                f"R@10 {line['R@10']:.4f}  MRR@10 {line['MRR@10']:.4f}  own incident R@10 {line['R@10_own']:.4f}  "
                f"p50 {line['recall_p50_ms']:.2f} ms  refused {line['refused']}"
            )
        for found in report.separations:
            _print_separation({**found, "set": found["split"]})
    test = {line["arm"]: line for line in report.lines if line["split"] == "test"}
    missed = [f"test {arm} {m} {test[arm][m]:.4f} < {bar}" for m, bar in gates if arm in test and test[arm][m] < bar]
    for sentence in missed:
        say(f"below the bar: {sentence}", err=True)
    if gates and arm not in test:
        say("below the bar: the test split has no judged query to hold the bar to", err=True)
    if missed or (gates and arm not in test):
        raise typer.Exit(1)


def calibrate_from_history(org: str | None, as_json: bool) -> None:
    """Fit the org's verdict on its older incidents, score it on the newer ones, store it when there are enough."""
    from grandbo.eval.history import build
    from grandbo.eval.history_runs import calibrate_history

    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        fitted = calibrate_history(build(memory), state.settings, grandbo.space.provider)
        memory.org_settings.set_calibration(fitted.calibration, actor="cli")  # the one write, once it is fit
        stored = memory.org_settings.calibration()
    assert stored is not None
    if as_json:
        _print_json({"org": memory.org, "set": fitted.summary, "calibration": stored.model_dump(),
                     "dev": fitted.dev, "test": fitted.test})  # fmt: skip
        return
    _print_summary(fitted.summary)
    say(f"calibrated {stored.provider}:{stored.model} for {memory.org!r} on {stored.fitted_on}; stored")
    for split, found in (("dev", fitted.dev), ("test", fitted.test)):
        shown = {k: "-" if v is None else f"{v:.2f}" for k, v in found.items()}
        say(
            f"  {split:<4} ({found['answerable']} answerable, {found['unanswerable']} unanswerable): accuracy "
            f"{shown['accuracy']}, seen before when answerable {shown['seen_before_when_answerable']}, novel when "
            f"unanswerable {shown['novel_when_unanswerable']}, AUC {shown['auc']}"
        )
    say(f"to go back to the model's shipped calibration, if any: grandbo settings calibration --remove "
        f"--org {memory.org}")  # fmt: skip
