"""Where REST imports keep their uploads: `GRANDBO_HOME/uploads/`, owner-only (the exports hold incidents' text),
never the system's temporary folder, which nothing of Grandbo's sweeps.

An upload takes the disk every organization shares, so it is bounded as a write is (hostile probe 22b: a stalled
upload of 1 GiB, uncounted, made other orgs' writes 507 while it was held, and its own full disk was a 500 with a
traceback): by what its org may still store (`Bound`), by the disk's free space, which it leaves at twice
GRANDBO_DISK_RESERVE_MB at least (`keep_free`), and a full disk is the 507 `store_full` every write answers
(`no_room_is_507`).

Each upload is a folder `import-<random>/` beside a lock file `import-<random>.lock` that the process holding the
upload locks (`flock`) before the folder exists and lets go only once the folder is gone, when the import has
ended (or failed, or its client went away). The kernel lets go of a dead process's locks, so an upload whose lock
is free is a leftover of a process that was killed during its upload or its import: `sweep` removes those, at a
server's start and before every upload, its own and those of any other process sharing the home. A running
import's upload is locked, so never swept."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from grandbo.errors import PayloadTooLargeError, StorageLimitError, StoreFullError

log = structlog.get_logger(__name__)

FOLDER, PREFIX = "uploads", "import-"
MIB = 1 << 20


@dataclass(frozen=True)
class Bound:
    """How large an organization's upload may be: `most` bytes, and no more than the `room` its storage limit
    leaves it (None: no limit)."""

    org: str
    most: int
    room: int | None

    def check(self, size: int) -> None:
        """Refuse an upload of `size` bytes (so far, or declared) past the bound, naming which bound and the remedy."""
        if self.room is not None and size > self.room:
            raise StorageLimitError(
                f"The upload is {size / MIB:.1f} MiB so far, more than the {max(self.room, 0) / MIB:.1f} MiB "
                f"organization {self.org!r} may still store (GRANDBO_ORG_STORAGE_LIMIT_MB): an upload takes the "
                "disk too, so it was stopped and its part removed.",
                detail={"org_id": self.org, "upload_bytes": size, "room_bytes": max(self.room, 0)},
            )
        if size > self.most:
            raise PayloadTooLargeError(
                f"The export is over {self.most} bytes; split it and import the parts (a re-import of a part "
                "already in changes nothing).",
                detail={"limit_bytes": self.most},
            )


def keep_free(folder: Path, adding: int, floor_mb: int) -> None:
    """Refuse (507) `adding` bytes to an upload in `folder` that would leave its disk under `floor_mb` MiB free:
    the room every organization's writes keep (`GRANDBO_DISK_RESERVE_MB`) stays theirs."""
    free = shutil.disk_usage(folder).free if floor_mb else None  # no reserve: a full disk is `no_room_is_507`'s
    if free is not None and free - adding < floor_mb * MIB:
        raise StoreFullError(
            f"The disk holding GRANDBO_HOME has {free / MIB:.1f} MiB free: this upload would leave less than "
            f"{floor_mb} MiB (twice GRANDBO_DISK_RESERVE_MB, the room every organization's writes keep), so it was "
            f"stopped and its part removed. {StoreFullError.remedy}",
            detail={"free_bytes": free, "floor_bytes": floor_mb * MIB},
        )


@contextlib.contextmanager
def no_room_is_507() -> Iterator[None]:
    """Within: a full disk (ENOSPC, a quota) writing the upload is the 507 `store_full` every write answers, in one
    log line; it was a 500 with a traceback."""
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise StoreFullError(
            "The disk holding GRANDBO_HOME is full: the upload was stopped and its part removed. "
            + StoreFullError.remedy,
            detail={"reason": errno.errorcode[error.errno]},
        ) from None


class Upload:
    """One upload's private folder, held (locked) until `remove`."""

    def __init__(self, home: Path) -> None:
        root = home / FOLDER
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        while True:  # a sweep may take a lock file between its creation and its lock: then make another
            name = PREFIX + secrets.token_hex(8)
            self._lock = root / f"{name}.lock"
            self._fd = os.open(self._lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            if _same_file(self._fd, self._lock):
                break
            os.close(self._fd)
        self.folder = root / name
        self.folder.mkdir(mode=0o700)

    def remove(self) -> None:
        """The folder, then the lock file, then the lock (a sweep that finds the lock free finds no folder)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self._lock.unlink(missing_ok=True)
        os.close(self._fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), path.stat())
    except OSError:
        return False


def sweep(home: Path) -> int:
    """Remove the uploads no live process holds (see the module); return how many."""
    root = home / FOLDER
    try:
        locks = sorted(root.glob(f"{PREFIX}*.lock"))
    except OSError:
        return 0
    removed = 0
    for lock in locks:
        try:
            fd = os.open(lock, os.O_RDWR)
        except OSError:  # removed meanwhile by its holder or another sweep
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: an upload or an import that runs
            os.close(fd)
            continue
        shutil.rmtree(root / lock.name.removesuffix(".lock"), ignore_errors=True)
        lock.unlink(missing_ok=True)
        os.close(fd)
        removed += 1
    if removed:
        log.warning("import.upload_leftovers_removed", uploads=removed, folder=str(root))
    return removed
