"""The read path of one organization: topic -> lexical arm and vector arm -> RRF -> re-rank -> k -> explain.

`OrgMemory.recall` is its only caller, so every interface shares one relevance policy, the process's `RankingPolicy`
(`retrieval/policy.py`) with the organization's own re-rank weights. The recall takes one fresh view of the org's
index (`OrgSearch.view`) for both arms, the entries and the documents version its re-ranking facts are read at.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import structlog

from grandbo.embeddings.base import Provider, embed_query, space_of
from grandbo.errors import GrandboError, InvalidInputError
from grandbo.model import (
    NO_VECTOR_VERDICT,
    PENDING_VERDICT,
    Arm,
    Kind,
    RecallResult,
    RecallTimings,
    Severity,
    utcnow,
)
from grandbo.names import service_name
from grandbo.ports import LexicalHit, VectorHit
from grandbo.retrieval import rerank, verdict
from grandbo.retrieval.arms import run_beside
from grandbo.retrieval.codes import Pass
from grandbo.retrieval.fusion import rrf
from grandbo.retrieval.index import OrgIndex
from grandbo.retrieval.policy import DEFAULT_POLICY, NO_FLOOR, RankingPolicy
from grandbo.retrieval.search import OrgSearch, VectorAhead
from grandbo.retrieval.shared import SharedRecalls
from grandbo.retrieval.shares import TermShares
from grandbo.retrieval.text import check_topic, identifier_term, unique_terms
from grandbo.retrieval.verdict import Verdict, recurrence

log = structlog.get_logger(__name__)
Unjudged = tuple[str, str] | None  # why an answer has no verdict: RecallResult.calibration, the note
Query = tuple[Provider, npt.NDArray[np.float32]]  # the provider and the topic's vector
MAX_K = DEFAULT_POLICY.max_k  # the most hits one recall returns (no setting changes it)


class Recall:
    """Recall over one organization's search side."""

    def __init__(
        self,
        org: str,
        search: OrgSearch,
        policy: RankingPolicy,
        provider: Callable[[], Provider],
        facts: Callable[[int, Callable[[], None]], rerank.Facts],  # at a version; calls back once the store is read
        unembeddable: Callable[[], int],
    ) -> None:
        self._org, self._search, self._policy, self._provider, self._facts = org, search, policy, provider, facts
        self._unembeddable = unembeddable  # how many of the org's embed jobs are settled unembeddable

    def __call__(
        self, topic: str, k: int, arm: Arm | str, services: Sequence[str] | None, severity: str | Severity | None,
        now: datetime | None, shared: SharedRecalls | None = None,
    ) -> RecallResult:  # fmt: skip
        identifier = identifier_term(topic)
        if identifier is None and len(topic.split()) == 1:  # a catalog service name is an identifier too
            facts = self._facts(self._search.view().documents_seq, lambda: None)
            identifier = identifier_term(topic, facts.topology.names)
        if identifier is not None:
            return self._identifier_lookup(" ".join(topic.split()), identifier, k)
        topic = check_topic(topic)
        arm = Arm(arm)
        try:
            wanted = Severity.parse(severity) if isinstance(severity, str) else severity
        except ValueError as error:
            raise InvalidInputError(f"Invalid severity: {error}.", detail={"severity": severity}) from error
        self._check_k(k)
        started = time.perf_counter()
        # The org's first read in this process: its topic embedded and searched by the store while its view is made.
        ahead = self._ahead(topic) if arm is not Arm.LEXICAL and self._search.searches_ahead() else None
        try:
            return self._answer(topic, k, arm, services, wanted, now or utcnow(), shared, started, ahead)
        finally:
            if ahead is not None:
                ahead.close()  # not used (the view searches in process, an error): its connection given back

    def _answer(
        self, topic: str, k: int, arm: Arm, services: Sequence[str] | None, wanted: Severity | None, now: datetime,
        shared: SharedRecalls | None, started: float, ahead: VectorAhead | None,
    ) -> RecallResult:  # fmt: skip
        """`__call__`'s answer to a topic (not an identifier) at `now`, the question's time (re-ranking weighs ages)."""
        notes: list[str] = []
        timings = RecallTimings()
        # The view and the facts as the re-ranking reads them (`_rerank`: the same version, kept) in one transaction
        # where the store shares one (a first recall's image and facts: two on Postgres before), ended once the facts
        # are read (before they are converted: no pooled connection held meanwhile), after the view confirmed the org.
        with ExitStack() as first:
            first.enter_context(self._search.reading())
            view = self._search.view()
            if ahead is not None and self._search.arms_in_parallel(view):  # made with its vectors: searched here
                ahead.close()
            # Postgres searches vectors in the store (no copy here), moving no mark of the index: no answer shared.
            shared = shared if view.space is not None or arm is Arm.LEXICAL else None
            facts = self._facts(view.documents_seq, first.close) if shared is not None or arm is Arm.RERANKED else None
        key, until = None, rerank.FOREVER  # until when this answer holds (`rerank.steady_until`)
        if shared is not None and facts is not None:
            key = shared.key(topic, k, arm, services, wanted, view, facts.read_at)
        if shared is not None and (answered := shared.get(key, now)) is not None:
            return answered  # an alike alert's of the same delivery, over the same index (`retrieval.shared`)
        found = shared.found(key) if shared is not None else None  # its candidates, re-ranked at this time
        answer: Verdict | None = None
        hits: list[dict[str, Any]]  # validated with the result, in one call
        # The store's reads of the answer (the vector arm, the backlog, the entries, the runbooks' counts) in one
        # transaction where the store has one to share, ended once the last is made: scoring holds no connection.
        with ExitStack() as reads:
            reads.enter_context(self._search.reading())
            lexical, vector, query, unjudged = found or self._retrieve(view, topic, arm, timings, notes, ahead)
            if arm is Arm.RERANKED and facts is not None:
                # Oversample: every fused candidate is re-ranked, then the list is cut to k.
                hits, answer, until = self._rerank(view, facts, topic, lexical, vector, services, wanted, now, k,
                                                   judged=unjudged is None, notes=notes, read=reads.close,
                                                   steady=shared is not None)  # fmt: skip
            else:
                hits = self._fuse(view, arm, lexical, vector, k)
        waited = ahead.waited_ms if ahead is not None else timings.embed_ms  # for the topic's vector
        timings.total_ms = (time.perf_counter() - started) * 1000 - waited
        if not hits:
            self._explain_empty(view, topic, notes)
        elif unjudged is not None:
            notes.append(unjudged[1])
        elif answer is not None and (said := answer.note()) is not None:
            notes.append(said)
        result = RecallResult.model_validate({
            "topic": topic, "arm": arm, "k": k, "hits": hits, "notes": notes, "timings": timings,
            "seen_before": answer.seen_before if answer else None,
            "evidence": answer.probability if answer else None,
            "calibration": unjudged[0] if unjudged else answer.label if answer else None,
        })  # fmt: skip
        if shared is not None and (arm is Arm.LEXICAL or query is not None):  # not an answer the provider failed
            shared.keep(key, result, now, until, (lexical, vector, query, unjudged))
        return result

    def _retrieve(
        self, view: OrgIndex, topic: str, arm: Arm, timings: RecallTimings, notes: list[str],
        ahead: VectorAhead | None = None,
    ) -> tuple[list[LexicalHit], list[VectorHit], Query | None, Unjudged]:  # fmt: skip
        """Both arms' candidates for `topic` as `arm` asks, the query's vector, why there is no verdict (None: there
        is one): what an answer rests on before its re-ranking, which alike alerts share (`retrieval.shared`).
        `ahead`: the topic's vector and its search in the store, begun before the view (`_ahead`)."""
        lexical: list[LexicalHit] = []
        vector: list[VectorHit] = []
        # The query's vector first: its time is reported apart.
        query = None if arm is Arm.LEXICAL else self._query_vector(topic, timings, notes, ahead)
        if arm is Arm.VECTOR:
            vector = self._vector_arm(view, *query, timings, ahead) if query is not None else []
        elif arm is Arm.LEXICAL or query is None:
            lexical = self._lexical_arm(view, topic, timings, alone=True)
        elif not self._search.arms_in_parallel(view):
            lexical = self._lexical_arm(view, topic, timings)
            vector = self._vector_arm(view, *query, timings, ahead)
        elif (begun := self._search.begin_vector(view, space_of(query[0]), query[1])) is None:
            lexical, vector = run_beside(
                lambda: self._lexical_arm(view, topic, timings),
                lambda: self._vector_arm(view, *query, timings),
                view.active_count,
            )
        else:  # the int8 pass's one kernel call (no GIL held) on a helper while this thread runs the lexical arm
            begun.products, lexical = run_beside(begun.kernel, lambda: self._lexical_arm(view, topic, timings),
                                                 view.active_count)  # fmt: skip
            vector = self._vector_arm(view, *query, timings, begun=begun)
        # The verdict weighs the best cosine: none without the vector arm, with no vector to search yet, or
        # with too many memories still waiting for theirs (the match may be one of them).
        unjudged: Unjudged = None
        if arm in (Arm.HYBRID, Arm.RERANKED):
            if query is None:
                unjudged = NO_VECTOR_VERDICT, self._lexical_only("the vector arm was skipped")
            elif not vector and not self._search.any_vector(view, space_of(query[0])):
                # Nothing embedded yet: there is no vector answer for the floor to protect, so the lexical arm
                # answers as it does alone (the floored list dropped a long topic's matches here).
                unjudged = NO_VECTOR_VERDICT, self._lexical_only("no memory has a vector yet")
                lexical = self._lexical_arm(view, topic, timings, alone=True)
            elif arm is Arm.RERANKED and (
                waiting := self._search.waiting(view, space_of(query[0]), self._policy.verdict.max_waiting)
            ):
                unjudged = PENDING_VERDICT, self._waiting_note(*waiting)
        return lexical, vector, query, unjudged if arm is Arm.RERANKED else None

    def _rerank(
        self, view: OrgIndex, facts: rerank.Facts, topic: str, lexical: list[LexicalHit], vector: list[VectorHit],
        services: Sequence[str] | None, severity: Severity | None, now: datetime, k: int, *, judged: bool,
        notes: list[str], read: Callable[[], None] = lambda: None, steady: bool = False,
    ) -> tuple[list[dict[str, Any]], Verdict, datetime]:  # fmt: skip
        """Every fused candidate scored by the composite re-ranker over the org's `facts` at the index's documents
        version (read before the store's reads together); explanations built for the top k only; if `steady`
        (an answer kept for alike alerts), until when the same would come later (`rerank.steady_until`). Not `judged`
        (no cosine: the vector arm skipped, or nothing embedded yet): no verdict and no recurrence label (the
        calibration weighs the best cosine). `read` is called once the store is read for all (scoring reads no more)."""
        ranked = rrf([[hit.entry_id for hit in lexical], [hit.entry_id for hit in vector]], self._policy.fusion.rrf_k)
        entries = self._search.entries(view, [entry_id for entry_id, _ in ranked])
        lexical_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(lexical, start=1)}
        vector_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(vector, start=1)}
        notes.extend(facts.problems)
        policy = self._policy.with_weights(facts.weights)  # the organization's own weights
        situation = [service_name(s) for s in services] if services is not None else facts.topology.mentioned_in(topic)
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
        runbooks = [rerank.runbook_of(c.entry) for c in pool]
        rates = facts.win_rates([rb for rb in runbooks if rb], situation)  # and `used_on` below: counted now
        read()
        context = rerank.Context(services=situation, severity=severity, now=now, catalog=bool(facts.topology.names))
        scored = rerank.order([
            rerank.score(c, scaled, context, policy.rerank, facts.topology, rates, runbook,
                         facts.used_on(c.entry.id) if c.entry.kind is Kind.RUNBOOK else ())
            for c, scaled, runbook in zip(pool, rerank.similarities(pool, policy.weakest_fused), runbooks, strict=True)
        ], policy.rerank, k)  # fmt: skip
        calibration = verdict.choose(facts.calibration, *self._space(view)) if judged else None
        strong: dict[str, bool] = {}
        if calibration is not None:
            alone = verdict.each_alone(calibration, (c.cosine for c in pool), (c.coverage for c in pool))
            strong = {c.entry.id: p >= calibration.threshold for c, p in zip(pool, alone, strict=True)}
        recent_days = policy.verdict.recent_days
        recent = [c.entry for c in pool if strong.get(c.entry.id) and (now - c.entry.occurred_at).days <= recent_days]
        hits, above = [], float("inf")
        for rank, result in enumerate(scored[:k], start=1):
            candidate = result.candidate
            # A hit the relevance band kept under one with a lower composite score gets a sort score just
            # below that one's, so that sort scores fall with rank (run files and clients sort by them); the
            # composite itself is the hit's `composite` (and why.rerank.final).
            composite = round(result.final, 6)
            above = sort_score = min(composite, round(above - policy.rerank.score_step, 6))
            why = self._why(
                Arm.RERANKED, candidate.entry.id, candidate.fused, lexical_at, vector_at,
                fused_rank=candidate.fused_rank, rerank=result.evidence(),
            )  # fmt: skip
            label = None
            if calibration is not None:
                label = recurrence(candidate.entry, recent, policy.verdict) if strong[candidate.entry.id] else "novel"
            hits.append({"rank": rank, "sort_score": sort_score, "composite": composite, "entry": candidate.entry,
                         "why": why, "label": label})  # fmt: skip
        values = verdict.features((c.cosine for c in pool), (c.coverage for c in pool))
        until = rerank.steady_until([c.entry.occurred_at for c in pool] if steady else [], now, policy.rerank)
        return hits, Verdict.of(calibration, values, "{}:{}".format(*self._space(view))), until

    def _check_k(self, k: int) -> None:
        if not 1 <= k <= self._policy.max_k:
            raise InvalidInputError(f"k must be between 1 and {self._policy.max_k}, got {k}.", detail={"k": k})

    def _waiting_note(self, waiting: int, total: int) -> str:
        return (
            f"no seen-before verdict: {waiting} of {total} memories are still waiting for their vector "
            f"({self._policy.verdict.max_waiting:.0%} or more withholds it), so the best cosine could miss a match "
            "among them; these are both arms' best matches. `grandbo stats` shows the backlog: a running "
            "`grandbo worker` embeds it, `grandbo backfill` retries what failed"
        )

    @staticmethod
    def _lexical_only(reason: str) -> str:
        return (
            f"no seen-before verdict: {reason}, and the verdict needs the vector arm's cosine; these are the "
            "lexical arm's best matches"
        )

    def _space(self, view: OrgIndex) -> tuple[str, str]:
        """The provider and model whose calibration applies: the index's space, else the provider's."""
        if view.space is not None:
            return view.space.provider, view.space.model
        try:
            provider = self._provider()
            return provider.name, provider.model
        except GrandboError:
            return "none", "none"

    def _identifier_lookup(self, topic: str, term: str, k: int) -> RecallResult:
        """Lexical only, exactly the identifier (its whole term, not its parts), no floor, no vector search."""
        self._check_k(k)
        started = time.perf_counter()
        timings = RecallTimings()
        view = self._search.view()
        mark = time.perf_counter()
        lexical = self._search.lexical(view, [term], k)  # no floor
        timings.lexical_ms = (time.perf_counter() - mark) * 1000
        entries = self._search.entries(view, [hit.entry_id for hit in lexical])
        lexical_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(lexical, start=1)}
        hits: list[dict[str, Any]] = []
        for hit in lexical[:k]:
            entry = entries.get(hit.entry_id)
            if entry is None:
                continue
            why = self._why(Arm.LEXICAL, hit.entry_id, hit.score, lexical_at, {}) | {"method": "identifier"}
            hits.append({"rank": len(hits) + 1, "sort_score": hit.score, "entry": entry, "why": why})
        notes = [f"exact-identifier lookup of {term!r}: lexical only, no vector search"]
        if not hits:
            notes.append(f"no memory contains {term!r}")
        timings.total_ms = (time.perf_counter() - started) * 1000
        return RecallResult.model_validate({"topic": topic, "arm": Arm.LEXICAL, "k": k, "hits": hits, "notes": notes,
                                            "timings": timings, "lookup": "identifier"})  # fmt: skip

    def _lexical_arm(
        self, view: OrgIndex, topic: str, timings: RecallTimings, *, alone: bool = False
    ) -> list[LexicalHit]:
        """BM25's top matches. Beside the vector arm they must clear the evidence floor (a paraphrase's
        incidental word matches would drown the vector arm's answer in the fusion); `alone` (the lexical arm
        asked for, or the vector arm skipped) there is nothing to drown, and the floor would only drop the
        answers of long topics (docs/evaluation.md, "The lexical arm alone")."""
        mark, policy = time.perf_counter(), self._policy.lexical
        terms = unique_terms(topic, view.language)  # in the language the org's entries are indexed in
        hits = self._search.lexical(view, terms, policy.limit, NO_FLOOR if alone else policy.floor)
        timings.lexical_ms = (time.perf_counter() - mark) * 1000
        return hits

    def _query_vector(
        self, topic: str, timings: RecallTimings, notes: list[str], ahead: VectorAhead | None = None
    ) -> Query | None:
        """The provider and the topic's embedding (`ahead`'s, if given), or None (with a note) when the provider
        cannot give one."""
        try:
            provider = self._provider() if ahead is None else ahead.provider  # (asked again: maybe failed since)
            mark = time.perf_counter()
            query = ahead.query() if ahead is not None else embed_query(provider, topic)
            timings.embed_ms = ahead.embed_ms if ahead is not None else (time.perf_counter() - mark) * 1000
            return provider, query
        except GrandboError as error:
            notes.append(f"vector arm skipped: {error.message}")
            log.warning("recall.vector_arm_skipped", org_id=self._org, code=error.code)
            return None

    def _vector_arm(
        self, view: OrgIndex, provider: Provider, query: npt.NDArray[np.float32], timings: RecallTimings,
        ahead: VectorAhead | None = None, begun: Pass | None = None,
    ) -> list[VectorHit]:  # fmt: skip
        mark = time.perf_counter()
        hits = self._search.vector(view, space_of(provider), query, *self._vector_bounds(provider), ahead, begun)
        timings.vector_ms = (time.perf_counter() - mark) * 1000
        return hits

    def _vector_bounds(self, provider: Provider) -> tuple[int, float]:
        """The vector arm's depth and similarity floor."""
        policy = self._policy.vector
        return policy.limit, provider.min_similarity if policy.min_similarity is None else policy.min_similarity

    def _ahead(self, topic: str) -> VectorAhead | None:
        """The topic embedded and its vector searched by the store, begun on a helper thread (`OrgSearch.ahead`); None
        where the provider gives none (the recall's own call of it says why)."""
        try:
            provider = self._provider()
        except GrandboError:
            return None
        return self._search.ahead(provider, topic, *self._vector_bounds(provider))

    def _fuse(
        self, view: OrgIndex, arm: Arm, lexical: list[LexicalHit], vector: list[VectorHit], k: int
    ) -> list[dict[str, Any]]:
        lexical_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(lexical, start=1)}
        vector_at = {hit.entry_id: (rank, hit) for rank, hit in enumerate(vector, start=1)}
        if arm is Arm.HYBRID:
            lists = [[hit.entry_id for hit in lexical], [hit.entry_id for hit in vector]]
            ranked = rrf(lists, self._policy.fusion.rrf_k)[:k]
        elif arm is Arm.LEXICAL:
            ranked = [(hit.entry_id, hit.score) for hit in lexical[:k]]
        else:
            ranked = [(hit.entry_id, hit.similarity) for hit in vector[:k]]
        entries = self._search.entries(view, [entry_id for entry_id, _ in ranked])
        hits: list[dict[str, Any]] = []
        for entry_id, score in ranked:
            entry = entries.get(entry_id)
            if entry is None:  # retired between the index read and this one
                continue
            why = self._why(arm, entry_id, score, lexical_at, vector_at)
            hits.append({"rank": len(hits) + 1, "sort_score": score, "entry": entry, "why": why})
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
            why |= {"rrf_k": self._policy.fusion.rrf_k, "fused": score}
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

    def _explain_empty(self, view: OrgIndex, topic: str, notes: list[str]) -> None:
        """Say why nothing came back: no entries, entries waiting for their vector, or no close match. The total
        and the vectors held are the recall's view's own counts (or its count of the store's jobs, `backlog`);
        the store seeks only its unembeddable jobs, and only when some entry has no vector: never its entries
        (`corpus_stats` joins each with its vector, 0.4-1.7 s at 150,000 entries) nor every queued job, which any
        read key's nonsense topics would cost."""
        total, held = self._search.held(view)
        if total == 0:
            notes.append("this organization has no memories yet")
            return
        waiting = 0
        if held is None:  # the store searches the vectors: its jobs are the entries waiting for one
            waiting = (jobs := self._search.backlog(view)) and jobs - self._unembeddable()
        elif held < total:  # an unembeddable entry has no vector and never gets one: no remedy
            waiting = total - held - self._unembeddable()
        waiting = max(0, min(waiting, total))  # the jobs are counted a moment after the view
        remedy = (
            f"{waiting} of {total} entries have no vector yet: run `grandbo backfill`"
            if waiting > 0
            else "nothing matched closely enough; describe the mechanism, component and symptom differently"
        )
        notes.append(f"no match among {total} entries; {remedy}")
        log.warning(
            "recall.empty_result",
            org_id=self._org,
            total=total,
            readable=held,
            waiting=waiting,
            remedy=remedy,
            topic_words=len(topic.split()),
        )
