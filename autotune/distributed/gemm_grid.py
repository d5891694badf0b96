"""The distributed gemm algorithms on process grids: BSR, CBSR, Cannon and SUMMA (with the
lower-level ``bsr_dist`` and ``summa_dist`` on distributed data)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan
from autotune.geometry.layout import Axis, Layout

from . import workspace
from .collective import agree
from .gemm_run import (
    _bcast_matrix,
    _double,
    _gather_blocks,
    _gather_leaves,
    _gemm,
    _result_piece,
    _Run,
    _run,
    _scatter_blocks,
    _scatter_leaves,
)
from .grid import ProcessGrid
from .movement import DistMatrix
from .plan import Phases, timed

if TYPE_CHECKING:
    from mpi4py import MPI


def _bsr(run: _Run) -> np.ndarray | None:
    comm, m, k, n = run.comm, run.m, run.k, run.n
    rows = Axis(m, comm.size, weights=run.plan.weights)
    with run.ph("distribution"):
        aloc = _scatter_blocks(comm, run.a, rows, Axis(k, 1), run.a_order)
        bmat = _bcast_matrix(comm, run.b, (k, n), run.b_order)
    with run.ph("compute"):
        out, cloc = _result_piece(comm, rows, Axis(n, 1))
        _gemm(run.be, aloc, bmat, cloc)
    with run.ph("collection"):
        return _gather_blocks(comm, cloc, rows, Axis(n, 1), out)


def bsr(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B with A's rows block-striped over p ranks and B replicated (docs/models.md#distributed.bsr)."""
    return _run("bsr", _bsr, a, b, comm, plan, root, phases)


def bsr_dist(A: DistMatrix, B: np.ndarray, *, backend: str = "numpy-openblas", threads: int = 1,
             phases: Phases | None = None) -> DistMatrix:
    """C = A @ B for A distributed by rows (any row split, one process column) and B replicated on
    every rank; C comes back in A's row split. Collective over ``A.comm``; no communication."""
    from autotune import backends

    comm = A.comm
    err = None
    try:
        bb = np.asarray(B)
        if A.layout.cols.parts != 1:
            raise ValueError(f"A must be split by rows only, got {A.layout.describe()}")
        if bb.ndim != 2 or bb.shape[0] != A.shape[1]:
            raise ValueError(f"B of shape {bb.shape} does not conform with A of shape {A.shape}")
        if bb.dtype != np.float64 or A.local.dtype != np.float64:
            raise ValueError("A and B must be float64")
        if A.local.shape != A.layout.local_shape(comm.rank):
            raise ValueError(f"A's local piece {A.local.shape} does not match its layout")
        be = backends.get(backend)
    except Exception as exc:
        err = exc if isinstance(exc, ValueError) else ValueError(str(exc))
    agree(comm, err)
    lay = Layout(A.layout.rows, Axis(bb.shape[1], 1))
    cloc = lay.empty_local(comm.rank)
    with timed(phases, "compute"), be.threads(threads):
        _gemm(be, A.local, bb, cloc)
    return DistMatrix(cloc, lay, comm)


# -- CBSR ------------------------------------------------------------------------------------------

def _cbsr(run: _Run) -> np.ndarray | None:
    from mpi4py import MPI

    comm, plan, m, k, n, o = run.comm, run.plan, run.m, run.k, run.n, run.a_order
    r, c = plan.r, plan.c
    rows, kcols, ncols = Axis(m, r), Axis(k, c), Axis(n, c)
    dbl = _double()
    grid = run.grid(r, c)
    pr, pc = grid.pr, grid.pc
    mi = rows.count(pr)
    kc = np.array([kcols.count(j) for j in range(c)], dtype=np.int64)
    kd = np.concatenate([[0], np.cumsum(kc)[:-1]]).astype(np.int64)
    counts, displs = mi * kc, mi * kd
    panel = workspace.empty("panel", mi * k if c > 1 else 0)     # band pr of A as c blocks (mi x k_j), order o
    with run.ph("distribution"):
        if pc == 0:                          # 1. row panels from the root down process column 0
            band = run.a if r == 1 else _scatter_blocks(grid.col, run.a, rows, Axis(k, 1), o)
            for j in range(c if c > 1 else 0):   # one process column: the band is the block
                panel[displs[j]:displs[j] + counts[j]].reshape((mi, kc[j]), order=o)[...] = \
                    band[:, kd[j]:kd[j] + kc[j]]
        if c > 1:                            # 2. blocks along each process row
            if pc == 0:
                grid.row.Scatterv([panel, (counts, displs), dbl], MPI.IN_PLACE, root=0)
            else:
                grid.row.Scatterv(None, [panel[displs[pc]:displs[pc] + counts[pc]], dbl], root=0)
        bmat = _bcast_matrix(comm, run.b, (k, n), run.b_order)
    with run.ph("communication"):            # 3. every rank of row pr gathers band pr
        if c > 1:
            grid.row.Allgatherv(MPI.IN_PLACE, [panel, (counts, displs), dbl])
    with run.ph("compute"):
        n0, n1 = ncols.span(pc)
        out, cloc = _result_piece(comm, rows, ncols)
        for j in range(c):
            ablk = band if c == 1 else panel[displs[j]:displs[j] + counts[j]].reshape((mi, kc[j]), order=o)
            _gemm(run.be, ablk, bmat[kd[j]:kd[j] + kc[j], n0:n1], cloc, 0.0 if j == 0 else 1.0)
    with run.ph("collection"):
        return _gather_blocks(comm, cloc, rows, ncols, out)


def cbsr(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B with A checkerboard on r x c (gathered along rows) and B replicated
    (docs/models.md#distributed.cbsr)."""
    return _run("cbsr", _cbsr, a, b, comm, plan, root, phases)


# -- Cannon ----------------------------------------------------------------------------------------

def _cannon(run: _Run) -> np.ndarray | None:
    comm, q, m, k, n = run.comm, run.plan.r, run.m, run.k, run.n
    ao, bo = run.a_order, run.b_order
    mrows, kax, ncols = Axis(m, q), Axis(k, q), Axis(n, q)
    dbl = _double()
    grid = run.grid(q, q)
    i, j = grid.pr, grid.pc
    mi, nj = mrows.count(i), ncols.count(j)
    kl = [kax.count(t) for t in range(q)]
    abuf = [workspace.empty(nm, mi * kl[0]) for nm in ("a", "a2")]      # largest blocks (part 0)
    bbuf = [workspace.empty(nm, kl[0] * nj) for nm in ("b", "b2")]

    def a_blk(buf, t):
        return buf[:mi * kl[t]].reshape((mi, kl[t]), order=ao)

    def b_blk(buf, t):
        return buf[:kl[t] * nj].reshape((kl[t], nj), order=bo)

    with run.ph("distribution"):
        _scatter_blocks(comm, run.a, mrows, kax, ao, abuf[0])
        _scatter_blocks(comm, run.b, kax, ncols, bo, bbuf[0])
    with run.ph("communication"):             # skew: A_ij -> (i, j - i), B_ij -> (i - j, j)
        if i % q:
            t = (i + j) % q
            grid.row.Sendrecv([abuf[0][:mi * kl[j]], dbl], (j - i) % q, 0,
                              [abuf[1][:mi * kl[t]], dbl], t, 0)
            abuf.reverse()
        if j % q:
            t = (i + j) % q
            grid.col.Sendrecv([bbuf[0][:kl[i] * nj], dbl], (i - j) % q, 1,
                              [bbuf[1][:kl[t] * nj], dbl], t, 1)
            bbuf.reverse()
    out, cloc = _result_piece(comm, mrows, ncols)
    for s in range(q):
        t = (i + j + s) % q
        with run.ph("compute"):
            _gemm(run.be, a_blk(abuf[0], t), b_blk(bbuf[0], t), cloc, 0.0 if s == 0 else 1.0)
        if s == q - 1:
            break
        u = (t + 1) % q
        with run.ph("communication"):         # A one step left, B one step up
            grid.row.Sendrecv([abuf[0][:mi * kl[t]], dbl], (j - 1) % q, 2,
                              [abuf[1][:mi * kl[u]], dbl], (j + 1) % q, 2)
            grid.col.Sendrecv([bbuf[0][:kl[t] * nj], dbl], (i - 1) % q, 3,
                              [bbuf[1][:kl[u] * nj], dbl], (i + 1) % q, 3)
            abuf.reverse()
            bbuf.reverse()
    with run.ph("collection"):
        return _gather_blocks(comm, cloc, mrows, ncols, out)


def cannon(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by Cannon's algorithm on a square q x q grid, p = q^2 (docs/models.md#distributed.cannon)."""
    return _run("cannon", _cannon, a, b, comm, plan, root, phases)


# -- SUMMA -----------------------------------------------------------------------------------------

class _SummaWork:
    """Panel buffers reused by every SUMMA step (and every Strassen leaf product)."""

    def __init__(self, mloc: int, nloc: int, b: int):
        self.x = workspace.empty("panel_x", mloc * b)
        self.y = workspace.empty("panel_y", b * nloc)


def _summa_core(grid: ProcessGrid, xloc: np.ndarray, yloc: np.ndarray, zloc: np.ndarray,
                kk: int, b: int, be, beta: float, phases: Phases | None, work: _SummaWork) -> None:
    """zloc = xloc-panels times yloc-panels + beta zloc on this rank: X's columns and Y's rows
    block-cyclic with block b over the grid's c columns and r rows; Fortran-contiguous pieces."""
    dbl = _double()
    r, c = grid.r, grid.c
    mloc, nloc = zloc.shape
    nsteps = -(-kk // b)
    if nsteps == 0:
        _gemm(be, xloc, yloc, zloc, beta)
        return
    for s in range(nsteps):
        w = min(b, kk - s * b)
        own_c, off_c = s % c, (s // c) * b
        own_r, off_r = s % r, (s // r) * b
        with timed(phases, "communication"):
            if grid.pc == own_c:
                xp = xloc[:, off_c:off_c + w]
                if c > 1:
                    grid.row.Bcast([xp.reshape(-1, order="F"), dbl], root=own_c)
            else:
                flat = work.x[:mloc * w]
                grid.row.Bcast([flat, dbl], root=own_c)
                xp = flat.reshape((mloc, w), order="F")
            if r == 1:
                yp = yloc[off_r:off_r + w, :]
            else:
                flat = work.y[:w * nloc]
                yp = flat.reshape((w, nloc), order="F")
                if grid.pr == own_r:
                    yp[...] = yloc[off_r:off_r + w, :]
                grid.col.Bcast([flat, dbl], root=own_r)
        with timed(phases, "compute"):
            _gemm(be, xp, yp, zloc, beta if s == 0 else 1.0)


def summa_dist(A: DistMatrix, B: DistMatrix, grid: ProcessGrid, b: int, *, C: DistMatrix | None = None,
               beta: float = 0.0, backend: str = "numpy-openblas", threads: int = 1,
               phases: Phases | None = None) -> DistMatrix:
    """C = A @ B + beta C by SUMMA on distributed data (collective over ``grid.comm``).

    A's columns and B's rows must be block-cyclic with block ``b`` over the grid's columns and
    rows (``block_cyclic(m, k, r, c, mb, b)``, ``block_cyclic(k, n, r, c, b, nb)``); A's row and
    B's column splits are free and become C's (``Layout(A.rows, B.cols)``). A given ``C`` in that
    layout is updated in place when its piece is Fortran-contiguous. Ranks outside the grid get an
    empty piece.
    """
    from autotune import backends

    comm = grid.comm
    err = None
    try:
        r, c = grid.r, grid.c
        k = A.shape[1]
        if B.shape[0] != k:
            raise ValueError(f"inner dimensions differ: A is {A.shape}, B is {B.shape}")
        if b < 1:
            raise ValueError(f"block b must be >= 1, got {b}")
        if A.layout.cols != Axis(k, c, b) or A.layout.rows.parts != r:
            raise ValueError(f"A ({A.layout.describe()}) must have its columns in blocks of {b} "
                             f"over the {c} process columns of the {r}x{c} grid")
        if B.layout.rows != Axis(k, r, b) or B.layout.cols.parts != c:
            raise ValueError(f"B ({B.layout.describe()}) must have its rows in blocks of {b} "
                             f"over the {r} process rows of the {r}x{c} grid")
        lay = Layout(A.layout.rows, B.layout.cols)
        if C is not None and C.layout != lay:
            raise ValueError(f"C ({C.layout.describe()}) must be laid out as {lay.describe()}")
        for name, d in (("A", A), ("B", B), ("C", C)):
            if d is not None and (d.local.dtype != np.float64 or d.local.shape != d.layout.local_shape(comm.rank)):
                raise ValueError(f"{name}'s local piece must be float64 of its layout's shape")
        be = backends.get(backend)
    except Exception as exc:
        err = exc if isinstance(exc, ValueError) else ValueError(str(exc))
    agree(comm, err)
    if C is not None and C.local.flags.f_contiguous:
        zloc = C.local
    else:
        zloc = np.asfortranarray(C.local) if C is not None else lay.empty_local(comm.rank)
    if not grid.inside:
        return DistMatrix(zloc, lay, comm)
    xloc, yloc = np.asfortranarray(A.local), np.asfortranarray(B.local)
    with be.threads(threads):
        _summa_core(grid, xloc, yloc, zloc, k, b, be, beta if C is not None else 0.0, phases,
                    _SummaWork(zloc.shape[0], zloc.shape[1], b))
    return DistMatrix(zloc, lay, comm)


def _oriented(run: _Run):
    """(X, Y, mm, kk, nn, R, C, transposed): multiply X Y on R x C; C^T = B^T A^T unless both
    operands are column-major (then A B on r x c)."""
    plan = run.plan
    if run.a_order == "F" and run.b_order == "F":
        return run.a, run.b, run.m, run.k, run.n, plan.r, plan.c, False
    x = run.b.T if run.is_root else None
    y = run.a.T if run.is_root else None
    return x, y, run.n, run.k, run.m, plan.c, plan.r, True


def _summa(run: _Run) -> np.ndarray | None:
    x, y, mm, kk, nn, R, C, flip = _oriented(run)
    b = run.plan.b
    comm = run.comm
    xr, xc, yr, yc = Axis(mm, R, b), Axis(kk, C, b), Axis(kk, R, b), Axis(nn, C, b)
    grid = run.grid(R, C)
    with run.ph("distribution"):
        xloc = _scatter_leaves(comm, x, xr, xc, 1, C, "x")[:, :, 0, 0]
        yloc = _scatter_leaves(comm, y, yr, yc, 1, C, "y")[:, :, 0, 0]
    zloc = workspace.empty("z", (xloc.shape[0], yloc.shape[1], 1, 1), order="F")
    _summa_core(grid, xloc, yloc, zloc[:, :, 0, 0], kk, b, run.be, 0.0, run.phases,
                _SummaWork(zloc.shape[0], zloc.shape[1], b))
    with run.ph("collection"):
        out = _gather_leaves(comm, zloc, xr, yc, 1, C, (mm, nn), "F" if flip else "C")
    return None if out is None else (out.T if flip else out)


def summa(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by SUMMA (PBLAS pdgemm's algorithm), block-cyclic with block ``plan.b`` on r x c."""
    return _run("summa", _summa, a, b, comm, plan, root, phases)


# -- block-cyclic pieces (SUMMA: one matrix; parallel Strassen: a g x g stack of leaf matrices) ------
