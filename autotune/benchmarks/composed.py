"""``autotune bench composed``: a product then a factorisation, over and over, as programs do.

Per size and thread budget, side by side in rounds (blocks interleaved, A/B): ``tuned_gemm`` then
``tuned_cholesky`` in one loop, each of the two in a loop of its own, and the same three loops with
``a @ b`` and ``scipy.linalg.cholesky``. Each loop body keeps its results in variables, as user
code does (the previous results live while the next are computed). Reported per case: the
alternating loop over the sum of its two calls alone (what switching between them costs), and
numpy + scipy's alternating loop over the tuned one (the speed-up), as medians over the rounds
with their spread (half the interquartile range over the median).

    autotune bench composed [--sizes 128 256 512 1024] [--budgets 0 1] [--rounds 5] [--db PATH] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

import numpy as np
from scipy import linalg
from threadpoolctl import threadpool_limits

from autotune.api import tuned_cholesky, tuned_gemm
from autotune.benchmarks._common import half_iqr, output_problem, write_json
from autotune.cli.common import add_db_argument, error
from autotune.settings import options

HELP = "alternating gemm and Cholesky: tuned calls vs numpy + scipy, side by side"
SIZES = (128, 256, 512, 1024)
BLOCKS = ("tuned gemm", "tuned cholesky", "tuned alternating", "numpy gemm", "scipy cholesky",
          "numpy+scipy alternating")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="square orders")
    p.add_argument("--budgets", type=int, nargs="+", default=[0, 1],
                   help="thread budgets (0: the default, every core, nothing limited)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of interleaved blocks")
    p.add_argument("--seconds", type=float, default=0.2, help="about how long each loop runs per round")
    add_db_argument(p)
    p.add_argument("--out", metavar="FILE.json", help="write the results here")


def loops(n: int, seed: int = 0) -> dict[str, Callable[[int], float]]:
    """The six loops of one size: ``loop(reps)`` -> median seconds per iteration."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    x = a @ a.T + n * np.eye(n)

    def timed(body: Callable[[], object]) -> Callable[[int], float]:
        def loop(reps: int) -> float:
            times, keep = [], body()
            for _ in range(reps):
                t0 = time.perf_counter()
                keep = body()            # the previous results live while the next are computed
                times.append(time.perf_counter() - t0)
            del keep
            return float(np.median(times))
        return loop

    return {"tuned gemm": timed(lambda: tuned_gemm(a, a)),
            "tuned cholesky": timed(lambda: tuned_cholesky(x)),
            "tuned alternating": timed(lambda: (tuned_gemm(a, a), tuned_cholesky(x))),
            "numpy gemm": timed(lambda: a @ a),
            "scipy cholesky": timed(lambda: linalg.cholesky(x)),
            "numpy+scipy alternating": timed(lambda: (a @ a, linalg.cholesky(x)))}


def budget_context(budget: int):
    """The budget for both sides: tuned calls' option and numpy/scipy's library limits (0: defaults)."""
    if budget == 0:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(threadpool_limits(budget))
    stack.enter_context(options(threads=budget))
    return stack


def measure(n: int, budget: int, rounds: int, seconds: float) -> dict[str, list[float]]:
    """Per block, the per-iteration median of each round (blocks in a rotated order each round)."""
    fns, out = loops(n), {b: [] for b in BLOCKS}
    with budget_context(budget):
        reps = {b: max(5, int(seconds / max(fns[b](3), 1e-6))) for b in BLOCKS}
        for r in range(rounds):
            for b in BLOCKS[r % len(BLOCKS):] + BLOCKS[:r % len(BLOCKS)]:
                out[b].append(fns[b](reps[b]))
    return out


def summarise(n: int, budget: int, times: dict[str, list[float]]) -> dict:
    """Ratios per round, then their medians and spreads."""
    t = {b: np.array(v) for b, v in times.items()}
    ratio = t["tuned alternating"] / (t["tuned gemm"] + t["tuned cholesky"])
    base_ratio = t["numpy+scipy alternating"] / (t["numpy gemm"] + t["scipy cholesky"])
    speedup = t["numpy+scipy alternating"] / t["tuned alternating"]
    return {"n": n, "budget": budget, "ms": {b: float(np.median(v)) * 1e3 for b, v in t.items()},
            "ratio": float(np.median(ratio)), "ratio_spread": half_iqr(ratio),
            "base_ratio": float(np.median(base_ratio)), "speedup": float(np.median(speedup)),
            "speedup_spread": half_iqr(speedup)}


def table(rows: list[dict]) -> str:
    head = (f"{'n':>5} {'budget':>6} {'tuned alt ms':>12} {'alt/(g+c)':>10} {'numpy+scipy ms':>14} "
            f"{'their alt/(g+c)':>15} {'speed-up':>9}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['n']:>5} {r['budget'] or 'all':>6} {r['ms']['tuned alternating']:>12.3f} "
                     f"{r['ratio']:>6.2f}±{r['ratio_spread']:.2f} {r['ms']['numpy+scipy alternating']:>14.3f} "
                     f"{r['base_ratio']:>15.2f} {r['speedup']:>5.1f}±{r['speedup_spread']:.1f}")
    return "\n".join(lines)


def run(args) -> int:
    problem = output_problem("--out", args.out)
    if problem:
        return error("bench composed", problem, 2)
    if min(args.sizes) < 1 or min(args.budgets) < 0 or args.rounds < 1 or args.seconds <= 0:
        return error("bench composed", "sizes and --rounds must be positive, budgets >= 0, --seconds > 0", 2)
    rows = []
    with options(db=args.db):
        for n in args.sizes:
            for budget in args.budgets:
                rows.append(summarise(n, budget, measure(n, budget, args.rounds, args.seconds)))
                print(table(rows[-1:]).splitlines()[-1] if rows[:-1] else table(rows), flush=True)
    if args.out:
        write_json(args.out, {"benchmark": "composed", "rows": rows})
    return 0
