"""`grandbo import-from SOURCE PATH` and `grandbo demo --public`: past incidents from the tools a team already uses."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _print_json, app, state
from grandbo.cli.terminal import say
from grandbo.errors import ImportFormatError

if TYPE_CHECKING:
    from grandbo.history.importer import HistoryReport


@contextmanager
def _progress() -> Iterator[Callable[[int, int | None], None]]:
    """A progress bar on stderr when it is a terminal (records read, against the file's lines when known)."""
    if not sys.stderr.isatty():  # a count every tenth of a long file, as `grandbo import` prints it
        reported = 0

        def count(done: int, total: int | None) -> None:
            nonlocal reported
            if total and total >= 10_000 and (done - reported >= total // 10 or done >= total):
                reported = done
                say(f"import-from: {done} of about {total} records", err=True)

        yield count
        return
    bar: Any = None

    def show(done: int, total: int | None) -> None:
        nonlocal bar
        if total is None:
            typer.echo(f"\rimporting: {done:,} records", err=True, nl=False)
            return
        if bar is None:
            bar = typer.progressbar(length=total, label="importing", file=sys.stderr)
            bar.__enter__()
        bar.update(min(done, total) - bar.pos)

    try:
        yield show
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def _show(report: HistoryReport, as_json: bool, waiting: int) -> None:
    if as_json:
        _print_json(report.to_dict())
        return
    verb = "would import" if report.dry_run else "imported"
    say(f"{report.source}: {verb} {report.imported}, updated {report.updated}, unchanged {report.unchanged}, "
        f"skipped {report.skipped}, refused {len(report.refused) + report.refused_more}")  # fmt: skip
    if report.decisions:
        say("decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(report.decisions.items())))
    for refusal in report.refused:
        say(f"  {refusal['location']}: {refusal['reason']}", err=True)
    if waiting:
        say(f"{waiting} entries wait for their vectors (recall finds them by their words meanwhile): a running "
            "`grandbo serve` or `grandbo worker` embeds them, or `grandbo backfill` now.", err=True)  # fmt: skip


def _interrupted(report: HistoryReport) -> str:
    done = f"interrupted after {report.read:,} records"
    if report.dry_run:
        return f"{done}; nothing was written (a dry run)"
    return (
        f"{done} (imported {report.imported:,}, updated {report.updated:,}, unchanged {report.unchanged:,}, refused "
        f"{len(report.refused) + report.refused_more:,}); run the same command again to resume: the records already "
        "imported are found unchanged and not written again"
    )


SOURCE_HELP = "csv, jsonl, or a vendor: pagerduty, opsgenie, jira, incidentio, rootly, markdown (those installed)."
MAP_HELP = "csv/jsonl: FIELD=COLUMN,... (title=root_cause,postmortem=body,started_at=date)."


@app.command("import-from")
def import_from(
    source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
    path: Annotated[Path, typer.Argument(help="The export: a file (a folder for markdown).", exists=True)],
    org: OrgOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write nothing; report what would change.")] = False,
    mapping: Annotated[str | None, typer.Option("--map", help=MAP_HELP)] = None,
    as_json: JsonOption = False,
) -> None:
    """Import past incidents: each becomes an incident with its findings and post-mortem as memory. A re-import
    updates what changed in the source and keeps what people wrote since; a killed import resumes when run again.

    Exit status 0 when every record is in, 1 when any was refused, 2 on an error."""
    from grandbo.history.importer import import_history
    from grandbo.history.registry import chosen
    from grandbo.history.sources.tabular import count_lines
    from grandbo.history.stopped import Interrupted
    from grandbo.service import Grandbo

    with _errors():
        found, pairs = chosen(source, mapping)  # a bad --map refused before the store is opened
        if not (path.is_file() or path.is_dir()):  # a device or a pipe: /dev/zero would be read forever
            raise ImportFormatError(f"{path} is not a regular file or folder: give the export's file (a folder of "
                                    "post-mortems for markdown).", detail={"path": str(path)})  # fmt: skip
        # The entries' vectors follow: a worker (`grandbo serve`, `grandbo worker`, `grandbo backfill`) embeds them.
        try:
            with Grandbo.open(state.settings, background=True, embed_here=False) as grandbo, _progress() as progress:
                memory = grandbo.org(org)
                report = import_history(memory, found, path, mapping=pairs, dry_run=dry_run, actor="import",
                                        progress=progress, total=count_lines(path))  # fmt: skip
                waiting = 0 if dry_run else memory.stats().pending
        except Interrupted as stop:  # Ctrl-C: exit 130, as a shell expects, saying how far it got and what next
            say(_interrupted(stop.report), err=True)
            raise typer.Exit(130) from None
    _show(report, as_json, waiting)
    if report.refused:
        raise typer.Exit(1)


def run_public(org: str | None, path: Path | None, as_json: bool) -> None:
    """`grandbo demo --public`: the public post-mortems into `org` (created when missing), embedded."""
    from grandbo.cli.demo import demo_store
    from grandbo.history.importer import import_history
    from grandbo.history.public import PUBLIC_MAPPING, public_file
    from grandbo.history.registry import reader
    from grandbo.history.sources.tabular import count_lines

    with _errors():
        found = public_file(path)
        with demo_store(state.settings) as grandbo:
            name = org or "public"
            memory = grandbo.org(name, create=name not in grandbo.orgs())
            with _progress() as progress:
                report = import_history(memory, reader("jsonl"), found, mapping=PUBLIC_MAPPING, actor="import",
                                        progress=progress, total=count_lines(found))  # fmt: skip
    _show(report, as_json, 0)
    if not as_json:
        say(f'Try it: grandbo recall --org {name} "database failover left the primary read-only"')
    if report.refused:
        raise typer.Exit(1)
