"""Retention as upkeep: what a webhook delivery leaves behind (alerts, changes) is pruned in bounded rounds on the
write-behind, never inside the delivery, and a round that fails is logged, never raised into it."""

from __future__ import annotations

from collections.abc import Callable

import structlog

PRUNE_BATCH = 500  # documents one prune round deletes at most: one bounded write
log = structlog.get_logger(__name__)


def prune_round(prune: Callable[[int], int], due_again: Callable[[], None], *, failed: str, org: str) -> None:
    """One round of `prune(limit)`; a full round (more may be due) makes the next delivery prune again rather than
    in an hour (`due_again`); a failure is logged as `failed`."""
    try:
        pruned = prune(PRUNE_BATCH)
    except Exception as error:
        log.warning(failed, org_id=org, error=type(error).__name__)
        return
    if pruned >= PRUNE_BATCH:
        due_again()
