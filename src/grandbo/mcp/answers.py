"""What the agent tools answer: their response models (each tool's MCP output schema) and the recall answer, compact
by default (ids, titles, the verdict and one line of why per hit, quoted from the memory) or whole."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from grandbo.model import Entry, Event, Hit, RecallResult
from grandbo.retrieval.text import terms, words_of
from grandbo.tiers.context import verdict
from grandbo.tiers.effectiveness import Effectiveness, Outcome
from grandbo.tiers.incident_model import Finding, Incident
from grandbo.tiers.learning_model import Note

Detail = Literal["compact", "full"]
COMPACT_CHARS = 1600  # the compact answer's text at k=5, at most
_TITLE_CHARS, _WHY_CHARS, _SUMMARY_CHARS = 80, 130, 400
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")


class RecalledMemory(BaseModel):
    rank: int
    id: str = Field(description="The memory's id, to cite and to read whole with get_memory.")
    kind: str
    title: str
    why: str = Field(description="Compact: the memory's own sentence that matched; full: the arms and re-ranking.")
    summary: str | None = Field(None, description="Full only: the start of its text, cut at a word (…).")
    services: list[str] | None = None
    severity: str | None = None
    occurred_at: str | None = Field(None, description="Full only: the day it happened (YYYY-MM-DD).")
    label: str | None = None
    sort_score: float | None = None
    composite: float | None = None
    score: float | None = Field(None, description="sort_score's old name, for agents written before it.")


class Recalled(BaseModel):
    """What query_org_memory answers."""

    detail: Detail
    verdict: str = Field(description="seen before, no similar past incident, or no verdict (with why).")
    evidence: float | None = Field(None, description="Calibrated probability that this happened before.")
    memories: list[RecalledMemory]
    notes: list[str] = Field(default_factory=list)


class FindingRecorded(BaseModel):
    incident_id: str
    finding: Finding


class LedgerRecord(BaseModel):
    """A runbook's record in the ledger (not a plan's RunbookRecord: what followed changes like one)."""

    attempts: int = Field(description="Outcomes known: succeeded + failed.")
    successes: int
    win_rate: float = Field(description="Beta posterior mean of success.")
    interval: tuple[float, float] = Field(description="90% credible interval of the success rate.")


class OutcomeReported(BaseModel):
    recorded: Outcome = Field(description="The outcome as the ledger holds it: the first report of it, if repeated.")
    runbook: LedgerRecord


class ContextAnswer(BaseModel):
    context: str
    verdict: str | None = None
    overridden: list[str] = Field(default_factory=list)
    truncated: bool = False


class EditRecorded(BaseModel):
    signal: dict[str, Any] = Field(description="The edit signal as stored, without the two texts.")
    note: Note | None = Field(None, description="The writing rule this edit taught, if any (pending approval).")


class IncidentList(BaseModel):
    incidents: list[Incident] = Field(description="The most recently changed first.")
    more: bool = Field(False, description="More may follow: ask again with `cursor` set to next_cursor.")
    next_cursor: str | None = Field(None, description="Pass it as `cursor` for the incidents after these; null: none.")


class ChangeSeen(BaseModel):
    id: str = Field(description="SOURCE:ID (github:314159), as a triage plan's `changes` cite it.")
    service: str
    kind: str = Field(description="deploy, rollback, config, flag, infra or other.")
    summary: str = Field(description="What changed, on one line (cut at 200 characters).")
    version: str | None = None
    at: str = Field(description="When it took effect (ISO 8601, UTC).")
    url: str | None = None


class ChangeList(BaseModel):
    changes: list[ChangeSeen] = Field(description="The latest first.")
    more: bool = Field(False, description="More changes match: narrow since/until or raise `limit`.")


class MemoryRead(BaseModel):
    entry: Entry
    history: list[Event] | None = Field(None, description="With history: every event that shaped it, oldest first.")


class RunbookRead(BaseModel):
    runbook: Entry
    steps: list[str] = Field(description="Its steps, in order.")
    effectiveness: Effectiveness = Field(description="Its record: attempts, win rate with 90% interval, MTTR.")


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut at a word boundary with an ellipsis when longer than `limit` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


def quoted_why(hit: Hit, topic_terms: set[str], limit: int = _WHY_CHARS) -> str:
    """The memory's own sentence that shares most terms with the question (and the hit's matched terms), cut at
    a word: never stems. The first sentence of its text when none shares a term (found by meaning alone)."""
    wanted = topic_terms | set(hit.why.lexical.terms if hit.why.lexical else {})
    sentences = [s for s in _SENTENCE.split(hit.entry.body) if s.strip()] or [hit.entry.title]
    best = max(sentences, key=lambda s: len(wanted & set(terms(s))), default=hit.entry.title)
    if not wanted & set(terms(best)):
        best = sentences[0]
    return clip(best, limit)


def explained(hit: Hit, words: dict[str, str]) -> str:
    """The full answer's why: which arms found it (the question's words it matched) and what moved it."""
    why, parts = hit.why, []
    if why.lexical:
        shares = why.lexical.terms
        top = sorted(shares, key=lambda t: -shares[t])[:4]
        found = ", ".join(dict.fromkeys(words.get(term, term) for term in top))
        parts.append(f"lexical #{why.lexical.rank} ({found})")
    if why.vector:
        parts.append(f"vector #{why.vector.rank} (cos {why.vector.similarity:.2f})")
    if why.rerank:
        r = why.rerank
        parts.extend(
            f"{name} {component.contribution:+.2f} ({component.note})"
            for name, component in (("service", r.service), ("runbook", r.effectiveness))
            if component.note and abs(component.contribution) >= 0.005
        )
    return "; ".join(parts)


def _whole(hit: Hit, words: dict[str, str]) -> RecalledMemory:
    entry = hit.entry
    return RecalledMemory(
        rank=hit.rank, id=entry.id, kind=entry.kind.value, title=entry.title, why=explained(hit, words),
        summary=clip(entry.body, _SUMMARY_CHARS), services=entry.services,
        severity=entry.severity.value if entry.severity else None, occurred_at=entry.occurred_at.date().isoformat(),
        label=hit.label, sort_score=round(hit.sort_score, 4), score=round(hit.sort_score, 4),  # falls with rank
        composite=round(hit.composite, 4) if hit.composite is not None else None,  # re-ranked only
    )  # fmt: skip


def full(result: RecallResult) -> Recalled:
    """Today's whole answer: every field of each hit, the summary cut at a word."""
    words = words_of(result.topic)
    memories = [_whole(hit, words) for hit in result.hits]
    return Recalled(detail="full", verdict=verdict(result), evidence=result.evidence, memories=memories,
                    notes=result.notes)  # fmt: skip


def compact(result: RecallResult, topic: str) -> Recalled:
    """Ids, titles, the verdict and one quoted line of why per hit; the notes cut to a line each. What the verdict,
    the note and the closing line leave of COMPACT_CHARS is shared by five memories: a long id (up to 128
    characters) leaves its title and why-line shorter, never the answer longer."""
    wanted = set(terms(topic))
    answer = Recalled(detail="compact", verdict=verdict(result), evidence=result.evidence, memories=[],
                      notes=[clip(note, 120) for note in result.notes[:1]])  # fmt: skip
    share = (COMPACT_CHARS - len(recalled_text(answer))) // 5
    for hit in result.hits:
        # "N. ID [KIND] TITLE\n   why: WHY\n": the room beside the id and kind, shared as 80 to 130
        room = share - len(f"{hit.rank}. {hit.entry.id} [{hit.entry.kind.value}] \n   why: \n")
        title = clip(hit.entry.title, min(_TITLE_CHARS, room * _TITLE_CHARS // (_TITLE_CHARS + _WHY_CHARS)))
        why = quoted_why(hit, wanted, min(_WHY_CHARS, room - len(title)))
        answer.memories.append(RecalledMemory(rank=hit.rank, id=hit.entry.id, kind=hit.entry.kind.value,
                                              title=title, why=why))  # fmt: skip
    return answer


def recalled_text(answer: Recalled) -> str:
    """The compact answer as a model reads it: a verdict line, two lines per memory, the notes."""
    evidence = f" (evidence {answer.evidence:.2f})" if answer.evidence is not None else ""
    lines = [f"Verdict: {answer.verdict}{evidence}"]
    for m in answer.memories:
        lines += [f"{m.rank}. {m.id} [{m.kind}] {m.title}", f"   why: {m.why}"]
    lines += [f"Note: {note}" for note in answer.notes]
    lines.append("Cite the ids; get_memory reads one whole; detail='full' gives scores and summaries.")
    return "\n".join(lines)
