"""``autotune bench dropin``: the drop-in promise, case by case (issue 61's acceptance).

Each case is a tuned call and the numpy/scipy call it replaces on the same operands in the layouts
users pass: gemm on C.C, C.Ct (one buffer), Ct.C, F.F, F.C, column-strided views and submatrices
of a larger array; Cholesky of C- and F-ordered input, both triangles; LU and solve on C-, F-ordered
and transposed input; and two programs (``loop``: C = A @ B, S = C @ C.T + n I, Cholesky of S, LU of
C, a solve; ``gp``: a Gaussian-process step, kernel matrix, Cholesky, ``solve(assume_a="pos")``).
A round times reference, tuned, reference (blocks of calls interleaved, the reference's two places
swapping); the ratio of a round is tuned time over the mean reference time (the promise: at most
1.05). Before the rounds the tuned call runs until the run-time guard settled its choice, as it
does in a program; ``--cold`` leaves that out. Reported per case: median ratio, spread (half the
interquartile range over the median) and the A/A ratio of the two reference blocks (the noise).

    autotune bench dropin [--sizes 100 700 1500 3000] [--only gemm cholesky lu solve loop gp]
                          [--rounds 7] [--db PATH] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from autotune.api import tuned_cholesky, tuned_gemm, tuned_lu_factor, tuned_solve
from autotune.benchmarks._common import half_iqr, output_problem, write_json
from autotune.benchmarks.calls import spd_matrix
from autotune.cli.common import add_db_argument, error
from autotune.core.assumptions import GUARD_MAX_ROUNDS
from autotune.feedback import guard
from autotune.settings import options

HELP = "tuned calls vs numpy/scipy on every operand layout and two programs (tuned / reference)"
SIZES = (100, 700, 1500, 3000)          # off the probe's power-of-two grid
GROUPS = ("gemm", "cholesky", "lu", "solve", "loop", "gp")
TARGET = 1.05


@dataclass(frozen=True)
class Case:
    """One benchmarked call: a label and the (tuned, reference) callables on shared operands."""

    group: str
    layout: str
    n: int
    tuned: Callable[[], object]
    reference: Callable[[], object]

    @property
    def key(self) -> str:
        return f"{self.group} {self.layout} n={self.n}"


def _gemm_operands(rng, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The layouts' operands of an n x n x n product (views of larger arrays where they are views)."""
    c, d = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    f, g = np.asfortranarray(c), np.asfortranarray(d)
    wide = rng.standard_normal((n, 2 * n))
    big = rng.standard_normal((n + 37, n + 53))
    return {"C.C": (c, d), "C.Ct": (c, c.T), "Ct.C": (c.T, d), "F.F": (f, g), "F.C": (f, d),
            "cols": (wide[:, ::2], wide[:, 1::2].T), "sub": (big[5:5 + n, 7:7 + n], big[30:30 + n, 40:40 + n])}


def gemm_cases(rng, n: int) -> list[Case]:
    return [Case("gemm", name, n, lambda a=a, b=b: tuned_gemm(a, b), lambda a=a, b=b: a @ b)
            for name, (a, b) in _gemm_operands(rng, n).items()]


def cholesky_cases(rng, n: int) -> list[Case]:
    out = []
    for order in "CF":
        s = spd_matrix(rng, n, order=order)
        for lower in (False, True):
            out.append(Case("cholesky", f"{order} {'lower' if lower else 'upper'}", n,
                            lambda s=s, lo=lower: tuned_cholesky(s, lower=lo),
                            lambda s=s, lo=lower: linalg.cholesky(s, lower=lo)))
    return out


def _general(rng, n: int) -> dict[str, np.ndarray]:
    c = rng.standard_normal((n, n)) + n ** 0.5 * np.eye(n)
    return {"C": c, "F": np.asfortranarray(c), "T": c.T}


def lu_cases(rng, n: int) -> list[Case]:
    return [Case("lu", name, n, lambda a=a: tuned_lu_factor(a), lambda a=a: linalg.lu_factor(a))
            for name, a in _general(rng, n).items()]


def solve_cases(rng, n: int) -> list[Case]:
    b = rng.standard_normal(n)
    return [Case("solve", name, n, lambda a=a: tuned_solve(a, b), lambda a=a: linalg.solve(a, b))
            for name, a in _general(rng, n).items()]


def loop_cases(rng, n: int) -> list[Case]:
    """The whole-program loop of issue 61, tuned and with numpy + scipy."""
    a, b, v = rng.standard_normal((n, n)), rng.standard_normal((n, n)), rng.standard_normal(n)
    eye = n * np.eye(n)

    def body(mm, chol, lu, solve):
        c = mm(a, b)
        s = mm(c, c.T) + eye
        return chol(s), lu(c), solve(c, v)
    return [Case("loop", "program", n, lambda: body(tuned_gemm, tuned_cholesky, tuned_lu_factor, tuned_solve),
                 lambda: body(np.matmul, linalg.cholesky, linalg.lu_factor, linalg.solve))]


def gp_cases(rng, n: int) -> list[Case]:
    """A Gaussian-process step: squared-exponential kernel matrix, its Cholesky, the weights."""
    x, y = rng.standard_normal((n, 3)), rng.standard_normal(n)
    sq = (x * x).sum(1)

    def body(mm, chol, solve):
        d2 = sq[:, None] + sq[None, :] - 2.0 * mm(x, x.T)
        k = np.exp(-0.5 * np.maximum(d2, 0.0)) + 1e-2 * np.eye(n)
        return chol(k, lower=True), solve(k, y, assume_a="pos")
    return [Case("gp", "program", n, lambda: body(tuned_gemm, tuned_cholesky, tuned_solve),
                 lambda: body(np.matmul, linalg.cholesky, linalg.solve))]


BUILDERS = {"gemm": gemm_cases, "cholesky": cholesky_cases, "lu": lu_cases, "solve": solve_cases,
            "loop": loop_cases, "gp": gp_cases}


def _block(fn: Callable[[], object], reps: int) -> float:
    """Seconds per call of ``reps`` calls in a row (the previous result lives while the next is made)."""
    keep = None
    t0 = time.perf_counter()
    for _ in range(reps):
        keep = fn()
    del keep
    return (time.perf_counter() - t0) / reps


def measure(case: Case, rounds: int, seconds: float, cold: bool) -> dict:
    """A case's rounds: reference, tuned, reference blocks; its ratios, spread and A/A ratios."""
    if not cold:
        guard.reset()
        for _ in range(2 * GUARD_MAX_ROUNDS + 1):     # the guard's trial, as a program's first calls
            case.tuned()
            if all(t.verdict is not None for t in guard.verdicts().values()):
                break
    one = max(_block(case.reference, 1), _block(case.tuned, 1), 1e-6)
    reps = max(1, min(200, int(seconds / rounds / 3 / one)))
    ratios, aa, tuned_s, ref_s = [], [], [], []
    for i in range(rounds):
        r1, t, r2 = _block(case.reference, reps), _block(case.tuned, reps), _block(case.reference, reps)
        if i % 2:
            r1, r2 = r2, r1
        ratios.append(t / ((r1 + r2) / 2))
        aa.append(r1 / r2)
        tuned_s.append(t)
        ref_s.append((r1 + r2) / 2)
    med = float(np.median(ratios))
    return {"case": case.key, "group": case.group, "layout": case.layout, "n": case.n, "reps": reps,
            "ratio_median": med, "ratio_spread": half_iqr(ratios), "aa_median": float(np.median(aa)),
            "aa_spread": half_iqr(aa), "tuned_ms": 1e3 * float(np.median(tuned_s)),
            "reference_ms": 1e3 * float(np.median(ref_s)), "ratios": ratios, "holds": med <= TARGET}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="orders (off the probe's grid)")
    p.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), metavar="GROUP",
                   help=f"groups of cases ({', '.join(GROUPS)})")
    p.add_argument("--rounds", type=int, default=7, help="rounds of interleaved blocks per case")
    p.add_argument("--seconds", type=float, default=1.5, help="about how long a case's rounds take")
    p.add_argument("--threads", type=int, default=None, help="options(threads=) for the tuned calls")
    p.add_argument("--cold", action="store_true", help="time from the first call (the guard's trial included)")
    add_db_argument(p)
    p.add_argument("--out", default=None, help="write the results as JSON here")


def run(args) -> int:
    problem = output_problem("--out", args.out)
    if args.rounds < 1 or args.seconds <= 0 or any(n < 2 for n in args.sizes):
        problem = problem or "--rounds must be >= 1, --seconds > 0 and every size >= 2"
    if problem:
        return error("bench dropin", problem, 2)
    rng = np.random.default_rng(61)
    results = []
    with options(db=args.db, threads=args.threads):
        for group in args.only:
            for n in args.sizes:
                for case in BUILDERS[group](rng, n):
                    r = measure(case, args.rounds, args.seconds, args.cold)
                    results.append(r)
                    print(line(r), flush=True)
    held = sum(r["holds"] for r in results)
    print(f"{held} of {len(results)} case(s) at tuned/reference <= {TARGET} (median); worst "
          f"{max(results, key=lambda r: r['ratio_median'])['case'] if results else '-'}")
    if args.out:
        write_json(args.out, {"command": "autotune bench dropin", "target": TARGET, "db": args.db,
                              "threads": args.threads, "cold": args.cold, "results": results})
    return 0


def line(r: dict) -> str:
    mark = "" if r["holds"] else "  ABOVE TARGET"
    return (f"{r['case']:28s} tuned/ref {r['ratio_median']:6.3f} ±{r['ratio_spread']:5.1%}  A/A "
            f"{r['aa_median']:5.3f} ±{r['aa_spread']:5.1%}  tuned {r['tuned_ms']:9.3f} ms  ref "
            f"{r['reference_ms']:9.3f} ms{mark}")
