"""Implicit memory: rules learned from how people edit the agents' drafts.

Every edit (draft, edited version, content type, author) is stored the moment it arrives, as a signal with a
category and a one-line summary from the rules of `tiers/edit_rules.py` (structure, length, tone, vocabulary,
style, tried in that order). With an LLM configured, the signal is stored *awaiting* it: the LLM's
classification follows as a write-behind (`OrgMemory.defer`: off the caller in a server, right after the write
in a CLI command) and the signal *settles* with it, or with the rules' when the LLM fails, is slow or answers
nonsense. A signal whose process stopped before it settled is settled by a later edit's write-behind
(`settle_awaiting`). A signal awaiting the LLM is in no category: an LLM's classification never moves a
signal already folded, and the groups of three follow the order the signals settled in.

Every third settled signal of a category folds a learned note (a one-sentence rule); each category's cursor
(the last signal folded) moves in the note's own transaction, so a group is folded once, whichever process
gets there, and a fold whose process stopped is done by the category's next one. A new note is *pending*: it
reaches no prompt until an admin approves (or edits) it, because an edited draft is text from anyone and
may carry an instruction meant for the agents; an organization can opt in to notes applying at once
(`OrgSettings.set_auto_apply_learned`). The newest five notes per category stay in force. Admins may
approve, edit or reject a note, and a rejected rule is never learned again, also once its note is deleted
(`tiers.note_review`), until a word of it is erased. Tone and style notes, vocabulary notes, and length and
structure notes are kept in three parts of the profile.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from grandbo.errors import GrandboError, InvalidInputError, NotFoundError, StaleWriteError, UnreadableRecordError
from grandbo.llm import LLMClient
from grandbo.model import utcnow
from grandbo.ports import Document, DocumentWrite, NewWork, OrgDocuments
from grandbo.redrive import LEARNING_SETTLE
from grandbo.tiers.edit_rules import Category, classify, fingerprint
from grandbo.tiers.learning_llm import classified_by_llm, worded_by_llm
from grandbo.tiers.learning_model import (
    AWAITING,
    FOLD_EVERY,
    FOLDS,
    IN_FORCE,
    PROFILE_PART,
    SIGNALS,
    FoldCursor,
    Note,
    NoteLimitError,
    Signal,
    compose_note,
    counted,
    known_statuses,
    room_for_notes,
)
from grandbo.tiers.note_review import NoteReview
from grandbo.tiers.records import read_record, read_records
from grandbo.tiers.retry import rewritten
from grandbo.words import folded_content_type

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory

log = structlog.get_logger(__name__)

# A signal awaiting the LLM this long lost the process that stored it: each LLM call times out after
# GRANDBO_HTTP_TIMEOUT_SECONDS (30 s), but a busy server's write-behinds queue. Settling one twice only asks twice.
ABANDONED_AFTER = timedelta(minutes=10)
FOLD_TRIES = 5  # a fold that finds its group taken by another process reads the cursor again, this often
# What a fold reads of a signal: not the draft and its edit (up to 100,000 characters each, and never worded from).
FOLD_KEYS = ("id", "content_type", "author", "category", "summary", "details", "classified_by", "awaiting_llm", "at")
UNREAD = {"draft": "", "edited": ""}


class Learning(NoteReview):
    """Edit signals and learned notes of one organization (their review: `tiers.note_review`)."""

    def __init__(self, memory: OrgMemory, documents: OrgDocuments, llm: LLMClient | None = None, most: int = 2_000):
        self.memory, self.documents, self.llm = memory, documents, llm
        self.most = most  # learned notes the organization may hold (GRANDBO_NOTES_PER_ORG)

    def record_edit(
        self, draft: str, edited: str, *, content_type: str, author: str, actor: str | None = None
    ) -> tuple[Signal, Note | None]:
        """Store an edit signal at once, classified by the rules; every third settled signal of a category folds
        a learned note.

        Without an LLM the signal is settled as it is stored, and comes back with the note it folded, if any.
        With one, it is stored awaiting the LLM and the rest (the LLM's classification, the fold, the note's
        wording) is a write-behind (`OrgMemory.defer`): a process with background threads (a server) answers
        with the signal as stored and no note; elsewhere the write-behind has run when this returns, and the
        signal comes back as it settled, with the note it folded. Either way the signal is stored first."""
        if not draft.strip() or not edited.strip():
            raise InvalidInputError("Both the draft and the edited version are needed.", detail={})
        if not content_type.strip():
            raise InvalidInputError("Name the content type (status-update, post-mortem, customer-notice...).",
                                    detail={})  # fmt: skip
        if not author.strip():  # as the API refuses it: an edit is learned from someone
            raise InvalidInputError("Name who edited the draft (--author, or `author` over the API and MCP).",
                                    detail={})  # fmt: skip
        author, actor = author.strip(), actor or author.strip()
        room_for_notes(self.documents, self.most, self.memory.org)  # at the limit, refused before it is stored
        redactor = self.memory.org_settings.redactor()  # stored, classified and sent to an LLM only masked
        draft, edited = redactor.text(draft), redactor.text(edited)
        category, summary, details = classify(draft, edited)
        signal = Signal(
            id=f"sig-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}",
            content_type=folded_content_type(content_type), author=author, category=category, summary=summary,
            details=details, classified_by="rules", awaiting_llm=self.llm is not None,
            draft=draft, edited=edited, at=utcnow(),
        )  # fmt: skip
        if self.llm is not None:
            self.memory.admit("llm_behind")  # refused (429/503) before it is stored when the LLM pool has no room
        # Settling with the LLM is recorded with the signal (`grandbo.redrive`): done even if this process dies.
        settling = [NewWork(LEARNING_SETTLE, signal.id, {"actor": actor})] if self.llm is not None else []
        self._store(signal, actor, expected=0, work=settling)
        if self.llm is not None:
            settled: list[tuple[Signal, Note | None]] = []
            if (
                self.memory.defer_work(LEARNING_SETTLE, signal.id,
                                       lambda: settled.append(self.after_edit(signal.id, actor)), waits_on_llm=True)
                and settled
            ):  # fmt: skip
                return settled[0]
            return signal, None
        try:  # the signal is stored: a fold that fails now is done by the category's next one
            self.settle_awaiting(older_than=ABANDONED_AFTER, actor=actor)
            return signal, self._fenced_fold(signal.category, actor, signal.id)
        except GrandboError as error:
            log.warning("learning.fold_failed", org_id=self.memory.org, category=signal.category.value,
                        error=str(error)[:300])  # fmt: skip
            return signal, None

    def signal(self, signal_id: str) -> Signal:
        """One edit signal as it stands (awaiting the LLM, or settled)."""
        found = self._find(signal_id)
        if found is None:
            raise NotFoundError(f"No edit signal {signal_id!r} in org {self.memory.org!r}.",
                                detail={"signal_id": signal_id})  # fmt: skip
        return found[1]

    def _find(self, signal_id: str) -> tuple[Document, Signal] | None:
        doc = self.documents.get(SIGNALS, signal_id)
        return None if doc is None else (doc, read_record(Signal, doc, "edit signal"))

    def settle(self, signal_id: str, *, actor: str = "learning") -> tuple[Signal, Note | None]:
        """Replace the rules' classification of a signal awaiting the LLM by the LLM's (the rules' stays when it
        fails, is slow or answers nonsense; logged), then fold what it completes. Settling is one write guarded
        by the signal's version: a signal settled meanwhile (by another process) comes back as it is, no note."""
        signal = self.signal(signal_id)
        if not signal.awaiting_llm:
            return signal, None
        category, summary, by = signal.category, signal.summary, signal.classified_by
        if self.llm is not None:
            category, summary, by = classified_by_llm(self.llm, self.memory.org, signal.draft, signal.edited,
                                                      (category, summary, by))  # fmt: skip
        asked = category, summary, by

        # The LLM may think for long: the signal is read again (and again after a write landed meanwhile: an
        # erasure's gives it a new version), and only its classification changes. Writing back the copy the LLM
        # saw would restore a text erased meanwhile, and the LLM's summary may quote it: the rules' answer on the
        # erased text stays.
        def attempt() -> Signal | None:
            found = self._find(signal_id)
            if found is None or not found[1].awaiting_llm:  # purged, or settled by another process meanwhile
                return None
            (fresh_doc, fresh), (category, summary, by) = found, asked
            if (fresh.draft, fresh.edited) != (signal.draft, signal.edited):
                log.info("learning.llm_classification_discarded", org_id=self.memory.org, signal_id=signal_id,
                         reason="the signal's text was erased while the LLM classified it")  # fmt: skip
                category, summary, by = fresh.category, fresh.summary, fresh.classified_by
            details = fresh.details if category is fresh.category else {}  # the rules' describe another change
            settled = fresh.model_copy(update={"category": category, "summary": summary, "details": details,
                                               "classified_by": by, "awaiting_llm": False})  # fmt: skip
            self._store(settled, actor, expected=fresh_doc.version)
            return settled

        if (settled := rewritten(attempt)) is None:
            found = self._find(signal_id)
            return (found[1] if found else signal), None
        return settled, self._fenced_fold(settled.category, actor, settled.id)

    def settle_awaiting(self, *, older_than: timedelta = timedelta(0), actor: str = "learning") -> int:
        """Settle the signals that have awaited the LLM for longer than `older_than` (by default every one; a
        signal another process is settling right now is then only asked of the LLM twice, and settles once).
        Every edit's write-behind settles those older than ABANDONED_AFTER, which a stopped process left.
        Return how many were settled here."""
        cutoff = utcnow() - older_than
        waiting = read_records(Signal, self.documents.find(SIGNALS, [AWAITING], by_write=True), "edit signal")
        settled = 0
        for signal in (s for s in waiting if s.at <= cutoff):
            try:
                self.settle(signal.id, actor=actor)
                settled += 1
            except GrandboError as error:  # the next round tries again; the signal stays stored
                log.warning("learning.settle_failed", org_id=self.memory.org, signal_id=signal.id,
                            error=str(error)[:300])  # fmt: skip
        if settled:
            log.info("learning.abandoned_signals_settled", org_id=self.memory.org, count=settled)
        return settled

    def after_edit(self, signal_id: str, actor: str) -> tuple[Signal, Note | None]:
        """The write-behind of an edit stored awaiting the LLM (idempotent: a settled signal stays as it is)."""
        settled = self.settle(signal_id, actor=actor)
        self.settle_awaiting(older_than=ABANDONED_AFTER, actor=actor)
        return settled

    def _store(self, signal: Signal, actor: str, expected: int | None = None, work: Sequence[NewWork] = ()) -> None:
        ref = AWAITING if signal.awaiting_llm else signal.category.value
        event = "edit.received" if signal.awaiting_llm else f"edit.{signal.category.value}"
        write = DocumentWrite(SIGNALS, signal.id, signal.model_dump(mode="json"), event, ref=ref,
                              expected_version=expected)  # fmt: skip
        self.documents.put([write], actor, work)

    def _fenced_fold(self, category: Category, actor: str, signal_id: str) -> Note | None:
        return self.memory.unerased.run(lambda: self._fold_due(category, actor, signal_id))

    def _fold_due(self, category: Category, actor: str, signal_id: str | None = None) -> Note | None:
        """Fold every complete group of FOLD_EVERY settled signals of `category` that no fold has taken yet,
        oldest first; return the note this call folded from the group holding `signal_id`, if any.

        The groups follow the category's settled signals in the store's write order (by the sequence number of
        each one's newest write: a settled signal is never written again, so its place never changes; never by
        its `at`, which another process's skewed clock sets). The category's cursor (the last signal folded)
        advances in the note's own transaction, guarded by its version: two processes folding one group at
        once write one note, and a fold whose process stopped is done by the category's next one. Run fenced
        (`_fenced_fold`, `grandbo.unerased`): a note worded from signals read before an erasure holds its text."""
        if category is Category.UNCLASSIFIED:  # kept, never folded
            return None
        mine = None
        for _ in range(FOLD_TRIES):
            cursor = self.documents.get(FOLDS, category.value)
            order, start, before = self._unfolded(category, cursor)
            while len(order) - start >= FOLD_EVERY:
                group = order[start : start + FOLD_EVERY]
                try:
                    folded = self._fold(category, group, before + start + FOLD_EVERY, cursor, actor)
                except NoteLimitError:  # the group waits, its cursor unmoved: folded once the limit is raised
                    log.warning("learning.note_limit", org_id=self.memory.org, category=category.value, most=self.most)
                    return mine
                if folded is None:
                    break  # another process folded this group first: read where it left the cursor
                note, cursor = folded
                start += FOLD_EVERY
                if note is not None and signal_id in note.signals:
                    mine = note
            else:  # no break: every complete group is folded
                return mine
        log.warning("learning.fold_contended", org_id=self.memory.org, category=category.value, tries=FOLD_TRIES)
        return mine

    def _unfolded(self, category: Category, cursor: Document | None) -> tuple[list[Signal], int, int]:
        """The category's settled signals in write order from the cursor's on (every one when there is none, or its
        signal is gone), the place of the first one no fold has taken, and how many were folded before the first.
        Each is read without its draft and edit (FOLD_KEYS): every edit read every signal of its category whole,
        ~400 of 160 KB took a small edit 202 ms (probe 19), growing with the signals kept."""
        at = read_record(FoldCursor, cursor, "fold cursor") if cursor is not None else None
        after = None
        if at is not None:  # a cursor without a sequence number of this org's: its signal's, read now
            current = at.seq is not None and at.epoch is not None and at.epoch == self._epoch()
            after = at.seq if current else self._written_at(at.through)
        docs = self.documents.find(SIGNALS, [category.value], by_write=True, keys=FOLD_KEYS, after=after)
        order = [s for s in read_records(Signal, docs, "edit signal", given=UNREAD) if not s.awaiting_llm]
        ids = [s.id for s in order]
        if at is None:
            # No fold since signals could await an LLM: the release before folded every complete group of the
            # signals it stored (they have no `awaiting_llm`, and come first in write order).
            older = {d.doc_id for d in docs if isinstance(d.data, dict) and "awaiting_llm" not in d.data}
            count = sum(1 for s in order if s.id in older)
            return order, count - count % FOLD_EVERY, 0
        if after is not None:  # those written after the cursor's signal (which was not written again: never read)
            start = ids.index(at.through) + 1 if at.through in ids else 0
            return order, start, at.folded - start
        if at.through in ids:
            return order, ids.index(at.through) + 1, 0
        log.warning("learning.fold_cursor_signal_unreadable", org_id=self.memory.org, signal_id=at.through)
        return order, min(at.folded, len(order)), 0  # the count it had then: the best guess left

    def _epoch(self) -> int | None:
        return self.documents.stamp([])[0]

    def _written_at(self, signal_id: str) -> int | None:
        """The sequence number of a signal's newest write (None: it is gone)."""
        return max((int(event["seq"]) for event in self.documents.history(SIGNALS, signal_id)), default=None)

    def signals(self, category: Category | None = None) -> list[Signal]:
        """The edit signals in the order the store wrote them (a signal's place is its newest write's, and a
        settled signal is never written again); with `category`, that category's settled ones (a signal awaiting
        the LLM is in none yet)."""
        docs = self.documents.find(SIGNALS, [category.value] if category else None, by_write=True)
        return read_records(Signal, docs, "edit signal")

    def _fold(
        self, category: Category, signals: Sequence[Signal], folded: int, cursor: Document | None, actor: str
    ) -> tuple[Note | None, Document] | None:
        """Fold one group: its note (None when no new rule comes of it) written with the cursor moved past it, in
        one transaction; None when the cursor moved meanwhile (another process folded the group)."""
        note = self._new_note(category, signals)
        through = signals[-1].id
        moved = FoldCursor(through=through, folded=folded, seq=self._written_at(through), epoch=self._epoch())
        advance = DocumentWrite(FOLDS, category.value, moved.model_dump(), "learning.folded", ref=category.value,
                                expected_version=cursor.version if cursor else 0)  # fmt: skip
        learned = [self._write(note, "note.learned", 0), counted(room_for_notes(self.documents, self.most,
                   self.memory.org), note.id)] if note else []  # fmt: skip
        try:
            cursor, *written = self.documents.put([advance, *learned], actor)
        except StaleWriteError:  # not an erasure's refusal (`_fenced_fold`), which folds again
            return None
        if note is None:
            return None, cursor
        saved = note.model_copy(update={"version": written[0].version})
        if saved.status == "active":
            self._archive_beyond_limit(saved, actor)
        else:
            log.info("learning.note_pending_review", org_id=self.memory.org, category=category.value, note_id=note.id)
        return saved, cursor

    def _new_note(self, category: Category, signals: Sequence[Signal]) -> Note | None:
        """The note a group teaches; None when it teaches nothing new (no wording, a rejected or known rule)."""
        types = {folded_content_type(s.content_type) for s in signals}  # older signals kept their case
        content_type = types.pop() if len(types) == 1 else None
        text = compose_note(category, signals, content_type) if all(s.details for s in signals) else ""
        if self.llm is not None:
            text = worded_by_llm(self.llm, self.memory.org, category, signals, text)
        if not text:  # neither the rules' details nor a model could word a rule
            log.info("learning.note_not_worded", org_id=self.memory.org, category=category.value)
            return None
        print_ = fingerprint(text)
        known = known_statuses(self.documents, print_)
        if "rejected" in known:
            log.info("learning.rejected_note_not_relearned", org_id=self.memory.org, category=category.value)
            return None
        if known & {*IN_FORCE, "pending"}:
            return None  # already known
        try:
            auto = self.memory.org_settings.auto_apply_learned()
        except UnreadableRecordError as error:  # turns nothing on: the note waits for review; the edit is kept
            log.warning("learning.setting_unreadable", org_id=self.memory.org, fields=error.detail["fields"])
            auto = False
        return Note(
            id=f"note-{utcnow().strftime('%Y%m%d%H%M%S%f')}-{secrets.token_hex(3)}", category=category,
            part=PROFILE_PART[category], text=text, content_type=content_type, signals=[s.id for s in signals],
            fingerprint=print_, created_at=utcnow(), status="active" if auto else "pending",
        )  # fmt: skip
