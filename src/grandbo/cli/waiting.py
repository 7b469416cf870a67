"""`grandbo serve` and `grandbo worker` started while the store does not answer: they wait for it.

A process started during a Postgres outage (down, restarting, recovering from a crash) exited 2 before the store was
back, and stayed down: behind an orchestrator that restarts it that is a crash loop, and without one the queued work
waited for someone to start it again (probe 22a: 41,220 entries of 3 organizations unembedded after both workers
exited). Now it tries again with back-off (1 s, doubling, 15 s at most) until the store answers, one warning line
`store.unavailable` per try saying what it waits for (and one line on stderr), as a running process waits an outage
out; GRANDBO_STORE_WAIT_SECONDS bounds the wait (0: for ever). Postgres only: an embedded store that cannot be opened
(a read-only mount, a file of another user) is not an outage, and stays an error at once; nor is a Postgres that
refuses the configuration (a wrong password, an unknown database: `store.postgres.refusals`), a ConfigError at once.
SIGTERM or Ctrl-C ends the wait. Commands an operator runs (`grandbo migrate`, `backup`, `orgs`, `worker --once`...)
still fail at once, with the error and its remedy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import structlog

from grandbo.cli.terminal import say
from grandbo.config import Settings
from grandbo.errors import StoreUnavailableError
from grandbo.urls import mask_url

log = structlog.get_logger(__name__)

T = TypeVar("T")

FIRST_S, MOST_S = 1.0, 15.0  # the back-off between tries: from FIRST_S, doubling, MOST_S at most


def store_name(settings: Settings) -> str:
    """The store waited for, as a log line may name it (no credentials)."""
    return mask_url(settings.store_url)


def wait_for_store(
    open_store: Callable[[], T],
    settings: Settings,
    stop: threading.Event,
    command: str,
    *,
    waiting: Callable[[StoreUnavailableError, float], None] | None = None,
) -> T | None:
    """`open_store()` once it answers: on Postgres, tried again with back-off while it raises StoreUnavailableError,
    until GRANDBO_STORE_WAIT_SECONDS (0: for ever); then that error, saying how long it waited. None when `stop` was
    set meanwhile. The embedded store is opened once: a file it cannot open now (read-only, owned by another user)
    will not open later. `waiting(error, retry_in_s)` is called before each wait (`grandbo serve` answers meanwhile)."""
    if settings.store_url.startswith("sqlite:"):  # a file: one it cannot open (read-only, a folder) stays so
        return open_store()
    started, delay, tries = time.monotonic(), FIRST_S, 0
    bound, store = settings.store_wait_seconds, store_name(settings)
    while True:
        try:
            opened = open_store()
        except StoreUnavailableError as error:
            tries += 1
            waited = time.monotonic() - started
            if bound and waited >= bound:
                raise StoreUnavailableError(
                    f"{error.message} `grandbo {command}` waited {waited:.0f} s for it (GRANDBO_STORE_WAIT_SECONDS="
                    f"{bound:g}) and gives up.",
                    detail={**error.detail, "waited_s": round(waited, 1)},
                ) from error
            pause = min(delay, bound - waited) if bound else delay
            log.warning("store.unavailable", command=command, waiting_for=store, error=error.message, tries=tries,
                        waited_s=round(waited, 1), retry_in_s=round(pause, 1))  # fmt: skip
            say(f"store unavailable: `grandbo {command}` waits for {store}, trying again in {pause:.0f} s "
                f"(waited {waited:.0f} s): {error.message}", err=True)  # fmt: skip
            if waiting is not None:
                waiting(error, pause)
            if stop.wait(pause):
                return None
            delay = min(delay * 2, MOST_S)
            continue
        if tries:
            waited = round(time.monotonic() - started, 1)
            log.info("store.available", command=command, store=store, tries=tries + 1, waited_s=waited)
            say(f"store available again after {waited:g} s: `grandbo {command}` starts", err=True)
        return opened
