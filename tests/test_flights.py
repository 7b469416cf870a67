"""Overlapping reads of an organization's corpus counts run once at a time, and each caller is answered by a read
that began after it called (`grandbo.flights`): four `GET /v1/stats` of one org at once asked the database for four
joins of its every entry with its vector, while every other org's requests waited for the cores (probe 29)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from grandbo.flights import NextFlight
from grandbo.store.scoped import _COUNTS
from tests.conftest import owner_url

BOUND_S = 30.0  # a bound on waiting for a state, never a measured time


def _until(held) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()
    for _ in range(int(BOUND_S / 0.01)):
        if held():
            return
        done.wait(0.01)
    raise AssertionError("the state never came")


def test_callers_during_a_run_share_the_next_one_which_begins_after_them():
    flights: NextFlight[int] = NextFlight()
    release, began = threading.Event(), []

    def read() -> int:
        began.append(len(began) + 1)
        if len(began) == 1:
            release.wait(BOUND_S)
        return len(began)

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(flights.run, "acme", read)
        _until(lambda: began)
        later = [pool.submit(flights.run, "acme", read) for _ in range(3)]
        _until(lambda: flights.waiting("acme") == 3)
        other = flights.run("other-org", lambda: 99)  # another key is never held up
        release.set()
        answers = [first.result(BOUND_S), *(f.result(BOUND_S) for f in later)]
    assert other == 99
    assert answers == [1, 2, 2, 2] and began == [1, 2]  # one more read, begun after the three came
    assert flights.run("acme", lambda: 7) == 7  # nothing left behind: the next caller reads afresh


def _errors_of_a_shared_run(error: Callable[[], Exception], callers: int) -> list[BaseException | None]:
    """What each of `callers` waiting together gets when the run they share raises `error()` (the run before theirs,
    another caller's, held until they all wait); the run after theirs reads again."""
    flights: NextFlight[int] = NextFlight()
    release, began = threading.Event(), []

    def read() -> int:
        began.append(1)
        if len(began) == 1:
            release.wait(BOUND_S)
            return 1
        raise error()

    with ThreadPoolExecutor(callers + 1) as pool:
        first = pool.submit(flights.run, "acme", read)
        _until(lambda: began)
        later = [pool.submit(flights.run, "acme", read) for _ in range(callers)]
        _until(lambda: flights.waiting("acme") == callers)
        release.set()
        assert first.result(BOUND_S) == 1
        raised = [future.exception(BOUND_S) for future in later]
    assert len(began) == 2 and flights.run("acme", lambda: 3) == 3
    return raised


def test_an_error_of_a_shared_run_reaches_each_of_its_callers_and_the_next_run_reads_again():
    raised = _errors_of_a_shared_run(lambda: RuntimeError("the database went away"), 3)
    assert all(type(e) is RuntimeError and str(e) == "the database went away" for e in raised)
    # The run's caller raises its error; each other one a copy of its own, from it: one object raised in several
    # threads gathered every thread's traceback in its one `__traceback__` (review 29 L12).
    (run,) = [e for e in raised if e is not None and e.__cause__ is None]
    assert len({id(e) for e in raised}) == 3 and all(e.__cause__ is run for e in raised if e is not run)  # type: ignore[union-attr]


def test_an_error_of_another_signature_reaches_each_caller_as_its_own_copy():
    """An exception whose `__init__` takes other arguments than its `args` (a keyword of its own) is copied too."""

    class Busy(Exception):
        def __init__(self, message: str, *, retry_after: int) -> None:
            super().__init__(message)
            self.retry_after = retry_after

    raised = _errors_of_a_shared_run(lambda: Busy("the org is busy", retry_after=3), 2)
    assert all(type(e) is Busy and str(e) == "the org is busy" and e.retry_after == 3 for e in raised)  # type: ignore[union-attr]
    assert raised[0] is not raised[1]


def test_each_caller_s_copy_of_an_error_is_made_without_its_init_and_holds_its_own_notes_and_detail():
    """A class whose `__init__` formats its argument was formatted twice ("entry entry F-1 not found not found"),
    and a note one caller added showed on the others' (review 30); an attribute in a slot is copied too."""

    class Missing(Exception):
        __slots__ = ("entry_id",)

        def __init__(self, entry_id: str) -> None:
            super().__init__(f"entry {entry_id} not found")
            self.entry_id = entry_id
            self.detail = {"entry_id": entry_id}

    def missing() -> Missing:
        error = Missing("F-1")
        error.add_note("read by the second run")
        return error

    raised = _errors_of_a_shared_run(missing, 2)
    assert all(type(e) is Missing and str(e) == "entry F-1 not found" for e in raised)
    assert all(e.entry_id == "F-1" for e in raised)  # type: ignore[union-attr]
    raised[0].add_note("said to the first caller")  # type: ignore[union-attr]
    raised[0].detail["seen"] = True  # type: ignore[union-attr]
    assert raised[1].__notes__ == ["read by the second run"] and raised[1].detail == {"entry_id": "F-1"}  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["postgres"])
def test_four_stats_of_one_org_at_once_ask_the_database_for_one_count_at_a_time(grandbo, settings):
    """The count is held in the database (its table locked by the owner): the first read waits there, and the three
    callers after it wait for it, not beside it; each is answered."""
    memory = grandbo.org("acme", create=True)
    memory.remember_many([{"title": f"entry {n}", "body": "pool exhausted"} for n in range(5)], actor="test")
    # Reads waiting for the owner's lock (pg_locks: the runtime role's sessions are not the owner's to see)
    waiting_sql = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'vector_counts'::regclass"
    with (
        psycopg.connect(owner_url(settings.database_url)) as owner,
        psycopg.connect(owner_url(settings.database_url), autocommit=True) as watcher,
    ):
        owner.execute("LOCK TABLE vector_counts IN ACCESS EXCLUSIVE MODE")
        with ThreadPoolExecutor(4) as pool:
            asked = [pool.submit(lambda: grandbo.org("acme").stats()) for _ in range(4)]

            def settled() -> bool:
                in_database = watcher.execute(waiting_sql).fetchone()[0]  # type: ignore[index]
                return in_database + _COUNTS.waiting((id(grandbo._store), "acme", 5)) >= 4 or in_database > 1

            try:
                _until(settled)
                in_database = watcher.execute(waiting_sql).fetchone()[0]  # type: ignore[index]
            finally:
                owner.rollback()
            answers = [future.result(BOUND_S) for future in asked]
    assert in_database == 1
    assert {(a.total, a.org_id) for a in answers} == {(5, "acme")}
