"""Phase model of the distributed block-cyclic Cholesky with look-ahead (``autotune.distributed.cholesky``).

Starting point: the compute and communication terms of docs/models.md#distributed.cholesky, but
summed step by step over the block columns with each rank's real local sizes, and the k of every
call looked up on the shape the implementation really calls:

- ``potrf`` (square) on the w x w diagonal block, w = b (the last block may be short);
- ``trsm`` "panel" (param b) on each process row's local panel height m_i (rows below the block);
- trailing update, one local block column J at a time: ``syrk`` on a diagonal block the rank owns
  (a b x b syrk of rank b: the "square" series at b, the same shape as "panel" at x = b, measured
  down to small sizes) and ``gemm`` on the rows below it, an (h x b) times (b x b) product: the
  "panel" gemm series (param b) at each call's height h (the rows of process row i below block
  J, the same at every step, so r x N lookups cover all (N^2/2c) calls). (The "rankb" series,
  x-by-b times b-by-x, is the shape of a single gemm over the whole local trailing piece; the
  implementation does not do that: it would spend half its flops above the diagonal.)
  Plus the memory traffic of the update, which the hot-operand probe timings leave out: each
  step reads and writes every element of the rank's local trailing triangle, at
  ``cholesky.MEMORY_SHARE`` (1/3) of the ``add`` series' time per element (looked up at the
  square root of that element count), added to the flop time. This traffic is what makes small
  blocks slow.

Communication per panel k (fits of ``cp`` at the real message sizes, 8-byte words): the diagonal
block down the owner's process column, ``bcast_col`` of 8 w^2 bytes (r > 1); the panel piece of
each process row to that row, ``bcast_row`` of 8 m_i w bytes (c > 1); the transposed pieces, of
which rank (i, j) receives 8 w n_j (r-1)/r bytes (n_j its trailing columns), ``bcast_col`` (r > 1).
A receiver gets the row and column parts one after the other (their sum). With one core per
rank these are not latencies hidden behind the update: the receiver itself copies the pieces in
(single-copy shared memory, inside its polls and waits), so each costs its probe time plus
``cp.loop_share`` of an out-of-cache pass per element on the receiver's own clock. The owner packs
its piece (and on 2-D grids the column pieces) into send buffers first: a copy plus the same
per-element extra, on its clock after the trsm. Every step also costs each rank the loop's own
bookkeeping (posting and completing requests, Python), ``cp.loop_overhead`` per panel; both
calibrated together by the comm probe on runs at the selector's blocks (``install_probe.calibrate``).

Combination (``total``): a per-rank clock recurrence over the steps, the critical path of the
implementation. Step k on rank (i, j) starts when both its own previous work is done and panel k
is ready (factored and packed on its column), then pays its receive copy. With look-ahead, the
column owning panel k+1 first updates block column k+1 (L), factors panel k+1 (diagonal potrf,
diagonal message, trsm, packing) and sends it, then finishes its step-k update; everyone else
just updates. Without look-ahead the panel is factored after the whole update and everyone waits
for it (serial). After the loop every rank zeroes its part of the factor's strict upper triangle
(``movement.fill``, counted as compute as the run counts it). ``total`` = distribution + max over
ranks of the final clock + collection. Each phase is its maximum over the ranks, as a run reports
them (``Phases`` per rank, reduced with MAX): ``compute`` the busiest rank's busy time (BLAS and
the zeroing), ``communication`` the largest rest of a rank's loop time (packing, receive copies,
waits for late panels: the run times everything in its loop outside BLAS as communication). The
ranks end together, so the least busy one waits longest: communication carries the compute
imbalance of the block-cyclic columns. Each phase <= total <= their sum.

``distribution`` / ``collection`` (``_moves``): the root's finiteness check (one gemv), then on
1-D grids the probe's timing of the runs' own scatter (``colscatter_cold``, the root's
copy of its blocks included), on 2-D every element packed (``cp.pack_time`` by run length b) and
``scatterv_cold`` of the 8 n^2/p byte pieces; back, the new factor's page faults
(``cp.first_touch_time``), ``gatherv`` and the copy or unpacking. The root-side costs are
``models.movement``'s, shared with the gemm models.
"""
from __future__ import annotations

import numpy as np

from autotune.core.routines import WORD
from autotune.db.comm_lookup import CommParams
from autotune.db.contention import alone, sharing
from autotune.db.lookup import SPLookup

from . import movement
from .cholesky import MEMORY_SHARE, chol_flops


def wanted_order(r: int, c: int) -> str:
    """Memory order the root moves the matrix in: C for r x 1 grids (whole block rows go out
    unpacked), else Fortran (block columns on 1 x c, packing in memory order on 2-D grids)."""
    return "C" if r > 1 and c == 1 else "F"


def memory_order(a) -> str:
    """C or F if ``a`` is contiguous in only that order, else A (both: one row; or neither)."""
    flags = np.asarray(a).flags
    if flags.c_contiguous != flags.f_contiguous:
        return "C" if flags.c_contiguous else "F"
    return "A"


def flipped(r: int, c: int, order: str) -> bool:
    """Whether the root factors a^T instead of a: a is contiguous only in the order other than
    ``wanted_order`` (its transpose then needs no copy)."""
    return order in ("C", "F") and order != wanted_order(r, c)


def loop_grid(r: int, c: int, lower: bool, order: str = "C") -> tuple[int, int]:
    """(process rows, process columns) of the factorization loop for a plan's r x c grid.

    The root factors S = a or S = a^T (``flipped``), and the loop always computes a lower
    factor: of S if the factor wanted of S is lower, else of S^T on the transposed c x r grid.
    So scipy's default (upper) on a C-ordered matrix runs r x 1 and 1 x c plans both as a
    1 x max(r, c) loop, the panel factored by one process.
    """
    return (r, c) if lower != flipped(r, c, order) else (c, r)


def _one(n: int, r: int, c: int, b: int, backend: str, threads: int, sp: SPLookup, cp: CommParams,
         lookahead: bool) -> dict[str, float]:
    p, grid = r * c, (r, c)
    # The loop keeps fewer ranks busy as the trailing matrix shrinks, so the contention is applied
    # per step here (``sharing``) on uncontended k: the plan's p for every step would overcharge
    # the late steps, where few ranks work.
    share_cores = sharing(sp, backend, threads)
    look = alone(sp)
    b = max(1, min(int(b), n))
    N = -(-n // b)
    J = np.arange(N)
    s = np.full(N, float(b))
    s[-1] = n - (N - 1) * b
    rowm = (J[None, :] % r == np.arange(r)[:, None]).astype(float)      # (r, N) block J on process row i
    colm = (J[None, :] % c == np.arange(c)[:, None]).astype(float)      # (c, N)
    M = movement.suffix_sums(rowm * s)                                               # (r, N+1) rows of blocks >= J
    Nc = movement.suffix_sums(colm * s)                                              # (c, N+1) columns of blocks >= J
    # Trailing update of step k (panel k, width w_k) on rank (i, j): blocks J >= k+1 of column j.
    # The gemm of block column J always has the M[i, J+1] local rows below block J, whatever the
    # step: one k per (process row, block), looked up at that call's height.
    height = M[:, 1:]                                                   # (r, N)
    kg = np.asarray(look.k("gemm", backend, threads, height.ravel(), "panel", b), float).reshape(height.shape)
    per_w = s * height * kg                                             # gemm seconds / (2 w) per block
    GS = movement.suffix_sums(colm[None, :, :] * per_w[:, None, :])                  # (r, c, N+1)
    YS = movement.suffix_sums(rowm[:, None, :] * colm[None, :, :] * (s * (s + 1)))   # owned diagonal blocks
    steps = N - 1
    w = s[:steps]
    ks = float(np.asarray(look.k("syrk", backend, threads, b)).reshape(-1)[0])
    if steps:
        U = 2.0 * w * GS[:, :, 1:N] + w * YS[:, :, 1:N] * ks             # (r, c, steps)
        K = J[1:]                                                       # block column K = k + 1
        L = 2.0 * w * per_w[:, K] + w * rowm[:, K] * s[K] * (s[K] + 1) * ks
        # Memory: each step streams the rank's trailing triangle (read + write, 16 B per element).
        touched = s * M[:, :N]                                          # (r, N) elements of column J
        ES = movement.suffix_sums(colm[None, :, :] * touched[:, None, :])[:, :, 1:N]  # (r, c, steps)
        kmem = MEMORY_SHARE * np.asarray(look.k("add", backend, threads, np.sqrt(np.maximum(ES.ravel(), 1.0))),
                                         float).reshape(ES.shape)
        U = U + ES * kmem
        L = L + touched[:, K] * kmem[np.arange(r)[:, None], (K % c)[None, :], K - 1]
    else:
        U = np.zeros((r, c, 0))
        L = np.zeros((r, 0))
    D = chol_flops(s) * np.asarray(look.k("potrf", backend, threads, s), float)
    below = M[:, 1:]                                                    # (r, N) panel rows below block K
    S = below * s * s * np.asarray(look.k("trsm", backend, threads, below.ravel(), "panel", b),
                                   float).reshape(below.shape)
    # Ranks computing at once: step k's updaters (the next panel's factorization runs among them);
    # the first panel's column alone before the loop. Each call's slowdown by its duration.
    q = np.concatenate([[max(1, int((S[:, 0] > 0).sum()))], (U > 0).sum(axis=(0, 1))]).astype(int)   # (N,)
    left = np.maximum(movement.suffix_sums(colm)[:, 1:N], 1.0)                       # (c, steps) block columns left
    Ub, Uw = share_cores(U, U / left[None, :, :], q[None, None, 1:])
    _, Lw = share_cores(L, L, q[None, 1:])          # its busy time is in U's
    Db, Dw = share_cores(D, D, q)
    Sb, Sw = share_cores(S, S, q[None, :])
    # Messages of panel K: diagonal (column), then the pieces each rank receives. One core per
    # rank: a receiver copies its pieces in itself (single-copy shared memory, inside its polls
    # and waits), so R is time on its own clock, not latency hidden behind its update; and a
    # panel moved inside the loop costs more than the probe's warm transfer (cp.loop_share).
    Cd = np.zeros(N)
    R = np.zeros((N, r, c))
    got = np.zeros((N, r, c))                                           # bytes each rank receives
    if r > 1:
        Cd = np.asarray(cp.time("bcast_col", p, WORD * s * s, grid=grid), float).reshape(N)
        col_bytes = WORD * s[:, None] * Nc[:, 1:].T * (r - 1) / r        # (N, c)
        R += np.asarray(cp.time("bcast_col", p, col_bytes.ravel(), grid=grid), float).reshape(N, 1, c)
        got += col_bytes[:, None, :]
    if c > 1:
        row_bytes = WORD * s[:, None] * M[:, 1:].T                       # (N, r)
        row_t = np.asarray(cp.time("bcast_row", p, row_bytes.ravel(), grid=grid), float).reshape(N, r, 1)
        not_owner = (np.arange(c)[None, :] != (J % c)[:, None])          # (N, c)
        R += row_t * not_owner[:, None, :]
        got += row_bytes[:, :, None] * not_owner[:, None, :]
    share = getattr(cp, "loop_share", None)             # calibrated with the loop overhead
    R += movement.in_loop(sp, got / WORD, share)
    R += float(getattr(cp, "loop_overhead", 0.0))       # the step's own bookkeeping, every rank
    # The owner packs its panel piece into a new send buffer (and, on 2-D grids, the column
    # pieces into more), before any of it leaves: on its clock, after the trsm.
    packed = ((r > 1) + (c > 1)) * below * s
    Pk = movement.copies(sp, packed) + movement.in_loop(sp, packed, share)
    # Clock recurrence over the steps.
    t = np.zeros((r, c))
    busy = np.zeros((r, c))

    def factor(Kb: int, start: np.ndarray) -> np.ndarray:
        iK, jK = Kb % r, Kb % c
        done = start[iK] + Dw[Kb]
        diag = np.full(r, done + Cd[Kb])
        diag[iK] = done
        busy[iK, jK] += Db[Kb]
        busy[:, jK] += Sb[:, Kb]
        return np.maximum(start, diag) + Sw[:, Kb] + Pk[:, Kb]

    ready = factor(0, t[:, 0])
    t[:, 0] = ready
    for k in range(N):
        t = np.maximum(t, ready.max()) + R[k]
        if k == N - 1:
            break
        Kb, jK = k + 1, (k + 1) % c
        Uk = Uw[:, :, k]
        busy += Ub[:, :, k]
        if lookahead:
            ready = factor(Kb, t[:, jK] + Lw[:, k])
            rest = np.maximum(Uk[:, jK] - Lw[:, k], 0.0)
            t = t + Uk
            t[:, jK] = ready + rest
        else:
            t = t + Uk
            ready = factor(Kb, t[:, jK])
            t[:, jK] = ready
    # The factor's strict upper triangle zeroed on every rank (its local rows above each block
    # column, and the triangle of the diagonal blocks it owns), out of cache by then.
    above = (M[:, :1] - M[:, :N]) * s + rowm * s * (s - 1) / 2.0      # (r, N)
    zero = movement.fill(sp, (colm[None, :, :] * above[:, None, :]).sum(axis=-1))
    t = t + zero
    busy += zero
    loop = float(t.max())
    compute = float(busy.max())
    dist, coll = _moves(n, r, c, b, p, alone(sp), cp, backend, threads)   # the root's, the others wait
    rest = float((t - busy).max())
    waits = rest if rest > 1e-12 * loop else 0.0   # rounding of the clock sums
    out = {"distribution": dist, "communication": waits, "compute": compute,
           "collection": coll}
    out["total"] = dist + loop + coll
    return out


def _measured(cp: CommParams, primitive: str) -> bool:
    """Whether the comm probe behind ``cp`` timed ``primitive`` (databases from older probes lack
    some)."""
    names = getattr(cp, "primitives", None)
    return callable(names) and primitive in names()


def _moves(n: int, r: int, c: int, b: int, p: int, sp: SPLookup, cp: CommParams, backend: str,
           threads: int) -> tuple[float, float]:
    """(distribution, collection) seconds of the root's n x n matrix in and its factor out.

    Distribution: the root's finiteness check, then on 1-D grids ``colscatter_cold`` of the
    8 n^2/p byte pieces: the probe times the runs' own scatter, whose root copies its blocks while
    the others pull theirs (how much those overlap depends on the machine, so it is timed, not
    modelled). Without that series: the cold ``scatterv`` plus the copy. On 2-D grids every
    element is packed into a new send buffer, then ``scatterv_cold``. Collection: the new result's
    page faults, the ``gatherv`` of the pieces, and the root's own copy (1-D) or the unpacking
    (2-D, into a new gather buffer too).
    """
    elems, blk = float(n) * n, WORD * float(n) * n / p

    def one(primitive: str) -> float:
        return float(np.asarray(cp.time(primitive, p, blk)).reshape(-1)[0])

    gather, touch = one("gatherv"), movement.first_touch(cp, WORD * elems)
    check = movement.finite_check(sp, n, n, backend, threads, cp)
    if r == 1 or c == 1:
        own = movement.copy(sp, elems / p)
        moved = one("colscatter_cold") if _measured(cp, "colscatter_cold") else one("scatterv_cold") + own
        return check + moved, touch + own + gather
    run = movement.run_length(n, r, b)
    packed = touch + movement.pack(sp, cp, elems, run, "take") + movement.copy(sp, elems / p)
    dist = check + one("scatterv_cold") + packed
    return dist, 2.0 * touch + movement.pack(sp, cp, elems, run, "put") + gather


def model(n: int, plan, sp: SPLookup, cp: CommParams, *, b=None, lookahead: bool = True, lower: bool = False,
          order: str = "C") -> dict[str, float] | dict[str, np.ndarray]:
    """Predicted seconds per phase (and "total") of ``cholesky(a, comm, plan, lower=lower)`` for an
    n x n matrix ``a`` in memory ``order`` (C, F, or A for neither).

    ``b``: candidate block sizes (array) to evaluate instead of ``plan.b``; then every value is an
    array over them. ``lookahead=False`` models the run without look-ahead.
    """
    n = int(n)
    bs = plan.b if b is None else b
    arr = np.atleast_1d(np.asarray(bs, dtype=int))
    if n < 1:
        zero = {k: np.zeros(arr.shape) for k in ("distribution", "communication", "compute", "collection", "total")}
        return zero if np.ndim(bs) else {k: 0.0 for k in zero}
    if (arr < 1).any():
        raise ValueError(f"block sizes must be >= 1, got {bs}")
    nr, nc = loop_grid(plan.r, plan.c, lower, order)
    rows = [_one(n, nr, nc, int(v), plan.backend, plan.threads, sp, cp, lookahead) for v in arr]
    if np.ndim(bs) == 0:
        return rows[0]
    return {k: np.array([row[k] for row in rows]) for k in rows[0]}


MODELS = {"cholesky": model}
WAIT_PHASE = {"cholesky": "communication"}     # a faster rank waits in the next panel's messages
