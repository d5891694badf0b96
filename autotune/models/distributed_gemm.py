"""Distributed GEMM family models (docs/models.md#distributed): seconds per phase and total.

Each ``model(m, k, n, plan, sp, cp) -> dict`` predicts the run of the same-named algorithm in
``autotune.distributed.gemm`` (root-held data, from the first scatter to the gathered C): keys
``distribution``, ``communication``, ``compute``, ``collection`` (``autotune.core.plans.PHASES``)
and ``total``. Communication uses the primitive each phase really calls, with its message size in
bytes (``cp.time(primitive, p, nbytes, grid)``, per message for bcast/sendrecv/pingpong, per
process block for scatterv/gatherv/allgatherv; a collective among one process costs nothing).
Compute uses ``sp.k("gemm", backend, threads, x, pattern, param)`` at the per-rank shapes:
``stripe`` (param p) for BSR, ``square`` at the geometric-mean size for CBSR/Cannon blocks
(``models.gemm.lookup_size``), ``rankb`` (param b, beta 1 as the runs) for SUMMA updates; Strassen additions use
``k2_add`` (pattern ``view``) at each level's per-rank quadrant size. The times are those of the
slowest rank (largest block: ceil splits, block-cyclic part 0).

Distribution's scatters and broadcasts use the probe's cold-cache curves (``scatterv_cold``,
``bcast_cold``: every member's caches flushed first): the first phase of a run moves the user's
matrix into buffers that no cache holds any more, much slower than warm repeated calls.
The root's packing and unpacking of pieces that are not contiguous in its matrices is charged, in
distribution and collection, for the block-cyclic runs at the comm probe's measured cost per
element by contiguous run length (``cp.pack_time``: a block of b when the column-major operand's
rows are split, else whole columns; dearer than a plain copy), otherwise as one memory pass per element
at ``k2_add`` (``movement.PACK_BACKEND``; these root-side costs live in ``models.movement``).
The root's C is a new array: collection also pays its page faults (``cp.first_touch_time``, by size,
measured by the probe), which the gather's warm-buffer timings leave out.
Operands are assumed row-major (numpy's default), as the runs then are: BSR sends A's bands and
gathers C's straight from/into the matrices; SUMMA and parallel Strassen multiply ``C^T = B^T A^T``
on the transposed ``c x r`` grid (so the A panel travels along the columns of that grid).

``total`` is the slowest rank's path: the phases without what a faster rank waits for the
slowest (``_in_lockstep``, ``_summa_steps``), which the phases report (each is its slowest rank's).
For ``strassen_ms``, whose phases overlap (workers multiply while the root forms, sends and
accumulates), it is the makespan of the simulated round-robin schedule, see ``strassen_ms``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from autotune.core.routines import WORD
from autotune.db.comm_lookup import CommParams
from autotune.db.contention import alone, lockstep
from autotune.db.lookup import SPLookup
from autotune.geometry.layout import Axis
from autotune.models.gemm import ADDS_A, ADDS_B, ADDS_C_INNER, ADDS_C_LEAF, blas, lookup_size
from autotune.models.gemm import strassen as strassen_seq
from autotune.models.movement import add_k as _k2_add
from autotune.models.movement import cold_copies as _cold_copies
from autotune.models.movement import cold_reads as _cold_reads
from autotune.models.movement import first_touch
from autotune.models.movement import k as _k
from autotune.models.movement import pack as _pack
from autotune.models.movement import passes as _passes
from autotune.models.movement import run_length as _run

__all__ = ["ALGORITHM_NAMES", "MODELS", "WAIT_PHASE", "bsr", "cannon", "cbsr", "plan_error", "predict",
           "strassen_ms", "strassen_summa", "summa"]

ALGORITHM_NAMES = ("bsr", "cbsr", "cannon", "summa", "strassen_summa", "strassen_ms")
MAX_LEVEL = 12
SCATTER, BCAST = "scatterv_cold", "bcast_cold"     # distribution's primitives: caches cold


def plan_error(plan) -> str | None:
    """Why ``plan`` cannot run its algorithm (None if it can); pure, shared with the runs."""
    alg = plan.algorithm
    if alg not in ALGORITHM_NAMES:
        return f"unknown distributed gemm algorithm {alg!r}; known: {', '.join(ALGORITHM_NAMES)}"
    if plan.threads < 1:
        return f"threads must be >= 1, got {plan.threads}"
    if alg == "cannon" and plan.r != plan.c:
        return f"cannon needs a square grid (p = q^2), got {plan.r}x{plan.c}"
    if alg in ("summa", "strassen_summa") and plan.b < 1:
        return f"{alg} needs a block size b >= 1, got {plan.b}"
    if not 0 <= plan.level <= MAX_LEVEL:
        return f"recursion level must be in 0..{MAX_LEVEL}, got {plan.level}"
    if alg == "strassen_ms" and plan.p > 1 and plan.level < 1:
        return "strassen_ms on more than one process needs level >= 1"
    return None


# -- helpers ---------------------------------------------------------------------------------------

def _ceil(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _numroc(n: int, parts: int, block: int) -> np.ndarray:
    """Indices each part owns of n split block-cyclically: the runs' own ``Axis.count`` (numroc)."""
    axis = Axis(int(n), int(parts), int(block))
    return np.array([axis.count(i) for i in range(int(parts))])


def _numroc0(n: int, parts: int, block: int) -> int:
    """Indices part 0 (the largest) owns of n split block-cyclically."""
    return Axis(int(n), int(parts), int(block)).count(0)


def _moved(rows: int, cols: int, R: int, C: int, block: int) -> int:
    """Elements of the largest piece a non-root rank holds of a rows x cols matrix block-cyclic on
    R x C: what a scatter or gather moves per rank (the root's own piece, the largest, stays put,
    so counting it would overcharge uneven splits)."""
    pieces = np.outer(_numroc(rows, R, block), _numroc(cols, C, block)).ravel()
    return int(pieces[1:].max()) if pieces.size > 1 else int(pieces[0])


def _coll(cp: CommParams, primitive: str, members: int, nbytes, p: int | None = None, grid=None) -> float:
    """Seconds of a collective among ``members`` processes (0 alone), summed over message sizes."""
    if members <= 1:
        return 0.0
    return float(np.sum(cp.time(primitive, p if p is not None else members, np.asarray(nbytes, float), grid)))


def _k3(sp: SPLookup, plan, x, pattern: str = "square", param: float = 0.0) -> float:
    return _k(sp, "gemm", plan.backend, plan.threads, x, pattern, param)


def _result(distribution=0.0, communication=0.0, compute=0.0, collection=0.0, total=None) -> dict[str, float]:
    out = {"distribution": float(distribution), "communication": float(communication),
           "compute": float(compute), "collection": float(collection)}
    out["total"] = float(sum(out.values()) if total is None else total)
    return out


def _local(m, k, n, plan, sp: SPLookup) -> dict[str, float]:
    """One process: the runs do one local gemm."""
    return _result(compute=blas(m, k, n, plan.backend, plan.threads, sp))


# -- the models ------------------------------------------------------------------------------------

def _in_lockstep(sp: SPLookup, plan, load: float, runs: int) -> tuple[float, float, float]:
    """(compute, wall, wait) of the plan's p ranks, each with BLAS work ``load`` (uncontended
    seconds, the largest rank's) in ``runs`` uninterrupted runs between synchronisations, placed on
    the cores as the scheduler keeps them (``contention.lockstep``): the slowest rank's compute, the
    time to the last rank's end, and what the first to finish waits for it (in the algorithm's
    next synchronisation): a rank alone on a core waits for the ranks sharing another."""
    busy, wall = lockstep(sp, plan.backend, plan.threads)(np.full(plan.p, load), load / runs)
    return float(busy.max()), wall, wall - float(busy.min())


def bsr(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """Scatterv of A's row bands (ts + (m/p) k tw), Bcast of B (ts + kn tw), gemm on the
    (m/p) x k by k x n stripe (pattern ``stripe``, param p), Gatherv of C's bands (where the
    first rank done waits for the last, ``_in_lockstep``)."""
    p = plan.p
    if p == 1:
        return _local(m, k, n, plan, sp)
    mi = _ceil(m, p)
    dist = _coll(cp, SCATTER, p, WORD * mi * k) + _coll(cp, BCAST, p, WORD * k * n)
    load = 2.0 * mi * k * n * _k3(alone(sp), plan, lookup_size(m, k, n), "stripe", p)
    comp, wall, wait = _in_lockstep(sp, plan, load, 1)
    coll = _coll(cp, "gatherv", p, WORD * mi * n)
    return _result(dist, 0.0, comp, coll + wait, total=dist + wall + coll)


_bsr_phases = bsr    # before ``_new_result`` below: CBSR on one column adds the page faults once


def cbsr(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """Row panels to process column 0 (Scatterv among r), blocks along rows (Scatterv among c,
    after packing the band into blocks when c > 1), Bcast of B; Allgatherv of the blocks along rows (communication);
    c gemms of (m/r) x (k/c) by (k/c) x (n/c) (square at the geometric mean); Gatherv of C.
    On one process column (c = 1) the run is BSR's, op for op, and so is the model."""
    p, r, c = plan.p, plan.r, plan.c
    if p == 1:
        return _local(m, k, n, plan, sp)
    if c == 1:
        return _bsr_phases(m, k, n, plan, sp, cp)
    mi, kj, nj = _ceil(m, r), _ceil(k, c), _ceil(n, c)
    dist = (_coll(cp, SCATTER, r, WORD * mi * k) + (_passes(alone(sp), mi * k) if c > 1 else 0.0)
            + _coll(cp, SCATTER, c, WORD * mi * kj) + _coll(cp, BCAST, p, WORD * k * n))
    comm = _coll(cp, "allgatherv", c, WORD * mi * kj)
    load = c * 2.0 * mi * kj * nj * _k3(alone(sp), plan, lookup_size(mi, kj, nj))
    comp, wall, wait = _in_lockstep(sp, plan, load, 1)          # the c products run back to back
    coll = _coll(cp, "gatherv", p, WORD * mi * nj) + (_passes(sp, m * n) if c > 1 else 0.0)
    return _result(dist, comm, comp, coll + wait, total=dist + comm + wall + coll)


def cannon(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """Scatterv of A's and B's q x q blocks (packed on the root), skew + q - 1 shifts of both
    (2q Sendrecv: 2 sqrt(p) ts + sqrt(p) (mk + kn)/p tw), q block gemms (square at the geometric
    mean of the block), Gatherv of C's blocks (unpacked on the root)."""
    p, q = plan.p, plan.r
    if p == 1:
        return _local(m, k, n, plan, sp)
    mi, kl, nj = _ceil(m, q), _ceil(k, q), _ceil(n, q)
    dist = (_coll(cp, SCATTER, p, WORD * mi * kl) + _coll(cp, SCATTER, p, WORD * kl * nj)
            + _passes(alone(sp), m * k + k * n))
    comm = q * float(np.sum(cp.time("sendrecv", p, np.array([WORD * mi * kl, WORD * kl * nj], float))))
    load = q * 2.0 * mi * kl * nj * _k3(alone(sp), plan, lookup_size(mi, kl, nj))
    comp, wall, wait = _in_lockstep(sp, plan, load, q)          # a shift after each block product
    coll = _coll(cp, "gatherv", p, WORD * mi * nj) + _passes(sp, m * n)
    return _result(dist, comm + wait, comp, coll, total=dist + comm + wall + coll)


def _oriented(m: int, k: int, n: int, plan) -> tuple[int, int, int, int, int]:
    """The product the block-cyclic runs compute for row-major operands: C^T = B^T A^T on c x r."""
    return n, k, m, plan.c, plan.r


def _calibrated(cp: CommParams, name: str, p: int, b: int, *grid: tuple[int, int]) -> float:
    """The probe's SUMMA calibration ``cp.<name>(p, b[, grid])`` (``step_wait``: share of a step's
    compute the ranks wait for the slowest, by the plan's grid, falling back on the probe's skew;
    ``end_wait``: steps of its update the root waits in the gather); 0 for communication
    parameters without it."""
    value = getattr(cp, name, None)
    return max(float(value(p, b, *grid)), 0.0) if value is not None else 0.0


def _root_lead(cp: CommParams, p: int, b: int, area: np.ndarray, step: float) -> float:
    """What the root waits in the gather for ranks that finished their last update after it, where
    some other rank holds a piece of C (``area``, per rank) as large as the root's (so none is
    reliably last): ``cp.end_wait(p, b)`` (the probe's SUMMA calibration runs at equal loads) of
    one step's update ``step`` of the root. Ranks sharing cores run their last updates in turn, so
    the root is not last in about half the runs."""
    if area.size < 2 or area[0] <= 0 or np.count_nonzero(area == area[0]) < 2:
        return 0.0
    return _calibrated(cp, "end_wait", p, b) * step


def _summa_steps(mm: int, kk: int, nn: int, R: int, C: int, b: int, plan, sp: SPLookup,
                 cp: CommParams) -> tuple[float, float, tuple[float, float, float, float], float]:
    """(communication, compute, wait, lag) of SUMMA's ceil(kk/b) steps for X (mm x kk) Y (kk x nn) on R x C:
    bcast_row of the mloc x w X panel among C, bcast_col of the w x nloc Y panel among R (after its
    owner copies it out of the local Y, which the last update evicted: one out-of-cache pass,
    ``movement.cold_copies``), at the probe's times: the panels are huge-page workspace, as the
    probe's buffers, and no rank updates while they travel (the broadcasts are synchronous), so
    nothing is added for moving them inside the loop (``movement.in_loop``); a rank-w update
    (pattern ``rankb``, param b, at the local size sqrt(mloc nloc)). The ranks run their updates in
    lockstep (``contention.lockstep``: each on a fixed core, a step ends when the most loaded core
    is done: ``wall``); ``compute`` is the largest rank's own update time. The broadcasts
    synchronise the ranks each step, so the least loaded rank waits out the difference, or, where
    loads are (nearly) equal, the slowest of ranks doing the same work (``cp.step_wait``: measured
    by the probe's SUMMA calibration runs, by p and b), whichever is larger: ``wait`` = (seconds of
    it in the broadcasts, in the last step, and what the first rank holding a piece of C waits for
    the last in the gather after it, and the root's own wait there for ranks of equal load,
    ``_root_lead``). ``lag`` is what the most loaded rank itself waits (for a core, and for slower
    ranks of equal load): it is on the run's critical path, so the total includes it. With C > 1
    the X-panel's owner multiplies it straight out of its local X, which the last update evicted
    (``movement.cold_reads``), while the receivers have it hot from the broadcast: every step is
    longer by that read, which a rank pays as compute in the 1/C of the steps it owns and waits out
    (in the next broadcast) in the rest."""
    mrows, ncols = _numroc(mm, R, b), _numroc(nn, C, b)
    mloc, nloc = int(mrows[0]), int(ncols[0])
    full, rest = divmod(kk, b)
    widths = np.array([b] * (full > 0) + [rest] * (rest > 0), dtype=float)
    counts = np.array([full] * (full > 0) + [1] * (rest > 0), dtype=float)
    if widths.size == 0:
        return 0.0, 0.0, (0.0, 0.0, 0.0, 0.0), 0.0
    p = R * C
    comm = 0.0
    if C > 1:
        comm += float(np.dot(counts, cp.time("bcast_row", p, WORD * mloc * widths, (R, C))))
    if R > 1:      # the owning row first copies its w x nloc slab of Y into the contiguous panel
        comm += float(np.dot(counts, cp.time("bcast_col", p, WORD * nloc * widths, (R, C))
                             + _cold_copies(sp, nloc * widths)))
    area = (mrows[:, None] * ncols[None, :]).ravel()
    k3 = np.array([_k3(alone(sp), plan, math.sqrt(max(x, 1)), "rankb", b) for x in area])
    alone_s = 2.0 * float(np.dot(counts, widths)) * area * k3
    comp, wall = lockstep(sp, plan.backend, plan.threads)(alone_s, alone_s / float(counts.sum()))
    if C > 1:     # the X-panel owner's cold read: its share of the steps as compute, the rest waited
        owner = float(_cold_reads(sp, mloc * kk))
        comm += owner * (1.0 - 1.0 / C)
        comp, wall = comp + owner / C, wall + owner / C
    top, slack = float(comp.max()), float(comp.max() - comp.min())
    # the loaded rank's wait for slow others, as measured on plans of this grid's orientation
    skew = max(_calibrated(cp, "step_wait", p, b, (plan.r, plan.c)) * top - slack, 0.0)
    lag, idle = wall - top + skew, wall - float(comp.min()) + skew
    last = widths[-1] / float(np.dot(counts, widths))
    held = comp[area > 0]           # ranks with no piece of C send nothing: they do not wait in the gather
    end = (wall - float(held.min(initial=top)) + skew) * last
    lead = _root_lead(cp, p, b, area, top / float(counts.sum()))
    return comm, top, (idle * (1.0 - last), idle * last, end, lead), lag


def summa(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """Scatterv of the block-cyclic operands (packed on the root), per k-panel a row and a column
    broadcast and a rank-b update (``_summa_steps``), Gatherv of C (unpacked on the root)."""
    p, b = plan.p, plan.b
    if p == 1:
        return _local(m, k, n, plan, sp)
    mm, kk, nn, R, C = _oriented(m, k, n, plan)
    dist = (_coll(cp, SCATTER, p, WORD * _moved(mm, kk, R, C, b))
            + _coll(cp, SCATTER, p, WORD * _moved(kk, nn, R, C, b))
            + _pack(alone(sp), cp, mm * kk, _run(mm, R, b)) + _pack(alone(sp), cp, kk * nn, _run(kk, R, b)))
    comm, comp, (idle, _, end, lead), lag = _summa_steps(mm, kk, nn, R, C, b, plan, sp, cp)
    gather = _coll(cp, "gatherv", p, WORD * _moved(mm, nn, R, C, b))
    unpack = _pack(sp, cp, mm * nn, _run(mm, R, b), "put")
    return _result(dist, comm + idle, comp, _gather_after_wait(gather, unpack + lead, end),
                   total=dist + comm + lag + comp + gather + unpack)


def _gather_after_wait(gather: float, unpack: float, end: float) -> float:
    """Collection phase (slowest rank) of a gather that an idle rank enters ``end`` seconds before
    the root: the root receives, then unpacks; the idle rank waits, then its piece moves. The
    unpacking and the wait overlap, so the phase is gather + max(unpack, wait), not their sum."""
    return gather + max(unpack, end)


def strassen_summa(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """StPBLAS (docs/models.md#distributed.strassen_summa, with measured SPs): sizes padded to
    multiples of 2^l; 7^l SUMMA
    leaf products (communication and gemm as ``_summa_steps`` at leaf size); at level i,
    7^(i-1) nodes each sweep their per-rank quadrant pieces (4^(l-i) leaves) with the fused
    passes of the 3-temporary schedule (``models.gemm.ADDS_*``) at ``k2_add`` of that size."""
    p, b, lv = plan.p, plan.b, plan.level
    g = 2 ** lv
    mm, kk, nn, R, C = _oriented(m, k, n, plan)
    ml, kl, nl = _ceil(mm, g), _ceil(kk, g), _ceil(nn, g)
    xm, xk = _numroc0(ml, R, b), _numroc0(kl, C, b)
    yk, yn = _numroc0(kl, R, b), _numroc0(nl, C, b)
    dist = (_coll(cp, SCATTER, p, WORD * g * g * _moved(ml, kl, R, C, b))
            + _coll(cp, SCATTER, p, WORD * g * g * _moved(kl, nl, R, C, b))
            + _pack(alone(sp), cp, g * g * ml * kl, _run(ml, R, b))
            + _pack(alone(sp), cp, g * g * kl * nl, _run(kl, R, b)))
    comm, comp, (idle, last_step, end, lead), lag = _summa_steps(ml, kl, nl, R, C, b, plan, sp, cp)
    scale = 7.0 ** lv           # every leaf product waits out its imbalance (the next one's broadcasts)
    comm, comp, idle, lag = scale * comm, scale * comp, scale * (idle + last_step) - last_step, scale * lag
    for i in range(1, lv + 1):
        leaves = 4.0 ** (lv - i)
        ea, eb, ec = leaves * xm * xk, leaves * yk * yn, leaves * xm * yn
        nc = ADDS_C_LEAF if i == lv else ADDS_C_INNER
        size = math.sqrt(max((ADDS_A * ea + ADDS_B * eb + nc * ec) / (ADDS_A + ADDS_B + nc), 1.0))
        k2 = _k2_add(sp, size)
        comp += 7.0 ** (i - 1) * k2 * (ADDS_A * ea + ADDS_B * eb + nc * ec)
    gather = _coll(cp, "gatherv", p, WORD * g * g * _moved(ml, nl, R, C, b))
    unpack = _pack(sp, cp, m * n, _run(ml, R, b), "put")
    return _result(dist, comm + idle, comp, _gather_after_wait(gather, unpack + lead, end),
                   total=dist + comm + lag + comp + gather + unpack)


# Per level-1 product of StMS: root passes to accumulate it into C's quadrants.
MS_ACC_PASSES = (2, 2, 2, 2, 2, 1, 1)


def strassen_ms(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """StMS (docs/models.md#distributed.strassen_ms, generalised): the schedule of the run, simulated.

    Product t goes to worker ``1 + t mod (p-1)``. The root, per product: forms the two operands
    (one pass each over an (m/2) x (k/2) and a (k/2) x (n/2) quadrant), receives that worker's
    previous product if it has one (waiting for it), sends the operands (``pingpong`` per
    message), then accumulates the received product (``MS_ACC_PASSES``); after the first round
    it fixes up odd sizes. A worker multiplies (BLAS, or ``level - 1`` local Strassen levels,
    ``models.gemm``) as soon as its operands arrived. Phases: distribution = the root's forming and
    sending, compute = the busiest worker's products plus the root's fix-ups, collection = the
    root's receiving and accumulating (waiting excluded); total = the simulated makespan (phases
    overlap, and the root also waits for products).
    """
    p, lv = plan.p, plan.level
    if p == 1:
        t = (blas(m, k, n, plan.backend, plan.threads, sp) if lv == 0 else
             float(strassen_seq(m, k, n, [lv], plan.backend, plan.threads, sp)[0]))
        return _result(compute=t)
    if min(m, k, n) < 2:
        return _local(m, k, n, plan, sp)
    m2, k2, n2 = m // 2, k // 2, n // 2
    workers = p - 1
    form = _passes(sp, m2 * k2) + _passes(sp, k2 * n2)
    send = float(np.sum(cp.time("pingpong", 2, np.array([WORD * m2 * k2, WORD * k2 * n2], float))))
    recv = float(np.asarray(cp.time("pingpong", 2, float(WORD * m2 * n2))))
    prod = (blas(m2, k2, n2, plan.backend, plan.threads, sp) if lv == 1 else
            float(strassen_seq(m2, k2, n2, [lv - 1], plan.backend, plan.threads, sp)[0]))
    acc = [a * _passes(sp, m2 * n2) for a in MS_ACC_PASSES]
    me, ke, ne = 2 * m2, 2 * k2, 2 * n2
    peel_flops = 2.0 * (me * ne * (k - ke) + m * k * (n - ne) + (m - me) * k * ne)
    peel = peel_flops * _k3(sp, plan, lookup_size(m, k, n)) if peel_flops else 0.0
    clock, dist, coll = 0.0, 0.0, 0.0
    done = [0.0] * workers                   # when each worker's current product is ready
    busy = [0.0] * workers
    for task in range(7):
        w = task % workers
        clock += form
        dist += form
        if task >= workers:
            clock = max(clock, done[w]) + recv
            coll += recv
        clock += send
        dist += send
        done[w] = clock + prod
        busy[w] += prod
        if task >= workers:
            clock += acc[task - workers]
            coll += acc[task - workers]
        if task == min(workers, 7) - 1:
            clock += peel
    for task in range(max(0, 7 - workers), 7):
        clock = max(clock, done[task % workers]) + recv + acc[task]
        coll += recv + acc[task]
    return _result(dist, 0.0, max(busy) + peel, coll, total=clock)


def _new_result(model):
    """``model`` plus the page faults of the root's new m x n C (``cp.first_touch_time``),
    first written as it is gathered (or accumulated, strassen_ms): collection and total, p > 1."""
    @functools.wraps(model)
    def charged(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
        out = model(m, k, n, plan, sp, cp)
        if plan.p > 1:
            faults = first_touch(cp, WORD * m * n)
            out["collection"] += faults
            out["total"] += faults
        return out
    return charged


bsr, cbsr, cannon, summa, strassen_summa, strassen_ms = (
    _new_result(f) for f in (bsr, cbsr, cannon, summa, strassen_summa, strassen_ms))
MODELS = {"bsr": bsr, "cbsr": cbsr, "cannon": cannon, "summa": summa,
          "strassen_summa": strassen_summa, "strassen_ms": strassen_ms}
# The models place the waits of ranks that compute faster than the slowest themselves (BSR and CBSR
# in the gather after their one product, Cannon in the shift after each block product, SUMMA in
# its broadcasts: ``contention.lockstep``); StMS's workers take tasks as they come free. No phase
# for the selector to add a wait to (``select.distributed``).
WAIT_PHASE: dict[str, str] = {}


def predict(m: int, k: int, n: int, plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """The model of ``plan.algorithm``; ValueError for a plan its algorithm cannot run."""
    problem = plan_error(plan)
    if problem:
        raise ValueError(problem)
    return MODELS[plan.algorithm](m, k, n, plan, sp, cp)
