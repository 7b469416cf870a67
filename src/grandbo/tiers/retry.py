"""A read-modify-write of documents, done again when another write landed first.

Every document write expects the version it read, so two writers never lose each other's change; the one that
comes second gets a `StaleWriteError`. For a change that does not conflict with the other in meaning (a second
delivery of an alert, a new finding, the same close again, a triage result kept over a redelivery, a redaction
pattern or webhook secret added, a profile fact merged) that is not the caller's business: `rewritten` reads again
and applies the change again, up to ATTEMPTS times, pausing a little (random, growing) between tries so racing
writers spread apart. Each conflict means another write went through, so with fewer writers at once than ATTEMPTS
this ends. A caller's own expected version is never retried: its write is not done here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from grandbo.errors import StaleWriteError

T = TypeVar("T")
ATTEMPTS = 32  # tries of one read-modify-write (each failure means another writer's write went through)


def rewritten(change: Callable[[], T], *, attempts: int = ATTEMPTS, what: str | None = None) -> T:
    """Run `change` (which reads what it changes, then writes it expecting the version it read) until its write
    is not stale. After `attempts` stale tries, a StaleWriteError saying that `what` (default: the document's
    collection and id) kept changing and to send the change again: the caller stated no version, so the error
    names none."""
    for attempt in range(attempts):
        try:
            return change()
        except StaleWriteError as error:
            if attempt + 1 == attempts:
                raise _kept_changing(error, attempts, what) from error
            time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 5)))  # at most 64 ms: writers spread apart
    raise AssertionError("unreachable")  # the loop returns or raises


def _kept_changing(error: StaleWriteError, attempts: int, what: str | None) -> StaleWriteError:
    """The error of a change that lost to other writes `attempts` times (a write of the store's says which
    document: `store.base.document_conflict`)."""
    detail = error.detail
    what = what or f"{detail.get('collection', 'the')} {detail.get('doc_id', 'document')!r}"
    return StaleWriteError(
        f"{what} kept changing: other writes landed first {attempts} times in a row while this change was applied "
        "to it, so nothing of it was written. Send the change again.",
        detail={**detail, "attempts": attempts},
    )
