"""benchmarks/peers.py's plumbing on a tiny set, so that the one-command peer benchmark does not rot.

The peers' own virtualenv is not needed: the plain-parts peer (bm25s + numpy) runs on this interpreter,
Grandbo's embedded store in its runner, both fed the vectors the prepare step saved (deterministic
provider: no model). The real run is `make bench-peers`, outside the suite.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "peers.py"
METRICS = ("nDCG@10", "R@5", "R@10", "MRR@10")
SPEED = ("entries", "p50_ms", "p95_ms", "ingest_per_s", "peak_rss_mb")


def _tiny_set(folder: Path) -> Path:
    docs = [
        ("d1", "checkout-api connection pool exhausted", "retry storm; ERR_CONN_RESET from payments-gateway"),
        ("d2", "redis-sessions evicted keys under maxmemory", "auth-service logins slow, allkeys-lru evictions"),
        ("d3", "certificate expired on the cdn edge", "TLS handshake failures for every client of cdn-edge"),
        ("d4", "kafka consumer lag on search-indexer", "a hot partition held the indexer behind for an hour"),
    ]
    queries = [
        ("q1", "payments-gateway answered ERR_CONN_RESET while checkout retried in a storm"),
        ("q2", "users could not log in because redis-sessions evicted keys at maxmemory"),
        ("q3", "clients saw TLS handshake failures after the cdn-edge certificate expired"),
    ]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": b}) + "\n" for i, t, b in docs)
    )
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n")
    return folder


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GRANDBO_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def test_peers_benchmark_writes_rows_tables_and_targets_for_grandbo_and_a_peer(tmp_path: Path) -> None:
    tiny = _tiny_set(tmp_path / "tiny")
    out = tmp_path / "results"
    done = _run(
        tmp_path, "--sets", str(tiny), "--sizes", "120", "--queries", "5", "--embedding", "deterministic",
        "--systems", "grandbo-embedded", "plain-parts", "--peers-python", sys.executable,
        "--cache", str(tmp_path / "cache"), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads((out / "peers.json").read_text())
    quality = [row for row in rows if row["set"] == "tiny-test"]
    speed = [row for row in rows if row["set"] == "synthetic-120"]
    arms = {(row["system"], row["arm"]) for row in quality}
    assert {("grandbo-embedded", "hybrid"), ("grandbo-embedded", "reranked"), ("plain-parts", "rrf")} <= arms
    for row in quality:
        assert all(0.0 <= row[key] <= 1.0 for key in METRICS), row
    # every query names its document's rare words: both lexical arms find all three first
    assert next(r for r in quality if r["arm"] == "lexical")["MRR@10"] == 1.0
    assert next(r for r in quality if r["arm"] == "bm25s")["MRR@10"] == 1.0
    assert {row["system"] for row in speed} == {"grandbo-embedded", "plain-parts"}
    for row in speed:
        assert row["entries"] == 120 and row["p50_ms"] > 0 and row["p95_ms"] >= row["p50_ms"]
        assert row["ingest_per_s"] > 0 and row["peak_rss_mb"] > 0, row
        # the yardstick scan was timed around the system's queries, in its own process; the ratio is p50 over it
        # (both rounded to 3 decimals: a scan of 120 vectors takes microseconds)
        ratio, yardstick = row["p50_vs_reference"], row["reference_p50_ms"]
        assert ratio > 0 and yardstick > 0, row
        assert abs(ratio * yardstick - row["p50_ms"]) <= 0.0006 * (1 + ratio + yardstick), row
    assert any(str(row["system"]).startswith("grandbo") for row in rows)
    table = (out / "peers.md").read_text()
    assert "## Numbers to reach" in table and "hybrid nDCG@10 >= best peer | tiny-test" in table
    assert "hybrid p50 <= 1.0x fastest exact peer | synthetic-120" in table
    assert "x its yardstick" in table and "raw p50s" in table
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "peers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the vectors were saved once and are what every system was fed
    saved = tmp_path / "cache" / "deterministic" / "tiny-test"
    assert (saved / "docs.npy").is_file() and json.loads((saved / "meta.json").read_text())["docs"] == 4


def test_peers_benchmark_without_the_peers_venv_says_how_to_make_it(tmp_path: Path) -> None:
    done = _run(tmp_path, "--systems", "lancedb", "--peers-python", str(tmp_path / "nowhere" / "python"))
    assert done.returncode != 0
    assert "make bench-peers" in done.stderr and "--systems" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_child_s_peak_memory_is_its_own_not_the_runner_s():
    """Linux keeps ru_maxrss across exec: a child of a big runner reported the runner's peak as its own."""
    import numpy as np

    held = np.ones(300 * 1024 * 1024, dtype=np.uint8)  # the runner holds 300 MB, every page touched
    probe = "import sys; sys.path.insert(0, sys.argv[1]); from peers_measure import peak_rss_mb; print(peak_rss_mb())"
    done = subprocess.run([sys.executable, "-c", probe, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert 0 < float(done.stdout) < 200, done.stdout  # numpy and an interpreter: tens of MB, not the runner's 300
    assert held.sum() == held.size
