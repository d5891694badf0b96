"""The source's Strassen remodelling experiment (001 §4.3, eq. 4.10) redone on this machine.

Times sequential Strassen (leaves on numpy's OpenBLAS, one thread) at levels l = 0..4 on a size
grid, fits eq. 4.10's M(l), A(l) (``autotune.models.fitting.fit_strassen``, k3 and k2 from the SP
database), then on check sizes off the grid compares the analytical model
(``autotune.models.gemm.strassen``) and the fitted one: prediction errors, and whether each picks
the measured best level.

    python bench/strassen_remodel.py --out $RESULTS/strassen-remodel.json \
        --markdown $RESULTS/strassen-remodel.md          # RESULTS: any directory outside the checkout
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

import autotune
from autotune.models import gemm as gemm_models
from autotune.models.fitting import fit_strassen
from autotune.models.gemm import STRASSEN_ADD_BACKEND
from autotune.plans import Candidate

BACKEND = "numpy-openblas"
GRID = (512, 1024, 1536, 2048, 2560, 3072, 3584, 4096)
CHECK = (768, 1400, 2200, 2900, 3800)
LEVELS = (0, 1, 2, 3, 4)


def measure(n: int, level: int, reps: int, rng) -> float:
    """Median seconds of ``reps`` runs of Strassen with ``level`` levels (0: plain dgemm)."""
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    out = np.empty((n, n))
    cand = Candidate("blas", BACKEND, 1) if level == 0 else Candidate("strassen", BACKEND, 1, level)
    autotune.tuned_gemm(a, b, out=out, config=cand)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        autotune.tuned_gemm(a, b, out=out, config=cand)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def analytical(n: int, level: int, sp) -> float:
    if level == 0:
        return gemm_models.blas(n, n, n, BACKEND, 1, sp)
    return float(gemm_models.strassen(n, n, n, [level], BACKEND, 1, sp, add_backend=STRASSEN_ADD_BACKEND)[0])


def run(sizes, checks, levels, reps: int, sp) -> dict:
    rng = np.random.default_rng(0)
    grid = [(n, lv, measure(n, lv, reps, rng)) for n in sizes for lv in levels if n >> lv >= 64]
    check = [(n, lv, measure(n, lv, reps, rng)) for n in checks for lv in levels if n >> lv >= 64]

    def k3(x):
        return sp.k("gemm", BACKEND, 1, x)

    def k2(x):
        return sp.k("add", STRASSEN_ADD_BACKEND, 1, x, "view")

    n, lv, t = (np.array(v, dtype=float) for v in zip(*grid, strict=True))
    fit = fit_strassen(n, lv, t, k3, k2)
    rows = []
    for cn, cl, ct in check:
        rows.append({"n": cn, "l": cl, "measured": ct, "analytical": analytical(cn, cl, sp),
                     "fitted": float(fit.predict(cn, cl))})
    return {"grid": [{"n": a, "l": b, "measured": c} for a, b, c in grid], "check": rows,
            "M": dict(zip(map(str, fit.levels), fit.m.tolist(), strict=True)),
            "A": dict(zip(map(str, fit.levels), fit.a.tolist(), strict=True)), "sigma": fit.sigma}


def summarise(res: dict) -> dict:
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
    lines = ["# Strassen remodelling (001 eq. 4.10) on this machine", "",
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--db", default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=list(GRID))
    p.add_argument("--checks", type=int, nargs="+", default=list(CHECK))
    p.add_argument("--out", default=None)
    p.add_argument("--markdown", default=None)
    args = p.parse_args(argv)
    sp = autotune.load_sp(args.db)
    if sp.table is None:
        print(f"no usable database: {sp.reason}", file=sys.stderr)
        return 1
    with threadpool_limits(1), autotune.options(db=args.db):
        res = run(args.sizes, args.checks, LEVELS, args.reps, sp)
    summ = summarise(res)
    print(markdown(res, summ))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**res, "summary": summ}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(res, summ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
