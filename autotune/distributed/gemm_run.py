"""What every distributed gemm algorithm shares: the checked operands and plan, the run's
set-up, scatter, broadcast and gather of row-major or column-major pieces, the local product."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan
from autotune.geometry.layout import Axis
from autotune.kernels import dist_gemm as kern
from autotune.models.distributed_gemm import plan_error

from . import workspace
from .checks import all_finite
from .grid import ProcessGrid
from .plan import Phases
from .runs import PlanRun, agree_plan, plan_run

if TYPE_CHECKING:
    from mpi4py import MPI

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


def _run(algorithm: str, body: Callable[[_Run], np.ndarray | None], a, b, comm: MPI.Comm, plan: Plan,
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


def _scatter_blocks(comm: MPI.Comm, x: np.ndarray | None, rows: Axis, cols: Axis, order: str,
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


def _result_piece(comm: MPI.Comm, rows: Axis, cols: Axis) -> tuple[np.ndarray | None, np.ndarray]:
    """(C on the root or None, this rank's row-major C block); for row bands the root's block is
    a view of C itself, so its product is computed in place (``_gather_blocks`` leaves it).
    C is fresh (the user's); the blocks are workspace."""
    shape = (rows.count(comm.rank // cols.parts), cols.count(comm.rank % cols.parts))
    if comm.rank != 0:
        return None, workspace.empty("c", shape)
    out = np.empty((rows.n, cols.n))
    return out, (out[:shape[0]] if cols.parts == 1 else workspace.empty("c", shape))


def _gather_blocks(comm: MPI.Comm, local: np.ndarray, rows: Axis, cols: Axis,
                   out: np.ndarray | None) -> np.ndarray | None:
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


def _bcast_matrix(comm: MPI.Comm, x: np.ndarray | None, shape: tuple[int, int], order: str) -> np.ndarray:
    """Root's whole matrix to every rank (one Bcast of its contiguous buffer)."""
    if comm.rank == 0:
        comm.Bcast([x.reshape(-1, order=order), _double()], root=0)
        return x
    buf = workspace.empty("b", shape[0] * shape[1])
    comm.Bcast([buf, _double()], root=0)
    return buf.reshape(shape, order=order)


# -- BSR -------------------------------------------------------------------------------------------


def _leaf_index(rows: Axis, cols: Axis, size: int, c: int):
    return [(np.ascontiguousarray(rows.indices(rk // c)), np.ascontiguousarray(cols.indices(rk % c)))
            for rk in range(size)]


def _scatter_leaves(comm: MPI.Comm, x: np.ndarray | None, rows: Axis, cols: Axis, g: int, c: int,
                    name: str) -> np.ndarray:
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


def _gather_leaves(comm: MPI.Comm, zloc: np.ndarray, rows: Axis, cols: Axis, g: int, c: int,
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
