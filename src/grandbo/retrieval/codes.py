"""An int8 copy of a large vector index, which tells which rows can rank before any float32 product is taken.

Each unit vector x is kept as int8 codes c with its own scale s (x ~ s * c, s = max|x| / 127), with the length of
what that leaves out, e = |x - s*c|, and the length of what it keeps, h = |s*c|. A query q (a unit vector) is coded
the same way (q ~ t * d, leaving out f = |q - t*d|). Then, exactly,

    q.x - (t*d).(s*c) = q.(x - s*c) + (q - t*d).(s*c),   so   |q.x - t*s*(d.c)| <= e + f*h,

and d.c is an integer dot product, exact, over a quarter of the float32 matrix's bytes (a SIMD kernel of `numkong`,
which lets go of the GIL while it runs). A row whose upper bound falls short of the limit-th best lower bound (or of
the similarity floor) cannot be in the answer. The rows left are scored in float32 as before, so the answer is the
one the full product gives: the same rows in the same order (`VectorIndex.top`), each similarity the same float32
product over a gathered block of rows (which may differ from the full product's in the last bit, 1e-7: below the
1e-6 the two backends are compared at). `slack` covers float32 rounding in that product and the bounds' own
arithmetic: at least `SLACK`, and four times the worst case of a float32 dot product of unit vectors (d * 2^-24)
in dimensions where that is larger (above 419: 768 dimensions get 1.8e-4, 3,072 get 7.3e-4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numkong
import numpy as np
import numpy.typing as npt

SLACK = 1e-4
# Up to this many bytes of codes (32,768 rows of 384 dimensions) the int8 pass multiplies a packed copy of them
# (`numkong.dots_pack`, the kernel's own layout, made again once writes changed a sixteenth of the rows): measured on
# this project's 2-core machine, thread CPU a query, 50 queries alternated: 4,096 rows 95 -> 50 us, 10,000 rows
# 224 -> 120 us, 20,000 470 -> 290 us, 35,000 859 -> 652 us; from 50,000 rows (1,415 against 1,444 us; 100,000:
# 2.9 against 3.2 ms) the packed layout is no faster, and the copy would double the codes' memory for nothing.
PACK_BYTES = 12 << 20
CHUNK = 2048  # rows coded at once: the float64 work arrays of a chunk (6 MB each), not of a whole index
NAMES = ("codes", "scales", "bounds", "kept")  # the arrays of a copy, as an index image holds them


Products = npt.NDArray[np.float64] | npt.NDArray[np.int32]


@dataclass(slots=True)
class Pass:
    """One query's int8 pass over rows 0..n-1 begun (`Codes.begin`): the unit query, its codes, scale and left-out
    length, the copy's `version` it was begun at, and `kernel`, the integer products' one call (which lets go of the
    GIL and reads nothing a write changes in place: a helper thread may run it while the caller does other work).
    `products`: what `kernel` gave, once run."""

    query: npt.NDArray[np.float32]
    query_codes: npt.NDArray[np.int8]
    query_scale: np.float32  # numpy scalars, as the bounds' arithmetic has always used them (float64 is not weak)
    query_left_out: np.float64
    n: int
    version: int
    kernel: Callable[[], Products]
    products: Products | None = None


def slack(dimension: int) -> float:
    """What each row's bound adds for rounding, in `dimension` dimensions."""
    return max(SLACK, 4 * dimension * 2.0**-24)


def code(
    vectors: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Codes (rows x dimension), scales, left-out lengths and kept lengths of unit `vectors` (one per row). The
    lengths are of the float32 scales as kept, so the bound holds for what is stored; a zero vector gets zero codes,
    scale and lengths."""
    codes, scales, kept = _scaled(vectors)
    return codes, scales, _lengths(vectors.astype(np.float64) - kept), _lengths(kept)


def _scaled(
    vectors: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """`code`'s codes and scales of `vectors`, and what they keep of each (codes times scale, in float64)."""
    top = np.abs(vectors).max(axis=1) if vectors.size else np.zeros(len(vectors), dtype=np.float32)
    scales = (top / np.float32(127.0)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1.0))
    codes = np.rint(vectors / safe[:, None]).clip(-127, 127).astype(np.int8)
    return codes, scales, codes.astype(np.float64) * scales.astype(np.float64)[:, None]


def _lengths(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each row's length: what `np.linalg.norm(rows, axis=1)` computes (its own sum of squares), without its checks
    of the arguments, which took half of a query's coding."""
    lengths: npt.NDArray[np.float64] = np.sqrt(np.add.reduce(rows * rows, axis=1))
    return lengths


class Codes:
    """The int8 copy of rows 0..capacity-1 of a `VectorIndex`, kept in step with its writes (`write`, `clear`) and
    grown with it (`grow`). Per row: the codes, the scale, the bound's own part (e + `slack`) and h, the last three
    as float32 (12 bytes beside the row's 1 byte a dimension)."""

    def __init__(self, codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], bounds: npt.NDArray[np.float32],
                 kept: npt.NDArray[np.float32]) -> None:  # fmt: skip
        self.codes, self.scales, self.bounds, self.kept = codes, scales, bounds, kept
        # The packed copy of rows 0..packed_rows-1 as they were when it was made, and the rows of those written
        # since (their products are taken from the codes themselves): made by the first pass that wants it.
        self._packed: numkong.PackedMatrix | None = None
        self._packed_rows = 0
        self._changed: set[int] = set()
        self.version = 0  # moved by every change of the codes: a `Pass` begun before one is begun again

    @classmethod
    def empty(cls, capacity: int, dimension: int) -> Codes:
        zeros = np.zeros(capacity, dtype=np.float32)
        return cls(np.zeros((capacity, dimension), dtype=np.int8), zeros, zeros.copy(), zeros.copy())

    @classmethod
    def of(cls, matrix: npt.NDArray[np.float32], capacity: int) -> Codes:
        """The copy of every row of `matrix` (unit or zero rows), with room for `capacity` rows."""
        codes = cls.empty(capacity, matrix.shape[1])
        codes.write(np.arange(len(matrix), dtype=np.int64), matrix)
        return codes

    @property
    def nbytes(self) -> int:
        packed = self._packed  # read once: a write on another thread may let it go meanwhile (`_written`)
        packed_bytes = packed.nbytes if packed is not None else 0
        return int(self.codes.nbytes + self.scales.nbytes + self.bounds.nbytes + self.kept.nbytes + packed_bytes)

    def arrays(self, rows: npt.NDArray[np.int64] | None = None) -> dict[str, npt.NDArray[np.generic]]:
        """The copy of `rows` (renumbered 0..len(rows)-1; every row without them), by `NAMES`, for an index
        image."""
        return {name: getattr(self, name) if rows is None else getattr(self, name)[rows] for name in NAMES}

    def writable(self) -> None:
        """Copies of arrays read in place from an image, before a first write."""
        for name in NAMES:
            array = getattr(self, name)
            if not array.flags.writeable:
                setattr(self, name, array.copy())

    def write(self, rows: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        """Code `vectors` (unit or zero, one per row) as those rows' (within the capacity)."""
        rounding = slack(self.codes.shape[1])
        for start in range(0, len(rows), CHUNK):
            at = rows[start : start + CHUNK]
            codes, scales, left_out, kept = code(np.ascontiguousarray(vectors[start : start + CHUNK]))
            self.codes[at], self.scales[at], self.bounds[at], self.kept[at] = codes, scales, left_out + rounding, kept
        self._written(rows)

    def clear(self, row: int) -> None:
        self.codes[row], self.scales[row], self.bounds[row], self.kept[row] = 0, 0.0, 0.0, 0.0
        self._written(np.asarray([row]))

    def _written(self, rows: npt.NDArray[np.int64]) -> None:
        """Rows whose codes changed: the packed copy's own of them no longer count (past a sixteenth of it, the copy
        is let go and made again by the next pass)."""
        self.version += 1
        if self._packed is None:
            return
        self._changed.update(rows[rows < self._packed_rows].tolist())
        if len(self._changed) > self._packed_rows // 16:
            self._packed, self._packed_rows, self._changed = None, 0, set()

    def grow(self, capacity: int, n_rows: int) -> None:
        """Room for `capacity` rows, the first `n_rows` kept."""
        self.version += 1
        grown = Codes.empty(capacity, self.codes.shape[1])
        for name in NAMES:
            getattr(grown, name)[:n_rows] = getattr(self, name)[:n_rows]
        self.codes, self.scales, self.bounds, self.kept = grown.codes, grown.scales, grown.bounds, grown.kept

    def begin(self, query: npt.NDArray[np.float32], n: int) -> Pass:
        """The int8 pass of the unit `query` over rows 0..n-1 made ready to run (the packed copy made first if due)."""
        one = query[None, :]
        (query_codes,), (query_scale,), kept = _scaled(one)  # `code`'s, without the kept length no bound uses
        (query_left_out,) = _lengths(one.astype(np.float64) - kept)
        kernel = self._kernel(query_codes, n)
        return Pass(query, query_codes, query_scale, query_left_out, n, self.version, kernel)

    def candidates(
        self,
        query: npt.NDArray[np.float32],
        usable: npt.NDArray[np.bool_],
        n_usable: int,
        limit: int,
        floor: float,
        near: float = 0.0,
        begun: Pass | None = None,
    ) -> npt.NDArray[np.int64]:
        """The usable rows (of the first len(`usable`)) that may be among the `limit` most similar to the unit
        `query` at or above `floor`, or within `near` of the last of them: every row the full product would
        return. `begun`: this query's pass begun over these rows (its products maybe taken already); one begun
        before a change of the codes is begun again."""
        n = len(usable)
        if begun is None or begun.version != self.version or begun.n != n:
            begun = self.begin(query, n)
        products = begun.products if begun.products is not None else begun.kernel()
        dots = self._dots(begun.query_codes, n, products)
        approx = dots * (self.scales[:n] * begun.query_scale)
        error = self.kept[:n] * begun.query_left_out
        error += self.bounds[:n]
        cut = floor
        if n_usable > limit:
            lower = approx - error
            if n_usable < n:
                lower[~usable] = -np.inf
            cut = max(cut, float(np.partition(lower, n - limit)[n - limit]) - near)
        approx += error
        return np.flatnonzero((approx >= cut) & usable)

    def _kernel(self, query_codes: npt.NDArray[np.int8], n: int) -> Callable[[], Products]:
        """The one call giving the integer products of `query_codes` with rows 0..n-1 (exact either way: at most
        127 * 127 * dimension) but the rows written or added since the packed copy was made (`_dots` adds those):
        over the packed copy where the codes are small enough to have one, else over the codes."""
        if n * self.codes.shape[1] > PACK_BYTES:
            self._packed, self._packed_rows, self._changed = None, 0, set()  # grown past it: no copy held or counted
            codes = self.codes[:n]  # a write after `grow` goes to new arrays; one in place moves `version`
            return lambda: np.asarray(numkong.cdist(query_codes[None, :], codes, metric="dot"))[0]
        if self._packed is None or n - self._packed_rows > self._packed_rows // 16 or n < self._packed_rows:
            self._packed, self._packed_rows, self._changed = numkong.dots_pack(self.codes[:n]), n, set()
        packed = self._packed
        return lambda: np.asarray(numkong.dots_packed(query_codes[None, :], packed))[0]

    def _dots(self, query_codes: npt.NDArray[np.int8], n: int, products: Products) -> Products:
        """The integer products of `query_codes` with rows 0..n-1 from the kernel's `products` (taken since the last
        change of the codes): the packed copy's, completed with the rows added or written since it was made."""
        if n * self.codes.shape[1] > PACK_BYTES:
            return products
        held = self._packed_rows
        dots = products
        if n > held:  # rows added since the copy was made
            tail = np.asarray(numkong.cdist(query_codes[None, :], self.codes[held:n], metric="dot"))[0]
            dots = np.concatenate([dots, tail.astype(np.int32)])
        if self._changed:
            dots = dots if dots.flags.writeable else dots.copy()
            rows = np.fromiter(self._changed, dtype=np.int64, count=len(self._changed))
            dots[rows] = self.codes[rows].astype(np.int32) @ query_codes.astype(np.int32)
        return dots
