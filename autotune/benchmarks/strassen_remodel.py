"""``autotune bench strassen-remodel``: the Strassen remodelling experiment (eq. 4.10,
docs/models.md#fitted.strassen) redone on this machine.

Times sequential Strassen (leaves on numpy's OpenBLAS, one thread) at ``--levels`` on the
``--sizes`` grid (a level only where its leaves are at least 64), fits M(l), A(l)
(``autotune.models.fit_strassen.fit_strassen``, k3 and k2 from the database), then on ``--checks``
sizes off the grid compares the analytical model (``autotune.models.gemm.strassen``) and the
fitted one: prediction errors, and whether each picks the measured best level. Results only
where ``--out``/``--markdown`` say.

    autotune bench strassen-remodel --out RESULTS/strassen-remodel.json \\
        --markdown RESULTS/strassen-remodel.md          # RESULTS: any directory outside the checkout
"""
from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.api import tuned_gemm
from autotune.benchmarks._common import output_problem, timed, write_json, write_text
from autotune.cli.common import add_db_argument, error
from autotune.core.plans import Candidate
from autotune.db import load_sp
from autotune.db.lookup import SPLookup
from autotune.models import gemm as gemm_models
from autotune.models.fit_strassen import StrassenFit, fit_strassen
from autotune.models.gemm import STRASSEN_ADD_BACKEND
from autotune.settings import options

HELP = "Strassen's per-level factors M(l), A(l) fitted on this machine vs the analytical model"
BACKEND = "numpy-openblas"
GRID = (512, 1024, 1536, 2048, 2560, 3072, 3584, 4096)
CHECK = (768, 1400, 2200, 2900, 3800)
LEVELS = (0, 1, 2, 3, 4)
MIN_LEAF = 64


def measure(n: int, level: int, reps: int, rng: np.random.Generator) -> float:
    """Median seconds of ``reps`` runs of Strassen with ``level`` levels (0: plain dgemm), after a warm-up."""
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    out = np.empty((n, n))
    cand = Candidate("blas", BACKEND, 1) if level == 0 else Candidate("strassen", BACKEND, 1, level)
    tuned_gemm(a, b, out=out, config=cand)
    return float(np.median([timed(lambda: tuned_gemm(a, b, out=out, config=cand)) for _ in range(reps)]))


def analytical(n: int, level: int, sp: SPLookup) -> float:
    """The analytical model's seconds at (n, level): dgemm at level 0, Strassen above."""
    if level == 0:
        return float(gemm_models.blas(n, n, n, BACKEND, 1, sp))
    return float(gemm_models.strassen(n, n, n, [level], BACKEND, 1, sp, add_backend=STRASSEN_ADD_BACKEND)[0])


def timings(sizes, levels, reps: int, rng: np.random.Generator) -> list[tuple[int, int, float]]:
    """(n, level, seconds) for every size and every level whose leaves are at least MIN_LEAF."""
    return [(n, lv, measure(n, lv, reps, rng)) for n in sizes for lv in levels if n >> lv >= MIN_LEAF]


def fit(grid: list[tuple[int, int, float]], sp: SPLookup) -> StrassenFit:
    """M(l), A(l) per level from the grid's times, with the database's k3 (leaf dgemm) and k2 (view add)."""
    def k3(x):
        return sp.k("gemm", BACKEND, 1, x)

    def k2(x):
        return sp.k("add", STRASSEN_ADD_BACKEND, 1, x, "view")

    n, lv, t = (np.array(v, dtype=float) for v in zip(*grid, strict=True))
    return fit_strassen(n, lv, t, k3, k2)


def compare(check: list[tuple[int, int, float]], fitted: StrassenFit, sp: SPLookup) -> list[dict]:
    """Per check point: measured seconds and both models' predictions."""
    return [{"n": n, "l": lv, "measured": t, "analytical": analytical(n, lv, sp),
             "fitted": float(fitted.predict(n, lv))} for n, lv, t in check]


def result(grid: list[tuple[int, int, float]], rows: list[dict], fitted: StrassenFit) -> dict:
    """The grid's times, the checks' rows and the fitted factors per level, as JSON."""
    return {"grid": [{"n": a, "l": b, "measured": c} for a, b, c in grid], "check": rows,
            "M": dict(zip(map(str, fitted.levels), fitted.m.tolist(), strict=True)),
            "A": dict(zip(map(str, fitted.levels), fitted.a.tolist(), strict=True)), "sigma": fitted.sigma}


def summarise(res: dict) -> dict:
    """Median and max APE of each model on the checks; per check size the measured best level,
    each model's pick and its regret t(pick) / t(best)."""
    rows = res["check"]
    ape = {k: [abs(r[k] / r["measured"] - 1) * 100 for r in rows] for k in ("analytical", "fitted")}
    picks = []
    for n in sorted({r["n"] for r in rows}):
        at = [r for r in rows if r["n"] == n]
        best = min(at, key=lambda r: r["measured"])
        pick = {k: min(at, key=lambda r: r[k]) for k in ("analytical", "fitted")}
        picks.append({"n": n, "best_l": best["l"], **{f"{k}_l": p["l"] for k, p in pick.items()},
                      **{f"{k}_regret": p["measured"] / best["measured"] for k, p in pick.items()}})
    return {"ape_median": {k: float(np.median(v)) for k, v in ape.items()},
            "ape_max": {k: float(np.max(v)) for k, v in ape.items()}, "picks": picks}


def markdown(res: dict, summ: dict) -> str:
    """The fitted factors, the models' errors and the level picks as Markdown."""
    lines = ["# Strassen remodelling (eq. 4.10) on this machine", "",
             "Fitted factors per level (T = M(l) * leaves + A(l) * additions):", "",
             "| l | M(l) | A(l) |", "|---|---|---|"]
    lines += [f"| {lv} | {res['M'][lv]:.3f} | {res['A'][lv]:.3f} |" for lv in res["M"]]
    lines += ["", "Check sizes (off the fitting grid), APE of each model:", "",
              f"- analytical: median {summ['ape_median']['analytical']:.1f}%, max {summ['ape_max']['analytical']:.1f}%",
              f"- fitted: median {summ['ape_median']['fitted']:.1f}%, max {summ['ape_max']['fitted']:.1f}%", "",
              "| n | best l (measured) | analytical pick | regret | fitted pick | regret |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {p['n']} | {p['best_l']} | {p['analytical_l']} | {p['analytical_regret']:.3f} | "
              f"{p['fitted_l']} | {p['fitted_regret']:.3f} |" for p in summ["picks"]]
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--reps", type=int, default=3, help="timed runs per (size, level) (median)")
    p.add_argument("--sizes", type=int, nargs="+", default=list(GRID), help="square sizes the factors are fitted on")
    p.add_argument("--checks", type=int, nargs="+", default=list(CHECK), help="square sizes the models are checked on")
    p.add_argument("--levels", type=int, nargs="+", default=list(LEVELS), help="recursion levels (0: plain dgemm)")
    p.add_argument("--out", metavar="FILE.json", help="write every time, the factors and the summary here")
    p.add_argument("--markdown", metavar="FILE.md", help="write the tables here")


def _problem(args) -> str:
    """What is wrong with the options ("" if nothing), checked before anything is timed."""
    if min(args.sizes + args.checks) < 1 or args.reps < 1:
        return "--sizes, --checks and --reps must be positive"
    if min(args.levels) < 0:
        return "--levels must not be negative"
    if not any(n >> lv >= MIN_LEAF for n in args.checks for lv in args.levels):
        return f"no --checks size has leaves of at least {MIN_LEAF} at any of --levels"
    short = [lv for lv in set(args.levels) if any(n >> lv >= MIN_LEAF for n in args.checks)
             and len({n for n in args.sizes if n >> lv >= MIN_LEAF}) < (2 if lv else 1)]
    if short:
        return (f"--sizes must give level(s) {' '.join(map(str, sorted(short)))} two sizes with leaves of "
                f"at least {MIN_LEAF} (one for level 0)")
    return output_problem("--out", args.out) or output_problem("--markdown", args.markdown)


def run(args) -> int:
    """Time, fit and compare; print the tables, write what --out/--markdown ask."""
    problem = _problem(args)
    if problem:
        return error("bench strassen-remodel", problem, 2)
    sp = load_sp(args.db)
    if sp.table is None:
        return error("bench strassen-remodel", f"no usable database ({sp.reason})", 2)
    rng, levels = np.random.default_rng(0), sorted(set(args.levels))
    with threadpool_limits(1), options(db=args.db):
        grid = timings(args.sizes, levels, args.reps, rng)
        try:
            fitted = fit(grid, sp)
        except ValueError as exc:
            return error("bench strassen-remodel", f"--sizes do not determine the factors: {exc}", 2)
        res = result(grid, compare(timings(args.checks, levels, args.reps, rng), fitted, sp), fitted)
    summ = summarise(res)
    print(markdown(res, summ), end="")
    if args.out:
        write_json(args.out, {**res, "summary": summ})
    if args.markdown:
        write_text(args.markdown, markdown(res, summ))
    return 0
