"""The review of learned notes: what admins see (the notes in force, those pending review, the rejected and archived
ones), what they do to a note (approve, edit, accept, reject, delete) and the room they make under
GRANDBO_NOTES_PER_ORG (`prune_notes`, `delete_note`). How notes are learned from edits is `tiers.learning`, whose
`Learning` this is a part of.

A rejected rule is never learned again: the rejection writes its fingerprint's digest beside the note
(`learning_model.refusal`), which no deletion of the note takes away, and which does not count as a note. So an
organization at its limit deletes its rejected and archived notes (their text) and learns again; a prune leaves the
pending notes and those in force, which an admin deletes one at a time (`delete_note`: its rule refused as a
rejection refuses it). An erasure of a word of the rule deletes its digest
too (`learning_model.refusals_erased`): the rule is forgotten, and taught again it waits for review anew.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grandbo.errors import InvalidInputError, NotFoundError
from grandbo.model import utcnow
from grandbo.pages import Mark
from grandbo.ports import DocumentWrite, OrgDocuments, Position
from grandbo.tiers.learning_model import (
    IN_FORCE,
    KEEP_PER_CATEGORY,
    NOTE_MAX,
    NOTES,
    REFUSED,
    Note,
    Pruned,
    note_ref,
    notes_of,
    notes_page,
    prune,
    refusal,
    reviewed_notes,
    rule_digest,
)
from grandbo.tiers.records import read_record
from grandbo.tiers.retry import rewritten

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory


class NoteReview:
    """The learned notes of one organization, as admins review them (a part of `tiers.learning.Learning`)."""

    memory: OrgMemory
    documents: OrgDocuments

    def notes(self, *, include_inactive: bool = False) -> list[Note]:
        """The notes in force (active or edited: what the context block carries); every one `include_inactive`."""
        return notes_of(self.documents, None if include_inactive else IN_FORCE)

    def page(
        self, statuses: tuple[str, ...] | None, n: int, before: Position
    ) -> tuple[list[tuple[Note, Mark]], Position]:
        """A page of the notes of `statuses` (None: all), the most recently written first (`notes_page`)."""
        return notes_page(self.documents, statuses, n, before)

    def pending(self) -> list[Note]:
        """Learned notes waiting for an admin's review; none of them reaches a prompt."""
        return notes_of(self.documents, ("pending",))

    def reviewed(self, limit: int) -> list[Note]:
        """The rejected and archived notes most recently written, up to `limit`, the newest first."""
        return reviewed_notes(self.documents, limit)

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
        """An admin rejects a learned note: it leaves the profile and is never learned again (its fingerprint's
        digest written with it: so even once the note is deleted, `prune_notes`; not once a word of it is erased)."""
        note = self._note(note_id)
        if note.status == "rejected":
            return note  # nothing changes: no new version, no history entry
        rejected = note.model_copy(update={"status": "rejected"})
        doc, _ = self.documents.put([self._write(rejected, "note.rejected", note.version), refusal(note.fingerprint)],
                                    actor)  # fmt: skip
        return rejected.model_copy(update={"version": doc.version})

    def delete_note(self, note_id: str, *, actor: str = "admin") -> str:
        """An admin deletes one learned note, whatever its status (one that cannot be read too): it leaves the
        context block or the review, its text goes (its history stays, where an erasure reaches it), and it no
        longer counts toward GRANDBO_NOTES_PER_ORG. Its rule is never learned again, as after a rejection: its
        fingerprint's digest is written in the same transaction, unless it is there already. Return the status it
        had. NotFoundError for an id this organization has no note of."""

        def delete() -> str:
            doc = self.documents.get(NOTES, note_id)
            if doc is None:
                raise NotFoundError(f"No learned note {note_id!r} in org {self.memory.org!r} (`grandbo notes list "
                                    "--all` lists every one).", detail={"note_id": note_id})  # fmt: skip
            data = doc.data if isinstance(doc.data, dict) else {}
            print_ = data.get("fingerprint")
            writes = [DocumentWrite(NOTES, note_id, None, "note.deleted", expected_version=doc.version)]
            if isinstance(print_, str) and print_ and self.documents.get(REFUSED, rule_digest(print_)) is None:
                writes.insert(0, refusal(print_))
            self.documents.put(writes, actor)
            return str(data.get("status", "active"))

        return rewritten(delete, what=f"learned note {note_id!r}")

    def prune_notes(self, *, actor: str = "admin") -> Pruned:
        """An admin deletes the rejected and archived notes, to make room under GRANDBO_NOTES_PER_ORG: a rejected
        rule stays unlearned (its digest kept, not counted); pending notes and those in force stay (`prune`)."""
        return prune(self.documents, actor)

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

    def _save(self, note: Note, event: str, actor: str) -> Note:
        (doc,) = self.documents.put([self._write(note, event, note.version)], actor)
        return note.model_copy(update={"version": doc.version})

    @staticmethod
    def _write(note: Note, event: str, expected: int) -> DocumentWrite:
        data = note.model_dump(mode="json", exclude={"version"})
        return DocumentWrite(NOTES, note.id, data, event, ref=note_ref(note.status, note.category),
                             expected_version=expected)  # fmt: skip
