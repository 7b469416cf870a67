"""Words people and agents type, matched as their standards say: fixed lists whatever the case, content
types with their ASCII letters folded."""

from __future__ import annotations

from enum import StrEnum


class Vocabulary(StrEnum):
    """A word list people and agents type (kinds, statuses, scopes): matched whatever the case and the spaces
    around it (`Runbook`, ` SUCCEEDED `), as HTTP matches media types; always stored and shown lowercase."""

    @classmethod
    def _missing_(cls, value: object) -> Vocabulary | None:
        if isinstance(value, str):
            folded = value.strip().lower()
            return next((member for member in cls if member.value == folded), None)
        return None


def folded_word(value: object) -> object:
    """A typed word of a fixed list (`Literal` fields of request bodies and tool arguments) as the list
    spells it: trimmed and lowercased, as `Vocabulary` matches its members. Anything else passes unchanged,
    for the field's own validation to refuse."""
    return value.strip().lower() if isinstance(value, str) else value


def folded_content_type(content_type: str) -> str:
    """A content type (status-update, post-mortem) as it is stored and compared: trimmed, ASCII letters
    lowercased, so `Status-Update` is the same type. Only ASCII is folded because SQLite's lower() folds
    only ASCII, and both stores must find the same examples."""
    return content_type.strip().translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
