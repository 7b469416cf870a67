"""Values an entry cannot carry are refused on every face, not stored changed (issue 26, bad input): NaN and
Infinity in `meta` were stored as null, a numeric `occurred_at` was read as milliseconds since 1970
(99999999999 became 1973-03-03), and an import stored a 10 MB `meta`."""

from __future__ import annotations

import json

import pytest

from grandbo.errors import InvalidInputError
from grandbo.values import MAX_META_BYTES
from tests.serving import serving


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"meta": {"ratio": float("nan")}}, "NaN or Infinity"),
        ({"meta": {"nested": [1, {"x": float("inf")}]}}, "NaN or Infinity"),
        ({"occurred_at": 99999999999}, "ISO 8601"),
        ({"occurred_at": "1700000000"}, "ISO 8601"),
        ({"meta": {"log": "x" * MAX_META_BYTES}}, "64 KiB"),
    ],
)
def test_a_value_no_store_keeps_as_given_is_refused(memory, fields, said):
    with pytest.raises(InvalidInputError, match=said):
        memory.remember({"title": "checkout-api pool exhausted", **fields})
    assert memory.entries() == []


def test_an_iso_time_and_a_meta_under_the_cap_are_kept(memory):
    entry = memory.remember(
        {
            "title": "checkout-api pool exhausted",
            "occurred_at": "2026-05-01",
            "meta": {"ratio": 0.5, "log": "x" * 60_000},
        }
    )
    assert entry.occurred_at.isoformat() == "2026-05-01T00:00:00+00:00" and entry.meta["ratio"] == 0.5


def test_over_rest_nan_and_a_numeric_time_are_422s(grandbo):
    acme = grandbo.org("acme", create=True)
    key = acme.keys.create("write", name="writer")[1]
    with serving(grandbo) as served, served.client(key) as client:
        for raw in ('{"title": "pool exhausted", "meta": {"ratio": NaN}}',
                    '{"title": "pool exhausted", "meta": {"ratio": -Infinity}}',
                    '{"title": "pool exhausted", "occurred_at": 99999999999}'):  # fmt: skip
            answer = client.post("/v1/memories", content=raw, headers={"Content-Type": "application/json"})
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["type"] == "invalid_input" and "Traceback" not in answer.text
    assert acme.entries() == []


def test_an_import_refuses_the_line_with_a_huge_meta_and_keeps_the_others(memory, tmp_path):
    lines = [
        {"id": "OK-1", "title": "checkout-api pool exhausted"},
        {"id": "HUGE-1", "title": "a log pasted into meta", "meta": {"log": "x" * 1_000_000}},
        {"id": "OLD-1", "title": "a time in milliseconds", "occurred_at": 99999999999},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    report = memory.import_file(path)
    assert report.imported == 1 and report.refused == {2, 3}
    messages = dict(report.problems)
    assert "64 KiB" in messages[2] and "ISO 8601" in messages[3]
    assert [entry.id for entry in memory.entries()] == ["OK-1"]
