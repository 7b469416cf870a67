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
