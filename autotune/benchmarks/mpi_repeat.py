"""``autotune bench mpi-repeat ROUND_A.json ROUND_B.json [...]``: how repeatable the distributed
runs are: the same plans measured in two or more rounds of ``autotune bench mpi-validate`` (its
``--out`` files; each phase there is already the median of its runs).

Per phase (measured > 1 ms in both rounds, as the accuracy criterion counts it), over every
(n, plan) two rounds share: the median of d = |a - b| / max(a, b), the share of pairs with
d > 10%, and the floor this puts on any fixed prediction. For every prediction x,
|x - a|/a + |x - b|/b >= d, so on one of the two rounds the mean absolute percentage error
is at least mean(d)/2, whatever the model. Nothing is re-timed; results only where ``--out`` says.

    autotune bench mpi-repeat RESULTS/mpi-eval-gemm-P2-a.json RESULTS/mpi-eval-gemm-P2-b.json
"""
from __future__ import annotations

import argparse
import itertools
import json

import numpy as np

from autotune.benchmarks._common import output_problem, write_json
from autotune.cli.common import error

HELP = "repeatability of mpi-validate rounds: per-phase differences and the error floor they set"
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


def statistics(rounds: list[dict]) -> dict[str, dict]:
    """Per phase with any pair: pairs, median d, share of d > 10%, the floor mean(d)/2."""
    out = {}
    for phase in PHASES:
        d = differences(rounds, phase)
        if d.size:
            out[phase] = {"pairs": int(d.size), "median_d": float(np.median(d)),
                          "over_10pct": float(np.mean(d > 0.1)), "floor": float(d.mean() / 2)}
    return out


def table(stats: dict[str, dict]) -> list[str]:
    """The statistics as a Markdown table, a row per phase."""
    lines = ["| phase | pairs | median d | d > 10% | floor: mean(d)/2 |", "|---|---|---|---|---|"]
    lines += [f"| {phase} | {s['pairs']} | {s['median_d']:.1%} | {s['over_10pct']:.0%} | {s['floor']:.1%} |"
              for phase, s in stats.items()]
    return lines


def _load(path: str) -> dict:
    """The measured phases of one round (OSError, ValueError, KeyError or TypeError if it is not one)."""
    with open(path) as fh:
        return measured(json.load(fh))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("rounds", nargs="+", metavar="ROUND.json",
                   help="two or more `autotune bench mpi-validate --out` files of the same family and platform")
    p.add_argument("--out", metavar="FILE.json", help="write the per-phase statistics here")


def run(args) -> int:
    """Print the per-phase table of the rounds' differences; write --out."""
    problem = output_problem("--out", args.out) or ("" if len(args.rounds) >= 2 else "need at least two rounds")
    if problem:
        return error("bench mpi-repeat", problem, 2)
    rounds = []
    for path in args.rounds:
        try:
            rounds.append(_load(path))
        except OSError as exc:
            return error("bench mpi-repeat", f"{path}: {exc.strerror or exc}", 2)
        except (ValueError, KeyError, TypeError) as exc:
            return error("bench mpi-repeat", f"{path}: not an `autotune bench mpi-validate --out` file "
                                       f"({type(exc).__name__}: {exc})", 2)
    stats = statistics(rounds)
    print("\n".join(table(stats)))
    if args.out:
        write_json(args.out, {"rounds": args.rounds, "phases": stats})
    return 0
