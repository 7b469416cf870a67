"""An index image erased a piece at a time: one row of megabytes (44 MB at 20,000 entries), whose delete zeroes every
page it frees (`secure_delete`), held the file's only write lock, every org's writes in every process, for 0.28 s at
20,000 entries. Its bytes are overwritten with zeros in place instead, IMAGE_PIECE a write (pages written, none
freed), and then the row is deleted without zeroing its pages again (`secure_delete` FAST leaves freed overflow pages
as they are: zeros). For a purge, whose entry's words the image holds, and for an org's drop."""

from __future__ import annotations

import sqlite3

from grandbo.store import projection

IMAGE_PIECE = 2 << 20  # bytes zeroed in one write: about 10-20 ms here

_BEFORE_A_PURGE = "NOT " + projection.NONE_PURGED_SINCE.format(org="i.org_id", seq="i.entry_seq")
MADE_BEFORE_A_PURGE = f"SELECT rowid, saved_at FROM index_images i WHERE org_id = ? AND {_BEFORE_A_PURGE}"
"""The org's image, if it was made before one of its entries was purged: it may hold the entry's words. It is never
loaded (`feed`) and is erased after the purge commits (`Erasure.purge`), or at the next open after a crash."""
ORGS_WITH_ONE = f"SELECT org_id FROM index_images i WHERE {_BEFORE_A_PURGE}"  # every org's, in one read


class ImageEraser:
    """Erases one org's image row over several writes (`step` in each; `Connection._in_short_writes`)."""

    def __init__(self) -> None:
        self._row: tuple[int, str] | None = None  # the image being erased (None: none yet)
        self._zeroed = 0  # bytes of that row overwritten from the start

    @property
    def touched(self) -> bool:
        return self._row is not None

    def step(self, db: sqlite3.Connection, rowid: int, saved_at: str) -> int:
        """Zero the next piece of row `rowid`'s image (saved at `saved_at`), or delete the row once it is all zeros; the
        bytes zeroed (0 when the row went)."""
        if (rowid, saved_at) != self._row:  # another image (a rowid is used again after a delete): from its start
            self._row, self._zeroed = (rowid, saved_at), 0
        with db.blobopen("index_images", "data", rowid) as blob:
            size = len(blob)
            if self._zeroed < size:
                piece = min(IMAGE_PIECE, size - self._zeroed)
                blob.seek(self._zeroed)
                blob.write(bytes(piece))
                self._zeroed += piece
                return piece
        db.execute("PRAGMA secure_delete = FAST")
        try:
            db.execute("DELETE FROM index_images WHERE rowid = ?", (rowid,))
        finally:
            db.execute("PRAGMA secure_delete = ON")
        return 0
