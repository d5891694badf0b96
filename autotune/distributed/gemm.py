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
from dataclasses import dataclass

import numpy as np

from autotune.kernels import dist_gemm as kern
from autotune.layout import Axis, Layout
from autotune.models.distributed_gemm import plan_error
from autotune.plans import Plan

from . import workspace
from .checks import all_finite
from .collective import agree
from .grid import ProcessGrid
from .movement import DistMatrix
from .plan import Phases, timed
from .runs import PlanRun, agree_plan, plan_run

__all__ = ["ALGORITHMS", "bsr", "bsr_dist", "cannon", "cbsr", "distributed_gemm", "strassen_ms",
           "strassen_summa", "summa", "summa_dist"]


# Their additions turn inf into NaN where a @ b would not: they reject non-finite operands.
STRASSEN = ("strassen_summa", "strassen_ms")


def _double():
    from mpi4py import MPI

    return MPI.DOUBLE


# -- local products on any mix of row-/column-major operands -----------------------------------

def _colmajor(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """(v, trans) with ``x == (v.T if trans else v)`` and v a column-major view BLAS accepts."""
    if x.shape[0] <= 1 or x.strides[0] == x.itemsize:
        return x, False
    if x.shape[1] <= 1 or x.strides[1] == x.itemsize:
        return x.T, True
    raise ValueError("operand is neither row- nor column-major")


def _gemm(be, a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float = 0.0) -> None:
    """``c = a @ b + beta c`` through BLAS transpose flags (no copies; c may be row-major)."""
    m, n = c.shape
    if m == 0 or n == 0:
        return
    if a.shape[1] == 0:
        if beta == 0.0:
            c[...] = 0.0
        else:
            c *= beta
        return
    cv, flip = _colmajor(c)
    if flip:                                    # c^T = b^T a^T, c^T column-major
        a, b = b.T, a.T
    av, ta = _colmajor(a)
    bv, tb = _colmajor(b)
    be.gemm(1.0, av, bv, beta, cv, ta, tb)


# -- set-up: the shared one (``runs``) plus the gemm problem ---------------------------------------

@dataclass
class _Run:
    """One gemm call on the plan's ranks (``at``: the shared set-up, root = rank 0) and its problem."""

    at: PlanRun
    m: int
    k: int
    n: int
    a_order: str            # memory order of the root's A ('C' or 'F'), known on every rank
    b_order: str
    a: np.ndarray | None    # the root's operands (float64, contiguous), None elsewhere
    b: np.ndarray | None

    @property
    def comm(self):
        return self.at.comm

    @property
    def plan(self) -> Plan:
        return self.at.plan

    @property
    def be(self):
        return self.at.be

    @property
    def phases(self) -> Phases | None:
        return self.at.phases

    @property
    def is_root(self) -> bool:
        return self.at.is_root

    def ph(self, name: str):
        return self.at.ph(name)

    def grid(self, r: int, c: int) -> ProcessGrid:
        return self.at.grid(r, c)


def _operand(x, name: str) -> np.ndarray:
    """The root's operand as float64, contiguous and writable."""
    if x is None:
        raise ValueError(f"the root must pass {name} (got None)")
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got {x.ndim}-D shape {x.shape}")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {x.dtype}: only real matrices are multiplied (in float64)")
    x = x.astype(np.float64, copy=False)
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        x = np.ascontiguousarray(x)
    if not x.flags.writeable:                    # BLAS entry points take writable views
        x = x.copy(order="K")
    return x


def _order(x: np.ndarray) -> str:
    return "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"


def _root_operands(a, b, algorithm: str, plan: Plan) -> tuple[tuple, tuple]:
    """Root only: ((A, B) checked, (m, k, n, A's order, B's order)) or ValueError."""
    a, b = _operand(a, "A"), _operand(b, "B")
    for x, name in ((a, "A"), (b, "B")) if algorithm in STRASSEN else ():   # a @ b propagates them
        if not all_finite(x, plan.backend, plan.threads):
            raise ValueError(f"{name} contains NaN or infinity")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {a.shape[0]}x{a.shape[1]}, "
                         f"B is {b.shape[0]}x{b.shape[1]}")
    return (a, b), (a.shape[0], a.shape[1], b.shape[1], _order(a), _order(b))


def _run(algorithm: str, body: Callable[[_Run], np.ndarray | None], a, b, comm, plan: Plan,
         root: int, phases: Phases | None) -> np.ndarray | None:
    """The shared set-up (``runs``: checks agreed with the shapes, the plan's ranks), then ``body``."""
    ops, meta = agree_plan(comm, plan, algorithm, root, plan_error,
                           lambda: _root_operands(a, b, algorithm, plan))
    m, k, n, a_order, b_order = meta
    if m == 0 or n == 0 or k == 0:                       # nothing to distribute
        return np.zeros((m, n)) if comm.rank == root else None
    with plan_run(comm, plan, root, phases) as at:
        if at is None:
            return None
        run = _Run(at, m, k, n, a_order, b_order, *(ops if at.is_root else (None, None)))
        if plan.p == 1 and algorithm in ("bsr", "cbsr", "cannon", "summa"):
            return _local(run)
        return body(run)


def _local(run: _Run) -> np.ndarray:
    """One process: the product is one local gemm."""
    with run.ph("compute"):
        out = np.empty((run.m, run.n))
        _gemm(run.be, run.a, run.b, out)
    return out


# -- moving contiguous blocks (balanced 2-D blocks, in a chosen memory order) ---------------------

def _block_counts(rows: Axis, cols: Axis, size: int) -> tuple[list, np.ndarray, np.ndarray]:
    c = cols.parts
    shapes = [(rows.count(i // c), cols.count(i % c)) for i in range(size)]
    counts = np.array([s[0] * s[1] for s in shapes], dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return shapes, counts, displs


def _scatter_blocks(comm, x: np.ndarray | None, rows: Axis, cols: Axis, order: str,
                    recv: np.ndarray | None = None, name: str = "a") -> np.ndarray:
    """Root's (rank 0) x -> block (rank // c, rank % c) of the balanced rows x cols split, in
    ``order`` (into ``recv``, else workspace ``name``); sent straight from x's memory when the
    blocks are contiguous there."""
    from mpi4py import MPI

    shapes, counts, displs = _block_counts(rows, cols, comm.size)
    me = comm.rank
    send = None
    if me == 0:
        if (order == "C" and cols.parts == 1 and x.flags.c_contiguous) or \
                (order == "F" and rows.parts == 1 and x.flags.f_contiguous):
            flat = x.reshape(-1, order=order)
            if recv is None:                     # the root's own block stays where it is
                comm.Scatterv([flat, (counts, displs), _double()], MPI.IN_PLACE, root=0)
                return flat[:int(counts[0])].reshape(shapes[0], order=order)
        else:
            flat = workspace.empty("pack", int(counts.sum()))
            for rank, shape in enumerate(shapes):
                (r0, r1), (c0, c1) = rows.span(rank // cols.parts), cols.span(rank % cols.parts)
                flat[displs[rank]:displs[rank] + counts[rank]].reshape(shape, order=order)[...] = x[r0:r1, c0:c1]
        send = [flat, (counts, displs), _double()]
    buf = workspace.empty(name, int(counts[me])) if recv is None else recv[:int(counts[me])]
    comm.Scatterv(send, [buf, _double()], root=0)
    return buf.reshape(shapes[me], order=order)


def _result_piece(comm, rows: Axis, cols: Axis) -> tuple[np.ndarray | None, np.ndarray]:
    """(C on the root or None, this rank's row-major C block); for row bands the root's block is
    a view of C itself, so its product is computed in place (``_gather_blocks`` leaves it).
    C is fresh (the user's); the blocks are workspace."""
    shape = (rows.count(comm.rank // cols.parts), cols.count(comm.rank % cols.parts))
    if comm.rank != 0:
        return None, workspace.empty("c", shape)
    out = np.empty((rows.n, cols.n))
    return out, (out[:shape[0]] if cols.parts == 1 else workspace.empty("c", shape))


def _gather_blocks(comm, local: np.ndarray, rows: Axis, cols: Axis, out: np.ndarray | None) -> np.ndarray | None:
    """Row-major block pieces (rank // c, rank % c) -> the whole row-major ``out`` on rank 0
    (from ``_result_piece``)."""
    from mpi4py import MPI

    shapes, counts, displs = _block_counts(rows, cols, comm.size)
    flat = local.reshape(-1)
    if comm.rank != 0:
        comm.Gatherv([flat, _double()], None, root=0)
        return None
    if cols.parts == 1:                              # bands: straight into C, the root's in place
        comm.Gatherv(MPI.IN_PLACE, [out.reshape(-1), (counts, displs), _double()], root=0)
        return out
    buf = workspace.empty("gather", int(counts.sum()))
    comm.Gatherv([flat, _double()], [buf, (counts, displs), _double()], root=0)
    for rank, shape in enumerate(shapes):
        (r0, r1), (c0, c1) = rows.span(rank // cols.parts), cols.span(rank % cols.parts)
        out[r0:r1, c0:c1] = buf[displs[rank]:displs[rank] + counts[rank]].reshape(shape)
    return out


def _bcast_matrix(comm, x: np.ndarray | None, shape: tuple[int, int], order: str) -> np.ndarray:
    """Root's whole matrix to every rank (one Bcast of its contiguous buffer)."""
    if comm.rank == 0:
        comm.Bcast([x.reshape(-1, order=order), _double()], root=0)
        return x
    buf = workspace.empty("b", shape[0] * shape[1])
    comm.Bcast([buf, _double()], root=0)
    return buf.reshape(shape, order=order)


# -- BSR -------------------------------------------------------------------------------------------

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


def bsr(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
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


def cbsr(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
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


def cannon(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
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


def summa(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by SUMMA (PBLAS pdgemm's algorithm), block-cyclic with block ``plan.b`` on r x c."""
    return _run("summa", _summa, a, b, comm, plan, root, phases)


# -- block-cyclic pieces (SUMMA: one matrix; parallel Strassen: a g x g stack of leaf matrices) ------

def _leaf_index(rows: Axis, cols: Axis, size: int, c: int):
    return [(np.ascontiguousarray(rows.indices(rk // c)), np.ascontiguousarray(cols.indices(rk % c)))
            for rk in range(size)]


def _scatter_leaves(comm, x: np.ndarray | None, rows: Axis, cols: Axis, g: int, c: int, name: str) -> np.ndarray:
    """Root's x (zero-padded to g*rows.n x g*cols.n) -> this rank's (mloc, nloc, g, g) Fortran
    stack (workspace ``name``) of its piece of every leaf block, each leaf block-cyclic by
    (rows, cols) over the grid with c columns (g = 1: one block-cyclic matrix). The root packs
    its own piece in place."""
    from mpi4py import MPI

    idx = _leaf_index(rows, cols, comm.size, c)
    counts = np.array([ri.size * ci.size * g * g for ri, ci in idx], dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    ri, ci = idx[comm.rank]
    out = workspace.empty(name, (ri.size, ci.size, g, g), order="F")
    mine = out.reshape(-1, order="F")
    if comm.rank != 0:
        comm.Scatterv(None, [mine, _double()], root=0)
        return out
    buf = workspace.empty("pack", int(counts.sum()))    # the root's own segment is never touched
    for rank, (ri, ci) in enumerate(idx):
        target, off = (mine, 0) if rank == 0 else (buf, int(displs[rank]))
        for bj in range(g):
            for bi in range(g):
                off = kern.take_padded(x, ri + bi * rows.n, ci + bj * cols.n, target, off)
    comm.Scatterv([buf, (counts, displs), _double()], MPI.IN_PLACE, root=0)
    return out


def _gather_leaves(comm, zloc: np.ndarray, rows: Axis, cols: Axis, g: int, c: int,
                   shape: tuple[int, int], order: str) -> np.ndarray | None:
    """Inverse of ``_scatter_leaves`` for C (padding dropped) into a new ``order`` array on the root."""
    from mpi4py import MPI

    idx = _leaf_index(rows, cols, comm.size, c)
    counts = np.array([ri.size * ci.size * g * g for ri, ci in idx], dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    flat = zloc.reshape(-1, order="F")
    if comm.rank != 0:
        comm.Gatherv([flat, _double()], None, root=0)
        return None
    buf = workspace.empty("gather", int(counts.sum()))
    comm.Gatherv(MPI.IN_PLACE, [buf, (counts, displs), _double()], root=0)
    out = np.empty(shape, order=order)
    for rank, (ri, ci) in enumerate(idx):
        src = flat if rank == 0 else buf[int(displs[rank]):int(displs[rank] + counts[rank])]
        off = 0
        for bj in range(g):
            for bi in range(g):
                piece = src[off:off + ri.size * ci.size].reshape((ri.size, ci.size), order="F")
                kern.put_clipped(out, ri + bi * rows.n, ci + bj * cols.n, piece)
                off += piece.size
    return out


# -- Strassen on SUMMA (StPBLAS) -------------------------------------------------------------------

def _quads(x: np.ndarray):
    h = x.shape[2] // 2
    return x[:, :, :h, :h], x[:, :, :h, h:], x[:, :, h:, :h], x[:, :, h:, h:]


def _st_rec(a, b, c, depth: int, nlev: int, ws: list, leaf, ph) -> None:
    """c = a b on (rows, cols, g, g) leaf stacks, the 3-temporary schedule of
    ``autotune.kernels.strassen`` (same additions, same order); leaves go to ``leaf``."""
    if depth >= nlev:
        leaf(a[:, :, 0, 0], b[:, :, 0, 0], c[:, :, 0, 0], 0.0)
        return
    a11, a12, a21, a22 = _quads(a)
    b11, b12, b21, b22 = _quads(b)
    c11, c12, c21, c22 = _quads(c)
    s1, t1, p1 = ws[depth]
    sub = depth + 1

    def mul(x, y, out, beta):
        if sub >= nlev:
            leaf(x[:, :, 0, 0], y[:, :, 0, 0], out[:, :, 0, 0], beta)
        elif beta == 0.0:
            _st_rec(x, y, out, sub, nlev, ws, leaf, ph)
        else:
            _st_rec(x, y, p1, sub, nlev, ws, leaf, ph)
            with ph("compute"):
                kern.acc_4(p1, out)

    with ph("compute"):
        kern.axpby_4(a11, a22, 1.0, s1)                      # 1
        kern.axpby_4(b11, b22, 1.0, t1)
    mul(s1, t1, c11, 0.0)
    with ph("compute"):
        kern.axpby_4(a21, a22, 1.0, s1)                      # 2
    mul(s1, b11, c21, 0.0)
    with ph("compute"):
        kern.axpby_4(b12, b22, -1.0, t1)                     # 3
    mul(a11, t1, c12, 0.0)
    with ph("compute"):
        kern.combine22_4(c11, c21, c12, c22)
        kern.axpby_4(b21, b11, -1.0, t1)                     # 4
    mul(a22, t1, p1, 0.0)
    with ph("compute"):
        kern.acc2_4(p1, c11, 1.0, c21, 1.0)
        kern.axpby_4(a11, a12, 1.0, s1)                      # 5
    mul(s1, b22, p1, 0.0)
    with ph("compute"):
        kern.acc2_4(p1, c11, -1.0, c12, 1.0)
        kern.axpby_4(a21, a11, -1.0, s1)                     # 6
        kern.axpby_4(b11, b12, 1.0, t1)
    mul(s1, t1, c22, 1.0)
    with ph("compute"):
        kern.axpby_4(a12, a22, -1.0, s1)                     # 7
        kern.axpby_4(b21, b22, 1.0, t1)
    mul(s1, t1, c11, 1.0)


def _strassen_summa(run: _Run) -> np.ndarray | None:
    x, y, mm, kk, nn, R, C, flip = _oriented(run)
    plan, comm = run.plan, run.comm
    levels, bs = plan.level, plan.b
    g = 2 ** levels
    ml, kl, nl = -(-mm // g), -(-kk // g), -(-nn // g)             # leaf sizes (padded)
    xr, xc, yr, yc = Axis(ml, R, bs), Axis(kl, C, bs), Axis(kl, R, bs), Axis(nl, C, bs)
    grid = run.grid(R, C)
    with run.ph("distribution"):
        xloc = _scatter_leaves(comm, x, xr, xc, g, C, "x")
        yloc = _scatter_leaves(comm, y, yr, yc, g, C, "y")
    zloc = workspace.empty("z", (xloc.shape[0], yloc.shape[1], g, g), order="F")
    ws = []
    for d in range(levels):
        h = g >> (d + 1)
        ws.append(tuple(workspace.empty(f"st{d}{nm}", (s[0], s[1], h, h), order="F")
                        for nm, s in zip("xyz", (xloc.shape, yloc.shape, zloc.shape), strict=True)))
    work = _SummaWork(zloc.shape[0], zloc.shape[1], bs)

    def leaf(xa, ya, za, beta):
        _summa_core(grid, xa, ya, za, kl, bs, run.be, beta, run.phases, work)

    _st_rec(xloc, yloc, zloc, 0, levels, ws, leaf, run.ph)
    with run.ph("collection"):
        out = _gather_leaves(comm, zloc, xr, yc, g, C, (mm, nn), "F" if flip else "C")
    return None if out is None else (out.T if flip else out)


def strassen_summa(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by ``plan.level`` Strassen levels over distributed quadrants, leaves by SUMMA
    (StPBLAS, docs/models.md#distributed.strassen_summa); odd sizes zero-padded to a multiple of 2^level."""
    return _run("strassen_summa", _strassen_summa, a, b, comm, plan, root, phases)


# -- Strassen master-worker (StMS) ------------------------------------------------------------------

# Level-1 products: (A-side operand, B-side operand, contributions to C's quadrants). An operand is
# a quadrant name or (x, y, beta) for x + beta y; contributions are (quadrant, sign).
_MS_TASKS = (
    (("a11", "a22", 1.0), ("b11", "b22", 1.0), (("c11", 1.0), ("c22", 1.0))),      # M1
    (("a21", "a22", 1.0), "b11", (("c21", 1.0), ("c22", -1.0))),                    # M2
    ("a11", ("b12", "b22", -1.0), (("c12", 1.0), ("c22", 1.0))),                    # M3
    ("a22", ("b21", "b11", -1.0), (("c11", 1.0), ("c21", 1.0))),                    # M4
    (("a11", "a12", 1.0), "b22", (("c11", -1.0), ("c12", 1.0))),                    # M5
    (("a21", "a11", -1.0), ("b11", "b12", 1.0), (("c22", 1.0),)),                   # M6
    (("a12", "a22", -1.0), ("b21", "b22", 1.0), (("c11", 1.0),)),                   # M7
)


def _quadrants(x: np.ndarray, name: str) -> dict[str, np.ndarray]:
    h, w = x.shape[0] // 2, x.shape[1] // 2
    return {f"{name}11": x[:h, :w], f"{name}12": x[:h, w:2 * w],
            f"{name}21": x[h:2 * h, :w], f"{name}22": x[h:2 * h, w:2 * w]}


def _product_order(a_order: str, b_order: str) -> str:
    """Memory order of the level-1 products (and of the root's working C)."""
    return "F" if a_order == "F" and b_order == "F" else "C"


def _local_product(be, s: np.ndarray, t: np.ndarray, out: np.ndarray, levels: int) -> None:
    """out = s @ t by BLAS (levels 0) or sequential Strassen with column-major operands."""
    if levels == 0:
        _gemm(be, s, t, out)
        return
    from autotune.kernels.strassen import strassen

    if out.flags.f_contiguous and not out.flags.c_contiguous:
        strassen(np.asfortranarray(s), np.asfortranarray(t), out, levels, be.gemm)
    else:                                       # out^T = t^T s^T, all column-major
        strassen(np.ascontiguousarray(t).T, np.ascontiguousarray(s).T, out.T, levels, be.gemm)


def _strassen_ms(run: _Run) -> np.ndarray | None:
    comm, m, k, n, levels = run.comm, run.m, run.k, run.n, run.plan.level
    mo = _product_order(run.a_order, run.b_order)
    if comm.size == 1 or min(m, k, n) < 2:      # one process, or nothing to split: all on the root
        if not run.is_root:
            return None
        with run.ph("compute"):
            out = np.empty((m, n), order=mo)
            _local_product(run.be, run.a, run.b, out, levels if comm.size == 1 else 0)
        return np.ascontiguousarray(out)
    m2, k2, n2 = m // 2, k // 2, n // 2
    if run.is_root:
        return _ms_master(run, m2, k2, n2, mo)
    _ms_worker(run, m2, k2, n2, mo)
    return None


def _ms_worker(run: _Run, m2: int, k2: int, n2: int, mo: str) -> None:
    comm, workers, dbl = run.comm, run.comm.size - 1, _double()
    s = workspace.empty("ms_s", (m2, k2), order=run.a_order)
    t = workspace.empty("ms_t", (k2, n2), order=run.b_order)
    prod = workspace.empty("ms_prod", (m2, n2), order=mo)
    for task in range(7):
        if 1 + task % workers != comm.rank:
            continue
        with run.ph("distribution"):
            comm.Recv([s.reshape(-1, order=run.a_order), dbl], source=0, tag=100 + 2 * task)
            comm.Recv([t.reshape(-1, order=run.b_order), dbl], source=0, tag=101 + 2 * task)
        with run.ph("compute"):
            _local_product(run.be, s, t, prod, run.plan.level - 1)
        with run.ph("collection"):
            comm.Send([prod.reshape(-1, order=mo), dbl], dest=0, tag=task)


def _ms_master(run: _Run, m2: int, k2: int, n2: int, mo: str) -> np.ndarray:
    comm, workers, dbl = run.comm, run.comm.size - 1, _double()
    a, b, m, k, n = run.a, run.b, run.m, run.k, run.n
    cw = np.zeros((m, n), order=mo)
    views = {**_quadrants(a, "a"), **_quadrants(b, "b"), **_quadrants(cw, "c")}
    s = workspace.empty("ms_s", (m2, k2), order=run.a_order)
    t = workspace.empty("ms_t", (k2, n2), order=run.b_order)
    prod = workspace.empty("ms_prod", (m2, n2), order=mo)

    def form(spec, out):
        if isinstance(spec, str):
            np.copyto(out, views[spec])
        else:
            kern.add2(views[spec[0]], views[spec[1]], spec[2], out)

    def combine(task):
        (q1, s1), *rest = _MS_TASKS[task][2]
        if rest:
            kern.acc2(prod, views[q1], s1, views[rest[0][0]], rest[0][1])
        else:
            kern.acc(prod, views[q1], s1)

    def peel():                                 # odd inner index, last column, last row
        me, ke, ne = 2 * m2, 2 * k2, 2 * n2
        if ke < k:
            _gemm(run.be, a[:me, ke:], b[ke:, :ne], cw[:me, :ne], 1.0)
        if ne < n:
            _gemm(run.be, a, b[:, ne:], cw[:, ne:])
        if me < m:
            _gemm(run.be, a[me:, :], b[:, :ne], cw[me:, :ne])

    first_round = min(workers, 7)
    for task in range(7):
        w = 1 + task % workers
        with run.ph("distribution"):
            form(_MS_TASKS[task][0], s)
            form(_MS_TASKS[task][1], t)
        if task >= workers:                     # w's previous product first (w is then idle)
            with run.ph("collection"):
                comm.Recv([prod.reshape(-1, order=mo), dbl], source=w, tag=task - workers)
        with run.ph("distribution"):
            comm.Send([s.reshape(-1, order=run.a_order), dbl], dest=w, tag=100 + 2 * task)
            comm.Send([t.reshape(-1, order=run.b_order), dbl], dest=w, tag=101 + 2 * task)
        if task >= workers:
            with run.ph("collection"):
                combine(task - workers)
        if task == first_round - 1:
            with run.ph("compute"):
                peel()
    for task in range(max(0, 7 - workers), 7):
        with run.ph("collection"):
            comm.Recv([prod.reshape(-1, order=mo), dbl], source=1 + task % workers, tag=task)
            combine(task)
    return np.ascontiguousarray(cw)


def strassen_ms(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by master-worker Strassen: the root farms the 7 level-1 products out to p - 1
    workers (StMS, docs/models.md#distributed.strassen_ms); odd sizes peeled on the root."""
    return _run("strassen_ms", _strassen_ms, a, b, comm, plan, root, phases)


ALGORITHMS: dict[str, Callable[..., np.ndarray | None]] = {
    "bsr": bsr, "cbsr": cbsr, "cannon": cannon, "summa": summa,
    "strassen_summa": strassen_summa, "strassen_ms": strassen_ms,
}


def distributed_gemm(a, b, comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by the algorithm ``plan.algorithm`` names (collective; C on the root)."""
    fn = ALGORITHMS.get(getattr(plan, "algorithm", None))
    if fn is None:                    # rejected by the agreed plan check on every rank
        return _run(str(getattr(plan, "algorithm", plan)), _local, a, b, comm, plan, root, phases)
    return fn(a, b, comm, plan, root=root, phases=phases)
