"""What this machine (or container) gives a process: its memory, physical and under a cgroup's limit, and the
share of it GRANDBO_INDEX_MEMORY_MB takes when it is not set."""

from __future__ import annotations

import functools
import os
from pathlib import Path, PurePosixPath

# GRANDBO_INDEX_MEMORY_MB when unset: a quarter of the memory the process may use, at least 256 MB (why:
# docs/architecture.md, "Many organizations: index images").
INDEX_MEMORY_SHARE = 4
INDEX_MEMORY_FLOOR_MB = 256
INDEX_MEMORY_UNKNOWN_MB = 1024  # neither physical memory nor a cgroup limit could be read
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_MEMBERSHIP = Path("/proc/self/cgroup")
# cgroup v1 writes "no limit" as 2^63 rounded down to a page; a limit past an exbibyte is none.
NO_CGROUP_LIMIT = 1 << 60


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (or virtual machine), or None where the system does not say."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def cgroup_memory_limit(root: Path = CGROUP_ROOT, membership: Path = CGROUP_MEMBERSHIP) -> int | None:
    """The memory limit of this process's control group in bytes, or None when it has none: the smallest
    `memory.max` (cgroup v2) or `memory/memory.limit_in_bytes` (v1) from the process's own group (as `membership`,
    /proc/self/cgroup, names it) up to `root`, since a parent's limit binds its children. "max", a value past
    NO_CGROUP_LIMIT or no file (no cgroup, a group without the memory controller) is no limit."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = []
    groups = {"v2": "/", "v1": "/"}  # a container's own group is its root when the file says nothing
    for line in lines:  # "0::/group" (v2), "4:memory:/group" (v1)
        controllers, _, group = line.partition(":")[2].partition(":")
        if controllers == "":
            groups["v2"] = group or "/"
        elif "memory" in controllers.split(","):
            groups["v1"] = group or "/"
    files = {"v2": (root, "memory.max"), "v1": (root / "memory", "memory.limit_in_bytes")}
    limits = []
    for version, group in groups.items():
        base, name = files[version]
        own = PurePosixPath(group)
        for folder in (own, *own.parents):
            try:
                text = (base / folder.relative_to("/") / name).read_text().strip()
            except (OSError, ValueError):
                continue
            if text.isdigit() and 0 < int(text) < NO_CGROUP_LIMIT:
                limits.append(int(text))
    return min(limits, default=None)


def index_memory_default(physical: int | None, limit: int | None) -> tuple[int, str]:
    """GRANDBO_INDEX_MEMORY_MB when it is not set, in MB, and why: a quarter of the smaller of physical memory and
    the cgroup limit (bytes; None: unknown, no limit), at least INDEX_MEMORY_FLOOR_MB; INDEX_MEMORY_UNKNOWN_MB when
    neither is known."""
    known = [(size, what) for size, what in ((limit, "cgroup limit"), (physical, "physical memory")) if size]
    if not known:
        return INDEX_MEMORY_UNKNOWN_MB, "machine memory unknown"
    usable, what = min(known)
    share = (usable >> 20) // INDEX_MEMORY_SHARE
    if share < INDEX_MEMORY_FLOOR_MB:
        return INDEX_MEMORY_FLOOR_MB, f"floor (a quarter of {usable >> 20} MB of {what} is less)"
    return share, f"a quarter of {usable >> 20} MB of {what}"


@functools.cache
def machine_index_memory() -> tuple[int, str]:
    """`index_memory_default` for this process's machine and cgroup, read once per process: every `Settings()` and
    the server's log line take the same value, without reading /proc and /sys again."""
    return index_memory_default(physical_memory(), cgroup_memory_limit())


def index_memory_mb() -> int:
    return machine_index_memory()[0]
