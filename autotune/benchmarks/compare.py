"""``autotune bench compare A.h5 B.h5``: how repeatable the probe is: k of one routine compared
between two databases (for example two runs of the same profile).

Prints, per (library, threads), the median and worst relative difference of k (as the runtime
reads it; ``--drift`` divides out the probe's reference timings first) over the common sizes of
the pattern from ``--min-size`` on; exits 1 if any exceeds ``--tol``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from autotune.cli.common import error
from autotune.db import DatabaseError, load
from autotune.db.lookup import drift_corrected_k

HELP = "repeatability of the probe: k compared between two databases"


def table(path: str, routine: str, pattern: str, drift: bool = False) -> dict:
    """(backend, threads, param, x) -> k as the runtime sees it (drift-corrected with ``drift``)."""
    recs = load(path, check_machine=False).records
    ks = drift_corrected_k(recs) if drift else recs["k"]
    sel = (recs["routine"] == routine.encode()) & (recs["pattern"] == pattern.encode())
    return {(r["backend"].decode(), int(r["threads"]), float(r["param"]), int(r["x"])): float(k)
            for r, k in zip(recs[sel], ks[sel], strict=True)}


def differences(ta: dict, tb: dict, min_size: int) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """(backend, threads) -> [(size, |k_a / k_b - 1|)] over the common keys from ``min_size`` on."""
    groups: dict = {}
    for key in sorted(k for k in ta.keys() & tb.keys() if k[3] >= min_size):
        groups.setdefault(key[:2], []).append((key[3], abs(ta[key] / tb[key] - 1)))
    return groups


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A.h5")
    p.add_argument("b", metavar="B.h5")
    p.add_argument("--routine", default="gemm")
    p.add_argument("--pattern", default="square")
    p.add_argument("--min-size", type=int, default=256)
    p.add_argument("--tol", type=float, default=0.05, help="largest relative difference accepted")
    p.add_argument("--drift", action="store_true", help="divide out the probe's drift reference first")


def run(args) -> int:
    """Print the differences per (library, threads) and the worst; exit 1 beyond --tol."""
    tables = []
    for path in (args.a, args.b):
        if not Path(path).is_file():
            return error("bench compare", f"{path}: no such database", 2)
        try:
            tables.append(table(path, args.routine, args.pattern, args.drift))
        except (DatabaseError, OSError) as exc:
            return error("bench compare", f"{path}: {exc}", 2)
    groups = differences(*tables, args.min_size)
    if not groups:
        return error("bench compare", f"no {args.routine} {args.pattern} size >= {args.min_size} measured in both", 2)
    worst = 0.0
    for (be, t), diffs in sorted(groups.items()):
        d = np.array([v for _, v in diffs])
        worst = max(worst, float(d.max()))
        print(f"{args.routine:6s} {be:16s} t={t}: {len(d):2d} sizes, median diff {np.median(d):6.2%}, "
              f"max {d.max():6.2%} (n={diffs[int(d.argmax())][0]})")
    print(f"worst relative difference {worst:.2%} (tolerance {args.tol:.0%})")
    return 0 if worst <= args.tol else 1
