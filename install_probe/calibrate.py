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
- ``step_waits``: what SUMMA's ranks wait in its per-step broadcasts for the slowest rank's update,
  as a share of the step's compute, by p and block b: SUMMA plans on the first p ranks at equal
  loads, measured communication minus the model's messages (no wait), over the model's compute.
  The probe's ``compute_skew`` (the same update timed on its own) measured 1.4% here where the
  runs waited 2-3% at b >= 128 and 5-6% at b = 64 (session 21, n = 1024..2560); the isolated
  timing does not reproduce the runs' own buffers and loop. The share itself moves between
  probes (p = 2, b = 64: 1.9-7.8% in five probes of session 22), as the runs' waits do.

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
STEP_BLOCKS = (64, 128, 256, 512)   # SUMMA blocks the step waits are measured at
STEP_N = 1536                       # about the order of those runs (raised to equal loads on p ranks)
STEP_REPS = 9                       # runs of ~0.1 s: 8 plans take ~8 s on 2 ranks here


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


class _NoWait:
    """Communication parameters whose ranks never wait for each other (``step_wait`` 0)."""

    def __init__(self, cp):
        self.cp = cp

    def step_wait(self, p: int, b: int) -> float:
        return 0.0

    def __getattr__(self, name):
        return getattr(self.cp, name)


def _residuals(world, db_path, cases, reps: int, wait: bool = True) -> list[dict[str, float]] | None:
    """Measured minus modelled seconds per phase of each ``(family, plan, n)`` in ``cases`` (run in
    turn on the first ranks), on rank 0; [] on the others; None on every rank without BLAS
    records the models can use (then nothing is run). Each entry also carries the model's
    ``compute`` as ``model_compute``; ``wait=False`` models ranks that never wait for each other
    (``step_waits``)."""
    from autotune.db import load_sp
    from autotune.db.comm import load_comm
    from autotune.db.store import DatabaseError
    from autotune.select.distributed import predict

    models = None
    if world.rank == 0:
        try:
            sp, cp = load_sp(db_path), load_comm(db_path, nprocs=world.size)
            cp = cp if wait else _NoWait(cp)
            if sp.has("gemm", PLAN.backend, PLAN.threads, "panel"):
                models = [predict(fam, (n,) if fam == "cholesky" else (n,) * 3, plan, sp, cp, fitted=False)
                          for fam, plan, n in cases]
        except (DatabaseError, LookupError, OSError, ValueError):
            models = None
    if not world.bcast(models is not None, root=0):       # nothing to compare with: measure nothing
        return None
    measured = [_measured_phases(world, fam, plan, n, reps) for fam, plan, n in cases]
    if world.rank != 0:
        return []
    return [{**{ph: meas[ph] - model[ph] for ph in meas}, "model_compute": model["compute"]}
            for meas, model in zip(measured, models, strict=True)]


def loop_overhead(world, db_path, reps: int = REPS) -> float | None:
    """Seconds per panel step (>= 0) on rank 0, None elsewhere or without the database's BLAS
    records. Collective over ``world``."""
    res = _residuals(world, db_path, [("cholesky", PLAN, N)], reps)
    return max(res[0]["communication"], 0.0) / -(-N // BLOCK) if res else None


def call_overheads(world, db_path, reps: int = REPS) -> dict[str, dict[str, float]] | None:
    """``{algorithm: {phase: seconds}}`` (>= 0) of ``CALL_PLANS`` on rank 0, None elsewhere or
    without the database's BLAS records. Collective over ``world``."""
    res = _residuals(world, db_path, [(fam, plan, CALL_N) for fam, plan in CALL_PLANS], reps)
    if not res:
        return None
    return {plan.algorithm: {ph: max(r[ph], 0.0) for ph in CALL_PHASES}
            for (_, plan), r in zip(CALL_PLANS, res, strict=True)}


def step_n(p: int, blocks=STEP_BLOCKS, target: int = STEP_N) -> int:
    """The order, near ``target``, at which every block of ``blocks`` gives p ranks equal loads."""
    step = p * max(blocks)
    return step * max(1, round(target / step))


def step_waits(world, db_path, reps: int = STEP_REPS, blocks=STEP_BLOCKS, target: int = STEP_N) -> dict | None:
    """``{"p": [2..P], "b": blocks, "wait": [[share per b] per p]}`` (>= 0) on rank 0: SUMMA on the
    first p ranks, grids 1 x p and p x 1 (their mean), order ``step_n(p, blocks, target)``; None
    elsewhere or without the database's BLAS records. Collective over ``world``."""
    out: dict[str, list] = {"p": [], "b": [int(b) for b in blocks], "wait": []}
    for p in range(2, world.size + 1):
        order = step_n(p, blocks, target)
        cases = [("gemm", Plan("summa", p, r, c, b=int(b), threads=1), order)
                 for b in blocks for r, c in ((1, p), (p, 1))]
        res = _residuals(world, db_path, cases, reps, wait=False)
        if res is None:                 # every rank: no BLAS records
            return None
        if not res:                     # not rank 0
            continue
        share = [max(r["communication"], 0.0) / r["model_compute"] if r["model_compute"] > 0 else 0.0 for r in res]
        out["p"].append(p)
        out["wait"].append(np.mean(np.reshape(share, (len(blocks), 2)), axis=1).tolist())
    return out if world.rank == 0 else None


__all__ = ["call_overheads", "loop_overhead", "step_n", "step_waits"]
