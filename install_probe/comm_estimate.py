"""How long a comm probe profile takes on P ranks, before it runs (printed by autotune-install,
``autotune bench comm-plan``)."""
from __future__ import annotations

from autotune.install_probe import phase_calibration as phcal

from autotune.db import comm as dbc

from .comm_ops import SINGLE_CALL, footprint, last_level_cache_bytes
from .comm_profile import COLD, GROUP, PAIR, CommProfile, CommTiming
from .comm_root import PACK_RUNS

EST_START_SECONDS = 10.0        # mpiexec, the ranks' imports, MPI set-up, the fits and writes
EST_POINT_SECONDS = 0.012       # a point's own cost (barriers, reductions, bookkeeping), a core per rank
EST_LATENCY = 5e-6              # seconds per message ...
EST_BANDWIDTH = 3e9             # ... and bytes per second each rank moves
EST_FLUSH_BANDWIDTH = 8e9       # bytes per second of a cache flush's sweep
EST_GEMM_FLOPS = 2.5e10         # one-thread dgemm where no BLAS record gives this machine's rate
EST_REPS = 2                    # repetitions a point takes, in multiples of min_reps (capped at max_reps)
EST_RANGE = (0.75, 1.5)         # the printed range around the estimate


def estimate_seconds(profile: CommProfile, nprocs: int, cores: int, gemm_flops: float | None = None
                     ) -> tuple[float, float]:
    """(low, high) wall seconds of the whole ``--mpi`` run of ``profile`` on ``nprocs`` ranks over
    ``cores`` cores: its points, passes and fixed steps (contention, root costs, calibrations, the
    phase calibration's plans) at rough rates, slowed by ranks sharing cores. An estimate: other
    programs slow every step."""
    rate = gemm_flops or EST_GEMM_FLOPS
    total = (EST_START_SECONDS + _points_seconds(profile, nprocs, cores)
             + _compute_seconds(profile, nprocs, cores, rate) + _root_seconds(profile)
             + phcal.estimate_seconds(profile.phase_calibration, nprocs, cores, rate))
    return EST_RANGE[0] * total, EST_RANGE[1] * total


def plan_curves(profile: CommProfile, nprocs: int) -> list[tuple[str, int, tuple[int, ...]]]:
    """(primitive, p, sizes) of every curve one pass measures (as ``_Run.sweep`` walks them)."""
    out = []
    for p in profile.p_values(nprocs):
        prims = [x for x in profile.primitives if x in GROUP or (p == 2 and x in PAIR)]
        out += [(x, p, profile.sizes_for(x)) for x in prims]
    for r, c in profile.grid_values(nprocs):
        out += [(x, r * c, profile.sizes_for(x)) for x in ("bcast_row", "bcast_col")
                if x in profile.primitives and (c if x == "bcast_row" else r) >= 2]
    return [(x, p, tuple(m for m in sizes if footprint(x, p, m) <= profile.max_buffer_bytes))
            for x, p, sizes in out]


def count_points(profile: CommProfile, nprocs: int) -> dict[str, int]:
    """What ``profile`` times on ``nprocs`` ranks: process counts, grids, curves and points
    (primitive x p x grid x size) of one pass, and the timings of all its passes."""
    curves = plan_curves(profile, nprocs)
    points = sum(len(sizes) for _, _, sizes in curves)
    return {"p": len(profile.p_values(nprocs)), "grids": len(profile.grid_values(nprocs)), "curves": len(curves),
            "points": points, "timed": sum(len(sizes) * profile.rounds(x) for x, _, sizes in curves)}


def points_seconds(profile: CommProfile, nprocs: int, cores: int) -> float:
    """Estimated wall seconds of the probe's points alone (every pass, PRTT series included)."""
    return _points_seconds(profile, nprocs, cores)


def _share(p: int, cores: int) -> float:
    """How much slower p busy ranks run on ``cores`` cores than on a core each."""
    return max(1.0, p / max(cores, 1))


def _flush_seconds() -> float:
    return 8 * last_level_cache_bytes() / EST_FLUSH_BANDWIDTH     # read and write 4x the cache


def _point_seconds(t: CommTiming, t_op: float, single: bool, per_rep: float = 0.0) -> float:
    """One point: warm-up, then repetitions until the estimate's count or the budget."""
    short = t_op < t.rewarm_below_seconds          # warmed and re-warmed in full (see time_point)
    rep = (t.rewarm if short else 0) * t_op + (t_op if single else max(t.min_sample_seconds, t_op)) + per_rep
    reps = min(t.max_reps, EST_REPS * t.min_reps)
    warm = (t.warmup if short else 1) * t_op + t.warmup_seconds
    return EST_POINT_SECONDS + warm + min(max(t.point_budget_seconds, 2 * rep), reps * rep)


def _points_seconds(profile: CommProfile, nprocs: int, cores: int) -> float:
    """Every pass's points and PRTT series."""
    t, flush, total = profile.timing, _flush_seconds(), 0.0
    for prim, p, sizes in plan_curves(profile, nprocs):
        single = dbc.base_primitive(prim) in SINGLE_CALL
        cold = flush if prim in COLD else 0.0
        for m in sizes:
            t_op = EST_LATENCY + footprint(prim, p, m) / 2 / EST_BANDWIDTH
            total += profile.rounds(prim) * _share(p, cores) * _point_seconds(t, t_op, single, cold)
    if profile.loggp and 2 in profile.p_values(nprocs):
        n = profile.loggp_messages
        for m in (m for m in profile.sizes if m <= profile.loggp_max_bytes):
            t_op = EST_LATENCY + m / EST_BANDWIDTH
            total += profile.passes * sum(_point_seconds(t, k * t_op, False) for k in (2, n + 1, 2 * n + 1))
    return total


def _compute_seconds(profile: CommProfile, nprocs: int, cores: int, rate: float) -> float:
    """The dgemm-bound steps: contention passes, compute skews and the calibration runs."""
    from autotune.install_probe import calibrate as cal
    from autotune.install_probe import contention as con

    plan = profile.contention
    cases = [2.0 * n ** 3 for n in plan.sizes] + [2.0 * n * n * con.RANKB_BLOCK for n in plan.rankb_sizes]
    procs = profile.p_values(nprocs)         # the contention, skews and step waits run on the probe's p
    shares = sum(_share(p, cores) for p in {1, *procs})
    contention = profile.contention_rounds * plan.reps * sum(cases) * shares
    skew = plan.skew_reps * sum(2.0 * n * n * b for n, b in con.SKEW_SHAPES) * (shares - 1)
    loop = (cal.REPS + 1) * sum(n ** 3 / 3 for n, _ in profile.loop_cases)   # two ranks: half each, plus messages
    steps = sum((cal.STEP_REPS + 1) * 2 * len(profile.step_blocks)
                * 2.0 * cal.step_n(p, profile.step_blocks, profile.step_order) ** 3 / p * _share(p, cores)
                for p in procs)
    return (contention + skew + loop + steps) / rate


def _root_seconds(profile: CommProfile) -> float:
    """Rank 0's own costs: first touch, packing and the finiteness check, each behind cache flushes."""
    flush = _flush_seconds()
    reps = profile.root_reps
    touch = (reps or 5) * sum(2 * flush + 2 * m / EST_BANDWIDTH for m in profile.first_touch_sizes)
    pack = (len(PACK_RUNS) + 1) * ((reps or 7) + 1) * (2 * flush + 16 * profile.pack_order ** 2 / EST_BANDWIDTH)
    check = 4 * ((reps or 3) + 1) * sum(flush + 8 * n * n / EST_BANDWIDTH for n in profile.check_sides)
    return touch + pack + check
