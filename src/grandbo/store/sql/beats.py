"""Write-behind leases kept alive by a heartbeat, written once for both backends.

A lease records its holder (`store.sql.holders`), and a holder proved gone on this machine is taken over at once
(`redrive.Redriver.take_over`); one on another machine or container cannot be proved gone, and its work waited the
whole GRANDBO_WRITE_BEHIND_LEASE_SECONDS (300 s) after a kill: a closed incident without its memories, a delivery's
alerts untriaged, for five minutes. Now a lease is taken for BEATS beats of GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS
only (5 s: 15 s) and the holder renews it every beat while it holds the work, on a thread of its own (a long piece
of work does not stop it). A holder that stops beating (killed, its host lost) loses its leases within BEATS beats,
on any machine, and the next claim takes the work over: no new column, no clock but the store's.

A live holder keeps a piece at most GRANDBO_WRITE_BEHIND_LEASE_SECONDS, as before (a process stuck on it frees it
then): a lease is renewed while at least BEATS beats of that are left, then left to run out. A holder that misses
BEATS beats while alive (its store out of reach, the process paused) may see its work taken over, and both run it:
every kind is idempotent, and a result written with its work's completion is kept once (`WorkDoneError`)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import structlog

from grandbo.ports import Work

log = structlog.get_logger(__name__)

BEATS = 3  # beats a holder may miss before its leases run out
Renew = Callable[[str, Sequence[int], float], Sequence[int]]  # (org, work ids, seconds) -> the ids still held


class Heartbeat:
    """The leases this process holds, by org, renewed every `every_s` by `renew` on a daemon thread started at the
    first lease; `close` stops it."""

    def __init__(self, renew: Renew, every_s: float) -> None:
        self._renew, self.every_s = renew, every_s
        self._held: dict[tuple[str, int], float] = {}  # (org, work id) -> monotonic end of its full lease
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    def _forked(self) -> None:
        """In a child process: the leases are its parent's (which beats them), and no thread beats here yet."""
        self._held, self._lock, self._thread = {}, threading.Lock(), None

    @property
    def dead_after_s(self) -> float:
        """How long a lease lasts without a beat: a holder silent this long loses it."""
        return BEATS * self.every_s

    def lease(self, lease_seconds: float) -> float:
        """The seconds a claim leases for: BEATS beats, renewed while held, or the full lease if shorter."""
        return min(lease_seconds, self.dead_after_s)

    def held(self, work: Sequence[Work], lease_seconds: float) -> None:
        """`work` was just leased here for at most `lease_seconds`: renew it every beat until then."""
        if not work:
            return
        until = time.monotonic() + lease_seconds
        with self._lock:
            self._held.update({(w.org_id, w.work_id): until for w in work})
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="grandbo-lease-beat", daemon=True)
                self._thread.start()

    def dropped(self, work: Sequence[Work]) -> None:
        """`work` is done, failed or given back: no more beats for it."""
        with self._lock:
            for w in work:
                self._held.pop((w.org_id, w.work_id), None)

    def beat(self) -> int:
        """Renew every lease held here for BEATS beats more, now; how many were renewed. A lease with less than
        that left of its full length is left to run out, and one no longer held (completed in a result's write,
        taken over after missed beats) is forgotten."""
        now, seconds = time.monotonic(), self.dead_after_s
        by_org: dict[str, list[int]] = {}
        with self._lock:
            for (org, work_id), until in list(self._held.items()):
                if until - now < seconds:
                    del self._held[(org, work_id)]
                else:
                    by_org.setdefault(org, []).append(work_id)
        renewed = 0
        for org, ids in by_org.items():
            try:
                kept = set(self._renew(org, ids, seconds))
            except Exception as error:  # that org's only (dropped, refused): the other orgs' leases are renewed
                log.warning("write_behind.heartbeat_failed", org_id=org, error=str(error)[:300], held=len(ids))
                continue
            renewed += len(kept)
            with self._lock:
                for work_id in set(ids) - kept:
                    self._held.pop((org, work_id), None)
        return renewed

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.beat()
            except Exception as error:  # the store out of reach: the next beat tries again (BEATS missed: lost)
                log.warning("write_behind.heartbeat_failed", error=str(error)[:300], held=len(self._held))

    def close(self) -> None:
        """Stop beating (the store closes): leases still held run out within BEATS beats."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)


_MADE = threading.Lock()
_LIVE: weakref.WeakSet[Heartbeat] = weakref.WeakSet()  # every heartbeat of this process, told of a fork


def _after_fork() -> None:
    for beats in list(_LIVE):
        beats._forked()


os.register_at_fork(after_in_child=_after_fork)


class Beating:
    """The heartbeat of a store's leases, for both backends' pending work (before their connection among its bases:
    `close` stops the beats, then closes the store); each backend renews its leases its way (`_renew_leases`)."""

    lease_beat_seconds = 5.0  # GRANDBO_WRITE_BEHIND_HEARTBEAT_SECONDS (`open_store` sets it)
    _beats: Heartbeat | None = None  # the leases held here, renewed every beat

    def _renew_leases(self, org_id: str, ids: Sequence[int], seconds: float) -> list[int]:
        raise NotImplementedError

    def _heartbeat(self) -> Heartbeat:
        """The store's heartbeat, made at its first use with its `lease_beat_seconds`."""
        if (beats := self._beats) is not None:  # every lease, completion and release asks: no lock once made
            return beats
        with _MADE:
            if self._beats is None:
                self._beats = Heartbeat(self._renew_leases, self.lease_beat_seconds)
            return self._beats

    def beat_work(self) -> int:
        return self._heartbeat().beat()

    def close(self) -> None:
        if self._beats is not None:
            self._beats.close()  # leases still held run out within BEATS beats
        super().close()  # type: ignore[misc]  # the store's connection's
