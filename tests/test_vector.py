import numpy as np
import pytest

from grandbo.retrieval.vector import VectorIndex


def test_search_is_exact_cosine_best_first():
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((3_000, 16)).astype(np.float32)
    index = VectorIndex(16)
    for row, vector in enumerate(matrix):
        index.set(row, vector * 3)  # scale must not matter
    query = rng.standard_normal(16).astype(np.float32)
    normed = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    expected = normed @ (query / np.linalg.norm(query))
    got = index.search(query, 25, min_similarity=-1.0)
    assert [m.row for m in got] == list(np.argsort(-expected)[:25])
    assert [m.similarity for m in got] == pytest.approx(sorted(expected, reverse=True)[:25], abs=1e-5)


def test_floor_drops_unrelated_rows_instead_of_returning_the_nearest():
    index = VectorIndex(2)
    index.set(0, [1.0, 0.0])
    index.set(1, [0.0, 1.0])
    got = index.search([1.0, 0.05], 10, min_similarity=0.5)
    assert [m.row for m in got] == [0]
    assert got[0].distance == pytest.approx(1 - got[0].similarity)


def test_removed_and_missing_rows_are_never_returned_even_with_a_negative_floor():
    index = VectorIndex(2)
    index.set(0, [1.0, 0.0])
    index.set(5, [0.9, 0.1])  # rows 1-4 have no vector
    index.remove(0)
    got = index.search([1.0, 0.0], 10, min_similarity=-1.0)
    assert [m.row for m in got] == [5]
    assert index.usable_count == 1


def test_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="dimension 3"):
        VectorIndex(3).set(0, [1.0, 2.0])


def test_ties_at_the_last_place_all_come_along():
    index = VectorIndex(2)
    index.set(0, [1.0, 0.0])
    for row in range(1, 5):
        index.set(row, [0.6, 0.8])
    index.set(5, [0.0, 1.0])
    assert [m.row for m in index.search([1.0, 0.0], 2, min_similarity=-1.0)] == [0, 1, 2, 3, 4]


@pytest.fixture
def seeded_sqlite(tmp_path):
    from grandbo import Grandbo, Settings

    with Grandbo.init(Settings(home=tmp_path), embedding="deterministic") as grandbo:
        memory = grandbo.org("acme", create=True)
        memory.remember({"title": "redis evicted session keys under memory pressure"})
        yield memory


def _blas_threads():
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_blas_runs_on_one_thread_once_recall_runs_both_arms_at_once(seeded_sqlite, monkeypatch):
    from grandbo.retrieval.arms import one_blas_thread

    before = _blas_threads()
    if not before:
        pytest.skip("numpy here loads no BLAS that threadpoolctl can see")
    # As in a fresh process: an earlier test's recall may have set the limit before a second BLAS (scipy's,
    # imported on a win rate's first use) was loaded.
    monkeypatch.setattr(one_blas_thread, "done", False)
    seeded_sqlite.recall("redis evicted session keys under memory pressure", arm="hybrid")
    assert one_blas_thread.done and _blas_threads() == [1] * len(before)


def test_set_many_is_set_row_by_row_and_a_repeated_row_keeps_its_last_vector():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((2_500, 8)).astype(np.float32)
    rows = [*range(2_000), 7, 7]  # row 7 given twice more: its last vector wins
    one_by_one, at_once = VectorIndex(8), VectorIndex(8)
    for row, vector in zip(rows, vectors, strict=False):
        one_by_one.set(row, vector)
    at_once.set_many(rows, vectors[: len(rows)])
    query = rng.standard_normal(8).astype(np.float32)
    assert at_once.top(query, 50, -1.0) == one_by_one.top(query, 50, -1.0)
    assert at_once.usable_count == one_by_one.usable_count == 2_000
    with pytest.raises(ValueError, match="for 2 rows"):
        at_once.set_many([1, 2], vectors[:3])


def test_with_a_recall_in_flight_per_core_the_arms_run_in_turn_on_the_callers_thread():
    import os
    import threading

    from grandbo.retrieval import arms

    cores = os.cpu_count() or 1
    release, inside = threading.Event(), threading.Semaphore(0)

    def held() -> None:
        arms.run_beside(lambda: None, lambda: (inside.release(), release.wait(10)))

    holders = [threading.Thread(target=held) for _ in range(cores)]
    for holder in holders:
        holder.start()
    try:
        for _ in holders:
            assert inside.acquire(timeout=10)
        where = arms.run_beside(lambda: threading.current_thread().name, lambda: None)[0]
        assert where == threading.current_thread().name  # no helper: every core has a recall already
    finally:
        release.set()
        for holder in holders:
            holder.join()
    arms.handoff.seconds, arms.handoff.count = {0: {True: 0.0, False: 1.0}}, {}  # at once measured the faster
    begun = threading.Event()

    def beside() -> str:
        begun.set()
        return threading.current_thread().name

    assert arms.run_beside(beside, lambda: begun.wait(10))[0].startswith("grandbo-recall")


def test_a_beside_still_queued_behind_busy_helpers_when_here_ends_runs_on_the_callers_thread(monkeypatch):
    """The helpers are shared by every recall of the process: a recall whose `beside` still waits behind other
    recalls' tasks when its own arm is done runs it itself, rather than wait for them (review 29: one org's slow
    helper task held every other org's recall at `job.result()`)."""
    import os
    import threading

    from grandbo.retrieval import arms

    monkeypatch.setattr(arms.handoff, "seconds", {0: {True: 0.0, False: 1.0}})  # at once measured the faster
    monkeypatch.setattr(arms.handoff, "count", {})
    release = threading.Event()
    busy = [arms.helpers.submit(release.wait, 10) for _ in range(max(2, os.cpu_count() or 2))]
    try:
        where = arms.run_beside(lambda: threading.current_thread().name, lambda: None)[0]
        assert where == threading.current_thread().name and not release.is_set()
    finally:
        release.set()
        for each in busy:
            each.result()


def test_the_arms_run_the_way_recent_recalls_measured_faster_and_the_other_way_one_in_eight_in_runs():
    from grandbo.retrieval.arms import _Handoff

    handoff = _Handoff()
    assert handoff.beside(10_000) is True  # each way measured once first
    handoff.record(True, 0.004, 10_000)  # at once: a helper that waited for a core
    assert handoff.beside(10_000) is False
    handoff.record(False, 0.002, 10_000)
    ways = [handoff.beside(10_000) for _ in range(32)]  # recalls 3 to 34
    # In turn, and the other way one recall in eight, in runs of four (recalls 28-31, 60-63, ...): a lone probe
    # after recalls the other way finds the helper cold.
    assert ways.count(True) == 4 and ways[25:29] == [True] * 4
    for _ in range(10):  # the cores free again: at once measured faster, and taken
        handoff.record(True, 0.001, 10_000)
    ways = [handoff.beside(10_000) for _ in range(32)]  # recalls 35 to 66
    assert ways.count(True) == 28 and ways[25:29] == [False] * 4


def test_a_first_sample_of_each_way_is_replaced_not_averaged():
    """An org's first recall builds its lexical segments inside the arm (6.4 s at 100,000 entries): averaged in,
    it kept that org's arms in turn for about 250 recalls where at once was 4.5 ms against 6.8."""
    from grandbo.retrieval.arms import _Handoff

    handoff = _Handoff()
    handoff.beside(100_000), handoff.record(True, 6.4, 100_000)  # the first recall, building
    handoff.beside(100_000), handoff.record(False, 0.0068, 100_000)
    handoff.record(True, 0.0045, 100_000)  # the first probe at once, warm
    assert handoff.seconds[(100_000).bit_length()][True] == 0.0045
    assert handoff.beside(100_000) is True
    handoff.record(True, 0.0055, 100_000)  # later samples are averaged
    assert handoff.seconds[(100_000).bit_length()][True] == pytest.approx(0.0045 + 0.2 * 0.001)
    last = handoff.seconds[(100_000).bit_length()][True]
    handoff.record(True, 6.0, 100_000)  # a later outlier (a merge of segments) counts as four times the average
    assert handoff.seconds[(100_000).bit_length()][True] == pytest.approx(last + 0.2 * 3 * last)
    # An org of another size is measured on its own: a small one's recalls say nothing of a large one's.
    handoff.record(True, 0.0002, 100_000), handoff.record(False, 0.0001, 100_000)
    assert handoff.beside(100_000) is False and handoff.beside(10_000) is True


def test_a_recall_runs_its_arms_in_turn_on_its_own_thread_while_that_measured_faster(monkeypatch):
    import threading

    from grandbo.retrieval import arms

    monkeypatch.setattr(arms.handoff, "seconds", {0: {True: 0.004, False: 0.002}})
    monkeypatch.setattr(arms.handoff, "count", {})
    where = arms.run_beside(lambda: threading.current_thread().name, lambda: None)[0]
    assert where == threading.current_thread().name


def test_a_vector_added_to_a_full_matrix_grows_it_by_an_eighth_not_double():
    rng = np.random.default_rng(5)
    index = VectorIndex(8)
    index.set_many(list(range(2_000)), rng.standard_normal((2_000, 8)).astype(np.float32))
    full = index.nbytes
    index.set(2_000, rng.standard_normal(8).astype(np.float32))
    # What the memory every kept index shares counts: a doubled matrix after an org's first write let others go.
    assert full < index.nbytes <= full * 1.15
    assert index.usable_count == 2_001


def test_a_matrix_restored_from_a_misaligned_buffer_is_copied_aligned():
    vectors = np.eye(4, 3, dtype=np.float32)  # four rows of dimension 3, the last zero
    buffer = b"\0" + vectors.tobytes()
    misaligned = np.frombuffer(buffer, dtype=np.float32, count=12, offset=1).reshape(4, 3)
    assert not misaligned.flags.aligned
    index = VectorIndex.restore(misaligned, np.ones(4, dtype=bool))
    assert index._matrix.flags.aligned
    assert [m.row for m in index.search([0.0, 1.0, 0.0], 1, 0.5)] == [1]
