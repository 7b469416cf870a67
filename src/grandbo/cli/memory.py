"""`grandbo remember|correct|retire|purge|import|export|import-events|recall|show|stats`: one organization's memory."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, app, counted
from grandbo.cli.options import SeverityOption
from grandbo.cli.terminal import say
from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT, Arm, RecallResult
from grandbo.retrieval.policy import DEFAULT_POLICY
from grandbo.retrieval.text import words_of


@app.command()
def remember(
    title: Annotated[str, typer.Option(help="One line: what happened or what this is.")],
    body: Annotated[str, typer.Option(help="The memory itself; '-' reads standard input.")] = "",
    kind: Annotated[str, typer.Option(help="finding, runbook, post-mortem, fact, example, note.")] = "fact",
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Identifier such as ERR_CONN_RESET (repeatable).")
    ] = None,
    service: Annotated[list[str] | None, typer.Option("--service", help="Service involved (repeatable).")] = None,
    severity: SeverityOption = None,
    occurred_at: Annotated[str | None, typer.Option(help="When it happened (ISO 8601). Default: now.")] = None,
    entry_id: Annotated[str | None, typer.Option("--id", help="Stable id. Default: generated.")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="KEY=VALUE metadata, e.g. content_type=status-update.")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Your key for this write: running the command again with it writes nothing new."),
    ] = None,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remember one entry."""
    if body == "-":
        body = sys.stdin.read()
    pairs = [item.split("=", 1) for item in meta or []]
    if any(len(pair) != 2 for pair in pairs):
        say("error: --meta takes KEY=VALUE", err=True)
        raise typer.Exit(2)
    data: dict[str, Any] = {"title": title, "body": body, "kind": kind, "tags": tag or [], "services": service or [],
                            "meta": dict(pairs)}  # fmt: skip
    data.update({k: v for k, v in {"severity": severity, "occurred_at": occurred_at, "id": entry_id}.items() if v})
    with _errors(), _open() as grandbo:
        entry = grandbo.org(org).remember(data, actor="cli", idempotency_key=idempotency_key)
    _print_json(entry.model_dump(mode="json")) if as_json else say(f"remembered {entry.id}")


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
    _print_json(entry.model_dump(mode="json")) if as_json else say(f"{entry_id} superseded by {entry.id}")


@app.command()
def retire(
    entry_id: Annotated[str, typer.Argument(help="The entry to retire.")],
    reason: Annotated[str, typer.Option(help="Why it no longer applies (kept in the history).")],
    org: OrgOption = None,
) -> None:
    """Retire an entry: it leaves recall; its history stays."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).retire(entry_id, reason=reason, actor="cli")
    say(f"retired {entry_id}")


@app.command("import")
def import_(
    path: Annotated[
        Path, typer.Argument(help="JSON Lines: one entry per line (or BEIR corpus lines).", exists=True, dir_okay=False)
    ],
    strict: Annotated[bool, typer.Option(help="Fail unless every entry gets a vector.")] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import entries in bulk: refused lines are reported by number, the rest imported; a rerun resumes.

    Exit status 0 only when every line is in the store, 1 when any line was refused.
    """
    with _errors(), _open() as grandbo, _progress() as progress:
        report = grandbo.org(org).import_file(path, strict=strict, progress=progress)
    if as_json:
        _print_json(report.to_dict())
    else:
        say(
            f"imported {report.imported} entries, {report.already} already there; {len(report.refused)} line(s) refused"
        )
        for line, message in report.problems:
            say(f"  line {line}: {message}" + ("" if line in report.refused else " (stored)"), err=True)
        if report.stopped:
            say(f"stopped: {report.stopped}", err=True)
    if not report.complete:
        raise typer.Exit(1)


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None]]:
    """A progress bar on a terminal; otherwise a count on stderr every tenth of the file (long imports)."""
    if sys.stderr.isatty():
        bar: Any = None

        def show(done: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = typer.progressbar(length=total, label="importing", file=sys.stderr)
                bar.__enter__()
            bar.update(done - bar.pos)

        try:
            yield show
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
        return
    reported = 0

    def count(done: int, total: int) -> None:
        nonlocal reported
        if total >= 10_000 and (done - reported >= total // 10 or done == total):
            reported = done
            say(f"import: {done} of {total} lines", err=True)

    yield count


@app.command("export")
def export_(
    path: Annotated[Path, typer.Argument(help="JSON Lines file to write.", dir_okay=False)],
    entries: Annotated[
        bool, typer.Option("--entries", help="Only the active entries with their vectors (for `grandbo import`).")
    ] = False,
    with_secrets: Annotated[
        bool,
        typer.Option(
            "--with-secrets",
            help="Include the webhook signing secrets, in clear (moving the org to a new machine); left out otherwise.",
        ),
    ] = False,
    org: OrgOption = None,
) -> None:
    """Export an organization's whole event log (entries with history, vectors, every tier's documents) with a
    checksum, for `grandbo import-events`; --entries: only its active entries with their vectors."""
    with _errors(), _open() as grandbo:
        if entries:
            if with_secrets:
                raise typer.BadParameter("--with-secrets goes with the whole log; --entries holds no secrets.")
            count = grandbo.org(org).export_file(path)
            say(f"exported {count} entries to {path}")
            return
        counts = grandbo.org(org).export_log(path, with_secrets=with_secrets)
    say(
        f"exported {counts['events']} entry events, {counts['vectors']} vectors, {counts['document_events']} "
        f"document events and {counts['documents']} documents to {path}"
    )
    if counts["secrets_withheld"]:
        say(
            f"note: the webhook signing secrets of {counts['secrets_withheld']} source(s) were left out; the import "
            "names them. To move the organization with them, export again with --with-secrets (the file is "
            "owner-only; keep it as safe as the secrets).",
            err=True,
        )


@app.command("import-events")
def import_events(
    path: Annotated[Path, typer.Argument(help="A file written by `grandbo export`.", exists=True, dir_okay=False)],
    reembed: Annotated[bool, typer.Option(help="Ignore the exported vectors: this store's provider embeds.")] = False,
    skip_bad_outcomes: Annotated[
        bool,
        typer.Option(
            "--skip-bad-outcomes",
            help="Replay without the outcome documents the ledger cannot read (named on stderr) instead of refusing "
            "the file.",
        ),
    ] = False,
    org: OrgOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay an exported event log into an empty organization (its checksum is checked first). An outcome document
    the ledger cannot read (no or a bad time, a rating "up") refuses the file, nothing written, unless
    --skip-bad-outcomes."""
    with _errors(), _open() as grandbo:
        report = grandbo.org(org).import_log(path, reembed=reembed, skip_bad_outcomes=skip_bad_outcomes)
    if as_json:
        _print_json(report.to_dict())
        return
    say(
        f"replayed {report.events} entry events ({report.entries} entries, {report.vectors_kept} vectors kept, "
        f"{report.embedded} embedded), {report.document_events} document events, {report.documents} documents"
    )
    for note in report.notes:
        say(f"note: {note}", err=True)


@app.command()
def purge(
    entry_id: Annotated[str, typer.Argument(help="The entry whose text is to be erased.")],
    reason: Annotated[str, typer.Option(help="Why (kept, with who did it, in the log).")],
    actor: Annotated[str, typer.Option(help="Who purges (an admin; recorded).")] = "cli-admin",
    org: OrgOption = None,
) -> None:
    """Erase an entry's text and vector for good (admin, audited): redacted in the log, gone from every read."""
    with _errors(), _open() as grandbo:
        grandbo.org(org).purge(entry_id, reason=reason, actor=actor)
    say(f"purged {entry_id}")


@app.command("purge-text")
def purge_text(
    text: Annotated[str, typer.Argument(help="The text to erase; '-' reads it from stdin (keeps it out of history).")],
    reason: Annotated[str, typer.Option(help="Why (kept, with who did it, never the text).")],
    actor: Annotated[str, typer.Option(help="Who erases (an admin; recorded).")] = "cli-admin",
    exact: Annotated[
        bool, typer.Option("--exact", help="Match the text's case exactly (by default any case matches).")
    ] = False,
    org: OrgOption = None,
) -> None:
    """Erase a text from the whole org (admin, audited): entries that held it purged, documents redacted."""
    secret = sys.stdin.read().strip("\r\n") if text == "-" else text
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        report = memory.erasure.purge_text(secret, reason=reason, actor=actor, exact=exact)
    if not report.found:
        how = "in this exact case" if exact else "in any case"
        say(
            f"found nowhere in org {memory.org!r} ({how}): nothing erased, no erasure recorded. Check the spelling"
            + ("" if not exact else ", or drop --exact to match any case")
            + ".",
            err=True,
        )
        raise typer.Exit(1)
    say(
        f"erased ({report.erasure_id}): {counted(len(report.entries), 'entry', 'entries')} purged, "
        f"{counted(report.documents, 'document', 'documents')} and "
        f"{counted(report.document_events, 'history event', 'history events')} redacted"
    )


# ---------------------------------------------------------------------------------- reads


def _print_recall(result: RecallResult) -> None:
    say(
        f"topic: {result.topic}  ({result.arm.value}, {counted(len(result.hits), 'hit', 'hits')}, "
        f"{result.timings.total_ms:.1f} ms)"
    )
    if result.seen_before is not None:
        verdict = "seen before" if result.seen_before else "NO SIMILAR PAST INCIDENT"
        say(f"answer: {verdict} (calibrated probability {result.evidence:.2f})")
    elif result.calibration == NO_VECTOR_VERDICT:
        say(
            "answer: no verdict (no cosine to weigh: the query could not be embedded, or no memory has a "
            "vector yet; these are the lexical arm's best matches)"
        )
    elif result.calibration == PENDING_VERDICT:
        from grandbo.tiers.context import WAITING_WORDS

        say(f"answer: no verdict ({WAITING_WORDS}; how many, and what to run, in the note below)")
    elif result.calibration == "uncalibrated":
        say("answer: uncalibrated, no verdict (fit one on labelled queries: `grandbo calibrate DIR`)")
    words = words_of(result.topic)  # the question's words, not the index's stems (--json has those)
    for hit in result.hits:
        entry, why = hit.entry, hit.why
        parts = []
        if why.lexical:
            shares = why.lexical.terms
            top = sorted(shares, key=lambda term: (-shares[term], -len(term)))[:5]
            terms = ", ".join(dict.fromkeys(words.get(term, term) for term in top))
            parts.append(f"lexical #{why.lexical.rank} bm25 {why.lexical.score:.2f} [{terms}]")
        if why.vector:
            parts.append(f"vector #{why.vector.rank} cos {why.vector.similarity:.3f}")
        label = f" [{hit.label}]" if hit.label else ""
        held = "" if hit.composite in (None, hit.sort_score) else f" (composite {hit.composite:.4f})"  # band-held
        say(f"{hit.rank:>3}. {hit.sort_score:.4f}{held}  {entry.id}  {entry.title}{label}")
        facts = " ".join(filter(None, [entry.kind.value, entry.severity, *entry.services]))  # a runbook may have none
        say(f"      {facts} | {' | '.join(parts)}")
        if why.rerank:
            r = why.rerank
            say(
                f"      = {r.similarity.contribution:+.3f} similarity {r.service.contribution:+.3f} service "
                f"({r.service.note}) {r.severity.contribution:+.3f} severity {r.effectiveness.contribution:+.3f} "
                f"runbook ({r.effectiveness.note}) {r.age.contribution:+.3f} age"
            )
    for note in result.notes:
        say(f"note: {note}")


@app.command()
def recall(
    topic: Annotated[str, typer.Argument(help="The problem in a sentence: mechanism, component, symptom.")],
    k: Annotated[int, typer.Option("-k", help="How many memories.", min=1, max=DEFAULT_POLICY.max_k)] = 10,
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
    """Print one entry as JSON; with --history, every event that shaped it too."""
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        out: dict[str, Any] = {"entry": memory.get(entry_id).model_dump(mode="json")}
        if history:
            out["history"] = [event.model_dump(mode="json") for event in memory.history(entry_id)]
    _print_json(out)


@app.command()
def stats(org: OrgOption = None, as_json: JsonOption = False) -> None:
    """How much of the memory each arm can read: total, readable, unreadable, pending, failed, unembeddable; and
    the write-behinds waiting and failed; what the org stores, against its limit."""
    with _errors(), _open() as grandbo:
        figures = grandbo.org(org).stats()
    if as_json:
        _print_json(figures.model_dump(mode="json"))
        return
    shown = figures.model_dump(exclude={"erasures_unfinished"})
    width = max(map(len, shown))
    for key, value in shown.items():
        say(f"{key:>{width}}: {value if key != 'space' else figures.space}")
    for cut in figures.erasures_unfinished:  # an erasure cut short: said until it is finished
        say(f"erasure {cut['erasure_id']} (begun {cut['at']}) is unfinished: {cut['entries_holding']} entries still "
            f"hold its text; {cut['remedy']}", err=True)  # fmt: skip
