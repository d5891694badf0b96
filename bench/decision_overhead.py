"""Cost of a decision: cached (same problem again) and first (new shape), in microseconds.

    python bench/decision_overhead.py [--db PATH] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import autotune
from autotune.select import choose, clear_cache


def first_decisions(family: str, dims_list, sp, threads: int, strassen: bool, repeats: int = 5) -> np.ndarray:
    """Per shape, the median over ``repeats`` of a decision taken with an empty cache (noise-robust)."""
    out = np.empty((repeats, len(dims_list)))
    for r in range(repeats):
        for i, dims in enumerate(dims_list):
            clear_cache()
            t0 = time.perf_counter()
            choose(family, dims, sp, threads, strassen)
            out[r, i] = time.perf_counter() - t0
    return np.median(out, axis=0) * 1e6


def cached_decision(family: str, dims, threads: int, strassen: bool, reps: int = 20000) -> float:
    """Per-call time of the tuned entry point's decision step on a cache hit (options, SP, cache)."""
    from autotune.api import _decide

    with autotune.options(threads=threads, allow_strassen=strassen):
        _decide(family, dims, None, False)
        t0 = time.perf_counter()
        for _ in range(reps):
            _decide(family, dims, None, False)
        return (time.perf_counter() - t0) / reps * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--db", default=None)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    with autotune.options(db=args.db):
        sp = autotune.load_sp(args.db)
        if sp.table is None:
            print(f"no usable database: {sp.reason}", file=sys.stderr)
            return 1
        sizes = [97 + 131 * i for i in range(30)]
        res = {}
        for family, strassen, dims in (("gemm", False, [(n, n, n) for n in sizes]),
                                       ("gemm", True, [(n, n, n) for n in sizes]),
                                       ("cholesky", False, [(n,) for n in sizes])):
            first = first_decisions(family, dims, sp, args.threads, strassen)
            name = family + ("+strassen" if strassen else "")
            res[name] = {"first_us_median": float(np.median(first)), "first_us_max": float(first.max()),
                         "cached_us": cached_decision(family, dims[5], args.threads, strassen)}
            print(f"{name:16s} first decision median {res[name]['first_us_median']:8.1f} us "
                  f"(max {res[name]['first_us_max']:8.1f}), cached {res[name]['cached_us']:6.2f} us")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
