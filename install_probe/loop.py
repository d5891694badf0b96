"""Per-panel overhead of the distributed Cholesky's loop (collective, under mpiexec).

What one step of the loop costs beyond the messages and BLAS calls the model counts (posting and
completing its requests, the step's Python bookkeeping): the first two ranks factor a small
matrix with many panels, and the measured communication phase minus the model's (without this
term), per panel, is stored with the platform as ``loop_overhead``; the model charges it on every
rank each step. As the one-process probe's "dispatch" pattern: a whole run of the implementation
minus what the models already count. Measured here 10-20 us per panel, which kept the model's
communication 12-16% low at b = 64..128 (n = 1024..2560, session 20).
"""
from __future__ import annotations

import numpy as np

from autotune.distributed.plan import Phases, Plan

N, BLOCK, REPS = 512, 16, 25   # 32 panels; a run takes ~3 ms here, the median of 25 is stable
PLAN = Plan("cholesky", 2, 1, 2, b=BLOCK, threads=1)


def _measured_communication(world, reps: int) -> float | None:
    """Median over runs of the communication phase (slowest of the two ranks) of PLAN on an N x N
    matrix; None on the ranks outside the pair. The others wait without taking a core."""
    from autotune.install_probe.operands import spd_matrix
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    from autotune.distributed.api import distributed_cholesky
    from autotune.distributed.collective import quiet_barrier

    sub = world.Split(0 if world.rank < PLAN.p else MPI.UNDEFINED, world.rank)
    out = None
    if sub != MPI.COMM_NULL:
        a = spd_matrix(np.random.default_rng(0), N, order="C") if sub.rank == 0 else None
        runs = []
        with threadpool_limits(PLAN.threads):
            for _ in range(reps + 1):                   # the first run warms up
                phases = Phases()
                sub.Barrier()
                distributed_cholesky(a, sub, config=PLAN, phases=phases)
                runs.append(sub.allreduce(phases.seconds.get("communication", 0.0), op=MPI.MAX))
        out = float(np.median(runs[1:]))
        sub.Free()
    quiet_barrier(world, poll_seconds=0.0005)
    return out


def loop_overhead(world, db_path, reps: int = REPS) -> float | None:
    """Seconds per panel step (>= 0) on rank 0, None elsewhere or without the database's BLAS
    records (the model needs them). Collective over ``world``."""
    measured = _measured_communication(world, reps)
    if world.rank != 0:
        return None
    from autotune.db import load_sp
    from autotune.db.comm import load_comm
    from autotune.db.store import DatabaseError
    from autotune.select.distributed import predict

    try:
        sp, cp = load_sp(db_path), load_comm(db_path, nprocs=world.size)
        if not sp.has("gemm", PLAN.backend, PLAN.threads, "panel"):
            return None
        model = predict("cholesky", (N,), PLAN, sp, cp, fitted=False)["communication"]
    except (DatabaseError, LookupError, OSError, ValueError):
        return None
    return max(measured - model, 0.0) / -(-N // BLOCK)


__all__ = ["loop_overhead"]
