"""Bulk import and export of entries as JSON Lines.

A line is either an entry as `remember` takes it (`title`, `body`, `kind`, `tags`, ...) or a
BEIR-style document (`_id`, `title`, `text`, optional `metadata` with the entry fields). A line may
carry `"embedding": {"provider", "model", "dimension", "vector"}` (what `grandbo export` writes): a
vector of the store's own embedding space is stored as it is, any other is ignored and the entry is
embedded again. Bad lines are reported by number; the rest is imported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grandbo.errors import GrandboError, ImportFormatError, InvalidInputError
from grandbo.model import NewEntry, Source, parse_entry

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

BATCH = 2_000


@dataclass
class ImportReport:
    imported: int = 0
    problems: list[tuple[int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "rejected": len(self.problems),
            "problems": [{"line": line, "message": message} for line, message in self.problems],
        }


def entry_from_record(record: Any) -> NewEntry:
    """One JSON object as a NewEntry (either our own shape or BEIR's)."""
    if not isinstance(record, dict):
        raise ImportFormatError(f"expected a JSON object, got {type(record).__name__}")
    if "_id" in record or "text" in record:
        metadata = record.get("metadata") or {}
        record = {
            "id": record.get("_id"),
            "title": record.get("title") or str(record.get("text", ""))[:120],
            "body": record.get("text", ""),
            **{key: value for key, value in metadata.items() if key in NewEntry.model_fields},
        }
    record = {"source": Source.IMPORT.value, **record}
    return parse_entry(record)


Embedding = dict[str, Any]


def read_jsonl(lines: Iterable[str]) -> tuple[list[tuple[int, NewEntry, Embedding | None]], list[tuple[int, str]]]:
    """Parse every line; return the good entries with their line numbers (and vectors), and the problems."""
    good: list[tuple[int, NewEntry, Embedding | None]] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            embedding = record.pop("embedding", None) if isinstance(record, dict) else None
            entry = entry_from_record(record)
        except json.JSONDecodeError as error:
            problems.append((number, f"not valid JSON: {error.msg} at column {error.colno}"))
            continue
        except GrandboError as error:
            problems.append((number, error.message))
            continue
        if entry.id is not None and entry.id in seen:
            problems.append((number, f"duplicate id {entry.id!r} (first on line {seen[entry.id]}); skipped"))
            continue
        if entry.id is not None:
            seen[entry.id] = number
        good.append((number, entry, embedding if isinstance(embedding, dict) else None))
    return good, problems


def import_file(memory: OrgMemory, path: Path, *, strict: bool = False, actor: str = "import") -> ImportReport:
    """Import a JSONL file into `memory`; bad lines and ids that already exist are reported, not fatal."""
    with path.open(encoding="utf-8") as handle:
        good, problems = read_jsonl(handle)
    report = ImportReport(problems=problems)
    ids = [entry.id for _, entry, _ in good if entry.id]
    existing = set()
    for start in range(0, len(ids), 500):
        existing |= set(memory.get_many(ids[start : start + 500]))
    space = memory.space
    fresh: list[NewEntry] = []
    vectors: list[Any] = []
    for number, entry, embedding in good:
        if entry.id in existing:
            report.problems.append((number, f"entry {entry.id!r} already exists; skipped (use `correct` to change it)"))
            continue
        fresh.append(entry)
        vectors.append(None)
        if embedding is None:
            continue
        same = space is not None and (
            embedding.get("provider"),
            embedding.get("model"),
            embedding.get("dimension"),
        ) == (space.provider, space.model, space.dimension)
        vector = embedding.get("vector")
        usable = (
            same
            and isinstance(vector, list)
            and len(vector) == space.dimension  # type: ignore[union-attr]
            and all(isinstance(x, int | float) and math.isfinite(x) for x in vector)
        )
        if usable:
            vectors[-1] = vector
        elif same:
            report.problems.append((number, f"vector is not {space.dimension} finite numbers; ignored, the entry "  # type: ignore[union-attr]
                                            "is embedded again"))  # fmt: skip
        else:
            report.problems.append(
                (
                    number,
                    f"vector of another embedding space ignored (this store: {space}); the entry is embedded again",
                )
            )
    for start in range(0, len(fresh), BATCH):
        stored = memory.remember_many(
            fresh[start : start + BATCH], actor=actor, strict=strict, vectors=vectors[start : start + BATCH]
        )
        report.imported += len(stored)
    report.problems.sort()
    return report


def export_file(memory: OrgMemory, path: Path) -> int:
    """Write the org's active entries, with their current vectors, as JSON Lines; return how many."""
    if not path.parent.is_dir():
        raise InvalidInputError(
            f"Cannot write {path}: the folder {path.parent} does not exist. Create it first, or name another file.",
            detail={"path": str(path)},
        )
    entries = memory.entries()
    space = memory.space
    written = 0
    with path.open("w", encoding="utf-8") as handle:
        for start in range(0, len(entries), 1000):
            chunk = entries[start : start + 1000]
            vectors = memory.vectors([entry.id for entry in chunk])
            for entry in chunk:
                record = entry.model_dump(
                    mode="json",
                    include={
                        "id",
                        "title",
                        "body",
                        "kind",
                        "source",
                        "tags",
                        "services",
                        "severity",
                        "occurred_at",
                        "meta",
                    },
                )
                vector = vectors.get(entry.id)
                if vector is not None and space is not None:
                    record["embedding"] = {"provider": space.provider, "model": space.model,
                                           "dimension": space.dimension, "vector": vector.tolist()}  # fmt: skip
                handle.write(json.dumps(record) + "\n")
                written += 1
    return written
