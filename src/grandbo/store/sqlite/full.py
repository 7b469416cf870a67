"""A full disk under the embedded store, told as what it is.

SQLite says `database or disk is full` (SQLITE_FULL) when a write needs a page the disk cannot give, and, when
the disk is full to the last byte, only `disk I/O error` as it sizes its shared-memory file. Both reached the
caller as a Python traceback (CLI) or a 500 (REST). `translated` turns them into `StoreFullError` (507
`store_full`, exit 2 on the CLI, with the remedy); a `disk I/O error` counts as full only when the disk holding
the file has less than `LOW_BYTES` free, so that other I/O errors stay what they are.

A disk that fills is refused before it is full: under GRANDBO_DISK_RESERVE_MB free, a write that adds to the store
is refused with the same 507 (`DiskWatch.keep_reserve`), while purges, retirements, key revocations and an
organization's deletion, which the reserve is kept for, go on (a retirement logs a few hundred bytes: its entry
leaves every recall). One organization filling a disk smaller than its storage limit stops every org's new
writes there, never their reads, and SQLite never meets the full disk itself (hostile probe 22b, L1).
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from grandbo.errors import StoreFullError

SQLITE_FULL = 13
LOW_BYTES = 1 << 20  # less free than this where the file lives: a disk I/O error is the full disk's
MIB = 1 << 20


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding `path` (its nearest existing folder), or None when unknown."""
    for folder in (path, *path.parents):
        with contextlib.suppress(OSError):
            if folder.exists():
                return shutil.disk_usage(folder).free
    return None


def is_full(error: BaseException, path: Path) -> bool:
    """Whether `error`, raised writing `path`, is the disk's being full."""
    if isinstance(error, sqlite3.Error):
        if (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF == SQLITE_FULL:
            return True
        if "disk I/O error" in str(error):
            free = free_bytes(path)
            return free is not None and free < LOW_BYTES
        return False
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def full_error(path: Path, what: str) -> StoreFullError:
    """The 507 of `what` (say, "the write") that found the disk full; the path is not in it (API clients see it)."""
    free = free_bytes(path)
    return StoreFullError(
        f"The disk holding {what} is full: nothing of it was written. {StoreFullError.remedy}",
        detail={"free_bytes": free} if free is not None else {},
    )


@contextlib.contextmanager
def translated(path: Path, what: str = "the embedded store") -> Iterator[None]:
    """Within: a full disk raises StoreFullError; every other error stays as it is."""
    try:
        yield
    except (sqlite3.Error, OSError) as error:
        if is_full(error, path):
            raise full_error(path, what) from error
        raise


class DiskWatch:
    """The store's writes, watched: the last one that found the disk full is kept (`/readyz` shows it) until a
    write commits again; one refused for the reserve only while the disk is still under it (`recheck`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: StoreFullError | None = None
        self._reserved = False  # whether `error` is the reserve's refusal (not the disk's own "full")

    def recheck(self, reserve_mb: int) -> StoreFullError | None:
        """The kept refusal, or why the next write would be refused, as of now: a refusal for the reserve is
        forgotten once the disk has room again (one statvfs), so an idle store freed by its operator is ready
        again without waiting for a write to commit."""
        if self.error is None or self._reserved:
            self.error = None
            with contextlib.suppress(StoreFullError):
                self.keep_reserve(reserve_mb)
        return self.error

    def keep_reserve(self, reserve_mb: int) -> None:
        """Refuse (StoreFullError, 507) a write that adds to the store while the disk holding it has less than
        `reserve_mb` MiB free (0: no reserve); it is kept as the last refusal, which `/readyz` shows."""
        free = free_bytes(self.path) if reserve_mb else None
        if free is not None and free < reserve_mb * MIB:
            self.error = StoreFullError(
                f"The disk holding the embedded store has {free / MIB:.1f} MiB free, under the {reserve_mb} MiB it "
                "keeps for purges, retirements, key revocations and its own upkeep (GRANDBO_DISK_RESERVE_MB): nothing "
                f"of this write was written. {StoreFullError.remedy}",
                detail={"free_bytes": free, "reserve_bytes": reserve_mb * MIB},
            )
            self._reserved = True
            raise self.error

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as error:
            if not is_full(error, self.path):
                raise
            self.error, self._reserved = full_error(self.path, "the embedded store"), False
            raise self.error from error
        self.error = None
