"""``autotune bench regress``: tuned calls against numpy/scipy, and regressions against a baseline.

Each case runs A/B interleaved in one process on shared operands under one thread budget: a round
times numpy/scipy, the tuned call (decision included), then numpy/scipy again (the two baseline
calls swap places every round). The ratio of a round is the mean baseline time over the tuned time
(above 1: tuned is faster); the ratio of its two baseline calls is the A/A ratio, which should be 1
and whose spread is the noise of this machine at that size. A case regresses when its median ratio
is below the baseline's by more than the noise measured in the same run (half the interquartile
range of its ratios or of its A/A ratios, whichever is larger, plus the baseline's own), and at
least ``--floor``.

    autotune bench regress --out RESULTS/regress.json                 # RESULTS: outside the checkout
    autotune bench regress --save-baseline BASELINE.json              # this machine's reference
    autotune bench regress --baseline BASELINE.json                   # exit 1 on a regression
    autotune bench regress --sizes 64 200 --threads 1 --rounds 15     # a quick look
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from autotune._version import __version__
from autotune.benchmarks._common import error, half_iqr, output_problem, quartiles, timed, write_json
from autotune.calls import CALLS
from autotune.config import options
from autotune.db import load_sp
from autotune.db.fingerprint import machine_fingerprint, mismatches
from autotune.families import FAMILIES, Problem
from autotune.plans import ALGORITHMS
from autotune.select import choose

HELP = "tuned calls vs numpy/scipy (A/B), regressions against a baseline"
SIZES = (64, 128, 256, 512, 1000, 1024, 2048, 3000, 4096)
RECT = ((2000, 200, 2000), (4000, 1000, 500), (500, 3000, 500), (128, 4096, 128), (3000, 64, 3000))
MAX_ROUNDS = 201
REQUIRED = ("case", "speedup_median", "speedup_q1", "speedup_q3")
# The families with Strassen candidates (``--strassen`` runs their sizes from 1000 up again).
STRASSEN = {family for algorithm, (family, _) in ALGORITHMS.items() if algorithm.startswith("strassen")}


@dataclass(frozen=True)
class Case:
    """One benchmarked problem: routine, dimensions, thread budget, Strassen allowed or not."""

    routine: str
    dims: tuple[int, ...]
    threads: int
    strassen: bool = False

    @property
    def problem(self) -> Problem:
        """Its typed problem: one size is the family's square problem of that order."""
        fam = FAMILIES[self.routine]
        return fam.square(self.dims[0]) if len(self.dims) == 1 else fam.of(self.dims)

    @property
    def key(self) -> str:
        s = "+strassen" if self.strassen else ""
        return f"{self.routine}{s} {'x'.join(map(str, self.dims))} t={self.threads}"


class BaselineError(ValueError):
    """A baseline that cannot be compared with: missing, damaged or from another machine."""


def cases(sizes, rect, budgets, routines, strassen: bool) -> list[Case]:
    """Every case of the run, thread budget by thread budget, family by family: its square
    problems, the ``rect`` shapes of as many dimensions as its problems, and with ``strassen`` the
    sizes from 1000 up again with Strassen allowed where it has Strassen candidates."""
    out, chosen = [], [r for r in FAMILIES if r in routines]      # in FAMILIES' order
    for t in budgets:
        for routine in chosen:
            ndims = len(FAMILIES[routine].problem.dim_names)
            out += [Case(routine, _square_dims(routine, n), t) for n in sizes]
            out += [Case(routine, tuple(d), t) for d in rect if len(d) == ndims]
            if strassen and routine in STRASSEN:
                out += [Case(routine, _square_dims(routine, n), t, True) for n in sizes if n >= 1000]
    return out


def _square_dims(routine: str, n: int) -> tuple[int, ...]:
    """A square case's dims as its key shows them: the dims of the order-n problem that are its
    order (a solve's right-hand sides are the checks' CHECK_NRHS, left out of the key)."""
    return tuple(d for d in FAMILIES[routine].square(n).dims if d == n)


def _calls(case: Case, rng):
    """(baseline, tuned) zero-argument callables on shared operands (a Cholesky matrix built without
    BLAS: a spinning numpy pool would skew the first rounds)."""
    problem, calls = case.problem, CALLS[case.routine]
    operands = calls.operands(problem, rng)
    return (lambda: calls.reference(problem, *operands)), (lambda: calls.tuned(problem, *operands))


def _rounds(base, tuned, rounds: int, seconds: float) -> tuple[list[float], list[float], list[float]]:
    """Baseline-before, tuned and baseline-after times of at least ``rounds`` rounds (more while
    ``seconds`` last, up to MAX_ROUNDS); the two baseline calls swap places every round."""
    first, tt, last, start = [], [], [], time.perf_counter()
    while len(tt) < max(rounds, 1) or (len(tt) < MAX_ROUNDS and time.perf_counter() - start < seconds):
        a, t, b = timed(base), timed(tuned), timed(base)
        first.append(a if len(tt) % 2 == 0 else b)
        last.append(b if len(tt) % 2 == 0 else a)
        tt.append(t)
    return first, tt, last


def run_case(case: Case, rounds: int, seconds: float, db: str | None) -> dict:
    """Time one case and summarise its ratios, A/A ratios and the selector's choice."""
    rng = np.random.default_rng(abs(hash(case.dims)) % 2**32)
    base, tuned = _calls(case, rng)
    with threadpool_limits(case.threads), options(threads=case.threads, allow_strassen=case.strassen, db=db):
        base(), tuned()                                 # warm-up, first decision, library loads
        first, tt, last = _rounds(base, tuned, rounds, seconds)
        choice = _choice(case, db)
    b1, t, b2 = np.array(first), np.array(tt), np.array(last)
    ratio, aa = (b1 + b2) / 2 / t, b1 / b2
    q1, med, q3 = quartiles(ratio)
    aq1, amed, aq3 = quartiles(aa)
    return {"case": case.key, "routine": case.routine, "dims": list(case.dims), "threads": case.threads,
            "strassen": case.strassen, "pairs": len(t), "speedup_median": med, "speedup_q1": q1,
            "speedup_q3": q3, "speedup_min": float(ratio.min()), "speedup_max": float(ratio.max()),
            "aa_median": amed, "aa_q1": aq1, "aa_q3": aq3, "noise": max(half_iqr(ratio), half_iqr(aa)),
            "baseline_ms": float(np.median((b1 + b2) / 2) * 1e3), "tuned_ms": float(np.median(t) * 1e3),
            "choice": choice}


def _choice(case: Case, db: str | None) -> str:
    sp = load_sp(db)
    if sp.table is None:
        return "fallback (no database)"
    return str(choose(case.problem, sp, case.threads, case.strassen).chosen)


def _refresh(path: str) -> str:
    return f"refresh it on this machine with `autotune bench regress --save-baseline {path}`"


def load_baseline(path: str, current: dict) -> tuple[dict, str]:
    """The baseline's results by case, and a note when it carries no fingerprint to check.
    Raises BaselineError (one line) for a missing or damaged file or another machine's baseline."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise BaselineError(f"baseline {path}: no such file; create it with "
                            f"`autotune bench regress --save-baseline {path}`")
    try:
        doc = json.loads(p.read_text())
        results = {r["case"]: r for r in doc["results"]}
        if not isinstance(doc.get("fingerprint", {}), dict):
            raise TypeError("its fingerprint is not a mapping")
        for r in results.values():
            for key in REQUIRED[1:]:
                if not float(r[key]) > 0:
                    raise ValueError(f"{r['case']}: {key} {r[key]!r} is not a positive ratio")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BaselineError(f"baseline {path} is damaged ({type(exc).__name__}: {exc}); {_refresh(path)}") from None
    stored = doc.get("fingerprint")
    if stored is None:
        return results, f"baseline {path} records no machine fingerprint: compared as is"
    differ = mismatches(stored, current)
    if differ:
        raise BaselineError(f"baseline {path} is from another machine or stack ({'; '.join(differ)}); {_refresh(path)}")
    return results, ""


def threshold(result: dict, base: dict, floor: float) -> float:
    """Relative drop of the median ratio that counts as a regression: this run's noise plus the
    baseline's (half-IQR of its ratios), at least ``floor``."""
    base_noise = base.get("noise", (base["speedup_q3"] - base["speedup_q1"]) / 2 / base["speedup_median"])
    return max(floor, result["noise"] + float(base_noise))


def compare(results: list[dict], baseline: dict[str, dict], floor: float) -> list[dict]:
    """Annotate each result found in the baseline with its change and threshold; returns the regressions."""
    flagged = []
    for r in results:
        b = baseline.get(r["case"])
        if b is None:
            continue
        r["baseline_speedup"] = float(b["speedup_median"])
        r["change"] = r["speedup_median"] / r["baseline_speedup"] - 1
        r["threshold"] = threshold(r, b, floor)
        r["regression"] = r["change"] < -r["threshold"]
        if r["regression"]:
            flagged.append(r)
    return flagged


def line(r: dict) -> str:
    """One case: median ratio [quartiles], A/A spread, times, choice, and the baseline verdict."""
    text = (f"{r['case']:30s} ratio {r['speedup_median']:6.3f} [{r['speedup_q1']:.3f}, {r['speedup_q3']:.3f}] "
            f"A/A {r['aa_median']:.3f} ({r['pairs']} rounds; {r['baseline_ms']:.3f} vs {r['tuned_ms']:.3f} ms) "
            f"{r['choice']}")
    if "change" in r:
        verdict = "REGRESSION" if r["regression"] else "ok"
        text += (f" | baseline {r['baseline_speedup']:.3f}: {r['change']:+.1%} "
                 f"(threshold {r['threshold']:.1%}) {verdict}")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="square sizes (default: 64..4096 plus rectangular gemm shapes)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread budgets")
    p.add_argument("--routines", nargs="+", choices=list(FAMILIES),
                   default=["gemm", "cholesky"], help="default: gemm cholesky (the baselines' cases)")
    p.add_argument("--strassen", action="store_true", help="also run gemm n >= 1000 with Strassen allowed")
    p.add_argument("--rounds", type=int, default=7, help="A/B rounds per case at least")
    p.add_argument("--seconds", type=float, default=2.0,
                   help=f"keep adding rounds for this long per case (up to {MAX_ROUNDS})")
    p.add_argument("--floor", type=float, default=0.05, help="smallest relative drop flagged as a regression")
    p.add_argument("--baseline", metavar="FILE", help="flag regressions against this baseline (exit 1)")
    p.add_argument("--save-baseline", metavar="FILE", help="store this run as the machine's baseline")
    p.add_argument("--out", metavar="FILE.json", help="write the results here")


def _input_problem(args) -> str:
    if args.rounds < 1 or any(t < 1 for t in args.threads) or any(n < 1 for n in args.sizes or [1]):
        return "--rounds, --threads and --sizes must be positive"
    if args.seconds < 0 or args.floor < 0:
        return "--seconds and --floor must not be negative"
    return output_problem("--out", args.out) or output_problem("--save-baseline", args.save_baseline)


def run(args) -> int:
    """Run the cases, print one line each, write --out / --save-baseline, compare with --baseline."""
    problem = _input_problem(args)
    if problem:
        return error("regress", problem)
    fingerprint = machine_fingerprint()
    baseline, note = {}, ""
    if args.baseline:
        try:
            baseline, note = load_baseline(args.baseline, fingerprint)
        except BaselineError as exc:
            return error("regress", str(exc))
    sizes, rect = (args.sizes, ()) if args.sizes else (SIZES, RECT)
    results = []
    for case in cases(sizes, rect, args.threads, args.routines, args.strassen):
        results.append(run_case(case, args.rounds, args.seconds, args.db))
        compare(results[-1:], baseline, args.floor)
        print(line(results[-1]), flush=True)
    doc = {"fingerprint": fingerprint, "machine": platform.processor() or platform.machine(),
           "python": sys.version.split()[0], "numpy": np.__version__, "autotune": __version__, "results": results}
    for path in (args.out, args.save_baseline):
        if path:
            write_json(path, doc)
    return _verdict(args, results, baseline, note)


def _verdict(args, results: list[dict], baseline: dict, note: str) -> int:
    if not args.baseline:
        return 0
    if note:
        print(f"note: {note}")
    compared = [r for r in results if "change" in r]
    if not compared:
        return error("regress", f"baseline {args.baseline} has none of this run's cases; "
                                f"{_refresh(args.baseline)} or run its sizes and threads")
    flagged = [r for r in compared if r["regression"]]
    print(f"{len(flagged)} regression(s) in {len(compared)} case(s) compared with {args.baseline}"
          + "".join(f"\nREGRESSION {r['case']}: ratio {r['speedup_median']:.3f} vs baseline "
                    f"{r['baseline_speedup']:.3f} ({r['change']:+.1%}, threshold {r['threshold']:.1%})"
                    for r in flagged))
    return 1 if flagged else 0
