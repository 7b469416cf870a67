"""The embedded store: one SQLite file.

The database is the truth. Both retrieval arms are computed in process, by the search index above the
store (`retrieval.keeper`), from the rows and vectors this store's change feed hands up (`marks`,
`snapshot`).

Split by concern, as Django splits a database backend: the connection (`connection.py`), the schema and its
migrations (`schema.py`, `migrations.py`), organizations (`orgs.py`), entries and their projection
(`entries.py`), documents (`documents.py`, SQL shared with Postgres in `store/sql/`), the embed outbox
(`outbox.py`; `unembeddable.py`, the jobs settled as unembeddable: an all-zero vector), vectors (`vectors.py`),
the change feed and index images (`feed.py`), erasure (`erasure.py`), backup and restore (`backup.py`; what a
restore accepts, `candidate.py`), and the dialect's differences (`dialect.py`).
"""

from __future__ import annotations

import time
from pathlib import Path

from grandbo.store.base import Store, TermsOf
from grandbo.store.sqlite import full
from grandbo.store.sqlite.backup import Backup, sweep_staged
from grandbo.store.sqlite.documents import Documents
from grandbo.store.sqlite.entries import Entries
from grandbo.store.sqlite.erasure import Erasure
from grandbo.store.sqlite.feed import Feed
from grandbo.store.sqlite.orgs import Orgs
from grandbo.store.sqlite.outbox import Outbox
from grandbo.store.sqlite.pending import PendingWorkMixin
from grandbo.store.sqlite.unembeddable import Unembeddable
from grandbo.store.sqlite.vectors import Vectors


class SQLiteStore(Backup, Orgs, Entries, Documents, Outbox, Unembeddable, Vectors, Feed, Erasure, PendingWorkMixin):
    """Every organization's memory in one SQLite file."""

    MAINTAIN_EVERY_S = 30.0

    def __init__(self, path: Path, terms_of: TermsOf, *, synchronous: str = "FULL") -> None:
        sweep_staged(path)  # a copy a killed restore left beside the store (`backup.sweep_staged`)
        super().__init__(path, terms_of, synchronous=synchronous)
        with full.translated(path):  # a full disk stops the open clearly (`full`)
            self._migrate()
        self._maintained_at = time.monotonic()
        self.finish_drops()  # an org's drop a crash cut short
        self.erase_images_made_before_purges()  # and an image a crash kept after a purge

    def maintain(self) -> list[str]:
        """The worker's maintenance (`ports.Outbox.maintain`; no approximate index here: exact search over the
        in-process matrix): every MAINTAIN_EVERY_S, what a crash cut short and the open finishes, for a process that
        runs long (one restarted at once left a drop's rows to the next open: its mark was not stale yet)."""
        now = time.monotonic()
        if now - self._maintained_at < self.MAINTAIN_EVERY_S:
            return []
        self._maintained_at = now
        return [*self.finish_drops(), *self.erase_images_made_before_purges()]


_SATISFIES: type[Store] = SQLiteStore  # mypy holds the class to every concern's protocol (`store.base.Store`)
