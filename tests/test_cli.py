"""Every CLI command, end to end, on a real SQLite file (deterministic embeddings)."""

import codecs
import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandbo import Grandbo, Settings
from grandbo.cli import app
from grandbo.errors import InvalidInputError


def test_init_reports_the_space_and_refuses_another_provider(cli):
    result = cli("init", "--embedding", "deterministic")
    assert "deterministic:feature-hash-v1:384" in result.stdout
    refused = cli("init", "--embedding", "local", code=2)
    assert "grandbo reembed --embedding local" in refused.stderr


def test_commands_refuse_an_uninitialized_store(tmp_path, monkeypatch):
    monkeypatch.setenv("GRANDBO_HOME", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["stats"])
    assert result.exit_code == 2 and "grandbo init --embedding NAME" in result.stderr
    # after `GRANDBO_HOME=DIR make demo`, a command run without that GRANDBO_HOME lands here: it says where it looked
    assert f"another GRANDBO_HOME (this is {tmp_path / 'empty'}) is read with it set" in result.stderr


def test_serve_on_a_fresh_home_says_to_init_in_one_line_and_creates_nothing(tmp_path, monkeypatch):
    home = tmp_path / "fresh"
    monkeypatch.setenv("GRANDBO_HOME", str(home))
    with socket.create_server(("127.0.0.1", 0)) as probe:
        free = str(probe.getsockname()[1])
    result = CliRunner().invoke(app, ["serve", "--port", free])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # the remedy, no log lines
    assert "grandbo init --embedding NAME" in result.stderr and "migrated" not in result.stderr
    assert not (home / "grandbo.db").exists()


@dataclass
class _Started:
    """What a `grandbo serve` (deterministic embeddings) wrote to stderr up to the line starting with `last`,
    said before uvicorn serves; the server is then sent SIGTERM. With `answered`, it is sent SIGTERM only once it
    answered /healthz, and the rest is filled in: whether the store's write-ahead log was there while it served,
    its exit status, and whether the log is there after it."""

    lines: list[str]
    wal_while_serving: bool | None = None
    status: int | None = None
    wal_after: bool | None = None


def _start_serve(
    home: Path, settings: dict[str, str], options: list[str], last: str, *, answered: bool = False
) -> _Started:
    """A fresh `grandbo serve` in `home` with only the GRANDBO_ `settings` given (and the tests' sync setting)."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    import httpx

    from tests.serving import until

    env = {k: v for k, v in os.environ.items() if not k.startswith("GRANDBO_") or k == "GRANDBO_LOCAL_MODEL_DIR"}
    env |= {"GRANDBO_HOME": str(home), "GRANDBO_SQLITE_SYNCHRONOUS": "NORMAL", **settings}
    with Grandbo.init(Settings(home=home), embedding="deterministic"):  # as `grandbo init`
        pass  # in this process: a second interpreter's start for each server, saved
    with socket.create_server(("127.0.0.1", 0)) as probe:
        free = str(probe.getsockname()[1])
    server = subprocess.Popen([sys.executable, "-m", "grandbo", "serve", *options, "--port", free], env=env,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    started = _Started([])
    try:
        assert server.stderr is not None
        for line in server.stderr:
            started.lines.append(line)
            if line.startswith(last):
                break
        if answered:
            threading.Thread(target=server.stderr.read, daemon=True).start()  # its request lines, never read

            def up() -> bool:
                if server.poll() is not None:
                    pytest.fail(f"grandbo serve exited with status {server.returncode}")
                try:
                    return httpx.get(f"http://127.0.0.1:{free}/healthz").status_code == 200
                except httpx.TransportError:
                    return False

            until(up, "grandbo serve answered /healthz")
            started.wal_while_serving = (home / "grandbo.db-wal").exists()
    finally:
        server.send_signal(signal.SIGTERM)
        started.status = server.wait(timeout=60)
    started.wal_after = (home / "grandbo.db-wal").exists()
    return started


@pytest.fixture(scope="module")
def served_by_default(tmp_path_factory: pytest.TempPathFactory) -> _Started:
    """`grandbo serve` with no setting but its home, answering until SIGTERM: one start, shared by the tests that
    only read what it said and did (the environment `_isolated_env` gives each test)."""
    return _start_serve(tmp_path_factory.mktemp("serve") / "home", {}, [], "grandbo serving", answered=True)


@pytest.fixture(scope="module")
def served_quiet_without_worker(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """`grandbo serve --no-worker` with GRANDBO_LOG_LEVEL=ERROR, up to its --no-worker line: what it says is
    printed, not logged, so the level hides none of it."""
    home = tmp_path_factory.mktemp("quiet") / "home"
    return _start_serve(home, {"GRANDBO_LOG_LEVEL": "ERROR"}, ["--no-worker"], "--no-worker").lines


@pytest.fixture(scope="module")
def served_plain_unfrozen(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """`grandbo serve` with GRANDBO_LOG_JSON=false and GRANDBO_GC_YOUNG_OBJECTS=0, up to "grandbo serving"."""
    home = tmp_path_factory.mktemp("plain") / "home"
    settings = {"GRANDBO_LOG_JSON": "false", "GRANDBO_GC_YOUNG_OBJECTS": "0"}
    return _start_serve(home, settings, [], "grandbo serving").lines


def _logged(lines: list[str], event: str) -> list[dict[str, object]]:
    """The fields of each line logging `event`, whether logged as JSON or as a console line (`key=value`)."""
    found = []
    for line in lines:
        if line.lstrip().startswith("{"):
            if json.loads(line).get("event") == event:
                found.append(json.loads(line))
        elif f" {event} " in line:
            found.append({key: json.loads(value) for key, value in re.findall(r"(\w+)=(\S+)", line)})
    return found


def test_serve_without_a_worker_says_who_embeds(served_quiet_without_worker):
    """`--no-worker` leaves embedding to `grandbo worker` processes: without one, memories stay pending, and
    the server says so when it starts rather than only in /readyz's outbox depth."""
    lines = served_quiet_without_worker
    assert any(line.startswith("grandbo serving") for line in lines), lines
    assert "run `grandbo worker` against the same store" in lines[-1]


def test_serve_logs_its_index_memory_bound_and_where_it_came_from(served_by_default):
    """Unset, GRANDBO_INDEX_MEMORY_MB follows this machine (or container); the server says which bound it took, so
    an operator need not work it out from /proc."""
    from grandbo.machine import cgroup_memory_limit, index_memory_default, physical_memory

    lines = served_by_default.lines
    bound = [json.loads(line) for line in lines if '"index.memory_bound"' in line]
    assert len(bound) == 1, lines
    assert (bound[0]["mb"], bound[0]["source"]) == index_memory_default(physical_memory(), cgroup_memory_limit())
    assert bound[0]["source"] != "GRANDBO_INDEX_MEMORY_MB"


def test_serve_logs_as_the_logging_settings_say_when_they_are_set(served_quiet_without_worker, served_plain_unfrozen,
                                                                   served_by_default):  # fmt: skip
    """`grandbo serve` logged INFO JSON whatever GRANDBO_LOG_LEVEL and GRANDBO_LOG_JSON said: set, they apply."""
    quiet = served_quiet_without_worker  # no log line before "grandbo serving", nor after it
    assert len(quiet) == 2 and quiet[0].startswith("grandbo serving") and quiet[1].startswith("--no-worker"), quiet
    plain = served_plain_unfrozen
    bound = [line for line in plain if "index.memory_bound" in line]
    assert len(bound) == 1 and not bound[0].lstrip().startswith("{"), plain  # INFO still, as console lines
    default = served_by_default.lines  # neither set
    assert any(json.loads(line).get("event") == "index.memory_bound" for line in default if line.startswith("{"))


@pytest.mark.parametrize(("served", "young"), [("served_by_default", 10_000), ("served_plain_unfrozen", 0)])
def test_serve_moves_what_it_started_with_out_of_the_cycle_collectors_way(request, served, young):
    """Each full collection of a server holding a few hundred orgs' indexes stopped every request for about
    250 ms: once started, the server freezes what it holds and collects young objects less often
    (GRANDBO_GC_YOUNG_OBJECTS=0 opts out)."""
    fixture = request.getfixturevalue(served)
    (settled,) = _logged(fixture.lines if isinstance(fixture, _Started) else fixture, "heap.settled")
    assert settled["young_objects"] == young
    assert (settled["frozen"] > 50_000) if young else (settled["frozen"] == 0)  # the modules, the app, the model


def test_a_sigterm_before_the_server_runs_stops_it_once_started():
    """A SIGTERM that came while the model loaded, or before uvicorn put in its own handler, was only noted: the
    server then served on, told to stop (a start stopped at once hung). It now stops as soon as it has started."""
    import signal
    import threading

    import uvicorn

    from grandbo.cli.service import _Stop

    async def app(scope, receive, send):  # never reached: nothing connects
        raise AssertionError(scope)

    stop = _Stop()
    stop(signal.SIGTERM, None)  # while the model loaded
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    stop.serving(server)
    with socket.create_server(("127.0.0.1", 0)) as listening:
        running = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
        running.start()
        running.join(timeout=30)
        served_on = running.is_alive()
        server.should_exit = True  # a failing run is not left serving
        running.join(timeout=30)
    assert not served_on
    assert stop.signals == [signal.SIGTERM]


def test_serve_closes_its_store_when_terminated(served_by_default):
    """SIGTERM (what systemd, Docker and Kubernetes send) stops `grandbo serve` through its close: acknowledged
    write-behinds finished, the store closed (SQLite folds its write-ahead log in and removes it). uvicorn raises
    the signal again once it has stopped, and under the default action that ended the process before the close
    ran: the log file stayed. The exit status still says SIGTERM."""
    import signal

    assert served_by_default.wal_while_serving  # the store was open, in WAL mode, when it answered /healthz
    assert served_by_default.status == -signal.SIGTERM
    assert served_by_default.wal_after is False


def test_remember_recall_correct_retire_show(cli):
    made = json.loads(
        cli(
            "remember",
            "--title",
            "checkout-api pool exhausted",
            "--body",
            "retry storm ERR_CONN_RESET",
            "--kind",
            "finding",
            "--tag",
            "ERR_CONN_RESET",
            "--service",
            "checkout-api",
            "--severity",
            "P2",
            "--json",
        ).stdout
    )
    assert made["severity"] == "sev2" and made["services"] == ["checkout-api"]
    recalled = json.loads(cli("recall", "checkout-api connection pool exhausted by retries", "--json").stdout)
    assert recalled["hits"][0]["entry"]["id"] == made["id"]
    assert set(recalled["hits"][0]["why"]) >= {"lexical", "vector", "fused", "rrf_k"}
    table = cli("recall", "checkout-api connection pool exhausted by retries").stdout
    assert made["id"] in table and "lexical #1" in table
    fixed = cli("correct", made["id"], "--reason", "wrong code", "--body", "retry storm ECONNRESET").stdout
    new_id = fixed.split()[-1]
    shown = json.loads(cli("show", made["id"], "--history").stdout)
    assert shown["entry"]["status"] == "superseded" and len(shown["history"]) == 2
    cli("retire", new_id, "--reason", "duplicate")
    assert json.loads(cli("stats", "--json").stdout)["total"] == 0


def test_stats_lines_up_every_figure_under_one_column(cli):
    """Each `label: value` of `grandbo stats` has its colon in one column: the labels were padded to 10
    characters, so `unembeddable`, `write_behinds` and `write_behinds_failed` stuck out past the others."""
    lines = cli("stats").stdout.splitlines()
    labels = [line.split(":", 1)[0].strip() for line in lines]
    assert {"total", "unembeddable", "write_behinds_failed", "space"} <= set(labels)
    assert len({line.index(":") for line in lines}) == 1, lines


def test_recall_prints_a_hit_without_severity_or_services_without_blank_gaps(cli):
    """A runbook remembered with no severity and no service printed `runbook   | vector #3` (seen running the
    README's tour): the facts line now holds only what the entry has."""
    cli("remember", "--title", "Flush the checkout-api connection pool", "--kind", "runbook")
    table = cli("recall", "checkout-api connection pool exhausted by retries").stdout
    facts = [line for line in table.splitlines() if line.strip().startswith("runbook")]
    assert facts and "runbook |" in facts[0] and "  |" not in facts[0], table


def test_show_prints_the_history_only_when_asked_and_its_help_says_so(cli):
    made = json.loads(cli("remember", "--title", "checkout-api pool exhausted", "--json").stdout)
    assert "history" not in json.loads(cli("show", made["id"]).stdout)
    assert len(json.loads(cli("show", made["id"], "--history").stdout)["history"]) == 1
    summary = " ".join(cli("show", "--help").stdout.split())
    assert "with --history, every event that shaped it" in summary and "(with its history)" not in summary


def test_mcp_s_help_does_not_promise_a_default_organization_it_never_uses(cli, monkeypatch):
    summary = " ".join(cli("mcp", "--help").stdout.split())
    assert "Default: GRANDBO_ORG" not in summary and "GRANDBO_ORG is not used here" in summary
    monkeypatch.setenv("GRANDBO_ORG", "default")
    assert "Name the organization" in cli("mcp", code=2).stderr  # as the help says: no key, no --org, no server


def test_slug_topic_exits_2_with_the_remedy(cli):
    result = cli("recall", "redis-timeout", code=2)
    assert "Describe the problem in a sentence" in result.stderr


def test_import_reports_bad_lines_and_stats_count_the_rest(cli, tmp_path):
    path = tmp_path / "entries.jsonl"
    path.write_text('{"title": "good one", "body": "text"}\n{broken\n{"title": "good two"}\n')
    result = cli("import", str(path), code=1)  # a refused line: exit 1
    assert "imported 2 entries, 0 already there; 1 line(s) refused" in result.stdout
    assert "line 2: not valid JSON" in result.stderr
    stats = json.loads(cli("stats", "--json").stdout)
    assert stats["total"] == 2 and stats["readable"] == 2 and stats["space"]["dimension"] == 384
    path.write_text('{"title": "good one", "body": "text"}\n{"title": "good two"}\n')  # the line fixed, rerun
    assert "imported 0 entries, 2 already there; 0 line(s) refused" in cli("import", str(path)).stdout  # exit 0


def test_import_reads_a_file_saved_with_a_byte_order_mark(cli, tmp_path):
    path = tmp_path / "entries.jsonl"  # what Notepad's "UTF-8 with BOM" and Excel write, with CRLF line ends
    path.write_bytes(b'\xef\xbb\xbf{"title": "kafka lag on orders", "body": "x"}\r\n{"title": "redis evictions"}\r\n')
    assert "imported 2 entries, 0 already there; 0 line(s) refused" in cli("import", str(path)).stdout
    assert "imported 0 entries, 2 already there" in cli("import", str(path)).stdout  # and a rerun resumes


def test_rebuild_says_the_projection_is_identical(cli):
    cli("remember", "--title", "first memory", "--body", "text")
    assert "identical to before" in cli("rebuild").stdout


def test_backfill_and_reembed(cli):
    cli("remember", "--title", "a memory to migrate", "--body", "text")
    assert "embedded 0" in cli("backfill").stdout
    assert "0 entries queued" in cli("reembed", "--embedding", "deterministic").stdout  # already current
    result = cli("reembed", "--embedding", "deterministic", "--all")
    assert "1 entries queued, 1 embedded" in result.stdout


def test_an_entry_of_stopwords_only_never_fails_a_backfill(cli):
    """The deterministic provider gives a text of stopwords only an all-zero vector: the entry is stored, marked
    unembeddable once and counted in stats, and `grandbo backfill` exits 0 saying how many there are. Before,
    its job failed for good and every later backfill exited 1 because of it."""
    cli("remember", "--title", "it was what it was", "--body", "and then it was")
    cli("remember", "--title", "checkout-api pool exhausted", "--body", "retry storm")
    for _ in range(2):
        result = cli("backfill")
        assert "failed 0, unembeddable 1" in result.stdout and "1 entries have no vector" in result.stderr
    stats = json.loads(cli("stats", "--json").stdout)
    assert (stats["unembeddable"], stats["failed"], stats["readable"], stats["total"]) == (1, 0, 1, 2)


def test_eval_prints_one_json_line_per_arm_with_exactly_the_contract_keys(cli):
    result = cli("eval", "incidents", "--embedding", "deterministic", "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    arms = [line for line in lines if "arm" in line]
    assert [line["arm"] for line in arms] == ["lexical", "vector", "hybrid", "reranked"]
    keys = {
        "set",
        "arm",
        "nDCG@10",
        "R@5",
        "R@10",
        "MRR@10",
        "recall_p50_ms",
        "recall_p95_ms",
        "embed_p50_ms",
        "refused",
    }
    assert all(set(line) == keys for line in arms)
    separation = next(line for line in lines if "separation" in line)
    assert separation["unanswerable"] == 5  # the test split's half of the 10
    assert set(separation["separation"]) == {"lexical", "vector", "hybrid", "reranked"}
    assert 0 <= separation["separation"]["reranked"]["novel_when_unanswerable"] <= 1


def test_eval_without_json_prints_text_only(cli):
    lines = cli("eval", "incidents", "--embedding", "deterministic").stdout.splitlines()
    assert not any(line.lstrip().startswith("{") for line in lines)
    assert any("5 unanswerable queries" in line for line in lines)
    assert any(line.split()[:1] == ["reranked"] and "novel when unanswerable" in line for line in lines)


def test_eval_refuses_a_folder_that_is_not_beir(cli, tmp_path):
    result = cli("eval", str(tmp_path), "--embedding", "deterministic", code=2)
    assert "corpus.jsonl" in result.stderr


def test_bench_recall_prints_the_contract_keys(cli):
    result = cli("bench", "recall", "--entries", "300", "--queries", "20", "--json")
    figures = json.loads(result.stdout)
    assert {"entries", "p50_ms", "p95_ms", "vector_p50_ms", "lexical_p50_ms", "write_per_s"} <= set(figures)
    assert figures["entries"] == 300 and figures["p95_ms"] >= figures["p50_ms"] > 0


@pytest.mark.slow  # a benchmark: a server, the clients and the model's ceiling (about 20 s)
def test_bench_serve_drives_a_real_server_on_loopback_and_prints_one_json_line(cli):
    """A real `grandbo serve` child process, a few concurrent clients, a bounded run (deterministic vectors)."""
    result = cli("bench", "serve", "--entries", "200", "--clients", "3", "--seconds", "1", "--embedding",
                 "deterministic", "--json")  # fmt: skip
    (line,) = result.stdout.strip().splitlines()
    figures = json.loads(line)
    keys = {"entries", "clients", "requests", "rps", "p50_ms", "p95_ms", "p99_ms", "errors", "single_client_p50_ms"}
    assert keys | {"model_only_per_s"} <= set(figures)
    assert figures["entries"] == 200 and figures["clients"] == 3 and figures["errors"] == 0
    assert (
        figures["requests"] > 0
        and figures["rps"] > 0
        and figures["p99_ms"] >= figures["p95_ms"] >= figures["p50_ms"] > 0
    )
    assert figures["model_only_per_s"] > 0
    assert figures["server_cpu_ms_per_recall"] > 0 and figures["model_cpu_ms_per_query"] > 0


def test_bench_tenants_imports_an_amount_a_casual_run_waits_for(cli):
    """The lag phase's import, which the run waits for, is 10,000 memories by default (about 20 s here), as the bench
    function's default and the help say. It was 100,000: minutes for a casual `grandbo bench tenants`."""
    import typer.main

    from grandbo.cli import app
    from grandbo.eval.tenants_bench import IMPORT_ENTRIES

    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    (option,) = [p for p in bench.commands["tenants"].params if p.name == "import_entries"]
    assert option.default == IMPORT_ENTRIES == 10_000
    shown = " ".join(cli("bench", "tenants", "--help").stdout.split())
    assert "10,000: about 20 s here" in shown


@pytest.mark.slow  # a benchmark: two servers, the clients, an import (about 20 s)
def test_bench_tenants_drives_two_servers_over_many_orgs_and_prints_one_json_line(cli):
    """Two real `grandbo serve` child processes on one store, tiny orgs, a bounded run."""
    result = cli("bench", "tenants", "--orgs", "2", "--entries", "20", "--clients", "1", "--seconds", "1",
                 "--import-entries", "200", "--json")  # fmt: skip
    (line,) = result.stdout.strip().splitlines()
    figures = json.loads(line)
    keys = {"warm_p50_ms", "warm_p95_ms", "random_p50_ms", "random_p95_ms", "random_over_warm_p95",
            "per_org_counted", "per_org_p95_min_ms", "per_org_p95_median_ms", "per_org_p95_max_ms",
            "small_org_embed_lag_s", "errors", "error_kinds", "reconnects"}  # fmt: skip
    assert keys <= set(figures)
    assert figures["orgs"] == 2 and figures["processes"] == 2 and figures["errors"] == 0
    assert figures["prepared"] == 4  # each org recalled on each server before timing, as a running service has
    assert figures["error_kinds"] == {}
    assert figures["recalls"] > 0 and figures["random_p95_ms"] >= figures["random_p50_ms"] > 0
    assert figures["small_org_embed_lag_s"] is not None


def test_version_and_a_retired_predecessor_say_what_to_do(cli):
    from grandbo import __version__

    assert cli("--version").stdout.strip() == f"grandbo {__version__}"
    first = json.loads(cli("remember", "--title", "disk full on orders-db", "--json").stdout)["id"]
    cli("correct", first, "--reason", "root cause found", "--body", "the WAL volume filled")
    refused = cli("retire", first, "--reason", "obsolete", code=2)
    assert "Retire its successor" in refused.stderr


def test_bad_configuration_is_reported(monkeypatch):
    monkeypatch.setenv("GRANDBO_ORG", "Not Valid!")
    result = CliRunner().invoke(app, ["stats"])
    assert result.exit_code == 2 and "GRANDBO_" in result.stderr


def test_a_log_level_nobody_knows_is_refused_not_ignored(cli, monkeypatch):
    # A misspelt level used to fall back to WARNING silently: the operator asked for logs and got none.
    monkeypatch.setenv("GRANDBO_LOG_LEVEL", "verbose")
    refused = cli("stats", code=2)
    assert "GRANDBO_LOG_LEVEL is 'verbose'" in refused.stderr and "DEBUG, INFO, WARNING, ERROR" in refused.stderr
    assert "Traceback" not in refused.stderr and "errors.pydantic.dev" not in refused.stderr
    assert refused.stderr.startswith("error: GRANDBO_LOG_LEVEL: ")  # the setting named, in one line
    assert Settings(log_level="info").log_level == "INFO"  # any case of the four names


def test_a_setting_of_the_wrong_type_is_named_in_one_line_without_its_value(cli, monkeypatch):
    monkeypatch.setenv("GRANDBO_KEY_CACHE_SECONDS", "two-secret-seconds")
    refused = cli("stats", code=2)
    assert refused.stderr.startswith("error: GRANDBO_KEY_CACHE_SECONDS: ") and len(refused.stderr.splitlines()) == 1
    assert "two-secret-seconds" not in refused.stderr and "pydantic" not in refused.stderr


def test_demo_says_where_each_question_s_judged_answer_landed(cli):
    """On the deterministic store of the fixture: whatever the ranking, each question of the shipped set shows its
    judged answers with their rank or as missed, and the unanswerable one says so."""
    out = cli("demo", "--org", "demo").stdout
    assert "judged answer (Q20): INC-038-F1 " in out and "judged answer (Q01): INC-044-F2 " in out
    assert "judged: nothing in memory answers this" in out


def test_recall_and_the_demo_name_the_question_s_words_not_their_stems(cli):
    """The lines listed the matched terms as the index stems them: `[evict, key, session, memori]`, `(evict,
    latenc, redi, 1200ms)`; `--json` keeps the terms."""
    cli("remember", "--title", "Eviction storm on redis-sessions", "--kind", "finding", "--body",
        "Redis evicted session keys under memory pressure; auth-service latency above 1200ms")  # fmt: skip
    table = cli("recall", "Redis evicts session keys under memory pressure, auth-service latency high").stdout
    matched = re.search(r"lexical #1 bm25 [\d.]+ \[([^]]*)\]", table)[1].split(", ")
    assert {"Redis", "evicts"} <= set(matched) and not {"redi", "evict", "memori", "latenc"} & set(matched), matched
    demo = cli("demo", "--org", "demo").stdout
    assert "(ERR_CONN_RESET, CONN, ERR, deploy)" in demo and "latenc," not in demo and "redi," not in demo


def test_demo_refuses_an_org_holding_other_memories(cli):
    cli("orgs", "create", "acme")
    cli("remember", "--title", "a real memory", "--org", "acme")
    result = cli("demo", "--org", "acme", code=2)
    assert "--replace" in result.stderr
    assert json.loads(cli("stats", "--org", "acme", "--json").stdout)["total"] == 1


def test_demo_runs_twice_but_never_drops_keys_or_a_profile_someone_added(cli, monkeypatch):
    """The second run dropped the org when its entries were the shipped ones, and with it the API key and the
    profile typed into it since, without a word."""
    monkeypatch.setenv("GRANDBO_KEY_CACHE_SECONDS", "0")  # an org made again at once (test_org_lifecycle waits)
    cli("demo")
    cli("demo")  # only what the demo wrote: replaced, again and again
    cli("keys", "create", "--org", "demo", "--scope", "read", "--name", "agent")
    cli("profile", "set", "--org", "demo", "--fact", "name=Quillroute")
    refused = cli("demo", code=2)
    assert "documents" in refused.stderr and "--replace" in refused.stderr and "cli" in refused.stderr
    assert json.loads(cli("keys", "list", "--org", "demo", "--json").stdout)[0]["name"] == "agent"
    assert json.loads(cli("profile", "show", "--org", "demo").stdout)["facts"] == {"name": "Quillroute"}
    cli("demo", "--replace")
    assert json.loads(cli("keys", "list", "--org", "demo", "--json").stdout) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["recall", "redis evicted session keys under memory pressure", "--severity", "urgent"], "Invalid severity"),
        (["outcome", "RB-1", "--kind", "attempted"], "Unknown outcome 'attempted'"),
        (["outcome", "RB-1", "--kind", "succeeded", "--ttm", "-5"], "A time to mitigate is a number of seconds"),
        (["outcome", "RB-1", "--kind", "succeeded", "--ttm", "nan"], "A time to mitigate is a number of seconds"),
        (["outcome", "RB-1", "--kind", "failed", "--ttm", "inf"], "A time to mitigate is a number of seconds"),
        (["settings", "rerank", "--similarity", "-5"], "Invalid re-ranking weights"),
        (["export", "/proc/version/out.jsonl"], "/proc/version is a file, not a folder"),
        (["keys", "create", "--scope", "root"], "Unknown scope 'root'"),
        (["keys", "create", "--scope", "read", "--name", ""], "The key's name is empty"),
        (["keys", "create", "--scope", "read", "--name", "   "], "The key's name is empty"),
        (["webhooks", "add", "nagios", "--secret-file", "/dev/null"], "Unknown alert source 'nagios'"),
        (["webhooks", "add", "alertmanager", "--secret-file", "/dev/null"], "does not sign its webhook deliveries"),
        (["webhooks", "rotate-done", "alertmanager"], "does not sign its webhook deliveries, so it has no secret"),
        (["webhooks", "rotate-done", "grafana"], "grandbo keys revoke OLD_ID"),
        (["webhooks", "rotate-done", "pagerduty"], "pagerduty has no webhook secret in this organization"),
        (["tools", "--format", "yaml"], "Unknown format 'yaml'"),
        (["recall", "redis evicted session keys under memory pressure", "--org", "dmeo"], "No organization 'dmeo'"),
        (["recall", "redis evicted session keys under memory pressure " * 100], "recall takes at most 4000"),
    ],
)
def test_bad_input_gets_a_clear_message_and_exit_2_never_a_traceback(cli, args, said):
    result = cli(*args, code=2)
    assert said in result.stderr and "Traceback" not in result.stderr + result.stdout


def test_export_and_backup_both_make_the_missing_folder_they_are_given(cli, tmp_path):
    cli("remember", "--title", "checkout-api pool exhausted", "--body", "retry storm")
    cli("export", str(tmp_path / "exports" / "2026-12-01" / "log.jsonl"))
    cli("export", "--entries", str(tmp_path / "entries" / "today.jsonl"))
    cli("backup", str(tmp_path / "backups" / "2026-12-01" / "grandbo.db"))
    assert (tmp_path / "exports" / "2026-12-01" / "log.jsonl").stat().st_size > 0
    assert len((tmp_path / "entries" / "today.jsonl").read_text().splitlines()) == 1
    assert (tmp_path / "backups" / "2026-12-01" / "grandbo.db").stat().st_size > 0


def test_a_bad_database_url_is_a_clear_error(cli, monkeypatch):
    for url, said in (("postgresql://nobody@127.0.0.1:1/x", "Cannot reach Postgres"), ("mysql://x", "Unsupported")):
        monkeypatch.setenv("GRANDBO_DATABASE_URL", url)
        result = cli("stats", code=2)
        assert said in result.stderr and "Traceback" not in result.stderr


def test_log_lines_stay_off_the_console_unless_verbose(cli):
    cli("remember", "--title", "checkout-api pool exhausted", "--body", "retry storm")
    quiet = cli("recall", "kafka partitions rebalancing forever after a broker upgrade")
    assert "recall.empty_result" not in quiet.stderr
    loud = cli("--verbose", "recall", "kafka partitions rebalancing forever after a broker upgrade")
    assert "recall.empty_result" in loud.stderr


def test_keys_are_printed_once_and_listed_without_the_secret(cli):
    made = cli("keys", "create", "--scope", "read", "--name", "agent")
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("gbk.default.")
    listed = cli("keys", "list", "--json").stdout
    assert key not in listed and json.loads(listed)[0]["scope"] == "read"
    schemas = json.loads(cli("tools", "--format", "anthropic").stdout)
    assert {tool["name"] for tool in schemas} == {"query_org_memory", "record_finding", "report_outcome",
                                                  "get_context_block", "triage_alert", "record_edit",
                                                  "open_incident", "list_incidents", "get_incident",
                                                  "close_incident", "get_memory", "get_runbook", "list_changes"}  # fmt: skip


def test_calibrate_stores_the_organizations_calibration_and_recall_uses_it(cli, tmp_path):
    fitted = json.loads(cli("calibrate", "incidents", "--split", "dev", "--json").stdout)
    assert fitted["calibration"]["source"] == "organization"
    assert fitted["calibration"]["provider"] == "deterministic"
    assert fitted["on_its_own_queries"]["unanswerable"] == 5 and fitted["on_its_own_queries"]["answerable"] == 33
    cli("remember", "--title", "Eviction storm on redis-sessions", "--body", "keys evicted under maxmemory")
    answer = json.loads(cli("recall", "keys evicted on redis-sessions under maxmemory", "--json").stdout)
    assert answer["calibration"].startswith("organization: deterministic:feature-hash-v1 (incidents dev")
    assert answer["seen_before"] in (True, False) and 0.0 <= answer["evidence"] <= 1.0

    folder = tmp_path / "only-answerable"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"d{n}", "title": f"disk full on node {n}", "text": "logs"}) for n in range(4))
    )
    (folder / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"q{n}", "text": f"the disk of node {n} filled up with logs"}) for n in range(4))
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{n}\td{n}\t1\n" for n in range(4))
    )
    refused = cli("calibrate", str(folder), code=2)
    assert "unanswerable" in refused.stderr and '"answerable": false' in refused.stderr


def test_settings_calibration_shows_which_applies_and_removes_the_organizations_own(cli):
    """`grandbo calibrate` could only fit again: nothing went back to the model's shipped calibration."""
    shown = cli("settings", "calibration").stdout
    assert "verdict calibration for deterministic:feature-hash-v1: the one shipped with Grandbo" in shown
    fitted = cli("calibrate", "incidents", "--split", "dev").stdout
    assert "to go back to the model's shipped calibration, if any: grandbo settings calibration --remove" in fitted
    assert "the organization's own, fitted on incidents dev" in cli("settings", "calibration").stdout
    removed = cli("settings", "calibration", "--remove").stdout
    assert "removed the calibration of org 'default' (its history is kept)" in removed
    assert "the one shipped with Grandbo" in removed
    state = json.loads(cli("settings", "calibration", "--json").stdout)
    assert state["applies"] == "shipped" and state["calibration"]["source"] == "shipped"
    refused = cli("settings", "calibration", "--remove", code=2)
    assert "has no calibration of its own to remove" in refused.stderr
    assert "`grandbo calibrate DIR --org default`" in refused.stderr and "Traceback" not in refused.stderr


def test_calibrate_refuses_too_few_labelled_queries_before_embedding_the_corpus(tmp_path):
    """The count is known from the files: the refusal came only after the whole corpus was embedded (minutes
    on a real set). A provider that is down shows it: the refusal must not need it."""
    from grandbo.eval.calibration import labelled_queries

    folder = tmp_path / "few"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "disk full", "text": "logs"}) + "\n")
    queries = [{"_id": "q1", "text": "the disk filled up with logs"}]
    queries += [{"_id": f"u{n}", "text": f"question {n} nobody can answer", "metadata": {"answerable": False,
                 "split": "test"}} for n in range(5)]  # fmt: skip
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    down = Settings(home=tmp_path / "home", openai_base_url="http://127.0.0.1:9/v1", openai_api_key="k")
    with pytest.raises(InvalidInputError, match="got 1 and 5"):
        labelled_queries(folder, down, "openai", "test", cache=False)


def test_a_file_that_is_not_utf8_or_not_json_is_one_clear_line_never_a_traceback(cli, tmp_path):
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Lösung: Dienste über café\n".encode("latin-1"))
    text = tmp_path / "edited.txt"
    text.write_text("We fixed the outage.\n")
    not_json = tmp_path / "people.yaml"
    not_json.write_text("- name: alice\n")
    nan = tmp_path / "alert.json"
    nan.write_text('{"summary": NaN, "service": "redis-sessions"}')
    for args, said in (
        (["catalog", "import", str(latin)], "is not UTF-8 text"),
        (["edit", "--draft", str(latin), "--edited", str(text), "--type", "t", "--author", "a"], "is not UTF-8"),
        (["profile", "set", "--people", str(latin)], "is not UTF-8 text"),
        (["profile", "set", "--people", str(not_json)], "is not JSON"),
        (["profile", "set", "--people", str(tmp_path / "missing.json")], "does not exist"),
        (["triage", str(latin)], "is not UTF-8 text"),
        (["triage", str(not_json)], "is not JSON"),
        (["triage", str(nan)], "NaN (JSON has no such number"),
    ):
        result = cli(*args, code=2)
        assert said in result.stderr and "Traceback" not in result.stderr + result.stdout, (args, result.stderr)


def test_a_json_file_with_a_byte_order_mark_or_in_utf16_is_read_as_triage_reads_one(cli, tmp_path):
    """`profile set --people` refused a UTF-8 file with a byte order mark (as Windows editors save one) and a
    UTF-16 one (PowerShell's `>`), both of which `grandbo triage` read: the two read JSON files one way now."""
    people = '[{"name": "Alice", "role": "SRE", "notes": ""}]'
    alert = '{"summary": "redis evicting keys under memory pressure", "service": "redis-sessions"}'
    for encoded in (codecs.BOM_UTF8 + people.encode(), people.encode("utf-16")):
        (tmp_path / "people.json").write_bytes(encoded)
        cli("profile", "set", "--people", str(tmp_path / "people.json"))
        assert json.loads(cli("profile", "show").stdout)["people"][0]["name"] == "Alice"
    for encoded in (codecs.BOM_UTF8 + alert.encode(), alert.encode("utf-16")):
        (tmp_path / "alert.json").write_bytes(encoded)
        plan = json.loads(cli("triage", str(tmp_path / "alert.json"), "--no-llm", "--json").stdout)
        assert plan["query"].startswith("redis evicting keys"), plan["query"]


@pytest.mark.parametrize(
    "command", [["incident", "list"], ["notes", "list"], ["keys", "list"], ["catalog", "show"], ["orgs", "list"]]
)
def test_every_list_prints_json_with_json_as_the_readme_says(cli, command):
    cli("incident", "open", "Logins slow", "--id", "INC-1")
    cli("keys", "create", "--scope", "read")
    printed = json.loads(cli(*command, "--json").stdout)
    assert isinstance(printed, dict if command == ["catalog", "show"] else list)


def test_serve_on_a_port_in_use_says_so_before_claiming_to_serve(cli):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        result = cli("serve", "--port", port, code=2)
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "another --port" in result.stderr
    assert "grandbo serving" not in result.stderr and "Traceback" not in result.stderr


def test_orgs_delete_erases_an_org_with_its_keys_and_a_new_one_of_its_name_starts_empty(
    settings, monkeypatch, tmp_path
):
    """On both backends: refused without --yes (saying what would go), then gone with its memory, keys, webhook
    secrets and documents; an org created again under its name holds none of it, and the old key opens nothing."""
    from grandbo.errors import NotAuthorizedError
    from grandbo.service import Grandbo

    monkeypatch.setenv("GRANDBO_HOME", str(settings.home))
    monkeypatch.setenv("GRANDBO_KEY_CACHE_SECONDS", "0")  # made again at once (test_org_lifecycle waits 2.25 s)
    if settings.database_url:
        monkeypatch.setenv("GRANDBO_DATABASE_URL", settings.database_url)

    def run(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == code, (result.stdout, result.stderr)
        return result

    run("init", "--embedding", "deterministic", "--org", "keep")
    run("orgs", "create", "doomed")
    run("remember", "--org", "doomed", "--title", "redis evicted the session keys", "--body", "maxmemory")
    key = run("keys", "create", "--org", "doomed", "--scope", "admin", "--name", "ops").stdout.strip().splitlines()[-1]
    secret = tmp_path / "doomed-secret"
    secret.write_text("doomed-signing-secret\n")
    run("webhooks", "add", "pagerduty", "--org", "doomed", "--secret-file", str(secret))
    refused = run("orgs", "delete", "doomed", code=1)
    assert "erases its 1 entries" in refused.stderr and "1 active key(s)" in refused.stderr
    assert "--yes" in refused.stderr
    assert "doomed" in json.loads(run("orgs", "list", "--json").stdout)
    assert run("orgs", "delete", "doomed", "--yes").stdout.strip() == "deleted organization 'doomed'"
    assert json.loads(run("orgs", "list", "--json").stdout) == ["keep"]
    assert "No organization 'doomed'" in run("orgs", "delete", "doomed", "--yes", code=2).stderr
    run("orgs", "create", "doomed")
    assert json.loads(run("stats", "--org", "doomed", "--json").stdout)["total"] == 0
    assert json.loads(run("keys", "list", "--org", "doomed", "--json").stdout) == []
    with Grandbo.open(settings) as grandbo:
        memory = grandbo.org("doomed")
        assert memory.webhook_secrets.secrets("pagerduty") == []
        with pytest.raises(NotAuthorizedError):
            grandbo.authenticate(key)


def test_migrate_with_only_the_owner_s_postgres_url_refuses_to_make_an_embedded_store(tmp_path, monkeypatch):
    """README's `GRANDBO_MIGRATE_DATABASE_URL=postgresql://... grandbo migrate` in a shell without the
    GRANDBO_DATABASE_URL export made and migrated a SQLite file in GRANDBO_HOME and said the store was ready."""
    monkeypatch.setenv("GRANDBO_MIGRATE_DATABASE_URL", "postgresql://grandbo_owner:pw@127.0.0.1:1/grandbo")
    for command in (["migrate"], ["init", "--embedding", "deterministic"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.stdout
        assert "GRANDBO_DATABASE_URL names none" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "home" / "grandbo.db").exists()


def test_the_writability_check_of_an_export_leaves_a_neighbouring_file_alone(cli, tmp_path):
    mine = tmp_path / "log.jsonl.partial"  # a user's own file, named as the check once named its probe
    mine.write_text("notes I keep")
    cli("remember", "--title", "checkout-api pool exhausted", "--body", "retry storm")
    cli("export", str(tmp_path / "log.jsonl"))
    cli("export", "--entries", str(tmp_path / "log.jsonl"))
    assert mine.read_text() == "notes I keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("log")) == ["log.jsonl", mine.name]


def test_a_short_console_secret_stops_only_the_console_not_every_command(cli, monkeypatch):
    """GRANDBO_WEB_SESSION_SECRET was checked when the settings loaded: a short one refused `grandbo recall`,
    `grandbo orgs list` and every other command, though only the console signs with it."""
    import socket

    monkeypatch.setenv("GRANDBO_WEB_SESSION_SECRET", "too-short-a-secret")
    cli("remember", "--title", "redis evicted the session keys", "--body", "maxmemory reached")
    assert "redis evicted the session keys" in cli("recall", "redis evicted session keys").stdout
    assert json.loads(cli("orgs", "list", "--json").stdout) == ["default"]
    with socket.create_server(("127.0.0.1", 0)) as taken:  # were the secret let through, serve would stop here
        refused = cli("serve", "--port", str(taken.getsockname()[1]), code=2)
    assert refused.stderr.startswith("error: GRANDBO_WEB_SESSION_SECRET ") and len(refused.stderr.splitlines()) == 1
    assert "at least 32 characters" in refused.stderr and "openssl rand -hex 32" in refused.stderr
    assert "too-short-a-secret" not in refused.stderr and "cannot listen" not in refused.stderr
    assert Settings(web_session_secret="s" * 32).session_secret() == b"s" * 32


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["incident", "list"], "no incidents in org 'default' yet; open one with `grandbo incident open TITLE"),
        (["incident", "list", "--status", "closed"], "no closed incidents in org 'default'"),
        (["notes", "list"], "no learned notes in force or waiting for review in org 'default'"),
        (["notes", "list", "--all"], "no learned notes in org 'default' yet; a rule is learned from edits"),
        (["keys", "list"], "no API keys in org 'default' yet; make one with `grandbo keys create --scope"),
        (["catalog", "show"], "no services in the catalog of org 'default' yet; import one with `grandbo catalog"),
    ],
)
def test_an_empty_list_says_what_is_empty_and_json_stays_an_empty_list(cli, command, said):
    """An empty list printed nothing at all: an empty organization looked like a broken command."""
    printed = cli(*command).stdout
    assert printed.startswith(said) and len(printed.splitlines()) == 1, printed
    assert json.loads(cli(*command, "--json").stdout) in ([], {"services": []})


def test_an_empty_context_block_says_so_on_stderr_and_prints_no_text(cli):
    printed = cli("context")
    assert printed.stdout.strip() == "" and "the context block of org 'default' is empty" in printed.stderr
    assert "grandbo profile set --fact" in printed.stderr
    cli("profile", "set", "--fact", "name=Quillroute")
    assert cli("context").stderr == ""


def _every_command(command, path=()):  # type: ignore[no-untyped-def]
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _every_command(sub, (*path, name))


def test_every_help_shows_flags_without_a_type_and_lists_each_command_on_one_line():
    """Every command's and group's --help, as typer 0.29 draws it from our declarations: a flag (`--json`, `--force`,
    `--help`) takes no value, so it shows no type (it showed `<bool>`, as if `--json true` were asked for); an option
    given once per value shows `<str>, repeatable` (it showed `<list[str]>`); and a group lists each command's summary
    on one line at any width (the docstring's own line breaks cut it: "... and grant the", then "runtime role")."""
    import typer.main

    runner, root = CliRunner(), typer.main.get_command(app)
    helps = 0
    for path, command in _every_command(root):
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "1000"}).stdout
        helps += 1
        assert "<bool>" not in shown and "list[" not in shown, (path, shown)
        for name, sub in getattr(command, "commands", {}).items():
            summary = " ".join(sub.help.split("\n\n")[0].split())
            assert any(f"│ {name} " in line and summary in line for line in shown.splitlines()), (path, name, shown)
    assert helps > 80
    tags = runner.invoke(app, ["remember", "--help"], env={"COLUMNS": "1000"}).stdout
    assert re.search(r"--tag +<str>, repeatable", tags), tags
