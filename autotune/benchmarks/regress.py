"""``autotune bench regress``: tuned calls against numpy/scipy, and a CI gate against a baseline.

Each case runs A/B interleaved in one process on shared operands under one thread budget: a round
times numpy/scipy, the tuned call (decision included), then numpy/scipy again (the two reference
calls swap places every round). The ratio of a round is the mean reference time over the tuned time
(above 1: tuned is faster); the ratio of its two reference calls is the A/A ratio, which should be 1
and whose spread is the noise of this machine at that size.

A case fails when its median ratio fell below the baseline's by more than its threshold, or when
it is below ``--fail-below``. The threshold of a case is

    max(--threshold, min(--max-threshold, run noise + baseline spread))

(defaults 10% and 25%): run noise is half the interquartile range of this run's ratios or A/A
ratios, whichever is larger, relative to its median; baseline spread is the baseline's recorded
noise. A noisy run or a baseline that claims to be noisy may raise it to ``--max-threshold``,
never further. ``--rounds N`` runs exactly N rounds per case; without it rounds are added for
``--seconds`` (default 2) per case, from 7 up to 201.

Exit status: 0 every case passed, 1 a regression or a case below ``--fail-below`` (one line on
stderr says why), 2 bad arguments or an unusable baseline, 130 interrupted (Ctrl-C: what was
measured is written to ``--out`` / ``--junit`` marked interrupted).

    autotune bench regress --save-baseline BASELINE.json              # this machine's reference
    autotune bench regress --baseline BASELINE.json --fail-below 0.95 --junit report.xml --out results.json
    autotune bench regress --sizes 64 200 --threads 1 --rounds 15     # a quick look
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.benchmarks._common import (
    error,
    half_iqr,
    output_problem,
    quartiles,
    timed,
    write_json,
)
from autotune.benchmarks.calls import CALLS
from autotune.benchmarks.regress_report import document, line, write_junit
from autotune.cli.common import add_db_argument
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import ALGORITHMS
from autotune.db import load_sp
from autotune.db.fingerprint import machine_fingerprint, mismatches
from autotune.select import choose
from autotune.settings import options

HELP = "tuned calls vs numpy/scipy (A/B), a CI gate against a baseline"
SIZES = (64, 128, 256, 512, 1000, 1024, 2048, 3000, 4096)
RECT = ((2000, 200, 2000), (4000, 1000, 500), (500, 3000, 500), (128, 4096, 128), (3000, 64, 3000))
MIN_ROUNDS, MAX_ROUNDS, SECONDS = 7, 201, 2.0
THRESHOLD, MAX_THRESHOLD = 0.10, 0.25
INTERRUPTED = 130
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


@dataclass(frozen=True)
class Rounds:
    """How many A/B rounds a case gets: from ``least`` to ``most``, adding rounds while ``seconds`` last."""

    least: int = MIN_ROUNDS
    most: int = MAX_ROUNDS
    seconds: float = SECONDS

    @classmethod
    def of(cls, rounds: int | None, seconds: float | None) -> Rounds:
        """Exactly ``rounds`` when given, else time-filled for ``seconds`` (default SECONDS)."""
        if rounds is not None:
            return cls(rounds, rounds, 0.0)
        return cls(seconds=SECONDS if seconds is None else seconds)


@dataclass(frozen=True)
class Rule:
    """What fails a case: a drop beyond its threshold (see ``threshold``) or a ratio below ``fail_below``."""

    threshold: float = THRESHOLD
    max_threshold: float = MAX_THRESHOLD
    fail_below: float | None = None


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
    """(reference, tuned) zero-argument callables on shared operands (a Cholesky matrix built without
    BLAS: a spinning numpy pool would skew the first rounds)."""
    problem, calls = case.problem, CALLS[case.routine]
    operands = calls.operands(problem, rng)
    return (lambda: calls.reference(problem, *operands)), (lambda: calls.tuned(problem, *operands))


def _rounds(base, tuned, plan: Rounds) -> tuple[list[float], list[float], list[float], bool]:
    """Reference-before, tuned and reference-after times of the rounds ``plan`` asks for (the two
    reference calls swap places every round), and whether Ctrl-C stopped them (the round it
    interrupted is dropped)."""
    first, tt, last, start = [], [], [], time.perf_counter()
    try:
        while len(tt) < plan.least or (len(tt) < plan.most and time.perf_counter() - start < plan.seconds):
            a, t, b = timed(base), timed(tuned), timed(base)
            first.append(a if len(tt) % 2 == 0 else b)
            last.append(b if len(tt) % 2 == 0 else a)
            tt.append(t)
    except KeyboardInterrupt:
        return first, tt, last, True
    return first, tt, last, False


def run_case(case: Case, plan: Rounds, db: str | None) -> dict:
    """Time one case and summarise its ratios, A/A ratios and the selector's choice. A case Ctrl-C
    stopped after at least one round is summarised with ``interrupted`` set (the caller ends the
    run there); Ctrl-C before its first round ended raises KeyboardInterrupt."""
    rng = np.random.default_rng(abs(hash(case.dims)) % 2**32)
    base, tuned = _calls(case, rng)
    with threadpool_limits(case.threads), options(threads=case.threads, allow_strassen=case.strassen, db=db):
        base(), tuned()                                 # warm-up, first decision, library loads
        first, tt, last, stopped = _rounds(base, tuned, plan)
        if not tt:
            raise KeyboardInterrupt
        choice = _choice(case, db)
    return {**_summary(case, np.array(first), np.array(tt), np.array(last)), "choice": choice,
            "interrupted": stopped}


def _summary(case: Case, b1: np.ndarray, t: np.ndarray, b2: np.ndarray) -> dict:
    """A case's ratio and A/A quartiles, its noise and median times from its rounds' times."""
    ratio, aa = (b1 + b2) / 2 / t, b1 / b2
    q1, med, q3 = quartiles(ratio)
    aq1, amed, aq3 = quartiles(aa)
    return {"case": case.key, "routine": case.routine, "dims": list(case.dims), "threads": case.threads,
            "strassen": case.strassen, "pairs": len(t), "speedup_median": med, "speedup_q1": q1,
            "speedup_q3": q3, "speedup_min": float(ratio.min()), "speedup_max": float(ratio.max()),
            "aa_median": amed, "aa_q1": aq1, "aa_q3": aq3, "noise": max(half_iqr(ratio), half_iqr(aa)),
            "baseline_ms": float(np.median((b1 + b2) / 2) * 1e3), "tuned_ms": float(np.median(t) * 1e3)}


def _choice(case: Case, db: str | None) -> str:
    sp = load_sp(db)
    if sp.table is None:
        return "fallback (no database)"
    return str(choose(case.problem, sp, case.threads, case.strassen).chosen)


def _refresh(path: str) -> str:
    return f"refresh it on this machine with `autotune bench regress --save-baseline {path}`"


def _check_result(r: dict) -> None:
    """Raise ValueError unless a baseline case's ratios are positive and its noise, if recorded, a spread."""
    for key in REQUIRED[1:]:
        if not float(r[key]) > 0:
            raise ValueError(f"{r['case']}: {key} {r[key]!r} is not a positive ratio")
    if "noise" in r and not (math.isfinite(float(r["noise"])) and float(r["noise"]) >= 0):
        raise ValueError(f"{r['case']}: noise {r['noise']!r} is not a spread")


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
            _check_result(r)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise BaselineError(f"baseline {path} is damaged ({type(exc).__name__}: {exc}); {_refresh(path)}") from None
    stored = doc.get("fingerprint")
    if stored is None:
        return results, f"baseline {path} records no machine fingerprint: compared as is"
    differ = mismatches(stored, current)
    if differ:
        raise BaselineError(f"baseline {path} is from another machine or stack ({'; '.join(differ)}); {_refresh(path)}")
    return results, ""


def baseline_spread(base: dict) -> float:
    """The baseline's recorded spread relative to its median: its noise, else half its IQR."""
    if "noise" in base:
        return float(base["noise"])
    return max(0.0, (base["speedup_q3"] - base["speedup_q1"]) / 2 / base["speedup_median"])


def threshold(result: dict, base: dict, rule: Rule) -> float:
    """Relative drop of the median ratio that fails a case: at least ``rule.threshold``; the run's
    noise plus the baseline's spread raise it up to ``rule.max_threshold`` and no further, so that
    neither a noisy run nor a baseline's own claim of noise can wave a regression through."""
    noise = float(result["noise"]) + baseline_spread(base)
    return max(rule.threshold, min(rule.max_threshold, noise if math.isfinite(noise) else math.inf))


def judge(r: dict, base: dict | None, rule: Rule) -> list[str]:
    """Annotate result ``r`` with its comparison with ``base`` (its baseline case, or None), with
    ``rule.fail_below``, its ``failures`` ({"kind": "regression" or "below", "message"}) and its
    ``status``; returns the failures' messages (empty: it passes). An interrupted case is not judged."""
    if base is not None:
        r["baseline_speedup"] = float(base["speedup_median"])
        r["change"] = r["speedup_median"] / r["baseline_speedup"] - 1
        r["threshold"] = threshold(r, base, rule)
        r["regression"] = r["change"] < -r["threshold"]
    if rule.fail_below is not None:
        r["fail_below"] = rule.fail_below
        r["below"] = r["speedup_median"] < rule.fail_below
    interrupted = bool(r.get("interrupted"))
    r["failures"] = [] if interrupted else _failures(r)
    r["status"] = "interrupted" if interrupted else "failed" if r["failures"] else "passed"
    return [f["message"] for f in r["failures"]]


def _failures(r: dict) -> list[dict]:
    """Why the judged result ``r`` fails, kind and message: a regression, a ratio below --fail-below."""
    out = []
    if r.get("regression"):
        out.append({"kind": "regression", "message": f"ratio {r['speedup_median']:.3f} vs baseline "
                    f"{r['baseline_speedup']:.3f} ({r['change']:+.1%}, threshold -{r['threshold']:.1%})"})
    if r.get("below"):
        out.append({"kind": "below",
                    "message": f"ratio {r['speedup_median']:.3f} below --fail-below {r['fail_below']:g}"})
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="square sizes (default: 64..4096 plus rectangular gemm shapes)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread budgets")
    p.add_argument("--routines", nargs="+", choices=list(FAMILIES),
                   default=["gemm", "cholesky"], help="default: gemm cholesky (the baselines' cases)")
    p.add_argument("--strassen", action="store_true", help="also run gemm n >= 1000 with Strassen allowed")
    p.add_argument("--rounds", type=int, default=None, help="exactly this many A/B rounds per case")
    p.add_argument("--seconds", type=float, default=None,
                   help=f"without --rounds: add rounds for this long per case, {MIN_ROUNDS} to {MAX_ROUNDS} "
                        f"(default {SECONDS:g})")
    p.add_argument("--threshold", "--floor", dest="threshold", type=float, default=THRESHOLD,
                   help=f"smallest relative drop of a case's median ratio that fails it (default {THRESHOLD:g})")
    p.add_argument("--max-threshold", type=float, default=MAX_THRESHOLD,
                   help=f"the most the run's noise and the baseline's spread raise it to (default {MAX_THRESHOLD:g})")
    p.add_argument("--fail-below", type=float, default=None, metavar="RATIO",
                   help="fail a case whose median ratio (numpy/scipy time over tuned time) is below RATIO")
    p.add_argument("--baseline", metavar="FILE", help="fail on a regression against this baseline (exit 1)")
    p.add_argument("--save-baseline", metavar="FILE", help="store this run as the machine's baseline")
    p.add_argument("--out", metavar="FILE.json", help="write the results here")
    p.add_argument("--junit", metavar="FILE.xml", help="write a JUnit XML report here (one testcase per case)")


def _input_problem(args) -> str:
    if (args.rounds is not None and args.rounds < 1) or any(t < 1 for t in args.threads) \
            or any(n < 1 for n in args.sizes or [1]):
        return "--rounds, --threads and --sizes must be positive"
    if args.rounds is not None and args.seconds:
        return "--rounds runs exactly that many rounds and --seconds fills time: give one of them"
    if args.seconds is not None and not args.seconds >= 0:
        return "--seconds must not be negative"
    if not (0 <= args.threshold < 1 and 0 <= args.max_threshold < 1):
        return "--threshold and --max-threshold are relative drops: from 0 to below 1"
    if args.fail_below is not None and not (args.fail_below > 0 and math.isfinite(args.fail_below)):
        return "--fail-below must be a positive ratio"
    outputs = (("--out", args.out), ("--save-baseline", args.save_baseline), ("--junit", args.junit))
    return next((problem for problem in (output_problem(o, path) for o, path in outputs) if problem), "")


def _measure(todo: list[Case], plan: Rounds, db: str | None, baseline: dict, rule: Rule) -> tuple[list[dict], bool]:
    """Run, judge and print the cases one by one; returns the results and whether Ctrl-C stopped the run."""
    results: list[dict] = []
    try:
        for case in todo:
            r = run_case(case, plan, db)
            judge(r, baseline.get(r["case"]), rule)
            results.append(r)
            print(line(r), flush=True)
            if r["interrupted"]:
                return results, True
    except KeyboardInterrupt:
        return results, True
    return results, False


def run(args) -> int:
    """Run the cases, print one line each, write --out / --save-baseline / --junit, and gate on
    --baseline and --fail-below."""
    problem = _input_problem(args)
    if problem:
        return error("bench regress", problem, 2)
    fingerprint = machine_fingerprint()
    baseline, note = {}, ""
    if args.baseline:
        try:
            baseline, note = load_baseline(args.baseline, fingerprint)
        except BaselineError as exc:
            return error("bench regress", str(exc), 2)
    rule = Rule(args.threshold, args.max_threshold, args.fail_below)
    sizes, rect = (args.sizes, ()) if args.sizes else (SIZES, RECT)
    todo = cases(sizes, rect, args.threads, args.routines, args.strassen)
    if baseline:
        print(f"threshold per case: {_rule_text(rule)}", flush=True)
    timestamp, start = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.perf_counter()
    results, interrupted = _measure(todo, Rounds.of(args.rounds, args.seconds), args.db, baseline, rule)
    run_info = {"timestamp": timestamp, "seconds": time.perf_counter() - start, "interrupted": interrupted,
                "cases": len(todo)}
    doc = document(args, fingerprint, results, run_info)
    written = _write(args, doc)
    if interrupted:
        where = f"; partial results in {', '.join(written)}" if written else ""
        done = doc["summary"]["complete"]
        return error("bench regress", f"interrupted after {done} of {len(todo)} case(s){where}", INTERRUPTED)
    return _verdict(args, doc, note)


def _rule_text(rule: Rule) -> str:
    if rule.threshold >= rule.max_threshold:
        return f"{rule.threshold:.1%} (fixed: --threshold is not below --max-threshold)"
    return f"max({rule.threshold:.1%}, min({rule.max_threshold:.1%}, run noise + baseline spread))"


def _write(args, doc: dict) -> list[str]:
    """Write the files asked for (an interrupted run is no baseline: --save-baseline is left as it
    was); returns their paths."""
    paths = [args.out] + ([] if doc["interrupted"] else [args.save_baseline])
    for path in filter(None, paths):
        write_json(path, doc)
    if args.junit:
        write_junit(args.junit, doc)
    return [p for p in (*paths, args.junit) if p]


def _verdict(args, doc: dict, note: str) -> int:
    """Print each failing case and a summary; the one-line reason on stderr and exit 1 if any failed."""
    if note:
        print(f"note: {note}")
    results, counts = doc["results"], doc["summary"]
    if args.baseline and not counts["compared"]:
        return error("bench regress", f"baseline {args.baseline} has none of this run's cases; "
                                f"{_refresh(args.baseline)} or run its sizes and threads", 2)
    failed = [r for r in results if r["failures"]]
    for r in failed:
        print("".join(f"FAIL {r['case']}: {f['message']}\n" for f in r["failures"]), end="")
    parts = ([f"{counts['regressions']} regression(s) in {counts['compared']} case(s) compared with {args.baseline}"]
             if args.baseline else []) \
        + ([f"{counts['below']} of {len(results)} case(s) below --fail-below {args.fail_below:g}"]
           if args.fail_below is not None else [])
    if parts:
        print("; ".join(parts), flush=True)
    if not failed:
        return 0
    return error("bench regress", f"{counts['failed']} of {len(results)} case(s) failed ({'; '.join(parts)}), "
                            f"first {failed[0]['case']}: {failed[0]['failures'][0]['message']}", 1)
