"""``autotune bench probe``: does the probe measure the real thing? The probe's dgemm timing
(numpy's OpenBLAS, ``square`` pattern) against a plain ``a @ b`` at the same n and thread count,
A/B interleaved in one process; prints medians, spread and the ratio.

    autotune bench probe --n 2048 --threads 1 --rounds 7 [--out FILE.json]
"""
from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.benchmarks._common import output_problem, timed, write_json
from autotune.cli.common import error
from autotune.core.routines import flops_of

HELP = "the probe's dgemm timing against a plain numpy a @ b (A/B)"


def numpy_time(n: int, reps: int = 3) -> float:
    """Median of ``reps`` timings of a C-ordered ``a @ b`` (what a numpy user writes)."""
    rng = np.random.default_rng(1)
    a, b = rng.random((n, n)), rng.random((n, n))
    a @ b
    return float(np.median([timed(lambda: a @ b) for _ in range(reps)]))


def rounds(n: int, threads: int, count: int) -> tuple[list[float], list[float]]:
    """(probe GFLOP/s, numpy GFLOP/s) of ``count`` A/B rounds."""
    from autotune import backends
    from autotune.install_probe.operands import build
    from autotune.install_probe.profile import Timing
    from autotune.install_probe.timing import measure

    be = backends.get("numpy-openblas")
    fl = float(flops_of("gemm", "square", n)[0])
    policy = Timing(min_reps=3, max_reps=15, rel_tol=0.02, point_budget_seconds=1.5)
    probe, direct, rng = [], [], np.random.default_rng(0)
    with be.threads(threads), threadpool_limits(threads):
        for _ in range(count):
            probe.append(fl / measure(build(be, "gemm", "square", n, 0, rng), policy).median / 1e9)
            direct.append(fl / numpy_time(n) / 1e9)
    return probe, direct


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=2048, help="dgemm size")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7, help="A/B rounds")
    p.add_argument("--out", metavar="FILE.json")


def run(args) -> int:
    """Time the rounds, print the summary line, write --out."""
    problem = output_problem("--out", args.out) or ("" if min(args.n, args.threads, args.rounds) >= 1 else
                                                    "--n, --threads and --rounds must be positive")
    if problem:
        return error("bench probe", problem, 2)
    probe, direct = rounds(args.n, args.threads, args.rounds)
    ratios = np.array(probe) / np.array(direct)
    res = {"n": args.n, "threads": args.threads, "rounds": args.rounds,
           "probe_gflops_median": float(np.median(probe)), "numpy_gflops_median": float(np.median(direct)),
           "ratio_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
           "ratio_max": float(ratios.max()), "probe_gflops": probe, "numpy_gflops": direct}
    print(f"n={args.n} threads={args.threads}: probe {res['probe_gflops_median']:.2f} GFLOP/s, "
          f"numpy {res['numpy_gflops_median']:.2f} GFLOP/s, ratio median {res['ratio_median']:.3f} "
          f"(min {res['ratio_min']:.3f}, max {res['ratio_max']:.3f}, {args.rounds} A/B rounds)")
    if args.out:
        write_json(args.out, res)
    return 0
