"""OrgMemory: the one read seam (`recall`) and write seam (`remember`, `correct`, `retire`) of an org.

Every interface (CLI, API, MCP, web) and every tier calls these methods, so a change to relevance or
to the write contract happens once, here, for everybody.
"""

from __future__ import annotations

import contextvars
import gc
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import structlog
from pydantic import ValidationError

from grandbo import operations
from grandbo.config import Settings
from grandbo.embeddings.base import Provider, check_query_vector, embed_checked, space_of
from grandbo.errors import GrandboError, InvalidInputError, NotFoundError, StrictModeError
from grandbo.model import (
    Arm,
    CorpusStats,
    Entry,
    Event,
    EventType,
    NewEntry,
    RecallResult,
    RecallTimings,
    Severity,
    Source,
    utcnow,
)
from grandbo.retrieval import rerank
from grandbo.retrieval.fusion import rrf
from grandbo.retrieval.lexical import TermShares
from grandbo.retrieval.text import check_topic, unique_terms
from grandbo.retrieval.vector import one_blas_thread
from grandbo.store.base import LexicalHit, NewEvent, Store, VectorHit
from grandbo.worker import DrainReport, EmbedWorker

log = structlog.get_logger(__name__)
T = TypeVar("T")

MAX_K = 100


RECENT_DAYS = 365
FREQUENT_AT = 3


def recurrence(entry: Entry, recent: Sequence[Entry]) -> Literal["frequent", "rare"]:
    """Frequent when at least 3 strong matches of the last year (`recent`, this one included) share a
    service with it (or, for memories without services, its kind); rare otherwise."""
    services = set(entry.services)
    alike = 0
    for match in recent:
        if (not services.isdisjoint(match.services)) if services else match.kind is entry.kind:
            alike += 1
            if alike == FREQUENT_AT:
                return "frequent"
    return "rare"


BULK_AT = 1_000  # entries from which a write counts as bulk


_pause_lock = threading.Lock()
_pauses = 0  # bulk writes running with the collector paused by us


@contextmanager
def collector_paused(size: int) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a bulk write of `size` entries is built and sent.

    Each entry allocates several dicts and lists, and the collector's passes over a growing heap took
    about a seventh of a bulk import (3,940 -> 4,540 entries/s on Postgres, measured with 20,000
    entries). Reference counting still frees everything as usual; only cycles wait, until the last
    concurrent bulk write ends. Small writes, and a collector someone else paused, are left alone.
    """
    global _pauses
    with _pause_lock:
        ours = size >= BULK_AT and (_pauses > 0 or gc.isenabled())
        if ours:
            _pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if ours:
            with _pause_lock:
                _pauses -= 1
                if _pauses == 0:
                    gc.enable()


class _Helpers:
    """A few threads shared by every recall in the process, for the arm that runs beside the caller's.
    Created on first use, and again in a forked child (which inherits no threads: see `after_fork`); each
    task runs in a copy of the caller's context, so its log lines keep the caller's bound fields."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, task: Callable[..., T], *args: Any) -> Future[T]:
        """Run `task` on a helper thread; in the caller's thread once the interpreter is shutting down
        (when no new thread may start)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="grandbo-recall")
            try:
                return self._pool.submit(contextvars.copy_context().run, task, *args)
            except RuntimeError:  # shutting down
                pass
        done: Future[T] = Future()
        try:
            done.set_result(task(*args))
        except Exception as error:  # handed to the caller through the future, like a helper's error
            done.set_exception(error)
        return done

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held the parent's) and no pool."""
        self._lock, self._pool = threading.Lock(), None


_helpers = _Helpers()
os.register_at_fork(after_in_child=_helpers.after_fork)


def run_guarded(task: Callable[[], None]) -> None:
    """Run a deferred task now; log its failure instead of raising it."""
    try:
        task()
    except Exception as error:
        log.warning("memory.deferred_task_failed", error=f"{type(error).__name__}: {str(error)[:300]}")


def new_entry_id() -> str:
    """A time-ordered, collision-resistant id: mem-<ms since epoch, hex>-<random>."""
    return f"mem-{time.time_ns() // 1_000_000:011x}-{secrets.token_hex(4)}"


def parse_entry(data: NewEntry | Mapping[str, Any]) -> NewEntry:
    """Validate caller input into a NewEntry, with one clear error listing every problem."""
    if isinstance(data, NewEntry):
        return data
    try:
        return NewEntry.model_validate(dict(data))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or 'entry'}: {issue['msg']}" for issue in error.errors()
        )
        raise InvalidInputError(
            f"Invalid entry: {problems}.",
            detail={"errors": [{"field": ".".join(map(str, e["loc"])), "message": e["msg"]} for e in error.errors()]},
        ) from error


class OrgMemory:
    """One organization's memory. Construct through `Grandbo.org()`."""

    def __init__(
        self,
        store: Store,
        org_id: str,
        settings: Settings,
        provider: Callable[[], Provider],
        worker: Callable[[], EmbedWorker],
        *,
        background: bool = False,
        defer: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.store = store
        self.org_id = org_id
        self.settings = settings
        self._provider = provider
        self._worker = worker
        self._background = background
        self._defer = defer or run_guarded

    # ------------------------------------------------------------------ writes

    def remember(self, entry: NewEntry | Mapping[str, Any], *, actor: str = "api") -> Entry:
        """Store one entry; its vector follows after commit."""
        return self.remember_many([entry], actor=actor)[0]

    def remember_many(
        self,
        entries: Iterable[NewEntry | Mapping[str, Any]],
        *,
        actor: str = "api",
        strict: bool = False,
        vectors: Sequence[npt.ArrayLike | None] | None = None,
    ) -> list[Entry]:
        """Store entries in one transaction, then embed them.

        With `strict`, anything short of a vector for every entry raises StrictModeError (the entries
        are stored all the same); without it, embedding problems are logged and left to backfill.
        `vectors` (aligned with `entries`, None where absent) are precomputed vectors of the store's
        embedding space, written in the same transaction instead of being computed again; use them
        only for vectors that space's provider produced (an export of a store with the same space).
        """
        now = utcnow()
        items = entries if isinstance(entries, Sequence) else list(entries)
        with collector_paused(len(items)):
            events = [self._remembered(parse_entry(item), now, actor) for item in items]
            given = self._checked_vectors(events, vectors) if vectors is not None else {}
            stored = self.store.append(self.org_id, events, given, self.store.space() if given else None)
        if len(given) < len(stored):
            self._after_write(strict=strict, expected=len(stored))
        return stored

    def _checked_vectors(
        self, events: Sequence[NewEvent], vectors: Sequence[npt.ArrayLike | None]
    ) -> dict[str, npt.NDArray[np.float32]]:
        space = self.store.space()
        if len(vectors) != len(events) or space is None:
            raise InvalidInputError(
                f"{len(vectors)} vectors for {len(events)} entries: give one per entry (None where absent).",
                detail={"vectors": len(vectors), "entries": len(events)},
            )
        present = [(position, vector) for position, vector in enumerate(vectors) if vector is not None]
        if not present:
            return {}
        try:  # the common case, checked as one matrix
            matrix = np.asarray([vector for _, vector in present], dtype=np.float32)
            valid = matrix.shape == (len(present), space.dimension) and bool(np.isfinite(matrix).all())
        except (TypeError, ValueError):  # ragged or not numbers: find the culprit below
            valid = False
        if not valid:
            for position, vector in present:
                try:
                    array = np.asarray(vector, dtype=np.float32)
                    shape = str(array.shape)
                    fine = array.shape == (space.dimension,) and bool(np.isfinite(array).all())
                except (TypeError, ValueError):
                    shape, fine = "unknown (not numbers)", False
                if not fine:
                    raise InvalidInputError(
                        f"Vector {position} has shape {shape} or non-finite values; this store's space is "
                        f"{space}, so each vector must be {space.dimension} finite numbers.",
                        detail={"position": position, "dimension": space.dimension},
                    )
            raise InvalidInputError(  # unreachable: some vector above is the culprit
                f"The vectors do not form a {len(present)} x {space.dimension} matrix of finite numbers.",
                detail={"dimension": space.dimension},
            )
        return {events[position].entry_id: row for (position, _), row in zip(present, matrix, strict=True)}

    def correct(self, entry_id: str, changes: Mapping[str, Any], *, reason: str = "", actor: str = "api") -> Entry:
        """Supersede an entry with a corrected one; the old one stays in the history.

        `changes` holds the fields that differ (title, body, kind, tags, services, severity,
        occurred_at, meta, id); the rest are carried over from the entry being corrected.
        """
        old = self.get(entry_id)
        carried = old.model_dump(
            include={"title", "body", "kind", "tags", "services", "severity", "occurred_at", "meta"}
        )
        unknown = set(changes) - set(carried) - {"id"}
        if unknown:
            raise InvalidInputError(
                f"Cannot correct field(s) {sorted(unknown)}; correctable fields are {sorted(set(carried) | {'id'})}.",
                detail={"fields": sorted(unknown)},
            )
        replacement = parse_entry({**carried, **changes, "source": Source.CORRECTION})
        now = utcnow()
        new_event = self._remembered(replacement, now, actor, supersedes=entry_id, reason=reason)
        supersede = NewEvent(
            entry_id, EventType.CORRECTED, {"superseded_by": new_event.entry_id, "reason": reason}, actor, now
        )
        touched = self.store.append(self.org_id, [new_event, supersede])
        self._after_write(strict=False, expected=1)
        return next(entry for entry in touched if entry.id == new_event.entry_id)

    def retire(self, entry_id: str, *, reason: str = "", actor: str = "api") -> Entry:
        """Tombstone an entry: it leaves recall, its history stays."""
        self.get(entry_id)
        (entry,) = self.store.append(
            self.org_id, [NewEvent(entry_id, EventType.RETIRED, {"reason": reason}, actor, utcnow())]
        )
        return entry

    def _remembered(
        self, entry: NewEntry, now: Any, actor: str, *, supersedes: str | None = None, reason: str = ""
    ) -> NewEvent:
        payload = entry.model_dump(mode="json", exclude={"id"})
        payload["occurred_at"] = (entry.occurred_at or now).isoformat()
        if supersedes:
            payload["supersedes"] = supersedes
            payload["reason"] = reason
        return NewEvent(entry.id or new_entry_id(), EventType.REMEMBERED, payload, actor, now)

    def _after_write(self, *, strict: bool, expected: int) -> None:
        if self._background and not strict:
            self._worker().wake()
            return
        try:
            report = self._worker().drain(self.org_id)
        except Exception as error:  # the entries are committed; embedding is retried later
            if strict:
                raise
            log.warning("memory.embedding_deferred", org_id=self.org_id, error=str(error))
            return
        if strict:
            stats = self.stats()
            missing = stats.pending + stats.failed + stats.unreadable
            if missing:
                raise StrictModeError(
                    f"Strict mode: {stats.unreadable} of {stats.total} entries have no vector "
                    f"({stats.pending} pending, {stats.failed} failed; last error: "
                    f"{report.errors[-1] if report.errors else 'none'}). The entries are stored; fix the "
                    "provider and run `grandbo backfill`.",
                    detail={**stats.model_dump(mode="json"), "errors": report.errors[-3:], "expected": expected},
                )

    # ------------------------------------------------------------------ reads

    def defer(self, task: Callable[[], None]) -> None:
        """Run work that must not block or fail the caller (a write-behind): on a background thread in a
        long-running process, right away otherwise; a failure is logged, never raised."""
        self._defer(task)

    def get(self, entry_id: str) -> Entry:
        entry = self.store.get(self.org_id, entry_id)
        if entry is None:
            raise NotFoundError(
                f"No entry {entry_id!r} in org {self.org_id!r}.", detail={"entry_id": entry_id, "org_id": self.org_id}
            )
        return entry

    def examples(self, content_type: str, limit: int = 5) -> list[Entry]:
        """The newest examples of a content type (entries of kind `example` with meta.content_type).

        No query, so no search: they come back newest first, as entries, with no score at all.
        """
        if not content_type.strip():
            raise InvalidInputError("Name the content type of the examples wanted.", detail={})
        if not 1 <= limit <= MAX_K:
            raise InvalidInputError(f"limit must be between 1 and {MAX_K}, got {limit}.", detail={"limit": limit})
        return self.store.examples(self.org_id, content_type.strip(), limit)

    def history(self, entry_id: str) -> list[Event]:
        """Every event that shaped the entry, oldest first."""
        return self.store.events(self.org_id, entry_id)

    def stats(self) -> CorpusStats:
        return self.store.corpus_stats(self.org_id, self.settings.embed_max_attempts)

    def backfill(self) -> DrainReport:
        """Embed whatever is pending for this org, failed jobs included."""
        self.store.retry_failed(self.org_id)
        self.store.enqueue_missing(self.org_id)
        return self._worker().drain(self.org_id)

    def recall(
        self,
        topic: str,
        k: int = 10,
        *,
        arm: Arm | str = Arm.RERANKED,
        services: Sequence[str] | None = None,
        severity: str | Severity | None = None,
        now: datetime | None = None,
    ) -> RecallResult:
        """Ranked, explained memories about `topic`: "has this happened before, and what worked?"

        `topic` must describe the problem in a sentence (mechanism, component, symptom); slugs and
        two-word identifiers are refused. Hybrid recall fuses the lexical and vector arms by RRF;
        re-ranked recall (the default) then orders the fused candidates by the composite score
        (similarity, service topology, severity, runbook win rate, age), says whether anything close
        enough was seen before, and labels each match frequent or rare. `services` and `severity`
        describe the situation (services named in the topic count when `services` is None). Slicing
        to `k` happens last. A failing embedding provider degrades recall to the lexical arm with a
        note; it never fails it.
        """
        topic = check_topic(topic)
        arm = Arm(arm)
        wanted = Severity.parse(severity) if isinstance(severity, str) else severity
        if not 1 <= k <= MAX_K:
            raise InvalidInputError(f"k must be between 1 and {MAX_K}, got {k}.", detail={"k": k})
        started = time.perf_counter()
        notes: list[str] = []
        timings = RecallTimings()
        lexical: list[LexicalHit] = []
        vector: list[VectorHit] = []
        if arm is Arm.LEXICAL:
            lexical = self._lexical_arm(topic, timings)
        elif arm is Arm.VECTOR:
            query = self._query_vector(topic, timings, notes)
            vector = self._vector_arm(*query, timings) if query is not None else []
        else:
            query = self._query_vector(topic, timings, notes)  # first: its time is reported apart
            if query is None:
                lexical = self._lexical_arm(topic, timings)
            elif not self.store.arms_in_parallel:
                lexical = self._lexical_arm(topic, timings)
                vector = self._vector_arm(*query, timings)
            else:
                # Both arms at once: the lexical arm on a helper thread, the vector arm here with its matrix
                # product on one BLAS thread, so that the two share the cores instead of taking turns.
                lexical_job = _helpers.submit(self._lexical_arm, topic, timings)
                try:
                    with one_blas_thread():
                        vector = self._vector_arm(*query, timings)
                except BaseException:
                    lexical_job.exception()  # let it finish; the vector arm's error is the one raised
                    raise
                lexical = lexical_job.result()
        verdict: tuple[bool, float] | None = None
        hits: list[dict[str, Any]]  # validated with the result, in one call
        if arm is Arm.RERANKED:
            # Oversample: every fused candidate is re-ranked, then the list is cut to k.
            hits, verdict = self._rerank(topic, lexical, vector, services, wanted, now or utcnow(), k)
        else:
            hits = self._fuse(arm, lexical, vector, k)
        timings.total_ms = (time.perf_counter() - started) * 1000 - timings.embed_ms
        if not hits:
            self._explain_empty(topic, notes)
        elif verdict is not None and not verdict[0]:
            notes.append(
                f"no similar past incident: the best match's evidence {verdict[1]:.2f} is below the bar "
                f"{self._seen_before_bar():.2f}; the hits are the nearest memories, not known recurrences"
            )
        return RecallResult.model_validate({
            "topic": topic, "arm": arm, "k": k, "hits": hits, "notes": notes, "timings": timings,
            "seen_before": verdict[0] if verdict else None, "evidence": verdict[1] if verdict else None,
        })  # fmt: skip

    def _rerank(
        self,
        topic: str,
        lexical: list[LexicalHit],
        vector: list[VectorHit],
        services: Sequence[str] | None,
        severity: Severity | None,
        now: datetime,
        k: int,
    ) -> tuple[list[dict[str, Any]], tuple[bool, float]]:
        """Every fused candidate scored by the composite re-ranker; explanations built for the top k only."""
        ranked = rrf([[hit.entry_id for hit in lexical], [hit.entry_id for hit in vector]], self.settings.rrf_k)
        entries = self.store.get_many(self.org_id, [entry_id for entry_id, _ in ranked])
        lexical_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(lexical, start=1)}
        vector_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(vector, start=1)}
        facts = operations.snapshot(self.store, self.org_id)
        situation = [s.lower() for s in services] if services is not None else facts.topology.mentioned_in(topic)
        pool = [
            rerank.Candidate(
                entries[entry_id],
                fused,
                rank,
                vector_at[entry_id][1].similarity if entry_id in vector_at else None,
                lexical_at[entry_id][1].coverage if entry_id in lexical_at else None,
            )
            for rank, (entry_id, fused) in enumerate(ranked, start=1)
            if entry_id in entries
        ]
        runbooks = [rb for rb in (rerank.runbook_of(c.entry) for c in pool) if rb]
        rates = facts.win_rates(runbooks, situation)
        context = rerank.Context(services=situation, severity=severity, now=now)
        scored = [
            (rerank.score(candidate, similarity, context, facts.weights, facts.topology, rates), position, candidate)
            for position, (candidate, similarity) in enumerate(
                zip(pool, rerank.similarities(pool, self._weakest_fused()), strict=True)
            )
        ]
        scored.sort(key=lambda item: (-item[0].final, item[1]))
        strength = {c.entry.id: max(c.cosine or 0.0, c.coverage or 0.0) for c in pool}
        best = max(strength.values(), default=0.0)
        bar = self._seen_before_bar()
        recent = [
            c.entry for c in pool if strength[c.entry.id] >= bar and (now - c.entry.occurred_at).days <= RECENT_DAYS
        ]
        hits = []
        for rank, (result, _, candidate) in enumerate(scored[:k], start=1):
            why = self._why(
                Arm.RERANKED, candidate.entry.id, candidate.fused, lexical_at, vector_at,
                fused_rank=candidate.fused_rank, rerank=result.evidence(),
            )  # fmt: skip
            label = recurrence(candidate.entry, recent) if strength[candidate.entry.id] >= bar else "novel"
            hits.append({"rank": rank, "score": round(result.final, 6), "entry": candidate.entry, "why": why,
                         "label": label})  # fmt: skip
        return hits, (best >= bar, round(best, 4))

    def _weakest_fused(self) -> float:
        return 1.0 / (self.settings.rrf_k + max(self.settings.lexical_limit, self.settings.vector_limit))

    def _seen_before_bar(self) -> float:
        if self.settings.seen_before_bar is not None:
            return self.settings.seen_before_bar
        try:
            return self._provider().seen_before_bar
        except GrandboError:
            return 0.5

    def _lexical_arm(self, topic: str, timings: RecallTimings) -> list[LexicalHit]:
        mark = time.perf_counter()
        hits = self.store.lexical_search(
            self.org_id, unique_terms(topic), self.settings.lexical_limit, self.settings.lexical_min_coverage
        )
        timings.lexical_ms = (time.perf_counter() - mark) * 1000
        return hits

    def _query_vector(
        self, topic: str, timings: RecallTimings, notes: list[str]
    ) -> tuple[Provider, npt.NDArray[np.float32]] | None:
        """The provider and the topic's embedding, or None (with a note) when the provider cannot give one."""
        try:
            provider = self._provider()
            mark = time.perf_counter()
            query = check_query_vector(provider, embed_checked(provider, [topic], "query")[0])
            timings.embed_ms = (time.perf_counter() - mark) * 1000
            return provider, query
        except GrandboError as error:
            notes.append(f"vector arm skipped: {error.message}")
            log.warning("recall.vector_arm_skipped", org_id=self.org_id, code=error.code)
            return None

    def _vector_arm(
        self, provider: Provider, query: npt.NDArray[np.float32], timings: RecallTimings
    ) -> list[VectorHit]:
        floor = self.settings.vector_min_similarity
        floor = provider.min_similarity if floor is None else floor
        mark = time.perf_counter()
        hits = self.store.vector_search(self.org_id, space_of(provider), query, self.settings.vector_limit, floor)
        timings.vector_ms = (time.perf_counter() - mark) * 1000
        return hits

    def _fuse(self, arm: Arm, lexical: list[LexicalHit], vector: list[VectorHit], k: int) -> list[dict[str, Any]]:
        lexical_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(lexical, start=1)}
        vector_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(vector, start=1)}
        if arm is Arm.HYBRID:
            ranked = rrf([[hit.entry_id for hit in lexical], [hit.entry_id for hit in vector]], self.settings.rrf_k)[:k]
        elif arm is Arm.LEXICAL:
            ranked = [(hit.entry_id, hit.score) for hit in lexical[:k]]
        else:
            ranked = [(hit.entry_id, hit.similarity) for hit in vector[:k]]
        entries = self.store.get_many(self.org_id, [entry_id for entry_id, _ in ranked])
        hits: list[dict[str, Any]] = []
        for entry_id, score in ranked:
            entry = entries.get(entry_id)
            if entry is None:  # retired between the index read and this one
                continue
            why = self._why(arm, entry_id, score, lexical_at, vector_at)
            hits.append({"rank": len(hits) + 1, "score": score, "entry": entry, "why": why})
        return hits

    def _why(
        self,
        arm: Arm,
        entry_id: str,
        score: float,
        lexical_at: Mapping[str, tuple[int, LexicalHit]],
        vector_at: Mapping[str, tuple[int, VectorHit]],
        *,
        fused_rank: int | None = None,
        rerank: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Why a hit ranked (an `Explanation`'s fields): its rank and score in each arm, matched terms, the
        fused score (and, re-ranked, the rank after fusion and each component of the composite score)."""
        why: dict[str, Any] = {"method": "rrf" if arm is Arm.HYBRID else arm.value, "fused_rank": fused_rank}
        if arm in (Arm.HYBRID, Arm.RERANKED):
            why |= {"rrf_k": self.settings.rrf_k, "fused": score}
        if entry_id in lexical_at:
            rank, lexical_hit = lexical_at[entry_id]
            terms = lexical_hit.terms
            why["lexical"] = {
                "rank": rank,
                "score": lexical_hit.score,
                "terms": terms.resolve() if isinstance(terms, TermShares) else terms,
                "coverage": lexical_hit.coverage,
            }
        if entry_id in vector_at:
            rank, vector_hit = vector_at[entry_id]
            why["vector"] = {"rank": rank, "similarity": vector_hit.similarity, "distance": 1.0 - vector_hit.similarity}
        if rerank is not None:
            why["rerank"] = rerank
        return why

    def _explain_empty(self, topic: str, notes: list[str]) -> None:
        stats = self.stats()
        if stats.total == 0:
            notes.append("this organization has no memories yet")
            return
        remedy = (
            f"{stats.unreadable} of {stats.total} entries have no vector yet: run `grandbo backfill`"
            if stats.unreadable
            else "nothing matched closely enough; describe the mechanism, component and symptom differently"
        )
        notes.append(f"no match among {stats.total} entries; {remedy}")
        log.warning(
            "recall.empty_result",
            org_id=self.org_id,
            total=stats.total,
            readable=stats.readable,
            unreadable=stats.unreadable,
            pending=stats.pending,
            remedy=remedy,
            topic_words=len(topic.split()),
        )
