"""One rank's part of the distributed Cholesky (``cholesky``): right-looking, 2-D block-cyclic,
with look-ahead (as ScaLAPACK's pdpotrf, with overlap; docs/models.md#distributed.cholesky).

Block b on an r x c grid. Per block column k (width w): the owner of the diagonal block factors it
(``potrf``) and sends it down its process column; the process column owning panel k solves its
rows below the diagonal (``trsm``, A_ik L_kk^-T); then every member (i, pc_k) of that column sends,
point-to-point in one stage, what each rank needs for its trailing update: its whole panel piece to
the ranks of its process row (the "row broadcast", L_ik for the rows a rank owns) and, to every
other rank (i', q), the rows whose block index J has J % c == q (the "transposed" column pieces,
L_jk for the columns (i', q) owns). Each rank then updates its trailing matrix one local block
column at a time, only on and below the diagonal: ``syrk`` on a diagonal block it owns, one
``gemm`` on the local rows below (the staircase; no flops spent above the diagonal). Every message
starts with the panel's LAPACK ``info``, so a matrix that is not positive definite is known to all
ranks at the same step and they leave the loop together.

Look-ahead: the process column owning panel k+1 first updates just block column k+1 with panel k,
factors panel k+1 and posts its sends (Isend), and only then does the rest of its step-k update,
testing the outstanding requests between block columns so the messages progress while it
computes; receivers post their Irecvs for panel k+1 before their own step-k update. Without
look-ahead, panel k+1 is factored after the whole step-k update (everyone waits for it).

The upper factor (A = U^T U) is the lower algorithm run on the transposed problem: the local piece
viewed as its transpose on the transposed c x r grid. A local piece seen in C order (the upper
case of a Fortran piece, or the lower case of a C-ordered one) is handled by ``_Blas``, which
calls BLAS on the transposes, so every operand is a column-major view (no copies).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from autotune.geometry.layout import Axis, Layout

from . import workspace
from .grid import ProcessGrid
from .plan import Phases
from .steps import BlockSteps

if TYPE_CHECKING:
    from mpi4py import MPI

# Point-to-point tags: 2 per panel (diagonal block, panel pieces), cycled (at most 2 panels in flight).
_TAG_CYCLE = 8192


@lru_cache(maxsize=8)
def _strict_upper(w: int) -> np.ndarray:
    """Boolean mask of a w x w block's strict upper triangle (cached: one per block width)."""
    return np.triu(np.ones((w, w), dtype=bool), 1)


class _Blas:
    """The backend's BLAS on row-major views as if they were column-major (``t``), else as is."""

    def __init__(self, be, transposed: bool):
        self.be, self.t = be, transposed

    def potrf(self, a: np.ndarray) -> int:
        """Lower Cholesky of ``a`` in place; LAPACK's info."""
        return int(self.be.potrf(a.T, False) if self.t else self.be.potrf(a, True))

    def trsm(self, d: np.ndarray, p: np.ndarray) -> None:
        """p = p d^-T, d lower triangular."""
        if self.t:
            self.be.trsm(1.0, d.T, p.T, False, False, True)
        else:
            self.be.trsm(1.0, d, p, True, True, True)

    def syrk(self, a: np.ndarray, c: np.ndarray) -> None:
        """Lower triangle of c -= a a^T."""
        if self.t:
            self.be.syrk(-1.0, a.T, 1.0, c.T, False, True)
        else:
            self.be.syrk(-1.0, a, 1.0, c, True, False)

    def gemm(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """c -= a b^T."""
        if self.t:
            self.be.gemm(-1.0, b.T, a.T, 1.0, c.T, True, False)
        else:
            self.be.gemm(-1.0, a, b, 1.0, c, False, True)


class _Factor(BlockSteps):
    """One lower factorization of the local piece ``x`` (lower-view coordinates: rows dealt by
    ``rows`` over its process rows, columns by ``cols``; ``rank_of(i, j)`` is the rank at (i, j))."""

    def __init__(self, x, rows: Axis, cols: Axis, myr, myc, rank_of, comm: MPI.Comm, blas, lookahead,
                 order):
        from mpi4py import MPI

        super().__init__(rows, cols, myr, myc)
        self.MPI, self.x = MPI, x
        self.rank_of, self.comm, self.blas = rank_of, comm, blas
        self.lookahead, self.order = lookahead, order
        self.sends: list = []          # (request, buffer) pairs still in flight
        self.slot_sends: dict[str, list] = {}   # workspace slot -> its sends' requests
        self.recvs: dict[int, tuple] = {}  # panel -> (requests, buffers, sources)
        self.own_info: dict[int, int] = {}
        self.seconds = {"compute": 0.0, "communication": 0.0}

    def blocks(self, start: int, i: int, q: int | None) -> np.ndarray:
        """Global blocks J >= start owned by process row i (and process column q if given)."""
        J = self.rows.blocks(i, start)
        return J if q is None else J[self.cols.block_owner(J) == q]

    def rows_of(self, J: np.ndarray) -> int:
        return int(J.size * self.b - (self.b - self.last if J.size and J[-1] == self.N - 1 else 0))

    def tag(self, K: int, kind: int) -> int:
        return 2 * (K % _TAG_CYCLE) + kind

    def buffer(self, role: str, K: int, size: int) -> tuple[str, np.ndarray]:
        """(slot, workspace buffer) ``role`` of panel K: two slots by K's parity, since panel K's
        pieces are done with once panel K + 2 is posted (its sends, if any, completed first).
        Reused, huge-page backed memory: what the probe times its messages on."""
        slot = f"chol_{role}{K % 2}"
        pending = self.slot_sends.pop(slot, None)
        if pending:
            self.MPI.Request.Waitall(pending)
        return slot, workspace.empty(slot, size)

    # -- communication ---------------------------------------------------------------------
    def post_recv(self, K: int) -> None:
        """Irecv the pieces of panel K this rank needs (header-only when empty or failed)."""
        t0 = time.perf_counter()
        pcK = self.pcol(K)
        reqs, bufs, srcs = [], [], []
        w = self.size(K)
        for i in range(self.nr):
            if i == self.myr and self.myc == pcK:
                continue
            rows = (self.mloc - self.lr(K + 1)) if i == self.myr else self.rows_of(self.blocks(K + 1, i, self.myc))
            _, buf = self.buffer(f"r{i}", K, 1 + rows * w)
            reqs.append(self.comm.Irecv([buf, self.MPI.DOUBLE], self.rank_of(i, pcK), self.tag(K, 1)))
            bufs.append(buf)
            srcs.append(i)
        self.recvs[K] = (reqs, bufs, srcs)
        self.seconds["communication"] += time.perf_counter() - t0

    def wait_panel(self, K: int) -> tuple[int, np.ndarray | None, dict[int, np.ndarray]]:
        """(info, L rows of my process row, {source row: its column pieces}) of panel K."""
        t0 = time.perf_counter()
        reqs, bufs, srcs = self.recvs.pop(K)
        self.MPI.Request.Waitall(reqs)
        info = self.own_info.pop(K, 0)
        for buf in bufs:
            info = max(info, int(buf[0]))
        w, it = self.size(K), self.lr(K + 1)
        lrow, pieces = None, {}
        if info == 0:
            if self.myc == self.pcol(K):
                pc = self.lc(K)
                lrow = self.x[it:, pc:pc + w]
            for i, buf in zip(srcs, bufs, strict=True):
                data = buf[1:].reshape((-1, w), order=self.order)
                if i == self.myr:
                    lrow = data
                else:
                    pieces[i] = data
        self.seconds["communication"] += time.perf_counter() - t0
        return info, lrow, pieces

    def send(self, buf: np.ndarray, i: int, j: int, tag: int, slot: str | None = None) -> None:
        req = self.comm.Isend([buf, self.MPI.DOUBLE], self.rank_of(i, j), tag)
        self.sends.append((req, buf))
        if slot is not None:
            self.slot_sends.setdefault(slot, []).append(req)

    def poll(self) -> None:
        """Let outstanding messages progress while computing (a receiver copies its pieces in
        here: communication time); drop completed sends."""
        t0 = time.perf_counter()
        if self.sends and self.MPI.Request.Testall([r for r, _ in self.sends]):
            self.sends = []
        for reqs, _, _ in self.recvs.values():
            self.MPI.Request.Testall(reqs)
        self.seconds["communication"] += time.perf_counter() - t0

    def finish(self) -> None:
        t0 = time.perf_counter()
        self.MPI.Request.Waitall([r for r, _ in self.sends])
        self.sends = []
        for reqs, _, _ in self.recvs.values():   # only after an early exit: none are posted then
            self.MPI.Request.Waitall(reqs)
        self.recvs = {}
        self.seconds["communication"] += time.perf_counter() - t0

    # -- panel factorization (process column of block column K) --------------------------------
    def factor(self, K: int) -> None:
        """potrf on the diagonal block, send it down the column, trsm below, send the pieces."""
        x, w, order = self.x, self.size(K), self.order
        pc, d0, it = self.lc(K), self.lr(K), self.lr(K + 1)
        t0 = time.perf_counter()
        comm_t = 0.0
        if self.myr == self.prow(K):
            diag = x[d0:d0 + w, pc:pc + w]
            info = self.blas.potrf(diag)
            info = K * self.b + info if info else 0
            if self.nr > 1:
                t1 = time.perf_counter()
                slot, buf = self.buffer("ds", K, 1 + (0 if info else w * w))
                buf[0] = info
                if not info:
                    buf[1:].reshape((w, w), order=order)[...] = diag
                for i in range(self.nr):
                    if i != self.myr:
                        self.send(buf, i, self.myc, self.tag(K, 0), slot)
                comm_t += time.perf_counter() - t1
        else:
            t1 = time.perf_counter()
            _, buf = self.buffer("dr", K, 1 + w * w)
            self.comm.Recv([buf, self.MPI.DOUBLE], self.rank_of(self.prow(K), self.myc), self.tag(K, 0))
            info = int(buf[0])
            diag = buf[1:].reshape((w, w), order=order)
            comm_t += time.perf_counter() - t1
        panel = x[it:, pc:pc + w]
        if info == 0 and panel.shape[0]:
            self.blas.trsm(diag, panel)
        t1 = time.perf_counter()
        self._send_pieces(K, info, panel)
        self.own_info[K] = info
        comm_t += time.perf_counter() - t1
        self.seconds["communication"] += comm_t
        self.seconds["compute"] += time.perf_counter() - t0 - comm_t

    def _send_pieces(self, K: int, info: int, panel: np.ndarray) -> None:
        w, order, tag = self.size(K), self.order, self.tag(K, 1)
        header = np.array([float(info)])
        whole, wslot = None, None
        if self.nc > 1 or self.nr > 1:
            if info:
                whole = header
            else:
                wslot, whole = self.buffer("w", K, 1 + panel.size)
                whole[0] = 0.0
                whole[1:].reshape(panel.shape, order=order)[...] = panel
        for q in range(self.nc):
            if q != self.myc:
                self.send(whole, self.myr, q, tag, wslot)
        if self.nr == 1:
            return
        it = self.lr(K + 1)
        for q in range(self.nc):
            if info:
                sub, sslot = header, None
            elif self.nc == 1:
                sub, sslot = whole, wslot
            else:
                J = self.blocks(K + 1, self.myr, q)
                sslot, sub = self.buffer(f"s{q}", K, 1 + self.rows_of(J) * w)
                sub[0] = 0.0
                data = sub[1:].reshape((-1, w), order=order)
                pos = 0
                for blk in J:
                    r0 = int(self.rows.local_index(blk * self.b)) - it
                    h = self.size(int(blk))
                    data[pos:pos + h] = panel[r0:r0 + h]
                    pos += h
            for i in range(self.nr):
                if i != self.myr:
                    self.send(sub, i, q, tag, sslot)

    # -- trailing update ----------------------------------------------------------------------
    def update(self, k: int, lrow: np.ndarray, pieces: dict[int, np.ndarray], hook=None) -> None:
        """Trailing update with panel k, block column by block column (staircase); ``hook`` runs
        right after the first local block column (the look-ahead panel factorization)."""
        x, blas = self.x, self.blas
        it = self.lr(k + 1)
        offsets = dict.fromkeys(pieces, 0)
        hooked = hook is None
        for J in self.my_columns(k + 1).tolist():
            t0 = time.perf_counter()
            wJ, c0, i0 = self.size(J), self.lc(J), self.lr(J)
            src = self.prow(J)
            if src == self.myr:
                y = lrow[i0 - it:i0 - it + wJ]
                blas.syrk(y, x[i0:i0 + wJ, c0:c0 + wJ])
                g0 = i0 + wJ
            else:
                o = offsets[src]
                y = pieces[src][o:o + wJ]
                offsets[src] = o + wJ
                g0 = i0
            if g0 < self.mloc:
                blas.gemm(lrow[g0 - it:], y, x[g0:, c0:c0 + wJ])
            self.seconds["compute"] += time.perf_counter() - t0
            if not hooked:
                hook()
                hooked = True
            else:
                self.poll()
        if not hooked:
            hook()

    def zero_upper(self) -> None:
        """Zero the strict upper triangle (lower view), as scipy returns the factor."""
        x = self.x
        for J in self.my_columns().tolist():
            c0, wJ, i0 = self.lc(J), self.size(J), self.lr(J)
            x[:i0, c0:c0 + wJ] = 0.0
            if self.prow(J) == self.myr:
                np.copyto(x[i0:i0 + wJ, c0:c0 + wJ], 0.0, where=_strict_upper(wJ))

    def run(self) -> int:
        """The factorization loop; returns the global LAPACK-style info (0: success)."""
        N, info = self.N, 0
        if N == 0:
            return 0
        self.post_recv(0)
        if self.myc == self.pcol(0):
            self.factor(0)
        for k in range(N):
            info, lrow, pieces = self.wait_panel(k)
            if info or k == N - 1:
                break
            K = k + 1
            self.post_recv(K)
            mine = self.myc == self.pcol(K)
            if self.lookahead and mine:
                self.update(k, lrow, pieces, hook=lambda K=K: self.factor(K))
            else:
                self.update(k, lrow, pieces)
                if mine:
                    self.factor(K)
        self.finish()
        return info


def factor_piece(local: np.ndarray, mem: str, layout: Layout, grid: ProcessGrid, comm: MPI.Comm, be,
                 threads: int | None, lower: bool, lookahead: bool, phases: Phases | None) -> int:
    """Factor this grid rank's piece in place (``mem``: the memory order every rank's piece has,
    ``comm``: the grid's ranks); the global LAPACK-style info (0: success)."""
    if lower:
        x, rows, cols, myr, myc = local, layout.rows, layout.cols, grid.pr, grid.pc

        def rank_of(i: int, j: int) -> int:
            return i * grid.c + j
    else:      # U = L^T of the transposed problem on a c x r grid (models' loop_grid)
        x, rows, cols, myr, myc = local.T, layout.cols, layout.rows, grid.pc, grid.pr

        def rank_of(i: int, j: int) -> int:
            return j * grid.c + i
    order = mem if lower else {"F": "C", "C": "F"}[mem]   # a C-ordered x: BLAS on its transposes
    f = _Factor(x, rows, cols, myr, myc, rank_of, comm, _Blas(be, order == "C"), lookahead, order)
    with be.threads(threads) if threads else nullcontext():
        info = f.run()
        t0 = time.perf_counter()
        if not info:
            f.zero_upper()
        f.seconds["compute"] += time.perf_counter() - t0
    if phases is not None:
        for name, sec in f.seconds.items():
            phases.seconds[name] += sec
    return info

