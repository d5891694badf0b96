"""Calibration runs of the distributed routines (collective, under mpiexec): what a run of the
implementation costs beyond what its models count, stored with the MPI platform.

- ``loop_overhead``: one step of the distributed Cholesky's loop beyond the messages and BLAS
  calls the model counts (posting and completing its requests, the step's Python bookkeeping).
  The first two ranks factor a small matrix with many panels; the measured communication phase
  minus the model's (without this term), per panel. The model charges it on every rank each step.
  Measured here 10-20 us per panel, which kept the model's communication 12-16% low at
  b = 64..128 (n = 1024..2560, session 20).
- ``call_overhead``: the fixed cost of one distributed call in its distribution and collection
  phases (the verdict's agreement and broadcast, splitting the communicator, building the grid,
  the per-call checks), by algorithm: a tiny problem whose modelled phases are next to nothing,
  measured minus modelled. Missed, it left both families' distribution 0.2-0.6 ms low at every
  size here (session 20). Added to the phases by the selector (``select.distributed``).

As the one-process probe's "dispatch" pattern: a whole run of the implementation minus what the
models already count. Calibrations need the database's BLAS records (the models do).
"""
from __future__ import annotations

import numpy as np

from autotune.distributed.plan import Phases, Plan

N, BLOCK, REPS = 512, 16, 25   # 32 panels; a run takes ~3 ms here, the median of 25 is stable
PLAN = Plan("cholesky", 2, 1, 2, b=BLOCK, threads=1)
# One plan per algorithm on two ranks, and the order of the tiny problem they run.
CALL_PLANS = (("cholesky", Plan("cholesky", 2, 1, 2, b=BLOCK, threads=1)), ("gemm", Plan("bsr", 2, 2, 1)),
              ("gemm", Plan("cbsr", 2, 2, 1)), ("gemm", Plan("summa", 2, 2, 1, b=BLOCK)))
CALL_N = 64
CALL_PHASES = ("distribution", "collection")


def _measured_phases(world, family: str, plan: Plan, n: int, reps: int) -> dict[str, float] | None:
    """Median over runs of each phase (slowest of the plan's ranks) of ``plan`` on an n x n
    problem; None on the ranks outside the plan. The others wait without taking a core."""
    from autotune.install_probe.operands import spd_matrix
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    from autotune.distributed.api import distributed_cholesky, distributed_gemm
    from autotune.distributed.collective import first_ranks
    from autotune.distributed.plan import PHASES

    with first_ranks(world, plan.p) as sub:
        if sub is None:
            return None
        rng = np.random.default_rng(0)
        root = sub.rank == 0
        args = (((rng.standard_normal((n, n)), rng.standard_normal((n, n))) if root else (None, None))
                if family == "gemm" else ((spd_matrix(rng, n, order="C") if root else None),))
        run = distributed_gemm if family == "gemm" else distributed_cholesky
        runs = []
        with threadpool_limits(plan.threads):
            for _ in range(reps + 1):                   # the first run warms up
                phases = Phases()
                sub.Barrier()
                run(*args, sub, config=plan, phases=phases)
                mine = np.array([phases.seconds.get(p, 0.0) for p in PHASES])
                worst = np.empty_like(mine)
                sub.Allreduce(mine, worst, op=MPI.MAX)
                runs.append(worst)
        return dict(zip(PHASES, np.median(np.array(runs[1:]), axis=0).tolist(), strict=True))


def _residuals(world, db_path, cases, reps: int) -> list[dict[str, float]] | None:
    """Measured minus modelled seconds per phase of each ``(family, plan, n)`` in ``cases`` (run in
    turn on the first ranks), on rank 0; None elsewhere or without BLAS records the models can use."""
    from autotune.db import load_sp
    from autotune.db.comm import load_comm
    from autotune.db.store import DatabaseError
    from autotune.select.distributed import predict

    measured = [_measured_phases(world, fam, plan, n, reps) for fam, plan, n in cases]
    if world.rank != 0:
        return None
    try:
        sp, cp = load_sp(db_path), load_comm(db_path, nprocs=world.size)
        if not sp.has("gemm", PLAN.backend, PLAN.threads, "panel"):
            return None
        models = [predict(fam, (n,) if fam == "cholesky" else (n,) * 3, plan, sp, cp, fitted=False)
                  for fam, plan, n in cases]
    except (DatabaseError, LookupError, OSError, ValueError):
        return None
    return [{ph: meas[ph] - model[ph] for ph in meas} for meas, model in zip(measured, models, strict=True)]


def loop_overhead(world, db_path, reps: int = REPS) -> float | None:
    """Seconds per panel step (>= 0) on rank 0, None elsewhere or without the database's BLAS
    records. Collective over ``world``."""
    res = _residuals(world, db_path, [("cholesky", PLAN, N)], reps)
    return None if res is None else max(res[0]["communication"], 0.0) / -(-N // BLOCK)


def call_overheads(world, db_path, reps: int = REPS) -> dict[str, dict[str, float]] | None:
    """``{algorithm: {phase: seconds}}`` (>= 0) of ``CALL_PLANS`` on rank 0, None elsewhere or
    without the database's BLAS records. Collective over ``world``."""
    res = _residuals(world, db_path, [(fam, plan, CALL_N) for fam, plan in CALL_PLANS], reps)
    if res is None:
        return None
    return {plan.algorithm: {ph: max(r[ph], 0.0) for ph in CALL_PHASES}
            for (_, plan), r in zip(CALL_PLANS, res, strict=True)}


__all__ = ["call_overheads", "loop_overhead"]
