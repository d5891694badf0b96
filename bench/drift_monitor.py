"""How much this machine's speed wanders: time one dgemm per backend in turn for a while.

    python bench/drift_monitor.py --minutes 10 --n 1024 > $RESULTS/drift-monitor.txt    # RESULTS: outside the checkout

Each line: clock time, then GFLOP/s (median of ~1 s of calls) of each backend's 1-thread dgemm on
the probe's operands. If these wander by more than a tolerance over the length of a probe run,
two probe runs cannot agree within it either (issue 2's reproducibility point).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from autotune.install_probe.operands import build

from autotune import backends as bk

BACKENDS = ("numpy-openblas", "scipy-openblas", "blis", "numba-reference")


def gflops(be, call, n: int, seconds: float) -> float:
    """GFLOP/s of the median call over ``seconds`` of back-to-back calls at one thread."""
    with be.threads(1):
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            call.run(1)
            times.append(time.perf_counter() - t0)
    return 2.0 * n ** 3 / float(np.median(times)) / 1e9


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=1.0, help="timing window per backend and line")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    calls = {}
    for name in BACKENDS:
        try:
            be = bk.get(name)
        except bk.BackendUnavailable:
            continue
        calls[name] = (be, build(be, "gemm", "square", args.n, 0.0, rng))
        gflops(*calls[name], args.n, 0.1)                       # load, compile, warm
    print("# time " + " ".join(calls), flush=True)
    rows, end = [], time.time() + 60 * args.minutes
    while time.time() < end:
        rows.append([gflops(be, call, args.n, args.seconds) for be, call in calls.values()])
        print(time.strftime("%H:%M:%S"), " ".join(f"{g:.1f}" for g in rows[-1]), flush=True)
    data = np.array(rows)
    for name, col in zip(calls, data.T, strict=True):
        print(f"# {name}: min {col.min():.1f} median {np.median(col):.1f} max {col.max():.1f} GFLOP/s, "
              f"range {col.max() / col.min() - 1:.1%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
