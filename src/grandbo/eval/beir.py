"""Reading a data set in BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grandbo.errors import InvalidInputError


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
    corpus: list[dict[str, Any]]
    queries: list[Query]
    qrels: dict[str, dict[str, int]]
    catalog: str | None = None  # topology.yaml, when the set has one
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # outcomes.jsonl: the effectiveness ledger

    @property
    def judged(self) -> list[Query]:
        """Queries with at least one relevant document (the ones the metrics cover)."""
        return [query for query in self.queries if any(g > 0 for g in self.qrels.get(query.id, {}).values())]

    @property
    def unanswerable(self) -> list[Query]:
        return [query for query in self.queries if query.marked_unanswerable]


def load(directory: Path, split: str = "test") -> Dataset:
    """Load a BEIR-layout folder; a missing file is an error that names it."""
    paths = {
        "corpus": directory / "corpus.jsonl",
        "queries": directory / "queries.jsonl",
        "qrels": directory / "qrels" / f"{split}.tsv",
    }
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise InvalidInputError(
            f"{directory} is not a BEIR-layout data set: missing {', '.join(missing)}. Expected corpus.jsonl "
            f"(_id, title, text), queries.jsonl (_id, text) and qrels/{split}.tsv (query-id, corpus-id, score).",
            detail={"missing": missing},
        )
    corpus = _jsonl(paths["corpus"])
    queries = [
        Query(str(record["_id"]), record["text"], record.get("metadata") or {}) for record in _jsonl(paths["queries"])
    ]
    qrels: dict[str, dict[str, int]] = {}
    with paths["qrels"].open(encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t")
        for row in reader:
            if not row or row[0] == "query-id":
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    catalog_path, outcomes_path = directory / "topology.yaml", directory / "outcomes.jsonl"
    return Dataset(
        directory.name,
        corpus,
        queries,
        qrels,
        catalog=catalog_path.read_text(encoding="utf-8") if catalog_path.is_file() else None,
        outcomes=_jsonl(outcomes_path) if outcomes_path.is_file() else [],
    )


def _jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise InvalidInputError(
                f"{path}:{number}: not valid JSON ({error.msg}).", detail={"line": number}
            ) from error
    return records
