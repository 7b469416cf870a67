"""Bulk import and export of entries as JSON Lines.

A line is either an entry as `remember` takes it (`title`, `body`, `kind`, `tags`, ...) or a
BEIR-style document (`_id`, `title`, `text`, optional `metadata` with the entry fields). A line may
carry `"embedding": {"provider", "model", "dimension", "vector"}` (what `grandbo export` writes): a
vector of the store's own embedding space is stored as it is, any other is ignored and the entry is
embedded again. Every line that can be stored is stored; every other is reported by number with its
reason. A line without an id gets one from its content (`content_id`), and lines the org already holds
are skipped, so an interrupted import is resumed by running it again, without duplicates.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic_core import to_json

from grandbo.embeddings.base import FLOAT32_MAX
from grandbo.errors import (
    GrandboError,
    ImportFormatError,
    InvalidInputError,
    OrgDroppedError,
    StoreFullError,
    StoreUnavailableError,
    StrictModeError,
)
from grandbo.files import replaced_privately, writable
from grandbo.model import EmbeddingSpace, Entry, Listing, NewEntry, Source, parse_entry
from grandbo.tiers.log_export import EXPORT_PAGE, by_seq

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

BATCH = 2_000
# A line of `grandbo import` holds at most this: an entry's body (200,000 characters, 6 bytes each as \u escapes),
# its meta (64 KiB) and a vector of 4,096 numbers come to under 2 MiB
MAX_LINE_BYTES = 8 << 20
MAX_SKIP_BYTES = 64 << 20  # a longer line is skipped to its end; one with no end within this refuses the file


class _Overlong:
    """What `_lines` gives for a line past MAX_LINE_BYTES, skipped unread: `read_jsonl` refuses it as its line."""


OVERLONG = _Overlong()
_OVERLONG_PROBLEM = (
    f"is over {MAX_LINE_BYTES >> 20} MiB, far more than an entry's line holds (a body of 200,000 characters, a meta "
    "of 64 KiB and a vector of 4,096 numbers come to under 2 MiB): skipped unread. Split it into entries, one a line, "
    "or cut what it holds."
)


@dataclass
class ImportReport:
    """What an import did: lines stored, lines already there (a rerun), and every refused line with its reason."""

    imported: int = 0
    already: int = 0  # identical to an entry the org holds (an earlier run, or a repeat in the file): skipped
    lines: int = 0  # non-empty lines read
    problems: list[tuple[int, str]] = field(default_factory=list)  # refused lines and notes about kept ones
    refused: set[int] = field(default_factory=set)  # the lines of `problems` that were not stored
    stopped: str | None = None  # why the import stopped before the end (strict mode), if it did

    @property
    def complete(self) -> bool:
        """Every line is in the store (imported now or before)."""
        return not self.refused and self.stopped is None

    def refuse(self, line: int, message: str) -> None:
        self.problems.append((line, message))
        self.refused.add(line)

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "already": self.already,
            "lines": self.lines,
            "rejected": len(self.refused),
            "stopped": self.stopped,
            "problems": [
                {"line": line, "message": message, "stored": line not in self.refused}
                for line, message in sorted(self.problems)
            ],
        }


def entry_from_record(record: Any) -> NewEntry:
    """One JSON object as a NewEntry (either our own shape or BEIR's)."""
    if not isinstance(record, dict):
        raise ImportFormatError(f"expected a JSON object, got {type(record).__name__}")
    if "_id" in record or "text" in record:
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ImportFormatError(f"metadata must be a JSON object, got {type(metadata).__name__}")
        record = {
            "id": record.get("_id"),
            "title": record.get("title") or str(record.get("text", ""))[:120],
            "body": record.get("text", ""),
            **{key: value for key, value in metadata.items() if key in NewEntry.model_fields},
        }
    record = {"source": Source.IMPORT.value, **record}
    return parse_entry(record)


def content_id(entry: NewEntry) -> str:
    """The id of a line that gave none: a hash of its content, so that importing the file again finds it."""
    content = to_json(entry.model_dump(mode="json", exclude={"id"}), indent=None).decode()
    canonical = json.dumps(json.loads(content), sort_keys=True, ensure_ascii=False)
    return "imp-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]


Embedding = dict[str, Any]
Parsed = tuple[int, NewEntry, Embedding | None]


def _parse(raw: bytes) -> tuple[NewEntry, Embedding | None]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ImportFormatError(
            f"not valid UTF-8 (byte {error.start + 1} of the line); save the file as UTF-8"
        ) from None
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ImportFormatError(f"not valid JSON: {error.msg} at column {error.colno}") from None
    except RecursionError:
        raise ImportFormatError("not valid JSON here: nested too deeply") from None
    embedding = record.pop("embedding", None) if isinstance(record, dict) else None
    return entry_from_record(record), embedding if isinstance(embedding, dict) else None


def read_jsonl(lines: Iterable[bytes | str | _Overlong]) -> tuple[list[Parsed], list[tuple[int, str]]]:
    """Parse every line; return the good entries with their line numbers (and vectors), and the problems.

    Every entry gets an id: its own, or one derived from its content (`content_id`). A line repeating an
    earlier line's id with other content is a problem; an exact repeat is dropped quietly.
    """
    good: list[Parsed] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, tuple[int, NewEntry]] = {}
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, _Overlong):
            problems.append((number, _OVERLONG_PROBLEM))
            continue
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        if number == 1:  # a UTF-8 byte order mark (Windows editors write one): the text starts after it
            data = data.removeprefix(codecs.BOM_UTF8)
        if not data.strip():
            continue
        try:
            entry, embedding = _parse(data)
        except GrandboError as error:
            problems.append((number, error.message))
            continue
        except (ValueError, TypeError, RecursionError) as error:  # anything else a hostile line can provoke
            problems.append((number, f"cannot be read as an entry: {type(error).__name__}: {str(error)[:200]}"))
            continue
        if entry.id is None:
            entry = entry.model_copy(update={"id": content_id(entry)})
        assert entry.id is not None
        if entry.id in seen:
            first, earlier = seen[entry.id]
            if not _same(earlier, entry):
                problems.append((number, f"duplicate id {entry.id!r} (first on line {first}); skipped"))
            continue
        seen[entry.id] = (number, entry)
        good.append((number, entry, embedding))
    return good, problems


def _same(a: NewEntry | Entry, b: NewEntry) -> bool:
    """Whether an entry holds what a line says (fields the line left out are not compared)."""
    given = b.model_dump(mode="json", exclude={"id", "source"}, exclude_unset=True)
    held = a.model_dump(mode="json", include=set(given))
    if "occurred_at" in given and given["occurred_at"] is not None:
        return {**held, "occurred_at": None} == {**given, "occurred_at": None} and a.occurred_at == b.occurred_at
    return held == given


Progress = Callable[[int, int], None]


def import_file(
    memory: OrgMemory,
    path: Path,
    *,
    strict: bool = False,
    actor: str = "import",
    progress: Progress | None = None,
) -> ImportReport:
    """Import a JSONL file into `memory`: every line that can be stored is stored, every other is reported
    with its number and reason. Lines already in the store (an earlier, interrupted run) are skipped, so a
    rerun resumes. `progress(lines_done, lines_total)` is called after each batch."""
    with path.open("rb") as handle:
        lines = _lines(path, handle)
        first = next(lines, b"")
        if isinstance(first, bytes) and b'"format":"grandbo-event-log"' in first[:200]:
            raise ImportFormatError(
                f"{path} is a whole-organization event log (`grandbo export`): replay it into an empty organization "
                "with `grandbo import-events FILE --org NEW`. `grandbo import` takes entries, one a line.",
                detail={"path": str(path)},
            )
        good, problems = read_jsonl(itertools.chain([first], lines))  # read on, not again: a pipe has no seek
    report = ImportReport(lines=len(good) + len(problems))
    for number, message in problems:
        report.refuse(number, message)
    space = memory.space
    done = len(problems)
    for start in range(0, len(good), BATCH):
        batch = good[start : start + BATCH]
        batch = _masked(memory, batch, report)
        existing = memory.get_many([entry.id for _, entry, _ in batch if entry.id])
        fresh = [(number, entry, _vector(embedding, space, number, report))
                 for number, entry, embedding in _absent(batch, existing, report)]  # fmt: skip
        try:
            _store(memory, fresh, report, strict=strict, actor=actor)
        except StrictModeError as error:
            report.stopped = error.message
            break
        finally:
            done += len(batch)
            if progress is not None:
                progress(done, report.lines)
    report.problems.sort()
    return report


Line = tuple[int, NewEntry, Any]


def _lines(path: Path, handle: BinaryIO) -> Iterator[bytes | _Overlong]:
    """The file's lines, each read up to MAX_LINE_BYTES; a longer one is skipped to its end in pieces and given as
    OVERLONG (refused as its line), and one with no end within MAX_SKIP_BYTES refuses the file before anything is
    stored. Lines were read whole: `grandbo import /dev/zero` (or a file of one endless line) took 5 GB in 30 s and
    went on."""
    for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), start=1):
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        skipped = len(line)
        while line and not line.endswith(b"\n"):
            if skipped > MAX_SKIP_BYTES:
                raise ImportFormatError(
                    f"{path}: line {number} has no end within {MAX_SKIP_BYTES >> 20} MiB: nothing was imported. Is it "
                    "the file you meant? An import takes entries, one JSON object a line.",
                    detail={"path": str(path), "line": number, "limit_bytes": MAX_SKIP_BYTES},
                )
            line = handle.readline(MAX_LINE_BYTES)
            skipped += len(line)
        yield OVERLONG


def _masked(memory: OrgMemory, lines: Sequence[Line], report: ImportReport) -> list[Line]:
    """The lines' entries masked by the org's redaction patterns (what the store holds is compared as stored), a
    masked entry without its given vector (which would carry the secret's meaning). A line whose masking fails
    (a mask that makes its text too long, the org's own patterns too slow on it) is refused, not the import."""
    try:
        return _paired(lines, memory.redact([entry for _, entry, _ in lines]))
    except InvalidInputError:
        pass  # one line or more: each masked alone, those that fail refused
    kept: list[Line] = []
    for line in lines:
        try:
            kept += _paired([line], memory.redact([line[1]]))
        except InvalidInputError as error:
            report.refuse(line[0], error.message)
    return kept


def _paired(lines: Sequence[Line], masked: Sequence[NewEntry]) -> list[Line]:
    return [(number, entry, None if entry is not given else embedding)
            for (number, given, embedding), entry in zip(lines, masked, strict=True)]  # fmt: skip


def _absent(lines: Sequence[Line], held: Mapping[str, Entry], report: ImportReport) -> list[Line]:
    """The lines whose entry the org does not hold; one it holds as the line says is counted as already there,
    one it holds with other content is refused."""
    absent = []
    for line in lines:
        number, entry, _ = line
        kept = held.get(entry.id or "")
        if kept is None:
            absent.append(line)
        elif _same(kept, entry):
            report.already += 1
        else:
            report.refuse(
                number, f"entry {entry.id!r} already exists with other content; skipped (use `correct` to change it)"
            )
    return absent


def _vector(embedding: Embedding | None, space: EmbeddingSpace | None, number: int, report: ImportReport) -> Any:
    if embedding is None:
        return None
    same = space is not None and (embedding.get("provider"), embedding.get("model"), embedding.get("dimension")) == (
        space.provider,
        space.model,
        space.dimension,
    )
    vector = embedding.get("vector")
    if not same:
        report.problems.append(
            (number, f"vector of another embedding space ignored (this store: {space}); the entry is embedded again")
        )
        return None
    assert space is not None
    usable = (
        isinstance(vector, list)
        and len(vector) == space.dimension
        and all(isinstance(x, int | float) and math.isfinite(x) and abs(x) <= FLOAT32_MAX for x in vector)
        and any(vector)
    )
    if not usable:
        report.problems.append(
            (
                number,
                f"vector is not {space.dimension} finite numbers within ±3.4e38 (a float32), not all zero; ignored, "
                "the entry is embedded again",
            )
        )
        return None
    return vector


def _store(memory: OrgMemory, lines: Sequence[Line], report: ImportReport, *, strict: bool, actor: str) -> None:
    """Store a batch in one transaction; a batch the store refuses is split until the refused lines are found,
    so that one bad line costs only itself. A store out of reach stops the import (rerun it to resume)."""
    if not lines:
        return
    try:
        stored = memory.remember_many(
            [entry for _, entry, _ in lines],
            actor=actor,
            strict=strict,
            vectors=[vector for _, _, vector in lines],
            carried=True,  # an export's entries were kept before: their names carry forward
        )
    except StrictModeError:
        report.imported += len(lines)  # stored all the same; the verdict stops the import
        raise
    except (StoreUnavailableError, OrgDroppedError):  # the store out of reach, the org dropped: stop
        raise
    except StoreFullError as error:  # a full disk, the org's storage limit: every later line would be refused alike
        raise type(error)(  # stop at the first, say where
            f"{error.message} The import stopped at line {lines[0][0]} with {report.imported} lines stored (a rerun "
            f"skips them).",
            detail={**error.detail, "line": lines[0][0], "imported": report.imported},
        ) from error
    except Exception as error:  # the store refused something in the batch: find it
        present = memory.get_many([entry.id for _, entry, _ in lines if entry.id])
        if present:  # another writer (an import of the same file at once) stored some since they were looked up
            _store(memory, _absent(lines, present, report), report, strict=strict, actor=actor)
            return
        if len(lines) == 1:
            message = error.message if isinstance(error, GrandboError) else f"{type(error).__name__}: {error}"
            report.refuse(lines[0][0], f"refused by the store: {message[:300]}")
            return
        half = len(lines) // 2
        _store(memory, lines[:half], report, strict=strict, actor=actor)
        _store(memory, lines[half:], report, strict=strict, actor=actor)
        return
    report.imported += len(stored)


def export_file(
    memory: OrgMemory, path: Path, snapshot: AbstractContextManager[None] | None = None, *, page: int = EXPORT_PAGE
) -> int:
    """Write the org's active entries, with their current vectors, as JSON Lines; return how many. Within
    `snapshot` (the store's `consistent_read`), every read sees one state of the store. Read `page` entries at a
    time, by sequence (the order of `entries()`), so an export holds one page, not the org (all of it read at once,
    before, grew with the org)."""
    writable(path, "an export")
    written = 0
    with (
        snapshot or contextlib.nullcontext(),
        replaced_privately(path, "w", "the export") as handle,
    ):  # the org's memory: owner-only
        space = memory.space
        for chunk in by_seq(lambda after: memory.entries(listing=Listing(limit=page, after_seq=after))):
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
