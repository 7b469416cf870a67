"""`grandbo change`: record a change by hand (a deploy no source reports) and list what changed."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_list
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.errors import InvalidInputError, NotFoundError, validation_fields
from grandbo.model import utcnow
from grandbo.tiers.change_model import URL_RULE, Change, ChangeKind, NewChange
from grandbo.urls import web_url_problem
from grandbo.values import IsoTime

if TYPE_CHECKING:
    from grandbo.tiers.changes import Changes

change_app = command_group("change", "Change events: deploys, config pushes, flag flips (what changed, and when).")


def _iso_time(text: str) -> datetime:
    """An option's time: ISO 8601 only, as every face reads one. Typer reads a datetime as pydantic does, which
    took a number for seconds since 1970 (`--at 1733400000` was 2024-12-05), where the webhooks refuse one."""
    try:
        return _ISO_TIME.validate_python(text)
    except ValidationError as error:
        reason = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        raise typer.BadParameter(f"{reason}; a time without a zone is UTC") from None


_ISO_TIME: TypeAdapter[datetime] = TypeAdapter(IsoTime)
Time = Annotated[
    datetime | None,
    typer.Option(
        parser=_iso_time, metavar="TIME", help="ISO 8601 (2026-11-30T14:02:00Z); a time without a zone is UTC."
    ),
]


@change_app.command("add")
def change_add(
    service: Annotated[str, typer.Option(help="The service changed, as the catalog names it (or an alias).")],
    summary: Annotated[str, typer.Option(help="What changed, in a sentence.")],
    kind: Annotated[ChangeKind, typer.Option(help="What kind of change.")] = ChangeKind.DEPLOY,
    version: Annotated[str | None, typer.Option(help="The version it changed to.")] = None,
    url: Annotated[
        str | None, typer.Option(help="Where to read more (the pipeline run, the pull request): an http(s) URL.")
    ] = None,
    at: Time = None,
    change_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Its id: the same id again stores nothing new (without --at, at its first time). "
            "Default: the service and time.",
        ),
    ] = None,
    org: OrgOption = None,
) -> None:
    """Record a change (source `cli`); --at defaults to now (with an --id already stored: its time)."""
    with _errors(), _open() as grandbo:
        changes = grandbo.org(org).changes
        when = at or (_stored_at(changes, change_id) if change_id else None) or utcnow()
        if url and (problem := web_url_problem(url.strip())):
            raise InvalidInputError(f"--url {problem}. A change's url {URL_RULE}.", detail={"fields": ["url"]})
        fields = {"id": change_id or f"{service}@{when:%Y%m%dT%H%M%S}", "service": service, "kind": kind,
                  "summary": summary, "version": version, "url": url, "at": when}  # fmt: skip
        try:
            change = NewChange.model_validate(fields)
        except ValidationError as error:
            raise InvalidInputError(
                f"The change cannot be stored: {', '.join(validation_fields(error))} fail(s) its checks (a summary "
                "up to 2,000 characters, a service and an id up to 200).",
                detail={"fields": validation_fields(error)},
            ) from None
        stored, outcome = changes.add(change)
    say(f"{outcome} cli:{stored.id} ({stored.kind.value} of {stored.service} at {stored.at:%Y-%m-%d %H:%M}Z)")


@change_app.command("list")
def change_list(
    service: Annotated[str | None, typer.Option(help="Only this service (a catalog name or an alias).")] = None,
    kind: Annotated[ChangeKind | None, typer.Option(help="Only this kind.")] = None,
    source: Annotated[str | None, typer.Option(help="Only: github, argocd, pagerduty, generic, cli.")] = None,
    since: Time = None,
    until: Time = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many, the latest first.")] = 50,
    as_json: JsonOption = False,
    org: OrgOption = None,
) -> None:
    """The changes, the latest first."""
    with _errors(), _open() as grandbo:
        found, _ = grandbo.org(org).changes.find(service=service, kind=kind, source=source, since=since, until=until,
                                                 limit=limit)  # fmt: skip
    filters = {"service": service, "kind": kind.value if kind else None, "source": source,
               "since": since.isoformat() if since else None,
               "until": until.isoformat() if until else None}  # fmt: skip
    named = ", ".join(f"--{name} {value}" for name, value in filters.items() if value is not None)
    empty = (f"No change matches {named}: widen or drop a filter (`grandbo change list` lists them all)." if named
             else "No changes yet: `grandbo change add`, or POST /v1/changes/{source}.")  # fmt: skip
    _print_list(found, as_json, empty, _line)


def _stored_at(changes: Changes, change_id: str) -> datetime | None:
    """When the change of this id, added here before, took effect: a rerun without --at is the same change."""
    try:
        return changes.get(f"cli:{change_id}").at
    except NotFoundError:
        return None


def _line(change: Change) -> str:
    version = f" {change.version}" if change.version else ""
    return (
        f"{change.at:%Y-%m-%d %H:%M}Z  {change.kind.value:<8} {change.service}{version}  {change.summary[:80]}  "
        f"[{change.source}:{change.id}]"
    )
