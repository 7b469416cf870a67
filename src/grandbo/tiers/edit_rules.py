"""How an edit is read: the deterministic rules that classify a draft's edit (learning's fallback when no LLM
is configured, and the details a note is worded from).

The category comes from these rules, tried in order (the first that applies wins):

1. structure: the shape changed: paragraphs, bullet or numbered lines, or headings were added or removed.
2. length: the word count changed by 30% or more.
3. tone: tone markers were added or removed: exclamation marks, hedges (maybe, perhaps, I think...),
   apologies (sorry, unfortunately...), intensifiers (very, really, super...), blame words.
4. vocabulary: words were swapped one for one (at most three words replaced by at most three), touching
   no more than 30% of the text.
5. style: anything else: sentence length, punctuation, capitalization, contractions.

An edit too large to compare within a bounded amount of work is `unclassified` (kept, never folded).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from typing import Any

from grandbo.erased import EDIT_WORD
from grandbo.errors import InvalidInputError
from grandbo.words import Vocabulary

# Words a side the vocabulary rule hands difflib past the common start and end: its cost grows with the square
# of repeated words (a 100,000-character rewrite took ~12 s of CPU; any write key may send one).
DIFF_WORDS = 1_000


class Category(Vocabulary):
    TONE = "tone"
    STYLE = "style"
    VOCABULARY = "vocabulary"
    LENGTH = "length"
    STRUCTURE = "structure"
    UNCLASSIFIED = "unclassified"  # kept, never folded: an edit too large for the rules to compare (DIFF_WORDS)


# Tone markers, written for this project.
HEDGES = {"maybe", "perhaps", "possibly", "might", "hopefully", "somewhat", "probably", "kind of", "sort of", "i think",
          "i believe", "i feel", "just"}  # fmt: skip
APOLOGIES = {"sorry", "apologize", "apologise", "apologies", "unfortunately", "regret", "regrettably"}
INTENSIFIERS = {"very", "really", "extremely", "super", "totally", "incredibly", "absolutely", "hugely", "awesome",
                "amazing"}  # fmt: skip
BLAME = {"fault", "blame", "careless", "negligent", "mistake", "mistakes", "failed to", "should have"}
TONE_WORDS = HEDGES | APOLOGIES | INTENSIFIERS | BLAME
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def _words(text: str) -> list[str]:
    return [w.lower() for w in EDIT_WORD.findall(text)]


def _shape(text: str) -> dict[str, int]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return {
        "paragraphs": len([p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]),
        "bullets": sum(1 for line in lines if re.match(r"^[-*•]\s", line)),
        "numbered": sum(1 for line in lines if re.match(r"^\d+[.)]\s", line)),
        "headings": sum(1 for line in lines if line.startswith("#") or (line.endswith(":") and len(line) < 60)),
    }


def _markers(text: str) -> Counter[str]:
    lowered = f" {' '.join(_words(text))} "
    found: Counter[str] = Counter({"!": text.count("!")} if "!" in text else {})
    for marker in TONE_WORDS:
        count = lowered.count(f" {marker} ")
        if count:
            found[marker] = count
    return found


def _sentence_lengths(text: str) -> float:
    sentences = [s for s in _SENTENCE.findall(text) if _words(s)]
    return sum(len(_words(s)) for s in sentences) / len(sentences) if sentences else 0.0


def _middles(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """The part of each word list between their common start and their common end."""
    start = end = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return old[start : len(old) - end], new[start : len(new) - end]


def classify(draft: str, edited: str) -> tuple[Category, str, dict[str, Any]]:
    """The deterministic classifier: category, one-line summary and the details learning needs."""
    before, after = _shape(draft), _shape(edited)
    if before != after:
        changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        shape = ", ".join(f"{k} {a}->{b}" for k, (a, b) in changed.items())
        return Category.STRUCTURE, f"changed the shape ({shape})", {"shape": changed}
    old_words, new_words = _words(draft), _words(edited)
    ratio = (len(new_words) - len(old_words)) / max(1, len(old_words))
    if abs(ratio) >= 0.30:
        verb = "cut" if ratio < 0 else "added"
        return Category.LENGTH, f"{verb} {abs(ratio):.0%} of the words", {"ratio": round(ratio, 3)}
    removed = _markers(draft) - _markers(edited)
    added = _markers(edited) - _markers(draft)
    if removed or added:
        parts = []
        if removed:
            parts.append("removed " + ", ".join(f"'{m}'" for m in sorted(removed)))
        if added:
            parts.append("added " + ", ".join(f"'{m}'" for m in sorted(added)))
        return Category.TONE, "; ".join(parts), {"removed": sorted(removed), "added": sorted(added)}
    swaps, touched, limit = [], 0, 0.30 * max(1, len(old_words))
    # A word one side has more of is touched by some change: past the limit no diff can make it vocabulary.
    unmatched = Counter(old_words)
    unmatched.subtract(new_words)
    if max(sum(n for n in unmatched.values() if n > 0), -sum(n for n in unmatched.values() if n < 0)) <= limit:
        a, b = _middles(old_words, new_words)
        if len(a) > DIFF_WORDS or len(b) > DIFF_WORDS:
            why = f"{len(a)} and {len(b)} words differ from the first change to the last, past the {DIFF_WORDS}"
            return Category.UNCLASSIFIED, f"kept unclassified: {why} compared", {"differing_words": [len(a), len(b)]}
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if op != "equal":
                touched += max(i2 - i1, j2 - j1)
            if op == "replace" and i2 - i1 <= 3 and j2 - j1 <= 3:
                swaps.append((" ".join(a[i1:i2]), " ".join(b[j1:j2])))
    if swaps and touched <= limit:
        pairs = ", ".join(f"'{a}' -> '{b}'" for a, b in swaps[:3])
        return Category.VOCABULARY, f"replaced {pairs}", {"swaps": swaps}
    old_len, new_len = _sentence_lengths(draft), _sentence_lengths(edited)
    if draft.strip() == edited.strip():
        raise InvalidInputError("The edited version is identical to the draft: there is nothing to learn.", detail={})
    return (
        Category.STYLE,
        f"sentences of {old_len:.0f} -> {new_len:.0f} words" if abs(old_len - new_len) >= 1 else "restyled",
        {"sentence_words": [round(old_len, 1), round(new_len, 1)]},
    )


def fingerprint(text: str) -> str:
    return " ".join(_words(text))
