"""The temporary organizations `grandbo eval` makes in a configured store, and which of them a killed run left.

A run inside a configured store (GRANDBO_DATABASE_URL) loads its set into an organization named
`eval-<host>-<pid>-<random>` and drops it at the end; a run killed before that (SIGKILL, a lost machine) leaves
it. The next run removes those it can tell are left: named so, by this machine and a process that is gone, or
by any machine more than `STALE_AFTER` ago. No other organization is ever touched, and a run still going (its
process alive here) never loses its own. Older releases named theirs `eval-<8 hex>`, a shape a person's own org
can have (`eval-20261130`, a date): nothing tells one from the other, so those are neither dropped nor hidden
(`grandbo orgs delete` removes a leftover).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from collections.abc import Mapping
from datetime import datetime, timedelta

from grandbo.model import utcnow

STALE_AFTER = timedelta(hours=24)  # longer than any evaluation runs
_NEW = re.compile(r"eval-(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]{1,10})-[0-9a-f]{6}")


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]


def new_eval_org() -> str:
    """A name for this run's temporary organization: this machine, this process, and a random part."""
    return f"eval-{_host()}-{os.getpid()}-{secrets.token_hex(3)}"


def is_eval_org(org_id: str) -> bool:
    """Whether `org_id` is named as `grandbo eval` names its temporary organizations."""
    return _NEW.fullmatch(org_id) is not None


def stale_eval_orgs(created: Mapping[str, datetime], now: datetime | None = None) -> list[str]:
    """The evaluation organizations among `created` (name -> creation time) that a finished run left behind."""
    now = now or utcnow()
    stale = []
    for org_id, at in sorted(created.items()):
        new = _NEW.fullmatch(org_id)
        if new is not None and new["host"] == _host():
            if not _alive(int(new["pid"])):
                stale.append(org_id)
        elif new is not None and now - at > STALE_AFTER:
            stale.append(org_id)
    return stale


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or no such number): not known to be gone
    return True
