"""Calibration runs of the distributed routines (collective, under mpiexec): what a run of the
implementation costs beyond what its models count, stored with the MPI platform.

- ``loop_overhead`` and ``loop_share``: what one panel step of the distributed Cholesky's loop
  costs beyond the messages and BLAS calls the model counts (and ``lu_loop_overhead``,
  ``lu_loop_share`` for the LU's loop, fitted alike to its runs): a fixed cost per panel (posting and
  completing its requests, the step's Python bookkeeping) and an extra per element moved inside
  the loop, as a share of an out-of-cache pass (``movement.in_loop``: the panel copies run while
  the other rank's update holds the memory system). Both fitted together (non-negative least
  squares, relative errors) to the communication phase of runs on two ranks at the blocks the
  selector uses (``LOOP_CASES``), through the model's own response to each (it is piecewise
  linear in them). Fitted together at the selector's blocks because an overhead measured alone at
  one small block, with a fixed share, over-charges the larger blocks.
- ``call_overhead``: the fixed cost of one distributed call in its distribution and collection
  phases (the verdict's agreement and broadcast, splitting the communicator, building the grid,
  the per-call checks), by algorithm: a tiny problem whose modelled phases are next to nothing,
  measured minus modelled; without it every size's distribution is predicted low. Added to the
  phases by the selector (``select.distributed``).
- ``step_waits``: what SUMMA's ranks wait in its per-step broadcasts for the slowest rank's update,
  as a share of the step's compute, by p and block b: SUMMA plans on the first p ranks at equal
  loads, measured communication minus the model's without it (messages, and the waits for a core
  of ranks in lockstep, ``contention.lockstep``), over the model's compute.
  The probe's ``compute_skew`` (the same update timed on its own) under-reads these waits: the
  isolated timing does not reproduce the runs' own buffers and loop. The share moves between
  probes as the runs' waits do, and most where ranks share a core.
  The same runs give ``end``: what SUMMA's root waits in the final gather for ranks of equal load
  that finished their last update after it (collection beyond the model's), in steps' worth of
  its update. Ranks sharing cores run their last updates in turn, so they reach the gather apart.

As the one-process probe's "dispatch" pattern: a whole run of the implementation minus what the
models already count. Calibrations need the database's BLAS records (the models do).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.benchmarks.calls import CALLS
from autotune.core.families import FAMILIES
from autotune.core.plans import PHASES, Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import CommParams, load_comm
from autotune.db.store import DatabaseError
from autotune.distributed.plan import Phases
from autotune.select.distributed import predict

REPS = 25                            # median of 25 runs: stable for runs of a few ms
BLOCK = 16
LOOP_CASES = tuple((n, b) for n in (1024, 2048) for b in (64, 128, 256))   # (order, block)
LOOP_STEPS = {"loop_overhead": 1e-5, "loop_share": 0.5}   # trial values the model's response is read at
# The same per family: the names the fitted values are stored (and read by the models) under.
LOOP_NAMES = {"cholesky": ("loop_overhead", "loop_share"), "lu": ("lu_loop_overhead", "lu_loop_share")}
PLAN = Plan("cholesky", 2, 1, 2, b=BLOCK, threads=1)   # the loop costs' runs (their blocks) and call overhead
# One plan per algorithm on two ranks, and the order of the tiny problem they run.
CALL_PLANS = (("cholesky", PLAN), ("lu", Plan("lu", 2, 1, 2, b=BLOCK)), ("gemm", Plan("bsr", 2, 2, 1)),
              ("gemm", Plan("cbsr", 2, 2, 1)), ("gemm", Plan("summa", 2, 2, 1, b=BLOCK)),
              *(("stencil", Plan(s, 2, 2, 1, b=1, backend="numba-stencil"))
                for s in FAMILIES["stencil"].distributed))
CALL_N = 64
CALL_PHASES = ("distribution", "collection")
STEP_BLOCKS = (64, 128, 256, 512)   # SUMMA blocks the step waits are measured at
STEP_N = 1536                       # about the order of those runs (raised to equal loads on p ranks)
STEP_REPS = 9                       # median of 9 runs per plan (each about 0.1 s)


def _measured_phases(world, family: str, plan: Plan, n: int, reps: int) -> dict[str, float] | None:
    """Median over runs of each phase (slowest of the plan's ranks) of ``plan`` on an n x n
    problem; None on the ranks outside the plan. The others wait without taking a core."""
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    from autotune.distributed.collective import first_ranks

    with first_ranks(world, plan.p) as sub:
        if sub is None:
            return None
        rng = np.random.default_rng(0)
        root = sub.rank == 0
        calls, problem = CALLS[family], FAMILIES[family].square(n)
        args = calls.operands(problem, rng) if root else (None,) * calls.count
        runs = []
        with threadpool_limits(plan.threads):
            for _ in range(reps + 1):                   # the first run warms up
                phases = Phases()
                sub.Barrier()
                calls.collective(problem, *args, comm=sub, config=plan, phases=phases)
                mine = np.array([phases.seconds.get(p, 0.0) for p in PHASES])
                worst = np.empty_like(mine)
                sub.Allreduce(mine, worst, op=MPI.MAX)
                runs.append(worst)
        return dict(zip(PHASES, np.median(np.array(runs[1:]), axis=0).tolist(), strict=True))


class _Trial:
    """Communication parameters with some calibrated values replaced by trial ones (a value, or
    for ``step_wait`` the share at every p and b)."""

    def __init__(self, cp: CommParams, **values):
        self.cp, self.values = cp, values

    def step_wait(self, p: int, b: int, grid=None) -> float:
        return self.values["step_wait"] if "step_wait" in self.values else self.cp.step_wait(p, b, grid)

    def end_wait(self, p: int, b: int) -> float:
        return self.values["end_wait"] if "end_wait" in self.values else self.cp.end_wait(p, b)

    def __getattr__(self, name):
        return self.values[name] if name in self.values else getattr(self.cp, name)


def _runs(world, db_path, cases, reps: int, trials=({},)) -> list[tuple[dict, list[dict]]] | None:
    """Each ``(family, plan, n)`` of ``cases`` run in turn on the first ranks: on rank 0 its
    measured phases and the model's phases with each trial's values (``_Trial``) in place of the
    platform's; [] on the others; None on every rank without BLAS records the models can use
    (then nothing is run)."""
    models = None
    if world.rank == 0:
        try:
            sp, cp = load_sp(db_path), load_comm(db_path, nprocs=world.size)
            if sp.has("gemm", PLAN.backend, PLAN.threads, "panel"):
                models = [[predict(FAMILIES[fam].square(n), plan, sp, _Trial(cp, **trial),
                                   fitted=False) for trial in trials] for fam, plan, n in cases]
        except (DatabaseError, LookupError, OSError, ValueError):
            models = None
    if not world.bcast(models is not None, root=0):       # nothing to compare with: measure nothing
        return None
    measured = [_measured_phases(world, fam, plan, n, reps) for fam, plan, n in cases]
    return list(zip(measured, models, strict=True)) if world.rank == 0 else []


def loop_costs(world, db_path, reps: int = REPS, cases=LOOP_CASES, family: str = "cholesky") -> dict[str, float] | None:
    """The loop's costs of ``family`` (the Cholesky's or the LU's, names in ``LOOP_NAMES``: seconds
    per panel, per element moved) >= 0 on rank 0, fitted to its runs ``cases`` ((order, block)
    pairs on two ranks, one process row); None elsewhere or without the database's BLAS records.
    Collective over ``world``."""
    names = LOOP_NAMES[family]
    steps = dict(zip(names, LOOP_STEPS.values(), strict=True))
    zero = dict.fromkeys(names, 0.0)
    trials = [zero] + [{**zero, name: step} for name, step in steps.items()]
    plan = replace(PLAN, algorithm=family)
    runs = _runs(world, db_path, [(family, replace(plan, b=b), n) for n, b in cases], reps, trials)
    if not runs:
        return None
    fit = fit_loop_costs(np.array([m["communication"] for m, _ in runs]),
                         np.array([[t["communication"] for t in ts] for _, ts in runs]))
    return dict(zip(names, fit.values(), strict=True))


def fit_loop_costs(measured: np.ndarray, models: np.ndarray) -> dict[str, float]:
    """The ``LOOP_STEPS`` values (>= 0) that bring the model's communication closest to the
    ``measured`` one in relative terms; ``models[i]``: the model of run i with all of them 0,
    then with each set to its trial step in turn (the model is linear in them between kinks)."""
    from scipy.optimize import nnls

    response = (models[:, 1:] - models[:, :1]) / np.array(list(LOOP_STEPS.values()))
    weight = 1.0 / np.maximum(measured, 1e-9)
    fit, _ = nnls(response * weight[:, None], (measured - models[:, 0]) * weight)
    return dict(zip(LOOP_STEPS, fit.tolist(), strict=True))


def call_overheads(world, db_path, reps: int = REPS) -> dict[str, dict[str, float]] | None:
    """``{algorithm: {phase: seconds}}`` (>= 0) of ``CALL_PLANS`` on rank 0, None elsewhere or
    without the database's BLAS records. Collective over ``world``."""
    runs = _runs(world, db_path, [(fam, plan, CALL_N) for fam, plan in CALL_PLANS], reps)
    if not runs:
        return None
    return {plan.algorithm: {ph: max(meas[ph] - model[ph], 0.0) for ph in CALL_PHASES}
            for (_, plan), (meas, (model,)) in zip(CALL_PLANS, runs, strict=True)}


def step_n(p: int, blocks=STEP_BLOCKS, target: int = STEP_N) -> int:
    """The order, near ``target``, at which every block of ``blocks`` gives p ranks equal loads."""
    step = p * max(blocks)
    return step * max(1, round(target / step))


def step_waits(world, db_path, reps: int = STEP_REPS, blocks=STEP_BLOCKS, target: int = STEP_N,
               procs=None) -> dict | None:
    """``{"p": [2..P], "b": blocks, "wait": [[share per b] per p], "end": [[steps per b] per p],
    "wait_1xp": ..., "wait_px1": ...}`` (>= 0) on rank 0: SUMMA on the first p ranks, grids 1 x p
    and p x 1 (their mean; ``wait_1xp`` and ``wait_px1`` each grid's own), order
    ``step_n(p, blocks, target)``; None elsewhere or without the database's BLAS records.
    ``wait``: communication beyond the model's, over its compute; ``end``: collection beyond the
    model's (the root's wait for ranks of equal load that finished after it), over one step's
    compute. By grid because the two differ consistently (p x 1 plans wait beyond the model, 1 x p
    plans less than it), which the mean would cancel. Collective over ``world``. ``procs``: the p to
    run (the comm profile's sample), default every p = 2..P."""
    out: dict[str, list] = {"p": [], "b": [int(b) for b in blocks], "wait": [], "end": [], "wait_1xp": [],
                            "wait_px1": []}
    for p in (range(2, world.size + 1) if procs is None else [q for q in procs if 2 <= q <= world.size]):
        order = step_n(p, blocks, target)
        cases = [("gemm", Plan("summa", p, r, c, b=int(b), threads=1), order)
                 for b in blocks for r, c in ((1, p), (p, 1))]
        runs = _runs(world, db_path, cases, reps, trials=({"step_wait": 0.0, "end_wait": 0.0},))  # never wait
        if runs is None:                # every rank: no BLAS records
            return None
        if not runs:                    # not rank 0
            continue
        steps = np.repeat([-(-order // int(b)) for b in blocks], 2)
        out["p"].append(p)
        for key, phase, per in (("wait", "communication", np.ones(len(runs))), ("end", "collection", steps)):
            share = [max(meas[phase] - model[phase], 0.0) * k / model["compute"] if model["compute"] > 0 else 0.0
                     for (meas, (model,)), k in zip(runs, per, strict=True)]
            by_grid = np.reshape(share, (len(blocks), 2))          # columns: 1 x p, p x 1
            out[key].append(np.mean(by_grid, axis=1).tolist())
            if key == "wait":
                out["wait_1xp"].append(by_grid[:, 0].tolist())
                out["wait_px1"].append(by_grid[:, 1].tolist())
    return out if world.rank == 0 else None


__all__ = ["call_overheads", "fit_loop_costs", "loop_costs", "step_n", "step_waits"]
