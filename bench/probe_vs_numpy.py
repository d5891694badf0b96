"""Does the probe measure the real thing? Probe dgemm vs a direct ``numpy.matmul`` timing.

Side by side in one process, A/B interleaved: each round runs the probe's measurement of
dgemm (numpy's OpenBLAS, ``square`` pattern) and a plain ``a @ b`` timing at the same n and
thread count. Prints medians, spread and the ratio; writes JSON with ``--out``.

    python bench/probe_vs_numpy.py --n 2048 --threads 1 --rounds 7
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from autotune.install_probe.operands import build
from autotune.install_probe.profile import Timing
from autotune.install_probe.timing import measure
from threadpoolctl import threadpool_limits

from autotune import backends
from autotune.routines import flops_of


def numpy_time(n: int, reps: int = 3) -> float:
    """Median of ``reps`` timings of a C-ordered ``a @ b`` (what a numpy user writes)."""
    rng = np.random.default_rng(1)
    a, b = rng.random((n, n)), rng.random((n, n))
    a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out")
    args = p.parse_args()
    be = backends.get("numpy-openblas")
    fl = float(flops_of("gemm", "square", args.n)[0])
    policy = Timing(min_reps=3, max_reps=15, rel_tol=0.02, point_budget_seconds=1.5)
    probe, direct = [], []
    rng = np.random.default_rng(0)
    with be.threads(args.threads), threadpool_limits(args.threads):
        for _ in range(args.rounds):
            probe.append(fl / measure(build(be, "gemm", "square", args.n, 0, rng), policy).median / 1e9)
            direct.append(fl / numpy_time(args.n) / 1e9)
    ratios = np.array(probe) / np.array(direct)
    res = {"n": args.n, "threads": args.threads, "rounds": args.rounds,
           "probe_gflops_median": float(np.median(probe)), "numpy_gflops_median": float(np.median(direct)),
           "ratio_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
           "ratio_max": float(ratios.max()), "probe_gflops": probe, "numpy_gflops": direct}
    print(f"n={args.n} threads={args.threads}: probe {res['probe_gflops_median']:.2f} GFLOP/s, "
          f"numpy {res['numpy_gflops_median']:.2f} GFLOP/s, ratio median {res['ratio_median']:.3f} "
          f"(min {res['ratio_min']:.3f}, max {res['ratio_max']:.3f}, {args.rounds} A/B rounds)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
