"""``autotune bench multicore``: the multicore models (docs/models.md#multicore) checked against
timings at sizes the thread-SP probe never used: Jacobi sweeps and the addition kernel per kernel
version and thread count, nested Strassen for every P1 x P2 with P1 P2 <= 2C, and sequential
Strassen with the OpenMP additions (gemm variant 1). Per model, the median absolute percentage
error over the points predicted >= 1 ms.

    autotune bench multicore [--db PATH] [--sizes N ...] [--reps 5] [--out FILE.json]

``--sizes`` replaces every check's own sizes (a quick smoke run: ``--sizes 96 160 --reps 1``).
Needs thread SPs in the database (``autotune-install`` stores them) and, for the Strassen
variant, the SP table.
"""
from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from autotune import backends
from autotune.benchmarks._common import output_problem, write_json
from autotune.cli.common import add_db_argument, error
from autotune.core.plans import Candidate
from autotune.db import load_sp
from autotune.db.location import resolve
from autotune.db.lookup import SPLookup
from autotune.db.threads import ThreadSPs, load_threads
from autotune.dispatch import run_gemm
from autotune.kernels import versions
from autotune.kernels.nested_strassen import nested_strassen
from autotune.models import gemm as gemm_models
from autotune.models import multicore
from autotune.select.candidates import NESTED_BACKEND as BACKEND

HELP = "multicore models (Jacobi, add, nested Strassen, OMP-add Strassen) vs timings at off-grid sizes"
JACOBI_SIZES = (700, 1300, 2100)
ADD_SIZES = (900, 1700, 2600)
STRASSEN_SIZES = (768, 1280)
MIN_PREDICTED = 1e-3      # points predicted below this are listed but not scored (seconds)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def measure(fn: Callable[[], object], reps: int) -> float:
    """Median of ``reps`` timed calls after one warm-up (seconds)."""
    fn()
    out = []
    for _ in range(max(reps, 1)):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _rand(n: int, seed: int, order: str = "F") -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).random((n, n)), order=order)


def _versions(tsp: ThreadSPs):
    """(name, SPs, kernel module) of each measured version whose kernels load here."""
    for name, sps in tsp.versions.items():
        module = versions.load(name) if name in versions.VERSIONS else None
        if module is not None:
            yield name, sps, module


def jacobi_points(tsp: ThreadSPs, sizes, threads, reps: int) -> list[dict]:
    pts = []
    for name, sps, module in _versions(tsp):
        for n in sizes:
            old, new = _rand(n, 1, "C"), np.empty((n, n))
            for p in threads:
                t = measure(lambda m=module, p=p, o=old, w=new: m.jacobi_sweep(o, w, p), reps)
                pts.append(_point(f"jacobi/{name}", {"n": n, "P": p}, float(multicore.jacobi(n, p, sps, tsp.cores)), t))
    return pts


def add_points(tsp: ThreadSPs, sizes, threads, reps: int) -> list[dict]:
    """The addition kernel of each version: one R-pfor over n^2 elements, per-element time the
    measured ``T_add`` line (the probe's, on the OpenMP add) and the version's T_gen."""
    per_elem = tsp.strassen.t_add if tsp.strassen is not None else None
    pts = []
    for name, sps, module in _versions(tsp):
        for n in sizes:
            a, b, c = _rand(n, 2), _rand(n, 3), np.empty((n, n), order="F")
            for p in threads:
                t = measure(lambda m=module, p=p, x=(a, b, c): m.add(*x, 1.0, p), reps)
                pred = float(multicore.additions(p, [(1, n * n)], sps, tsp.cores, per_elem))
                pts.append(_point(f"add/{name}", {"n": n, "P": p}, pred, t))
    return pts


def nested_points(tsp: ThreadSPs, sp: SPLookup, sizes, budget: int, reps: int) -> list[dict]:
    """Nested Strassen for every P1 x P2 (P1 <= 7, P2 within the library's threads, P1 P2 <= budget),
    predicted as the selector predicts it (models.gemm.strassen_nested)."""
    if tsp.strassen is None:
        return []
    be = backends.get(BACKEND)
    gemm = be.ops["gemm"]
    lookup = sp if sp.table is not None and BACKEND in sp.table.backends else None   # else eqs. 6.9-6.12
    pts = []
    for n in sizes:
        a, b, c = _rand(n, 4), _rand(n, 5), np.empty((n, n), order="F")
        for levels in (1, 2):
            for p1 in range(1, min(budget, 7) + 1):
                for p2 in range(1, min(budget // p1, be.max_threads) + 1):
                    t = measure(lambda p1=p1, p2=p2, lv=levels, x=(a, b, c):
                                nested_strassen(x[0], x[1], p1, p2, gemm, be.threads, lv, x[2]), reps)
                    pred = float(gemm_models.strassen_nested(n, n, n, [levels], p1, p1 * p2, tsp, lookup, BACKEND)[0])
                    pts.append(_point("strassen_nested", {"n": n, "P1": p1, "P2": p2, "levels": levels}, pred, t))
    return pts


def omp_strassen_points(tsp: ThreadSPs, sp: SPLookup, sizes, threads, reps: int) -> list[dict]:
    """Sequential Strassen with the OpenMP additions (gemm candidate variant 1), run as a tuned call runs it."""
    if versions.load("omp") is None or gemm_models.omp_add_sps(tsp) is None or sp.table is None \
            or BACKEND not in sp.table.backends:
        return []
    pts = []
    for n in sizes:
        a, b, c = _rand(n, 6), _rand(n, 7), np.empty((n, n), order="F")
        for levels in (1, 2):
            for p in threads:
                if not sp.table.has("gemm", BACKEND, p, "square"):
                    continue
                cand = Candidate("strassen", BACKEND, p, levels, 1)
                t = measure(lambda cand=cand, x=(a, b, c): run_gemm(cand, *x), reps)
                pred = float(gemm_models.strassen_omp(n, n, n, [levels], BACKEND, p, sp, tsp)[0])
                pts.append(_point("strassen/omp-add", {"n": n, "P": p, "levels": levels}, pred, t))
    return pts


def _point(model: str, where: dict, predicted: float, measured: float) -> dict:
    return {"model": model, **where, "predicted": predicted, "measured": measured,
            "ape": abs(predicted - measured) / measured * 100.0}


def summarise(points: list[dict]) -> dict:
    """Per model: points, points scored (predicted >= MIN_PREDICTED) and their median APE (%)."""
    out = {}
    for model in dict.fromkeys(p["model"] for p in points):
        mine = [p for p in points if p["model"] == model]
        scored = [p["ape"] for p in mine if p["predicted"] >= MIN_PREDICTED]
        out[model] = {"points": len(mine), "scored": len(scored),
                      "median_ape": float(np.median(scored)) if scored else None}
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="square sizes for every check (default: each check's own off-grid sizes)")
    p.add_argument("--reps", type=int, default=5, help="timed calls per point (median taken)")
    p.add_argument("--max-threads", type=int, default=None, help="largest P (default: 2 x the cores)")
    p.add_argument("--out", metavar="FILE.json", help="write every point and the summary here")


def run(args) -> int:
    """Time every check, print per model its median APE over points predicted >= 1 ms."""
    problem = output_problem("--out", args.out) or (
        "--reps must be >= 1" if args.reps < 1 else
        "--sizes must be >= 4" if args.sizes is not None and min(args.sizes) < 4 else "")
    if problem:
        return error("bench multicore", problem, 2)
    path = resolve(args.db)
    tsp = load_threads(path)
    if not tsp.measured:
        return error("bench multicore", f"no thread SPs in {path}: run `autotune-install` first", 1)
    sp = load_sp(args.db)
    cores = tsp.cores or _cores()
    top = args.max_threads or 2 * cores
    threads = range(1, top + 1)
    seq_threads = range(1, min(top, cores) + 1)
    sizes = args.sizes
    points = (jacobi_points(tsp, sizes or JACOBI_SIZES, threads, args.reps)
              + add_points(tsp, sizes or ADD_SIZES, threads, args.reps)
              + nested_points(tsp, sp, sizes or STRASSEN_SIZES, top, args.reps)
              + omp_strassen_points(tsp, sp, sizes or STRASSEN_SIZES, seq_threads, args.reps))
    summary = summarise(points)
    for model, s in summary.items():
        ape = f"{s['median_ape']:6.1f} %" if s["median_ape"] is not None else "   n/a  "
        print(f"{model:18s} median APE {ape} over {s['scored']:3d} of {s['points']:3d} points "
              f"(predicted >= {MIN_PREDICTED * 1e3:g} ms)", flush=True)
    if args.out:
        write_json(args.out, {"cores": cores, "threads": top, "min_predicted": MIN_PREDICTED,
                              "points": points, "summary": summary})
    return 0
