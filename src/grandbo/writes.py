"""The write seam's mechanics: what it checks and derives before it appends (ids, idempotency keys,
precomputed vectors), and `Writes`, which masks, appends and has the entries embedded."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import structlog
from pydantic import ValidationError
from pydantic_core import to_json

from grandbo.errors import ConflictError, InvalidInputError, StrictModeError
from grandbo.model import EmbeddingSpace, Entry, EventType, NewEntry, Source, parse_entry, utcnow
from grandbo.names import refuse_added
from grandbo.ports import Idempotency, NewEvent, OrgEntries, Replayed
from grandbo.redaction import Redactor
from grandbo.values import text_problem

if TYPE_CHECKING:
    from grandbo.worker import EmbedWorker

log = structlog.get_logger("grandbo.memory")


def run_guarded(task: Callable[[], None]) -> None:
    """Run a deferred task now; log its failure instead of raising it."""
    try:
        task()
    except Exception as error:
        log.warning("memory.deferred_task_failed", error=f"{type(error).__name__}: {str(error)[:300]}")


def checked_key(key: str) -> str:
    if not 1 <= len(key) <= 200 or text_problem(key) or key != key.strip():
        raise InvalidInputError(
            "An idempotency key is 1 to 200 characters of text without surrounding spaces (a UUID, say).",
            detail={"idempotency_key": key[:200]},
        )
    return key


def request_hash(entries: Sequence[NewEntry]) -> str:
    """What a retry must repeat: the validated entries, ids and all (a generated id is not part of it)."""
    return hashlib.sha256(to_json([entry.model_dump(mode="json") for entry in entries])).hexdigest()


def new_entry_id() -> str:
    """A time-ordered, collision-resistant id: mem-<ms since epoch, hex>-<random>."""
    return f"mem-{time.time_ns() // 1_000_000:011x}-{secrets.token_hex(4)}"


def checked_vectors(
    events: Sequence[NewEvent], vectors: Sequence[npt.ArrayLike | None], space: EmbeddingSpace | None
) -> dict[str, npt.NDArray[np.float32]]:
    """Precomputed vectors, one per event (None where absent), checked against the store's space: each must be
    `space.dimension` finite numbers, not all zero; returned by entry id."""
    if len(vectors) != len(events) or space is None:
        raise InvalidInputError(
            f"{len(vectors)} vectors for {len(events)} entries: give one per entry (None where absent).",
            detail={"vectors": len(vectors), "entries": len(events)},
        )
    present = [(position, vector) for position, vector in enumerate(vectors) if vector is not None]
    if not present:
        return {}
    try:  # the common case, checked as one matrix
        matrix = np.asarray([vector for _, vector in present], dtype=np.float32)
        valid = matrix.shape == (len(present), space.dimension) and bool(np.isfinite(matrix).all())
        valid = valid and bool(np.any(matrix, axis=1).all())  # an all-zero vector has no direction
    except (TypeError, ValueError):  # ragged or not numbers: find the culprit below
        valid = False
    if not valid:
        for position, vector in present:
            try:
                array = np.asarray(vector, dtype=np.float32)
                shape = str(array.shape)
                fine = array.shape == (space.dimension,) and bool(np.isfinite(array).all()) and bool(array.any())
            except (TypeError, ValueError):
                shape, fine = "unknown (not numbers)", False
            if not fine:
                raise InvalidInputError(
                    f"Vector {position} has shape {shape}, non-finite values or only zeros; this store's "
                    f"space is {space}, so each vector must be {space.dimension} finite numbers, not all zero.",
                    detail={"position": position, "dimension": space.dimension},
                )
        raise InvalidInputError(  # unreachable: some vector above is the culprit
            f"The vectors do not form a {len(present)} x {space.dimension} matrix of finite numbers.",
            detail={"dimension": space.dimension},
        )
    return {events[position].entry_id: row for (position, _), row in zip(present, matrix, strict=True)}


class Writes:
    """The write seam's mechanics for one organization (`OrgMemory.remember_many`, `correct`, `redact`): mask,
    turn entries into events, append them with their idempotency record, then have them embedded. Nothing
    here may raise for a committed write but strict mode's verdict."""

    def __init__(
        self,
        org: str,
        entries: OrgEntries,
        worker: Callable[[], EmbedWorker],
        background: bool,
        redactor: Callable[[], Redactor],
        *,
        embed_here: bool = True,
    ) -> None:
        self._org, self._entries, self._worker, self._background = org, entries, worker, background
        self._redactor, self._embed_here = redactor, embed_here

    def remember_many(
        self,
        entries: Iterable[NewEntry | Mapping[str, Any]],
        actor: str,
        strict: bool,
        vectors: Sequence[npt.ArrayLike | None] | None,
        idempotency_key: str | None,
        carried: bool = False,
    ) -> list[Entry]:
        now = utcnow()
        items = entries if isinstance(entries, Sequence) else list(entries)
        parsed = [parse_entry(item) for item in items]
        if not carried:  # a look-alike service name a write adds (`names.refuse_added`)
            refuse_added([name for entry in parsed for name in entry.services], (), "services")
        idempotency = None
        if idempotency_key is not None:
            idempotency = Idempotency(checked_key(idempotency_key), request_hash(parsed))
            if (earlier := self._entries.idempotent(idempotency.key)) is not None:
                return self._replay(earlier, idempotency)
        masked = self.redact(parsed)
        if vectors is not None:  # a vector of text that was masked since would carry the secret's meaning
            vectors = [None if m is not e else v for m, e, v in zip(masked, parsed, vectors, strict=False)]
        events = [self._remembered(entry, now, actor) for entry in masked]
        given = checked_vectors(events, vectors, self._entries.space()) if vectors is not None else {}
        try:
            stored = self._entries.append(events, given, idempotency)
        except Replayed as earlier:  # a concurrent request with the key committed first
            assert idempotency is not None
            return self._replay(earlier, idempotency)
        if len(given) < len(stored):
            self._after_write(strict=strict, written=[entry.id for entry in stored if entry.id not in given])
        return stored

    def redact(self, entries: Sequence[NewEntry]) -> list[NewEntry]:
        """The entries with their text masked, each checked again against an entry's limits: a mask is longer
        than most of what it replaces, so a title or body full of matches (an organization's pattern that
        matches one character) could otherwise be stored far past its limit."""
        redactor = self._redactor()
        out = []
        for entry in entries:
            fields = entry.model_dump(include={"title", "body", "tags", "meta"})
            masked = redactor.fields(fields)
            out.append(entry if masked == fields else _still_valid(entry, masked))
        return out

    def _replay(self, earlier: Replayed, idempotency: Idempotency) -> list[Entry]:
        if earlier.request_hash != idempotency.request_hash:
            raise ConflictError(
                f"Idempotency key {idempotency.key!r} was used for another write in org {self._org!r}; a retry "
                "must send the same entries. Use a new key for a new write.",
                detail={"idempotency_key": idempotency.key, "entry_ids": earlier.entry_ids},
            )
        found = self._entries.get_many(earlier.entry_ids)
        log.info("memory.idempotent_replay", org_id=self._org, entries=len(found))
        return [found[entry_id] for entry_id in earlier.entry_ids if entry_id in found]

    def correct_many(
        self, corrections: Sequence[tuple[Entry, Mapping[str, Any], str]], actor: str, carried: bool = False
    ) -> list[Entry]:
        """Supersede each entry (as read) with its corrected one, given its changes and the reason, in one
        transaction: all or none (EntryStateError, nothing written, when one is no longer active). The entries
        corrected into, in the order given."""
        fields = {"title", "body", "kind", "tags", "services", "severity", "occurred_at", "meta"}
        wanted: list[NewEntry] = []
        for old, changes, _ in corrections:
            if unknown := set(changes) - fields - {"id"}:
                raise InvalidInputError(
                    f"Cannot correct field(s) {sorted(unknown)}; correctable fields are {sorted(fields | {'id'})}.",
                    detail={"fields": sorted(unknown)},
                )
            if "services" in changes and not carried:  # the names it held carry forward; one it adds is checked
                refuse_added(changes["services"] or (), old.services, "services")
            kept = old.model_dump(include=fields)
            wanted += [parse_entry({**kept, **changes, "source": Source.CORRECTION}),
                       parse_entry({**kept, "source": Source.CORRECTION})]  # fmt: skip
        masked, now, events = self.redact(wanted), utcnow(), []
        for (old, changes, reason), replacement, unchanged in zip(corrections, masked[::2], masked[1::2], strict=True):
            if "id" not in changes and replacement == unchanged:  # it would retire the entry's id for a copy of it
                raise InvalidInputError(
                    f"Nothing to correct: the correction of {old.id!r} changes none of its fields. Give what "
                    "changed (title, body, kind, tags, services, severity).",
                    detail={"entry_id": old.id},
                )
            new_event = self._remembered(replacement, now, actor, supersedes=old.id, reason=reason)
            supersede = NewEvent(
                old.id, EventType.CORRECTED, {"superseded_by": new_event.entry_id, "reason": reason}, actor, now
            )
            events += [new_event, supersede]
        if not events:
            return []
        touched = {entry.id: entry for entry in self._entries.append(events)}
        written = [event.entry_id for event in events[::2]]
        self._after_write(strict=False, written=written)
        return [touched[entry_id] for entry_id in written]

    def _remembered(
        self, entry: NewEntry, now: Any, actor: str, *, supersedes: str | None = None, reason: str = ""
    ) -> NewEvent:
        payload = entry.model_dump(mode="json", exclude={"id"})
        payload["occurred_at"] = (entry.occurred_at or now).isoformat()
        if supersedes:
            payload["supersedes"] = supersedes
            payload["reason"] = reason
        return NewEvent(entry.id or new_entry_id(), EventType.REMEMBERED, payload, actor, now)

    def _after_write(self, *, strict: bool, written: Sequence[str]) -> None:
        """Embed what was just committed. Nothing here may raise for a committed write, except strict mode's
        verdict: a caller that saw an error would retry and write the entries twice."""
        try:
            if self._background and not strict:
                if self._embed_here:
                    self._worker().wake()
                return  # else the outbox's job is for an embed worker process (`grandbo worker`)
            report = self._worker().drain(self._org)
        except Exception as error:  # the entries are committed; embedding is retried later
            if strict:
                raise
            log.warning("memory.embedding_deferred", org_id=self._org, error=f"{type(error).__name__}: {error}"[:300])
            return
        if strict:
            # Judged on this write's entries alone: an old failed job elsewhere in the org is not this batch's.
            embedded = self._entries.vectors(written)
            missing = [entry_id for entry_id in written if entry_id not in embedded]
            if missing:
                blank = sum(state.unembeddable for state in self._entries.jobs(missing).values())
                raise StrictModeError(
                    f"Strict mode: {len(missing)} of the {len(written)} entries just written have no vector "
                    f"(last error: {report.errors[-1] if report.errors else 'none'}"
                    + (f"; {blank} unembeddable: their text has nothing the provider can embed" if blank else "")
                    + "). The entries are stored; fix the provider (or those texts) and run `grandbo backfill`.",
                    detail={"missing": missing[:20], "written": len(written), "errors": report.errors[-3:]},
                )


def _still_valid(entry: NewEntry, masked: dict[str, Any]) -> NewEntry:
    out = entry.model_copy(update=masked)  # the fields the caller set stay the set ones (an import compares them)
    try:
        NewEntry.model_validate(out.model_dump())
    except ValidationError as error:
        fields = sorted({str(issue["loc"][0]) for issue in error.errors() if issue["loc"]})
        raise InvalidInputError(
            f"Masking secrets made this entry's {', '.join(fields)} too long: each match becomes "
            "[REDACTED:<pattern>], longer than most of what it replaces. Send the text in shorter parts, or ask an "
            "admin to make the organization's own patterns match whole secrets (grandbo settings redaction).",
            detail={"fields": fields, "errors": [issue["msg"] for issue in error.errors()]},
        ) from error
    return out
