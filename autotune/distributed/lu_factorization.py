"""One rank's part of the distributed LU with partial pivoting (``lu``): right-looking, 2-D
block-cyclic (block b, r x c grid), as ScaLAPACK's pdgetrf; on 1 x c grids with look-ahead; and
the back substitution of the solve built on it (docs/models.md#distributed.lu).

Per block column K (width w, rows kb.. of the trailing matrix):

- **panel**: the process column owning K factors the m x w panel with the library's getrf (its
  recursive panel factorization, which searches each pivot over the whole panel). On 1 x c the
  owner holds the whole panel; on r > 1 the column's members send their rows to the diagonal
  block's owner, which factors the assembled panel, so the pivots are LAPACK's.
- **panel broadcast**: the owner sends each other rank [info, pivots, its process row's rows of the
  factored panel] (point-to-point, posted at once: Isend); the column's members copy theirs back.
- **row interchanges**: every rank applies the w pivots to its columns outside the panel (left,
  finished L columns too, as LAPACK does): ``laswp`` on 1 x c; on r > 1 the pivots are one
  permutation of the touched rows, and the rows that change process row move in one packed
  message per pair of process rows of the column.
- **U12**: the process row holding block row K solves L11 U12 = A12 (unit-lower trsm) on its
  trailing columns and, on r > 1, broadcasts it down its process column.
- **trailing update**: A22 -= L21 U12, one gemm per rank on its local trailing piece.

Look-ahead: the process column of panel K+1 first updates only block column K+1 with panel K,
gathers (r > 1) and factors panel K+1 and posts its sends, then does the rest of its step-K
update; the others posted their receives before their update. A singular matrix (an exactly zero
pivot) does not stop the loop, as in LAPACK: the first zero pivot's global index is the result's
``info``.

The right-hand sides of ``lu.solve`` ride along as one more block column (``xb``): the
interchanges, U12 solve and trailing updates carry them, which is the forward substitution;
``back_substitute`` then solves U x = y, passing y from the owner of each block column to the owner
of the one before (a ring), ending on the root. 1 x c grids only.
"""
from __future__ import annotations

import time

import numpy as np

from autotune.core.assumptions import LU_POLL_BLOCKS
from autotune.geometry.layout import Layout
from autotune.kernels import pack

from . import workspace
from .steps import BlockSteps

_TAG_CYCLE = 8192
_GATHER, _PANEL, _RING, _SWAP = 0, 1, 2, 3


class LUFactorization(BlockSteps):
    """One LU of the local piece ``x`` (Fortran order, ``layout`` on ``grid``); ``xb``: this rank's
    piece of the right-hand sides (1 x c only: all rows, on the process column of block column N),
    or None."""

    def __init__(self, x: np.ndarray, layout: Layout, grid, be, lookahead: bool, xb: np.ndarray | None = None):
        from mpi4py import MPI

        super().__init__(layout.rows, layout.cols, grid.pr, grid.pc)
        self.MPI, self.x, self.be, self.xb = MPI, x, be, xb
        self.comm, self.col = grid.comm, grid.col
        self.lookahead = lookahead
        self.grow = self.rows.indices(self.myr)      # global row of each local row
        self.ipiv = np.zeros(self.n, dtype=np.int64)                       # global, 0-based
        self.itype = np.dtype(be.int_dtype)
        self.info = 0
        self.sends: list = []
        self.recvs: dict[int, tuple] = {}
        self.own: tuple | None = None      # (panel, message, factored panel) this rank factored last
        self.seconds = {"compute": 0.0, "communication": 0.0}
        self.loop_seconds = dict(self.seconds)     # as the factorization left them (set by lu._factor)

    def rank_of(self, i: int, j: int) -> int:
        return i * self.nc + j

    def tag(self, K: int, kind: int) -> int:
        return 4 * (K % _TAG_CYCLE) + kind

    def _clock(self, name: str, t0: float) -> float:
        t1 = time.perf_counter()
        self.seconds[name] += t1 - t0
        return t1

    # -- panel ---------------------------------------------------------------------------------
    def _rows_of(self, i: int, K: int) -> np.ndarray:
        """Global rows >= K b held by process row i."""
        rows = self.rows.indices(i)
        return rows[rows >= K * self.b]

    def _message_size(self, K: int) -> int:
        """[info, pivots, this process row's rows of the factored panel]."""
        w = self.size(K)
        return 1 + w + (self.mloc - self.lr(K)) * w

    def post_recv(self, K: int) -> None:
        """Irecv panel K's message (every rank but its factoring one): three slots by K % 3, since panels
        K + 1 and K + 2 are posted while panel K is still read."""
        if self._factoring(K):
            return
        buf = workspace.empty(f"lu_panel{K % 3}", self._message_size(K))
        src = self.rank_of(self.prow(K), self.pcol(K))
        self.recvs[K] = (self.comm.Irecv([buf, self.MPI.DOUBLE], src, self.tag(K, _PANEL)), buf)

    def _factoring(self, K: int) -> bool:
        return self.myr == self.prow(K) and self.myc == self.pcol(K)

    def factor(self, K: int) -> None:
        """Panel K on its process column: (gather on the diagonal owner,) getrf, and to each rank
        the pivots and its process row's rows of the factored panel (Isend)."""
        if self.myc != self.pcol(K):
            return
        t0 = time.perf_counter()
        kb, w, pc, top = K * self.b, self.size(K), self.lc(K), self.lr(K)
        panel = self._gather_panel(K) if self.nr > 1 else self.x[kb:, pc:pc + w]
        if panel is None:
            return
        t0 = self._clock("communication", t0)
        ip = np.empty(w, dtype=self.itype)
        info = int(self.be.getrf(panel, ip))
        if self.nr > 1:
            self.x[top:, pc:pc + w] = panel[self.grow[top:] - kb]
        t0 = self._clock("compute", t0)
        self._wait_sends(K % 2)
        sends = []
        for i in range(self.nr):
            peers = [q for q in range(i * self.nc, (i + 1) * self.nc) if q != self.comm.rank]
            if not peers:
                continue
            rows = self._rows_of(i, K) - kb
            msg = workspace.empty(f"lu_send{K % 2}_{i}", 1 + w + rows.size * w)
            msg[0], msg[1:1 + w] = info, ip
            msg[1 + w:].reshape((rows.size, w), order="F")[...] = panel if self.nr == 1 else panel[rows]
            sends += [self.comm.Isend([msg, self.MPI.DOUBLE], q, self.tag(K, _PANEL)) for q in peers]
        self.sends.append((K % 2, sends))
        self.own = (info, ip, self.x[top:, pc:pc + w])
        self._clock("communication", t0)

    def _gather_panel(self, K: int) -> np.ndarray | None:
        """r > 1: the column's rows of panel K on the diagonal block's owner (None elsewhere)."""
        kb, w, pc, top = K * self.b, self.size(K), self.lc(K), self.lr(K)
        owner = self.prow(K)
        mine = self.x[top:, pc:pc + w]
        if self.myr != owner:
            self.col.Send([np.asfortranarray(mine), self.MPI.DOUBLE], owner, self.tag(K, _GATHER))
            return None
        panel = workspace.empty("lu_gather", (self.n - kb, w), order="F")
        panel[self.grow[top:] - kb] = mine
        for i in range(self.nr):
            if i == owner:
                continue
            rows = self._rows_of(i, K)
            piece = workspace.empty("lu_piece", (rows.size, w), order="F")
            self.col.Recv([piece, self.MPI.DOUBLE], i, self.tag(K, _GATHER))
            panel[rows - kb] = piece
        return panel

    def panel(self, K: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(info, 1-based pivots of the panel, this rank's rows of the factored panel: its local
        rows from block row K down) on every rank; the panel's process column keeps them in x."""
        t0 = time.perf_counter()
        w = self.size(K)
        if self._factoring(K):
            info, ip, mine = self.own
        else:
            req, msg = self.recvs.pop(K)
            req.Wait()
            info, ip = int(msg[0]), msg[1:1 + w].astype(self.itype)
            mine = msg[1 + w:].reshape((-1, w), order="F")
            if self.myc == self.pcol(K):
                top, pc = self.lr(K), self.lc(K)
                self.x[top:, pc:pc + w] = mine
        if info and not self.info:
            self.info = K * self.b + info
        self.ipiv[K * self.b:K * self.b + w] = ip.astype(np.int64) - 1 + K * self.b
        self._clock("communication", t0)
        return info, ip, mine

    # -- the step's update -----------------------------------------------------------------------
    def interchange(self, K: int, ip: np.ndarray) -> None:
        """The panel's row interchanges on this rank's columns outside it (and the right-hand sides)."""
        t0 = time.perf_counter()
        kb, w, pc = K * self.b, self.size(K), self.lc(K)
        own = self.myc == self.pcol(K)
        if self.nr > 1:         # no right-hand sides here: the solve runs on 1 x c
            cols = np.arange(self.nloc, dtype=np.int64)
            self._exchange(K, ip, np.concatenate([cols[:pc], cols[pc + w:]]) if own else cols)
            self._clock("communication", t0)
            return
        views = [self.x[:, :pc], self.x[:, pc + w:]] if own else [self.x]
        if self.xb is not None:
            views.append(self.xb)
        for v in views:
            if v.shape[1]:
                self.be.laswp(v[kb:], ip)
        self._clock("compute", t0)

    def _moves(self, K: int, ip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The panel's interchanges as one permutation: (destination rows, their source rows)."""
        kb = K * self.b
        perm: dict[int, int] = {}
        for i, p in enumerate(ip.astype(np.int64) - 1 + kb):
            g = kb + i
            perm[g], perm[p] = perm.get(p, p), perm.get(g, g)
        moved = sorted((g, s) for g, s in perm.items() if g != s)
        return np.array([g for g, _ in moved], np.int64), np.array([s for _, s in moved], np.int64)

    def _exchange(self, K: int, ip: np.ndarray, cols: np.ndarray) -> None:
        """r > 1: the interchanges on local columns ``cols`` within the process column, the rows
        packed per peer process row (every source read before any row is written; one Isend and
        one Irecv per peer)."""
        dst, src = self._moves(K, ip)
        if not (dst.size and cols.size):
            return
        down, up = self.rows.owner(dst), self.rows.owner(src)
        ldst, lsrc = self.rows.local_index(dst), self.rows.local_index(src)
        reqs, inbox = [], []
        for q in range(self.nr):
            out, into = (up == self.myr) & (down == q), (down == self.myr) & (up == q)
            if q == self.myr:
                if out.any():
                    inbox.append((ldst[out], self._take(lsrc[out], cols)))
                continue
            if out.any():
                reqs.append(self.col.Isend([self._take(lsrc[out], cols), self.MPI.DOUBLE], q, self.tag(K, _SWAP)))
            if into.any():
                buf = np.empty((int(into.sum()), cols.size), order="F")
                reqs.append(self.col.Irecv([buf, self.MPI.DOUBLE], q, self.tag(K, _SWAP)))
                inbox.append((ldst[into], buf))
        self.MPI.Request.Waitall(reqs)
        for rows, buf in inbox:
            pack.put(self.x, pack.as_index(rows), cols, buf)

    def _take(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = np.empty((rows.size, cols.size), order="F")
        pack.take(self.x, pack.as_index(rows), cols, out)
        return out

    def u12(self, K: int, panel: np.ndarray) -> list[np.ndarray]:
        """U12 of block row K for this rank's trailing columns (and right-hand sides)."""
        t0 = time.perf_counter()
        w, top, tc = self.size(K), self.lr(K), self.lc(K + 1)
        targets = [self.x[top:top + w, tc:]] + ([self.xb[top:top + w]] if self.xb is not None else [])
        if self.myr == self.prow(K):
            for t in targets:
                if t.shape[1]:
                    self.be.trsm(1.0, panel[:w], t, False, True, False, True)
        t0 = self._clock("compute", t0)
        if self.nr > 1:
            targets = [self._bcast_down(K, t, i) for i, t in enumerate(targets)]
            self._clock("communication", t0)
        return targets

    def _bcast_down(self, K: int, t: np.ndarray, i: int) -> np.ndarray:
        buf = workspace.empty(f"lu_u12_{i}", (self.size(K), t.shape[1]), order="F")
        if self.myr == self.prow(K):
            buf[...] = t
        if buf.size:
            self.col.Bcast([buf, self.MPI.DOUBLE], self.prow(K))
        return buf

    def l21(self, K: int, mine: np.ndarray) -> np.ndarray:
        """L21 rows of this rank (its local rows below block row K) from its rows of panel K."""
        return mine[self.lr(K + 1) - self.lr(K):]

    def gemm(self, K: int, l21: np.ndarray, u: np.ndarray, c: np.ndarray, poll: bool = False) -> None:
        """c -= l21 u; with ``poll``, in chunks of ``LU_POLL_BLOCKS`` block columns with the messages
        in flight progressed between them (over TCP a large message moves only while both of its
        ranks are inside MPI, so a sender busy in one long gemm would stall its receivers)."""
        if not (l21.shape[0] and c.shape[1]):
            return
        step = self.b * LU_POLL_BLOCKS if poll else c.shape[1]
        for j in range(0, c.shape[1], step):
            t0 = time.perf_counter()
            self.be.gemm(-1.0, l21, u[:, j:j + step], 1.0, c[:, j:j + step])
            self._clock("compute", t0)
            if poll and j + step < c.shape[1]:
                self.poll()

    def poll(self) -> None:
        """Progress this rank's outstanding panel sends and receives (MPI_Test)."""
        t0 = time.perf_counter()
        for _, reqs in self.sends:
            self.MPI.Request.Testall(reqs)
        for req, _ in self.recvs.values():
            req.Test()
        self._clock("communication", t0)

    def update(self, K: int, panel: np.ndarray, ip: np.ndarray) -> None:
        """Step K on this rank; with look-ahead the owner of K+1 factors it after its first block."""
        self.interchange(K, ip)
        us = self.u12(K, panel)
        l21, low, tc = self.l21(K, panel), self.lr(K + 1), self.lc(K + 1)
        ahead = self.lookahead and K + 1 < self.N and self.myc == self.pcol(K + 1)
        if self.lookahead and K + 2 < self.N:
            self.post_recv(K + 2)
        split = self.size(K + 1) if ahead else 0
        self.gemm(K, l21, us[0][:, :split], self.x[low:, tc:tc + split])
        if ahead:
            self.factor(K + 1)
        self.gemm(K, l21, us[0][:, split:], self.x[low:, tc + split:], poll=True)
        if self.xb is not None:
            self.gemm(K, l21, us[1], self.xb[low:])

    def _wait_sends(self, slot: int | None = None) -> None:
        keep = []
        for s, reqs in self.sends:
            if slot is None or s == slot:
                self.MPI.Request.Waitall(reqs)
            else:
                keep.append((s, reqs))
        self.sends = keep

    def run(self) -> int:
        """The factorization loop; the global LAPACK-style info (first exactly zero pivot, 1-based)."""
        if self.N == 0:
            return 0
        self.post_recv(0)
        if self.lookahead and self.N > 1:
            self.post_recv(1)
        self.factor(0)
        for K in range(self.N):
            if not self.lookahead:
                if K + 1 < self.N:
                    self.post_recv(K + 1)
            _, ip, panel = self.panel(K)
            self.update(K, panel, ip)
            if not self.lookahead and K + 1 < self.N:
                self.factor(K + 1)
        t0 = time.perf_counter()
        self._wait_sends()
        self._clock("communication", t0)
        return self.info

    # -- back substitution (1 x c) -----------------------------------------------------------------
    def back_substitute(self, nrhs: int) -> np.ndarray | None:
        """U x = y, the whole y (solved blocks below, y above) passed from each block column's
        owner to the previous one's; x on rank 0 (the owner of block column 0), fresh memory."""
        t0 = time.perf_counter()
        y, holder = self.xb, self.pcol(self.N)
        for K in range(self.N - 1, -1, -1):
            owner = self.pcol(K)
            if owner != holder:
                if self.myc == holder:
                    self.comm.Send([y, self.MPI.DOUBLE], owner, self.tag(K, _RING))
                elif self.myc == owner:
                    y = workspace.empty("lu_ring", (self.n, nrhs), order="F")
                    self.comm.Recv([y, self.MPI.DOUBLE], holder, self.tag(K, _RING))
                holder = owner
                t0 = self._clock("communication", t0)
            if self.myc != owner:
                continue
            kb, w, pc = K * self.b, self.size(K), self.lc(K)
            self.be.trsm(1.0, self.x[kb:kb + w, pc:pc + w], y[kb:kb + w], False, False, False, False)
            if kb:
                self.be.gemm(-1.0, self.x[:kb, pc:pc + w], y[kb:kb + w], 1.0, y[:kb])
            t0 = self._clock("compute", t0)
        return np.array(y, order="F") if self.comm.rank == 0 else None
