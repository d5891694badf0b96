"""Index arithmetic of the block columns of a square block-cyclic matrix, seen from one rank: what
the right-looking factorizations (Cholesky, LU) step through."""
from __future__ import annotations


class BlockSteps:
    """n x n matrix in b x b blocks over an nr x nc grid, first block on part 0 (only the last
    block short); this rank at (myr, myc) holds an mloc x nloc piece."""

    def __init__(self, n: int, b: int, nr: int, nc: int, myr: int, myc: int, mloc: int, nloc: int):
        self.n, self.b, self.nr, self.nc, self.myr, self.myc = n, b, nr, nc, myr, myc
        self.mloc, self.nloc = mloc, nloc
        self.N = -(-n // b) if n else 0
        self.last = n - (self.N - 1) * b if n else 0

    def size(self, J: int) -> int:
        """Width of block J."""
        return self.b if J < self.N - 1 else self.last

    def lr(self, J: int) -> int:
        """First local row whose global block is >= J."""
        return min(max(0, -(-(J - self.myr) // self.nr)) * self.b, self.mloc)

    def lc(self, J: int) -> int:
        """First local column whose global block is >= J."""
        return min(max(0, -(-(J - self.myc) // self.nc)) * self.b, self.nloc)
