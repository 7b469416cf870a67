"""`grandbo eval|bench|demo`: retrieval quality, speed, and a guided tour."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from grandbo.cli.app import JsonOption, OrgOption, _errors, _open, _print_json, app, state
from grandbo.cli.options import command_group
from grandbo.cli.terminal import say
from grandbo.errors import InvalidInputError

bench_app = command_group("bench", "Benchmarks that print JSON.")
MAX_ENTRIES = 1_000_000  # memories of one benchmark organization
ClientsOption = Annotated[int, typer.Option("--clients", help="Concurrent clients.", min=1, max=256)]


@app.command("eval")
def eval_(
    directory: Annotated[
        Path | None, typer.Argument(help="BEIR-layout folder, or 'incidents' for the shipped set.")
    ] = None,
    from_history: Annotated[
        bool, typer.Option("--from-history", help="Score on the --org's own past incidents (dev and test by time).")
    ] = False,
    org: OrgOption = None,
    embedding: Annotated[
        str | None,
        typer.Option(
            "--embedding",
            help="Provider to evaluate. Default: GRANDBO_EMBEDDING_PROVIDER (--from-history: or the store's).",
        ),
    ] = None,
    as_json: JsonOption = False,
    cache: Annotated[bool, typer.Option(help="Reuse cached document vectors (GRANDBO_HOME/cache).")] = True,
    split: Annotated[
        str | None, typer.Option("--split", help="qrels/<SPLIT>.tsv to score: test (default), dev, or dev+test.")
    ] = None,
    minimum: Annotated[
        list[str] | None,
        typer.Option(
            "--min", help="METRIC=VALUE (nDCG@10, R@5, R@10, MRR@10); exit 1 when short (--from-history: on test)."
        ),
    ] = None,
    gate_arm: Annotated[str, typer.Option("--gate-arm", help="The arm --min applies to.")] = "hybrid",
    run_file: Annotated[
        Path | None, typer.Option("--run-file", help="Write a TREC run per arm: PATH.lexical.trec, PATH.hybrid.trec...")
    ] = None,
) -> None:
    """Score the lexical, vector, hybrid and re-ranked arms of recall on a BEIR-layout data set, or with
    --from-history on the organization's own past incidents."""
    from grandbo.embeddings.base import get_provider
    from grandbo.errors import InvalidInputError
    from grandbo.eval.runner import ARMS, check_run_files, evaluate, parse_gates, shipped_set, shortfalls, write_runs

    name = embedding or state.settings.embedding_provider
    with _errors():
        _one_source(directory, from_history, org, {"--split": split, "--run-file": run_file})
        gates = parse_gates(minimum or [])
        if gate_arm not in [arm.value for arm in ARMS]:
            raise InvalidInputError(
                f"--gate-arm {gate_arm!r}: use one of {', '.join(arm.value for arm in ARMS)}",
                detail={"gate_arm": gate_arm},
            )
    if from_history:
        from grandbo.cli.history_eval import eval_from_history

        return eval_from_history(org, embedding, as_json, cache, gates, gate_arm)
    assert directory is not None
    if not directory.exists() and (shipped_set(directory.name)).is_dir():
        directory = shipped_set(directory.name)
    with _errors():
        get_provider(name, state.settings)  # refuse an unknown or missing name before any work
        assert name is not None
        if run_file is not None:
            check_run_files(run_file)
        report = evaluate(
            directory, state.settings, name, cache=cache, split=split or "test",
            progress=lambda m: say(m, err=True),
        )  # fmt: skip
    for line in report.lines:
        if as_json:
            _print_json(line)
        else:
            say(
                f"{line['set']:<12} {line['arm']:<8} nDCG@10 {line['nDCG@10']:.4f}  R@5 {line['R@5']:.4f}  "
                f"R@10 {line['R@10']:.4f}  MRR@10 {line['MRR@10']:.4f}  p50 {line['recall_p50_ms']:.2f} ms  "
                f"p95 {line['recall_p95_ms']:.2f} ms  embed p50 {line['embed_p50_ms']:.2f} ms  "
                f"refused {line['refused']}"
            )
    if report.separation and as_json:
        _print_json(report.separation)
    elif report.separation:
        _print_separation(report.separation)
    if run_file is not None:  # after the metrics are out: a failure here loses no number
        with _errors():
            for written in write_runs(report, run_file):
                say(f"wrote {written}", err=True)
    missed = shortfalls(report, gates, gate_arm) if gates else []
    for sentence in missed:
        say(f"below the bar: {sentence}", err=True)
    if missed:
        raise typer.Exit(1)


def _one_source(
    directory: Path | None, from_history: bool, org: str | None, others: dict[str, Any], needs_org: bool = True
) -> None:
    """A data set folder or --from-history, never both nor neither; options of the one not taken are refused."""
    if from_history and directory is not None:
        raise InvalidInputError(
            f"Give a data set folder ({directory}) or --from-history (the org's own past incidents), not both.",
            detail={"directory": str(directory)},
        )
    if not from_history and directory is None:
        raise InvalidInputError(
            "Give a BEIR-layout folder ('incidents' for the shipped set), or --from-history --org ORG to use the "
            "organization's own past incidents.",
            detail={},
        )
    given = [name for name, value in others.items() if value is not None]
    if from_history and given:
        raise InvalidInputError(
            f"{', '.join(given)} applies to a data set folder; --from-history splits the org's incidents by time "
            "(dev: older and undated, test: newer) and reports both.",
            detail={"options": given},
        )
    if needs_org and org is not None and not from_history:
        raise InvalidInputError(
            "--org names the organization whose past incidents --from-history scores; a data set folder is "
            "evaluated in a temporary organization. Add --from-history, or leave --org out.",
            detail={"org": org},
        )


_TOP = ("answerable_mean_top", "unanswerable_mean_top")  # None: no such query in the set
_VERDICT = ("seen_before_when_answerable", "novel_when_unanswerable", "precision_seen_before")


def _print_separation(found: dict[str, Any]) -> None:
    """How far each arm's best score sits apart for answerable and unanswerable queries, and the verdict."""
    say(f"{found['set']:<12} {found['answerable']} answerable, {found['unanswerable']} unanswerable queries:")
    for arm, figures in found["separation"].items():
        top = {name: "-" if figures[name] is None else f"{figures[name]:.4f}" for name in _TOP}
        line = (
            f"{'':<12} {arm:<8} best score answerable {top['answerable_mean_top']}, unanswerable "
            f"{top['unanswerable_mean_top']} ({figures['unanswerable_empty']} empty)"
        )
        if "seen_before_when_answerable" in figures:
            share = {name: "-" if figures.get(name) is None else f"{figures[name]:.2f}" for name in _VERDICT}
            line += (
                f"; verdict: seen before when answerable {share['seen_before_when_answerable']}, novel when "
                f"unanswerable {share['novel_when_unanswerable']}, precision {share['precision_seen_before']}"
            )
        say(line)


@app.command("calibrate")
def calibrate(
    directory: Annotated[
        Path | None,
        typer.Argument(help="BEIR-layout folder of labelled queries; unanswerable ones marked answerable: false."),
    ] = None,
    from_history: Annotated[
        bool,
        typer.Option("--from-history", help="Fit on the org's older past incidents, score on the newer; store it."),
    ] = False,
    org: OrgOption = None,
    split: Annotated[
        str | None, typer.Option("--split", help="qrels/<SPLIT>.tsv to fit on: test (default), dev, or dev+test.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Fit the organization's own "seen before" calibration on labelled queries, or with --from-history on its own
    past incidents, and store it in its settings."""
    from grandbo.eval.calibration import fit, labelled_queries, scores
    from grandbo.eval.runner import shipped_set

    with _errors():
        _one_source(directory, from_history, org, {"--split": split}, needs_org=False)
    if from_history:
        from grandbo.cli.history_eval import calibrate_from_history

        return calibrate_from_history(org, as_json)
    assert directory is not None
    if not directory.exists() and (shipped_set(directory.name)).is_dir():
        directory = shipped_set(directory.name)
    split = split or "test"
    with _errors(), _open() as grandbo:
        memory = grandbo.org(org)
        space = grandbo.space
        dataset, provider, rows = labelled_queries(directory, state.settings, space.provider, split)
        calibration = fit(rows, provider.name, provider.model, f"{dataset.name} {split}")
        memory.org_settings.set_calibration(calibration, actor="cli")
        stored = memory.org_settings.calibration()
    assert stored is not None
    fitted = scores(rows, stored)
    if as_json:
        _print_json({"org": memory.org, "calibration": stored.model_dump(), "on_its_own_queries": fitted})
        return
    say(f"calibrated {stored.provider}:{stored.model} for {memory.org!r} on {stored.fitted_on}")
    say(
        f"on those queries: seen before when answerable {fitted['seen_before_when_answerable']:.2f}, "
        f"novel when unanswerable {fitted['novel_when_unanswerable']:.2f} (in-sample: hold some queries out "
        "and check them with `grandbo recall` or a second set)"
    )
    say(f"to go back to the model's shipped calibration, if any: grandbo settings calibration --remove "
        f"--org {memory.org}")  # fmt: skip


def _print_result(result: dict[str, Any], as_json: bool, width: int) -> None:
    """A benchmark's result: one JSON line, or one `key: value` line each, the keys right-aligned to `width`."""
    if as_json:
        _print_json(result)
    else:
        for key, value in result.items():
            say(f"{key:>{width}}: {value}")


@bench_app.command("recall")
def bench_recall(
    entries: Annotated[
        int, typer.Option("--entries", help="Entries in the benchmark org.", min=0, max=MAX_ENTRIES)
    ] = 10_000,
    queries: Annotated[int, typer.Option("--queries", help="Timed queries.", min=1, max=100_000)] = 300,
    embedding: Annotated[str, typer.Option("--embedding", help="Provider for the entries' vectors.")] = "deterministic",
    as_json: JsonOption = False,
) -> None:
    """Recall latency (p50/p95, each arm alone) and bulk write throughput at N entries."""
    from grandbo.eval.bench import bench_recall as run

    with _errors():
        result = run(
            state.settings,
            entries=entries,
            queries=queries,
            embedding=embedding,
            progress=lambda m: say(m, err=True),
        )
    _print_result(result, as_json, 18)


@bench_app.command("serve")
def bench_serve(
    entries: Annotated[
        int, typer.Option("--entries", help="Memories the served org holds.", min=1, max=MAX_ENTRIES)
    ] = 10_000,
    clients: ClientsOption = 16,
    seconds: Annotated[float, typer.Option("--seconds", help="How long to drive them.", min=1, max=600)] = 20.0,
    embedding: Annotated[str, typer.Option("--embedding", help="Provider of the memories' vectors.")] = "local",
    as_json: JsonOption = False,
) -> None:
    """Recalls per second and latency of a real server on loopback (query embedding included)."""
    from grandbo.eval.serve_bench import bench_serve as run

    with _errors():
        result = run(state.settings, entries=entries, clients=clients, seconds=seconds, embedding=embedding,
                     progress=lambda m: say(m, err=True))  # fmt: skip
    _print_result(result, as_json, 22)


@bench_app.command("tenants")
def bench_tenants(
    orgs: Annotated[int, typer.Option("--orgs", help="Organizations served.", min=1, max=10_000)] = 200,
    entries: Annotated[
        int, typer.Option("--entries", help="Memories of each organization.", min=0, max=MAX_ENTRIES)
    ] = 2_000,
    clients: ClientsOption = 16,
    seconds: Annotated[
        float, typer.Option("--seconds", help="How long each phase drives them.", min=1, max=600)
    ] = 20.0,
    processes: Annotated[int, typer.Option("--processes", help="`grandbo serve` processes.", min=1, max=16)] = 2,
    backend: Annotated[
        str,
        typer.Option("--backend", help="sqlite, or postgres (GRANDBO_DATABASE_URL; benchmarks/tenants.py starts one)."),
    ] = "sqlite",
    import_entries: Annotated[
        int,
        typer.Option(
            "--import-entries",
            help="Memories another org imports while the lag is measured; the run waits for the whole import "
            "(10,000: about 20 s here; 100,000, the default before, took minutes).",
            min=1,
            max=10 * MAX_ENTRIES,
        ),
    ] = 10_000,  # tenants_bench.IMPORT_ENTRIES, not imported here: the bench loads only when run
    as_json: JsonOption = False,
) -> None:
    """Many organizations behind P servers: warm and random-org recall, per-org spread, embedding lag."""
    from grandbo.eval.tenants_bench import bench_tenants as run

    with _errors():
        if backend not in ("sqlite", "postgres"):
            raise InvalidInputError(
                f"Unknown backend {backend!r}: use sqlite or postgres.", detail={"backend": backend}
            )
        if backend == "postgres" and not state.settings.database_url:
            raise InvalidInputError(
                "--backend postgres measures on GRANDBO_DATABASE_URL, which is not set. Set it to a database "
                "made for the run (it is initialized and filled), or run benchmarks/tenants.py, which starts "
                "a local Postgres for the run.",
                detail={"backend": backend},
            )
        database_url = state.settings.database_url if backend == "postgres" else None
        result = run(state.settings.model_copy(update={"database_url": database_url}), orgs=orgs, entries=entries,
                     clients=clients, seconds=seconds, processes=processes, import_entries=import_entries,
                     progress=lambda m: say(m, err=True))  # fmt: skip
    _print_result(result, as_json, 24)


PUBLIC_HELP = "Load the 200 public post-mortems (org `public` unless --org): ../shared/data/ or PATH."


@app.command()
def demo(
    org: Annotated[str, typer.Option("--org", help="Organization the demo (re)creates.")] = "demo",
    replace: Annotated[bool, typer.Option(help="Replace an org that holds other memories.")] = False,
    public: Annotated[
        bool,
        typer.Option(
            "--public",
            help="Load the 200 public post-mortems instead (org "
            "`public` unless --org): ../shared/data/public-incidents.jsonl or PATH.",
        ),
    ] = False,
    path: Annotated[Path | None, typer.Argument(help="With --public: the public post-mortems' file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --public: print the import's report as JSON.")] = False,
) -> None:
    """Load the shipped incident memories into an org and show recall answering, with its reasons (--public: the
    public post-mortems, through `import-from jsonl`; run again, it changes nothing)."""
    from grandbo.cli.demo import run_demo

    if public or path is not None:
        from grandbo.cli.history import run_public

        run_public(org if org != "demo" else None, path, as_json)
        return
    with _errors():
        run_demo(state.settings, org, say, replace=replace)
