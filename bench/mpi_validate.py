"""Distributed validation: run every plan (exhaustive), compare phases and totals with the models.

Run collectively under mpiexec; the root ranks the plans for each problem (oversubscribed ones
too, so that their models are checked; the selector's choice obeys ranks x threads <= cores and
the best measured is over every plan timed), every plan is forced
and timed (median of ``--reps`` runs, the plans' runs interleaved round by round; each run
from root-held matrices, the same for every plan, to the gathered result),
per-phase times are the maximum over ranks (each phase the median of its runs). Reports the
absolute percentage error per phase and for the total, and per problem the best measured plan,
the model's choice and the deviation t(choice) / t(best) - 1 (the layout of 001 tables 3.44-3.45).
Output JSON and Markdown.

    mpiexec -n 2 python bench/mpi_validate.py --family gemm --sizes 1024 2048 4096 \
        --out $RESULTS/mpi-validate-gemm-P2.json --markdown $RESULTS/mpi-validate-gemm-P2.md

(``RESULTS``: any directory outside the checkout; without ``--out``/``--markdown`` nothing is written.)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

import numpy as np
from autotune.install_probe.operands import spd_matrix

from autotune.config import available_cores, options
from autotune.distributed.collective import quiet_barrier
from autotune.distributed.plan import PHASES, Phases, Plan

SMOKE_SIZES = (48,)


def _problem(family: str, n: int, rng) -> tuple:
    if family == "gemm":
        return rng.standard_normal((n, n)), rng.standard_normal((n, n))
    return (spd_matrix(rng, n, order="C"),)   # no BLAS call: no pool left spinning


def _run_once(family: str, plan: Plan, args: tuple, comm) -> tuple[float, dict[str, float]]:
    """One collective run of ``plan``: root wall time and the per-phase max over ranks."""
    from autotune.distributed.api import distributed_cholesky, distributed_gemm

    phases = Phases()
    comm.Barrier()
    t0 = time.perf_counter()
    if family == "gemm":
        distributed_gemm(*args, comm, config=plan, phases=phases)
    else:
        distributed_cholesky(*args, comm, config=plan, phases=phases)
    wall = time.perf_counter() - t0
    quiet_barrier(comm)     # ranks the plan left out wait without taking a core from it (as the probe's)
    wall = comm.bcast(wall, root=0)
    mine = np.array([phases.seconds.get(p, 0.0) for p in PHASES])
    worst = np.empty_like(mine)
    comm.Allreduce(mine, worst, op=_max())
    return wall, dict(zip(PHASES, worst.tolist(), strict=True))


def _max():
    from mpi4py import MPI

    return MPI.MAX


def measure(family: str, plans: list[Plan], n: int, comm, reps: int, rng) -> list[dict]:
    """Every plan's ``reps`` runs on one problem, interleaved: round k runs each plan once, in an
    order rotated by k, so a slow spell of the machine (minutes long on this shared host) falls on
    every plan alike instead of on whichever was being timed; each plan's first run warms up."""
    args = _problem(family, n, rng) if comm.rank == 0 else ((None,) * (2 if family == "gemm" else 1))
    runs: list[list] = [[] for _ in plans]
    for plan in plans:
        _run_once(family, plan, args, comm)
    for k in range(reps):
        for i in np.roll(np.arange(len(plans)), -k):
            runs[i].append(_run_once(family, plans[i], args, comm))
    return [_summary(r) for r in runs]


def _summary(runs: list) -> dict:
    """Median wall time, its interquartile spread, and each phase's own median over the runs: one
    run's phases (the median wall's) carry that run's noise, 10-20% per phase here."""
    walls = np.array([w for w, _ in runs])
    return {"total": float(np.median(walls)), "spread": float(np.subtract(*np.percentile(walls, [75, 25])) /
                                                              np.median(walls)),
            **{p: float(np.median([ph[p] for _, ph in runs])) for p in PHASES}}


def validate(family: str, sizes, comm, reps: int, max_ratio: float, db: str | None,
             strassen: bool = False) -> list[dict]:
    from autotune.db import load_sp
    from autotune.db.comm import load_comm
    from autotune.select.distributed import rank_plans

    rng = np.random.default_rng(0)
    results = []
    for n in sizes:
        dims = (n, n, n) if family == "gemm" else (n,)
        ranked = choice = None
        if comm.rank == 0:
            sp, cp = load_sp(db), load_comm(db, nprocs=comm.size)
            dec = rank_plans(family, dims, comm.size, sp, cp, available_cores(), allow_strassen=strassen,
                             oversubscribe=True)        # time the oversubscribed plans too: their models are checked
            choice = rank_plans(family, dims, comm.size, sp, cp, available_cores(), allow_strassen=strassen).chosen
            best = dec.ranking[0].seconds
            ranked = [(r.plan, r.phases, r.model or r.phases) for r in dec.ranking
                      if r.seconds <= max_ratio * best or r.plan == choice]
        ranked, choice = comm.bcast((ranked, choice), root=0)
        rows = []
        timed = measure(family, [plan for plan, _, _ in ranked], n, comm, reps, rng)
        for (plan, predicted, model), measured in zip(ranked, timed, strict=True):
            rows.append({"plan": str(plan), "family": family, "algorithm": plan.algorithm, "p": plan.p,
                         "predicted": predicted, "model": model, "measured": measured})
            if comm.rank == 0:
                print(f"{family} n={n} {plan}: measured {measured['total'] * 1e3:.1f} ms, "
                      f"predicted {predicted['total'] * 1e3:.1f} ms", flush=True)
        results.append({"family": family, "n": n, "nprocs": comm.size, "rows": rows, "choice": str(choice)})
    return results


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0 if meas > 0 else float("nan")


def summarise(results: list[dict]) -> dict:
    """APE per phase and total (phases with a measured time > 1 ms) of the prediction used (with
    the database's fitted phase factors) and of the analytical model alone; the selection table."""
    ape = {p: [] for p in (*PHASES, "total")}
    analytical = {p: [] for p in ape}
    table = []
    for prob in results:
        rows = prob["rows"]
        for r in rows:
            for p in ape:
                if r["measured"][p] > 1e-3:
                    ape[p].append(_ape(r["predicted"][p], r["measured"][p]))
                    analytical[p].append(_ape(r.get("model", r["predicted"])[p], r["measured"][p]))
        best = min(rows, key=lambda r: r["measured"]["total"])
        # the selector's choice (ranks x threads <= cores); runs saved before it was kept: the first row
        chosen = next((r for r in rows if r["plan"] == prob.get("choice")), rows[0])
        table.append({"n": prob["n"], "best": best["plan"], "best_ms": best["measured"]["total"] * 1e3,
                      "chosen": chosen["plan"], "chosen_ms": chosen["measured"]["total"] * 1e3,
                      "deviation_pct": (chosen["measured"]["total"] / best["measured"]["total"] - 1) * 100})
    within = np.mean([t["deviation_pct"] <= 10.0 for t in table]) * 100 if table else float("nan")
    return {"ape_median": {p: float(np.median(v)) if v else None for p, v in ape.items()},
            "ape_median_analytical": {p: float(np.median(v)) if v else None for p, v in analytical.items()},
            "ape_count": {p: len(v) for p, v in ape.items()}, "selection": table,
            "within_10pct": float(within)}


def markdown(results: list[dict], summary: dict) -> str:
    nprocs = results[0]["nprocs"] if results else 0
    lines = [f"# Distributed validation, P = {nprocs}", "",
             "Median absolute percentage error (phases with a measured time > 1 ms) of the prediction used "
             "(with the database's fitted phase factors, if any) and of the analytical models alone:", "",
             "| phase | APE median | analytical alone | points |", "|---|---|---|---|"]
    for p, v in summary["ape_median"].items():
        a = summary["ape_median_analytical"][p]
        lines.append(f"| {p} | {'-' if v is None else f'{v:.1f}%'} | {'-' if a is None else f'{a:.1f}%'} | "
                     f"{summary['ape_count'][p]} |")
    lines += ["", f"Selection: model's choice within 10% of the best measured in {summary['within_10pct']:.0f}% "
              "of problems.", "", "| n | best measured | time (ms) | model's choice | time (ms) | deviation |",
              "|---|---|---|---|---|---|"]
    for t in summary["selection"]:
        lines.append(f"| {t['n']} | {t['best']} | {t['best_ms']:.1f} | {t['chosen']} | {t['chosen_ms']:.1f} | "
                     f"{t['deviation_pct']:.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--family", choices=["gemm", "cholesky"], default="gemm")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-ratio", type=float, default=3.0, help="run plans predicted within this x the best")
    p.add_argument("--db", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--markdown", default=None)
    p.add_argument("--strassen", action="store_true", help="also rank the Strassen plans (opt-in, as in the API)")
    p.add_argument("--smoke", action="store_true", help="one tiny problem, one rep (harness check)")
    p.add_argument("--fit", action="store_true",
                   help="fit phase factors (measured / analytical) from these runs and store them in the database")
    p.add_argument("--fit-from", nargs="+", metavar="JSON",
                   help="fit phase factors from earlier --out files (no runs; no mpiexec needed)")
    args = p.parse_args(argv)
    if args.fit_from:
        for name in args.fit_from:
            with open(name) as f:
                results = json.load(f)["results"]
            fit(results, args.db, results[0]["nprocs"])
        return 0
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    sizes, reps = (SMOKE_SIZES, 1) if args.smoke else (args.sizes, args.reps)
    with options(db=args.db):
        results = validate(args.family, sizes, comm, reps, args.max_ratio, args.db, args.strassen)
    if comm.rank == 0:
        summary = summarise(results)
        print(json.dumps({"ape_median": summary["ape_median"], "within_10pct": summary["within_10pct"]}))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"results": results, "summary": summary}, f, indent=1)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(markdown(results, summary))
        if args.fit:
            fit(results, args.db, comm.size)
    return 0


def _procs(plan: str) -> int:
    """Process count from a plan's text (runs saved before rows carried it)."""
    return int(re.search(r"\bp=(\d+)", plan).group(1))


def fit(results: list[dict], db: str | None, nprocs: int) -> None:
    """Fit this platform's phase factors from the analytical phases of the runs and store them."""
    from autotune.db import location
    from autotune.db.comm import load_comm
    from autotune.models.fitted_phases import fit_phase_factors, load_phase_factors, save_phase_factors

    path = location.resolve(db)
    key = load_comm(db, nprocs=nprocs).platform.get("key")
    rows = [{**r, "predicted": r["model"], "p": r.get("p", _procs(r["plan"]))}
            for prob in results for r in prob["rows"]]
    families = {r["family"] for r in rows}
    kept = [f for f in load_phase_factors(path, key).factors if f.family not in families]
    factors = kept + fit_phase_factors(rows)
    save_phase_factors(path, key, factors, info={"sizes": sorted({p["n"] for p in results}), "nprocs": nprocs})
    for f in factors:
        print(f"fitted {f.family} {f.algorithm} {f.phase} p={f.p or 'any'}: x{f.factor:.3f} from {f.points} runs "
              f"(APE {f.ape_before:.1f}% -> {f.ape_after:.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
