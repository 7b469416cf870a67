"""The peers of benchmarks/peers.py, one system per process, run by .peers-venv's interpreter.

    .peers-venv/bin/python benchmarks/peer_systems.py run SYSTEM SET_FOLDER OUT.json [--pg-url URL]
    .peers-venv/bin/python benchmarks/peer_systems.py chart peers.json peers.png

Imports nothing of Grandbo: only numpy and the system under test. Every system gets the texts and the
vectors of the set's folder (written by peers.py) and answers each query from its text and its given
vector; hybrids fuse the top 25 of each arm by Reciprocal Rank Fusion (k = 60), as Grandbo does. Each
system is written the way its documentation shows, with no tuning: what a team would write.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from peers_measure import peak_rss_mb, yardstick  # beside this file

TOP = 25  # candidates per arm, as Grandbo's lexical_limit and vector_limit
RRF_K = 60
SHOWN = 10
WARMUP = 20  # untimed queries per arm first: the steady state of a long-running process
BATCH = 5_000
Search = Callable[[str, np.ndarray], list[str]]


@dataclass
class Data:
    ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    query_ids: list[str]
    queries: list[str]
    probes: np.ndarray


def load(folder: Path) -> Data:
    docs = [json.loads(line) for line in (folder / "docs.jsonl").open(encoding="utf-8")]
    topics = [json.loads(line) for line in (folder / "queries.jsonl").open(encoding="utf-8")]
    return Data(
        [str(d["_id"]) for d in docs], [str(d["embed_text"]) for d in docs], np.load(folder / "docs.npy"),
        [str(t["_id"]) for t in topics], [str(t["text"]) for t in topics], np.load(folder / "queries.npy"),
    )  # fmt: skip


def rrf(lists: list[list[str]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, doc in enumerate(ranked, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda doc: -scores[doc])


def words(text: str) -> list[str]:
    """The query's distinct words, for the query languages that need them spelled out (FTS5, tsquery)."""
    return list(dict.fromkeys(re.findall(r"[a-z0-9]+", text.lower())))


# ---- the systems: each returns its ingest time and one search function per arm ----


def plain_parts(data: Data, work: Path, url: str | None) -> tuple[float, dict[str, Search]]:
    """bm25s (English stop words, no stemming) + a numpy exact scan + RRF."""
    import bm25s

    start = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(data.texts, stopwords="en", show_progress=False), show_progress=False)
    matrix = np.ascontiguousarray(data.vectors, dtype=np.float32)
    ingest = time.perf_counter() - start
    top = min(TOP, len(data.ids))

    def lexical(text: str, probe: np.ndarray) -> list[str]:
        tokens = bm25s.tokenize([text], stopwords="en", show_progress=False)
        docs, scores = retriever.retrieve(tokens, k=top, show_progress=False, n_threads=1)
        return [data.ids[i] for i, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def vector(text: str, probe: np.ndarray) -> list[str]:
        scores = matrix @ probe
        best = np.argpartition(-scores, top - 1)[:top]
        return [data.ids[i] for i in best[np.argsort(-scores[best])]]

    return ingest, {"bm25s": lexical, "numpy-exact": vector, "rrf": lambda t, p: rrf([lexical(t, p), vector(t, p)])}


def lancedb_system(data: Data, work: Path, url: str | None) -> tuple[float, dict[str, Search]]:
    """LanceDB on disk: its native full-text index (stemming, stop words: the defaults), a flat (exact)
    vector scan, and its hybrid query with its RRF re-ranker."""
    import lancedb
    import pyarrow as pa
    from lancedb.rerankers import RRFReranker

    start = time.perf_counter()
    db = lancedb.connect(work / "lance")
    flat = pa.array(np.ascontiguousarray(data.vectors, dtype=np.float32).ravel())
    table = db.create_table(
        "docs",
        data=pa.table(
            {
                "id": data.ids,
                "text": data.texts,
                "vector": pa.FixedSizeListArray.from_arrays(flat, data.vectors.shape[1]),
            }
        ),
    )
    table.create_fts_index("text")
    ingest = time.perf_counter() - start
    reranker = RRFReranker(K=RRF_K)

    def ids(query: Any) -> list[str]:
        return [str(value) for value in query.select(["id"]).limit(TOP).to_arrow()["id"].to_pylist()]

    def fts(text: str, probe: np.ndarray) -> list[str]:
        return ids(table.search(text, query_type="fts"))

    def vector(text: str, probe: np.ndarray) -> list[str]:
        return ids(table.search(probe, query_type="vector").distance_type("cosine"))

    def hybrid(text: str, probe: np.ndarray) -> list[str]:
        query = table.search(query_type="hybrid").vector(probe).text(text).distance_type("cosine")
        return ids(query.rerank(reranker))

    return ingest, {"fts": fts, "vector-exact": vector, "hybrid-rrf": hybrid}


def sqlite_system(data: Data, work: Path, url: str | None) -> tuple[float, dict[str, Search]]:
    """One SQLite file (pysqlite3-binary): FTS5 (porter, unicode61; OR of the query's words, bm25 rank)
    and sqlite-vec's vec0 (exact cosine KNN), fused by RRF in Python."""
    import pysqlite3.dbapi2 as sqlite3
    import sqlite_vec

    start = time.perf_counter()
    conn = sqlite3.connect(str(work / "peers.db"))
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tokenize='porter unicode61')")
    dim = data.vectors.shape[1]
    conn.execute(f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{dim}] distance_metric=cosine)")
    vectors = np.ascontiguousarray(data.vectors, dtype=np.float32)
    for offset in range(0, len(data.ids), BATCH):
        rows = range(offset, min(offset + BATCH, len(data.ids)))
        with conn:
            conn.executemany("INSERT INTO fts (rowid, text) VALUES (?, ?)", [(i + 1, data.texts[i]) for i in rows])
            conn.executemany("INSERT INTO vec (rowid, embedding) VALUES (?, ?)", [(i + 1, vectors[i]) for i in rows])
    ingest = time.perf_counter() - start

    def fts(text: str, probe: np.ndarray) -> list[str]:
        match = " OR ".join(f'"{word}"' for word in words(text))
        if not match:
            return []
        found = conn.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (match, TOP))
        return [data.ids[row - 1] for (row,) in found]

    def vector(text: str, probe: np.ndarray) -> list[str]:
        found = conn.execute(
            "SELECT rowid FROM vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (np.ascontiguousarray(probe, dtype=np.float32), TOP),
        )
        return [data.ids[row - 1] for (row,) in found]

    return ingest, {"fts5": fts, "vec0-exact": vector, "rrf": lambda t, p: rrf([fts(t, p), vector(t, p)])}


def chroma_system(data: Data, work: Path, url: str | None) -> tuple[float, dict[str, Search]]:
    """Chroma, persistent on disk, cosine space: its HNSW index is its only vector search (approximate)."""
    import chromadb

    start = time.perf_counter()
    client = chromadb.PersistentClient(
        path=str(work / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False)
    )
    collection = client.create_collection("docs", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    batch = min(BATCH, client.get_max_batch_size())
    for offset in range(0, len(data.ids), batch):
        collection.add(
            ids=data.ids[offset : offset + batch],
            embeddings=np.ascontiguousarray(data.vectors[offset : offset + batch], dtype=np.float32),
            documents=data.texts[offset : offset + batch],
        )
    ingest = time.perf_counter() - start

    def vector(text: str, probe: np.ndarray) -> list[str]:
        found = collection.query(query_embeddings=[probe], n_results=min(TOP, len(data.ids)), include=[])
        return [str(doc) for doc in found["ids"][0]]

    return ingest, {"vector-hnsw": vector}


HANDROLLED = """
WITH lexical AS (
    SELECT id, row_number() OVER (ORDER BY ts_rank(tsv, query) DESC) AS r
    FROM docs, to_tsquery('english', %(tsquery)s) AS query
    WHERE tsv @@ query ORDER BY ts_rank(tsv, query) DESC LIMIT %(top)s
), semantic AS (
    SELECT id, row_number() OVER (ORDER BY embedding <=> %(vector)s::vector) AS r
    FROM docs ORDER BY embedding <=> %(vector)s::vector LIMIT %(top)s
)
SELECT coalesce(l.id, s.id) AS id,
       coalesce(1.0 / (%(k)s + l.r), 0) + coalesce(1.0 / (%(k)s + s.r), 0) AS score
FROM lexical l FULL OUTER JOIN semantic s ON l.id = s.id
ORDER BY score DESC, id LIMIT %(shown)s
"""


def literal(vector: np.ndarray) -> str:
    """A vector in pgvector's text form."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def postgres_system(data: Data, work: Path, url: str | None) -> tuple[float, dict[str, Search]]:
    """What a team would write on Postgres: a generated tsvector column with a GIN index, a pgvector
    column scanned exactly, and one SQL query fusing both by RRF."""
    import psycopg

    if not url:
        raise SystemExit("postgres-handrolled needs --pg-url (peers.py starts a server and passes it)")
    conn = psycopg.connect(url, autocommit=True)
    dim = data.vectors.shape[1]
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("DROP TABLE IF EXISTS docs")
    # pgvector's text form, made before the clock starts: the vectors are given, the database's work is timed
    rows = [(i, text, literal(vector)) for i, (text, vector) in enumerate(zip(data.texts, data.vectors, strict=True))]
    start = time.perf_counter()
    conn.execute(
        f"CREATE TABLE docs (id integer PRIMARY KEY, body text NOT NULL, embedding vector({dim}) NOT NULL, "
        "tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED)"
    )
    with conn.cursor() as cursor, cursor.copy("COPY docs (id, body, embedding) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    conn.execute("CREATE INDEX docs_tsv ON docs USING gin (tsv)")
    conn.execute("ANALYZE docs")
    ingest = time.perf_counter() - start

    def lexical(text: str, probe: np.ndarray) -> list[str]:
        query = " | ".join(words(text))
        found = conn.execute(
            "SELECT id FROM docs, to_tsquery('english', %s) AS query WHERE tsv @@ query "
            "ORDER BY ts_rank(tsv, query) DESC LIMIT %s", (query, TOP),
        )  # fmt: skip
        return [data.ids[row[0]] for row in found]

    def vector(text: str, probe: np.ndarray) -> list[str]:
        found = conn.execute("SELECT id FROM docs ORDER BY embedding <=> %s::vector LIMIT %s", (literal(probe), TOP))
        return [data.ids[row[0]] for row in found]

    def fused(text: str, probe: np.ndarray) -> list[str]:
        params = {"tsquery": " | ".join(words(text)), "vector": literal(probe), "top": TOP, "k": RRF_K, "shown": SHOWN}
        return [data.ids[row[0]] for row in conn.execute(HANDROLLED, params)]

    return ingest, {"tsvector": lexical, "pgvector-exact": vector, "rrf": fused}


SYSTEMS = {
    "plain-parts": plain_parts,
    "lancedb": lancedb_system,
    "sqlite-fts5-vec": sqlite_system,
    "chroma": chroma_system,
    "postgres-handrolled": postgres_system,
}


def run(system: str, folder: Path, out: Path, url: str | None) -> None:
    data = load(folder)
    base = peak_rss_mb()
    with tempfile.TemporaryDirectory(prefix=f"peers-{system}-") as scratch:
        ingest, arms = SYSTEMS[system](data, Path(scratch), url)
        block = yardstick(data.vectors, data.probes)
        report: dict[str, Any] = {"system": system, "entries": len(data.ids), "ingest_s": ingest, "arms": {}}
        for arm, search in arms.items():
            for text, probe in list(zip(data.queries, data.probes, strict=True))[:WARMUP]:
                search(text, probe)
            rankings, times, reference = {}, [], block()
            for qid, text, probe in zip(data.query_ids, data.queries, data.probes, strict=True):
                start = time.perf_counter()
                found = search(text, probe)
                times.append((time.perf_counter() - start) * 1000)
                rankings[qid] = found[:SHOWN]
            reference += block()
            report["arms"][arm] = {"rankings": rankings, "times_ms": times, "reference_ms": reference}
        report |= {"peak_rss_mb": peak_rss_mb(), "rss_before_mb": base}
    out.write_text(json.dumps(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("system", choices=list(SYSTEMS))
    runner.add_argument("folder", type=Path)
    runner.add_argument("out", type=Path)
    runner.add_argument("--pg-url")
    chart = commands.add_parser("chart")
    chart.add_argument("results", type=Path)
    chart.add_argument("png", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.system, args.folder, args.out, args.pg_url)
    else:
        from peers_chart import draw  # beside this file

        draw(json.loads(args.results.read_text()), args.png)
    sys.exit(0)


if __name__ == "__main__":
    main()
