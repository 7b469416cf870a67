"""The effectiveness ledger: what each runbook did when it was tried (outcome documents), summarized when asked."""

from __future__ import annotations

import difflib
import heapq
import secrets
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from grandbo.errors import InvalidInputError, NotFoundError, validation_problems
from grandbo.model import Kind, utcnow
from grandbo.names import service_name
from grandbo.ports import DocumentWrite, OrgDocuments, OrgEntries
from grandbo.tiers import operations
from grandbo.tiers.effectiveness import Effectiveness, Outcome, OutcomeKind, time_to_mitigate
from grandbo.tiers.ledger_tally import LedgerTally, tally
from grandbo.tiers.operations import OUTCOMES
from grandbo.tiers.records import read_record
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
        wiki while findings name them: the re-ranker weighs a finding by its cited runbook's ledger)."""
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
        if runbook_id in snapshot.outcomes or runbook_id in snapshot.services_used:
            return
        cited, ids = self._entries.runbooks(runbook_id, HINT_CANDIDATES)  # from indexes (migration 23)
        if cited:
            return
        close = close_ids(runbook_id, [*islice(snapshot.outcomes, HINT_CANDIDATES), *ids,
                                       *islice(snapshot.services_used, HINT_CANDIDATES)])  # fmt: skip
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
        those the snapshot holds with that comment are read from the store (with their versions), not the runbook's
        every outcome."""
        ids = [doc_id for doc_id, outcome in self._snapshot().ledger.ids(runbook_id) if outcome.comment == comment]
        held = [doc for doc in (self.documents.find(OUTCOMES, [runbook_id], ids=ids) if ids else [])
                if isinstance(doc.data, dict) and doc.data.get("comment") == comment]  # fmt: skip
        writes = [DocumentWrite(OUTCOMES, doc.doc_id, None, "outcome.withdrawn", ref=runbook_id,
                                expected_version=doc.version) for doc in held]  # fmt: skip
        if writes:
            self.documents.put(writes, actor)
        return len(writes)

    def results_of(self, incident_id: str, comment: str, *, also: Sequence[str] = ()) -> dict[str, Outcome]:
        """The incident's results (succeeded or failed) the ledger holds with exactly `comment`, by document id: under
        the id of each runbook's result on it (`incident_outcome_id`) and under `also`. One look-up per runbook with
        outcomes, not a read of every outcome: how a close's sync finds a result any close of the incident wrote,
        whether or not the incident still says so (probe 21, F1)."""
        view = self._snapshot().ledger
        ids = [incident_outcome_id(incident_id, runbook_id, OutcomeKind.SUCCEEDED) for runbook_id in view.by_runbook]
        held = ((doc_id, view.get(doc_id)) for doc_id in dict.fromkeys([*ids, *also]))
        return {doc_id: outcome for doc_id, outcome in held if outcome is not None and outcome.comment == comment}

    def outcomes(self, runbook_ids: Sequence[str]) -> list[Outcome]:
        """The outcomes of these runbooks, oldest first, from the org's snapshot (read from the store once per
        ledger change, not on each call)."""
        return self._snapshot().ledger.of(runbook_ids)

    def tally(self) -> LedgerTally:
        """Every runbook's outcomes counted by the store, and the successes with a time to mitigate (analytics):
        `ledger_tally`, read now, not from the org's snapshot."""
        return tally(self.documents)

    def every_outcome(self) -> list[Outcome]:
        """Every runbook's outcomes, oldest first (analytics)."""
        return sorted((o for lines in self._snapshot().outcomes.values() for o in lines), key=lambda o: o.at)

    def effectiveness(self, runbook_id: str, service: str | None = None) -> Effectiveness:
        """The runbook's record (on one service): the snapshot's summary, made once per ledger change. Read from the
        store and parsed on each call, `GET /v1/runbooks` of 20 runbooks of 5,000 outcomes each took 1.37 s (probe 19,
        F4)."""
        return self._snapshot().effectiveness(runbook_id, service)
