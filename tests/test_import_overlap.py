"""Imports of overlapping files at once (issue 26): four concurrent imports of the same lines ended with the store
right, but two of them reported up to 2,000 lines "refused: already exists" and exited 1. A line another import
stored between this import's look-up and its write is counted as already there when it holds what the line
says, and refused only when it holds something else."""

from __future__ import annotations

import json

import pytest

from grandbo.service import Grandbo
from tests.test_org_lifecycle import _Blocker, _run

LINES = [{"id": f"OV-{n}", "title": f"checkout-api pool exhausted, occurrence {n}"} for n in range(300)]


def _file(tmp_path, name, lines):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
def test_two_imports_that_both_looked_before_either_wrote_both_finish_complete(
    grandbo, settings, database_url, tmp_path
):
    """Both imports look their lines up, then wait (a table lock held by a third session) before writing; the
    first to write stores them, and the second finds its batch refused by the store. Before, the second split its
    batch down to single lines and reported every one as refused; now it reads them back and counts them."""
    same = _file(tmp_path, "same.jsonl", LINES)
    changed = _file(tmp_path, "changed.jsonl", [*LINES[:299], {"id": "OV-299", "title": "another text altogether"}])
    first = grandbo
    with Grandbo.open(settings) as second:
        first.org("acme", create=True)
        blocker = _Blocker(database_url)
        outcome: dict[str, object] = {}
        threads = [
            _run(lambda: first.org("acme").import_file(same), outcome, "same"),
            _run(lambda: second.org("acme").import_file(changed), outcome, "changed"),
        ]
        blocker.wait_for_waiters(2)
        blocker.release()
        for thread in threads:
            thread.join(timeout=120)
        reports = {name: outcome[name] for name in ("same", "changed")}
        for name, report in reports.items():
            assert not isinstance(report, Exception), (name, report)
        stored = {entry.id: entry.title for entry in first.org("acme").entries()}
    assert len(stored) == 300
    winner = "same" if stored["OV-299"] == LINES[299]["title"] else "changed"
    loser = "changed" if winner == "same" else "same"
    assert reports[winner].imported == 300 and reports[winner].complete  # type: ignore[union-attr]
    assert reports[loser].imported == 0 and reports[loser].already == 299  # type: ignore[union-attr]
    assert reports[loser].refused == {300}  # type: ignore[union-attr]  # only the line that differs
    assert "already exists with other content" in dict(reports[loser].problems)[300]  # type: ignore[union-attr]


def test_a_rerun_counts_every_line_as_already_there(memory, tmp_path):
    path = _file(tmp_path, "in.jsonl", LINES[:50])
    assert memory.import_file(path).imported == 50
    again = memory.import_file(path)
    assert (again.imported, again.already, again.complete) == (0, 50, True)
