"""Migration 33, written once for both backends: whether an outcome document is odd (`documents.outcome_odd`), derived
from its data by the database on every write and, for the documents an older release left, once by the migration.

The effectiveness ledger is counted by the store (`OrgDocuments.tally`) instead of reading every outcome whole, and a
document `Outcome` refuses (no time, a rating "up", a service 5: an older release's) was counted while the whole read
left it out (1/2 against 1/1; a service 5 on Postgres only: review 24b MEDIUM 4). An outcome is odd unless each field
holds a value of a shape `Outcome` surely reads as the store reads it (`OUTCOME_SHAPES`: what this release writes);
a tally counts the odd ones apart and hands them up whole, for the ledger to read with the model itself, which keeps
the readable ones (" Failed ", a time with a space) and leaves the others out, as the whole read does. The shapes are
sure, not complete: a value outside them may still read.

Checking every document's shapes at each count made the first count 1.4-4.8x slower at 100,000 outcomes; here a
write pays one check of its own document, and a count reads the few odd ones from a partial index of them. Postgres
keeps the column stored (`documents` rewritten once, under a lock every org's writes wait for: run `grandbo migrate`
when that wait is acceptable), SQLite virtual (it adds no stored one to a table), computed as its index is written.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

COLUMN = "outcome_odd"
INDEX = "documents_odd_outcomes"
OUTCOMES = "outcome"  # `tiers.operations.OUTCOMES`, as landed


class Shape(Enum):
    ABSENT = "absent"
    """No such key."""
    NULL = "null"
    """JSON null, or no such key."""
    TEXT = "text"
    """Any JSON string."""
    SECONDS = "seconds"
    """A JSON number from 0 to the largest finite double (no sign, no NaN, no infinity)."""
    THUMB = "thumb"
    """The JSON integer -1, 0 or 1."""
    TIME = "time"
    """A JSON string of an ISO 8601 date (2024-01-31), or date and time to the second or the microsecond
    (2024-01-31T23:59:59.000001), with Z, an offset (+05:30, up to 23:59) or none: a real day of the years 2 to 9998
    (a whole UTC day from the calendar's ends, which no offset passes)."""


OUTCOME_SHAPES: dict[str, tuple[Shape | str, ...]] = {
    "seq": (Shape.ABSENT,),
    "runbook_id": (Shape.TEXT,),
    "kind": ("recommended", "executed", "succeeded", "failed", "rated"),
    "incident_id": (Shape.NULL, Shape.TEXT),
    "service": (Shape.NULL, Shape.TEXT),
    "time_to_mitigate_s": (Shape.NULL, Shape.SECONDS),
    "rating": (Shape.NULL, Shape.THUMB),
    "comment": (Shape.ABSENT, Shape.TEXT),
    "actor": (Shape.ABSENT, Shape.TEXT),
    "at": (Shape.TIME,),
}
"""For each field of `Outcome` (`org_id` is given), what its value may be for the store to count the document as it
is: one of these shapes, or a str: that JSON string. As landed: shapes that change are a migration of their own
(tests/test_ledger_odd_outcomes.py holds every field of `Outcome` to a line here)."""


class Spelling(NamedTuple):
    """What the backends spell apart in the check."""

    value: str  # the JSON value at a key of `data`: its JSON text or jsonb, which a literal of JSON text equals alike
    is_text: str  # that a `value` is a JSON string, a format of it
    is_number: str  # that a `value` is a JSON number, a format of it
    quoted: str  # a JSON string's text with its quotes, a format of its `value`
    like: str  # `GLOB` (classes such as [0-9], anchored) or `~`, a regular expression
    numeric: str  # the type a JSON number's text is cast to for a comparison
    checked: str  # the column's expression, a format of the check: only outcomes, only JSON


SQLITE = Spelling(
    value="(data -> '$.{}')", is_text="substr({}, 1, 1) = '\"'",
    is_number="substr({}, 1, 1) IN ('-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9')", quoted="{}", like="GLOB",
    numeric="REAL", checked=f"CASE WHEN collection = '{OUTCOMES}' AND json_valid(data) THEN NOT (({{}}) IS TRUE) "
    "ELSE FALSE END",
)  # fmt: skip
POSTGRES = Spelling(
    value="(data #> '{{{}}}')", is_text="jsonb_typeof({}) = 'string'", is_number="jsonb_typeof({}) = 'number'",
    quoted="('\"' || ({} #>> '{{}}') || '\"')", like="~", numeric="numeric",
    checked=f"collection = '{OUTCOMES}' AND NOT (({{}}) IS TRUE)",
)  # fmt: skip

LARGEST = "1.7976931348623157e308"  # the largest finite double: past it a number reads as infinity
# ISO 8601 as Shape.TIME takes it, by its JSON text's length (quotes included): 9 a digit, ± a sign.
DAY, SECOND = '"9999-99-99', "T99:99:99"
TIMES = {len(text): text for text in [f'{DAY}"'] + [f'{DAY}{SECOND}{fraction}{zone}"' for fraction in ("", ".999999")
                                                    for zone in ("", "Z", "±99:99")]}  # fmt: skip
# The same forms as one regular expression with the ranges of each field (years 2 to 9998), where the backend has one.
TIME_RE = ('^"(?!000[01]|9999)[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])(T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5]'
           '[0-9]([.][0-9]{6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?"$')  # fmt: skip


def _number(text: str, at: int | str) -> str:
    """The two digits at `at` (1-based) of a JSON text, as an integer."""
    return f"CAST(substr({text}, {at}, 2) AS INTEGER)"


def _rest(number: str, by: int) -> str:
    """The rest of an integer's division by `by` (no `%`: psycopg may read it as a parameter's mark)."""
    return f"({number} - {number} / {by} * {by})"


def _time(s: Spelling, value: str) -> str:
    """That the JSON value `value` is a time of Shape.TIME: a string whose JSON text is one of TIMES, each field in its
    range, and its day one of its month's (counted by month and leap year; from the 29th). Digits are read only where
    the form has them (CASEs: Postgres may evaluate the terms of an AND in any order, and its cast of a letter would
    fail the write). Postgres matches one regular expression; SQLite's GLOB has no alternatives: a form by length."""
    v = s.quoted.format(value)
    year, month, day = f"CAST(substr({v}, 2, 4) AS INTEGER)", _number(v, 7), _number(v, 10)
    leap = f"CASE WHEN {_rest(year, 4)} = 0 AND ({_rest(year, 100)} <> 0 OR {_rest(year, 400)} = 0) THEN 1 ELSE 0 END"
    days = f"CASE {month} WHEN 2 THEN 28 + {leap} ELSE 30 + {_rest(f'({month} + {month} / 8)', 2)} END"
    of_month = f"WHEN {day} < 29 THEN TRUE ELSE {day} <= ({days}) END"
    if s.like == "~":
        return f"CASE WHEN NOT {s.is_text.format(value)} THEN FALSE WHEN NOT {v} ~ '{TIME_RE}' THEN FALSE {of_month}"
    forms = " ".join(f"WHEN {size} THEN {v} {s.like} '{template.replace('9', '[0-9]').replace('±', '[+-]')}'"
                     for size, template in TIMES.items())  # fmt: skip
    offset = (f"CASE WHEN substr({v}, length({v}) - 6, 1) IN ('+', '-') THEN {_number(v, f'length({v}) - 5')} <= 23 "
              f"AND {_number(v, f'length({v}) - 2')} <= 59 ELSE TRUE END")  # fmt: skip
    clock = f"{_number(v, 13)} <= 23 AND {_number(v, 16)} <= 59 AND {_number(v, 19)} <= 59 AND {offset}"
    fields = f"{year} BETWEEN 2 AND 9998 AND {month} BETWEEN 1 AND 12 AND {day} >= 1"
    return (f"CASE WHEN NOT {s.is_text.format(value)} THEN FALSE WHEN NOT (CASE length({v}) {forms} ELSE FALSE END) "
            f"THEN FALSE WHEN NOT ({fields} AND CASE WHEN length({v}) = 12 THEN TRUE ELSE {clock} END) THEN FALSE "
            f"{of_month}")  # fmt: skip


def _of(s: Spelling, v: str, shape: Shape | str) -> str:
    """That the JSON value `v` (NULL: no such key) is of `shape`."""
    if isinstance(shape, str):
        return f"{v} = '\"{shape}\"'"
    return {
        Shape.ABSENT: f"{v} IS NULL",
        Shape.NULL: f"({v} IS NULL OR {v} = 'null')",
        Shape.TEXT: s.is_text.format(v),
        Shape.SECONDS: f"CASE WHEN {s.is_number.format(v)} THEN CAST({v} AS {s.numeric}) BETWEEN 0 AND {LARGEST} "
        "ELSE FALSE END",
        Shape.THUMB: f"{v} IN ('1', '-1', '0')",
        Shape.TIME: _time(s, v),
    }[shape]


def odd(s: Spelling) -> str:
    """The column's expression: an outcome document (of JSON) whose fields are not each of one of their shapes."""
    shaped = " AND ".join(
        "(" + " OR ".join(f"({_of(s, s.value.format(key), shape)})" for shape in allowed) + ")"
        for key, allowed in OUTCOME_SHAPES.items()
    )
    return s.checked.format(shaped)


def migration(s: Spelling, stored: bool) -> tuple[int, str, list[str]]:
    """Migration 33 as each backend's list holds it: the column (every document's computed as it is added: Postgres
    writes it, SQLite's index is built from it) and a partial index of the odd outcomes, by ref as a count seeks."""
    kind = "boolean" if stored else "INTEGER"
    return (
        33,
        "an outcome document the ledger's model may not read as stored is flagged, and counted apart",
        [
            f"ALTER TABLE documents ADD COLUMN {COLUMN} {kind} GENERATED ALWAYS AS ({odd(s)}) "
            f"{'STORED' if stored else 'VIRTUAL'}",
            f"CREATE INDEX {INDEX} ON documents (org_id, collection, ref) WHERE {COLUMN}",
        ],
    )
