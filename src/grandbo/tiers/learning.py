"""Implicit memory: rules learned from how people edit the agents' drafts.

Every edit (draft, edited version, content type, author) is stored as a signal with a category and a
one-line summary. The category comes from the configured LLM when there is one, otherwise from the rules of
`tiers/edit_rules.py` (structure, length, tone, vocabulary, style, tried in that order).

Every third signal of a category folds a learned note (a one-sentence rule). A new note is *pending*: it
reaches no prompt until an admin approves (or edits) it, because an edited draft is text from anyone and
may carry an instruction meant for the agents; an organization can opt in to notes applying at once
(`OrgSettings.set_auto_apply_learned`). The newest five notes per category stay in force. Admins may
approve, edit or reject a note, and a rejected rule is never learned again. Tone and style notes,
vocabulary notes, and length and structure notes are kept in three parts of the profile.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import BaseModel, Field

from grandbo.errors import GrandboError, InvalidInputError, NotFoundError, UnreadableRecordError
from grandbo.llm import LLMClient, json_object
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers.edit_rules import Category, classify, fingerprint
from grandbo.tiers.records import read_record, read_records
from grandbo.words import folded_content_type

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

SIGNALS, NOTES = "edit_signal", "learned_note"
FOLD_EVERY = 3
NoteStatus = Literal["pending", "active", "edited", "rejected", "archived"]
IN_FORCE = ("active", "edited")  # the statuses whose notes reach the context block
KEEP_PER_CATEGORY = 5
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
    draft: str
    edited: str
    at: datetime


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


# ---------------------------------------------------------------------------------- the documents side


class Learning:
    """Edit signals and learned notes of one organization."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments, llm: LLMClient | None = None) -> None:
        self.memory = memory
        self.documents = documents
        self.llm = llm

    def record_edit(
        self, draft: str, edited: str, *, content_type: str, author: str, actor: str | None = None
    ) -> tuple[Signal, Note | None]:
        """Store an edit signal; every third one of its category folds a learned note."""
        if not draft.strip() or not edited.strip():
            raise InvalidInputError("Both the draft and the edited version are needed.", detail={})
        if not content_type.strip():
            raise InvalidInputError("Name the content type (status-update, post-mortem, customer-notice...).",
                                    detail={})  # fmt: skip
        if not author.strip():  # as the API refuses it: an edit is learned from someone
            raise InvalidInputError("Name who edited the draft (--author, or `author` over the API and MCP).",
                                    detail={})  # fmt: skip
        author = author.strip()
        redactor = self.memory.settings.redactor()  # stored, classified and sent to an LLM only masked
        draft, edited = redactor.text(draft), redactor.text(edited)
        category, summary, details = classify(draft, edited)
        classified_by = "rules"
        if self.llm is not None:
            ruled = category
            category, summary, classified_by = self._ask_llm(draft, edited, category, summary, classified_by)
            if category is not ruled:
                details = {}  # the rules' details describe another kind of change
        signal = Signal(
            id=f"sig-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}",
            content_type=folded_content_type(content_type), author=author, category=category, summary=summary,
            details=details, classified_by=classified_by,
            draft=draft, edited=edited, at=utcnow(),
        )  # fmt: skip
        self._store(signal, actor or author)
        return signal, self._fold_if_due(signal, actor or author)

    def _store(self, signal: Signal, actor: str) -> None:
        event, ref = f"edit.{signal.category.value}", signal.category.value
        self.documents.put([DocumentWrite(SIGNALS, signal.id, signal.model_dump(mode="json"), event, ref=ref)], actor)

    def _fold_if_due(self, signal: Signal, actor: str) -> Note | None:
        """Fold the group of FOLD_EVERY signals that `signal` completes, by its own place in its category's
        commit order (not by the count, which two edits stored at once would both read past a multiple of
        three)."""
        if signal.category is Category.UNCLASSIFIED:  # kept, never folded
            return None
        same = self.signals(signal.category)
        place = next((i for i, s in enumerate(same, start=1) if s.id == signal.id), 0)
        if place == 0 or place % FOLD_EVERY:
            return None
        return self._fold(signal.category, same[place - FOLD_EVERY : place], actor)

    def signals(self, category: Category | None = None) -> list[Signal]:
        """The edit signals (of one category), in the order the store committed them: not by their `at`, which
        another process's skewed clock can set before signals already folded."""
        docs = self.documents.find(SIGNALS, [category.value] if category else None, by_write=True)
        return read_records(Signal, docs, "edit signal")

    def notes(self, *, include_inactive: bool = False) -> list[Note]:
        """The notes in force (active or edited: what the context block carries); every note with
        `include_inactive` (pending, rejected and archived too)."""
        docs = self.documents.find(NOTES)
        notes = read_records(Note, docs, "learned note")
        notes.sort(key=lambda n: (n.created_at, n.id))
        return notes if include_inactive else [n for n in notes if n.status in IN_FORCE]

    def pending(self) -> list[Note]:
        """Learned notes waiting for an admin's review; none of them reaches a prompt."""
        return [n for n in self.notes(include_inactive=True) if n.status == "pending"]

    def approve_note(self, note_id: str, *, actor: str = "admin") -> Note:
        """An admin accepts a pending note: from now on it is in the context block."""
        note = self._note(note_id)
        if note.status != "pending":
            raise InvalidInputError(f"Note {note_id!r} is {note.status}, not pending review.",
                                    detail={"note_id": note_id, "status": note.status})  # fmt: skip
        approved = self._save(note.model_copy(update={"status": "active", "reviewed_at": utcnow()}), "note.approved",
                              actor)  # fmt: skip
        self._archive_beyond_limit(approved, actor)
        return approved

    def edit_note(self, note_id: str, text: str, *, actor: str = "admin") -> Note:
        """An admin rewords a learned note; it stays active, marked edited."""
        if not text.strip():
            raise InvalidInputError("A learned note needs text; reject it instead of emptying it.", detail={})
        if len(text.strip()) > NOTE_MAX:  # what the API takes, for the CLI and the console too
            raise InvalidInputError(
                f"A learned note is one rule of at most {NOTE_MAX} characters (this one has {len(text.strip())}); "
                "shorten it, or type longer guidance into the profile (grandbo profile set).",
                detail={"length": len(text.strip()), "max": NOTE_MAX},
            )
        note = self._note(note_id)
        if note.status not in ("pending", *IN_FORCE):  # as the console offers it: a rejection is final
            raise InvalidInputError(
                f"Note {note_id!r} is {note.status}; only a pending, active or edited note can be reworded. "
                "To add a rule of your own, type it into the profile (grandbo profile set).",
                detail={"note_id": note_id, "status": note.status},
            )
        changes = {"text": text.strip(), "status": "edited", "reviewed_at": utcnow()}
        edited = self._save(note.model_copy(update=changes), "note.edited", actor)
        if note.status == "pending":  # rewording a pending note approves it: the limit holds as for an approval
            self._archive_beyond_limit(edited, actor)
        return edited

    def accept_note(self, note_id: str, *, actor: str = "admin") -> Note:
        """An admin accepts a learned note as it is worded: a pending one is approved (it joins the context
        block), an active or edited one stays, marked reviewed."""
        note = self._note(note_id)
        if note.status == "pending":
            return self.approve_note(note_id, actor=actor)
        if note.status not in ("active", "edited"):
            raise InvalidInputError(
                f"Note {note_id!r} is {note.status}; only an active or edited note can be accepted.",
                detail={"note_id": note_id, "status": note.status},
            )
        return self._save(note.model_copy(update={"reviewed_at": utcnow()}), "note.accepted", actor)

    def reject_note(self, note_id: str, *, actor: str = "admin") -> Note:
        """An admin rejects a learned note: it leaves the profile and is never learned again."""
        note = self._note(note_id)
        if note.status == "rejected":
            return note  # nothing changes: no new version, no history entry
        return self._save(note.model_copy(update={"status": "rejected"}), "note.rejected", actor)

    def _fold(self, category: Category, signals: Sequence[Signal], actor: str) -> Note | None:
        types = {folded_content_type(s.content_type) for s in signals}  # older signals kept their case
        content_type = types.pop() if len(types) == 1 else None
        text = compose_note(category, signals, content_type) if all(s.details for s in signals) else ""
        if self.llm is not None:
            text = self._word_with_llm(category, signals, text)
        if not text:  # neither the rules' details nor a model could word a rule
            log.info("learning.note_not_worded", org_id=self.memory.org, category=category.value)
            return None
        existing = self.notes(include_inactive=True)
        print_ = fingerprint(text)
        if any(n.fingerprint == print_ and n.status == "rejected" for n in existing):
            log.info("learning.rejected_note_not_relearned", org_id=self.memory.org, category=category.value)
            return None
        if any(n.fingerprint == print_ and n.status in (*IN_FORCE, "pending") for n in existing):
            return None  # already known
        try:
            auto = self.memory.settings.auto_apply_learned()
        except UnreadableRecordError as error:  # turns nothing on: the note waits for review; the edit is kept
            log.warning("learning.setting_unreadable", org_id=self.memory.org, fields=error.detail["fields"])
            auto = False
        note = Note(
            id=f"note-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}", category=category,
            part=PROFILE_PART[category], text=text, content_type=content_type, signals=[s.id for s in signals],
            fingerprint=print_, created_at=utcnow(), status="active" if auto else "pending",
        )  # fmt: skip
        saved = self._save(note, "note.learned", actor, expected=0)
        if auto:
            self._archive_beyond_limit(saved, actor)
        else:
            log.info("learning.note_pending_review", org_id=self.memory.org, category=category.value, note_id=note.id)
        return saved

    def _archive_beyond_limit(self, newest: Note, actor: str) -> None:
        """Keep the newest KEEP_PER_CATEGORY notes in force per category; archive the older ones."""
        active = [n for n in self.notes() if n.category is newest.category and n.id != newest.id]
        for old in active[: max(0, len(active) + 1 - KEEP_PER_CATEGORY)]:
            self._save(old.model_copy(update={"status": "archived"}), "note.archived", actor)

    def _note(self, note_id: str) -> Note:
        doc = self.documents.get(NOTES, note_id)
        if doc is None:
            raise NotFoundError(f"No learned note {note_id!r} in org {self.memory.org!r}.",
                                detail={"note_id": note_id})  # fmt: skip
        return read_record(Note, doc, "learned note")

    def _save(self, note: Note, event: str, actor: str, expected: int | None = None) -> Note:
        data = note.model_dump(mode="json", exclude={"version"})
        version = note.version if expected is None else expected
        (doc,) = self.documents.put(
            [DocumentWrite(NOTES, note.id, data, event, ref=note.category.value, expected_version=version)], actor
        )
        return note.model_copy(update={"version": doc.version})

    def _ask_llm(self, draft: str, edited: str, category: Category, summary: str, by: str) -> tuple[Category, str, str]:
        assert self.llm is not None
        system = (
            "You classify how a person edited a draft. Answer with JSON only: "
            '{"category": one of "tone", "style", "vocabulary", "length", "structure", "summary": one line}.'
        )
        try:
            answer = json_object(self.llm.complete(system, f"DRAFT:\n{draft}\n\nEDITED:\n{edited}"))
            chosen = Category(answer["category"] if answer["category"] != Category.UNCLASSIFIED else "(none)")
            return chosen, str(answer["summary"]).strip()[:300], self.llm.name
        except (GrandboError, ValueError, KeyError, TypeError) as error:
            log.warning("learning.llm_classification_failed", org_id=self.memory.org, error=str(error)[:200])
            return category, summary, by

    def _word_with_llm(self, category: Category, signals: Sequence[Signal], fallback: str) -> str:
        assert self.llm is not None
        system = "Write one imperative sentence, under 30 words, stating the writing rule these edits show."
        prompt = f"Category: {category.value}\n" + "\n".join(f"- {s.summary}" for s in signals)
        try:
            text = self.llm.complete(system, prompt).strip()
            return text if 0 < len(text) <= 300 else fallback
        except GrandboError as error:
            log.warning("learning.llm_wording_failed", org_id=self.memory.org, error=str(error)[:200])
            return fallback
