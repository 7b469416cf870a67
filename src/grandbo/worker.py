"""The embed worker: drains the outbox after commit and writes vectors, or nothing, per job.

Failures never touch the entries. A provider that is down, slow, or answers anything but one finite vector of
its dimension per text (`embed_checked`) leaves every job of the batch in the outbox with a later retry time,
and nothing of that answer is written; a failure that may be one text's (not an outage, nor the account refused)
has the batch asked again in halves first (`EmbedWorker._apart`), so that only the text at fault waits. An
all-zero vector is no failure: the text has nothing the provider can embed, so its job is settled as unembeddable
(`ports.UNEMBEDDABLE`) and the entry is found by its words only.

A worker that ends while it holds a claim (killed, the OOM killer) loses it: a worker on the same machine proves it
gone and ends its leases at once (`take_over`, its leases record their holder), one elsewhere waits for them to run
out; the claim that takes its jobs again counts each a failed attempt (`store.queue.leasable`). Such jobs are
embedded in a batch of lost jobs only, one a claim, after the claim's fresh batches; one lost again (it was in the
lost batch that ended a worker again) alone: a text that ends every worker stops after GRANDBO_EMBED_MAX_ATTEMPTS
and takes no fresh job, nor org, with it, and a deploy's kill comes back a batch a claim, not a job a claim. A batch
the provider does not answer in time is dealt the same way (`embed_jobs.TIMED_OUT`): a text that makes the provider slow
is embedded alone at its third attempt, and fails by itself.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.config import Settings
from grandbo.embed_jobs import TIMED_OUT, TIMED_OUT_AGAIN
from grandbo.embeddings.apart import Apart
from grandbo.embeddings.base import CANARY, Provider, capped_batch, embed_checked, space_of, texts_fault
from grandbo.errors import (
    EmbeddingError,
    GrandboError,
    ProviderUnavailableError,
    StoreFullError,
    StoreUnavailableError,
)
from grandbo.model import EmbeddingState, utcnow
from grandbo.pending_work import EMBED_MOST_SECONDS, retry_delay
from grandbo.ports import EmbedJob, EmbedResult, OrgEntries, Outbox
from grandbo.processes import named_gone

log = structlog.get_logger(__name__)

LOOK_S = 10.0  # how often a worker looks for embed job leases whose holder is gone (`EmbedWorker.take_over`), at most


@dataclass
class DrainReport:
    """What one drain did. `failed` counts the jobs whose attempt failed, a text refused alone among them (its claim
    went on: `EmbedWorker._apart`); `failing`, whether a claim stopped because the provider failed a batch whole (an
    outage, a Retry-After, the account refused, every request refused, halves past the claim's time): a drain stops
    there, not for a text that failed alone."""

    claimed: int = 0
    embedded: int = 0
    failed: int = 0
    unembeddable: int = 0  # entries newly found to have no vector (settled: lexical only, not an error)
    errors: list[str] = field(default_factory=list)
    failing: bool = False

    def add(self, other: DrainReport) -> None:
        self.claimed += other.claimed
        self.embedded += other.embedded
        self.failed += other.failed
        self.unembeddable += other.unembeddable
        self.errors.extend(other.errors)
        self.failing = self.failing or other.failing


class EmbedWorker:
    """Claims embed jobs, embeds them in batches, writes the vectors."""

    def __init__(self, store: Outbox, provider: Provider, settings: Settings) -> None:
        self.store = store
        self.provider = provider
        self.settings = settings
        self.space = space_of(provider)
        self.batch_size = capped_batch(provider, settings.embed_batch_size)
        self._batch_seconds: float | None = None  # a full provider batch's seconds, as measured (`_measured`)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._maintenance: threading.Thread | None = None
        self._maintenance_stop = threading.Event()
        self._look_at = 0.0  # when `take_over` looks again (monotonic seconds)
        self._quiet_until = 0.0  # no claim before (monotonic seconds): the provider's Retry-After (`_retry_later`)
        self._outages = 0  # batches failed whole in a row for the provider's sake (`_pause`)

    # Jobs claimed per round trip, in provider batches: one claim (a write transaction that also reads
    # the entries' text) serves several provider calls, which lifted bulk writes by a tenth. At most
    # GRANDBO_EMBED_CLAIM_SECONDS of provider work, though: a claim is dealt fairly across the orgs with work
    # when it is made, and a job that arrives meanwhile waits for the next one. A worker that has not timed a
    # full batch yet claims one: eight batches of the local model on a busy machine took 6.4-7.3 s, and another
    # org's entry written meanwhile waited 7.1-8.0 s (benchmarks/embed_fairness.py, docs/benchmarks.md).
    CLAIM_BATCHES = 8

    def _claim_batches(self) -> int:
        if self._batch_seconds is None:
            return 1
        return max(1, min(self.CLAIM_BATCHES, int(self.settings.embed_claim_seconds / self._batch_seconds)))

    # A claim's lease, once the provider is timed: LEASE_MARGIN times the provider work it may hold (its budget and
    # one batch more), at least LEASE_FLOOR_S and a provider call that runs to the HTTP timeout twice over (a batch
    # started at the budget's end whose call stalls), at most GRANDBO_EMBED_LEASE_SECONDS. A worker killed mid-claim
    # left its jobs, one of every org with work, to the whole 300 s lease, for about 2 s of work (probe 18). A
    # worker slower than that (the machine stalled) may have a job taken again by another: embedded twice, filed once.
    LEASE_MARGIN, LEASE_FLOOR_S = 3.0, 30.0

    def _lease(self) -> float:
        settings = self.settings
        if self._batch_seconds is None:  # one batch, of a provider not timed yet (a model loading, a cold host)
            return settings.embed_lease_seconds
        held = settings.embed_claim_seconds + self._batch_seconds
        stalled = settings.embed_claim_seconds + 2 * settings.http_timeout_seconds
        return min(settings.embed_lease_seconds, max(self.LEASE_FLOOR_S, stalled, self.LEASE_MARGIN * held))

    def _measured(self, texts: int, seconds: float) -> None:
        """Fold one provider call into the running estimate of a full batch's seconds."""
        batch = seconds / max(1, texts) * self.batch_size
        self._batch_seconds = batch if self._batch_seconds is None else 0.7 * self._batch_seconds + 0.3 * batch

    def run_once(self, org_id: str | None = None, asked: set[tuple[str, int]] | None = None) -> DrainReport:
        """Claim up to CLAIM_BATCHES provider batches (fewer for a slow provider, one until a batch is timed:
        `_claim_batches`) and process them; an empty report means nothing was ready (or the provider asked to wait).

        Each batch's vectors are written as soon as it is embedded. When the provider fails on a batch (else than
        for one of its texts: those are found by halves, `_apart`), that batch counts an attempt and waits for its
        retry time; the batches not tried yet go back to the outbox untouched, as they do once the claim has held
        GRANDBO_EMBED_CLAIM_SECONDS (or half the lease, so that no other worker claims jobs this one is still working
        on) or when writing a batch's vectors fails. The jobs whose last attempt lost their worker (`EmbedJob.lost`)
        are embedded last, in a batch of their own (each alone: `EmbedJob.alone`). Before it claims, the leases of
        workers proved gone are ended (`take_over`). Nothing is claimed while the provider's last Retry-After runs
        (its rate limit is every org's). `asked` (a drain's, filled in here): the jobs asked already, given back
        unasked when claimed again (a text refused alone, ready again at once with GRANDBO_EMBED_RETRY_SECONDS=0)."""
        report = DrainReport()
        if time.monotonic() < self._quiet_until:
            return report
        settings = self.settings
        size, lease = self.batch_size, self._lease()
        self.take_over()
        claimed_at = time.monotonic()
        jobs = self.store.claim_jobs(size * self._claim_batches(), settings.embed_max_attempts, org_id, lease,
                                     settings.embed_retry_seconds, lost_batch=size)  # fmt: skip
        if asked is not None and (again := [job for job in jobs if (job.org_id, job.job_id) in asked]):
            self.store.release_jobs(again)
            jobs = [job for job in jobs if (job.org_id, job.job_id) not in asked]
        # The jobs whose last attempt lost its worker (a batch of them at most, or one) are embedded in a batch of
        # their own, after the rest: were a text of theirs what ends the worker, it takes no fresh job with it, and
        # the others are filed first.
        fresh, lost = [job for job in jobs if not job.lost], [job for job in jobs if job.lost]
        batches = [fresh[first : first + size] for first in range(0, len(fresh), size)]
        batches += [[job] for job in lost] if any(job.alone for job in lost) else [lost] if lost else []
        jobs = [job for batch in batches for job in batch]
        report.claimed = len(jobs)
        done = 0
        # A provider slower than measured (a machine that got busy) still holds the claim no longer than its
        # budget: what is left goes back, to be dealt again with the jobs that arrived meanwhile.
        budget = min(lease / 2, settings.embed_claim_seconds)
        try:
            for batch in batches:
                # (The first lost batch is tried past the budget too, or a backlog would give it back forever.)
                first_lost = batch[0].lost and (done == 0 or not jobs[done - 1].lost)
                if done and time.monotonic() - claimed_at >= budget and not first_lost:
                    break
                done += len(batch)
                began = time.monotonic()
                try:
                    vectors = embed_checked(self.provider, [job.text for job in batch])
                except Exception as caught:  # the jobs at fault, or all, left for a later attempt
                    # (Its halves within half the lease, not the budget: a batch that spent it, Bedrock's 64 calls,
                    # failed whole, another org's entries with the text at fault to the end of their attempts.)
                    if self._apart(batch, caught, report, claimed_at + lease / 2):
                        continue
                    report.failing = True
                    self._pause(caught)
                    break
                self._outages = 0
                if len(batch) == size:  # a short batch's fixed costs would weigh as a full one's
                    self._measured(len(batch), time.monotonic() - began)
                try:
                    self._complete(batch, vectors, report)
                except Exception:  # the store refused the write: the batch goes back with the rest, not leased on
                    done -= len(batch)
                    raise
        finally:
            if asked is not None:  # (not those given back unasked: the budget spent, a write refused)
                asked.update((job.org_id, job.job_id) for job in jobs[:done])
            if done < len(jobs):
                self.store.release_jobs(jobs[done:])
                report.claimed -= len(jobs) - done
        return report

    def take_over(self) -> int:
        """End the embed job leases of holders proved gone (killed on this machine: `grandbo.processes`), so that
        their jobs are dealt by this claim, not when their lease runs out (up to GRANDBO_EMBED_LEASE_SECONDS); a
        holder on another machine or container is not proved gone. Looks once in LOOK_S at most; how many ended."""
        if time.monotonic() < self._look_at:
            return 0
        self._look_at = time.monotonic() + LOOK_S
        ended, verdicts = 0, {}
        for org_id, holder in self.store.job_holders():
            if holder not in verdicts:
                verdicts[holder] = named_gone(holder)
            if verdicts[holder] and (count := self.store.end_leases_of(org_id, holder)):
                ended += count
                log.warning("memory.embedding_lease_taken_over", org_id=org_id, jobs=count,
                            holder_pid=json.loads(holder).get("pid"))  # fmt: skip
        return ended

    def _apart(self, batch: list[EmbedJob], caught: Exception, report: DrainReport, until: float) -> bool:
        """After `batch` failed with `caught`: asked again in halves down to the jobs at fault, which count the
        attempt (`embeddings.apart`, shared with the query batcher), each half written when its answer is usable. The
        whole batch counts it when the failure is no text's, the claim's time is up (`until`, monotonic: half its
        lease; checked before each provider call), or the provider refuses every request. Whether the claim goes on;
        after an outage met, what is left of the batch goes back to the outbox (what was tried counts the attempt), as
        does every job not settled yet when writing a half's vectors fails."""

        def ask(jobs: list[EmbedJob]) -> list[npt.NDArray[np.float32] | None] | Exception:
            try:
                return embed_checked(self.provider, [job.text for job in jobs])
            except Exception as error:
                return error

        def give_back(jobs: list[EmbedJob], _: BaseException) -> None:
            self.store.release_jobs(jobs)
            report.claimed -= len(jobs)

        return Apart(
            ask,
            lambda: self._embeds(CANARY),
            lambda jobs, vectors: self._complete(jobs, vectors, report),
            lambda jobs, error: self._retry_later(jobs, error, report),
            until,
            give_back,
        ).run(batch, caught)

    # An outage (the provider unreachable, a 5xx, the account refused) fails every batch alike. The loops claimed the
    # next batch at once (`grandbo worker`) or a poll later (the server's), each job of the backlog spending an
    # attempt on a provider known to be failing: an outage longer than the attempts' back-off failed every queued job
    # of every org for good. After a batch failed whole so, nothing is claimed for its retry delay, longer for each
    # such batch in a row (OUTAGE_MOST_S at most): a batch at a time asks whether the provider is back.
    OUTAGE_MOST_S = 300.0

    def _pause(self, caught: Exception) -> None:
        """No claim for a while after a batch failed whole with `caught`, when that says the provider is failing (not
        a text of the batch, nor a timeout: a text may make the provider slow, `embed_jobs.TIMED_OUT`)."""
        if texts_fault(caught) or (isinstance(caught, ProviderUnavailableError) and caught.detail.get("timed_out")):
            return
        self._outages += 1
        wait = retry_delay(self._outages, self.settings.embed_retry_seconds, most=self.OUTAGE_MOST_S)
        self._quiet_until = max(self._quiet_until, time.monotonic() + wait)
        log.warning("memory.embedding_paused", provider=self.provider.name, seconds=wait, in_a_row=self._outages)

    def _embeds(self, text: str) -> bool:
        """Whether the provider embeds `text` alone (its vector unused)."""
        try:
            embed_checked(self.provider, [text])
        except Exception:
            return False
        return True

    def _retry_later(self, jobs: list[EmbedJob], caught: BaseException, report: DrainReport) -> None:
        error = (
            caught
            if isinstance(caught, GrandboError)
            else EmbeddingError(f"{self.provider.name} failed: {type(caught).__name__}: {caught}")
        )
        attempt = max(job.attempts for job in jobs) + 1
        delay = retry_delay(attempt, self.settings.embed_retry_seconds, most=EMBED_MOST_SECONDS)
        if isinstance(wait := error.detail.get("retry_after_s"), float):  # the provider's Retry-After, at least
            delay = max(delay, wait)
            # and no other batch before it is over: each claim sent the next one, each job counting an attempt
            self._quiet_until = max(self._quiet_until, time.monotonic() + wait)
        retry_at = utcnow() + timedelta(seconds=delay)
        if isinstance(error, ProviderUnavailableError) and error.detail.get("timed_out"):
            # Dealt next as jobs that lost their worker (a batch of their own), alone once timed out twice in a row
            # (`embed_jobs.TIMED_OUT`): a text that makes the provider slow fails by itself, not its batch-mates.
            for again in (False, True):
                if group := [job for job in jobs if job.lost is again]:
                    self.store.fail_jobs(group, TIMED_OUT_AGAIN if again else TIMED_OUT, retry_at)
        else:
            self.store.fail_jobs(jobs, error.message, retry_at)
        report.failed += len(jobs)
        report.errors.append(error.message)
        log.warning(
            "memory.embedding_failed",
            provider=self.provider.name,
            code=error.code,
            jobs=len(jobs),
            attempt=attempt,
            retry_in_s=delay,
            error=error.message[:300],
        )

    def _complete(
        self, jobs: list[EmbedJob], vectors: list[npt.NDArray[np.float32] | None], report: DrainReport
    ) -> None:
        zero = [job for job, vector in zip(jobs, vectors, strict=True) if vector is None]
        if zero:  # settled once, not failed: a retry would get the same all-zero answer
            reason = f"{self.provider.name} has no vector for this text (all zeros): it is found by its words only"
            marked = self.store.mark_unembeddable(zero, reason)
            report.unembeddable += marked
            log.info(
                "memory.unembeddable",
                provider=self.provider.name,
                count=marked,
                entries=[job.entry_id for job in zero][:10],
            )
        results = [EmbedResult(job, vector) for job, vector in zip(jobs, vectors, strict=True) if vector is not None]
        report.embedded += self.store.complete_jobs(self.space, results)

    def drain(self, org_id: str | None = None) -> DrainReport:
        """Process batches until none is ready (failed jobs wait for their retry time; each job is asked once a drain),
        or the provider fails a batch whole (`DrainReport.failing`); a text it refused alone stops nothing: the other
        jobs are embedded."""
        total, asked = DrainReport(), set[tuple[str, int]]()
        while True:
            report = self.run_once(org_id, asked)
            total.add(report)
            if report.claimed == 0 or report.failing:  # nothing ready, or the provider is failing: stop
                return total

    def maintain(self) -> list[str]:
        """Maintenance off every request and write path (`Outbox.maintain`): build the approximate vector indexes
        that writes asked for (Postgres HNSW, concurrently), finish the erasures a crash cut short (SQLite); return
        the orgs worked on."""
        try:
            return self.store.maintain()
        except (StoreUnavailableError, StoreFullError) as error:  # an outage, a full disk: one line, not a traceback
            log.warning("worker.store_refused", code=error.code, error=error.message)
            return []
        except Exception:  # the requests stay recorded: the next round tries again
            log.exception("worker.maintenance_failed")
            return []

    # Background threads for long-running processes (the API server, `grandbo worker`): one drains the
    # outbox, one runs maintenance, so that an index build (minutes for a large org) never holds up embedding.

    def start(self, poll_seconds: float = 1.0) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self.start_maintenance(poll_seconds)

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    # A claim at a time, as `drain`, but a stop is seen between claims: a closing server gives its
                    # claim back done, not mid-backlog at exit, whose leases would run out and count as lost.
                    report = self.run_once()
                    if report.claimed and not report.failing:  # (a text refused alone: the next claim at once)
                        continue
                except (StoreUnavailableError, StoreFullError) as error:  # an outage, a full disk: one line
                    log.warning("worker.store_refused", code=error.code, error=error.message)
                except Exception:  # keep the thread alive; the jobs stay in the outbox
                    log.exception("worker.drain_crashed")
                self._wake.wait(poll_seconds)
                self._wake.clear()

        self._thread = threading.Thread(target=loop, name="grandbo-embed-worker", daemon=True)
        self._thread.start()

    def start_maintenance(self, poll_seconds: float = 1.0) -> None:
        if self._maintenance is not None:
            return
        stop = self._maintenance_stop = threading.Event()  # its own: a build left running never loops on

        def loop() -> None:
            while not stop.is_set():
                self.maintain()
                stop.wait(poll_seconds)

        self._maintenance = threading.Thread(target=loop, name="grandbo-maintenance", daemon=True)
        self._maintenance.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        # An index build in flight is waited for only briefly: one cut short leaves an invalid index, which
        # the next maintenance drops and builds again.
        self._maintenance_stop.set()
        if self._maintenance is not None:
            self._maintenance.join(timeout=5)
            self._maintenance = None


def embedding_state(entries: OrgEntries, entry_id: str, max_attempts: int) -> EmbeddingState:
    """Where an entry's vector stands: embedded, pending (attempts, next try), failed (`max_attempts` used),
    unembeddable, or not queued."""
    if entries.vectors([entry_id]):
        return EmbeddingState(state="embedded")
    job = entries.jobs([entry_id]).get(entry_id)
    if job is None:
        return EmbeddingState(state="unqueued")
    if job.unembeddable:
        return EmbeddingState(state="unembeddable", last_error=job.last_error)
    failed = job.attempts >= max_attempts
    return EmbeddingState(
        state="failed" if failed else "pending",
        attempts=job.attempts,
        last_error=job.last_error,
        next_try=None if failed else job.available_at,
    )
