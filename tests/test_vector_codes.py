"""A large vector index first rules rows out on its int8 copy (`retrieval.codes`): its answers must be the full
float32 product's, the same rows in the same order, through writes, removals, floors and limits. The survivors'
similarities are computed by the same product over a gathered block, which may round the last bit of a float32
otherwise (7e-8 here): they agree to 1e-6, the precision the two backends are compared at."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from grandbo.retrieval import codes, vector
from grandbo.retrieval.codes import SLACK, Codes, code, slack
from grandbo.retrieval.vector import PRUNE_FROM, PRUNE_SHARE, VectorIndex, normalize


def _full(index: VectorIndex, query: np.ndarray, limit: int, floor: float) -> tuple[list[int], list[float]]:
    """What the index answers with the full product (the path under PRUNE_FROM rows)."""
    held, vector.PRUNE_FROM = vector.PRUNE_FROM, 1 << 62
    try:
        return index.top(query, limit, floor)
    finally:
        vector.PRUNE_FROM = held


def _agree(got: tuple[list[int], list[float]], want: tuple[list[int], list[float]]) -> None:
    assert got[0] == want[0]
    assert got[1] == pytest.approx(want[1], abs=1e-6)


def _clustered(rng: np.random.Generator, rows: int, dimension: int, spread: float = 0.15) -> np.ndarray:
    """Vectors around a few centres, as text embeddings are. At the default `spread` the rows of a centre are
    all within about 0.02 of each other: many near-ties at the top of an answer, and hardly any row ruled out."""
    centres = np.random.default_rng(0).standard_normal((12, dimension))
    picked = centres[rng.integers(0, 12, rows)]
    return (picked + spread * rng.standard_normal((rows, dimension))).astype(np.float32)


@pytest.mark.parametrize("dimension", [384, 3072])
def test_the_int8_bound_holds_for_every_row_as_the_copy_stores_it(dimension):
    rng = np.random.default_rng(3)
    matrix = _clustered(rng, 4_000, dimension)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = matrix[7] + 0.05 * rng.standard_normal(dimension).astype(np.float32)
    query /= np.linalg.norm(query)
    copy = Codes.of(matrix, len(matrix))
    (query_codes,), (query_scale,), (query_left_out,), _ = code(query[None, :])
    approx = (copy.codes.astype(np.int64) @ query_codes.astype(np.int64)) * (copy.scales * query_scale)
    exact = matrix.astype(np.float64) @ query.astype(np.float64)
    margin = np.abs(exact - approx) - (copy.bounds + copy.kept * query_left_out)
    assert margin.max() <= -slack(dimension) / 2  # within the bound with most of the slack to spare
    # The margin above is mostly the bound's own looseness, so it would pass with 1e-4 at any dimension too: each
    # row's stored bound is checked to be its left-out length plus this dimension's slack.
    assert np.array_equal(copy.bounds, (code(matrix)[2] + slack(dimension)).astype(np.float32))
    assert copy.bounds.max() < 0.05 + slack(dimension)  # and the bound is tight enough to rule rows out
    # The slack covers the float32 product the survivors are scored with, in every dimension.
    rounding = np.abs((matrix @ query).astype(np.float64) - exact).max()
    assert rounding < slack(dimension) / 4 and slack(dimension) >= dimension * 2.0**-24 * 4 and slack(384) == SLACK


def test_a_query_leaves_few_rows_to_multiply_where_similarities_spread_as_text_embeddings_do():
    rng = np.random.default_rng(4)
    index = VectorIndex(384)
    index.set_many(list(range(20_000)), _clustered(rng, 20_000, 384, spread=1.0))
    assert index._codes is not None
    query = normalize(_clustered(rng, 1, 384, spread=1.0)[0])
    usable = index._usable[:20_000]
    survivors = index._codes.candidates(query, usable, 20_000, 25, 0.0)
    assert 25 <= len(survivors) < PRUNE_SHARE * 20_000 / 10
    assert set(index.top(query, 25, 0.0)[0]) <= set(survivors.tolist())


@pytest.mark.parametrize(("limit", "floor"), [(10, -1.0), (25, 0.0), (50, 0.3), (1, -1.0), (400, 0.2)])
def test_a_pruned_search_answers_exactly_what_the_full_product_does(limit, floor):
    rng = np.random.default_rng(limit)
    index = VectorIndex(384)
    index.set_many(list(range(PRUNE_FROM + 500)), _clustered(rng, PRUNE_FROM + 500, 384))
    for _ in range(25):
        query = _clustered(rng, 1, 384)[0]
        _agree(index.top(query, limit, floor), _full(index, query, limit, floor))


def test_writes_and_removals_after_the_first_search_keep_the_copy_in_step():
    rng = np.random.default_rng(11)
    index = VectorIndex(64)
    index.set_many(list(range(PRUNE_FROM)), _clustered(rng, PRUNE_FROM, 64))
    query = _clustered(rng, 1, 64)[0]
    index.top(query, 10, -1.0)  # the int8 copy is made here
    best = index.top(query, 1, -1.0)[0][0]
    index.remove(best)  # the best row goes: it must not come back from a stale copy
    index.set(PRUNE_FROM + 40, query * 5)  # a new row past the end, the query itself: it must come first
    index.set(3, -query)  # a row rewritten to the opposite
    for limit, floor in ((10, -1.0), (5, 0.5), (2_000, -1.0)):
        got = index.top(query, limit, floor)
        _agree(got, _full(index, query, limit, floor))
        assert got[0][0] == PRUNE_FROM + 40 and best not in got[0] and 3 not in got[0][:-1]


def test_ties_at_the_last_place_all_come_along_when_pruned():
    rng = np.random.default_rng(5)
    index = VectorIndex(32)
    base = _clustered(rng, PRUNE_FROM, 32)
    index.set_many(list(range(PRUNE_FROM)), base)
    twin = base[100]
    index.set_many([PRUNE_FROM + n for n in range(6)], np.repeat(twin[None, :], 6, axis=0))  # six equal rows
    got = index.top(twin, 3, -1.0)
    _agree(got, _full(index, twin, 3, -1.0))
    assert {100, *(PRUNE_FROM + n for n in range(6))} <= set(got[0])


def test_a_restored_index_prunes_with_the_copy_it_was_given_or_codes_one_and_counts_it_in_its_bytes():
    rng = np.random.default_rng(9)
    index = VectorIndex(48)
    index.set_many(list(range(PRUNE_FROM + 10)), _clustered(rng, PRUNE_FROM + 10, 48))
    index.remove(5)
    matrix, usable, codes = index.rows(np.arange(PRUNE_FROM + 10, dtype=np.int64))
    assert codes is not None

    def read_only(array: np.ndarray) -> np.ndarray:  # as an image's arrays are read in place
        array = array.copy()
        array.setflags(write=False)
        return array

    for given in ({name: read_only(part) for name, part in codes.items()}, None):
        restored = VectorIndex.restore(read_only(matrix), read_only(usable), given)
        assert restored._codes is not None
        assert restored.nbytes > matrix.nbytes + usable.nbytes  # the int8 copy counts against the memory bound
        for _ in range(5):
            query = _clustered(rng, 1, 48)[0]
            _agree(restored.top(query, 25, 0.1), _full(index, query, 25, 0.1))
        restored.set(2, _clustered(rng, 1, 48)[0])  # a write to arrays read in place copies them first
        query = restored._matrix[2] + 0.01
        assert restored.top(query, 1, 0.0)[0] == [2]


def test_a_small_index_keeps_no_copy_until_it_grows_past_the_threshold():
    rng = np.random.default_rng(2)
    index = VectorIndex(16)
    index.set_many(list(range(PRUNE_FROM - 1)), _clustered(rng, PRUNE_FROM - 1, 16))
    assert index._codes is None and index.rows(np.arange(PRUNE_FROM - 1))[2] is None
    # An image of more rows than have vectors yet (an org mid-embedding) still carries a copy: coded by the save,
    # not again by every process that loads it.
    matrix, usable, codes = index.rows(np.arange(PRUNE_FROM + 5))
    assert codes is not None and len(codes["codes"]) == PRUNE_FROM + 5
    restored = VectorIndex.restore(matrix, usable, codes)
    query = _clustered(rng, 1, 16)[0]
    _agree(restored.top(query, 10, -1.0), _full(index, query, 10, -1.0))
    index.set(PRUNE_FROM + 3, _clustered(rng, 1, 16)[0])
    assert index._codes is not None
    query = _clustered(rng, 1, 16)[0]
    _agree(index.top(query, 10, -1.0), _full(index, query, 10, -1.0))


def test_a_row_within_a_millionth_of_the_last_place_comes_along_on_both_paths():
    """A float32 product can differ in its last bit with the block it is computed in, so a row a rounding away
    from the last place must reach the caller, which rounds to six digits and breaks ties by id."""
    rng = np.random.default_rng(12)
    index = VectorIndex(2)
    far = [[np.cos(a), np.sin(a)] for a in rng.uniform(1.0, 1.5, PRUNE_FROM)]  # similarity at most 0.54
    index.set_many(list(range(PRUNE_FROM)), np.asarray(far, dtype=np.float32))
    last = np.arccos(0.9)
    near = np.arccos(0.9 - 5e-7)
    index.set_many([PRUNE_FROM, PRUNE_FROM + 1, PRUNE_FROM + 2], np.asarray(
        [[1.0, 0.0], [np.cos(last), np.sin(last)], [np.cos(near), np.sin(near)]], dtype=np.float32))  # fmt: skip
    got = index.top([1.0, 0.0], 2, 0.0)
    assert got[0] == [PRUNE_FROM, PRUNE_FROM + 1, PRUNE_FROM + 2]
    _agree(got, _full(index, np.asarray([1.0, 0.0], dtype=np.float32), 2, 0.0))


@pytest.mark.parametrize("dimension", [384, 768])
def test_the_lengths_a_copy_keeps_are_numpys_norms_to_the_last_bit(dimension):
    """`code` sums its squares itself (numpy's norm checks its arguments for half of a query's coding): the same
    float64 lengths, bit for bit, so that every bound, and so every pruned answer, is what it was."""
    rng = np.random.default_rng(9)
    vectors = _clustered(rng, 500, dimension, spread=1.0)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[3] = 0.0
    codes, scales, left_out, kept = code(vectors)
    stored = codes.astype(np.float64) * scales.astype(np.float64)[:, None]
    assert np.array_equal(left_out, np.linalg.norm(vectors.astype(np.float64) - stored, axis=1))
    assert np.array_equal(kept, np.linalg.norm(stored, axis=1))
    for row in range(50):  # a query is coded alone, as one row
        (_, (scale,), (alone,), _) = code(vectors[row][None, :])
        assert scale == scales[row] and alone == left_out[row]


@pytest.mark.parametrize("packed", [True, False])
def test_the_packed_copy_counts_in_the_bytes_and_writes_after_it_keep_the_answers_exact(monkeypatch, packed):
    """Up to `PACK_BYTES` of codes the int8 pass multiplies a packed copy of them (the kernel's own layout), made by
    the first search: the memory bound sees it, and the rows rewritten, removed and added after it (scored from the
    codes themselves until a sixteenth of the rows changed, then the copy is made again) answer exactly as the full
    product does. Past `PACK_BYTES` there is no copy, and the same answers."""
    if not packed:
        monkeypatch.setattr(codes, "PACK_BYTES", 0)
    rng = np.random.default_rng(13)
    rows = 2 * PRUNE_FROM
    index = VectorIndex(96)
    index.set_many(list(range(rows)), _clustered(rng, rows, 96, spread=1.0))
    before = index.nbytes
    query = normalize(_clustered(rng, 1, 96, spread=1.0)[0])
    _agree(index.top(query, 25, 0.0), _full(index, query, 25, 0.0))
    assert (index.nbytes >= before + rows * 96) is packed  # the copy counts against the memory bound
    for step in range(60):
        index.set_many(rng.integers(0, rows, 12).tolist(), _clustered(rng, 12, 96, spread=1.0))
        index.remove(int(rng.integers(0, rows)))
        rows += 3
        index.set_many([rows - 3, rows - 2, rows - 1], _clustered(rng, 3, 96, spread=1.0))
        query = normalize(_clustered(rng, 1, 96, spread=1.0)[0])
        target = int(rng.integers(0, rows))
        index.set(target, query)  # a row rewritten to the query itself comes first
        for limit, floor in ((25, 0.0), (3, -1.0)):
            got = index.top(query, limit, floor)
            _agree(got, _full(index, query, limit, floor))
            assert got[0][0] == target


def test_an_index_grown_past_the_packed_bound_lets_its_copy_go(monkeypatch):
    """The copy made while the codes were small enough is neither held nor counted once they grow past `PACK_BYTES`
    (appends are not writes to the copy's rows: without letting it go at the bound, it stayed, dead and charged to
    the org's memory, for good)."""
    rng = np.random.default_rng(17)
    rows = 2 * PRUNE_FROM
    monkeypatch.setattr(codes, "PACK_BYTES", (rows + rows // 32) * 96)  # the first appends stay under the bound
    index = VectorIndex(96)
    index.set_many(list(range(rows)), _clustered(rng, rows, 96, spread=1.0))
    unpacked = index.nbytes
    query = normalize(_clustered(rng, 1, 96, spread=1.0)[0])
    index.top(query, 25, 0.0)
    assert index.nbytes >= unpacked + rows * 96  # packed, and counted
    grown = rows + rows // 8
    index.set_many(list(range(rows, grown)), _clustered(rng, grown - rows, 96, spread=1.0))
    without_copy = index.nbytes - rows * 96
    _agree(index.top(query, 25, 0.0), _full(index, query, 25, 0.0))
    assert index.nbytes <= without_copy  # past the bound: the copy let go, not counted


@pytest.mark.parametrize("packed", [True, False])
def test_a_pass_begun_before_writes_is_begun_again_and_answers_as_the_full_product(monkeypatch, packed):
    """A hybrid recall begins the int8 pass (`VectorIndex.begin`), runs its one kernel call on a helper thread while
    the lexical arm runs, and finishes it with `top(..., begun)`: the same answer as a search made at once. A write
    between the two (a refresh applied meanwhile) makes the products stale: the pass is begun again, and the row
    rewritten to the query itself comes first."""
    if not packed:
        monkeypatch.setattr(codes, "PACK_BYTES", 0)
    rng = np.random.default_rng(19)
    rows = 2 * PRUNE_FROM
    index = VectorIndex(96)
    index.set_many(list(range(rows)), _clustered(rng, rows, 96, spread=1.0))
    for step in range(8):
        query = normalize(_clustered(rng, 1, 96, spread=1.0)[0])
        begun = index.begin(query)
        assert begun is not None
        with ThreadPoolExecutor(1) as helper:
            begun.products = helper.submit(begun.kernel).result()
        if step % 2:  # written after the products were taken: they no longer count
            target = int(rng.integers(0, rows))
            index.set(target, query)
            index.set_many([rows], _clustered(rng, 1, 96, spread=1.0))
            rows += 1
        got = index.top(query, 25, 0.0, begun)
        _agree(got, _full(index, query, 25, 0.0))
        if step % 2:
            assert got[0][0] == target
    small = VectorIndex(96)
    small.set_many(list(range(100)), _clustered(rng, 100, 96))
    assert small.begin(query) is None  # no int8 pass under PRUNE_FROM rows: nothing to begin
