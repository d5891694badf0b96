"""Where each element of a distributed m x n matrix lives (pure index arithmetic, no MPI).

A ``Layout`` is two independent ``Axis`` splits, rows over the r process rows and columns over
the c process columns of a grid; rank ``pr * c + pc`` owns the (pr, pc) piece and ranks beyond
``r * c`` own nothing. An axis is either *balanced block* (contiguous, sizes differ by at most
one: 1-D and 2-D block layouts) or *block-cyclic* with block ``nb`` (ScaLAPACK's layout, first
block on part 0; the last block may be short). With ``weights`` an axis is heterogeneous (HoHe,
001 §5.2): balanced blocks get sizes proportional to them; cyclic blocks are dealt by a repeating
pattern that gives each part a whole number of blocks per cycle in proportion to them (``cycle``),
interleaved (Kalinov and Lastovetsky's heterogeneous block-cyclic distribution). Local pieces are
stored in Fortran order with their rows and columns in ascending global order.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


def largest_remainders(exact, n: int) -> np.ndarray:
    """Whole sizes summing to ``n`` from real ones summing to ``n``: each rounded down, the ones
    left given to the largest remainders (ties to the first)."""
    exact = np.asarray(exact, float)
    sizes = np.floor(exact).astype(np.int64)
    short = n - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:short]] += 1
    return sizes


# Most blocks a part gets per cycle of a weighted cyclic axis (the fastest part's count).
CYCLE_RESOLUTION = 4


def cycle(weights) -> tuple[int, ...]:
    """Blocks per cycle of each part of a weighted cyclic axis: the weights scaled so the largest
    gets ``CYCLE_RESOLUTION``, rounded (at least 1), divided by their common divisor."""
    w = np.asarray(weights, float)
    counts = np.maximum(1, np.rint(w / w.max() * CYCLE_RESOLUTION)).astype(np.int64)
    return tuple(int(x) for x in counts // np.gcd.reduce(counts))


def _deal(counts: tuple[int, ...]) -> np.ndarray:
    """The owner of each block of one cycle: smooth weighted round robin, so a part's blocks are
    spread over the cycle (plain round robin when every count is 1)."""
    credit, total = np.zeros(len(counts)), sum(counts)
    owners = np.empty(total, np.int64)
    for i in range(total):
        credit += counts
        owners[i] = int(np.argmax(credit))
        credit[owners[i]] -= total
    return owners


@dataclass(frozen=True)
class Axis:
    """``n`` indices split over ``parts`` parts: balanced blocks (``block=None``) or cyclic blocks."""

    n: int
    parts: int
    block: int | None = None
    weights: tuple[float, ...] | None = None    # shares proportional to these (HoHe)

    def __post_init__(self):
        if self.n < 0 or self.parts < 1 or (self.block is not None and self.block < 1):
            raise ValueError(f"invalid axis: n={self.n}, parts={self.parts}, block={self.block}")
        if self.weights is not None and (len(self.weights) != self.parts
                                         or not all(np.isfinite(w) and w > 0 for w in self.weights)):
            raise ValueError(f"invalid axis weights {self.weights} for {self.parts} parts")

    # -- cyclic axes: blocks dealt by a repeating pattern ------------------------------------------
    @cached_property
    def pattern(self) -> np.ndarray:
        """Cyclic: the part owning each block of one cycle (0, 1, .., parts-1 unweighted)."""
        if self.weights is None:
            return np.arange(self.parts, dtype=np.int64)
        return _deal(cycle(self.weights))

    @cached_property
    def _slots(self) -> tuple[np.ndarray, np.ndarray]:
        """Cyclic: each part's blocks per cycle, and each cycle position's rank among its part's."""
        if self.weights is None:
            return np.ones(self.parts, np.int64), np.zeros(self.parts, np.int64)
        pat = self.pattern
        per = np.bincount(pat, minlength=self.parts)
        before = np.array([(pat[:q] == pat[q]).sum() for q in range(pat.size)], np.int64)
        return per, before

    def block_owner(self, J) -> np.ndarray:
        """Cyclic: the part owning each global block ``J``."""
        pat = self.pattern
        return pat[np.asarray(J, dtype=np.int64) % pat.size]

    def blocks(self, part: int, start: int = 0) -> np.ndarray:
        """Cyclic: the global blocks >= ``start`` that ``part`` owns, ascending."""
        nblocks = -(-self.n // self.block)
        J = np.arange(start, max(nblocks, start), dtype=np.int64)
        return J[self.block_owner(J) == part]

    def _held(self, part: int, J: int) -> int:
        """Cyclic: how many of the blocks before block ``J`` ``part`` owns."""
        if self.weights is None:             # one block per part per cycle (numroc's arithmetic)
            whole, rest = divmod(int(J), self.parts)
            return whole + (part < rest)
        per, _ = self._slots
        whole, rest = divmod(int(J), self.pattern.size)
        return whole * int(per[part]) + int((self.pattern[:rest] == part).sum())

    def first_local(self, part: int, J: int) -> int:
        """Cyclic: position in ``part``'s local order of its first index in a block >= J."""
        return min(self._held(part, J) * self.block, self.count(part))

    def bounds(self) -> np.ndarray:
        """Balanced blocks: the first index of each part and n (largest remainders where weighted)."""
        if self.weights is None:
            q, r = divmod(self.n, self.parts)
            sizes = np.full(self.parts, q) + (np.arange(self.parts) < r)
        else:
            w = np.asarray(self.weights, float)
            sizes = largest_remainders(self.n * w / w.sum(), self.n)
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def span(self, part: int) -> tuple[int, int]:
        """Balanced blocks: [start, stop) of ``part``."""
        b = self.bounds()
        return int(b[part]), int(b[part + 1])

    def count(self, part: int) -> int:
        """How many indices ``part`` owns (ScaLAPACK's numroc for the cyclic case)."""
        if self.block is None:
            start, stop = self.span(part)
            return stop - start
        nblocks = -(-self.n // self.block)
        held = self._held(part, nblocks)
        owns_last = nblocks and held > self._held(part, nblocks - 1)
        return held * self.block - (nblocks * self.block - self.n if owns_last else 0)   # the last block is short

    def most(self) -> int:
        """How many indices the largest part owns (with weights not necessarily part 0)."""
        return max(self.count(part) for part in range(self.parts))

    def indices(self, part: int) -> np.ndarray:
        """Global indices ``part`` owns, ascending (its local order)."""
        if self.block is None:
            return np.arange(*self.span(part), dtype=np.int64)
        starts = self.blocks(part) * self.block
        idx = (starts[:, None] + np.arange(self.block, dtype=np.int64)[None, :]).ravel()
        return idx[idx < self.n]

    def owner(self, i) -> np.ndarray:
        """Part owning each global index ``i``."""
        i = np.asarray(i, dtype=np.int64)
        if self.block is None:
            return np.searchsorted(self.bounds(), i, side="right") - 1
        return self.block_owner(i // self.block)

    def local_index(self, i) -> np.ndarray:
        """Position of each global index ``i`` in its owner's local order."""
        i = np.asarray(i, dtype=np.int64)
        if self.block is None:
            return i - self.bounds()[self.owner(i)]
        per, before = self._slots
        J = i // self.block
        whole, q = np.divmod(J, self.pattern.size)
        return (whole * per[self.pattern[q]] + before[q]) * self.block + i % self.block


@dataclass(frozen=True)
class Layout:
    """An m x n matrix over an r x c grid (``rows.parts`` x ``cols.parts``)."""

    rows: Axis
    cols: Axis

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.n, self.cols.n

    @property
    def grid(self) -> tuple[int, int]:
        return self.rows.parts, self.cols.parts

    @property
    def size(self) -> int:
        """Ranks holding a piece (``r * c``)."""
        return self.rows.parts * self.cols.parts

    def coords(self, rank: int) -> tuple[int, int] | None:
        """(process row, process column) of ``rank``, or None for a rank outside the grid."""
        if not 0 <= rank < self.size:
            return None
        return divmod(rank, self.cols.parts)

    def rank_of(self, pr: int, pc: int) -> int:
        return pr * self.cols.parts + pc

    def local_shape(self, rank: int) -> tuple[int, int]:
        rc = self.coords(rank)
        if rc is None:
            return 0, 0
        return self.rows.count(rc[0]), self.cols.count(rc[1])

    def local_indices(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Global row and column indices of ``rank``'s piece (empty outside the grid)."""
        rc = self.coords(rank)
        if rc is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return self.rows.indices(rc[0]), self.cols.indices(rc[1])

    def empty_local(self, rank: int, dtype=np.float64) -> np.ndarray:
        return np.empty(self.local_shape(rank), dtype=dtype, order="F")

    def is_block_cyclic(self, r: int, c: int, b: int) -> bool:
        """Whether this is a block-cyclic layout (weighted or not) with b x b blocks on an r x c grid."""
        return self.grid == (r, c) and self.rows.block == b and self.cols.block == b

    def describe(self) -> str:
        kind = {(None, None): "block"}.get((self.rows.block, self.cols.block),
                                            f"block-cyclic {self.rows.block}x{self.cols.block}")
        if self.rows.weights is not None or self.cols.weights is not None:
            kind = f"weighted {kind}"
        return f"{self.shape[0]}x{self.shape[1]} {kind} on {self.grid[0]}x{self.grid[1]}"


def row_block(m: int, n: int, p: int, weights: tuple[float, ...] | None = None) -> Layout:
    """1-D block layout: balanced bands of rows on p processes (BSR), proportional to ``weights``."""
    return Layout(Axis(m, p, weights=weights), Axis(n, 1))


def block_2d(m: int, n: int, r: int, c: int) -> Layout:
    """2-D block (checkerboard) layout on an r x c grid (CBSR, Cannon)."""
    return Layout(Axis(m, r), Axis(n, c))


def block_cyclic(m: int, n: int, r: int, c: int, mb: int, nb: int | None = None, weights=None) -> Layout:
    """2-D block-cyclic layout with mb x nb blocks on an r x c grid (SUMMA, Cholesky, LU); with
    ``weights`` (the rows' and the columns', ``grid_weights``), the heterogeneous one."""
    rw, cw = weights if weights is not None else (None, None)
    return Layout(Axis(m, r, mb, rw), Axis(n, c, nb if nb is not None else mb, cw))


def grid_weights(weights, r: int, c: int) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None] | None:
    """The weights of a block-cyclic grid's two axes from each rank's (row-major ranks): each
    process row's and column's summed speed (exact where speeds are row factor x column factor, as
    on 1-D grids); an axis whose cycle deals one block to every part stays unweighted (None)."""
    if weights is None:
        return None
    w = np.asarray(weights, float).reshape(r, c)

    def axis(total: np.ndarray) -> tuple[float, ...] | None:
        return None if set(cycle(total)) == {1} else tuple(float(x) for x in total)
    return axis(w.sum(axis=1)), axis(w.sum(axis=0))
