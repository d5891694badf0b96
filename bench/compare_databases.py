"""Repeatability of the probe: compare k between two databases (e.g. two standard runs).

    python bench/compare_databases.py A.h5 B.h5 --routine gemm --min-size 256

Prints, per (backend, threads), the median and worst relative difference of k (as measured, as
the runtime reads it; ``--drift`` to divide out the probe's reference timings first) over the
common square-pattern sizes >= --min-size, and exits 1 if any exceeds --tol.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from autotune.db import load
from autotune.db.lookup import drift_corrected_k


def table(path: str, routine: str, pattern: str, drift: bool = False) -> dict:
    """(backend, threads, param, x) -> k as the runtime sees it (drift-corrected with ``drift``)."""
    recs = load(path, check_machine=False).records
    ks = drift_corrected_k(recs) if drift else recs["k"]
    sel = (recs["routine"] == routine.encode()) & (recs["pattern"] == pattern.encode())
    return {(r["backend"].decode(), int(r["threads"]), float(r["param"]), int(r["x"])): float(k)
            for r, k in zip(recs[sel], ks[sel], strict=True)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--routine", default="gemm")
    p.add_argument("--pattern", default="square")
    p.add_argument("--min-size", type=int, default=256)
    p.add_argument("--tol", type=float, default=0.05)
    p.add_argument("--drift", action="store_true", help="divide out the probe's drift reference first")
    args = p.parse_args()
    ta, tb = (table(x, args.routine, args.pattern, args.drift) for x in (args.a, args.b))
    common = sorted(k for k in ta.keys() & tb.keys() if k[3] >= args.min_size)
    groups: dict = {}
    for key in common:
        groups.setdefault(key[:2], []).append((key[3], abs(ta[key] / tb[key] - 1)))
    worst = 0.0
    for (be, t), diffs in sorted(groups.items()):
        d = np.array([v for _, v in diffs])
        at = diffs[int(d.argmax())][0]
        worst = max(worst, d.max())
        print(f"{args.routine:6s} {be:16s} t={t}: {len(d):2d} sizes, median diff {np.median(d):6.2%}, "
              f"max {d.max():6.2%} (n={at})")
    print(f"worst relative difference {worst:.2%} (tolerance {args.tol:.0%})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
