"""`grandbo triage`: an alert (a JSON file, a vendor's webhook payload, or flags) -> a ranked, cited plan."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, _read_json, app, read_bytes
from grandbo.cli.options import SeverityOption
from grandbo.cli.terminal import say
from grandbo.errors import InvalidInputError
from grandbo.ingest import adapters

if TYPE_CHECKING:
    from grandbo.triage import TriagePlan


def _alerts(path: Path | None, source: str | None, flags: dict[str, Any]) -> list[Any]:
    if path is None:
        if not flags.get("summary"):
            raise InvalidInputError("Give an alert: a JSON file, or --summary 'what fired, in a sentence'.", detail={})
        return [flags]
    if source:
        return [alert for alert in adapters.parse(source, read_bytes(path)) if alert.status == "firing"]
    data = _read_json(path, _ALERT_FILE)
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} must hold one JSON object (an alert).", detail={"path": str(path)})
    vendor = next((name for name, keys in _VENDOR_KEYS if "summary" not in data and keys <= set(data)), None)
    if vendor is not None:
        raise InvalidInputError(
            f"{path} looks like a vendor's webhook payload, not an alert: add --source {vendor} (sources: "
            f"{', '.join(adapters.ADAPTERS)}), or give an alert file with a summary.",
            detail={"path": str(path), "source": vendor},
        )
    return [{**data, **{k: v for k, v in flags.items() if v}}]


# What an alert file holds, as a file that is not JSON is told.
_ALERT_FILE = 'an alert ({"summary": ..., "service": ..., "severity": ...}) or, with --source, a webhook payload'
# What each vendor's payload has at its top (a Grafana payload has Alertmanager's `alerts` too).
_VENDOR_KEYS = (("pagerduty", {"event"}), ("opsgenie", {"action", "alert"}), ("alertmanager", {"alerts"}))


def _show(plan: TriagePlan) -> None:
    say(f"Alert: {plan.query}")
    say(f"  {plan.recurrence} ({plan.similar_alerts} like it in 30 days); plan by {plan.path}, "
        f"recall {plan.recall_arm}, {plan.timings.total_ms:.0f} ms")  # fmt: skip
    for mechanism in plan.mechanisms:
        say(f"  mechanism ({mechanism.confidence:.2f}): {mechanism.text} [{', '.join(mechanism.cites)}]")
    for n, runbook in enumerate(plan.runbooks, start=1):
        mttr = f", MTTR {runbook.mttr_median_s / 60:.0f} min" if runbook.mttr_median_s else ""
        say(f"  {n}. {runbook.id} ({runbook.confidence:.2f}): {runbook.title}")
        say(f"     {runbook.successes}/{runbook.attempts} worked ({runbook.scope}), win rate "
            f"{runbook.win_rate:.2f} [{runbook.interval[0]:.2f}, {runbook.interval[1]:.2f}]{mttr}; "
            f"cites {', '.join(runbook.cites)}")  # fmt: skip
    if plan.outlier:
        say(f"  outlier: {plan.outlier} (of this service's alerts in 30 days, {plan.outlier_share or 0:.0%} alike)")
    if plan.origin:
        say(f"  probable origin: {plan.origin.service}: {plan.origin.why}")
    for change in plan.changes[:3]:
        say(
            f"  changed: {change.kind} {change.id} on {change.service}, {change.minutes_before:.0f} min before "
            f"(hops: {change.hops}), score {change.score:.2f}{f'; {change.record.text}' if change.record else ''}"
        )
    for incident in plan.related_incidents:
        say(f"  open on a related service: {incident.id} {incident.title} ({', '.join(incident.services)})")
    if plan.no_precedent:
        say(f"  NO PRECEDENT: {plan.no_precedent.reason}")
        for item in plan.no_precedent.collect:
            say(f"   - collect {item}")
    if plan.narrative:
        say(f"  {plan.narrative.summary}")
        for step in plan.narrative.steps:
            say(f"   * {step.text} [{', '.join(step.cites)}]")
    for note in plan.notes:
        say(f"  note: {note}")


@app.command()
def triage(
    path: Annotated[
        Path | None,
        typer.Argument(help="An alert as JSON: summary, service, severity, description.", exists=True, dir_okay=False),
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="The file is this vendor's webhook payload: " + ", ".join(adapters.ADAPTERS))
    ] = None,
    summary: Annotated[str | None, typer.Option(help="What fired, in a sentence.")] = None,
    service: Annotated[str | None, typer.Option(help="The alerting service.")] = None,
    severity: SeverityOption = None,
    description: Annotated[str, typer.Option(help="The alert's description.")] = "",
    no_llm: Annotated[bool, typer.Option("--no-llm", help="Do not ask the configured LLM to narrate.")] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Turn an alert into a ranked, cited action plan (runbooks with their record, or what to collect first)."""
    flags = {"summary": summary, "service": service, "severity": severity, "description": description}
    with _errors(), _open() as grandbo:
        # The local model loads now, not inside the plan's recall budget (a fresh process's first query took 2.2 s of
        # a 1.5 s budget, and every plan from the command line rested on the lexical arm alone). A hosted provider is
        # left to the budget: one that does not answer would hold the plan its whole HTTP timeout (review 25).
        if grandbo.space.provider == "local":
            grandbo.health.warm_up()
        memory = grandbo.org(org)
        plans = [memory.triage(alert, narrate=not no_llm) for alert in _alerts(path, source, flags)]
    if as_json:
        _print_json([plan.model_dump(mode="json") for plan in plans] if path and source else plans[0].model_dump(
            mode="json"))  # fmt: skip
        return
    for plan in plans:
        _show(plan)
