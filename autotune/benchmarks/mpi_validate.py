"""``autotune bench mpi-validate``: run every plan (exhaustive) under ``mpiexec -n P``, compare
phases and totals with the models.

The root ranks the plans for each problem (oversubscribed ones too, so that their models are
checked; the selector's choice obeys ranks x threads <= cores and the best measured is over every
plan timed), every plan is forced and timed (median of ``--reps`` runs, the plans' runs
interleaved round by round; each run from root-held matrices, the same for every plan, to the
gathered result), per-phase times are the maximum over ranks (each phase the median of its runs).
Reports the absolute percentage error per phase and for the total, and per problem the best
measured plan, the model's choice and the deviation t(choice) / t(best) - 1 (the layout of 001
tables 3.44-3.45), beside the choice the phase factors alone make (without the fitted T(n, p),
docs/models.md#fitted.plans), and the mean t(choice) / t(best) of both. Output JSON and
Markdown, only where ``--out``/``--markdown`` say. The plans
are ranked, run and fitted by ``autotune.install_probe.phase_calibration``, the step
``autotune-install --mpi`` ends with; ``--fit`` stores phase factors from these runs,
``--fit-from`` from earlier ``--out`` files (no runs, no mpiexec), both only into the database
named with ``--db`` (never the default one unasked).

    mpiexec -n 2 autotune bench mpi-validate --family gemm --sizes 1024 2048 4096 \
        --out mpi-validate-gemm-P2.json --markdown mpi-validate-gemm-P2.md
"""
from __future__ import annotations

import argparse
import importlib.util
import json

import numpy as np

from autotune.benchmarks._common import output_problem, write_json, write_text
from autotune.cli.common import add_db_argument, error
from autotune.core.plans import PHASES
from autotune.entry.protocol import MPI_MISSING

HELP = "every distributed plan timed against its phase models (under mpiexec -n P)"

SMOKE_SIZES = (48,)


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
        # what the phase factors alone would choose among the plans timed (without any fitted T(n, p))
        factored = min(rows, key=lambda r: r.get("factored", r["predicted"]["total"]))
        table.append({"n": prob["n"], "best": best["plan"], "best_ms": best["measured"]["total"] * 1e3,
                      "chosen": chosen["plan"], "chosen_ms": chosen["measured"]["total"] * 1e3,
                      "deviation_pct": (chosen["measured"]["total"] / best["measured"]["total"] - 1) * 100,
                      "factored": factored["plan"],
                      "factored_pct": (factored["measured"]["total"] / best["measured"]["total"] - 1) * 100})
    within = np.mean([t["deviation_pct"] <= 10.0 for t in table]) * 100 if table else float("nan")
    return {"mean_regret": _mean_regret(table, "deviation_pct"),
            "mean_regret_factored": _mean_regret(table, "factored_pct"),
            "ape_median": {p: float(np.median(v)) if v else None for p, v in ape.items()},
            "ape_median_analytical": {p: float(np.median(v)) if v else None for p, v in analytical.items()},
            "ape_count": {p: len(v) for p, v in ape.items()}, "selection": table,
            "within_10pct": float(within)}


def _mean_regret(table: list[dict], column: str) -> float | None:
    """Mean of t(choice) / t(best) over the problems."""
    return float(np.mean([1 + t[column] / 100 for t in table])) if table else None


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
    regret = ("" if summary["mean_regret"] is None else
              f" Mean t(choice)/t(best) {summary['mean_regret']:.3f}; with the phase factors alone (no fitted "
              f"T(n, p)) {summary['mean_regret_factored']:.3f}.")
    lines += ["", f"Selection: model's choice within 10% of the best measured in {summary['within_10pct']:.0f}% "
              f"of problems.{regret}", "",
              "| n | best measured | time (ms) | model's choice | time (ms) | deviation | phase factors alone "
              "| deviation |",
              "|---|---|---|---|---|---|---|---|"]
    for t in summary["selection"]:
        lines.append(f"| {t['n']} | {t['best']} | {t['best_ms']:.1f} | {t['chosen']} | {t['chosen_ms']:.1f} | "
                     f"{t['deviation_pct']:.1f}% | {t.get('factored', '-')} | {t.get('factored_pct', 0.0):.1f}% |")
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", choices=["gemm", "cholesky", "lu", "solve"], default="gemm")
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048], help="square sizes")
    p.add_argument("--reps", type=int, default=3, help="timed runs of each plan (median)")
    p.add_argument("--max-ratio", type=float, default=3.0, help="run plans predicted within this x the best")
    add_db_argument(p, "--fit and --fit-from store their factors here and need it named")
    p.add_argument("--out", metavar="FILE.json", help="write every run and the summary here (the root)")
    p.add_argument("--markdown", metavar="FILE.md", help="write the tables here (the root)")
    p.add_argument("--strassen", action="store_true", help="also rank the Strassen plans (opt-in, as in the API)")
    p.add_argument("--smoke", action="store_true", help="one tiny problem, one rep (harness check)")
    p.add_argument("--fit", action="store_true",
                   help="fit phase factors (measured / analytical) from these runs and store them in the "
                        "database named by --db (required)")
    p.add_argument("--fit-from", nargs="+", metavar="JSON",
                   help="fit phase factors from earlier --out files into the database named by --db (required; "
                        "no runs, no mpiexec needed)")


def run(args) -> int:
    """Time every plan collectively; the root prints the median APEs and writes what was asked."""
    from autotune.install_probe.phase_calibration import validate

    if (args.fit or args.fit_from) and args.db is None:
        return error("bench mpi-validate", f"{'--fit' if args.fit else '--fit-from'} stores phase factors in a "
                     "database: name it with --db (a benchmark writes only where it is told to)", 2)
    if args.fit_from:
        loaded = []
        for name in args.fit_from:
            try:
                with open(name) as f:
                    loaded.append(json.load(f)["results"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                return error("bench mpi-validate",
                             f"--fit-from {name}: not an `autotune bench mpi-validate --out` file "
                                             f"({exc})", 2)
        for results in loaded:
            fit_and_report(results, args.db, results[0]["nprocs"])
        return 0
    problem = output_problem("--out", args.out) or output_problem("--markdown", args.markdown) or (
        "" if min(args.sizes) >= 1 and args.reps >= 1 else "--sizes and --reps must be positive")
    if problem:
        return error("bench mpi-validate", problem, 2)
    if importlib.util.find_spec("mpi4py") is None:
        return error("bench mpi-validate", MPI_MISSING, 2)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    sizes, reps = (SMOKE_SIZES, 1) if args.smoke else (args.sizes, args.reps)
    results = validate(args.family, sizes, comm, reps, args.max_ratio, args.db, args.strassen)
    if comm.rank == 0:
        summary = summarise(results)
        print(json.dumps({"ape_median": summary["ape_median"], "within_10pct": summary["within_10pct"]}), flush=True)
        if args.out:
            write_json(args.out, {"results": results, "summary": summary})
        if args.markdown:
            write_text(args.markdown, markdown(results, summary))
        if args.fit:
            fit_and_report(results, args.db, comm.size)
    return 0


def fit_and_report(results: list[dict], db: str | None, nprocs: int) -> None:
    """Fit and store this platform's phase factors from the runs (``phase_calibration.fit``), print them."""
    from autotune.install_probe.phase_calibration import factor_lines, fit

    key, factors = fit(results, db, nprocs)
    print(f"phase factors of platform {key}:")
    print("\n".join(factor_lines(factors)))
