"""Phase model of the distributed block-cyclic LU and solve (``autotune.distributed.lu``;
docs/models.md#distributed.lu): the phases of 001 eqs. 5.3-5.4 as the run has them, summed step
by step over the block columns with each rank's real local sizes.

Per step K (panel width w, m = n - K b rows from the diagonal down), on rank (i, j):

- panel: ``getrf`` "panel" (m x w, the library's recursive panel factorization) on the owner of
  the diagonal block; on r > 1 after the column's rows reach it (``bcast_col`` of m w / r words);
- panel broadcast: [info, pivots, its process row's rows of the panel] to every other rank,
  8 (m w / r + w) bytes, p - 1 sends back to back: LoOgGP's train where it beat Hockney on the
  probe's PRTT runs in that message band (``comm_train``), else ``bcast_row``'s curve; the owner
  packing the panel first (a copy) and each receiver copying its rows in (``movement.in_loop``);
- interchanges: ``laswp`` "panel" (w pivots on the rank's n_j columns; elements = w n_j); on
  r > 1 the swapped rows also cross process rows, (r - 1) / r of them each way (``bcast_col`` of
  2 w n_j (r - 1) / r words);
- U12: ``trsm`` (w x w unit-lower solve of w x N_j, flops w^2 N_j, the "u12" series where measured,
  else "panel"), on r > 1
  broadcast down the column (``bcast_col`` of w N_j words);
- trailing update: ``gemm`` "rankb" (M_i x w times w x N_j, in strips of ``LU_POLL_BLOCKS``
  block columns between polls, k at the geometric mean of M_i and a strip's width), M_i, N_j: the
  rank's local rows and columns below and right of block K.

Combination: a per-rank clock recurrence, the critical path of the implementation. With
look-ahead the process column of panel K+1 updates block column K+1 first, gathers (r > 1) and
factors panel K+1 on its diagonal owner, which sends it, then finishes its step-K update; the
others receive panel K+1 when their update is done. Without look-ahead the column factors panel
K+1 after its whole step-K update. On r > 1 the row exchange waits for the process column's slowest
member, and U12 leaves the process row of block row K after its trsm (the others wait). Phases as the run
reports them (maximum over ranks): compute is the busiest rank's BLAS time, communication the rest
of the loop. The loop's k come from the SP view the selector passes (slowed by the ranks computing
at once); the root's moves below use ``alone``. ``distribution``: the root's Fortran copy with its
finiteness check (one pass) and the scatter (``colscatter_cold`` on 1 x c, packing and ``scatterv_cold`` on 2-D grids);
``collection``: the gathered factor's page faults and transfer.

The solve (1 x c) carries the right-hand sides as one more block column through the loop (the
forward substitution) and adds the back substitution: per block column, a ``trsm`` (w^2 nrhs)
and a ``gemm`` (2 K b w nrhs) on its owner and the n x nrhs right-hand sides sent on to the next
owner (``bcast_row``).
"""
from __future__ import annotations

import numpy as np

from autotune.core.assumptions import LU_POLL_BLOCKS
from autotune.core.routines import WORD, flops
from autotune.db.comm_lookup import CommParams
from autotune.db.contention import alone
from autotune.db.lookup import SPLookup

from . import comm_train, movement
from .links import hosts_of, link_primitive
from .lu import u12_pattern


def _k(sp: SPLookup, routine: str, backend: str, threads: int, x, pattern: str, param: float) -> np.ndarray:
    xs = np.maximum(np.asarray(x, float), 1.0)
    return np.asarray([movement.k(sp, routine, backend, threads, float(v), pattern, param) for v in xs.ravel()],
                      float).reshape(xs.shape)


class _Steps:
    """Per-step costs of one (n, r, c, b) on every rank: arrays (N, r, c) of seconds."""

    def __init__(self, n: int, r: int, c: int, b: int, backend: str, threads: int, sp: SPLookup, cp: CommParams,
                 nrhs: int):
        p, grid = r * c, (r, c)
        self.N = N = -(-n // b)
        J = np.arange(N)
        s = np.full(N, float(b))
        s[-1] = n - (N - 1) * b
        rowm = (J[None, :] % r == np.arange(r)[:, None]).astype(float)
        colm = (J[None, :] % c == np.arange(c)[:, None]).astype(float)
        rows = movement.suffix_sums(rowm * s)                         # (r, N+1) local rows of blocks >= J
        cols = movement.suffix_sums(colm * s)                         # (c, N+1)
        if nrhs:                                         # the right-hand sides: one more block column
            cols[N % c, :] += nrhs
        M, Nc = rows[:, 1:].T, cols[:, 1:].T            # (N, r), (N, c): below / right of block K
        ncols = cols[:, 0]                               # (c,) every local column
        m = n - J * b                                    # panel rows
        G = np.array([flops("getrf", {"m": int(mk), "n": int(w)}) for mk, w in zip(m, s, strict=True)])
        self.panel = G * _k(sp, "getrf", backend, threads, m, "panel", b)
        msg = WORD * (m * s / r + s + 1)                 # [info, pivots, one process row's rows]
        bcast = np.asarray(cp.time("bcast_row" if c > 1 else "bcast_col", p, msg, grid=grid),
                           float).reshape(N) if p > 1 else np.zeros(N)
        self.message = comm_train.train_time(cp, p - 1, msg, bcast) if p > 1 else bcast
        self.held = _held(cp, r, c, J, msg)
        # the loop's own costs per panel and per element moved (CommParams: the LU's runs, else the Cholesky's)
        share = getattr(cp, "lu_loop_share", None)
        self.copy_in = movement.in_loop(sp, m * s / r, share) + float(getattr(cp, "lu_loop_overhead", 0.0))
        self.pack = movement.copies(sp, m * s) + movement.in_loop(sp, m * s, share)
        swaps = s[:, None] * ncols[None, :]              # (N, c) elements interchanged
        lk = _k(sp, "laswp", backend, threads, ncols, "panel", b)
        self.swap = np.broadcast_to((swaps * lk[None, :])[:, None, :], (N, r, c)).copy()
        tk = _k(sp, "trsm", backend, threads, Nc, u12_pattern(sp, backend, threads), b)
        diag = (J[:, None] % r == np.arange(r)[None, :]).astype(float)        # (N, r) holds block row K
        self.trsm = diag[:, :, None] * (s[:, None, None] ** 2 * Nc[:, None, :] * tk[:, None, :])
        # the update runs in strips of LU_POLL_BLOCKS block columns (polls between them): k at a strip's size
        strip = np.minimum(Nc, LU_POLL_BLOCKS * b)[:, None, :]
        gx = np.sqrt(np.maximum(M[:, :, None] * strip, 1.0))
        gk = _k(sp, "gemm", backend, threads, gx, "rankb", b)
        # plus the trailing matrix's traffic beyond the probe's in-cache C of gx^2 (small b: memory bound)
        area = M[:, :, None] * Nc[:, None, :]
        self.traffic = movement.update_traffic(sp, area, gx * gx)
        self.update = 2.0 * s[:, None, None] * area * gk + self.traffic
        # The first trailing block column of the next panel's owner (look-ahead) is its share.
        nxt = np.concatenate([s[1:], [0.0]])
        self.ahead = self.update * (nxt[:, None, None] / np.maximum(Nc[:, None, :], 1.0))
        self.gather = np.zeros(N)
        self.exchange, self.down = np.zeros((N, c)), np.zeros((N, c))
        if r > 1:
            self.gather = np.asarray(cp.time("bcast_col", p, WORD * m * s / r, grid=grid), float).reshape(N)
            self.down = np.asarray(cp.time("bcast_col", p, (WORD * s[:, None] * Nc).ravel(), grid=grid),
                                   float).reshape(N, c)
            moved = 2.0 * (r - 1) / r * WORD * s[:, None] * ncols[None, :]     # rows crossing, both ways
            self.exchange = np.asarray(cp.time("bcast_col", p, moved.ravel(), grid=grid), float).reshape(N, c)
        self.s, self.r, self.c = s, r, c


def _held(cp: CommParams, r: int, c: int, J: np.ndarray, msg: np.ndarray) -> np.ndarray:
    """(N, r, c) seconds the panel of step K holds each receiver beyond its overlapped update
    (``models.links``: the CPU its arrival costs and its share that does not hide, by the link
    from the panel's owner); 0 on the owner."""
    hosts = hosts_of(r * c, cp).reshape(r, c)
    owner = hosts[J % r, J % c]                                   # (N,) the owner's host
    held = np.zeros((J.size, r, c))
    for net in (False, True):
        hidden, cpu = cp.overlap("net" if net else "host", msg)
        extra = cpu + (1.0 - hidden) * np.asarray(cp.time(link_primitive(cp, net), 2, msg), float)
        held = np.where((hosts[None] != owner[:, None, None]) == net, extra[:, None, None], held)
    held[J, J % r, J % c] = 0.0
    return held


def _loop(st: _Steps, lookahead: bool) -> tuple[np.ndarray, np.ndarray]:
    """(end clock, busy seconds) per rank (r, c) of the factorization loop."""
    r, c, N = st.r, st.c, st.N
    t = np.zeros((r, c))
    busy = np.zeros((r, c))

    def factor(K: int, start: float) -> float:
        busy[K % r, K % c] += st.panel[K]
        return start + st.gather[K] + st.panel[K] + st.pack[K]

    ready = factor(0, 0.0)
    for K in range(N):
        owner = (K % r, K % c)
        got = np.full((r, c), ready + st.message[K]) + st.copy_in[K]
        got[owner] = ready
        t = np.maximum(t + st.held[K], got)
        busy += st.swap[K] + st.trsm[K] + st.update[K]
        if r > 1:
            # the row exchange waits for the process column's slowest member; U12 leaves the
            # process row of block row K after its trsm, the others wait for it
            t = t.max(axis=0) + st.swap[K] + st.exchange[K]
            t = (t + st.trsm[K])[K % r] + st.down[K] + st.update[K]
        else:
            t = t + st.swap[K] + st.trsm[K] + st.update[K]
        if K == N - 1:
            break
        jn, io = (K + 1) % c, (K + 1) % r
        # look-ahead: the next panel's process column updates block column K+1 first, gathers
        # and factors it, then finishes its step-K update; its members wait for the gather
        rest = st.update[K][:, jn] - st.ahead[K][:, jn] if lookahead else np.zeros(r)
        start = t[:, jn] - rest
        ready = factor(K + 1, float(start.max()))
        t[:, jn] = start.max() + st.gather[K + 1] + rest
        t[io, jn] = ready + rest[io]
    return t, busy


def _ring(st: _Steps, n: int, nrhs: int, backend: str, threads: int, sp: SPLookup, cp: CommParams) -> float:
    """Seconds of the back substitution: per block column its owner's trsm and gemm, and a hand-over
    of the n x nrhs right-hand sides whenever the owner changes (every step on 1 x c, c > 1)."""
    s, c, b = st.s, st.c, int(st.s[0])
    K = np.arange(st.N)
    tk = _k(sp, "trsm", backend, threads, np.full(1, nrhs), "panel", b)[0]
    gk = _k(sp, "gemm", backend, threads, np.sqrt(np.maximum(K * b * nrhs, 1.0)), "rankb", b)
    comp = float((s * s * nrhs * tk).sum() + (2.0 * K * b * s * nrhs * gk).sum())
    hops = st.N if c > 1 else 0
    send = float(np.asarray(cp.time("bcast_row", c, WORD * n * nrhs, grid=(1, c))).reshape(-1)[0]) if hops else 0.0
    return comp + hops * send


def _moves(n: int, r: int, c: int, b: int, sp: SPLookup, cp: CommParams, nrhs: int) -> tuple[float, float]:
    """(distribution, collection): the root's checked Fortran copy of a C-ordered matrix (numpy's
    default; the probe's ``fortran_copy`` timing) and scatter; the factor back
    (collection 0 for the solve: only x returns, inside the back substitution)."""
    p = r * c
    elems, blk = float(n) * n, WORD * float(n) * n / p

    def one(primitive: str, nbytes: float = blk) -> float:
        return float(np.asarray(cp.time(primitive, p, nbytes)).reshape(-1)[0])

    copy = movement.checked_copy(sp, cp, elems)        # numpy's C order: a transposing copy, checked
    own = movement.copy(sp, elems / p)
    if r == 1:
        names = getattr(cp, "primitives", None)
        cold = callable(names) and "colscatter_cold" in names()
        dist = copy + (one("colscatter_cold") if cold else one("scatterv_cold") + own)
        coll = movement.first_touch(cp, WORD * elems) + own + one("gatherv")
    else:
        run = movement.run_length(n, r, b)
        dist = copy + one("scatterv_cold") + movement.pack(sp, cp, elems, run, "take") + own
        coll = 2.0 * movement.first_touch(cp, WORD * elems) + movement.pack(sp, cp, elems, run, "put") + one("gatherv")
    if nrhs:
        dist += one("bcast_row", WORD * n * nrhs) + movement.copy(sp, float(n) * nrhs)
        coll = 0.0
    return dist, coll


def _one(n: int, plan, b: int, sp: SPLookup, cp: CommParams, lookahead: bool, nrhs: int) -> dict[str, float]:
    """The phases of one block: the loop on ``sp`` as the selector passes it (slowed by the ranks
    computing at once, ``contention``), the root's moves alone (the others wait)."""
    st = _Steps(n, plan.r, plan.c, b, plan.backend, plan.threads, sp, cp, nrhs)
    t, busy = _loop(st, lookahead)
    loop = float(t.max())
    if nrhs:
        loop += _ring(st, n, nrhs, plan.backend, plan.threads, sp, cp)
    dist, coll = _moves(n, plan.r, plan.c, b, alone(sp), cp, nrhs)
    compute = float(busy.max())
    return {"distribution": dist, "communication": max(loop - compute, 0.0), "compute": compute,
            "collection": coll, "total": dist + loop + coll}


def _model(n: int, plan, sp: SPLookup, cp: CommParams, b, lookahead: bool, nrhs: int):
    bs = plan.b if b is None else b
    arr = np.atleast_1d(np.asarray(bs, dtype=int))
    if (arr < 1).any():
        raise ValueError(f"block sizes must be >= 1, got {bs}")
    if n < 1:
        rows = [dict.fromkeys(("distribution", "communication", "compute", "collection", "total"), 0.0)
                for _ in arr]
    else:
        rows = [_one(int(n), plan, int(min(v, n)), sp, cp, lookahead, nrhs) for v in arr]
    if np.ndim(bs) == 0:
        return rows[0]
    return {k: np.array([row[k] for row in rows]) for k in rows[0]}


def model(n: int, plan, sp: SPLookup, cp: CommParams, *, b=None, lookahead: bool = True):
    """Predicted seconds per phase (and "total") of ``lu_factor(a, comm, plan)`` for an n x n ``a``;
    ``b``: candidate blocks (array) instead of ``plan.b``, then every value is an array over them."""
    return _model(n, plan, sp, cp, b, lookahead, 0)


def solve_model(n: int, nrhs: int, plan, sp: SPLookup, cp: CommParams, *, b=None, lookahead: bool = True):
    """Predicted phases of ``solve(a, b, comm, plan)`` with ``nrhs`` right-hand sides (1 x c plans)."""
    return _model(n, plan, sp, cp, b, lookahead, max(int(nrhs), 1))


def explain(problem, plan, sp: SPLookup, cp: CommParams) -> list[str]:
    """The terms the model adds to 001's phases for the chosen plan, each summed over the steps
    (the busiest rank's), and how the panel's sends are priced."""
    n, b = int(problem.order), int(min(plan.b, problem.order))
    st = _Steps(n, plan.r, plan.c, b, plan.backend, plan.threads, sp, cp, 0)
    lines = [f"U12 solves: {1e3 * st.trsm.sum(axis=0).max():.2f} ms on the trsm "
             f"'{u12_pattern(sp, plan.backend, plan.threads)}' series",
             f"trailing update: {1e3 * st.update.sum(axis=0).max():.2f} ms, dgemm k at strips of "
             f"{LU_POLL_BLOCKS} block columns between polls, {1e3 * st.traffic.sum(axis=0).max():.2f} ms of it "
             "moving the trailing matrix beyond the probe's cached C",
             f"loop costs: {1e3 * st.copy_in.sum():.2f} ms receiving panels, {1e3 * st.pack.sum():.2f} ms packing "
             "them (the LU runs' calibration, else the Cholesky's)",
             f"root's checked Fortran copy: {1e3 * movement.checked_copy(alone(sp), cp, float(n) * n):.2f} ms"]
    if plan.r > 1:
        ms = [1e3 * st.gather.sum(), 1e3 * st.exchange.sum(axis=0).max(), 1e3 * st.down.sum(axis=0).max()]
        lines.append(f"column syncs on {plan.r} process rows: panel gathers {ms[0]:.2f} ms, row exchanges "
                     f"{ms[1]:.2f} ms, U12 down the column {ms[2]:.2f} ms")
    ch = comm_train.choice(cp)
    if ch is None:
        return [*lines, "panel sends: the broadcast's Hockney curve (no LoOgGP measured)"]
    won = [f"{name} ({lg:.0%} vs {hk:.0%})" for (_, _, name), lg, hk
           in zip(comm_train.BANDS, ch.loggp_err, ch.hockney_err, strict=True) if lg < hk]
    return [*lines, f"panel sends ({plan.p - 1} back to back): LoOgGP's train in {', '.join(won) or 'no band'} "
            "(held-out PRTT train error, LoOgGP vs Hockney), the broadcast's Hockney curve elsewhere"]


WAIT_PHASE = {"lu": "communication", "gesv": "communication"}
