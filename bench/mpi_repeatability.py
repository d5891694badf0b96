"""Repeatability of the distributed runs: the same plans measured in two or more rounds of
``autotune bench mpi-validate`` (its ``--out`` files; each phase there is already the median of its runs).

    python bench/mpi_repeatability.py ROUND_A.json ROUND_B.json [ROUND_C.json ...]

Per phase (measured > 1 ms in both rounds, as the accuracy criterion counts it), over every
(n, plan) two rounds share: the median of d = |a - b| / max(a, b), the share of pairs with
d > 10%, and the floor this puts on any fixed prediction. For every prediction x,
|x - a|/a + |x - b|/b >= d, so on one of the two rounds the mean absolute percentage error
is at least mean(d)/2, whatever the model.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np

PHASES = ("distribution", "communication", "compute", "collection", "total")
MIN_SECONDS = 1e-3


def measured(doc: dict) -> dict:
    """(n, plan) -> the measured phases of one ``autotune bench mpi-validate`` output."""
    return {(res["n"], row["plan"]): row["measured"] for res in doc["results"] for row in res["rows"]}


def differences(rounds: list[dict], phase: str) -> np.ndarray:
    """d = |a - b| / max(a, b) for every pair of rounds and every (n, plan) both measured."""
    out = []
    for a, b in itertools.combinations(rounds, 2):
        for key in a.keys() & b.keys():
            x, y = a[key].get(phase, 0.0), b[key].get(phase, 0.0)
            if x > MIN_SECONDS and y > MIN_SECONDS:
                out.append(abs(x - y) / max(x, y))
    return np.asarray(out)


def table(rounds: list[dict]) -> list[str]:
    lines = ["| phase | pairs | median d | d > 10% | floor: mean(d)/2 |", "|---|---|---|---|---|"]
    for phase in PHASES:
        d = differences(rounds, phase)
        if d.size:
            lines.append(f"| {phase} | {d.size} | {np.median(d):.1%} | {np.mean(d > 0.1):.0%} | {d.mean() / 2:.1%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", nargs="+", help="mpi-validate --out files of the same family and platform")
    args = ap.parse_args(argv)
    if len(args.rounds) < 2:
        ap.error("need at least two rounds")
    docs = []
    for path in args.rounds:
        with open(path) as fh:
            docs.append(measured(json.load(fh)))
    print("\n".join(table(docs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
