"""What learning from edits keeps: an edit signal, a learned note, and the deterministic wording of a note from
the signals it folds. How signals are recorded, classified and folded, and how notes are reviewed, is
`tiers.learning`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from grandbo.errors import ConflictError, StaleWriteError
from grandbo.errors import NoteLimitError as NoteLimitError  # named here too: the tier raises and catches it
from grandbo.model import utcnow
from grandbo.pages import Mark
from grandbo.ports import Document, DocumentWrite, OrgDocuments, Position
from grandbo.tiers.edit_rules import Category
from grandbo.tiers.records import every_newest, next_page, read_listed, read_records

SIGNALS, NOTES = "edit_signal", "learned_note"
FOLDS = "learning_fold"  # one a category: how far its folds have come (`FoldCursor`)
NOTE_TALLY = "learned_note_tally"  # one document per org (its id the same), rewritten by every note learned
REFUSED = "learned_rule_refused"  # one a rejected rule, its id the digest of its fingerprint (`refusal`)
AWAITING = "awaiting_llm"  # the ref of a signal the LLM has not classified yet: it is in no category's order
FOLD_EVERY = 3
NoteStatus = Literal["pending", "active", "edited", "rejected", "archived"]
IN_FORCE = ("active", "edited")  # the statuses whose notes reach the context block
INACTIVE = ("rejected", "archived")
KEEP_PER_CATEGORY = 5
REVIEWED_SHOWN = 100  # rejected and archived notes the console lists, the most recently written
NOTES_PAGE = 100  # notes of one fingerprint read at once (`known_statuses`), and notes deleted in one write (`prune`)
PRUNE_TRIES = 5  # stale writes in a row `prune` takes (notes changed meanwhile: read again from the newest)


def note_ref(status: str, category: Category) -> str:
    """A note's document ref: its status and category (`active/tone`), so that the notes in force or waiting for review
    are read through the index on ref, not found among every note an org ever learned (20,000 notes: 2.3 s of the
    shared process a context block). A note stored before migration 25, or loaded from an older release's export,
    has its category alone as its ref."""
    return f"{status}/{category.value}"


def note_refs(*statuses: str) -> list[str]:
    """The refs of the notes of `statuses`, with the refs of category alone, whose status is read (`note_ref`)."""
    return [note_ref(status, category) for status in statuses for category in Category] + [c.value for c in Category]


def notes_of(documents: OrgDocuments, statuses: tuple[str, ...] | None) -> list[Note]:
    """The notes of `statuses` (None: all), oldest first, read by their refs."""
    docs = documents.find(NOTES, note_refs(*statuses) if statuses else None)
    notes = sorted(read_records(Note, docs, "learned note"), key=lambda n: (n.created_at, n.id))
    return notes if statuses is None else [n for n in notes if n.status in statuses]


def notes_page(
    documents: OrgDocuments, statuses: tuple[str, ...] | None, n: int, before: Position
) -> tuple[list[tuple[Note, Mark]], Position]:
    """Up to `n` notes of `statuses` (None: all) written before `before`, the most recently written first, each with
    its place, and where the next page starts (None: the last): a `pages.Read` of the notes (`GET /v1/notes`), read
    by their refs (one read may hold fewer, a ref of category alone holding any status)."""
    docs = documents.newest(NOTES, n, before=before, refs=note_refs(*statuses) if statuses else None)
    found = read_listed(Note, docs, "learned note")
    return [(note, at) for note, at in found if statuses is None or note.status in statuses], next_page(docs, n)


def reviewed_notes(documents: OrgDocuments, limit: int) -> list[Note]:
    """The rejected and archived notes most recently written, up to `limit`, the newest first."""
    found: list[Note] = []
    for doc in every_newest(documents, NOTES, limit, refs=note_refs(*INACTIVE)):  # a ref of category alone: any status
        found += [note for note in read_records(Note, [doc], "learned note") if note.status in INACTIVE]
        if len(found) == limit:
            break
    return found


def room_for_notes(documents: OrgDocuments, most: int, org: str) -> Document | None:
    """The org's note tally, read before its notes are counted (a note is written with it, expecting its version:
    of two folds that counted alike, the second is stale and counts again); NoteLimitError when the org holds
    `most` notes (`GRANDBO_NOTES_PER_ORG`), counted on the index, none read. A rejected rule pruned (`prune`) is
    not a note: only its digest is kept, and it does not count. Notes pending review count: each holds its text,
    and any write key's edits make them (not counted, a flood of them would have no bound); the error says how many
    there are of each status, and what makes room from each."""
    tally = documents.get(NOTE_TALLY, NOTE_TALLY)
    if (held := documents.count(NOTES, most)) >= most:
        by_status = {"pending": 0, "in force": 0, "rejected or archived": 0}
        for status, count in documents.tally(NOTES, [("status",)], {}, ())[0]:  # counted by the store, none read
            part = "pending" if status == "pending" else "rejected or archived" if status in INACTIVE else "in force"
            by_status[part] += count
        raise NoteLimitError(
            f"Organization {org!r} holds {held:,} learned notes, the most it may (GRANDBO_NOTES_PER_ORG): "
            f"{', '.join(f'{count:,} {status}' for status, count in by_status.items())}. The edit was not stored, and "
            f"no note is learned meanwhile. To make room: {_room_from(by_status)}",
            detail={"org_id": org, "notes": held, "limit": most, "by_status": by_status},
        )
    return tally


def _room_from(by_status: dict[str, int]) -> str:
    """What makes room under the note limit, for the notes an org holds (`room_for_notes`)."""
    ways = []
    if by_status["rejected or archived"]:
        ways.append("delete the rejected and archived notes (`grandbo notes prune`, `POST /v1/notes/prune`, or the "
                    "console's Profile page; a rejected rule stays unlearned)")  # fmt: skip
    if by_status["pending"]:
        ways.append("review the notes pending review, which count too (`grandbo notes list`), and delete those not "
                    "wanted (`grandbo notes delete ID`, `DELETE /v1/notes/{id}`, or the console; their rules are not "
                    "learned again): approving one makes no room")  # fmt: skip
    if by_status["in force"]:
        ways.append("delete a note in force no longer wanted (`grandbo notes delete ID`)")
    return "; or ".join(ways) + "."


def rule_digest(print_: str) -> str:
    """A rule's fingerprint as it is kept once its note may be gone: its SHA-256. It is no secret: a rule is a few
    words in a template, and a word of it is found again by hashing guesses (200,001 in 1.7 s, review 24), so an
    erasure of a word of the rule deletes it (`refusals_erased`)."""
    return hashlib.sha256(print_.encode()).hexdigest()


def refusals_erased(collection: str, held: Any, erased: Any) -> list[tuple[str, str]]:
    """An erasure's `forget` (`ports.Forgetting`): the refusal of the rule whose fingerprint a note, or an event of
    its history, held before the erasure rewrote it, deleted with its history in the erasure's transaction. The rule
    is then forgotten entirely, neither learned nor refused: taught again, it is a new note pending review."""
    if collection != NOTES or not isinstance(held, dict) or not isinstance(erased, dict):
        return []
    print_ = held.get("fingerprint")
    if not isinstance(print_, str) or print_ == erased.get("fingerprint"):
        return []  # the erasure left the rule as it was (the note's text alone, an admin's wording, held the text)
    return [(REFUSED, rule_digest(print_))]


def refusal(print_: str) -> DocumentWrite:
    """The record that keeps a rejected rule (of that fingerprint) from being learned again once its note is deleted:
    written with the rejection, and with the note's deletion (`prune`) for one rejected before it existed; an erasure
    of a word of the rule deletes it (`refusals_erased`). Not a note (`room_for_notes` does not count it), and written
    at an org's storage limit too (~150 bytes)."""
    digest = rule_digest(print_)
    data = {"fingerprint_hash": digest, "at": utcnow().isoformat()}
    return DocumentWrite(REFUSED, digest, data, "note.refused", essential=True)


def known_statuses(documents: OrgDocuments, print_: str) -> set[str]:
    """The statuses of the notes of that fingerprint, whatever their category (found by the store, only their status
    read: every note of the org was read whole at each fold), "rejected" too when the rule was refused and its note
    deleted since (`prune`). The notes are read first: a prune between the two reads deleted a rejected note in the
    transaction that wrote its refusal, which the second then finds."""
    docs = every_newest(documents, NOTES, NOTES_PAGE, match={("fingerprint",): print_}, keys=("status",))
    found = {str(doc.data.get("status", "active")) for doc in docs if isinstance(doc.data, dict)}
    return found | {"rejected"} if documents.get(REFUSED, rule_digest(print_)) is not None else found


@dataclass
class Pruned:
    """What `prune` deleted: rejected notes (their rules refused still) and archived ones."""

    rejected: int = 0
    archived: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"deleted": self.rejected + self.archived, "rejected": self.rejected, "archived": self.archived}


def prune(documents: OrgDocuments, actor: str) -> Pruned:
    """Delete the org's rejected and archived notes, which reach no prompt, to make room under GRANDBO_NOTES_PER_ORG:
    each rejected one with its refusal written (`refusal`, unless there is one) in the same transaction, so its rule
    stays unlearned; an archived rule may be learned again, as before. Pending notes and those in force stay. The
    notes' history stays, as every document's, where an erasure reaches it. NOTES_PAGE notes a write, each expecting
    the version read, the most recently written first; a write whose notes changed meanwhile is stale, and the prune
    reads again from the newest (those deleted are gone from it): a note rewritten meanwhile may have moved there,
    past the page the prune had reached, which read it again from its own place and left the note behind. At most
    PRUNE_TRIES stale writes in a row (each write between them deleted notes: the prune ends)."""
    pruned, before, stale = Pruned(), None, 0
    while True:
        docs = documents.newest(NOTES, NOTES_PAGE, before=before, refs=note_refs(*INACTIVE),
                                keys=("status", "fingerprint"))  # fmt: skip
        gone = [d for d in docs if isinstance(d.data, dict) and d.data.get("status") in INACTIVE]
        prints = {rule_digest(str(d.data.get("fingerprint", ""))): str(d.data.get("fingerprint", ""))
                  for d in gone if d.data.get("status") == "rejected"}  # fmt: skip
        held = {d.doc_id for d in documents.find(REFUSED, ids=list(prints), keys=("at",))} if prints else set()
        writes = [refusal(print_) for digest, print_ in prints.items() if digest not in held]
        writes += [DocumentWrite(NOTES, d.doc_id, None, "note.deleted", expected_version=d.version) for d in gone]
        try:
            if gone:
                documents.put(writes, actor)
        except StaleWriteError:
            if (stale := stale + 1) == PRUNE_TRIES:
                raise ConflictError(
                    "The learned notes kept changing while they were pruned; those deleted so far stay deleted. Run "
                    "the prune again.",
                    detail=pruned.to_dict(),
                ) from None
            before = None
            continue
        stale, rejected = 0, sum(1 for d in gone if d.data.get("status") == "rejected")
        pruned.rejected, pruned.archived = pruned.rejected + rejected, pruned.archived + len(gone) - rejected
        if (before := next_page(docs, NOTES_PAGE)) is None:
            return pruned


def counted(tally: Document | None, note_id: str) -> DocumentWrite:
    """The write of the org's note tally that goes with a new note (`room_for_notes`)."""
    version = tally.version if tally is not None else 0
    return DocumentWrite(NOTE_TALLY, NOTE_TALLY, {"learned": note_id}, "note.counted", expected_version=version)


NOTE_MAX = 2000  # characters of a note's text (an admin's rewording included)
MAX_EDIT_CHARS = 100_000  # of a draft or its edited version, as the API and the MCP tool take them
PROFILE_PART = {
    Category.TONE: "tone_style",
    Category.STYLE: "tone_style",
    Category.VOCABULARY: "vocabulary",
    Category.LENGTH: "length_structure",
    Category.STRUCTURE: "length_structure",
}


class Signal(BaseModel):
    """One edit, as stored."""

    id: str
    content_type: str
    author: str
    category: Category
    summary: str
    details: dict[str, Any] = Field(default_factory=dict)
    classified_by: str
    awaiting_llm: bool = Field(
        False,
        description="Stored before the configured LLM classified it: the rules' classification stands until the "
        "LLM's replaces it (or for good, when the LLM fails); until then it folds into no note.",
    )
    draft: str
    edited: str
    at: datetime


class FoldCursor(BaseModel):
    """How far a category's folds have come: the last signal folded, how many of the category's settled signals (in
    write order) were folded through it, and the sequence number of its newest write with the org's generation it
    is of (the next fold reads the signals written after it, not all of them; a cursor of an older release, or
    loaded into another org, whose sequence numbers are others, has none that count and is found by its signal)."""

    through: str
    folded: int = Field(ge=0)
    seq: int | None = None
    epoch: int | None = None


class Note(BaseModel):
    """A learned rule."""

    id: str
    category: Category
    part: str
    text: str
    status: NoteStatus = Field("active", description="pending (awaiting review), active, edited, rejected or archived")
    content_type: str | None = None
    signals: list[str] = Field(default_factory=list)
    fingerprint: str
    created_at: datetime
    reviewed_at: datetime | None = Field(None, description="When an admin accepted or edited it; None: unreviewed.")
    version: int = 0


# ---------------------------------------------------------------------------------- the wording of a note


def compose_note(category: Category, signals: Sequence[Signal], content_type: str | None) -> str:
    """The deterministic wording of a learned rule from the signals it folds ("" when the rules cannot say
    what the edits have in common: no rule rather than a wrong one)."""
    subject = f"{content_type} drafts" if content_type else "drafts"
    if category is Category.VOCABULARY:
        pairs = Counter(tuple(pair) for s in signals for pair in s.details.get("swaps", []))
        undone = {pair for pair in pairs if (pair[1], pair[0]) in pairs}  # one edit swapped back what another did
        rules = [f"'{new}' instead of '{old}'" for (old, new), _ in pairs.most_common() if (old, new) not in undone]
        return f"In {subject}, write " + "; ".join(rules[:3]) + "." if rules else ""
    if category is Category.LENGTH:
        ratios = [float(s.details.get("ratio", 0.0)) for s in signals]
        if min(ratios) < 0 < max(ratios):  # some cut, some added: no length rule
            return ""
        mean = sum(ratios) / len(ratios)
        return f"Keep {subject} about {abs(mean):.0%} {'shorter' if mean < 0 else 'longer'} than a first draft."
    if category is Category.TONE:
        removed = Counter(m for s in signals for m in s.details.get("removed", []))
        added = Counter(m for s in signals for m in s.details.get("added", []))
        for marker in set(removed) & set(added):  # removed by one edit, added by another: neither rule
            del removed[marker], added[marker]
        if not removed and not added:
            return ""
        parts = []
        if removed:
            parts.append("avoid " + ", ".join(f"'{m}'" for m, _ in removed.most_common(4)))
        if added:
            parts.append("use " + ", ".join(f"'{m}'" for m, _ in added.most_common(4)))
        return f"In {subject}, " + " and ".join(parts) + "."
    if category is Category.STRUCTURE:
        moves = Counter(
            f"{'more' if after > before else 'fewer'} {kind}"
            for s in signals
            for kind, (before, after) in s.details.get("shape", {}).items()
        )
        ways = Counter(move.split(" ", 1)[1] for move in moves)  # a kind both more and fewer counts twice
        kept = [move for move, _ in moves.most_common() if ways[move.split(" ", 1)[1]] == 1][:3]
        return f"Structure {subject} with " + ", ".join(kept) + "." if kept else ""
    lengths = [s.details.get("sentence_words", [0, 0]) for s in signals]
    target = sum(after for _, after in lengths) / len(lengths)
    before = sum(b for b, _ in lengths) / len(lengths)
    if abs(target - before) < 1:  # punctuation, capitals, contractions: the rules cannot word what changed
        return ""
    direction = "shorter" if target < before else "longer"
    return f"In {subject}, write {direction} sentences (about {target:.0f} words each)."
