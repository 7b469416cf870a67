"""`grandbo`: the command line for people and scripts. Every command calls the same seams as the API."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from grandbo.config import Settings
from grandbo.errors import GrandboError
from grandbo.logs import configure as configure_logs
from grandbo.model import Arm, RecallResult
from grandbo.service import Grandbo

app = typer.Typer(
    name="grandbo",
    help="Institutional memory for AI agents and on-call teams: has this happened before, and what worked?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Prepare embedding models for offline use.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks that print JSON.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")

OrgOption = Annotated[
    str | None,
    typer.Option("--org", help="Organization to act on (created on the embedded store). Default: GRANDBO_ORG."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class _State:
    settings: Settings


state = _State()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level on stderr.")] = False,
) -> None:
    try:
        state.settings = Settings()
    except ValueError as error:
        typer.echo(f"error: invalid GRANDBO_ configuration: {error}", err=True)
        raise typer.Exit(2) from error
    configure_logs("INFO" if verbose else state.settings.log_level, state.settings.log_json)


@contextmanager
def _errors() -> Iterator[None]:
    """Print a GrandboError as one clear line (its remedy included) and exit 2."""
    try:
        yield
    except GrandboError as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(2) from error


def _open() -> Grandbo:
    return Grandbo.open(state.settings)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=None, default=str))


# ---------------------------------------------------------------------------------- setup


@app.command()
def init(
    embedding: Annotated[
        str | None,
        typer.Option(
            "--embedding",
            help="Provider: deterministic, local, bedrock, voyage, openai. Default: GRANDBO_EMBEDDING_PROVIDER.",
        ),
    ] = None,
    org: OrgOption = None,
) -> None:
    """Create the store (recording its embedding provider, model and dimension) and an organization."""
    with _errors(), Grandbo.init(state.settings, embedding=embedding) as grandbo:
        memory = grandbo.org(org)
        typer.echo(f"store {grandbo.store.url} ready: embedding space {grandbo.space}, organization {memory.org_id!r}")


@models_app.command("prepare")
def models_prepare(
    force: Annotated[bool, typer.Option("--force", help="Prepare again even if already prepared.")] = False,
) -> None:
    """Export all-MiniLM-L6-v2 to ONNX into GRANDBO_HOME/models (once; needs the 'prepare' extra)."""
    from grandbo.embeddings.prepare import prepare

    with _errors():
        manifest = prepare(state.settings.model_dir, force=force)
    verb = "already prepared" if manifest.get("already_prepared") else "prepared"
    typer.echo(f"{manifest['model']} {verb} in {state.settings.model_dir} ({manifest['method']})")


# ---------------------------------------------------------------------------------- writes


@app.command()
def remember(
    title: Annotated[str, typer.Option(help="One line: what happened or what this is.")],
    body: Annotated[str, typer.Option(help="The memory itself; '-' reads standard input.")] = "",
    kind: Annotated[str, typer.Option(help="finding, runbook, post-mortem, fact, example, note.")] = "fact",
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Identifier such as ERR_CONN_RESET (repeatable).")
    ] = None,
    service: Annotated[list[str] | None, typer.Option("--service", help="Service involved (repeatable).")] = None,
    severity: Annotated[str | None, typer.Option(help="sev1..sev5, P1..P5 or critical/high/medium/low.")] = None,
    occurred_at: Annotated[str | None, typer.Option(help="When it happened (ISO 8601). Default: now.")] = None,
    entry_id: Annotated[str | None, typer.Option("--id", help="Stable id. Default: generated.")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="KEY=VALUE metadata, e.g. content_type=status-update.")
    ] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remember one entry."""
    if body == "-":
        body = sys.stdin.read()
    pairs = [item.split("=", 1) for item in meta or []]
    if any(len(pair) != 2 for pair in pairs):
        typer.echo("error: --meta takes KEY=VALUE", err=True)
        raise typer.Exit(2)
    data: dict[str, Any] = {"title": title, "body": body, "kind": kind, "tags": tag or [], "services": service or [],
                            "meta": dict(pairs)}  # fmt: skip
    data.update({k: v for k, v in {"severity": severity, "occurred_at": occurred_at, "id": entry_id}.items() if v})
    with _errors(), _open() as grandbo:
        entry = grandbo.org(org).remember(data, actor="cli")
    _print_json(entry.model_dump(mode="json")) if as_json else typer.echo(f"remembered {entry.id}")


@app.command()
def correct(
    entry_id: Annotated[str, typer.Argument(help="The entry to supersede.")],
    reason: Annotated[str, typer.Option(help="Why it is corrected (kept in the history).")],
    title: Annotated[str | None, typer.Option(help="New title.")] = None,
    body: Annotated[str | None, typer.Option(help="New body; '-' reads standard input.")] = None,
    kind: Annotated[str | None, typer.Option(help="New kind.")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="New tags (replace the old ones).")] = None,
    service: Annotated[list[str] | None, typer.Option("--service", help="New services (replace the old ones).")] = None,
    severity: Annotated[str | None, typer.Option(help="New severity.")] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Correct an entry: a new entry supersedes it; the old one stays in the history."""
    if body == "-":
        body = sys.stdin.read()
    changes = {
        key: value
        for key, value in {
            "title": title,
            "body": body,
            "kind": kind,
            "tags": tag,
            "services": service,
            "severity": severity,
        }.items()
        if value is not None
    }
    with _errors(), _open() as grandbo:
        entry = grandbo.org(org).correct(entry_id, changes, reason=reason, actor="cli")
    _print_json(entry.model_dump(mode="json")) if as_json else typer.echo(f"{entry_id} superseded by {entry.id}")


@app.command()
def retire(
    entry_id: Annotated[str, typer.Argument(help="The entry to retire.")],
    reason: Annotated[str, typer.Option(help="Why it no longer applies (kept in the history).")],
    org: OrgOption = None,
) -> None:
    """Retire an entry: it leaves recall; its history stays."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).retire(entry_id, reason=reason, actor="cli")
    typer.echo(f"retired {entry_id}")


@app.command("import")
def import_(
    path: Annotated[
        Path, typer.Argument(help="JSON Lines: one entry per line (or BEIR corpus lines).", exists=True, dir_okay=False)
    ],
    strict: Annotated[bool, typer.Option(help="Fail unless every entry gets a vector.")] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import entries in bulk; bad lines are reported by number and the rest imported."""
    from grandbo.importer import import_file

    with _errors(), _open() as grandbo:
        report = import_file(grandbo.org(org), path, strict=strict)
    if as_json:
        _print_json(report.to_dict())
    else:
        typer.echo(f"imported {report.imported} entries; {len(report.problems)} line(s) rejected")
        for line, message in report.problems:
            typer.echo(f"  line {line}: {message}", err=True)
    if report.problems and not report.imported:
        raise typer.Exit(1)


@app.command("export")
def export_(
    path: Annotated[Path, typer.Argument(help="JSON Lines file to write.", dir_okay=False)],
    org: OrgOption = None,
) -> None:
    """Export an organization's active entries with their vectors (to import into another store)."""
    from grandbo.importer import export_file

    with _errors(), _open() as grandbo:
        count = export_file(grandbo.org(org), path)
    typer.echo(f"exported {count} entries to {path}")


# ---------------------------------------------------------------------------------- reads


def _print_recall(result: RecallResult) -> None:
    typer.echo(
        f"topic: {result.topic}  ({result.arm.value}, {len(result.hits)} hits, {result.timings.total_ms:.1f} ms)"
    )
    if result.seen_before is not None:
        verdict = "seen before" if result.seen_before else "NO SIMILAR PAST INCIDENT"
        typer.echo(f"answer: {verdict} (best evidence {result.evidence:.2f})")
    for hit in result.hits:
        entry, why = hit.entry, hit.why
        parts = []
        if why.lexical:
            shares = why.lexical.terms
            terms = ", ".join(sorted(shares, key=lambda term: -shares[term])[:5])
            parts.append(f"lexical #{why.lexical.rank} bm25 {why.lexical.score:.2f} [{terms}]")
        if why.vector:
            parts.append(f"vector #{why.vector.rank} cos {why.vector.similarity:.3f}")
        label = f" [{hit.label}]" if hit.label else ""
        typer.echo(f"{hit.rank:>3}. {hit.score:.4f}  {entry.id}  {entry.title}{label}")
        typer.echo(f"      {entry.kind.value} {entry.severity or ''} {' '.join(entry.services)} | {' | '.join(parts)}")
        if why.rerank:
            r = why.rerank
            typer.echo(
                f"      = {r.similarity.contribution:+.3f} similarity {r.service.contribution:+.3f} service "
                f"({r.service.note}) {r.severity.contribution:+.3f} severity {r.effectiveness.contribution:+.3f} "
                f"runbook ({r.effectiveness.note}) {r.age.contribution:+.3f} age"
            )
    for note in result.notes:
        typer.echo(f"note: {note}")


@app.command()
def recall(
    topic: Annotated[str, typer.Argument(help="The problem in a sentence: mechanism, component, symptom.")],
    k: Annotated[int, typer.Option("-k", help="How many memories.")] = 10,
    arm: Annotated[
        Arm, typer.Option(help="reranked (default), hybrid (fusion only), or one arm alone for debugging.")
    ] = Arm.RERANKED,
    service: Annotated[
        list[str] | None,
        typer.Option("--service", help="Service in trouble (repeatable); default: named in the topic."),
    ] = None,
    severity: Annotated[str | None, typer.Option(help="Severity of the situation (sev1..sev5).")] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Has this happened before? Ranked, explained memories about a topic."""
    with _errors(), _open() as grandbo:
        result = grandbo.org(org).recall(topic, k, arm=arm, services=service, severity=severity)
    _print_json(result.model_dump(mode="json")) if as_json else _print_recall(result)


@app.command()
def show(
    entry_id: Annotated[str, typer.Argument(help="Entry id.")],
    history: Annotated[bool, typer.Option(help="Also print every event that shaped it.")] = False,
    org: OrgOption = None,
) -> None:
    """Print one entry as JSON (with its history)."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        out: dict[str, Any] = {"entry": memory.get(entry_id).model_dump(mode="json")}
        if history:
            out["history"] = [event.model_dump(mode="json") for event in memory.history(entry_id)]
    _print_json(out)


@app.command()
def stats(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """How much of the memory each arm can read: total, readable, unreadable, pending, failed."""
    with _errors(), _open() as grandbo:
        figures = grandbo.org(org).stats()
    if as_json:
        _print_json(figures.model_dump(mode="json"))
        return
    for key, value in figures.model_dump().items():
        typer.echo(f"{key:>10}: {value if key != 'space' else figures.space}")


# ---------------------------------------------------------------------------------- maintenance


@app.command()
def backfill() -> None:
    """Embed every pending or failed entry, in every organization."""
    with _errors(), _open() as grandbo:
        report = grandbo.backfill()
    typer.echo(f"embedded {report.embedded}, failed {report.failed}, skipped {report.skipped}")
    if report.errors:
        typer.echo(f"last error: {report.errors[-1]}", err=True)
        raise typer.Exit(1)


@app.command()
def reembed(
    embedding: Annotated[str, typer.Option("--embedding", help="The provider to migrate to.")],
    every_entry: Annotated[bool, typer.Option("--all", help="Re-embed entries whose vectors are current too.")] = False,
) -> None:
    """Migrate the store to another embedding provider: re-embed every active entry."""
    # The store's recorded provider is the one to open with, whatever GRANDBO_EMBEDDING_PROVIDER says.
    current = state.settings.model_copy(update={"embedding_provider": None})
    with _errors(), Grandbo.open(current) as grandbo:
        count, report = grandbo.reembed(embedding, every_entry=every_entry)
    typer.echo(f"switched to {embedding}: {count} entries queued, {report.embedded} embedded, {report.failed} failed")
    if report.failed:
        typer.echo("run `grandbo backfill` once the provider answers", err=True)
        raise typer.Exit(1)


@app.command()
def migrate() -> None:
    """Apply pending schema migrations (safe to run twice, and from two processes at once)."""
    from grandbo.store import open_store

    with _errors():
        store = open_store(state.settings.store_url, state.settings)
        versions = store.schema_versions()
        store.close()
    typer.echo(f"store {state.settings.store_url.split('@')[-1]} at schema version {max(versions)}")


@app.command()
def worker(
    once: Annotated[bool, typer.Option("--once", help="Drain what is ready, then exit.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls when idle.")] = 1.0,
) -> None:
    """Drain the embed outbox: batches, retries with backoff; run several at once to scale out."""
    import signal
    import threading

    with _errors(), _open() as grandbo:
        embed = grandbo.worker()
        if once:
            report = embed.drain()
            typer.echo(f"embedded {report.embedded}, failed {report.failed}, skipped {report.skipped}")
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        typer.echo(f"worker draining {grandbo.store.url.split('@')[-1]} (Ctrl-C to stop)", err=True)
        while not stop.is_set():
            report = embed.drain()
            if report.claimed == 0:
                stop.wait(poll)


@app.command()
def rebuild(org: OrgOption = None) -> None:
    """Recompute the entries projection from the event log, and check it matches."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        before = [e.model_dump(mode="json") for e in grandbo.store.entries(memory.org_id, include_inactive=True)]
        count = grandbo.store.rebuild(memory.org_id)
        after = [e.model_dump(mode="json") for e in grandbo.store.entries(memory.org_id, include_inactive=True)]
    same = before == after
    typer.echo(
        f"rebuilt {count} entries from the log of {memory.org_id!r}: {'identical' if same else 'DIFFERENT'} to before"
    )
    if not same:
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------- evaluation


@app.command("eval")
def eval_(
    directory: Annotated[Path, typer.Argument(help="BEIR-layout folder, or 'incidents' for the shipped set.")],
    embedding: Annotated[
        str | None, typer.Option("--embedding", help="Provider to evaluate. Default: GRANDBO_EMBEDDING_PROVIDER.")
    ] = None,
    as_json: JsonOption = False,
    cache: Annotated[bool, typer.Option(help="Reuse cached document vectors (GRANDBO_HOME/cache).")] = True,
) -> None:
    """Score the lexical, vector and hybrid arms of recall on a BEIR-layout data set."""
    from grandbo.embeddings.base import get_provider
    from grandbo.eval.runner import evaluate, shipped_set

    if not directory.exists() and (shipped_set(directory.name)).is_dir():
        directory = shipped_set(directory.name)
    name = embedding or state.settings.embedding_provider
    with _errors():
        get_provider(name, state.settings)  # refuse an unknown or missing name before any work
        assert name is not None
        report = evaluate(directory, state.settings, name, cache=cache, progress=lambda m: typer.echo(m, err=True))
    for line in report.lines:
        if as_json:
            _print_json(line)
        else:
            typer.echo(
                f"{line['set']:<12} {line['arm']:<8} nDCG@10 {line['nDCG@10']:.4f}  R@5 {line['R@5']:.4f}  "
                f"R@10 {line['R@10']:.4f}  MRR@10 {line['MRR@10']:.4f}  p50 {line['recall_p50_ms']:.2f} ms  "
                f"p95 {line['recall_p95_ms']:.2f} ms  embed p50 {line['embed_p50_ms']:.2f} ms  "
                f"refused {line['refused']}"
            )
    if report.separation:
        _print_json(report.separation)


@bench_app.command("recall")
def bench_recall(
    entries: Annotated[int, typer.Option("--entries", help="Entries in the benchmark org.")] = 10_000,
    queries: Annotated[int, typer.Option("--queries", help="Timed queries.")] = 300,
    embedding: Annotated[str, typer.Option("--embedding", help="Provider for the entries' vectors.")] = "deterministic",
    as_json: JsonOption = False,
) -> None:
    """Recall latency (p50/p95, each arm alone) and bulk write throughput at N entries."""
    from grandbo.bench import bench_recall as run

    with _errors():
        result = run(
            state.settings,
            entries=entries,
            queries=queries,
            embedding=embedding,
            progress=lambda m: typer.echo(m, err=True),
        )
    if as_json:
        _print_json(result)
    else:
        for key, value in result.items():
            typer.echo(f"{key:>18}: {value}")


@app.command()
def demo(
    org: Annotated[str, typer.Option("--org", help="Organization the demo (re)creates.")] = "demo",
    replace: Annotated[bool, typer.Option(help="Replace an org that holds other memories.")] = False,
) -> None:
    """Load the shipped incident memories into an org and show recall answering, with its reasons."""
    from grandbo.demo import run_demo

    with _errors():
        run_demo(state.settings, org, typer.echo, replace=replace)


def main() -> None:
    app()


# The incident-memory commands live in their own module, which builds on the helpers above.
from grandbo.cli_incidents import register as _register_incident_commands  # noqa: E402
from grandbo.cli_profile import register as _register_profile_commands  # noqa: E402

_register_incident_commands(app)
_register_profile_commands(app)
