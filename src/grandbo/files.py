"""Files Grandbo is asked to write (backups, exports): checked, and their folder made, before any work starts."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from grandbo.errors import InvalidInputError


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


STALE_PARTIAL_SECONDS = 3600  # a file being written beside its name is touched far more often than this


@contextlib.contextmanager
def replaced_privately(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file to write what goes to `path`, readable by its owner only whatever the umask (an export holds the
    organization's memory and, made so, its webhook secrets), put in `path`'s place only once whole: written to a
    private file of its own in the same folder, flushed to the disk, then renamed over `path`. Whatever stops the
    writing (an error, a full disk, Ctrl-C) removes that file and leaves `path` as it was; a kill -9 leaves it
    beside `path` (`.NAME.*.partial`), never a cut file under the name. An export opened `path` emptied and wrote
    into it, so a killed run left the first part of the new one where the last good one had been, and a cut
    `--entries` export imported a part of the org with exit 0 (probe 20b). A killed run's file is removed by the next
    one once it is STALE_PARTIAL_SECONDS old."""
    path = Path(os.path.realpath(path))  # a link's target is replaced, not the link (it wrote through the link)
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):  # a killed run's, untouched for an hour
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_PARTIAL_SECONDS:
                stale.unlink()
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)  # 0600
    try:
        with os.fdopen(descriptor, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:  # the rename itself on the disk
        os.fsync(folder)
    finally:
        os.close(folder)
