"""Files Grandbo is asked to write (backups, exports): checked, and their folder made, before any work starts."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from grandbo.errors import InvalidInputError, StoreFullError


def not_a_folder(path: Path) -> Path | None:
    """The first of `path`'s folders that is a file, if one is."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), None)


def writable(path: Path, what: str) -> None:
    """Make sure `what` (a backup, an export) can be written to `path`, creating its missing folders, or raise
    InvalidInputError naming the path and the remedy. Every command that writes a file a user names does
    this, so `grandbo export out/today.jsonl` behaves as `grandbo backup out/today.db` always did: a dated
    folder in a cron job need not be made first, and the path is printed once the file is written."""
    if path.is_dir():
        raise InvalidInputError(
            f"Cannot write {what} to {path}: it is a folder. Name a file in it, such as {path / 'grandbo.out'}.",
            detail={"path": str(path)},
        )
    if (file := not_a_folder(path)) is not None:
        raise InvalidInputError(
            f"Cannot write {what} to {path}: {file} is a file, not a folder. Name a file in a folder.",
            detail={"path": str(path)},
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidInputError(
            f"Cannot write {what} to {path}: the file is there and not writable. Name another file, or make it "
            "writable.",
            detail={"path": str(path)},
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A probe of a name no file has (a fixed name such as `<name>.partial` could be a user's file, which
        # touching and unlinking it would delete).
        descriptor, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise InvalidInputError(
            f"Cannot write {what} to {path}: {error.strerror or error}. Name a file in a folder you can write to.",
            detail={"path": str(path)},
        ) from error


# What a backup to NAME writes beside it until it is whole (`NAME.partial`), and SQLite's files of that copy
BACKUP_PARTS = (".partial", ".partial-journal", ".partial-wal", ".partial-shm")


def backup_target(path: Path) -> str | None:
    """Make sure a backup can be written to `path` (`writable`), and sweep what one cut short left beside it
    (`sweep_backup_parts`): SQLite's backup API to Grandbo's store, or a pg_dump archive of the Postgres database
    as GRANDBO_BACKUP_DATABASE_URL's role, goes there next."""
    writable(path, "a backup")
    return sweep_backup_parts(path)


def sweep_backup_parts(path: Path) -> str | None:
    """Remove what a backup to `path` cut short (kill -9, a crash, the machine's end) left beside it, and say what
    (`NAME.partial, NAME.partial-journal (463 MB)`); None when there was nothing. The copy (463 MB in probe 20b) and
    SQLite's files of it stayed until the next backup to the name wrote over them, which said nothing of them. One
    backup to a name at a time: the next one writes the same file."""
    return removed_files(path.with_name(path.name + suffix) for suffix in BACKUP_PARTS)


def removed_files(paths: Iterable[Path]) -> str | None:
    """Remove those of `paths` that are there, and say what (`NAME.partial, NAME.partial-journal (463 MB)`); None
    when none was."""
    removed, size = [], 0
    for part in paths:
        with contextlib.suppress(FileNotFoundError):
            size += part.stat().st_size
            part.unlink()
            removed.append(part.name)
    if not removed:
        return None
    return f"{', '.join(removed)} ({_size(size)})"


def _size(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB" if size >= 1 << 20 else f"{size:,} bytes"


STALE_PARTIAL_SECONDS = 3600  # a file being written beside its name is touched far more often than this


# Why a file could not be written for want of room, by errno: a disk full, a quota used up, a file over the largest
# the file system or this process (`ulimit -f`; Python ignores SIGXFSZ, so a write past it fails with EFBIG) allows.
_NO_ROOM = {
    errno.ENOSPC: "the disk holding it is full (no space left on device)",
    errno.EDQUOT: "the disk quota there is used up",
    errno.EFBIG: "the file would be larger than its file system or this process's file-size limit (`ulimit -f`) allows",
}


@contextlib.contextmanager
def replaced_privately(path: Path, mode: str = "w", what: str = "the file") -> Iterator[IO[Any]]:
    """A file to write what goes to `path`, readable by its owner only whatever the umask (an export holds the
    organization's memory and, made so, its webhook secrets), put in `path`'s place only once whole: written to a
    private file of its own in the same folder, flushed to the disk, then renamed over `path`. Whatever stops the
    writing (an error, a full disk, Ctrl-C) removes that file and leaves `path` as it was; a kill -9 leaves it
    beside `path` (`.NAME.*.partial`), never a cut file under the name. An export opened `path` emptied and wrote
    into it, so a killed run left the first part of the new one where the last good one had been, and a cut
    `--entries` export imported a part of the org with exit 0 (probe 20b). A killed run's file is removed by the next
    one once it is STALE_PARTIAL_SECONDS old. A write that finds no room is a StoreFullError naming `what`, the file
    and why (it was "No space left on device. Check the path and its permissions.")."""
    path = Path(os.path.realpath(path))  # a link's target is replaced, not the link (it wrote through the link)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):  # a killed run's, untouched for an hour
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_PARTIAL_SECONDS:
                stale.unlink()
    existed = path.exists()
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)  # 0600
    try:
        with os.fdopen(descriptor, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        if isinstance(error, OSError) and error.errno in _NO_ROOM and error.filename in (None, partial):
            kept = f"{path.name} is as it was" if existed else "no part of it is left there"
            raise StoreFullError(
                f"Cannot write {what} to {path}: {_NO_ROOM[error.errno]}. Nothing of it was written ({kept}). Free "
                "space there, or name a file on another disk, and run it again.",
                detail={"path": str(path), "errno": errno.errorcode.get(error.errno or 0, "")},
            ) from error
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:  # the rename itself on the disk
        os.fsync(folder)
    finally:
        os.close(folder)
