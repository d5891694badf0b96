"""Index arithmetic of the block columns of a square block-cyclic matrix, seen from one rank: what
the right-looking factorizations (Cholesky, LU) step through."""
from __future__ import annotations

import numpy as np

from autotune.geometry.layout import Axis


class BlockSteps:
    """n x n matrix in b x b blocks, rows dealt over ``rows.parts`` process rows and columns over
    ``cols.parts`` process columns by the axes' cyclic patterns (first block on part 0, only the
    last block short; weighted axes deal more blocks to some parts); this rank at (myr, myc)."""

    def __init__(self, rows: Axis, cols: Axis, myr: int, myc: int):
        self.rows, self.cols = rows, cols
        self.n, self.b, self.nr, self.nc, self.myr, self.myc = rows.n, rows.block, rows.parts, cols.parts, myr, myc
        self.mloc, self.nloc = rows.count(myr), cols.count(myc)
        self.N = -(-self.n // self.b) if self.n else 0
        self.last = self.n - (self.N - 1) * self.b if self.n else 0

    def size(self, J: int) -> int:
        """Width of block J."""
        return self.b if J < self.N - 1 else self.last

    def prow(self, J: int) -> int:
        """Process row holding block row J."""
        return int(self.rows.block_owner(J))

    def pcol(self, J: int) -> int:
        """Process column holding block column J."""
        return int(self.cols.block_owner(J))

    def lr(self, J: int) -> int:
        """First local row whose global block is >= J."""
        return self.rows.first_local(self.myr, J)

    def lc(self, J: int) -> int:
        """First local column whose global block is >= J."""
        return self.cols.first_local(self.myc, J)

    def my_columns(self, start: int = 0) -> np.ndarray:
        """Block columns >= ``start`` this rank's process column holds."""
        return self.cols.blocks(self.myc, start)
