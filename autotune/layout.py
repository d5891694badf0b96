"""Where each element of a distributed m x n matrix lives (pure index arithmetic, no MPI).

A ``Layout`` is two independent ``Axis`` splits, rows over the r process rows and columns over
the c process columns of a grid; rank ``pr * c + pc`` owns the (pr, pc) piece and ranks beyond
``r * c`` own nothing. An axis is either *balanced block* (contiguous, sizes differ by at most
one: 1-D and 2-D block layouts; with ``weights``, sizes proportional to them, the heterogeneous
layout HoHe of 001 §5.2) or *block-cyclic* with block ``nb`` (ScaLAPACK's layout, first
block on part 0; the last block may be short). Local pieces are stored in Fortran order with
their rows and columns in ascending global order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Axis:
    """``n`` indices split over ``parts`` parts: balanced blocks (``block=None``) or cyclic blocks."""

    n: int
    parts: int
    block: int | None = None
    weights: tuple[float, ...] | None = None    # balanced blocks only: shares proportional to these

    def __post_init__(self):
        if self.n < 0 or self.parts < 1 or (self.block is not None and self.block < 1):
            raise ValueError(f"invalid axis: n={self.n}, parts={self.parts}, block={self.block}")
        if self.weights is not None and (self.block is not None or len(self.weights) != self.parts
                                         or not all(w > 0 for w in self.weights)):
            raise ValueError(f"invalid axis weights {self.weights} for {self.parts} balanced parts")

    def bounds(self) -> np.ndarray:
        """Balanced blocks: the first index of each part and n (largest remainders where weighted)."""
        if self.weights is None:
            q, r = divmod(self.n, self.parts)
            sizes = np.full(self.parts, q) + (np.arange(self.parts) < r)
        else:
            w = np.asarray(self.weights, float)
            exact = self.n * w / w.sum()
            sizes = np.floor(exact).astype(np.int64)
            short = self.n - int(sizes.sum())
            sizes[np.argsort(-(exact - sizes), kind="stable")[:short]] += 1
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
        nblocks, last = divmod(self.n, self.block)
        full_rounds, extra = divmod(nblocks, self.parts)
        cnt = full_rounds * self.block
        if part < extra:
            cnt += self.block
        elif part == extra:
            cnt += last
        return cnt

    def indices(self, part: int) -> np.ndarray:
        """Global indices ``part`` owns, ascending (its local order)."""
        if self.block is None:
            return np.arange(*self.span(part), dtype=np.int64)
        starts = np.arange(part * self.block, self.n, self.parts * self.block, dtype=np.int64)
        idx = (starts[:, None] + np.arange(self.block, dtype=np.int64)[None, :]).ravel()
        return idx[idx < self.n]

    def owner(self, i) -> np.ndarray:
        """Part owning each global index ``i``."""
        i = np.asarray(i, dtype=np.int64)
        if self.block is None:
            return np.searchsorted(self.bounds(), i, side="right") - 1
        return (i // self.block) % self.parts

    def local_index(self, i) -> np.ndarray:
        """Position of each global index ``i`` in its owner's local order."""
        i = np.asarray(i, dtype=np.int64)
        if self.block is None:
            return i - self.bounds()[self.owner(i)]
        return (i // (self.block * self.parts)) * self.block + i % self.block


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

    def describe(self) -> str:
        kind = {(None, None): "block"}.get((self.rows.block, self.cols.block),
                                            f"block-cyclic {self.rows.block}x{self.cols.block}")
        return f"{self.shape[0]}x{self.shape[1]} {kind} on {self.grid[0]}x{self.grid[1]}"


def row_block(m: int, n: int, p: int, weights: tuple[float, ...] | None = None) -> Layout:
    """1-D block layout: balanced bands of rows on p processes (BSR), proportional to ``weights``."""
    return Layout(Axis(m, p, weights=weights), Axis(n, 1))


def block_2d(m: int, n: int, r: int, c: int) -> Layout:
    """2-D block (checkerboard) layout on an r x c grid (CBSR, Cannon)."""
    return Layout(Axis(m, r), Axis(n, c))


def block_cyclic(m: int, n: int, r: int, c: int, mb: int, nb: int | None = None) -> Layout:
    """2-D block-cyclic layout with mb x nb blocks on an r x c grid (SUMMA, Cholesky)."""
    return Layout(Axis(m, r, mb), Axis(n, c, nb if nb is not None else mb))
