"""The effectiveness ledger: what each runbook did when it was tried (outcome documents), summarized when asked."""

from __future__ import annotations

import difflib
import heapq
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError, NotFoundError, UnreadableRecordError, validation_problems
from grandbo.model import Kind, utcnow
from grandbo.names import service_name
from grandbo.ports import Document, DocumentWrite, OrgDocuments, OrgEntries
from grandbo.tiers import operations
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, time_to_mitigate
from grandbo.tiers.ledger_odd import tallied
from grandbo.tiers.ledger_records import kind_of, oldest
from grandbo.tiers.ledger_tally import LedgerTally, tally
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.records import every_newest, read_record
from grandbo.tiers.retry import rewritten

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory


def incident_outcome_id(incident_id: str, runbook_id: str, kind: OutcomeKind) -> str:
    """The one id of what a runbook did on an incident (or alert): its result (succeeded or failed) has one id,
    so a success reported twice, or reported and then closed with, counts once, and a later other result
    replaces it."""
    stage = "result" if kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED) else kind.value
    return f"outcome:{incident_id}:{runbook_id}:{stage}"


HINT_CANDIDATES, HINT_CHARS, HINT_COMPARED = 500, 64, 12  # `close_ids`
PAGE = 500  # outcomes a read of those the store picks (`Ledger._matching`, `Ledger._marked`)


def _runbook_of(doc_id: str, incident_id: str) -> str | None:
    """The runbook whose result on the incident `doc_id` is the id of (`incident_outcome_id`), or None."""
    start, end = f"outcome:{incident_id}:", ":result"
    named = doc_id[len(start) : -len(end)] if doc_id.startswith(start) and doc_id.endswith(end) else None
    return (
        named
        if named is not None and incident_outcome_id(incident_id, named, OutcomeKind.SUCCEEDED) == doc_id
        else None
    )


def close_ids(word: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    """The `n` ids of `candidates` closest to `word` (difflib's ratio at least 0.6; the closest first, then by id),
    in a time bounded whatever an org holds: at most HINT_CANDIDATES ids from each source (`known_runbook`), each
    compared by its first HINT_CHARS characters, and only the HINT_COMPARED of most characters in common
    (`quick_ratio`, linear) compared in full. difflib over every id of the org, each as long as its author liked,
    held the shared process's GIL for 18 s a refusal at 20,000 entries (probe 17)."""
    matcher = difflib.SequenceMatcher(b=word[:HINT_CHARS], autojunk=False)
    common = []
    for candidate in dict.fromkeys(candidates):
        matcher.set_seq1(candidate[:HINT_CHARS])
        common.append((matcher.quick_ratio(), candidate))
    scored = []
    for _, candidate in heapq.nlargest(HINT_COMPARED, common):
        matcher.set_seq1(candidate[:HINT_CHARS])
        if (ratio := matcher.ratio()) >= 0.6:
            scored.append((-ratio, candidate))
    return [candidate for _, candidate in sorted(scored)[:n]]


class Ledger:
    """What each runbook did when it was tried: outcome events, summarized at query time."""

    def __init__(
        self,
        memory: OrgMemory,
        documents: OrgDocuments,
        snapshot: Callable[[], operations.Snapshot],
        entries: OrgEntries,
    ) -> None:
        self.memory = memory
        self.documents, self._entries = documents, entries
        self._snapshot = snapshot  # the org's shared snapshot, whose outcomes are read once per ledger change

    def record(
        self,
        runbook_id: str,
        kind: OutcomeKind | str,
        *,
        incident_id: str | None = None,
        service: str | None = None,
        time_to_mitigate_s: float | None = None,
        rating: int | None = None,
        comment: str = "",
        actor: str = "api",
        outcome_id: str | None = None,
        cited: bool = False,
    ) -> Outcome:
        """Record one outcome. With `outcome_id`, recording it again changes nothing (a retried write-behind
        counts once) unless it corrects the time to mitigate or the service. An outcome for an incident (or alert)
        is idempotent per (incident, runbook, kind): its id derives from them (`incident_outcome_id`), so two agents'
        reports and the incident's close with `succeeded` move the runbook's record once; the other result (failed,
        then succeeded) replaces it.
        The runbook must be known to the org (`known_runbook`), so a mistyped id is refused,
        naming close ones, instead of filing effectiveness nobody sees; `cited` skips that check for the
        caller whose own record names the runbook (an incident's close)."""
        try:
            kind = OutcomeKind(kind)
        except ValueError as error:
            raise InvalidInputError(
                f"Unknown outcome {kind!r}: use one of {', '.join(k.value for k in OutcomeKind)}.",
                detail={"kind": str(kind)},
            ) from error
        if kind is OutcomeKind.RATED and rating not in (1, -1):
            raise InvalidInputError("A rating is +1 (thumbs up) or -1 (thumbs down).", detail={"rating": rating})
        time_to_mitigate(time_to_mitigate_s)
        if not cited:
            self.known_runbook(runbook_id)
        outcome = Outcome(
            org_id=self.memory.org, runbook_id=runbook_id, kind=kind, incident_id=incident_id,
            service=service_name(service) if service else None, time_to_mitigate_s=time_to_mitigate_s, rating=rating,
            comment=comment, actor=actor, at=utcnow(),
        )  # fmt: skip
        data = outcome.model_dump(mode="json", exclude={"seq", "org_id"})
        if outcome_id is None and incident_id and kind is not OutcomeKind.RATED:
            outcome_id = incident_outcome_id(incident_id, runbook_id, kind)
        doc_id = outcome_id or f"out-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}"

        def attempt() -> Outcome:  # read again after a concurrent report of the same (incident, runbook) landed
            expected = 0 if outcome_id else None
            if outcome_id is not None and (known := self.documents.get(OUTCOMES, outcome_id)) is not None:
                held = read_record(Outcome, known, "outcome", given={"org_id": self.memory.org})
                same = (held.time_to_mitigate_s, held.service) == (outcome.time_to_mitigate_s, outcome.service)
                if held.kind is kind and (same or time_to_mitigate_s is None):  # the same result again: counted once
                    return held
                # The other result (failed, then succeeded), or the same one with its time to mitigate or service
                # corrected (an incident closed again): a correction, counted once.
                expected = known.version
            write = DocumentWrite(OUTCOMES, doc_id, data, f"outcome.{kind.value}", ref=runbook_id,
                                  expected_version=expected)  # fmt: skip
            self.documents.put([write], actor)
            return outcome

        return rewritten(attempt)

    def known_runbook(self, runbook_id: str, *, asking: bool = False) -> None:
        """Refuse (NotFoundError, naming the closest known ids) a runbook id the org has no trace of. Known:
        an entry of kind runbook with that id (any status), an id that already has outcomes or that an
        incident cited (the snapshot), or one a memory cites in `meta.runbook_id` (runbooks may live in a
        wiki while findings name them: the re-ranker weighs a finding by its cited runbook's ledger). Its outcomes are
        counted by the store (`LedgerSource.counted`), not read whole: the first outcome in a process of a runbook with
        no entry read an org's every outcome (~2 s of the shared GIL at 100,000)."""
        entry = self.memory.find(runbook_id)
        if entry is not None and entry.kind is Kind.RUNBOOK:
            return
        if entry is not None:
            raise InvalidInputError(
                f"{runbook_id!r} is a {entry.kind.value}, not a runbook: outcomes are recorded for runbooks. "
                "Name the runbook that was run (`grandbo runbook add` makes one).",
                detail={"runbook_id": runbook_id, "kind": entry.kind.value},
            )
        snapshot = self._snapshot()
        if runbook_id in snapshot.cited or snapshot.source.counted([runbook_id])[runbook_id].outcomes:
            return
        cited, ids = self._entries.runbooks(runbook_id, HINT_CANDIDATES)  # from indexes (migration 23)
        if cited:
            return
        close = close_ids(runbook_id, [*self._runbooks(HINT_CANDIDATES), *ids,
                                       *islice(snapshot.cited, HINT_CANDIDATES)])  # fmt: skip
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        if asking:  # its record is asked for: nothing would be recorded
            then = f"`grandbo runbook stats {close[0]}`" if close else "the id `grandbo runbook add ID` gave it"
            message = f"No runbook {runbook_id!r} in org {self.memory.org!r}, nor an outcome of one.{hint} Ask by "
            message += f"the runbook's id ({then})."
        else:
            message = f"No runbook {runbook_id!r} in org {self.memory.org!r}, so its outcome would count for nothing "
            message += f"you can see.{hint} Record it under the runbook's id, or add the runbook first (`grandbo "
            message += "runbook add`, POST /v1/runbooks)."
        raise NotFoundError(message, detail={"runbook_id": runbook_id, "close": close})

    def import_outcomes(
        self, records: Sequence[Mapping[str, Any]], *, prefix: str = "imported", actor: str = "import"
    ) -> int:
        """Record past outcomes as they happened (each with its own `at`); ids `<prefix>-<n>`, so that
        importing the same records again replaces them instead of counting them twice."""
        writes = []
        for number, record in enumerate(records):
            try:  # a record that is not an outcome: say which, and why
                outcome = Outcome.model_validate({**record, "org_id": self.memory.org})
                problem = ""
            except ValidationError as error:
                problem = validation_problems(error)
            except TypeError:
                problem = "not an object"
            if problem:
                raise InvalidInputError(
                    f"Outcome record {number + 1} is not an outcome ({problem}); nothing was imported. Each needs "
                    "runbook_id and kind (recommended, executed, succeeded, failed or rated).",
                    detail={"record": number + 1},
                )
            data = outcome.model_dump(mode="json", exclude={"seq", "org_id"})
            writes.append(DocumentWrite(OUTCOMES, f"{prefix}-{number:06d}", data, "outcome.imported",
                                        ref=outcome.runbook_id))  # fmt: skip
        self.documents.put(writes, actor)
        return len(writes)

    def withdraw(self, runbook_id: str, comment: str, *, actor: str = "api") -> int:
        """Take back the outcomes of the runbook recorded with exactly `comment` (the console's vote on one alert or
        incident says which in its comment); return how many left the ledger. Their history stays in the log. Only
        those of the runbook with that comment are read from the store (`marked`), not the org's every outcome."""
        writes = [DocumentWrite(OUTCOMES, doc.doc_id, None, "outcome.withdrawn", ref=runbook_id,
                                expected_version=doc.version)
                  for doc, _ in self._marked(runbook_id, comment)]  # fmt: skip
        if writes:
            self.documents.put(writes, actor)
        return len(writes)

    def marked(self, runbook_id: str, comment: str) -> list[Outcome]:
        """The runbook's outcomes recorded with exactly `comment`, oldest first (a console's vote on one subject)."""
        return [outcome for _, outcome in self._marked(runbook_id, comment)]

    def _marked(self, runbook_id: str, comment: str) -> list[tuple[Document, Outcome]]:
        """The runbook's readable outcomes with `comment`, and their documents: its outcomes sought by ref on its index,
        those of that comment picked by the store, a page at a time."""
        found: list[Document] = []
        after: tuple[str, str] | None = None
        while True:
            page = self.documents.ranged(OUTCOMES, runbook_id, runbook_id, PAGE, after=after,
                                         match={("comment",): comment})  # fmt: skip
            found += page
            if len(page) < PAGE:
                break
            after = (page[-1].ref or "", page[-1].doc_id)
        return [(doc, outcome) for doc, outcome in self._read(found)
                if outcome.runbook_id == runbook_id and outcome.comment == comment]  # fmt: skip

    def results_of(self, incident_id: str, comment: str, *, also: Sequence[str] = ()) -> dict[str, Outcome]:
        """The incident's results (succeeded or failed) the ledger holds with exactly `comment`, by document id: under
        the id of each runbook's result on it (`incident_outcome_id`; a runbook with outcomes) and under `also`. The
        outcomes of that comment picked by the store, not the org's every outcome read: how a close's sync finds a
        result any close of the incident wrote, whether or not the incident still says so (probe 21, F1)."""
        extra, held = set(also), {}
        for doc, outcome in self._read(self._matching({("comment",): comment})):
            if outcome.comment == comment and (
                doc.doc_id in extra or self._result_on(doc.doc_id, incident_id, outcome)
            ):
                held[doc.doc_id] = outcome
        return held

    def _result_on(self, doc_id: str, incident_id: str, outcome: Outcome) -> bool:
        """Whether `doc_id` is the id of a runbook's result on the incident (`incident_outcome_id`) of a runbook with
        outcomes (this one's, or one the store counts): as a whole read of the ledger found it."""
        named = _runbook_of(doc_id, incident_id)
        if named is None:
            return False
        return named == outcome.runbook_id or bool(self._snapshot().source.counted([named])[named].outcomes)

    def of_incidents(self, incident_ids: Sequence[str]) -> dict[str, list[Outcome]]:
        """The outcomes reported for each of these incidents (triage's change records), ordered as the ledger is: by
        runbook (the one of the oldest outcome first), then oldest first. Those of each incident picked by the store,
        and the times of their runbooks' outcomes counted there, not the org's every outcome read whole."""
        found = {incident_id: self._read(self._matching({("incident_id",): incident_id}))
                 for incident_id in dict.fromkeys(incident_ids)}  # fmt: skip
        runbooks = sorted({outcome.runbook_id for held in found.values() for _, outcome in held})
        first = oldest(self.documents, OUTCOMES, runbooks)
        order = {runbook_id: at for at, runbook_id in enumerate(sorted(first, key=first.__getitem__))}

        def placed(pair: tuple[Document, Outcome]) -> tuple[int, datetime, str]:
            return order.get(pair[1].runbook_id, len(order)), pair[1].at, pair[0].doc_id

        return {incident_id: [outcome for _, outcome in sorted(held, key=placed)]
                for incident_id, held in found.items() if held}  # fmt: skip

    def _matching(self, match: Mapping[tuple[str, ...], str]) -> list[Document]:
        """Every outcome whose `match` paths hold their values, picked by the store (a page at a time)."""
        return list(every_newest(self.documents, OUTCOMES, PAGE, match=dict(match)))

    def _read(self, docs: Sequence[Document]) -> list[tuple[Document, Outcome]]:
        """Each document an outcome can be read from, with it, oldest first (its time, then its id: the ledger's
        order); the others left out, as every read of the ledger leaves them out."""
        read = []
        for doc in docs:
            try:
                read.append((doc, read_record(Outcome, doc, "outcome", given={"org_id": self.memory.org})))
            except UnreadableRecordError:
                continue
        return sorted(read, key=lambda pair: (pair[1].at, pair[0].doc_id))

    def _runbooks(self, most: int) -> list[str]:
        """The first `most` ids (in order) of the runbooks with outcomes: counted by the store, none read."""
        groups, _ = tallied(self.documents, OUTCOMES, [("runbook_id",), ("kind",)], {}, ())
        held = {runbook_id for runbook_id, kind, _ in groups if isinstance(runbook_id, str) and kind_of(kind)}
        return sorted(held)[:most]

    def outcomes(self, runbook_ids: Sequence[str]) -> list[Outcome]:
        """The outcomes of these runbooks, oldest first: theirs read from the store (sought by ref on its index), not
        the org's every outcome."""
        wanted = set(runbook_ids)
        docs = self.documents.find(OUTCOMES, list(dict.fromkeys(runbook_ids))) if runbook_ids else []
        return [outcome for _, outcome in self._read(docs) if outcome.runbook_id in wanted]

    def records(self, runbook_ids: Sequence[str]) -> dict[str, Effectiveness]:
        """Each runbook's record over every service (`effectiveness`), those not counted yet counted in one read."""
        snapshot = self._snapshot()
        snapshot.source.counted(runbook_ids)
        return {runbook_id: snapshot.effectiveness(runbook_id) for runbook_id in runbook_ids}

    def tally(self) -> LedgerTally:
        """Every runbook's outcomes counted by the store, and the successes with a time to mitigate (analytics):
        `ledger_tally`, read now, not from the org's snapshot."""
        return tally(self.documents)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        """The runbook's record (on one service): counted by the store once per ledger change (the snapshot's). Read
        from the store and parsed on each call, `GET /v1/runbooks` of 20 runbooks of 5,000 outcomes each took 1.37 s
        (probe 19, F4)."""
        return self._snapshot().effectiveness(runbook_id, service)
