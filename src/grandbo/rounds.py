"""`grandbo worker`'s loop: embedding and write-behinds in turn, one bounded claim of each per round.

A round claims embed jobs once (`EmbedWorker.run_once`: at most GRANDBO_EMBED_CLAIM_SECONDS of provider work,
dealt across the orgs that have jobs) and write-behinds once (`Redriver.run_once`: about
`redrive.CLAIM_SECONDS` of them as timed, dealt across the orgs that have some). The loop used to drain the
write-behinds until none was ready, then the outbox until none was ready: one org's backlog of either kind held
every org's work of the other for as long as it took (1,700 pending alert triages of about a second each over a
large org: every org's new memories without vectors for half an hour; probe 20a). Each kind keeps its own
fairness across the orgs, its leases and its retries.

A watchdog thread logs `worker.stalled` (what the worker is doing, and since when) when no round has made
progress for `stall_s` while there was work, and `worker.resumed` when one does again: a worker that completes
nothing for minutes says so, and says where it is held.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import structlog

from grandbo.redrive import Redriver, RedriveReport
from grandbo.worker import DrainReport, EmbedWorker

log = structlog.get_logger(__name__)
STALL_S = 60.0  # no progress for this long, work waiting: `worker.stalled` (and again every STALL_S it lasts)


@dataclass
class RoundReport:
    """What one round (or several: `Rounds.drain`) did."""

    embed: DrainReport = field(default_factory=DrainReport)
    redriven: RedriveReport = field(default_factory=RedriveReport)

    @property
    def idle(self) -> bool:
        """Nothing of either kind was ready."""
        return self.embed.claimed == 0 and self.redriven.done + self.redriven.failed == 0

    @property
    def progressed(self) -> bool:
        """Some work was settled: a vector filed, a text found unembeddable, a write-behind done."""
        return self.embed.embedded + self.embed.unembeddable + self.redriven.done > 0


class Rounds:
    """Takes turns between the embed outbox and the write-behinds (`round`), with a watchdog (`watch`)."""

    def __init__(self, embed: EmbedWorker, redriver: Redriver, *, stall_s: float = STALL_S) -> None:
        self.embed, self.redriver, self.stall_s = embed, redriver, stall_s
        self._lock = threading.Lock()
        self._phase: str | None = None  # what the round is doing; None between rounds when idle
        self._progress_at = time.monotonic()  # the last round that settled work, or found none ready
        self._warned_at = 0.0  # stalled seconds last logged (0: not stalled)
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    def round(self) -> RoundReport:
        """One claim of embed jobs, then one of write-behinds; a store outage raises (`StoreUnavailableError`)."""
        with self._lock:
            if self._phase is None:  # idle until now: waiting for work is no stall
                self._progress_at = time.monotonic()
        report = RoundReport()
        self._doing("embed")
        report.embed = self.embed.run_once()
        self._doing("write-behind")
        report.redriven = self.redriver.run_once()
        self._settled(report)
        return report

    def drain(self) -> RoundReport:
        """Rounds until neither kind has work ready (`grandbo worker --once`): the embedding stops early when the
        provider fails (its jobs wait for their retry time), as `EmbedWorker.drain` does."""
        total, asked = RoundReport(), set[tuple[str, int]]()
        embedding, redriving = True, True
        while embedding or redriving:
            if embedding:
                self._doing("embed")
                report = self.embed.run_once(asked=asked)
                total.embed.add(report)
                embedding = report.claimed > 0 and not report.failing
            if redriving:
                self._doing("write-behind")
                redriven = self.redriver.run_once()
                total.redriven.add(redriven)
                redriving = redriven.done + redriven.failed > 0
        self._settled(total)
        return total

    def _doing(self, phase: str) -> None:
        with self._lock:
            self._phase = phase

    def _settled(self, report: RoundReport) -> None:
        with self._lock:
            now = time.monotonic()
            if report.progressed or report.idle:
                if self._warned_at:
                    log.warning("worker.resumed", stalled_s=round(now - self._progress_at, 1))
                self._progress_at, self._warned_at = now, 0.0
            self._phase = None if report.idle else "between rounds"

    def watch(self) -> None:
        """Start the watchdog thread (stopped by `stop`)."""
        if self._watchdog is not None:
            return
        self._watchdog = threading.Thread(target=self._watch, name="grandbo-worker-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(5.0, self.stall_s / 4)):
            self.check()

    def check(self) -> None:
        """Log `worker.stalled` if no round has made progress for `stall_s` (then again every `stall_s`)."""
        with self._lock:
            stalled = time.monotonic() - self._progress_at
            if self._phase is None or stalled < self.stall_s or stalled < self._warned_at + self.stall_s:
                return
            self._warned_at, phase = stalled, self._phase
        work = self.redriver.current if phase == "write-behind" else None
        log.warning(
            "worker.stalled",
            stalled_s=round(stalled, 1),
            phase=phase,
            org_id=work.org_id if work else None,
            kind=work.kind if work else None,
            subject=work.subject if work else None,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=10)
            self._watchdog = None
