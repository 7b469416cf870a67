"""`grandbo init|orgs|models|migrate|worker|backfill|reembed|rebuild`: the store and its organizations."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, app, state
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.cli.waiting import wait_for_store
from grandbo.errors import StoreUnavailableError
from grandbo.urls import mask_url

models_app = command_group("models", "Prepare embedding models for offline use.")


@app.command()
def init(
    embedding: Annotated[
        str | None,
        typer.Option(
            "--embedding",
            help="Provider: deterministic, local, bedrock, voyage, openai. Default: GRANDBO_EMBEDDING_PROVIDER.",
        ),
    ] = None,
    org: Annotated[
        str | None, typer.Option("--org", help="Organization to create with it. Default: GRANDBO_ORG.")
    ] = None,
) -> None:
    """Create the store (recording its embedding provider, model and dimension) and an organization."""
    from grandbo.service import Grandbo

    with _errors(), Grandbo.init(state.settings, embedding=embedding) as grandbo:
        memory = grandbo.org(org, create=True)
        say(f"store {grandbo.url} ready: embedding space {grandbo.space}, organization {memory.org!r}")


orgs_app = command_group("orgs", "Organizations: each one's memory is its own.")


@orgs_app.command("create")
def orgs_create(
    name: Annotated[str, typer.Argument(help="Organization id: lowercase letters, digits, - or _.")],
) -> None:
    """Create an organization."""
    with _errors(), _open() as grandbo:
        created = grandbo.create_org(name)
    say(f"created organization {name!r}" if created else f"organization {name!r} exists already")


@orgs_app.command("list")
def orgs_list(
    as_json: JsonOption = False,
    every: Annotated[
        bool, typer.Option("--all", help="Also the temporary organizations of `grandbo eval` runs.")
    ] = False,
) -> None:
    """List the organizations of the store (not the temporary ones of evaluations, unless --all)."""
    from grandbo.eval.orgs import is_eval_org

    with _errors(), _open() as grandbo:
        names = grandbo.orgs()
    evals = [name for name in names if is_eval_org(name)]
    shown = names if every else [name for name in names if name not in evals]
    if as_json:
        _print_json(shown)
        return
    say("\n".join(shown) if shown else "no organizations yet")
    if evals and not every:
        say(
            f"(and {len(evals)} temporary organization(s) of `grandbo eval` runs, removed when they finish or by the "
            "next run; `grandbo orgs list --all` shows them)"
        )


@orgs_app.command("delete")
def orgs_delete(
    name: Annotated[str, typer.Argument(help="The organization to delete.")],
    yes: Annotated[bool, typer.Option("--yes", help="Delete it: nothing of it can be read back but a backup.")] = False,
) -> None:
    """Delete an organization and everything it holds: memory, history, documents, keys, webhook secrets, alerts."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(name)  # an unknown one is refused with the known names
        if not yes:
            keys = sum(1 for key in memory.keys.all() if key.active)
            say(
                f"error: deleting organization {name!r} erases its {memory.stats().total} entries, their history, "
                f"its incidents, ledger, profile, settings, alerts and webhook secrets, and ends its {keys} active "
                "key(s), for good (backups keep them; `grandbo export` first to keep a copy). Run again with --yes.",
                err=True,
            )
            raise typer.Exit(1)
        grandbo.drop_org(name)
    say(f"deleted organization {name!r}")


@models_app.command("prepare")
def models_prepare(
    force: Annotated[bool, typer.Option("--force", help="Prepare again even if already prepared.")] = False,
) -> None:
    """Export all-MiniLM-L6-v2 to ONNX into GRANDBO_HOME/models (once; needs the 'prepare' extra)."""
    from grandbo.embeddings.prepare import prepare

    with _errors():
        manifest = prepare(state.settings.model_dir, force=force)
    verb = "already prepared" if manifest.get("already_prepared") else "prepared"
    say(f"{manifest['model']} {verb} in {state.settings.model_dir} ({manifest['method']})")


@app.command()
def backfill() -> None:
    """Embed every pending or failed entry (unembeddable texts are counted, not retried), and run again the
    write-behinds that gave up, in every organization."""
    with _errors(), _open() as grandbo:
        redriven = grandbo.redriver.retry_failed()
        report = grandbo.backfill()
        unembeddable = sum(grandbo.org(name).stats().unembeddable for name in grandbo.orgs())
    say(f"embedded {report.embedded}, failed {report.failed}, unembeddable {unembeddable}")
    if redriven.done or redriven.failed:
        say(f"write-behinds done {redriven.done}, failed {redriven.failed}")
    if unembeddable:  # settled, not an error: no vector exists for those texts; they are found by their words
        say(
            f"note: {unembeddable} entries have no vector (their text has nothing the provider can embed, e.g. "
            "stopwords only): they are found by their words; `grandbo stats --org ORG` counts them",
            err=True,
        )
    if report.errors or redriven.failed:
        if report.errors:
            say(f"last error: {report.errors[-1]}", err=True)
        if redriven.failed:
            say("some write-behinds failed again: `grandbo stats --org ORG` counts them; the log says why", err=True)
        raise typer.Exit(1)


@app.command()
def reembed(
    embedding: Annotated[str, typer.Option("--embedding", help="The provider to migrate to.")],
    every_entry: Annotated[bool, typer.Option("--all", help="Re-embed entries whose vectors are current too.")] = False,
) -> None:
    """Migrate the store to another embedding provider: re-embed every active entry."""
    from grandbo.service import Grandbo

    # The store's recorded provider is the one to open with, whatever GRANDBO_EMBEDDING_PROVIDER says.
    current = state.settings.model_copy(update={"embedding_provider": None})
    with _errors(), Grandbo.open(current) as grandbo:
        count, report = grandbo.reembed(embedding, every_entry=every_entry)
    say(f"switched to {embedding}: {count} entries queued, {report.embedded} embedded, {report.failed} failed")
    if report.failed:
        say("run `grandbo backfill` once the provider answers", err=True)
        raise typer.Exit(1)


@app.command()
def migrate() -> None:
    """Apply pending schema migrations as the owner role (Postgres: GRANDBO_MIGRATE_DATABASE_URL) and grant the
    runtime role; safe to run twice, and from two processes at once."""
    from grandbo.service import Grandbo

    with _errors():
        versions = Grandbo.migrate(state.settings)
    say(f"store {mask_url(state.settings.store_url).split('@')[-1]} at schema version {max(versions)}")


@app.command()
def worker(
    once: Annotated[bool, typer.Option("--once", help="Drain what is ready, then exit.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls when idle.", min=0.1, max=3600)] = 1.0,
) -> None:
    """Drain the embed outbox fairly across orgs, re-drive acknowledged write-behinds left undone (incident syncs,
    edits' learning, alerts' triage) and build the HNSW indexes writes asked for; run several."""
    import signal
    import threading

    from grandbo.rounds import Rounds

    stop = threading.Event()
    if not once:  # a worker started while the store does not answer waits for it (`cli.waiting`); --once fails
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    with _errors():
        opened = _open(catch_up=False) if once else wait_for_store(partial(_open, catch_up=False), state.settings,
                                                                   stop, "worker")  # fmt: skip
    if opened is None:  # stopped while it waited
        return
    with _errors(), opened as grandbo:
        embed = grandbo.worker()
        rounds = Rounds(embed, grandbo.redriver)  # a claim of each kind in turn: neither holds up the other
        if once:
            done = rounds.drain()
            report, redriven = done.embed, done.redriven
            embed.maintain()
            say(f"embedded {report.embedded}, failed {report.failed}, unembeddable {report.unembeddable}; "
                f"write-behinds done {redriven.done}, failed {redriven.failed}")  # fmt: skip
            return
        say(f"worker draining {grandbo.url} (Ctrl-C to stop)", err=True)
        embed.start_maintenance(poll)  # index builds on their own thread: embedding goes on meanwhile
        rounds.watch()
        down = False
        while not stop.is_set():
            try:
                idle = rounds.round().idle
            except StoreUnavailableError as error:  # a store restart: wait it out, never exit (work stays queued)
                if not down:
                    say(f"store unavailable, retrying every {poll:g} s: {error.message}", err=True)
                down = True
                stop.wait(poll)
                continue
            if down:
                say("store available again", err=True)
            down = False
            if idle:
                stop.wait(poll)
        rounds.stop()
        embed.stop()


@app.command()
def rebuild(
    org: OrgOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a projection that differs from the log (the log wins).")
    ] = False,
) -> None:
    """Recompute the entries projection from the event log and compare; replace it only with --force.

    Safe beside a running server: the compare reads a snapshot (on the embedded store it holds no other org's writes
    waiting); a replacement takes the write lock for its rows only, from the log as it is then."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        result = memory.rebuild(replace=force)
    if result.identical:
        say(f"rebuilt {result.entries} entries from the log of {memory.org!r}: identical to before")
        return
    say(
        f"the log of {memory.org!r} yields {result.entries} entries: DIFFERENT from the projection "
        f"({len(result.missing)} missing, {len(result.extra)} only in the projection, {len(result.changed)} changed)"
    )
    for label, ids in (("missing", result.missing), ("only in the projection", result.extra),
                       ("changed", result.changed)):  # fmt: skip
        if ids:
            say(f"  {label}: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}")
    if result.replaced:
        say("replaced the projection with the log's (--force)")
        return
    say(
        "nothing was changed. If the log is right (the projection was damaged), run `grandbo rebuild --force`; "
        "entries only in the projection would be lost, so check the log first (a backup, `grandbo export`).",
        err=True,
    )
    raise typer.Exit(1)


@app.command()
def backup(path: Annotated[Path, typer.Argument(help="File to write the backup to.", dir_okay=False)]) -> None:
    """Back up the whole store to a file, online (Postgres: pg_dump as GRANDBO_BACKUP_DATABASE_URL's role)."""
    with _errors(), _open() as grandbo:
        swept = grandbo.backup(path)
    if swept:
        say(f"removed {swept}: left beside {path} by a backup to it that was cut short")
    say(f"backed up {grandbo.url} to {path}")


@app.command()
def restore(
    path: Annotated[Path, typer.Argument(help="A file written by `grandbo backup`.", exists=True, dir_okay=False)],
) -> None:
    """Replace the whole store with a backup (stop other writers first; Postgres: pg_restore, a superuser)."""
    with _errors(), _open() as grandbo:
        kept = grandbo.restore(path)
        orgs = grandbo.orgs()
    say(f"restored {path}: {len(orgs)} organization(s)")
    if kept is not None:
        say(f"the store it replaced is kept at {kept} (owner-only) until the next restore; delete it once "
            "the restored store is right")  # fmt: skip
