"""`grandbo incident|runbook|outcome|catalog|settings`: the incident-memory commands of the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, _print_list, _read_text, app
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.errors import InvalidInputError
from grandbo.retrieval.languages import LATIN_LANGUAGES
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.tiers.incident_model import IncidentStatus

incident_app = command_group("incident", "Incidents: open, add findings, close (corroborated findings become memory).")
runbook_app = command_group("runbook", "Runbooks and their effectiveness.")
catalog_app = command_group("catalog", "The service catalog (topology).")
settings_app = command_group("settings", "Per-organization settings.")

# What more than one of these commands takes, declared once.
IncidentArg = Annotated[str, typer.Argument(help="Incident id.")]
RunbookArg = Annotated[str, typer.Argument(help="Runbook id.")]
RunbookUsedOption = Annotated[str | None, typer.Option(help="Runbook used.")]
ServicesOption = Annotated[list[str] | None, typer.Option("--service", help="Service (repeatable).")]
TtmOption = Annotated[float | None, typer.Option(help="Time to mitigate, seconds.")]


@incident_app.command("open")
def incident_open(
    title: Annotated[
        str | None, typer.Argument(help="What is happening (default with --from-*: from the alerts).")
    ] = None,
    service: Annotated[list[str] | None, typer.Option("--service", help="Affected service (repeatable).")] = None,
    severity: Annotated[str | None, typer.Option(help="sev1..sev5.")] = None,
    symptom: Annotated[list[str] | None, typer.Option("--symptom", help="Observed symptom (repeatable).")] = None,
    alert: Annotated[list[str] | None, typer.Option("--alert", help="Alert reference (repeatable).")] = None,
    incident_id: Annotated[str | None, typer.Option("--id", help="Incident id (default: generated).")] = None,
    from_alerts: Annotated[
        str | None,
        typer.Option(
            "--from-alerts",
            help="Received alerts' ids, comma-separated: the incident lists "
            "them, their services, and starts when the first fired.",
        ),
    ] = None,
    from_group: Annotated[
        str | None, typer.Option("--from-group", help="An alert group's id: the incident is opened from its alerts.")
    ] = None,
    org: OrgOption = None,
) -> None:
    """Open an incident (by hand, or from received alerts or an alert group)."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        if from_alerts is not None or from_group is not None:
            if from_alerts is not None and from_group is not None:
                raise InvalidInputError("Give --from-alerts or --from-group, not both.", detail={})
            if service or severity or symptom or alert:
                raise InvalidInputError("--from-alerts and --from-group take the services, severity and alerts from "
                                        "the alerts: leave out --service, --severity, --symptom and --alert.",
                                        detail={})  # fmt: skip
            if from_group is not None:
                if incident_id:
                    raise InvalidInputError("--from-group names the incident after the group: leave out --id.",
                                            detail={})  # fmt: skip
                incident = memory.alert_groups.open_incident(from_group.strip(), title=title, actor="cli")
            else:
                ids = [part for part in from_alerts.split(",") if part.strip()]  # type: ignore[union-attr]
                incident = memory.alert_groups.open_from_alerts(ids, title=title, incident_id=incident_id,
                                                                actor="cli")  # fmt: skip
            count = len(incident.alerts)
            say(f"opened {incident.id}: {incident.title} ({count} alert{'' if count == 1 else 's'})")
            return
        if not title:
            raise InvalidInputError("An incident needs a title (what is happening), or --from-alerts / --from-group.",
                                    detail={})  # fmt: skip
        incident = memory.incidents.open(
            title, services=service or [], severity=severity, symptoms=symptom or [], alerts=alert or [],
            incident_id=incident_id, actor="cli",
        )  # fmt: skip
    say(f"opened {incident.id}")


@incident_app.command("finding")
def incident_finding(
    incident_id: IncidentArg,
    summary: Annotated[str, typer.Argument(help="The finding in one line.")],
    status: Annotated[str, typer.Option(help="hypothesis, corroborated or refuted.")] = "hypothesis",
    mechanism: Annotated[str, typer.Option(help="How it failed.")] = "",
    component: Annotated[str, typer.Option(help="What failed.")] = "",
    symptom: Annotated[str, typer.Option(help="What it looked like.")] = "",
    root_cause: Annotated[str, typer.Option(help="Why.")] = "",
    remediation: Annotated[str, typer.Option(help="What fixed it.")] = "",
    runbook: RunbookUsedOption = None,
    service: ServicesOption = None,
    org: OrgOption = None,
) -> None:
    """Add a finding to an incident."""
    with _errors(), _open() as grandbo:
        finding = grandbo.org(org).incidents.add_finding(
            incident_id, summary, status=status, mechanism=mechanism, component=component, symptom=symptom,
            root_cause=root_cause, remediation=remediation, runbook_id=runbook, services=service or [], actor="cli",
        )  # fmt: skip
    say(f"{incident_id}: finding {finding.id} ({finding.status.value})")


@incident_app.command("update-finding")
def incident_update_finding(
    incident_id: IncidentArg,
    finding_id: Annotated[str, typer.Argument(help="Finding id (f1, f2, ...).")],
    status: Annotated[str | None, typer.Option(help="hypothesis, corroborated or refuted.")] = None,
    root_cause: Annotated[str | None, typer.Option(help="Why.")] = None,
    remediation: Annotated[str | None, typer.Option(help="What fixed it.")] = None,
    org: OrgOption = None,
) -> None:
    """Change a finding; on a closed incident its memory follows (corrected, written or retired)."""
    changes = {k: v for k, v in {"status": status, "root_cause": root_cause, "remediation": remediation}.items() if v}
    with _errors(), _open() as grandbo:
        finding = grandbo.org(org).incidents.update_finding(incident_id, finding_id, actor="cli", **changes)
    say(f"{incident_id}: finding {finding.id} is {finding.status.value}")


@incident_app.command("close")
def incident_close(
    incident_id: IncidentArg,
    resolution: Annotated[str, typer.Option(help="How it ended.")] = "",
    runbook: RunbookUsedOption = None,
    succeeded: Annotated[bool | None, typer.Option("--succeeded/--failed", help="Did the runbook work?")] = None,
    ttm: TtmOption = None,
    org: OrgOption = None,
) -> None:
    """Close an incident: corroborated findings become memory, the runbook's outcome enters the ledger."""
    with _errors(), _open() as grandbo:
        incident = grandbo.org(org).incidents.close(
            incident_id, resolution=resolution, runbook_used=runbook, succeeded=succeeded, time_to_mitigate_s=ttm,
            actor="cli",
        )  # fmt: skip
    written = ", ".join(incident.memory.values()) or "nothing (no corroborated finding)"
    say(f"closed {incident.id}; memory: {written}; sync {incident.memory_sync}")


@incident_app.command("show")
def incident_show(
    incident_id: IncidentArg,
    history: Annotated[bool, typer.Option(help="Include every event.")] = False,
    org: OrgOption = None,
) -> None:
    """Print an incident as JSON."""
    with _errors(), _open() as grandbo:
        incidents = grandbo.org(org).incidents
        out: dict[str, Any] = {"incident": incidents.get(incident_id).model_dump(mode="json")}
        if history:
            out["history"] = incidents.history(incident_id)
    _print_json(out)


@incident_app.command("list")
def incident_list(
    status: Annotated[IncidentStatus | None, typer.Option(help="open or closed.")] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """List incidents."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        found = memory.incidents.find(status)
    empty = (
        f"no {status.value} incidents in org {memory.org!r} (`grandbo incident list` shows them all)"
        if status
        else f"no incidents in org {memory.org!r} yet; open one with `grandbo incident open TITLE --org {memory.org}`"
    )
    _print_list(found, as_json, empty, lambda i: f"{i.id}  {i.status.value:<6} {i.severity or '':<5} {i.title}")


@incident_app.command("sync")
def incident_sync(incident_id: IncidentArg, org: OrgOption = None) -> None:
    """Finish a write-behind that failed, or repair what one left: make memory match the incident (an active entry
    for each corroborated finding, none for the others) and leave in the ledger only its latest close's result."""
    with _errors(), _open() as grandbo:
        report = grandbo.org(org).incidents.sync(incident_id, actor="cli")
    _print_json(report.model_dump())


@runbook_app.command("add")
def runbook_add(
    runbook_id: Annotated[str, typer.Argument(help="Runbook id, e.g. RB-REDIS-VOLATILE-LRU-SCALE.")],
    title: Annotated[str, typer.Option(help="What it does.")],
    step: Annotated[list[str], typer.Option("--step", help="One step (repeat, in order).")],
    description: Annotated[str, typer.Option(help="When to use it.")] = "",
    service: ServicesOption = None,
    org: OrgOption = None,
) -> None:
    """Remember a runbook (its id is what outcomes refer to)."""
    with _errors(), _open() as grandbo:
        entry = grandbo.org(org).runbooks.add(runbook_id, title, step, description=description,
                                                services=service or [], actor="cli")  # fmt: skip
    say(f"remembered runbook {entry.id}")


@runbook_app.command("stats")
def runbook_stats(
    runbook_id: RunbookArg,
    service: Annotated[str | None, typer.Option(help="Only outcomes on this service.")] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Attempts, successes, win rate (Beta posterior) with its 90% interval, MTTR median and trend."""
    with _errors(), _open() as grandbo:
        ledger = grandbo.org(org).ledger
        ledger.known_runbook(runbook_id, asking=True)  # a mistyped id is refused, naming close ones, not 0 of 0
        record = ledger.effectiveness(runbook_id, service)
        overall = ledger.effectiveness(runbook_id) if service else record
    if as_json:
        _print_json(record.model_dump(mode="json"))
        return
    where = f" on {record.service}" if record.service else ""
    if not (record.attempts or record.recommended or record.thumbs_up or record.thumbs_down):
        counted = overall.attempts + overall.recommended + overall.thumbs_up + overall.thumbs_down
        say(
            f"{record.runbook_id}{where}: no outcome recorded{where} yet"
            + (f" ({counted} on every service: `grandbo runbook stats {record.runbook_id}`)" if service else "")
            + f"; `grandbo outcome {record.runbook_id} --kind succeeded{f' --service {service}' if service else ''}`"
            " (or failed, rated) records one, and `grandbo incident close ... --runbook` does on a close"
        )
        return
    low, high = record.interval
    mttr = f"{record.mttr_median_s / 60:.1f} min" if record.mttr_median_s is not None else "unknown"
    say(
        f"{record.runbook_id}{where}: {record.successes} of {record.attempts} attempts succeeded "
        f"(recommended {record.recommended} times)"
    )
    say(f"  win rate {record.win_rate:.2f} (90% interval {low:.2f}-{high:.2f})")
    say(f"  time to mitigate: median {mttr}, trend {record.mttr_trend}")
    say(f"  ratings: {record.thumbs_up} up, {record.thumbs_down} down")


@app.command("outcome")
def outcome(
    runbook_id: RunbookArg,
    kind: Annotated[str, typer.Option(help="recommended, executed, succeeded, failed or rated.")],
    incident: Annotated[str | None, typer.Option(help="Incident id.")] = None,
    service: Annotated[str | None, typer.Option(help="Service it ran on.")] = None,
    ttm: TtmOption = None,
    rating: Annotated[int | None, typer.Option(help="+1 or -1 (with --kind rated).")] = None,
    comment: Annotated[str, typer.Option(help="Operator's comment.")] = "",
    org: OrgOption = None,
) -> None:
    """Record what a runbook did (the effectiveness ledger)."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).ledger.record(
            runbook_id, kind, incident_id=incident, service=service, time_to_mitigate_s=ttm, rating=rating,
            comment=comment, actor="cli",
        )  # fmt: skip
    say(f"recorded {kind} for {runbook_id}")


@catalog_app.command("import")
def catalog_import(
    path: Annotated[Path, typer.Argument(help="YAML or JSON catalog.", exists=True, dir_okay=False)],
    replace: Annotated[bool, typer.Option(help="Remove services missing from the file.")] = False,
    org: OrgOption = None,
) -> None:
    """Import services and their dependencies."""
    with _errors(), _open() as grandbo:
        text = _read_text(path)
        services = grandbo.org(org).catalog.import_text(text, replace=replace, actor="cli")
    say(f"imported {len(services)} services")


@catalog_app.command("show")
def catalog_show(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """Print the catalog."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        topology = memory.catalog.topology()
    if as_json:
        _print_json(topology.to_dict())
        return
    if not topology.names:
        say(
            f"no services in the catalog of org {memory.org!r} yet; import one with "
            f"`grandbo catalog import FILE --org {memory.org}` (YAML or JSON: services with their depends_on)"
        )
    for name in topology.names:
        service = topology.services.get(name)
        say(f"{name}: depends on {', '.join(service.depends_on) if service and service.depends_on else '-'}")


_WEIGHTS = DEFAULT_POLICY.rerank.weights  # the defaults an organization's own weights replace


@settings_app.command("rerank")
def settings_rerank(
    similarity: Annotated[float | None, typer.Option(help=f"Weight of similarity ({_WEIGHTS.similarity}).")] = None,
    service: Annotated[float | None, typer.Option(help=f"Weight of the service match ({_WEIGHTS.service}).")] = None,
    severity: Annotated[float | None, typer.Option(help=f"Weight of the severity match ({_WEIGHTS.severity}).")] = None,
    effectiveness: Annotated[
        float | None, typer.Option(help=f"Weight of the runbook win rate ({_WEIGHTS.effectiveness}).")
    ] = None,
    age: Annotated[float | None, typer.Option(help=f"Weight of the age penalty, lambda ({_WEIGHTS.age}).")] = None,
    org: OrgOption = None,
) -> None:
    """Show, or change, the organization's re-ranking weights (the ranking policy's `rerank.weights`; the rest
    of the policy: `grandbo settings policy`)."""
    given = {"similarity": similarity, "service": service, "severity": severity, "effectiveness": effectiveness,
             "age": age}  # fmt: skip
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        changes = {k: v for k, v in given.items() if v is not None}
        if not changes:
            current = memory.ranking_policy().rerank.weights
        else:  # merged into the stored weights (unreadable ones: mended, those not given take their defaults)
            current = memory.org_settings.change_rerank(changes, actor="cli")
    _print_json(current.model_dump())


@settings_app.command("policy")
def settings_policy(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """Show how the organization's recall ranks: every number of the ranking policy (arms, candidate depths,
    RRF k, floors, bands, re-rank weights, verdict), with what it means."""
    with _errors(), _open() as grandbo:
        policy = grandbo.org(org).ranking_policy()
    if as_json:
        _print_json(policy.model_dump(mode="json"))
        return
    rows = [(name, _shown(value), meaning) for name, value, meaning in policy.rows()]
    name_width, value_width = (max(len(row[i]) for row in rows) for i in (0, 1))
    for name, value, meaning in rows:
        say(f"{name:<{name_width}}  {value:<{value_width}}  {meaning}")


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(str(part) for part in value)
    return "unset" if value is None else str(value)


@settings_app.command("language")
def settings_language(
    language: Annotated[
        str | None,
        typer.Argument(
            metavar="LANG", help=f"auto (detect each text's language), or one of {', '.join(LATIN_LANGUAGES)}."
        ),
    ] = None,
    org: OrgOption = None,
) -> None:
    """Show, or declare, the language the organization's entries are indexed and its topics stemmed in."""
    with _errors(), _open() as grandbo:
        settings = grandbo.org(org).org_settings
        if language is None:
            say(f"language: {settings.language()}")
            return
        changed = settings.set_language(language, actor="cli")
    say(f"language: {changed['language']} ({changed['rederived']} entries' terms derived again)")


@settings_app.command("learning")
def settings_learning(
    auto_apply: Annotated[
        bool | None,
        typer.Option("--auto-apply/--review", help="Learned notes apply at once, or wait for review (default)."),
    ] = None,
    org: OrgOption = None,
) -> None:
    """Show, or change, whether learned notes apply without an admin's review."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        if auto_apply is not None:
            memory.org_settings.set_auto_apply_learned(auto_apply, actor="cli")
        enabled = memory.org_settings.auto_apply_learned()
    say("learned notes apply at once (auto-apply)" if enabled else "learned notes wait for review")


@settings_app.command("redaction")
def settings_redaction(
    add: Annotated[
        list[str] | None, typer.Option("--add", help="NAME=REGEX: a pattern of this org, masked too (repeatable).")
    ] = None,
    remove: Annotated[list[str] | None, typer.Option("--remove", help="Drop one of this org's patterns.")] = None,
    disable: Annotated[list[str] | None, typer.Option("--disable", help="Switch a default pattern off.")] = None,
    enable: Annotated[list[str] | None, typer.Option("--enable", help="Switch a default pattern on again.")] = None,
    org: OrgOption = None,
) -> None:
    """Show, or change, the patterns masked before text is stored, embedded, indexed or sent to an LLM."""
    from grandbo.redaction import described

    pairs = [item.split("=", 1) for item in add or []]
    if any(len(pair) != 2 for pair in pairs):
        say("error: --add takes NAME=REGEX", err=True)
        raise typer.Exit(2)
    with _errors(), _open() as grandbo:
        settings = grandbo.org(org).org_settings
        if pairs or remove or disable or enable:
            current = settings.set_redaction(add=dict(pairs), remove=remove or [], disable=disable or [],
                                             enable=enable or [], actor="cli")  # fmt: skip
        else:
            current = settings.redaction()
    _print_json(described(current))


@settings_app.command("calibration")
def settings_calibration(
    remove: Annotated[
        bool, typer.Option("--remove", help="Remove the organization's own calibration (its history is kept).")
    ] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show which calibration the seen-before verdict uses (the organization's own, the one shipped for the
    model, or none), or remove the organization's own."""
    from grandbo.tiers.org_settings import FIT_ONE

    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        now = (
            memory.org_settings.remove_calibration(actor="cli")
            if remove
            else memory.org_settings.calibration_in_force()
        )
    if as_json:
        _print_json(now.model_dump(mode="json"))
        return
    if remove:
        say(f"removed the calibration of org {memory.org!r} (its history is kept)")
    if now.calibration is None:
        say(
            f"verdict calibration for {now.space}: none, so recall gives no seen-before verdict (uncalibrated); "
            f"{FIT_ONE.format(org=memory.org)}"
        )
    else:
        whose = "the organization's own" if now.applies == "organization" else "the one shipped with Grandbo"
        fitted = f", fitted on {now.calibration.fitted_on}" if now.calibration.fitted_on else ""
        say(f"verdict calibration for {now.space}: {whose}{fitted}")
    if now.unused is not None:
        say(
            f"the organization's own calibration is for {now.unused.provider}:{now.unused.model}, not this model: "
            f"kept but not used (`grandbo settings calibration --remove --org {memory.org}` removes it)"
        )
