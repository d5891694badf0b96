"""``autotune bench overhead``: what a decision costs, in microseconds: the first one for a new
shape (empty cache) and a cached one (the tuned entry point's decision step on a cache hit).

    autotune bench overhead [--db PATH] [--threads 2] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from autotune.benchmarks._common import output_problem, probed_sp, write_json
from autotune.cli.common import add_db_argument
from autotune.core.families import FAMILIES as FAMILY_DEFS
from autotune.core.families import as_problem
from autotune.db.lookup import SystemParameters
from autotune.entry.decide import decide
from autotune.select import choose, clear_cache
from autotune.settings import options

HELP = "cost of a decision: first (new shape) and cached, in microseconds"
SIZES = [97 + 131 * i for i in range(30)]
FAMILIES = (("gemm", False), ("gemm", True), ("cholesky", False))


def first_decisions(family: str, dims_list, sp: SystemParameters, threads: int, strassen: bool,
                    repeats: int = 5) -> np.ndarray:
    """Per shape, the median over ``repeats`` of a decision taken with an empty cache (noise-robust)."""
    out = np.empty((repeats, len(dims_list)))
    for r in range(repeats):
        for i, dims in enumerate(dims_list):
            clear_cache()
            t0 = time.perf_counter()
            choose(as_problem(family, dims), sp, threads, strassen)
            out[r, i] = time.perf_counter() - t0
    return np.median(out, axis=0) * 1e6


def cached_decision(family: str, dims, threads: int, strassen: bool, reps: int = 20000) -> float:
    """Per-call time of the tuned entry point's decision step on a cache hit (options, SP, cache)."""
    with options(threads=threads, allow_strassen=strassen):
        problem = as_problem(family, dims)
        decide(problem, None, False)
        t0 = time.perf_counter()
        for _ in range(reps):
            decide(problem, None, False)
        return (time.perf_counter() - t0) / reps * 1e6


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--threads", type=int, default=2, help="thread budget of the decisions")
    p.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="square sizes decided on")
    p.add_argument("--out", metavar="FILE.json", help="write the results here")


def run(args) -> int:
    """Time first and cached decisions per family; print one line each."""
    problem = output_problem("--out", args.out) or ("" if args.threads >= 1 and min(args.sizes) >= 1 else
                                                    "--threads and --sizes must be positive")
    res = {}
    with options(db=args.db):
        sp, status = probed_sp("overhead", args.db, problem)
        if sp is None:
            return status
        for family, strassen in FAMILIES:
            dims = [FAMILY_DEFS[family].square(n).dims for n in args.sizes]
            first = first_decisions(family, dims, sp, args.threads, strassen)
            name = family + ("+strassen" if strassen else "")
            res[name] = {"first_us_median": float(np.median(first)), "first_us_max": float(first.max()),
                         "cached_us": cached_decision(family, dims[len(dims) // 2], args.threads, strassen)}
            print(f"{name:16s} first decision median {res[name]['first_us_median']:8.1f} us "
                  f"(max {res[name]['first_us_max']:8.1f}), cached {res[name]['cached_us']:6.2f} us", flush=True)
    if args.out:
        write_json(args.out, {"threads": args.threads, "results": res})
    return 0
