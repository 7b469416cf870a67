"""Bulk import of entries from JSON Lines, reporting bad lines by number and importing the rest.

A line is either an entry as `remember` takes it (`title`, `body`, `kind`, `tags`, ...) or a
BEIR-style document (`_id`, `title`, `text`, optional `metadata` with the entry fields).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grandbo.errors import GrandboError, ImportFormatError
from grandbo.memory import OrgMemory, parse_entry
from grandbo.model import NewEntry, Source

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


def read_jsonl(lines: Iterable[str]) -> tuple[list[tuple[int, NewEntry]], list[tuple[int, str]]]:
    """Parse every line; return the good entries with their line numbers, and the problems."""
    good: list[tuple[int, NewEntry]] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = entry_from_record(json.loads(line))
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
        good.append((number, entry))
    return good, problems


def import_file(memory: OrgMemory, path: Path, *, strict: bool = False, actor: str = "import") -> ImportReport:
    """Import a JSONL file into `memory`; bad lines and ids that already exist are reported, not fatal."""
    with path.open(encoding="utf-8") as handle:
        good, problems = read_jsonl(handle)
    report = ImportReport(problems=problems)
    ids = [entry.id for _, entry in good if entry.id]
    existing = set()
    for start in range(0, len(ids), 500):
        existing |= set(memory.store.get_many(memory.org_id, ids[start : start + 500]))
    fresh = []
    for number, entry in good:
        if entry.id in existing:
            report.problems.append((number, f"entry {entry.id!r} already exists; skipped (use `correct` to change it)"))
        else:
            fresh.append(entry)
    for start in range(0, len(fresh), BATCH):
        stored = memory.remember_many(fresh[start : start + BATCH], actor=actor, strict=strict)
        report.imported += len(stored)
    report.problems.sort()
    return report
