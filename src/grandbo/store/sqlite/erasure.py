"""The embedded store's erasure: purging an entry and erasing a text from documents, so that no copy of the old
text is left in the file (`secure_delete`, then a WAL checkpoint); and the window in which the append-only logs
accept it (`erasing`)."""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import structlog

from grandbo.erased import entry_erased, erase_text
from grandbo.errors import GrandboError, NotFoundError
from grandbo.incarnation import Incarnation
from grandbo.model import Entry, EventType, utcnow
from grandbo.ports import DocumentWrite, Forgetting, NewWork
from grandbo.store import projection
from grandbo.store.base import check_documents, loads_json
from grandbo.store.sql import storage
from grandbo.store.sql.erasing import (
    PURGE_BATCH,
    DocumentRewrite,
    counted,
    erase_copies,
    purge_batches,
    record_erasure,
)
from grandbo.store.sqlite.connection import WRITE_POLL_S, Connection
from grandbo.store.sqlite.dialect import DOCUMENTS, REPLACE, json_text
from grandbo.store.sqlite.documents import SQL
from grandbo.store.sqlite.entries import INSERT_EVENT, LAST_SEQ, WRITE_ROW, row_to_db, rows
from grandbo.store.sqlite.images import MADE_BEFORE_A_PURGE, ORGS_WITH_ONE, ImageEraser
from grandbo.store.sqlite.pending import record_work

log = structlog.get_logger(__name__)


@contextmanager
def erasing(db: sqlite3.Connection, org_id: str, reason: str) -> Iterator[None]:
    """Within (inside a write transaction): the append-only logs of `org_id` accept UPDATE and DELETE, for
    deleting an organization or purging an entry. The triggers look for this row; it never outlives the
    transaction."""
    db.execute(
        f"{REPLACE} INTO log_erasures (org_id, reason, at) VALUES (?, ?, ?)", (org_id, reason, utcnow().isoformat())
    )
    yield
    db.execute("DELETE FROM log_erasures WHERE org_id = ?", (org_id,))


class Erasure(Connection):
    def purge(
        self, org_id: str, entry_id: str, reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> Entry:
        # The copies of its text in documents (received alerts' kept recall and plans), found before the write.
        copies = self._found(org_id, lambda data, _: entry_erased(data, entry_id), mentioning=[entry_id])
        with self._write(org_id) as db, erasing(db, org_id, f"purge of entry {entry_id}"):
            language = self._require_org(db, org_id, incarnation)
            row = rows(db, org_id, [entry_id]).get(entry_id)
            if row is None:
                raise NotFoundError(
                    f"No entry {entry_id!r} in org {org_id!r}.", detail={"entry_id": entry_id, "org_id": org_id}
                )
            purged = self._purge_one(db, org_id, row, reason, actor, language)
            # Purged already: only the copies written since, and no event of the entry; none, nothing written.
            wrote = erase_copies(db, SQL, json_text, copies, org_id, [entry_id], reason, actor,
                                 logged=purged[1] if purged else 0)  # fmt: skip
        if wrote:
            self._after_purges(org_id)
        return projection.to_entry(purged[0] if purged else row)

    def purge_many(
        self, org_id: str, entry_ids: Sequence[str], reason: str, actor: str, incarnation: Incarnation | None = None
    ) -> list[str]:
        """`purge` of those not purged yet, PURGE_BATCH a transaction (their copies in documents found before each:
        `purge_batches`), then what follows a purge once; those purged, in order. A crash leaves whole batches."""
        done: list[str] = []
        held_s: float | None = None  # how long the batch before held the write lock
        try:
            found, find = functools.partial(self._found, org_id), functools.partial(self._find, org_id)
            for batch, copies_found in purge_batches(found, find, entry_ids, PURGE_BATCH):
                if held_s is not None:  # every other writer's turn before the next batch
                    time.sleep(max(2 * WRITE_POLL_S, held_s))
                copies = copies_found()  # read just before the write, holding no lock
                with self._write(org_id) as db, erasing(db, org_id, f"purge of {len(batch)} entries"):
                    held_since, language = time.monotonic(), self._require_org(db, org_id, incarnation)
                    purged: list[str] = []
                    logged = 0
                    for entry_id, row in rows(db, org_id, batch).items():
                        if (now := self._purge_one(db, org_id, row, reason, actor, language)) is not None:
                            purged, logged = [*purged, entry_id], logged + now[1]
                    erase_copies(db, SQL, json_text, copies, org_id, batch, reason, actor, logged=logged)
                done += [entry_id for entry_id in batch if entry_id in purged]
                held_s = time.monotonic() - held_since
        finally:  # once, for every batch committed (an error in a later one too)
            if done:
                self._after_purges(org_id)
        return done

    def _after_purges(self, org_id: str) -> None:
        """After a purge committed: the org's index image erased (it held the purged words), the file's log emptied."""
        try:  # the purge has committed: a failure here is logged, and the image erased later (`maintain`, open)
            self.erase_images_made_before_purges(org_id)
        except (GrandboError, sqlite3.Error) as error:
            log.error("store.image_not_erased", org_id=org_id, error=str(error)[:200],
                      remedy="the worker's maintenance erases it within a minute, or the next open")  # fmt: skip
        self._emptied_log("erasure")

    def erase_images_made_before_purges(self, org_id: str | None = None) -> list[str]:
        """Erase the org's index image (every org's, at open: a crash may have come between a purge and this) if it
        was made before one of its entries was purged: it may hold the entry's words. A piece a write
        (`images.ImageEraser`); the purge left it in place, and it is never loaded meanwhile (`feed`)."""
        if org_id is None:
            with self._reading() as db:
                orgs = [org for (org,) in db.execute(ORGS_WITH_ONE)]
            return [org for org in orgs if self.erase_images_made_before_purges(org)]
        eraser = ImageEraser()

        def piece(db: sqlite3.Connection) -> bool:
            found = db.execute(MADE_BEFORE_A_PURGE, (org_id,)).fetchone()
            return found is not None and eraser.step(db, int(found[0]), found[1]) > 0

        self._in_short_writes(org_id, piece)
        return [org_id] if eraser.touched else []

    def erase_document_text(
        self, org_id: str, pattern: re.Pattern[str], audit: DocumentWrite, actor: str, *, only_if_found: bool = False,
        sieve: bool = False, holding: str = "", incarnation: Incarnation | None = None,
        forget: Forgetting | None = None, work: Sequence[NewWork] = (),
    ) -> tuple[int, int]:  # fmt: skip
        check_documents([audit])
        found = self._found(org_id, lambda data, own_id: erase_text(data, pattern, own_id=own_id),
                            sieve=pattern if sieve else None, holding=holding, forget=forget)  # fmt: skip
        with self._leaving_no_copy("erasure"):
            return self._erase_document_text(org_id, found, audit, actor, only_if_found, incarnation, work)

    def _found(
        self, org_id: str, rewrite: Callable[[Any, str], Any], mentioning: Sequence[str] = (),
        sieve: re.Pattern[str] | None = None, holding: str = "", forget: Forgetting | None = None,
        quoting: Sequence[str] = (),
    ) -> DocumentRewrite:  # fmt: skip
        """An erasure's rewrite of the org's documents, the rows it changes found (`_find`)."""
        return self._find(org_id, DocumentRewrite(DOCUMENTS, org_id, rewrite, decode=loads_json, encode=json_text,
                                                  mentioning=mentioning, sieve=sieve, holding=holding, forget=forget,
                                                  quoting=quoting))  # fmt: skip

    def _find(self, org_id: str, found: DocumentRewrite) -> DocumentRewrite:
        """`found` with the rows it changes found in a read of their own, holding neither the store's lock nor the
        file's write lock: every organization's writes go on meanwhile (`store.sql.erasing`)."""
        with self._read() as db:
            found.find(db)
        return found

    def _erase_document_text(
        self, org_id: str, found: DocumentRewrite, audit: DocumentWrite, actor: str, only_if_found: bool,
        incarnation: Incarnation | None, work: Sequence[NewWork],
    ) -> tuple[int, int]:  # fmt: skip
        with self._write(org_id) as db, erasing(db, org_id, "erasure of a text from documents"):
            self._require_org(db, org_id, incarnation)
            rewritten = found.apply(db)
            if only_if_found and not (rewritten.documents or rewritten.events):
                return 0, 0
            recorded = record_erasure(db, SQL, json_text, org_id, audit, actor)
            record_work(db, org_id, work)  # what finishes the erasure, should this process not (`tiers.erasure`)
            storage.charge(db, DOCUMENTS, org_id, rewritten.history_bytes + recorded, limit_mb=0)
            counted(db, DOCUMENTS, org_id)
        return rewritten.documents + rewritten.forgotten, rewritten.events

    def _purge_one(
        self, db: sqlite3.Connection, org_id: str, row: projection.Row, reason: str, actor: str, language: str | None
    ) -> tuple[projection.Row, int] | None:
        """Purge one entry (its projection `row`) inside the erasure `db` is in: its events redacted, a `purged` event,
        its row, vector and embed job; its new row and what its log changed by (`storage`). None: purged already."""
        entry_id, at = row["id"], utcnow()
        if db.execute(projection.PURGED_READ.format(p="?"), (org_id, entry_id)).fetchone():
            return None
        freed = 0  # bytes of the log, and of documents' history below (`storage`)
        for record in db.execute(
            "SELECT seq, type, payload FROM memory_events WHERE org_id = ? AND entry_id = ? ORDER BY seq",
            (org_id, entry_id),
        ).fetchall():
            held = loads_json(record["payload"])
            erased = projection.redacted_payload(EventType(record["type"]), held)
            if erased is not None:
                db.execute("UPDATE memory_events SET payload = ? WHERE org_id = ? AND seq = ?",
                           (json_text(erased), org_id, record["seq"]))  # fmt: skip
                freed += storage.size(held) - storage.size(erased)
        (base,) = db.execute(LAST_SEQ, (org_id,)).fetchone()
        payload = {"reason": reason}
        db.execute(
            INSERT_EVENT,
            (base + 1, org_id, entry_id, EventType.PURGED.value, json_text(payload), actor, at.isoformat()),
        )
        purged = projection.apply(
            row, org_id, entry_id, EventType.PURGED, payload, base + 1, at, self._terms_of, language
        )
        db.execute(WRITE_ROW, row_to_db(purged))
        db.execute("DELETE FROM entry_vectors WHERE org_id = ? AND entry_id = ?", (org_id, entry_id))
        db.execute("DELETE FROM embed_outbox WHERE org_id = ? AND entry_id = ?", (org_id, entry_id))
        # The image held the entry's terms: from this commit it is never loaded, and it is erased right after
        # (`erase_images_made_before_purges`). The org keeps its epoch: an index kept in memory takes the purge as
        # any other change of a row, and saves an image without them (`IndexKeeper.purged`).
        return purged, storage.size(payload) - freed
