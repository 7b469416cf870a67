"""This process, named so that another can tell later whether it still runs: a lease (the org's import lease,
`tiers.imported`) records its holder this way, and a holder proved gone is taken over at once instead of waiting
out its lease.

Proved gone means: the same machine since the same boot (the kernel's boot id), the same pid namespace (a container
sees its own pids), and no process with the holder's pid that started when it did (a pid is reused; its start time
is not). Anything else (another host, another container, no `/proc`) is not proof: the lease runs out instead."""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


def this_process() -> dict[str, Any]:
    """Who this process is: host, pid, boot id, pid namespace and start time (the last three empty off Linux)."""
    return dict(_identity(os.getpid()))  # by pid: a forked child is another process


@functools.cache
def _identity(pid: int) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": pid, "boot": _read(_PROC / "sys/kernel/random/boot_id"),
            "pidns": _pid_namespace(), "started": _started(pid)}  # fmt: skip


def gone(holder: Mapping[str, Any]) -> bool:
    """Whether the process `holder` names (as `this_process` gave it) has certainly ended (see the module)."""
    here = this_process()
    if not here["boot"] or not here["pidns"] or not holder.get("started"):
        return False
    if any(holder.get(key) != here[key] for key in ("host", "boot", "pidns")):
        return False
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    started = _started(pid)
    if not started:  # no entry of it to read: a `/proc` mounted with hidepid hides another user's live processes
        return not _exists(pid)
    return started != str(holder["started"])


def _exists(pid: int) -> bool:
    """Whether a process of this pid exists, whoever runs it (a signal 0 is checked, never sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def named_gone(holder: str) -> bool:
    """Whether the process a lease names (`store.sql.holders`: `this_process` as JSON) is proved gone; a holder
    unreadable is not."""
    try:
        named = json.loads(holder)
    except ValueError:
        return False
    return isinstance(named, dict) and gone(named)


def _started(pid: int) -> str:
    """The process's start time, in clock ticks since boot ("" when there is no such process, or no /proc)."""
    stat = _read(_PROC / str(pid) / "stat")
    # The command name (field 2) is in parentheses and may hold spaces; the start time is field 22.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_namespace() -> str:
    try:
        return os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return ""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
