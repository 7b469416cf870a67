"""The context block an agent's system prompt gets: who the organization is and how it writes.

One function assembles the explicit profile and every active learned note (all five categories)
into text, in a fixed order, without empty labels, within a size budget. The block changes only when
the profile or the notes change, so a prompt cache keyed on it stays valid; memories recalled for
the question at hand go into a separate block after it.

Precedence: what admins typed outranks what was learned. A learned vocabulary rule that prefers a
word the profile avoids, or replaces a word the profile prefers, is left out of the block and listed
in `ContextBlock.overridden`, with the reason, for an admin to review.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from grandbo.model import NO_VECTOR_VERDICT, PENDING_VERDICT
from grandbo.tiers.learning_model import Note
from grandbo.tiers.profile import Profile
from grandbo.words import folded_content_type

if TYPE_CHECKING:
    from grandbo.memory import OrgMemory
    from grandbo.model import RecallResult

PARTS = (("tone_style", "Tone and style"), ("vocabulary", "Vocabulary"), ("length_structure", "Length and structure"))
_PAIR = re.compile(r"'([^']+)' instead of '([^']+)'")


DEFAULT_BUDGET, MAX_BUDGET = 4000, 100_000  # characters of the profile part
# Why a recall with PENDING_VERDICT has no verdict, as every face says it (the note counts them).
WAITING_WORDS = "too many memories still wait for their vector, so the best cosine could miss a match among them"


class ContextBlock(BaseModel):
    profile: str = Field(description="The stable prefix: explicit profile, then learned notes.")
    recall: str = Field(
        "", description="With a topic: the verdict, then the memories under a heading that says how they relate."
    )
    verdict: str | None = Field(None, description="With a topic: seen before, no similar past incident, ...")
    overridden: list[str] = Field(default_factory=list, description="Learned notes the explicit profile overrides.")
    truncated: bool = Field(False, description="True when the budget cut lines off (lowest priority first).")

    @property
    def text(self) -> str:
        return self.profile + ("\n\n" + self.recall if self.recall else "")


def conflict(note: Note, profile: Profile) -> str | None:
    """Why the explicit profile overrides a learned note, or None."""
    preferred = {w.lower() for w in profile.voice.preferred_words}
    avoided = {w.lower() for w in profile.voice.avoided_words}
    for new, old in _PAIR.findall(note.text):
        if new.lower() in avoided:
            return f"the profile avoids '{new}'"
        if old.lower() in preferred:
            return f"the profile prefers '{old}'"
    return None


Line = tuple[bool, str]  # (is a label, text)


def _item(text: str) -> str:
    """One item of a section on its lines: a value's own line breaks become indented continuation lines, so a
    fact or a note that holds "Voice:\n- tone: rude" cannot pass for a section or an item of its own."""
    return "\n  ".join(part.strip() for part in text.splitlines() if part.strip())


def _section(title: str, lines: Sequence[str]) -> list[Line]:
    return [(True, f"{title}:"), *((False, _item(line)) for line in lines)] if lines else []


def assemble(
    profile: Profile,
    notes: Sequence[Note],
    owners: Sequence[str],
    *,
    content_type: str | None,
    budget: int,
) -> ContextBlock:
    """The profile block from its parts (pure: the same inputs give the same text)."""
    explicit: list[Line] = []
    explicit += _section("Organization", [f"- {key}: {value}" for key, value in sorted(profile.facts.items())])
    explicit += _section(
        "People",
        [
            f"- {p.name}" + (f", {p.role}" if p.role else "") + (f": {p.notes}" if p.notes else "")
            for p in profile.people
        ],
    )
    voice = profile.voice
    explicit += _section(
        "Voice",
        [
            line
            for line in (
                f"- tone: {', '.join(voice.tone)}" if voice.tone else "",
                f"- preferred words: {', '.join(voice.preferred_words)}" if voice.preferred_words else "",
                f"- words to avoid: {', '.join(voice.avoided_words)}" if voice.avoided_words else "",
                f"- sentences: {voice.sentence_style}" if voice.sentence_style else "",
            )
            if line
        ],
    )
    explicit += _section("Service owners", list(owners))
    overridden: list[str] = []
    learned: list[Line] = []
    for part, label in PARTS:
        lines = []
        for note in notes:
            wanted = folded_content_type(content_type) if content_type else None
            if note.part != part or (wanted and note.content_type and folded_content_type(note.content_type) != wanted):
                continue
            reason = conflict(note, profile)
            if reason:
                overridden.append(f"{note.id}: {note.text} ({reason})")
                continue
            lines.append(f"- {note.text}")
        learned += _section(f"{label} (learned from edits)", lines)
    # Explicit lines first, so no learned line takes room an explicit one needed. A line that does not fit in
    # what is left is dropped and the next ones still get their turn: one huge fact must not empty the block.
    # A label is written with the first line of its section that fits, so no label stands without a line.
    kept: list[str] = []
    used, truncated, title = 0, False, ""
    for is_label, text in [*explicit, *learned]:
        if is_label:
            title = text
            continue
        cost = len(text) + 1 + (len(title) + 1 if title else 0)
        if used + cost > budget:
            truncated = True
            continue
        kept += [title, text] if title else [text]
        used, title = used + cost, ""
    return ContextBlock(profile="\n".join(kept), overridden=overridden, truncated=truncated)


def build(
    memory: OrgMemory,
    *,
    content_type: str | None = None,
    topic: str | None = None,
    budget: int = DEFAULT_BUDGET,
    k: int = 5,
) -> ContextBlock:
    """The context block of an organization; with `topic`, recalled memories in a separate block."""
    topology = memory.catalog.topology()
    owners = [
        f"- {s.name}: owned by {', '.join(s.owners)}" + (f"; escalation: {s.escalation}" if s.escalation else "")
        for s in sorted(topology.services.values(), key=lambda s: s.name)
        if s.owners or s.escalation
    ]
    block = assemble(memory.profile.get(), memory.learning.notes(), owners, content_type=content_type,
                     budget=budget)  # fmt: skip
    if topic:
        result = memory.recall(topic, k)
        block.verdict, block.recall = verdict(result), recall_block(result)
    return block


def verdict(result: RecallResult) -> str:
    """The answer to "has this happened before?" in words, as every face says it."""
    if result.seen_before is None:
        if not result.hits:
            return "no matches"
        if result.calibration == NO_VECTOR_VERDICT:
            return (
                "no verdict (no cosine to weigh: the query could not be embedded, or no memory has a vector "
                "yet; matches by their words only)"
            )
        if result.calibration == PENDING_VERDICT:
            return f"no verdict ({WAITING_WORDS}; matches by both arms)"
        if result.calibration == "uncalibrated":
            return "uncalibrated (no verdict: the embedding model has no calibration)"
        return "ranked (no verdict for this arm)"
    return "seen before" if result.seen_before else "no similar past incident"


def recall_block(result: RecallResult) -> str:
    """The verdict first, then the memories under a heading that says what they are: an agent reads hits
    under "no similar past incident" as related reading, not as the precedent of this incident."""
    evidence = f" (evidence {result.evidence:.2f})" if result.evidence is not None else ""
    lines = [_item(f"- [{h.entry.id}] {h.entry.title}: {h.entry.body[:200]}") for h in result.hits]
    said = f"Verdict: {verdict(result)}{evidence}."
    if not lines:
        return f"{said} Nothing in memory matches this."
    heading = (
        "Relevant past memories:"
        if result.seen_before
        else "Weakly related memories (not precedent: none of them is this incident):"
        if result.seen_before is False
        else "Past memories, ranked by similarity only (check each before taking it as precedent):"
    )
    return "\n".join([said, heading, *lines])
