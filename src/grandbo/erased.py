"""What an erasure matches and what it leaves (`grandbo purge-text`, and the copies of a purged entry's text).

`erasure_pattern` is what an erasure of a text matches: the text in any case, and its words however they are
separated, as an edit's comparison writes them (`EDIT_WORD`); `sieves` and `erasure_probe` say how much of the
search the database may do first (a filter of the stored JSON text); `erase_text` rewrites a JSON value with every
match "[purged]", `entry_erased` without the copies it holds of a purged entry's text. Pure functions over text and
JSON, used by the tiers and by both stores.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

# The words of a text as an edit's comparison takes them (`tiers.edit_rules`): an edit signal's summary and details,
# and the note folded from it, hold a changed name as these words lowercased and joined by spaces ("Jane-Roe" as
# "jane roe", "José Müller" as "jos m ller"), so an erasure of the name erases them in that form too.
EDIT_WORD = re.compile(r"[A-Za-z0-9']+")
# What may stand between the words of such a form: none of them, and nothing JSON escapes (a quote, a backslash, a
# control character), so a document's stored JSON holds the form as its value does (`sieves`).
_EDIT_GAP = r"[^A-Za-z0-9'\"\\\x00-\x1f]+"
WORDS_MIN = 4  # letters of a text's words under which its words' form is not erased (it would erase words everywhere)
# Where such a form may start and end: not inside another word, so that `André` (its form `andr`) leaves `android`,
# and `Renée` (`ren e`) `children eat`. A form may start after a JSON escape (`\\n`: its `n` is no letter of the
# value), so that a document's stored JSON holds the form wherever its value does (`sieves`).
_EDIT_END = r"(?![A-Za-z0-9])"


def _edit_start(first: str) -> str:
    """Where a form whose first word is `first` (escaped) may start (`_EDIT_END`'s counterpart), checked once the
    word has matched, by looking behind it: a look-behind a pattern starts with is tried at every position of the
    text (Python's `re` skips ahead only to a case-insensitive pattern's first uncased character), which made an
    erasure of "kiss kiss" ten times slower than of "kiss". The same check: a look-behind must be of fixed width,
    and the word is (each of its characters matches one, in any case), the same characters it has just matched."""
    return rf"(?:(?<![A-Za-z0-9]{first})|(?<=\\[bfnrt]{first}))"


def _spelled(text: str) -> str | None:
    """The pattern of `text`'s words' form (`EDIT_WORD`) when it differs from the text itself: the words, any gap
    between them, whole (`_edit_start`, `_EDIT_END`); None when the text is one word, or its words hold under
    WORDS_MIN letters."""
    words = EDIT_WORD.findall(text)
    if sum(map(len, words)) < WORDS_MIN or words == [text]:
        return None
    first, *rest = map(re.escape, words)
    return f"{_EDIT_GAP.join([first + _edit_start(first), *rest])}{_EDIT_END}"


def erasure_pattern(text: str, *, exact: bool = False) -> re.Pattern[str]:
    """What an erasure of `text` (`grandbo purge-text`) matches: the text itself, in any case (Unicode simple
    case folding: `ACME`, `Acme` and `acme` alike) unless `exact`, and (unless `exact`) its words however they are
    separated, as an edit's comparison writes them (`EDIT_WORD`: `Jane-Roe` erases `jane roe` too)."""
    if exact:
        return re.compile(re.escape(text))
    spelled = _spelled(text)
    return re.compile(re.escape(text) if spelled is None else f"{re.escape(text)}|{spelled}", re.IGNORECASE)


def sieves(text: str) -> bool:
    """Whether `erasure_pattern(text)` finds the text in a document's stored JSON text wherever the document holds
    it: the text has no character JSON escapes (a quote, a backslash, a control character), so each of its
    characters is written as it is (the store's JSON leaves the rest, non-ASCII too, unescaped); nor does the gap
    between the words of its words' form (`_EDIT_GAP`)."""
    return not any(c in '"\\' or ord(c) < 0x20 for c in text)


def erasure_probe(text: str, *, exact: bool = False) -> str:
    """The longest run of `text` that the stored JSON of a record holding the text holds too, in a case the database
    folds as Python does: ASCII, no character JSON escapes, and none of the letters i, k and s, which Python's
    case-insensitive match also finds as a dotless i, the Kelvin sign and the long s; unless `exact`, within one of
    its words when the erasure matches its words' form too (`erasure_pattern`). "" (every record read) when the
    longest is under PROBE_CHARS. A filter an erasure asks the database for (`Dialect.folded`), then matches."""
    runs = re.split(r"[^\x20-\x7e]|[\"\\iksIKS]", text)
    if not exact and _spelled(text) is not None:
        runs = [word for run in runs for word in EDIT_WORD.findall(run)]
    longest = max(runs, key=len, default="")
    return longest if len(longest) >= PROBE_CHARS else ""


PROBE_CHARS = 3  # the shortest run of a text the database is asked to filter an erasure's reads by
PURGED_TEXT = "[purged]"


# A time as Grandbo writes one (an aware ISO 8601 timestamp): a document's shape, not anyone's text. Erasing
# the digits of a phone or card number from one made the document unreadable (every listing a traceback).
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def erase_text(value: Any, pattern: re.Pattern[str], *, own_id: str | None = None) -> Any:
    """`value` (JSON) with every match of `pattern` in its strings, keys included, replaced by "[purged]";
    timestamps and digests (`*_hash` fields: an API key's hash, which erasing would silently revoke) are left
    as they are, and so is the document's own id (`own_id`) in its top-level `id`: the store cannot rename a
    document, as a purged entry keeps its id, and an incident whose `id` no longer named it was listed under
    an id that found nothing."""
    erased = _erased(value, pattern)
    if own_id is not None and isinstance(value, dict) and value.get("id") == own_id and isinstance(erased, dict):
        erased["id"] = own_id
    return erased


def _erased(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return value if _STAMP.fullmatch(value) else pattern.sub(PURGED_TEXT, value)
    if isinstance(value, list):
        return [_erased(item, pattern) for item in value]
    if isinstance(value, dict):
        return {
            _erased(key, pattern): item if str(key).endswith("_hash") else _erased(item, pattern)
            for key, item in value.items()
        }
    return value


ERASURES = "erasures"
"""The collection of the erasures' audit records. A purge of text writes one, and so does a purge of an entry that
rewrote copies of its text in documents. Both rewrite documents in place, each at its next version but without an
event of its own (`store.sql.erasing.BUMPED`), so a collection's version does not move: a reader that keeps an org's
documents reads them again when this collection's version moves."""


def entry_erased(value: Any, entry_id: str | Collection[str]) -> Any:
    """`value` (JSON: a document, or an event of its history) without the copies it holds of entry `entry_id`'s text (of
    each entry, given several ids: one walk for a batch of purges), once the entry is purged: a received alert keeps
    what recall and its plan said, quoting the memories they rest on. Each copy is known by its shape, not by its text
    (a kept body is cut short; a plan quotes a line of it): a memory (`id`, `kind`, `title`, `body`) reads as the purged
    entry does (title "[purged]", no body, tags or meta); a citation (`rank`) or runbook suggestion (`win_rate`) of it
    loses its title and steps; a mechanism or a narrative step citing it (`cites`, `text`) its text, and a narrative
    with such a step its summary (the LLM wrote it from them). Anything else, ids included, is left as it is."""
    return _entries_erased(value, frozenset([entry_id] if isinstance(entry_id, str) else entry_id))


def _cites(value: Any, ids: frozenset[str]) -> bool:
    return isinstance(value, list) and any(isinstance(cited, str) and cited in ids for cited in value)


def _entries_erased(value: Any, ids: frozenset[str]) -> Any:
    if isinstance(value, list):
        return [_entries_erased(item, ids) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _entries_erased(item, ids) for key, item in value.items()}
    if (
        isinstance(out.get("id"), str)
        and out["id"] in ids
        and "title" in out
        and ({"kind", "body"} <= out.keys() or {"rank", "win_rate"} & out.keys())
    ):
        out["title"] = PURGED_TEXT
        for key, empty in (("body", ""), ("tags", []), ("meta", {}), ("steps", [])):
            if key in out:
                out[key] = empty
    if _cites(out.get("cites"), ids) and isinstance(out.get("text"), str):
        out["text"] = PURGED_TEXT
    steps = out.get("steps")
    if (
        isinstance(out.get("summary"), str)
        and isinstance(steps, list)
        and any(isinstance(step, dict) and _cites(step.get("cites"), ids) for step in steps)
    ):
        out["summary"] = PURGED_TEXT
    return out
