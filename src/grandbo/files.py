"""Files Grandbo is asked to write (backups, exports): checked, and their folder made, before any work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any

from grandbo.errors import InvalidInputError


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
    if (not_a_folder := next((p for p in path.parents if p.exists() and not p.is_dir()), None)) is not None:
        raise InvalidInputError(
            f"Cannot write {what} to {path}: {not_a_folder} is a file, not a folder. Name a file in a folder.",
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


def open_private(path: Path, mode: str = "w") -> IO[Any]:
    """Open `path` for writing, emptied, readable by its owner only whatever the umask and whatever mode a file
    already there had: an export holds the organization's memory (and, made so, its webhook secrets)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    return os.fdopen(descriptor, mode, encoding=None if "b" in mode else "utf-8")
