"""Compute contention probe (collective, under mpiexec): one-thread dgemm on p = 1..P ranks at once.

Each group of p ranks runs the same products simultaneously (a barrier before every call); the
time of a call is the slowest rank's. Two access patterns: square products (compute-bound) and
the rank-b updates of SUMMA and the parallel Cholesky (x-by-b times b-by-x into an x-by-x C:
bandwidth-bound, so concurrent ranks slow each other more). Stored with
``autotune.db.contention.save_contention``. The same concurrent timings give the ranks' spread on
equal work (``compute_skew``), which the comm probe stores with its platform.
"""
from __future__ import annotations

import time

import numpy as np

SIZES = (256, 512, 1024, 2048)
RANKB_SIZES = (1024, 2048, 4096)
RANKB_BLOCK = 256
REPS = 3


SKEW_SHAPES = ((1024, 64), (1024, 128), (1536, 256))   # (x, b) rank-b updates, as in SUMMA's steps
SKEW_REPS = 50


def _concurrent_times(comm, n: int, k: int, reps: int) -> np.ndarray:
    """Every rank's time of the same one-thread n x k by k x n dgemm, all started together (a
    barrier before each): shape (reps, ranks)."""
    rng = np.random.default_rng(comm.rank)
    a, b = rng.standard_normal((n, k)), rng.standard_normal((k, n))
    c = np.empty((n, n))
    np.matmul(a, b, out=c)
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(comm.allgather(time.perf_counter() - t0))
    return np.array(times)


def _time_gemm(comm, n: int, reps: int, k: int | None = None) -> float:
    """Median over reps of the slowest rank's one-thread dgemm time: n x k by k x n (k = n: square)."""
    return float(np.median(_concurrent_times(comm, n, n if k is None else k, reps).max(axis=1)))


def compute_skew(world, shapes=SKEW_SHAPES, reps: int = SKEW_REPS) -> float:
    """Mean relative spread, (slowest - fastest rank) / their mean, of the same one-thread rank-b
    update started on every rank at once: the share of a step's compute that ranks a broadcast
    synchronises wait for the slowest (SUMMA). The mean, not the median: a loop of many steps
    pays the tail. Collective; every rank returns the value."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, "blas"):
        t = np.concatenate([_concurrent_times(world, n, b, reps) for n, b in shapes])
    return float(np.mean((t.max(axis=1) - t.min(axis=1)) / t.mean(axis=1)))


def run_contention(world, db_path, key: str, sizes=SIZES, reps: int = REPS) -> list[tuple[int, int, float]]:
    """Measure p = 1..P (collective over ``world``); rank 0 stores and returns the square rows."""
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    from autotune.distributed.collective import quiet_barrier

    rows = []
    with threadpool_limits(1):
        for p in range(1, world.size + 1):
            sub = world.Split(0 if world.rank < p else MPI.UNDEFINED, world.rank)
            if sub != MPI.COMM_NULL:
                rows += [(p, n, "square", _time_gemm(sub, n, reps)) for n in sizes]
                rows += [(p, n, "rankb", _time_gemm(sub, n, reps, RANKB_BLOCK)) for n in RANKB_SIZES]
                sub.Free()
            # Ranks outside the group wait without polling: two ranks spinning in a blocking
            # barrier took cores from the computing pair on the 4-on-2 platform (p = 2 measured
            # 1.8x slower in one probe, 1.2x in another), which the distributed runs do not see.
            quiet_barrier(world)
    if world.rank == 0:
        from autotune.db.contention import save_contention

        p, n, pattern, t = zip(*rows, strict=True)
        save_contention(db_path, key, p, n, t, {"routine": "gemm", "threads_per_rank": 1,
                                                "rankb_block": RANKB_BLOCK}, pattern=pattern)
        return [(q, m, x) for q, m, pat, x in rows if pat == "square"]
    return []
