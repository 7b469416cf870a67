"""`values.text_problem` answers what the item-by-item walk answers: its level-at-a-time pass (every string
searched at once) only says "nothing", and anything else is the walk's to name, the problem met first."""

from __future__ import annotations

import math
from collections import OrderedDict, namedtuple
from enum import StrEnum
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grandbo.values import _SURROGATE, text_problem


def _walked(value: Any, max_depth: int) -> str | None:
    """The item-by-item walk, as `text_problem` was before its fast pass."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return text_problem(math.nan)
        if isinstance(item, str):
            if "\x00" in item or _SURROGATE.search(item):
                return text_problem(item)
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return f"is nested deeper than {max_depth} levels"
            children = [*item, *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


TEXT = st.text(alphabet=st.sampled_from(["a", "é", " ", "\x00", "\ud800", "\udfff", "😀", "\\", "u", "0"]), max_size=6)
SCALARS = st.one_of(TEXT, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=True, allow_infinity=True))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.integers(min_value=1, max_value=6))
def test_text_problem_names_what_the_walk_names(value: Any, max_depth: int):
    assert text_problem(value, max_depth=max_depth) == _walked(value, max_depth)


class _Label(StrEnum):
    NUL = "a\x00"
    PLAIN = "b"


_Pair = namedtuple("_Pair", "left right")


def test_subclasses_and_keys_are_checked_as_the_walk_checks_them():
    deep: list[Any] = []
    inner = deep
    for _ in range(40):
        inner.append([])
        inner = inner[0]
    for value in [_Label.NUL, [_Label.PLAIN], OrderedDict(a="\ud800"), _Pair("x", "\x00"), {"\x00": 1}, {1: "ok"},
                  {None: float("inf")}, {"a": "é\ud800"}, {"a": "é"}, deep, "\\u0000", ["ok", float("nan"), "\x00"]]:  # fmt: skip
        for max_depth in (1, 32):
            assert text_problem(value, max_depth=max_depth) == _walked(value, max_depth), value
    assert text_problem(deep) == "is nested deeper than 32 levels"
    assert text_problem({"a": "é"}) is None and text_problem("\\u0000") is None
