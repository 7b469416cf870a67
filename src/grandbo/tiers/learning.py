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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from grandbo.errors import GrandboError, InvalidInputError, NotFoundError, UnreadableRecordError
from grandbo.llm import LLMClient, json_object
from grandbo.model import utcnow
from grandbo.ports import DocumentWrite, OrgDocuments
from grandbo.tiers.edit_rules import Category, classify, fingerprint
from grandbo.tiers.learning_model import (
    FOLD_EVERY,
    IN_FORCE,
    KEEP_PER_CATEGORY,
    NOTE_MAX,
    NOTES,
    PROFILE_PART,
    SIGNALS,
    Note,
    Signal,
    compose_note,
)
from grandbo.tiers.records import read_record, read_records
from grandbo.words import folded_content_type

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)


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
