"""Distributed Cholesky as collective calls: right-looking, 2-D block-cyclic, with look-ahead (as
ScaLAPACK's pdpotrf, with overlap; docs/models.md#distributed.cholesky). ``cholesky_dist`` factors a
matrix already block-cyclic on a grid, ``cholesky`` the root's matrix with a ``Plan``; the
factorization loop, one rank's part of it, is ``cholesky_factorization``.

``cholesky`` moves the root's matrix without packing on 1-D grids: on 1 x c every rank's piece is
a set of whole column blocks, contiguous in a Fortran-ordered matrix, on r x 1 a set of whole row
blocks, contiguous in a C-ordered one; each block goes straight from the root's matrix into the
receiver's local piece (and back into the result), one message per block. The root picks the
matrix or its transpose (factor of the other triangle, result transposed back) so that this
holds without a copy. On 2-D grids the pieces are packed (``movement.scatter`` / ``gather``), the
transpose being used for a C-ordered matrix so that packing reads memory in order.

``cholesky`` uses the set-up every family shares (``runs``): checks agreed with the root's size
in one allgather, ranks ``0..plan.p-1`` renumbered so that the root is rank 0 (grid position
(0, 0)), ranks beyond returning None at once.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan
from autotune.kernels.inputs import finite_checked
from autotune.models.distributed_cholesky import flipped, memory_order, wanted_order

from .checks import all_finite, root_square
from .cholesky_factorization import factor_piece
from .collective import agree
from .grid import ProcessGrid
from .movement import DistMatrix, gather_columns, scatter_columns
from .plan import Phases
from .runs import PlanRun, agree_plan, cyclic_layout, plan_run

if TYPE_CHECKING:
    from mpi4py import MPI


def cholesky_dist(A: DistMatrix, grid: ProcessGrid, b: int, lower: bool = False, lookahead: bool = True,
                  *, backend: str = "numpy-openblas", threads: int | None = None, overwrite_a: bool = False,
                  check_finite: bool = True, phases: Phases | None = None) -> DistMatrix:
    """Collective Cholesky factor of a block-cyclic (block b, ``grid``) symmetric matrix.

    Local pieces may be Fortran- or C-ordered (the factor keeps the order). Returns the factor in
    the same layout, the other triangle zeroed (``scipy.linalg.cholesky``'s
    result, distributed). Only the ``lower`` (or upper) triangle of A is read. ``threads``: BLAS
    threads per rank (None: leave the library's setting). Not positive definite: LinAlgError with
    scipy's message on every rank; bad input: ValueError on every rank of ``A.comm``.
    """
    from mpi4py import MPI

    from autotune import backends

    comm = A.comm
    err = None
    try:
        if A.layout.shape[0] != A.layout.shape[1]:
            raise ValueError(f"Input array is expected to be square but has the shape: {A.layout.shape}.")
        if b < 1:
            raise ValueError(f"block size must be >= 1, got {b}")
        if not A.layout.is_block_cyclic(grid.r, grid.c, b):
            raise ValueError(f"layout {A.layout.describe()} is not block-cyclic {b}x{b} on the "
                             f"{grid.r}x{grid.c} grid")
        if MPI.Comm.Compare(comm, grid.comm) not in (MPI.IDENT, MPI.CONGRUENT):
            raise ValueError("the matrix and the grid live on different communicators")
        if A.local.dtype != np.float64:
            raise ValueError(f"distributed Cholesky takes float64, got {A.local.dtype}")
        if A.local.shape != A.layout.local_shape(comm.rank):
            raise ValueError(f"local piece {A.local.shape} does not match the layout")
        finite_checked(A.local, check_finite)
        be = backends.get(backend)
        if threads is not None and not 1 <= threads <= be.max_threads:
            raise ValueError(f"threads per rank must be in 1..{be.max_threads}, got {threads}")
    except (ValueError, TypeError, backends.BackendUnavailable) as exc:
        err = exc if not isinstance(exc, backends.BackendUnavailable) else ValueError(str(exc))
    agree(comm, err)
    # Every rank must see its piece in the same memory order (pieces travel packed in it); a piece
    # that is both (one row or column) takes the others' order.
    f_ok, c_ok = A.local.flags.f_contiguous, A.local.flags.c_contiguous
    orders = set(comm.allgather("" if f_ok and c_ok else "F" if f_ok else "C" if c_ok else "X"))
    mem = "C" if orders <= {"", "C"} and "C" in orders else "F"
    fits = f_ok if mem == "F" else c_ok
    local = A.local if overwrite_a and fits else np.array(A.local, order=mem)
    info = factor_piece(local, mem, A.layout, grid, comm, be, threads, lower, lookahead, phases) if grid.inside else 0
    if comm.size > grid.r * grid.c:          # ranks outside the grid learn the verdict too
        info = comm.bcast(info, root=0)
    if info:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    return DistMatrix(local, A.layout, comm)


def _check_root_matrix(a, plan: Plan, check_finite: bool = True) -> np.ndarray:
    """The root's matrix as float64 (scipy's errors for what no rank can factor), checked finite
    when ``check_finite``."""
    arr = root_square(a, "Cholesky").astype(np.float64, copy=False)
    finite_checked(arr, check_finite, lambda w: all_finite(w, plan.backend, plan.threads))
    return arr


def cholesky(a: np.ndarray | None, comm: MPI.Comm, plan: Plan, *, lower: bool = False, root: int = 0,
             phases: Phases | None = None, lookahead: bool = True, check_finite: bool = True) -> np.ndarray | None:
    """Collective ``scipy.linalg.cholesky(a, lower=lower)`` on ranks 0..plan.p-1 (grid plan.r x plan.c,
    block plan.b): the root passes a and receives the factor; others get None. The factor may come
    back in the other memory order than scipy's (Fortran): the root moves a or its transpose,
    whichever needs no packing (1-D grids) or packs in memory order (2-D grids), see the module doc.

    Bad input (root passing None, not square, not finite with ``check_finite``, a plan that does not
    fit): ValueError on every rank of ``comm``. Not positive definite: LinAlgError on every rank of
    the plan (ranks >= plan.p have already returned None). ``a`` is only read.
    """
    t0 = time.perf_counter()
    src, (n, flip) = agree_plan(comm, plan, "cholesky", root, _plan_problem,
                                lambda: _root_source(a, plan, check_finite))
    if n == 0:
        return np.empty((0, 0), order="F") if comm.rank == root else None
    with plan_run(comm, plan, root, phases) as run:
        if run is None:
            return None
        grid = run.grid()
        dist = _scatter(run, src, n)
        run.add("distribution", time.perf_counter() - t0)
        info = factor_piece(dist.local, _piece_order(plan, n), dist.layout, grid, run.comm, run.be, None,
                             lower != flip, lookahead, phases)
        if info:
            raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
        with run.ph("collection"):
            res = _gather(run, dist.local, n)
        return res.T if flip and res is not None else res


def _plan_problem(plan: Plan) -> str | None:
    """Why ``plan`` cannot run the distributed Cholesky (None: it can)."""
    return None if plan.b >= 1 else f"distributed Cholesky needs a block size b >= 1, plan has b={plan.b}"


def _root_source(a, plan: Plan, check_finite: bool = True) -> tuple[np.ndarray, tuple[int, bool]]:
    """Root only: (S, (n, flip)), S = a or a^T (flip) in the order the plan's grid moves without
    packing: Fortran for 1 x c and 2-D grids, C for r x 1 (lower factor of a = upper of a^T, transposed)."""
    arr = _check_root_matrix(a, plan, check_finite)
    src, flip = arr, False
    order, want = memory_order(arr), wanted_order(plan.r, plan.c)
    if flipped(plan.r, plan.c, order):
        src, flip = arr.T, True
    elif (plan.r == 1 or plan.c == 1) and not arr.flags[f"{want}_CONTIGUOUS"]:
        src = np.asarray(arr, order=want)
    return src, (arr.shape[0], flip)


def _piece_order(plan: Plan, n: int) -> str:
    """The memory order ``_scatter``'s pieces share (what ``cholesky_dist`` would agree on): C on
    r x 1 grids unless every piece is also Fortran (at most one row: with weights a part may
    hold none while another holds many), else Fortran."""
    if plan.r == 1 or plan.c != 1:
        return "F"
    rows = cyclic_layout(plan, n).rows
    return "C" if any(rows.count(i) > 1 for i in range(plan.r)) else "F"


def _scatter(run: PlanRun, src: np.ndarray | None, n: int) -> DistMatrix:
    """The root's S (rank 0 of ``run``) block-cyclic on the plan's grid: whole column blocks
    straight from S on 1 x c, whole row blocks on r x 1, packed pieces on 2-D grids."""
    plan, sub = run.plan, run.comm
    layout = cyclic_layout(plan, n)
    if plan.r != 1 and plan.c != 1:
        return DistMatrix.from_root(src, layout, sub, 0)
    if plan.r == 1:
        return DistMatrix(scatter_columns(src, n, layout.cols, sub, 0), layout, sub)
    return DistMatrix(scatter_columns(None if src is None else src.T, n, layout.rows, sub, 0).T, layout, sub)


def _gather(run: PlanRun, local: np.ndarray, n: int) -> np.ndarray | None:
    """The inverse of ``_scatter``: the whole factor (Fortran order) on the root, None elsewhere."""
    plan, sub = run.plan, run.comm
    layout = cyclic_layout(plan, n)
    if plan.r != 1 and plan.c != 1:
        return DistMatrix(local, layout, sub).to_root(0, order="F")
    if plan.r == 1:
        return gather_columns(local, n, layout.cols, sub, 0)
    res = gather_columns(local.T, n, layout.rows, sub, 0)
    return None if res is None else res.T


ALGORITHMS = {"cholesky": cholesky}

__all__ = ["ALGORITHMS", "cholesky", "cholesky_dist"]
