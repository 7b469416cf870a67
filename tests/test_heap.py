"""The cycle collector's settings `grandbo serve` takes once started (`grandbo.heap.settle`), in a process of
their own: they are the process's for good."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from grandbo.config import PYTHON_YOUNG_OBJECTS, Settings

PROBE = """
import gc, json
from grandbo.heap import settle
before = gc.get_threshold()
frozen = settle(int(__import__("sys").argv[1]))
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: still the collector's
del a, b
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen,
                  "count": gc.get_freeze_count(), "collected": gc.collect()}))
"""


def _settled(young: int) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(young)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_settle_freezes_what_exists_and_widens_only_the_young_generation():
    got = _settled(10_000)
    assert got["after"] == [10_000, got["before"][1], got["before"][2]]
    assert got["frozen"] == got["count"] > 0
    assert got["collected"] >= 2  # garbage made afterwards is collected as before


def test_settle_at_zero_leaves_python_as_it_was():
    got = _settled(0)
    assert got["after"] == got["before"] and got["frozen"] == got["count"] == 0
    assert got["collected"] >= 2


def test_the_setting_takes_0_or_at_least_pythons_own_threshold():
    assert Settings(gc_young_objects=0).gc_young_objects == 0
    assert Settings(gc_young_objects=PYTHON_YOUNG_OBJECTS).gc_young_objects == PYTHON_YOUNG_OBJECTS
    assert Settings().gc_young_objects == 10_000
    for fewer in (1, PYTHON_YOUNG_OBJECTS - 1):  # would collect more often than Python does
        with pytest.raises(ValidationError, match=r"use 0 .* or 700 or more"):
            Settings(gc_young_objects=fewer)
