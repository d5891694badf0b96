"""An r x c process grid over the first r*c ranks of a communicator, with row and column comms."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI


class ProcessGrid:
    """Rank ``pr * c + pc`` sits at (pr, pc); ``row`` links a process row (c members), ``col`` a
    process column (r members). Ranks beyond r*c are outside (``inside`` False, comms None).
    Building it is collective over ``comm``."""

    def __init__(self, comm: MPI.Comm, r: int, c: int):
        from mpi4py import MPI

        if r < 1 or c < 1 or r * c > comm.size:
            raise ValueError(f"a {r}x{c} grid needs {r * c} ranks, communicator has {comm.size}")
        self.comm, self.r, self.c = comm, r, c
        self.inside = comm.rank < r * c
        self.pr, self.pc = divmod(comm.rank, c) if self.inside else (-1, -1)
        undefined = MPI.UNDEFINED
        row = comm.Split(self.pr if self.inside else undefined, self.pc)
        col = comm.Split(self.pc if self.inside else undefined, self.pr)
        self.row = row if self.inside else None
        self.col = col if self.inside else None

    def free(self) -> None:
        for sub in (self.row, self.col):
            if sub is not None:
                sub.Free()
        self.row = self.col = None

    def __enter__(self) -> ProcessGrid:
        return self

    def __exit__(self, *exc) -> None:
        self.free()
