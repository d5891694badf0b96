"""Distributed LU with partial pivoting and the solve of ``a x = b`` built on it, as collective
calls (docs/models.md#distributed.lu): ``lu_dist`` on a matrix already block-cyclic on a grid
(pdgetrf's contract), ``lu_factor`` and ``solve`` from the root's matrix with a ``Plan``. The
factorization loop itself, one rank's part of it, is ``lu_factorization.LUFactorization``.

``solve`` appends the right-hand sides as one more block column (owned by the process column
after the last one of A): the interchanges, U12 solve and trailing updates of the factorization
carry them along, which is the forward substitution, then the back substitution U x = y passes
y from the owner of each block column to the owner of the one before (a ring), ending on the
root. 1 x c grids only: the selector plans solves there.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan
from autotune.kernels.inputs import finite_checked, work_buffer

from .checks import all_finite, root_square
from .lu_factorization import LUFactorization
from .movement import DistMatrix, gather_columns, scatter_columns
from .plan import Phases
from .runs import PlanRun, agree_plan, cyclic_layout, plan_run

if TYPE_CHECKING:
    from mpi4py import MPI


def lu_dist(A: DistMatrix, grid, b: int, lookahead: bool = True, *, backend: str = "scipy-openblas",
            threads: int | None = None, phases: Phases | None = None) -> tuple[DistMatrix, np.ndarray, int]:
    """Collective LU of a square block-cyclic (block b, ``grid``) float64 matrix already spread
    over the grid's ranks: ``(factor in the same layout, global 0-based pivots, info)`` on every
    rank (pdgetrf's contract on distributed data). The local pieces are factored in place when
    Fortran-ordered (else a Fortran copy). Bad input: ValueError on every rank of ``A.comm``."""
    from autotune import backends

    from .collective import agree

    err = be = None
    n = A.layout.shape[0]
    try:
        if A.layout.shape[0] != A.layout.shape[1] or b < 1:
            raise ValueError(f"needs a square matrix and a block b >= 1, got {A.layout.shape}, b={b}")
        if not A.layout.is_block_cyclic(grid.r, grid.c, b):
            raise ValueError(f"layout {A.layout.describe()} is not block-cyclic {b}x{b} on the {grid.r}x{grid.c} grid")
        if A.local.dtype != np.float64 or A.local.shape != A.layout.local_shape(A.comm.rank):
            raise ValueError("local piece must be float64 and match the layout")
        be = backends.get(backend)
    except (ValueError, backends.BackendUnavailable) as exc:
        err = ValueError(str(exc))
    agree(A.comm, err)
    local = A.local if A.local.flags.f_contiguous else np.asfortranarray(A.local)
    ipiv, info = np.zeros(n, dtype=np.int64), 0
    if grid.inside and n:
        f = LUFactorization(local, A.layout, grid, be, lookahead)
        with be.threads(threads) if threads else nullcontext():
            info = f.run()
        ipiv = f.ipiv
        if phases is not None:
            for name, sec in f.seconds.items():
                phases.seconds[name] += sec
    return DistMatrix(local, A.layout, A.comm), ipiv, info


def _check_root(a, plan: Plan, check_finite: bool = True, overwrite_a: bool = False) -> np.ndarray:
    """The root's matrix as Fortran-ordered float64 to scatter (only read), checked finite when
    ``check_finite``: ``a`` itself when ``overwrite_a`` allows and it is so already, else a copy."""
    arr = root_square(a, "LU")
    return work_buffer(a, arr, overwrite=overwrite_a, check_finite=check_finite, order="F",
                       finite=lambda w: all_finite(w, plan.backend, plan.threads))[0]


def _plan_problem(plan: Plan) -> str | None:
    return None if plan.b >= 1 else f"distributed LU needs a block size b >= 1, plan has b={plan.b}"


def _solve_problem(plan: Plan) -> str | None:
    if plan.r != 1:
        return f"the distributed solve runs on 1 x c grids, plan has {plan.r}x{plan.c}"
    return _plan_problem(plan)


def _scatter(run: PlanRun, src: np.ndarray | None, n: int) -> np.ndarray:
    layout = cyclic_layout(run.plan, n)
    if run.plan.r == 1:
        return scatter_columns(src, n, layout.cols, run.comm, 0)
    return DistMatrix.from_root(src, layout, run.comm, 0).local


def _gather(run: PlanRun, local: np.ndarray, n: int) -> np.ndarray | None:
    layout = cyclic_layout(run.plan, n)
    if run.plan.r == 1:
        return gather_columns(local, n, layout.cols, run.comm, 0)
    return DistMatrix(local, layout, run.comm).to_root(0, order="F")


def _factor(run: PlanRun, local: np.ndarray, n: int, lookahead: bool, xb=None) -> LUFactorization:
    grid = run.grid()
    f = LUFactorization(local, cyclic_layout(run.plan, n), grid, run.be, lookahead, xb)
    f.run()
    f.loop_seconds = dict(f.seconds)
    if run.phases is not None:
        for name, sec in f.seconds.items():
            run.phases.seconds[name] += sec
    return f


def lu_factor(a: np.ndarray | None, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None,
              lookahead: bool = True, overwrite_a: bool = False,
              check_finite: bool = True) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Collective LU of the root's square ``a`` on ranks 0..plan.p-1 (grid plan.r x plan.c, block
    plan.b): the root gets ``(lu, piv, info)`` (scipy's ``lu_factor`` pair, 0-based int32 pivots,
    and LAPACK's info: > 0 for an exactly zero pivot), others None. Bad input: ValueError on
    every rank of ``comm``. ``overwrite_a``, ``check_finite``: scipy's, on the root's ``a``."""
    t0 = time.perf_counter()
    src, n = agree_plan(comm, plan, "lu", root, _plan_problem,
                        lambda: _root_source(a, plan, check_finite, overwrite_a))
    if n == 0:
        return (np.empty((0, 0), order="F"), np.empty(0, np.int32), 0) if comm.rank == root else None
    with plan_run(comm, plan, root, phases) as run:
        if run is None:
            return None
        local = _scatter(run, src, n)
        run.add("distribution", time.perf_counter() - t0)
        f = _factor(run, local, n, lookahead)
        with run.ph("collection"):
            lu = _gather(run, local, n)
        if not run.is_root:
            return None
        return lu, f.ipiv.astype(np.int32), f.info


def _root_source(a, plan: Plan, check_finite: bool, overwrite_a: bool) -> tuple[np.ndarray, int]:
    arr = _check_root(a, plan, check_finite, overwrite_a)
    return arr, arr.shape[0]


def solve(a: np.ndarray | None, b: np.ndarray | None, comm: MPI.Comm, plan: Plan, *, root: int = 0,
          phases: Phases | None = None, lookahead: bool = True, overwrite_a: bool = False,
          check_finite: bool = True) -> tuple[np.ndarray, int] | None:
    """Collective solution of ``a x = b`` (root's square ``a``, ``b`` n x nrhs) on a 1 x c plan:
    every rank of the plan gets ``(x, info)``, x on the root only (None elsewhere); info > 0: exactly
    singular (x None), known to all of them. Ranks beyond the plan get None. ``overwrite_a``,
    ``check_finite``: scipy's, on the root's ``a`` and ``b`` (``b`` is never written)."""
    t0 = time.perf_counter()
    src, (n, nrhs) = agree_plan(comm, plan, "gesv", root, _solve_problem,
                                lambda: _root_rhs(a, b, plan, check_finite, overwrite_a))
    if n == 0 or nrhs == 0:
        return (np.zeros((n, nrhs), order="F") if comm.rank == root else None), 0
    with plan_run(comm, plan, root, phases) as run:
        if run is None:
            return None
        A, B = src if src is not None else (None, None)
        local = _scatter(run, A, n)
        xb = _scatter_rhs(run, B, n, nrhs)
        run.add("distribution", time.perf_counter() - t0)
        f = _factor(run, local, n, lookahead, xb)
        if f.info:       # every rank saw every panel's info: all leave here together
            return None, f.info
        x = f.back_substitute(nrhs)
        if run.phases is not None:
            for name, sec in f.seconds.items():
                run.phases.seconds[name] += sec - f.loop_seconds[name]
        return x, 0


def _root_rhs(a, b, plan: Plan, check_finite: bool,
              overwrite_a: bool) -> tuple[tuple[np.ndarray, np.ndarray], tuple[int, int]]:
    arr = _check_root(a, plan, check_finite, overwrite_a)
    if b is None:
        raise ValueError("the root rank must pass the right-hand sides")
    rhs = np.asarray(b)
    if rhs.ndim != 2 or rhs.shape[0] != arr.shape[0]:
        raise ValueError(f"b has shape {rhs.shape}, expected ({arr.shape[0]}, nrhs)")
    if np.iscomplexobj(rhs):
        raise ValueError("distributed solve takes real right-hand sides")
    rhs = np.array(rhs, dtype=np.float64, order="F")
    finite_checked(rhs, check_finite)
    return (arr, rhs), rhs.shape


def _scatter_rhs(run: PlanRun, B: np.ndarray | None, n: int, nrhs: int) -> np.ndarray | None:
    """The right-hand sides to the owner of block column N (the process column after A's last)."""
    from mpi4py import MPI

    plan = run.plan
    holder = int(cyclic_layout(plan, n).cols.block_owner(-(-n // plan.b)))
    if holder == 0:
        return B if run.is_root else None
    if run.is_root:
        run.comm.Send([B, MPI.DOUBLE], holder, 7)
        return None
    if run.rank == holder:
        xb = np.empty((n, nrhs), order="F")
        run.comm.Recv([xb, MPI.DOUBLE], 0, 7)
        return xb
    return None


ALGORITHMS = {"lu": lu_factor, "gesv": solve}

__all__ = ["ALGORITHMS", "lu_dist", "lu_factor", "solve"]
