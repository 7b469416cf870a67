"""Where REST imports keep their uploads: `GRANDBO_HOME/uploads/`, owner-only (the exports hold incidents' text),
never the system's temporary folder, which nothing of Grandbo's sweeps.

Each upload is a folder `import-<random>/` beside a lock file `import-<random>.lock` that the process holding the
upload locks (`flock`) before the folder exists and lets go only once the folder is gone, when the import has
ended (or failed, or its client went away). The kernel lets go of a dead process's locks, so an upload whose lock
is free is a leftover of a process that was killed during its upload or its import: `sweep` removes those, at a
server's start and before every upload, its own and those of any other process sharing the home. A running
import's upload is locked, so never swept."""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

FOLDER, PREFIX = "uploads", "import-"


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
