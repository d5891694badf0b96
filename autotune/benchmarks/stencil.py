"""``autotune bench stencil`` (under ``mpiexec -n P``; on the emulated cluster under ``autotune
testbed mpiexec P``): the stencil schedules measured against their model.

1. **Schedules by tile size**: on one grid (``--grid``, default P x 1), square tiles of each
   ``--sides`` side: blocking, overlapped and border-first steps, interleaved round by round
   (``--rounds``), median seconds per step and spread (quartiles over median) against the model's
   prediction; the overlap benefit (blocking / overlapped) measured and predicted, its sign, and the
   crossover tile side: predicted (eq. 12) and measured (the smallest side whose blocking run spent
   no less time sweeping than exchanging, from the run's own phases).
2. **Plans on a field** of ``--field`` cells a side, ``--steps`` steps per call: every plan the
   selector ranks (``--top`` of them, and the local one) timed as whole calls, interleaved; the
   chosen plan (and the one chosen under ``--min-efficiency``) against the best timed; each p's
   measured efficiency T_seq / (p x threads x T_p), T_seq the one-process numba sweep on one core;
   the hand-written mpi4py stencil (row bands, ``Sendrecv`` then a numpy slice update) on the same
   ranks and single-process numpy.
3. **Against Devito** (``benchmarks.stencil_peer``, when Devito is installed): the heat step on
   ``--peer-fields`` sides, ``--peer-steps`` steps, on one rank and on all, our chosen plan beside
   each of Devito's MPI modes, interleaved.
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

import numpy as np

from autotune.benchmarks import stencil_peer
from autotune.benchmarks._common import median_spread, mpi_world, output_problem, report_root, timed, timed_collective
from autotune.benchmarks.calls import HEAT_ALPHA
from autotune.cli.common import add_db_argument
from autotune.core.families import StencilProblem
from autotune.core.plans import Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import CommParams, load_comm
from autotune.db.lookup import SPLookup, SystemParameters
from autotune.distributed.collective import core_info, gather_cores, quiet_barrier
from autotune.distributed.plan import Phases
from autotune.kernels.stencil import heat_weights, reference
from autotune.models import stencil as model
from autotune.select.distributed import predict, rank_plans
from autotune.settings import options
from autotune.stencil import distribute, heat2d

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "stencil schedules and plans, measured against their model (under mpiexec / testbed mpiexec)"
SCHEDULES = ("blocking", "overlap", "border_first")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sides", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048],
                   help="square tile sides of the schedule sweep")
    p.add_argument("--grid", type=int, nargs=2, default=None, metavar=("R", "C"), help="sweep grid (default P x 1)")
    p.add_argument("--sweep-seconds", type=float, default=0.3, help="about this long per timed run of the sweep")
    p.add_argument("--field", type=int, default=2048, help="field side of the plan comparison")
    p.add_argument("--steps", type=int, default=50, help="steps per call of the plan comparison")
    p.add_argument("--top", type=int, default=8, help="ranked plans timed besides the chosen and local ones")
    p.add_argument("--min-efficiency", type=float, default=0.8)
    p.add_argument("--cores", type=int, default=None,
                   help="cores per host the plans may use (default: the root node's, as the ranks see them; "
                        "on an emulated cluster whose hosts share this machine's cores, say so here)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    p.add_argument("--peer-fields", type=int, nargs="+", default=[512, 1024, 2048, 4096],
                   help="field sides of the Devito comparison")
    p.add_argument("--peer-steps", type=int, default=200, help="steps per timed run of the Devito comparison")
    p.add_argument("--skip", nargs="*", default=[], choices=["sweep", "plans", "peer"], help="parts to leave out")
    add_db_argument(p)
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def run(args) -> int:
    """Time collectively; the root prints the report (and writes it to --out)."""
    problem = output_problem("--out", args.out) or (
        "" if min(args.sides) >= 4 and args.field >= 8 and args.steps >= 1 and args.rounds >= 1 and args.top >= 0
        and min(args.peer_fields) >= 8 and args.peer_steps >= 1
        else "--sides, --field, --steps, --rounds, --peer-fields, --peer-steps must be positive")
    comm, status = mpi_world("stencil", problem)
    if comm is None:
        return status
    report: dict = {"P": comm.size}
    with options(db=args.db):
        sp, cp = load_sp(args.db), load_comm(args.db, nprocs=comm.size)
        report["platform"] = cp.platform.get("key") if cp.available else "nominal defaults"
        if "sweep" not in args.skip:
            report["sweep"] = sweep(comm, args, sp, cp)
        if "plans" not in args.skip:
            report["plans"] = compare_plans(comm, args, sp, cp)
        if "peer" not in args.skip:
            report["peer"] = stencil_peer.compare(comm, args.peer_fields, args.peer_steps, args.rounds)
    report_root(comm, report, args.out)
    return 0


# ------------------------------------------------------------------------------ 1. schedules by tile

def _step_time(comm: MPI.Comm, field, phases: Phases, steps: int) -> tuple[float, dict[str, float]]:
    """Seconds per step of a field kept distributed (the root's wall time between barriers), and
    this rank's phase seconds per step."""
    phases.seconds.clear()
    comm.Barrier()
    t0 = time.perf_counter()
    field.advance(steps)
    comm.Barrier()
    t = (time.perf_counter() - t0) / steps
    return t, {k: v / steps for k, v in phases.seconds.items()}


def sweep(comm: MPI.Comm, args, sp: SPLookup, cp: CommParams) -> dict:
    """Every schedule at every tile side, interleaved; predicted and measured per step."""
    from mpi4py import MPI

    P = comm.size
    r, c = args.grid or (P, 1)
    rows = []
    for side in args.sides:
        prob = StencilProblem(side * r, side * c, 1)
        plans = {s: Plan(s, P, r, c, 1, backend="numba-stencil") for s in SCHEDULES}
        pred = {s: model.per_step(prob, p, sp, cp) for s, p in plans.items()}
        steps = max(3, int(args.sweep_seconds / max(pred["blocking"]["total"], 1e-6)))
        steps = int(comm.bcast(steps, root=0))
        u = np.random.default_rng(side).random((prob.rows, prob.cols)) if comm.rank == 0 else None
        times: dict[str, list[float]] = {s: [] for s in SCHEDULES}
        blocking_phases = []
        phases = {s: Phases() for s in SCHEDULES}
        fields = {s: distribute(u, heat_weights(HEAT_ALPHA), comm=comm, config=plan, phases=phases[s])
                  for s, plan in plans.items()}
        for field in fields.values():
            field.advance(1)                          # warm-up
        for _ in range(args.rounds):
            for s in SCHEDULES:
                t, ph = _step_time(comm, fields[s], phases[s], steps)
                times[s].append(t)
                if s == "blocking":
                    mine = np.array([ph.get("compute", 0.0), ph.get("communication", 0.0)])
                    slowest = np.empty(2)
                    comm.Allreduce(mine, slowest, op=MPI.MAX)
                    blocking_phases.append(slowest)
        for field in fields.values():
            field.free()
        sweep_exchange = np.median(np.array(blocking_phases), axis=0)
        row = {"side": side, "field": [prob.rows, prob.cols], "steps": steps,
               "measured": {s: median_spread(v) for s, v in times.items()},
               "predicted": {s: pred[s]["total"] for s in SCHEDULES},
               "predicted_terms": {k: pred["blocking"][k] for k in ("interior", "net", "communication")},
               "measured_blocking_sweep_s": float(sweep_exchange[0]),
               "measured_blocking_exchange_s": float(sweep_exchange[1])}
        m, pr = row["measured"], row["predicted"]
        row["benefit_measured"] = m["blocking"]["median"] / m["overlap"]["median"]
        row["benefit_predicted"] = pr["blocking"] / pr["overlap"]
        row["sign_agrees"] = (row["benefit_measured"] > 1.0) == (row["benefit_predicted"] > 1.0)
        row["benefit_outside_spread"] = abs(row["benefit_measured"] - 1.0) > max(m[s]["spread"] for s in
                                                                                ("blocking", "overlap"))
        rows.append(row)
        if comm.rank == 0:
            timings = ", ".join(f"{s} {m[s]['median'] * 1e3:.3f} ms (pred {pr[s] * 1e3:.3f}, spread "
                                f"{m[s]['spread']:.0%})" for s in SCHEDULES)
            print(f"side {side}: {timings}; overlap x{row['benefit_measured']:.2f} "
                  f"(pred x{row['benefit_predicted']:.2f})", flush=True)
    base = Plan("overlap", P, r, c, 1, backend="numba-stencil")
    predicted = model.crossover(StencilProblem(r, c), base, sp, cp)
    covered = [row["side"] for row in rows if row["measured_blocking_sweep_s"] >= row["measured_blocking_exchange_s"]]
    measured = min(covered) if covered else None
    at = _nearest(rows, predicted)
    return {"grid": [r, c], "rows": rows, "crossover_predicted": predicted, "crossover_measured": measured,
            "crossover_steps_apart": _steps_apart(args.sides, predicted, measured),
            "benefit_at_predicted_crossover": None if at is None else at["benefit_measured"],
            "side_at_predicted_crossover": None if at is None else at["side"],
            "sign_agrees_everywhere": all(row["sign_agrees"] for row in rows),
            "sign_agrees_outside_spread": all(row["sign_agrees"] for row in rows if row["benefit_outside_spread"])}



def _nearest(rows: list[dict], side: int | None) -> dict | None:
    if side is None or not rows:
        return None
    return min(rows, key=lambda row: abs(np.log(row["side"] / side)))


def _steps_apart(sides: list[int], a: int | None, b: int | None) -> float | None:
    """How many sweep steps (in log of the side) lie between two sides."""
    if a is None or b is None or len(sides) < 2:
        return None
    step = float(np.median(np.diff(np.log(sorted(sides)))))
    return abs(float(np.log(a / b))) / step if step > 0 else None


# ------------------------------------------------------------------------------ 2. plans on a field

def handwritten(u, steps: int, comm: MPI.Comm) -> np.ndarray | None:
    """The stencil a user writes with mpi4py: row bands, ``Sendrecv`` of the edge rows with each
    neighbour, then a numpy slice update; gathered on rank 0."""
    from mpi4py import MPI

    P, me = comm.size, comm.rank
    shape = comm.bcast(None if u is None else u.shape, root=0)
    n0, n1 = shape
    counts = [n0 // P + (i < n0 % P) for i in range(P)]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    band = np.empty((counts[me] + 2, n1))
    comm.Scatterv([u, np.array(counts) * n1, starts * n1, MPI.DOUBLE] if me == 0 else None, band[1:-1], root=0)
    up, down = (me - 1 if me > 0 else MPI.PROC_NULL), (me + 1 if me < P - 1 else MPI.PROC_NULL)
    lo = 1 + (me == 0)                      # the field's first and last rows stay fixed
    hi = counts[me] + 1 - (me == P - 1)
    a = HEAT_ALPHA
    new = band.copy()
    for _ in range(steps):
        comm.Sendrecv(band[1], dest=up, recvbuf=band[-1], source=down)
        comm.Sendrecv(band[-2], dest=down, recvbuf=band[0], source=up)
        new[lo:hi, 1:-1] = band[lo:hi, 1:-1] + a * (band[lo - 1:hi - 1, 1:-1] + band[lo + 1:hi + 1, 1:-1]
                                                    + band[lo:hi, :-2] + band[lo:hi, 2:] - 4 * band[lo:hi, 1:-1])
        band, new = new, band
    out = np.empty(shape) if me == 0 else None
    comm.Gatherv(np.ascontiguousarray(band[1:-1]), [out, np.array(counts) * n1, starts * n1, MPI.DOUBLE]
                 if me == 0 else None, root=0)
    return out


def compare_plans(comm: MPI.Comm, args, sp: SystemParameters, cp: CommParams) -> dict:
    """The ranked plans, the chosen ones, each p's efficiency, the hand-written and numpy stencils."""
    P, n, steps = comm.size, args.field, args.steps
    prob = StencilProblem(n, n, steps)
    u = np.random.default_rng(0).random((n, n)) if comm.rank == 0 else None
    cores = args.cores or gather_cores(comm)[0]
    infos = comm.allgather(core_info())                           # each rank's host and quota, as a call sees them
    cp = cp.with_ranks([i.host for i in infos], [i.share for i in infos])
    dec = rank_plans(prob, P, sp, cp, cores) if comm.rank == 0 else None
    eff = rank_plans(prob, P, sp, cp, cores, min_efficiency=args.min_efficiency) if comm.rank == 0 else None
    todo = None
    if comm.rank == 0:
        local = next((r.plan for r in dec.ranking if r.plan.algorithm == "local"), Plan("local", 1))
        todo = [dec.chosen, eff.chosen, local] + [r.plan for r in dec.ranking[:args.top]]
        todo += [next(r.plan for r in dec.ranking if r.plan.p == p) for p in range(2, P + 1)
                 if any(r.plan.p == p for r in dec.ranking)]
        todo = list(dict.fromkeys(todo))
    todo = comm.bcast(todo, root=0)
    want = reference(u, steps, heat_weights(HEAT_ALPHA)) if comm.rank == 0 else None
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for plan in todo:
            times.setdefault(str(plan), []).append(timed_collective(comm, lambda plan=plan: _check(
                heat2d(u, steps, HEAT_ALPHA, comm=comm, config=plan), want)))
        times.setdefault("mpi4py by hand", []).append(timed_collective(comm, lambda: _check(handwritten(u, steps, comm),
                                                                                     want)))
        if comm.rank == 0:
            times.setdefault("numpy one process", []).append(timed(lambda: reference(u, steps,
                                                                                     heat_weights(HEAT_ALPHA))))
            times.setdefault("T_seq (numba, 1 core)", []).append(timed(lambda: heat2d(
                u, steps, HEAT_ALPHA, config={"algorithm": "sweep", "backend": "numba-stencil", "threads": 1})))
        quiet_barrier(comm)           # the others wait without taking a core from the root's runs
    if comm.rank != 0:
        return {}
    med = {k: median_spread(v) for k, v in times.items()}
    t_seq = med["T_seq (numba, 1 core)"]["median"]
    rows = []
    for plan in todo:
        m = med[str(plan)]["median"]
        pred = predict(prob, plan, sp, cp)["total"] if plan.algorithm != "local" else next(
            (r.seconds for r in dec.ranking if r.plan.algorithm == "local"), float("nan"))
        used = max(plan.p * plan.threads, 1)
        rows.append({"plan": str(plan), "p": plan.p, "measured": med[str(plan)], "predicted": pred,
                     "model_error": pred / m - 1.0, "efficiency_measured": t_seq / (used * m)})
    best = min(rows, key=lambda row: row["measured"]["median"])
    chosen = next(row for row in rows if row["plan"] == str(dec.chosen))
    efficient = next(row for row in rows if row["plan"] == str(eff.chosen))
    hand = med["mpi4py by hand"]["median"]
    return {"field": n, "steps": steps, "cores": cores, "chosen": str(dec.chosen),
            "chosen_min_efficiency": str(eff.chosen), "rows": rows, "baselines": {k: med[k] for k in (
                "mpi4py by hand", "numpy one process", "T_seq (numba, 1 core)")},
            "chosen_over_best": chosen["measured"]["median"] / best["measured"]["median"], "best": best["plan"],
            "chosen_vs_handwritten": hand / chosen["measured"]["median"],
            "min_efficiency_plan_measured_efficiency": efficient["efficiency_measured"],
            "efficiency_by_p": {p: max((row["efficiency_measured"] for row in rows if row["p"] == p), default=None)
                                for p in range(1, P + 1)}}


def _check(got, want) -> None:
    if want is not None and not np.allclose(got, want, rtol=1e-10, atol=1e-12):
        raise AssertionError("a stencil run differs from numpy's")





__all__ = ["HELP", "add_arguments", "compare_plans", "handwritten", "run", "sweep"]
