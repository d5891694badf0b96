"""``autotune bench drift``: how much this machine's speed wanders: one dgemm per library in
turn, for a while.

Each line: clock time, then GFLOP/s (median of ``--seconds`` of calls) of each library's
1-thread dgemm on the probe's operands. If these wander by more than a tolerance over the length
of a probe run, two probe runs cannot agree within it either.

    autotune bench drift --minutes 10 --n 1024 > RESULTS/drift.txt    # RESULTS: outside the checkout
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from autotune.cli.common import error

HELP = "how much this machine's dgemm speed wanders over minutes"
BACKENDS = ("numpy-openblas", "scipy-openblas", "blis", "numba-reference")


def gflops(be, call, n: int, seconds: float) -> float:
    """GFLOP/s of the median call over ``seconds`` of back-to-back calls at one thread."""
    with be.threads(1):
        times, start = [], time.perf_counter()
        while not times or time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            call.run(1)
            times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / float(np.median(times)) / 1e9


def _calls(n: int) -> dict:
    """library -> (backend, probe gemm call at n) for every library installed, warmed up."""
    from autotune import backends as bk
    from autotune.install_probe.operands import build

    rng, calls = np.random.default_rng(0), {}
    for name in BACKENDS:
        try:
            be = bk.get(name)
        except bk.BackendUnavailable:
            continue
        calls[name] = (be, build(be, "gemm", "square", n, 0.0, rng))
        gflops(*calls[name], n, 0.1)                       # load, compile, warm
    return calls


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=10.0, help="how long to keep timing")
    p.add_argument("--n", type=int, default=1024, help="dgemm size")
    p.add_argument("--seconds", type=float, default=1.0, help="timing window per library and line")


def run(args) -> int:
    """Print a line of GFLOP/s per window until --minutes pass, then each library's range."""
    if args.n < 1 or args.minutes < 0 or args.seconds < 0:
        return error("bench drift", "--n must be positive, --minutes and --seconds not negative", 2)
    calls = _calls(args.n)
    print("# time " + " ".join(calls), flush=True)
    rows, end = [], time.time() + 60 * args.minutes
    while not rows or time.time() < end:
        rows.append([gflops(be, call, args.n, args.seconds) for be, call in calls.values()])
        print(time.strftime("%H:%M:%S"), " ".join(f"{g:.1f}" for g in rows[-1]), flush=True)
    for name, col in zip(calls, np.array(rows).T, strict=True):
        print(f"# {name}: min {col.min():.1f} median {np.median(col):.1f} max {col.max():.1f} GFLOP/s, "
              f"range {col.max() / col.min() - 1:.1%}", flush=True)
    return 0
