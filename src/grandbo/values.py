"""What both stores can keep: the checks of times, text and identifiers that every value type and face shares.
No I/O here."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

_IDENTIFIER = re.compile("^[^\\s\x00\ud800-\udfff]{1,128}$")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# What both backends store and read back: Postgres keeps timestamptz far beyond these, but Python reads only
# years 1..9999, and a value at the very edge overflows once shown in another time zone; a day of margin.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
MAX_META_DEPTH = 32


def check_timestamp(value: datetime, what: str) -> datetime:
    """`value` (naive means UTC) if both backends can store and read it back, else a ValueError naming `what`."""
    aware = utc(value)
    try:
        inside = EARLIEST <= aware.astimezone(UTC) <= LATEST
    except (OverflowError, ValueError):
        inside = False
    if not inside:
        raise ValueError(
            f"{what} {value.isoformat()} is outside what a store keeps ({EARLIEST.date()} to {LATEST.date()} UTC); "
            "give a real date"
        )
    return aware


def text_problem(value: Any, *, max_depth: int = MAX_META_DEPTH) -> str | None:
    """Why a JSON-like value cannot be stored the same way on both backends (None when it can).

    Refused everywhere, so that what one backend accepts the other loads: a NUL character (Postgres text and
    jsonb cannot hold it), a lone surrogate (not encodable as UTF-8), and nesting deeper than `max_depth`.
    Walks iteratively, so a hostile depth cannot exhaust the stack: first a level at a time with the text searched
    once for all of its strings (`_clean`), then, only when that finds something, item by item for the problem met
    first. An alert's kept recall and plan (about 4,000 values) took 4 ms a write item by item, a tenth of a large
    org's alert triage.
    """
    if _clean(value, max_depth):
        return None
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "contains NaN or Infinity, which JSON cannot carry; send a finite number, or the word as a string"
        if isinstance(item, str):
            if "\x00" in item:
                return "contains a NUL character (\\x00), which a Postgres store cannot keep; remove it"
            if _SURROGATE.search(item):
                return "contains a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not valid text"
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return f"is nested deeper than {max_depth} levels"
            children = [*item, *item.values()] if isinstance(item, dict) else item  # a dict's keys are text too
            stack.extend((child, depth + 1) for child in children)
    return None


_PLAIN = frozenset({int, bool, type(None)})


def _clean(value: Any, max_depth: int) -> bool:
    """Whether `value` has none of `text_problem`'s problems: each level's containers opened at once, every
    string kept and searched in one joined text (joining makes no code point and loses none; only a surrogate
    fails to encode as UTF-8, and an ASCII text holds none)."""
    texts: list[str] = []
    level, depth = [value], 0
    while level:
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is str:
                texts.append(item)
            elif kind is dict or kind is list or kind is tuple:
                if depth >= max_depth:
                    return False
                below += item
                if kind is dict:
                    below += item.values()
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif kind in _PLAIN:
                continue
            elif isinstance(item, str | dict | list | tuple | float):  # a subclass: as the item-by-item walk
                return False
        level, depth = below, depth + 1
    text = "".join(texts)
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def checked_text(value: Any) -> Any:
    """`value` if `text_problem` finds nothing, else a ValueError with the problem."""
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


ECHOED_CHARS = 60  # of a value a message quotes back (`echoed`)


def echoed(value: str) -> str:
    """`value` quoted as a message says it back: whole when short, else its first ECHOED_CHARS characters, "…" and
    its length (a 3,000-character key id was echoed whole, filling the terminal)."""
    if len(value) <= ECHOED_CHARS:
        return repr(value)
    return f"{value[:ECHOED_CHARS] + '…'!r} ({len(value):,} characters)"


def identifiers(values: list[str], what: str) -> list[str]:
    """The values stripped, each once in the order given, or ValueError naming the first that is not one token of
    printable text. Linear: a request's body is validated on the server's event loop, and a list kept unique by
    searching it held every org's requests for 15 s at 50,000 names (probe 18)."""
    cleaned: dict[str, None] = {}
    for value in values:
        value = value.strip()
        if not _IDENTIFIER.match(value):  # no NUL, no lone surrogate: `text_problem`'s refusals, in the one match
            raise ValueError(
                f"{what} {value!r} must be one token of printable text without spaces, at most 128 characters"
            )
        cleaned[value] = None
    return list(cleaned)


MAX_META_BYTES = 65_536  # an entry's meta as JSON, on every face (an import's line has no request limit)


def iso_8601(value: Any) -> Any:
    """A time as given, when it is written as one; pydantic alone reads a number (or a string of digits) as seconds
    or milliseconds since 1970 by its size, so 99999999999 became 1973-03-03."""
    if value is None or isinstance(value, datetime) or (isinstance(value, str) and _ISO_DATE.match(value.strip())):
        return value
    raise ValueError(f"must be an ISO 8601 time such as 2026-05-01T12:00:00Z, not {str(value)[:40]!r}")


# A sender's "no time": Go renders an unset time.Time as 0001-01-01T00:00:00Z (in another zone 0000-12-31...
# or 0001-01-01T05:00..., plus a duration a later year-1 time), as Alertmanager's endsAt and many Go templates and
# CI tools send it; a zero Unix timestamp formatted is 1970-01-01T00:00:00Z (`date -d @0`, `new Date(0)`).
_GO_ZERO = re.compile(r"\s*000[01]-")
UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unset_time(value: Any) -> str | None:
    """What a time sent as text is when it is a sender's way of writing "no time" ("Go's zero time", "the Unix
    epoch"), else None (a real time, or no text). Every webhook reads such a time as absent, never as a date."""
    if not isinstance(value, str):
        return None
    if _GO_ZERO.match(value):
        return "Go's zero time"
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    try:
        return "the Unix epoch" if utc(parsed) == UNIX_EPOCH else None
    except ValueError:  # a day off the calendar in UTC: a real (if refused) time, not this
        return None


def utc(value: datetime) -> datetime:
    """A time given without a zone is UTC, on every face (compared with the store's times, which all have one). One
    whose offset puts it past the calendar's ends in UTC (0001-01-01T00:00+01:00) is a ValueError: every later
    comparison or conversion would overflow."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    try:
        aware.astimezone(UTC)
    except OverflowError as error:
        raise ValueError(
            f"{value.isoformat()} falls outside the calendar in UTC; give a time in years 1 to 9999"
        ) from error
    return aware


IsoTime = Annotated[datetime, BeforeValidator(iso_8601), AfterValidator(utc)]


class NotJsonNumber(ValueError):
    """A number JSON has no such thing as, which Python's parser reads anyway; its message is the number as written
    (with why, for one too large for a float)."""


def constant_refused(name: str) -> Any:
    """`json.loads`'s `parse_constant`: NaN, Infinity and -Infinity are NotJsonNumber."""
    raise NotJsonNumber(f"{name} (JSON has no such number, though Python's parser reads it)")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise NotJsonNumber(f"{text[:40]} (too large for a number: it reads as Infinity)")
    return number


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:  # over Python's 4,300 digits: "an error parsing the body", of a body that is JSON
        digits = f"{len(text):,}"
        raise NotJsonNumber(f"a number of {digits} digits (valid JSON, but longer than a number is read)") from None


def undecodable(error: UnicodeDecodeError) -> str:
    """What is wrong with a JSON body whose bytes do not decode (Latin-1 sent as `charset=latin-1`: JSON is read as
    UTF-8, or UTF-16/32 found by its first bytes, whatever the charset says), naming the first bad byte and where."""
    byte = error.object[error.start : error.start + 1].hex()
    return f"the body is not {error.encoding.upper()}: byte 0x{byte} at position {error.start} is not valid there"


UNDECODABLE_REMEDY = "Send the body encoded as UTF-8 (a charset in its Content-Type is not read: JSON is UTF-8)."


class RepeatedKey(ValueError):
    """A JSON object naming a key more than once (`strict_json(..., unique_keys=True)`); its message is the key."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    named = dict(pairs)
    if len(named) < len(pairs):
        seen: set[str] = set()
        raise RepeatedKey(next(key for key, _ in pairs if key in seen or seen.add(key)))  # type: ignore[func-returns-value]
    return named


def strict_json(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """`json.loads` refusing, with NotJsonNumber, NaN, Infinity and -Infinity, a number so large that Python
    reads it as Infinity (1e400 in an Alertmanager annotation was kept as the text "inf", in an `import-from jsonl`
    title as a memory titled "inf"), and a whole number longer than Python reads; `unique_keys`: an object naming a
    key twice too, with RepeatedKey (Python keeps the last value silently)."""
    return json.loads(text, parse_constant=constant_refused, parse_float=_finite, parse_int=_whole,
                      object_pairs_hook=_unique if unique_keys else None)  # fmt: skip
