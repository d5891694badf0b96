"""Compute contention probe (collective, under mpiexec): one-thread dgemm on p = 1..P ranks at once.

Each group of p ranks runs the same products simultaneously (a barrier before every call), in
rounds that run every group size in turn; the time of a call is the mean of its ranks' (their
spread is ``compute_skew``). Two access patterns: square products (compute-bound) and
the rank-b updates of SUMMA and the parallel Cholesky (x-by-b times b-by-x into an x-by-x C:
bandwidth-bound, so concurrent ranks slow each other more). Stored with
``autotune.db.contention.save_contention``. Measured in passes minutes apart (with the comm
profile's ``passes`` > 1: one before the comm probe's own measurements, one or two after) and
combined by the lower median (``combine_passes``), as the comm probe keeps its points: one pass
can catch the machine in a slow state. The same concurrent timings give the ranks' spread on
equal work (``compute_skew``), which the comm probe stores with its platform.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.db.contention import save_contention, series

SIZES = (256, 512, 1024, 2048)
RANKB_SIZES = (1024, 2048, 4096)
RANKB_BLOCK = 256
REPS = 5


SKEW_SHAPES = ((1024, 64), (1024, 128), (1536, 256))   # (x, b) rank-b updates, as in SUMMA's steps
SKEW_REPS = 50


@dataclass(frozen=True)
class ContentionPlan:
    """What the contention phase times (the comm profile's ``contention``): the square products'
    ``sizes``, the rank-b updates' ``rankb_sizes``, ``reps`` rounds of each, and ``skew_reps``
    concurrent calls per shape for ``compute_skew``. A tiny profile keeps them small."""

    sizes: tuple[int, ...] = SIZES
    rankb_sizes: tuple[int, ...] = RANKB_SIZES
    reps: int = REPS
    skew_reps: int = SKEW_REPS


def _update(rank: int, pattern: str, n: int, k: int) -> Callable[[int], object]:
    """This rank's one-thread dgemm of ``pattern`` (``square`` n x n, ``rankb`` n x k by k x n),
    built as the BLAS probe builds it (``operands.build``: a rank-b update accumulates into C as
    SUMMA's steps do), run once (warm)."""
    from autotune.backends import get

    from .operands import build

    run = build(get("numpy-openblas"), "gemm", pattern, n, k, np.random.default_rng(rank)).run
    run(1)
    return run


def _concurrent_times(comm: MPI.Comm, n: int, k: int, reps: int) -> np.ndarray:
    """Every rank's time of the same one-thread rank-k update of an n x n C, all started together
    (a barrier before each): shape (reps, ranks)."""
    run = _update(comm.rank, "rankb", n, k)
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        run(1)
        times.append(comm.allgather(time.perf_counter() - t0))
    return np.array(times)


SPEED_N = 512          # order of the one-thread dgemm each rank times alone for its processor's speed
SPEED_SECONDS = 1.0    # how long: ten scheduler periods, so a CPU quota shows (a burst would not)


def host_speeds(world, n: int = SPEED_N, seconds: float = SPEED_SECONDS) -> dict[str, float]:
    """GFLOP/s of one-thread n x n dgemms run back to back for ``seconds`` per host (its fastest
    rank), each rank alone in turn while the others wait without spinning: the relative speeds of
    the platform's processors (001 §5.3); a host capped to half a core measures half. Collective;
    every rank gets it."""
    from mpi4py import MPI

    from autotune.distributed.collective import quiet_barrier

    run = _update(world.rank, "square", n, 0)
    mine = 0.0
    for turn in range(world.size):
        if turn == world.rank:
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                run(1)
                calls += 1
            mine = 2.0 * n**3 * calls / (time.perf_counter() - t0) / 1e9
        quiet_barrier(world)
    out: dict[str, float] = {}
    for host, speed in world.allgather((MPI.Get_processor_name(), mine)):
        out[host] = max(out.get(host, 0.0), speed)
    return out


def compute_skew(world, shapes=SKEW_SHAPES, reps: int = SKEW_REPS) -> float:
    """Mean relative spread, (slowest - fastest rank) / their mean, of the same one-thread rank-b
    update started on every rank at once: the share of a step's compute that ranks a broadcast
    synchronises wait for the slowest (SUMMA). The mean, not the median: a loop of many steps
    pays the tail. Collective; every rank returns the value."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, "blas"):
        t = np.concatenate([_concurrent_times(world, n, b, reps) for n, b in shapes])
    return float(np.mean((t.max(axis=1) - t.min(axis=1)) / t.mean(axis=1)))


def compute_skews(world, shapes=SKEW_SHAPES, reps: int = SKEW_REPS, procs=None) -> dict[str, list]:
    """``compute_skew`` of the first p ranks for p = 2..P (or ``procs``, the comm profile's sample),
    ``{"p": [...], "skew": [...]}`` on every rank: a plan on p ranks waits for the spread of p
    ranks, not of all P (on an oversubscribed node the whole platform time-shares, while fewer
    ranks may not). Ranks outside a group wait without taking a core from it."""
    from autotune.distributed.collective import first_ranks

    out: dict[str, list] = {"p": [], "skew": []}
    for p in _group_sizes(world, procs, 2):
        with first_ranks(world, p) as sub:
            value = None if sub is None else compute_skew(sub, shapes, reps)
        out["p"].append(p)
        out["skew"].append(world.bcast(value, root=0))
    return out


STATS = ("mean", "max", "min")      # over a group's ranks: the models' k (mean), slowest and fastest


def _interleaved(world, groups, n: int, k: int, reps: int, pattern: str = "square") -> dict[int, dict[str, float]]:
    """Rank 0's solo time times the slowdown of each group size p (``groups``: p -> its
    communicator, None off it) on one one-thread n x k by k x n dgemm, per statistic of the
    group's ranks (``STATS``): rounds running p = 1..P in turn, each round's statistic over rank
    0's solo time, median over rounds. Interleaved so that the clock drift between probe phases
    cancels. The slowest and fastest differ most where ranks outnumber cores: the
    scheduler gives some ranks a core of their own and makes others share one."""
    from autotune.distributed.collective import quiet_barrier

    run = _update(world.rank, pattern, n, k)
    mine: dict[int, list[np.ndarray]] = {p: [] for p in groups}
    for _ in range(reps):
        for p, sub in groups.items():
            if sub is not None:
                sub.Barrier()
                t0 = time.perf_counter()
                run(1)
                t = np.array(sub.allgather(time.perf_counter() - t0))
                mine[p].append(np.array([getattr(t, stat)() for stat in STATS]))
            # Ranks outside the group wait without polling: two ranks spinning in a blocking
            # barrier take cores from the computing ranks when ranks outnumber cores, which the
            # distributed runs do not see.
            quiet_barrier(world, poll_seconds=0.0005)
    if world.rank != 0:
        return {}
    solo = np.array(mine[1])[:, 0]
    return {p: dict(zip(STATS, (np.median(solo) * np.median(np.array(t) / solo[:, None], axis=0)).tolist(),
                        strict=True))
            for p, t in mine.items()}


def _group_sizes(world, procs, low: int) -> list[int]:
    """The group sizes a phase measures: ``low``..P, or those of ``procs`` (and ``low``) within it."""
    if procs is None:
        return list(range(low, world.size + 1))
    return sorted({low, *(int(p) for p in procs)} & set(range(low, world.size + 1)))


def measure_contention(world, plan: ContentionPlan = ContentionPlan(), procs=None) -> list[tuple[int, int, str, float]]:
    """One pass over p = 1..P, or 1 and ``procs`` (the comm profile's sample; collective over
    ``world``): rank 0's rows (p, n, series, seconds), per pattern and statistic
    (``autotune.db.contention.series``), the solo time times the slowdown; [] on the other ranks."""
    from threadpoolctl import threadpool_limits

    from autotune.distributed.collective import split_first

    groups = {p: split_first(world, p) for p in _group_sizes(world, procs, 1)}
    rows = []
    try:
        with threadpool_limits(1):
            for pattern, n, k in ([("square", n, n) for n in plan.sizes]
                                  + [("rankb", n, RANKB_BLOCK) for n in plan.rankb_sizes]):
                times = _interleaved(world, groups, n, k, plan.reps, pattern)
                rows += [(p, n, series(pattern, stat), t) for p, ts in times.items() for stat, t in ts.items()]
    finally:
        for sub in groups.values():
            if sub is not None:
                sub.Free()
    return rows


def combine_passes(passes: list[list[tuple[int, int, str, float]]]) -> list[tuple[int, int, str, float]]:
    """Rows of several passes as one: per (series, n), the lower median of the passes' solo times
    and of each p's slowdown over its pass's solo time (``timing.lower_median``). A pass in a slow
    state of the machine is outvoted."""
    from .timing import lower_median

    by_pass = [{(p, n, name): t for p, n, name, t in rows} for rows in passes if rows]
    if not by_pass:
        return []
    out = []
    for p, n, name in sorted(by_pass[0]):
        both = [(rows[1, n, name], rows[p, n, name]) for rows in by_pass if (p, n, name) in rows]
        solo = lower_median([s for s, _ in both], key=float)
        out.append((p, n, name, solo * lower_median([t / s for s, t in both], key=float)))
    return out


def run_contention(world, db_path, key: str, plan: ContentionPlan = ContentionPlan(), *, passes: int = 2,
                   earlier: list | None = None, procs=None) -> list[tuple[int, int, float]]:
    """Measure p = 1..P ``passes`` times (collective over ``world``), combine them with the
    ``earlier`` passes' rows (``combine_passes``: the comm probe takes one before its own
    measurements, so the passes lie minutes apart); rank 0 stores the rows (per pattern and
    statistic, p, n: the solo time times the slowdown) and returns the square products' mean ones."""
    fresh = [measure_contention(world, plan, procs) for _ in range(passes)]
    if world.rank == 0:
        rows = combine_passes([*(earlier or []), *fresh])
        p, n, pattern, t = zip(*rows, strict=True)
        info = {"routine": "gemm", "threads_per_rank": 1, "rankb_block": RANKB_BLOCK,
                "passes": len(earlier or []) + passes,
                "statistic": "pattern: the ranks' mean; pattern:max, pattern:min: the slowest, fastest"}
        save_contention(db_path, key, p, n, t, info, pattern=pattern)
        return [(q, m, x) for q, m, pat, x in rows if pat == "square"]     # the square products' mean
    return []
