"""Reading a data set in BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.

Public data is loaded as it comes: a document `_id` that is not a valid entry id (`#`, spaces, 300
characters) is given a stable entry id of its own and mapped back in every output (run files, reports);
a title longer than an entry title may be is cut at a word and kept whole in the body, and a text longer
than an entry body may be is cut; a repeated id is
reported and the first document kept; metadata that is not an object, or whose fields an entry cannot
take, is reported and left out; so is a qrels line that is not three tab-separated columns. Nothing aborts the run
but a missing file, a line that is not UTF-8 or not JSON, and a split in which no query has a relevant document.

A split is the set of queries its qrels file judges, plus the queries whose `metadata.split` names it
(how a set assigns unanswerable queries, which have no judgments, to a split).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError
from grandbo.model import ENTRY_ID_PATTERN, MAX_BODY_CHARS, NewEntry, Severity

TITLE_MAX = 500
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Query:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def marked_unanswerable(self) -> bool:
        return self.metadata.get("answerable") is False


@dataclass
class Dataset:
    name: str
    corpus: list[dict[str, Any]]  # records with a valid entry `_id` (see `original_ids`)
    queries: list[Query]
    qrels: dict[str, dict[str, int]]  # query id -> entry id -> grade
    catalog: str | None = None  # topology.yaml, when the set has one
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # outcomes.jsonl: the effectiveness ledger
    original_ids: dict[str, str] = field(default_factory=dict)  # entry id -> the document's own `_id`
    problems: list[str] = field(default_factory=list)  # what was repaired or left out, one line each
    split: str = "test"

    @property
    def judged(self) -> list[Query]:
        """Queries with at least one relevant document (the ones the metrics cover)."""
        return [query for query in self.queries if any(g > 0 for g in self.qrels.get(query.id, {}).values())]

    @property
    def unanswerable(self) -> list[Query]:
        return [query for query in self.queries if query.marked_unanswerable]

    def original(self, entry_id: str) -> str:
        return self.original_ids.get(entry_id, entry_id)


def entry_id_for(doc_id: str) -> str:
    """The document's own id when it is a valid entry id, else a stable one derived from it."""
    if ENTRY_ID_PATTERN.fullmatch(doc_id):
        return doc_id
    return "doc-" + hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:16]


def _situation(query_id: str, metadata: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """A query's metadata with the situation recall is given (`services`, `severity`) in the shapes recall
    takes: one service as text becomes a list of one; a severity or services recall cannot read are reported
    and left out (one bad query stopped the whole evaluation, or its service was read letter by letter)."""
    kept = dict(metadata)
    services = kept.get("services")
    if isinstance(services, str):
        kept["services"] = [services]
    elif services is not None and not (isinstance(services, list) and all(isinstance(s, str) for s in services)):
        problems.append(f"query {query_id!r}: metadata services is not a list of names; ignored")
        del kept["services"]
    if kept.get("severity") is not None:
        try:
            kept["severity"] = Severity.parse(kept["severity"]).value
        except ValueError as error:
            problems.append(f"query {query_id!r}: metadata severity: {error}; ignored")
            del kept["severity"]
    return kept


def _storable(text: str) -> str:
    """`text` without what neither store can keep: NUL characters, and lone surrogates (as U+FFFD)."""
    return _SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def _document(record: Any, number: int, problems: list[str]) -> tuple[str, dict[str, Any]] | None:
    """One corpus line as a record `entry_from_record` takes, or None (reported) when it has no id."""
    if not isinstance(record, dict) or record.get("_id") in (None, ""):
        problems.append(f"corpus line {number}: no _id; skipped")
        return None
    doc_id = str(record["_id"])
    title = " ".join(_storable(str(record.get("title") or "")).split())
    text = _storable(str(record.get("text") or ""))
    if (title, text) != (" ".join(str(record.get("title") or "").split()), str(record.get("text") or "")):
        problems.append(f"document {doc_id!r}: NUL characters or lone surrogates, which no store keeps; removed")
    if not title and not text.strip():
        problems.append(f"document {doc_id!r}: no title and no text; skipped")
        return None
    if len(title) > TITLE_MAX:
        cut = title[:TITLE_MAX].rsplit(" ", 1)[0] or title[:TITLE_MAX]
        text = f"{title}\n\n{text}" if text else title
        title = cut
        problems.append(f"document {doc_id!r}: title longer than {TITLE_MAX} characters; cut, kept whole in the body")
    if len(text) > MAX_BODY_CHARS:
        text = text[:MAX_BODY_CHARS]
        problems.append(f"document {doc_id!r}: text longer than {MAX_BODY_CHARS:,} characters; cut there")
    metadata = record.get("metadata")
    kept: dict[str, Any] = {}
    if metadata not in (None, {}):
        if not isinstance(metadata, dict):
            problems.append(f"document {doc_id!r}: metadata is a {type(metadata).__name__}, not an object; ignored")
        else:
            for key, value in metadata.items():
                if key in NewEntry.model_fields and key not in ("id", "title", "body"):
                    try:
                        NewEntry.model_validate({"title": "x", key: value})
                    except ValidationError:
                        problems.append(f"document {doc_id!r}: metadata field {key!r} is not valid; ignored")
                        continue
                    kept[key] = value
    return doc_id, {"_id": entry_id_for(doc_id), "title": title or text.strip()[:120], "text": text, "metadata": kept}


def load(directory: Path, split: str = "test") -> Dataset:
    """Load a BEIR-layout folder; a missing file is an error that names it."""
    parts = split.split("+")  # "dev+test": the union of two splits
    paths = {"corpus": directory / "corpus.jsonl", "queries": directory / "queries.jsonl"}
    paths |= {f"qrels:{part}": directory / "qrels" / f"{part}.tsv" for part in parts}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        have = sorted(p.stem for p in (directory / "qrels").glob("*.tsv")) if (directory / "qrels").is_dir() else []
        raise InvalidInputError(
            f"{directory} is not a BEIR-layout data set with a {split!r} split: missing {', '.join(missing)}. "
            f"Expected corpus.jsonl (_id, title, text), queries.jsonl (_id, text) and qrels/{split}.tsv "
            f"(query-id, corpus-id, score)" + (f"; splits here: {', '.join(have)}." if have else "."),
            detail={"missing": missing, "splits": have},
        )
    problems: list[str] = []
    corpus: list[dict[str, Any]] = []
    original: dict[str, str] = {}
    mapped: dict[str, str] = {}  # the document's own id -> entry id
    for number, record in _jsonl(paths["corpus"]):
        found = _document(record, number, problems)
        if found is None:
            continue
        doc_id, prepared = found
        entry_id = prepared["_id"]
        if doc_id in mapped or entry_id in original:
            problems.append(f"document {doc_id!r} (corpus line {number}): duplicate id; the first one is kept")
            continue
        mapped[doc_id] = entry_id
        if len(doc_id.split()) != 1:
            problems.append(
                f"document {doc_id!r}: its id holds whitespace, which TREC run files (--run-file) and trec_eval "
                "split on; scored here, but its lines in a run file will not read back"
            )
        if entry_id != doc_id:
            original[entry_id] = doc_id
        corpus.append(prepared)
    qrels: dict[str, dict[str, int]] = {}
    for part in parts:
        _read_qrels(paths[f"qrels:{part}"], mapped, qrels, problems)
    queries: list[Query] = []
    seen: set[str] = set()
    for number, record in _jsonl(paths["queries"]):
        if not isinstance(record, dict) or record.get("_id") in (None, "") or not str(record.get("text") or "").strip():
            problems.append(f"queries line {number}: no _id or no text; skipped")
            continue
        query_id = str(record["_id"])
        if query_id in seen:
            problems.append(f"query {query_id!r} (queries line {number}): duplicate id; the first one is kept")
            continue
        seen.add(query_id)
        metadata = record.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            problems.append(f"query {query_id!r}: metadata is a {type(metadata).__name__}, not an object; ignored")
            metadata = None
        metadata = _situation(query_id, metadata or {}, problems)
        if query_id in qrels or metadata.get("split") in parts:
            queries.append(Query(query_id, str(record["text"]), metadata))
    problems += [
        f"qrels: query {qid!r} is judged but queries.jsonl lacks it; skipped" for qid in qrels if qid not in seen
    ]
    judged = [query for query in queries if any(grade > 0 for grade in qrels.get(query.id, {}).values())]
    if not judged and not any(query.marked_unanswerable for query in queries):
        first = "".join(f"\n  {problem}" for problem in problems[:5])
        raise InvalidInputError(
            f"{directory}: no query of queries.jsonl has a relevant document (score above 0) of corpus.jsonl "
            f"({len(corpus)} documents) in qrels/{split}.tsv, so there is nothing to score. Each qrels line is "
            "query-id, corpus-id and score separated by tabs, naming ids of queries.jsonl and corpus.jsonl"
            + (f"; what loading found:{first}" if first else "."),
            detail={"documents": len(corpus), "problems": problems[:20]},
        )
    catalog_path, outcomes_path = directory / "topology.yaml", directory / "outcomes.jsonl"
    return Dataset(
        directory.name,
        corpus,
        queries,
        qrels,
        catalog=catalog_path.read_text(encoding="utf-8") if catalog_path.is_file() else None,
        outcomes=[record for _, record in _jsonl(outcomes_path)] if outcomes_path.is_file() else [],
        original_ids=original,
        problems=problems,
        split=split,
    )


def _read_qrels(path: Path, mapped: dict[str, str], qrels: dict[str, dict[str, int]], problems: list[str]) -> None:
    for number, line in _lines(path):
        for row in csv.reader([line], delimiter="\t"):
            if row and row[0] == "query-id":
                continue
            if len(row) < 3:
                problems.append(
                    f"{path.parent.name}/{path.name} line {number}: expected query-id, corpus-id and score "
                    "separated by tabs; skipped"
                )
                continue
            try:
                grade = int(float(row[2]))
            except ValueError:
                problems.append(f"qrels line {row!r}: score is not a number; skipped")
                continue
            if row[1] not in mapped:
                problems.append(f"qrels: query {row[0]!r} judges document {row[1]!r}, which the corpus lacks")
                continue
            qrels.setdefault(row[0], {})[mapped[row[1]]] = grade


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a file and their numbers; a byte order mark is read past, and a line that is
    not UTF-8 is an error naming the file and the line (not a traceback)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise InvalidInputError(
                    f"{path}:{number}: not UTF-8 text (byte {error.start + 1} of the line); save the file as UTF-8.",
                    detail={"path": str(path), "line": number},
                ) from error
            if line.strip():
                yield number, line


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    records = []
    for number, line in _lines(path):
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise InvalidInputError(
                f"{path}:{number}: not valid JSON ({error.msg}); fix or remove that line.",
                detail={"line": number},
            ) from error
    return records
