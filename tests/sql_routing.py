"""Which tenant tables a SQL statement ties to one organization, table reference by table reference
(`tests/test_postgres_org_statements.py`).

A reference is a tenant table after FROM, JOIN, UPDATE, INTO, USING or a comma, under its alias if it has one. It
is tied to one org by rows written with their `org_id` (`INSERT INTO t (..., org_id, ...)`), by a condition on its
own `org_id` (`alias.org_id = %s`, or an unqualified `org_id = %s` in its own query: the same subquery, not one
nested in it or around it), or by a join on `org_id` with a reference that is (`USING (org_id ...)`,
`a.org_id = b.org_id`). Counting the conditions of the whole statement against its tables passed a statement
whose two conditions both named one table and none the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

PARAM = r"(?:%s|%\(\w+\)s)"
LITERAL = re.compile(r"'(?:[^']|'')*'")
QUERY = re.compile(r"\b(?:FROM|UPDATE|INTO)\b")
# The words that may follow a table where an alias could: a table followed by one of them has no alias.
KEYWORDS = frozenset(
    "AS CROSS DEFAULT EXCEPT FOR FULL GROUP HAVING INNER INTERSECT JOIN LEFT LIMIT NATURAL OFFSET ON ONLY ORDER "
    "RETURNING RIGHT SELECT SET TABLESAMPLE UNION USING VALUES WHERE WINDOW WITH".split()
)
UNQUALIFIED = re.compile(rf"(?<![.\w])org_id = {PARAM}")
JOINED = re.compile(r"\b(\w+)\.org_id = (\w+)\.org_id\b")


@dataclass(frozen=True)
class Reference:
    table: str
    alias: str  # the table's own name when it has no alias
    at: int  # where its name starts in the statement


def unrouted(sql: str, tables: set[str]) -> list[str]:
    """The references to `tables` in `sql` that nothing ties to one org, each as `table` or `table (as alias)`."""
    text = LITERAL.sub(lambda m: "'" + " " * (len(m.group()) - 2) + "'", sql)  # a literal's parentheses are text
    scope = _scopes(text)
    names = "|".join(sorted(tables))
    references = [
        Reference(m[1], m[2] if m[2] and m[2].upper() not in KEYWORDS else m[1], m.start(1))
        for m in re.finditer(rf"(?:\b(?:FROM|JOIN|UPDATE|INTO|USING)|,)\s+({names})\b(?:\s+(?:AS\s+)?(\w+))?", text)
    ]
    conditions = [scope(m.start()) for m in UNQUALIFIED.finditer(text)]
    routed = {
        ref
        for ref in references
        if re.match(rf"{ref.table} \((?:\w+, )*org_id\b", text[ref.at :])  # rows written with their org_id
        or re.search(rf"\b{ref.alias}\.org_id = {PARAM}", text)
        or scope(ref.at) in conditions
    }
    ties = {(m[1], m[2]) for m in JOINED.finditer(text)}
    for n, ref in enumerate(references):  # JOIN t USING (org_id, ...): tied to the references of its query before it
        if re.match(rf"{ref.table}(?:\s+(?:AS\s+)?{ref.alias})?\s+USING \(org_id\b", text[ref.at :]):
            ties.update((ref.alias, other.alias) for other in references[:n] if scope(other.at) == scope(ref.at))
    while tied := {
        ref
        for ref in references
        if ref not in routed
        and any((ref.alias, other.alias) in ties or (other.alias, ref.alias) in ties for other in routed)
    }:
        routed |= tied
    return [ref.table + ("" if ref.alias == ref.table else f" (as {ref.alias})") for ref in references
            if ref not in routed]  # fmt: skip


def _scopes(text: str) -> Callable[[int], int]:
    """The query each position of `text` belongs to: the start of the innermost parenthesis around it that holds a
    FROM, UPDATE or INTO of its own, -1 for the statement's top level (`(org_id = %s OR ...)` is its query's)."""
    opened: list[int] = []
    parent: dict[int, int] = {}
    group = [-1] * len(text)
    for i, char in enumerate(text):
        if char == "(":
            parent[i] = opened[-1] if opened else -1
            opened.append(i)
        elif char == ")" and opened:
            opened.pop()
        group[i] = opened[-1] if opened else -1
    queries = {-1} | {group[m.start()] for m in QUERY.finditer(text)}

    def scope(position: int) -> int:
        at = group[position]
        while at not in queries:
            at = parent[at]
        return at

    return scope
