"""The store's files on disk: made readable by their owner only, and a backup told apart from the other backend's
or a newer release's before it replaces anything."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grandbo.errors import MigrationError


def private_file(path: Path) -> None:
    """Make `path` a new empty file only its owner may read: a backup holds every organization's memory and
    their webhook secrets, and the default umask made it readable by every user of the machine."""
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def owner_only(path: Path) -> int | None:
    """Take group and world access away from an existing file (a store created by a release that left it to the
    umask: 0644, readable by every user of the machine); return the mode it had when it was changed, else None
    (missing, already private). The file itself is never replaced: its content and inode stay as they are."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    if not mode & 0o077:
        return None
    os.chmod(path, mode & 0o700)
    return mode


# What a backup of the other backend starts with, and the remedy for restoring one (`other_backend_backup`).
_BACKUP_MAGIC = {b"SQLite format 3\x00": "the embedded (SQLite) store", b"PGDMP": "a Postgres store (pg_dump)"}


def other_backend_backup(path: Path, mine: str) -> str | None:
    """Why the file at `path` cannot be restored here when it is a backup of the other backend, else None."""
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError:
        return None
    theirs = next((what for magic, what in _BACKUP_MAGIC.items() if head.startswith(magic)), None)
    if theirs is None or theirs == mine:
        return None
    return (
        f"{path} is a backup of {theirs}, and this is {mine}: a backup restores only onto the backend that wrote "
        "it. To move organizations between backends, `grandbo export FILE --org ORG` on the old store and "
        "`grandbo import-events FILE --org ORG` on this one."
    )


def refuse_newer_backup(source: Path, versions: set[int], known: Sequence[tuple[int, str, Any]]) -> None:
    """Refuse a backup whose schema versions include some this release does not know: restored, the store
    would be one this release refuses to open (and the one it replaced would be gone)."""
    if newer := sorted(versions - {version for version, _, _ in known}):
        raise MigrationError(
            f"{source} is a backup of a newer release (schema versions {newer} are unknown here): upgrade "
            "Grandbo, then restore it. Nothing was changed.",
            detail={"path": str(source), "unknown_versions": newer},
        )
