"""``autotune bench mpi-rescore``: saved ``autotune bench mpi-validate`` runs re-scored with the
current models, without re-timing (no mpiexec): each distributed row's analytical prediction,
the prediction in use and the phase factors' are replaced and each problem's choice is the row
predicted fastest; then ``mpi_validate.summarise`` gives the median APE per phase and the mean
t(choice)/t(best) beside the phase factors' alone (one-process rows keep their saved prediction).

    autotune bench mpi-rescore RUN.json ... --db DB --np P --family gemm   # P: the platform's world size
"""
from __future__ import annotations

import argparse
import json
import re

from autotune.benchmarks._common import output_problem, write_json
from autotune.benchmarks.mpi_validate import summarise
from autotune.cli.common import add_db_argument, error
from autotune.core.families import DISTRIBUTED, FAMILIES
from autotune.core.plans import Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import CommParams, load_comm
from autotune.db.lookup import SystemParameters
from autotune.models.fitted_phases import platform_factors
from autotune.select.distributed import predict

HELP = "re-score mpi-validate runs with the current models, without re-timing"
PLAN = re.compile(r"(\w+) p=(\d+) grid=(\d+)x(\d+)(?: b=(\d+))?(?: l=(\d+))? \[([\w-]+), (\d+)t\]")


def parse(text: str) -> Plan | None:
    """The Plan a result row names (``str(plan)``); None for the one-process row."""
    m = PLAN.match(text)
    if not m or m.group(1) == "local":
        return None
    alg, p, r, c, b, level, backend, threads = m.groups()
    return Plan(alg, int(p), int(r), int(c), int(b or 0), int(level or 0), int(threads), backend)


def rescore(results: list[dict], family: str, sp: SystemParameters, cp: CommParams) -> list[dict]:
    """``results`` with every distributed row's ``model``, ``predicted`` (the database's fitted
    T(n, p) or phase factors) and ``factored`` (the phase factors alone) from the current code, and
    each problem's ``choice`` the row predicted fastest (the timed plans, oversubscribed or not)."""
    factors = platform_factors(sp, cp)
    for res in results:
        problem = FAMILIES[family].square(res["n"])
        for row in res["rows"]:
            plan = parse(row["plan"])
            if plan is not None:
                row["model"] = predict(problem, plan, sp, cp, fitted=False)
                row["predicted"] = predict(problem, plan, sp, cp)
                row["factored"] = row["model"]["total"] * factors.factor(family, plan.algorithm, "total", plan.p)
        res["choice"] = min(res["rows"], key=lambda r: r["predicted"]["total"])["plan"]
    return results


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="outputs of `autotune bench mpi-validate --out`")
    add_db_argument(p, "database to re-predict with", required=True)
    p.add_argument("--np", type=int, required=True, help="the platform's world size P")
    p.add_argument("--family", choices=list(DISTRIBUTED), required=True)
    p.add_argument("--out", metavar="FILE.json", help="write the re-scored runs and summary here")


def run(args) -> int:
    """Print the analytical median APE per phase of the re-scored runs."""
    problem = output_problem("--out", args.out) or ("" if args.np >= 1 else "--np must be positive")
    if problem:
        return error("bench mpi-rescore", problem, 2)
    results = []
    for path in args.runs:
        try:
            with open(path) as f:
                results += json.load(f)["results"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return error("bench mpi-rescore", f"{path}: not an `autotune bench mpi-validate --out` file ({exc})", 2)
    sp = load_sp(args.db)
    if sp.table is None:
        return error("bench mpi-rescore", f"no usable database ({sp.reason}): {args.db}", 1)
    summary = summarise(rescore(results, args.family, sp, load_comm(args.db, nprocs=args.np)))
    ape = summary["ape_median_analytical"]
    print(" ".join(f"{k} {v:.1f}" if v is not None else f"{k} n/a" for k, v in ape.items()))
    if summary["mean_regret"] is not None:
        print(f"mean t(choice)/t(best): {summary['mean_regret']:.3f}; with the phase factors alone "
              f"{summary['mean_regret_factored']:.3f} ({len(summary['selection'])} problems)")
    if args.out:
        write_json(args.out, {"results": results, "summary": summary})
    return 0
