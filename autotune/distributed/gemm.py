"""Distributed matrix multiplication, the GEMM family (docs/models.md#distributed).

Every algorithm is called collectively as ``fn(a, b, comm, plan, *, root=0, phases=None)``: the
root passes A (m x k) and B (k x n), real arrays in any memory order (others pass anything, it is
ignored), and receives ``C = A @ B`` as a C-ordered float64 array; the other ranks get None. The
set-up is the one every family shares (``runs``): the plan and the operands are checked and any
problem raised on every rank alike, in the allgather that also hands out the root's shapes; ranks
``>= plan.p`` leave after one ``comm.Split`` and return None; the ``p`` used ranks form a
sub-communicator in which the root is rank 0 (so the root must be one of ranks ``0..p-1``).
Per-rank wall seconds go to ``phases`` (``distribution``: scatter/broadcast of the operands and the
root's packing, ``communication``: the algorithm's own exchanges, ``compute``: BLAS and Strassen
additions, ``collection``: gather of C). Local BLAS runs with ``plan.threads`` threads of
``plan.backend``. NaN and inf propagate as in numpy's ``a @ b``; the Strassen algorithms, whose
additions would change them, reject them. Buffers that live only inside a call (pieces, panels,
packing) are reused from call to call (``workspace``); C on the root is always fresh.

Memory order. A rank's pieces keep the memory order of the operand they come from and C pieces
are row-major, so packing and unpacking at the root are contiguous chunk copies (a transposing
copy is several times slower than a straight one); the local products use
BLAS transpose flags instead of copies. The block-cyclic algorithms (SUMMA, parallel Strassen)
keep Fortran pieces: with row-major A and B (numpy's default) they multiply ``C^T = B^T A^T``,
whose operands are then column-major views, on the transposed ``c x r`` grid (same messages, same
group sizes as ``A B`` on ``r x c``), and gather C^T column-major, which is C row-major.

Algorithms (``ALGORITHMS``):

- ``bsr``: rows of A in balanced bands (Scatterv, straight from a row-major A), B broadcast (Bcast),
  one local gemm, C bands gathered (Gatherv straight into C).
- ``cbsr``: A checkerboard on ``r x c``: row panels to process column 0 (Scatterv on that column),
  blocks along each process row (Scatterv), B broadcast, Allgatherv of the blocks along each row
  (every rank of row i then holds band i of A); rank (i, j) computes ``C_ij = A_i B_j``; C blocks
  gathered.
- ``cannon``: square ``q x q`` grid; A and B in balanced 2-D blocks (one Scatterv each; uneven
  blocks travel with their exact counts through buffers of the largest block), initial skew
  (A row i left by i, B column j up by j: Sendrecv), q local products separated by q - 1
  single-step shifts (Sendrecv); C blocks gathered.
- ``summa``: A, B, C block-cyclic (block ``plan.b``) on ``r x c``; per k-panel of width b the
  owning process column broadcasts its A panel along the rows, the owning process row its B panel
  along the columns, every rank adds a rank-b product into its C piece (``summa_dist``).
- ``strassen_summa`` (StPBLAS, docs/models.md#distributed.strassen_summa): ``plan.level``
  Strassen levels on distributed quadrants. Odd sizes are **padded** with zeros up to a multiple
  of ``2^l``; each of the ``4^l`` leaf blocks of A, B and C is its own block-cyclic matrix on the
  same grid and block, so a quadrant at any level is a set of leaves whose local pieces match
  elementwise: the 18 additions per level are local sweeps (Numba, ``autotune.kernels.dist_gemm``)
  for any ``b`` and grid, and the ``7^l`` leaf products are SUMMA on all p ranks (3-temporary schedule of
  ``autotune.kernels.strassen``).
- ``strassen_ms`` (StMS, docs/models.md#distributed.strassen_ms): the root forms the 7 level-1
  operand pairs and sends them round robin (product t to worker ``1 + t mod (p-1)``, blocking
  Send/Recv of contiguous arrays); workers multiply (BLAS, or ``level - 1`` more local Strassen
  levels) and send the product back; the root accumulates C as products arrive, overlapping with
  the workers. Odd sizes are **peeled** on the root (the odd row/column/inner index fixed up by
  gemm while the first products are computed). ``p = 1``: local Strassen with ``level`` levels
  (BLAS for level 0).

On one process BSR, CBSR, Cannon and SUMMA are one local gemm (no communication at all).

Lower-level API on distributed data: ``summa_dist`` (block-cyclic DistMatrix operands) and
``bsr_dist`` (A in row bands, B replicated).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan

from .gemm_grid import bsr, bsr_dist, cannon, cbsr, summa, summa_dist
from .gemm_run import _local, _run
from .gemm_strassen import strassen_ms, strassen_summa
from .plan import Phases

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["ALGORITHMS", "bsr", "bsr_dist", "cannon", "cbsr", "distributed_gemm", "strassen_ms",
           "strassen_summa", "summa", "summa_dist"]


ALGORITHMS: dict[str, Callable[..., np.ndarray | None]] = {
    "bsr": bsr, "cbsr": cbsr, "cannon": cannon, "summa": summa,
    "strassen_summa": strassen_summa, "strassen_ms": strassen_ms,
}


def distributed_gemm(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0,
                     phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by the algorithm ``plan.algorithm`` names (collective; C on the root)."""
    fn = ALGORITHMS.get(getattr(plan, "algorithm", None))
    if fn is None:                    # rejected by the agreed plan check on every rank
        return _run(str(getattr(plan, "algorithm", plan)), _local, a, b, comm, plan, root, phases)
    return fn(a, b, comm, plan, root=root, phases=phases)
