"""Regression benchmark: tuned_gemm vs numpy.matmul, tuned_cholesky vs scipy.linalg.cholesky.

Side by side in one process, A/B interleaved per case: each pair times the baseline then the
tuned call (decision overhead included) on the same operands, under the same thread budget
(threadpoolctl limits for the baseline, ``autotune.options(threads=...)`` for the tuned call).
Reports per case the median speedup (baseline time / tuned time) over pairs, its quartiles, and
the choice. ``--compare BASELINE.json`` flags cases whose median speedup fell below the
baseline's by more than a noise-aware threshold (ratios only, never absolute times).

    python bench/regress.py --out $RESULTS/regress.json       # RESULTS: any directory outside the checkout
    python bench/regress.py --compare bench/baselines/regress-xeon-2c.json        # the 2-core ~50 GF/s/core VM
    python bench/regress.py --compare bench/baselines/regress-epyc-avx512-2c.json # the 2-core ~110 GF/s/core VM
    python bench/regress.py --smoke          # a few tiny cases: checks the harness runs
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sl
from autotune.install_probe.operands import spd_matrix
from threadpoolctl import threadpool_limits

import autotune

SIZES = (64, 128, 256, 512, 1000, 1024, 2048, 3000, 4096)
RECT = ((2000, 200, 2000), (4000, 1000, 500), (500, 3000, 500), (128, 4096, 128), (3000, 64, 3000))
SMOKE_SIZES, SMOKE_RECT = (40, 96), ((64, 40, 80),)


@dataclass(frozen=True)
class Case:
    routine: str
    dims: tuple[int, ...]
    threads: int
    strassen: bool = False

    @property
    def key(self) -> str:
        s = "+strassen" if self.strassen else ""
        return f"{self.routine}{s} {'x'.join(map(str, self.dims))} t={self.threads}"


def cases(sizes, rect, budgets, strassen: bool) -> list[Case]:
    out = []
    for t in budgets:
        out += [Case("gemm", (n, n, n), t) for n in sizes] + [Case("gemm", d, t) for d in rect]
        out += [Case("cholesky", (n,), t) for n in sizes]
        if strassen:
            out += [Case("gemm", (n, n, n), t, True) for n in sizes if n >= 1000]
    return out


def _calls(case: Case, rng):
    """(baseline, tuned) zero-argument callables on shared operands."""
    if case.routine == "gemm":
        m, k, n = case.dims
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        return (lambda: np.matmul(a, b)), (lambda: autotune.tuned_gemm(a, b))
    (n,) = case.dims
    a = spd_matrix(rng, n, order="C")     # no BLAS call: a spinning numpy pool would skew the first pairs
    return (lambda: sl.cholesky(a)), (lambda: autotune.tuned_cholesky(a))


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_case(case: Case, max_seconds: float, min_pairs: int, max_pairs: int) -> dict:
    rng = np.random.default_rng(abs(hash(case.dims)) % 2**32)
    base, tuned = _calls(case, rng)
    with threadpool_limits(case.threads), autotune.options(threads=case.threads, allow_strassen=case.strassen):
        base(), tuned()                                 # warm-up, first decision, library loads
        tb, tt, start = [], [], time.perf_counter()
        while len(tb) < max_pairs and (len(tb) < min_pairs or time.perf_counter() - start < max_seconds):
            tb.append(_time(base))
            tt.append(_time(tuned))
        choice = _choice(case)
    ratio = np.array(tb) / np.array(tt)
    q1, med, q3 = np.percentile(ratio, [25, 50, 75])
    return {"case": case.key, "routine": case.routine, "dims": list(case.dims), "threads": case.threads,
            "strassen": case.strassen, "pairs": len(tb), "speedup_median": float(med),
            "speedup_q1": float(q1), "speedup_q3": float(q3), "speedup_min": float(ratio.min()),
            "speedup_max": float(ratio.max()), "baseline_ms": float(np.median(tb) * 1e3),
            "tuned_ms": float(np.median(tt) * 1e3), "choice": choice}


def _choice(case: Case) -> str:
    sp = autotune.load_sp(autotune.get_options().db)
    if sp.table is None:
        return "fallback (no database)"
    from autotune.select import choose

    dec = choose(case.routine, case.dims, sp, case.threads, case.strassen)
    return str(dec.chosen)


def compare(results: list[dict], baseline: dict, floor: float = 0.05) -> list[str]:
    """Cases whose median speedup dropped beyond max(floor, both runs' half-IQR) relative to the baseline."""
    old = {r["case"]: r for r in baseline["results"]}
    flagged = []
    for r in results:
        b = old.get(r["case"])
        if b is None:
            continue
        noise = max(floor, (r["speedup_q3"] - r["speedup_q1"]) / 2 / r["speedup_median"]
                    + (b["speedup_q3"] - b["speedup_q1"]) / 2 / b["speedup_median"])
        if r["speedup_median"] < b["speedup_median"] * (1 - noise):
            flagged.append(f"REGRESSION {r['case']}: speedup {r['speedup_median']:.3f} vs baseline "
                           f"{b['speedup_median']:.3f} (threshold {noise:.1%})")
    return flagged


def markdown(results: list[dict]) -> str:
    lines = ["| case | speedup median | IQR | pairs | baseline ms | tuned ms | choice |",
             "|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['case']} | {r['speedup_median']:.3f} | {r['speedup_q1']:.3f}–{r['speedup_q3']:.3f} | "
                     f"{r['pairs']} | {r['baseline_ms']:.3f} | {r['tuned_ms']:.3f} | {r['choice']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread budgets")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--routines", nargs="+", default=["gemm", "cholesky"])
    p.add_argument("--no-rect", action="store_true")
    p.add_argument("--strassen", action="store_true", help="also run gemm with Strassen allowed")
    p.add_argument("--seconds", type=float, default=2.0, help="time budget per case")
    p.add_argument("--min-pairs", type=int, default=7)
    p.add_argument("--max-pairs", type=int, default=201)
    p.add_argument("--smoke", action="store_true", help="tiny cases, 2 pairs: checks the harness runs")
    p.add_argument("--out", help="write JSON results here")
    p.add_argument("--markdown", help="write a Markdown table here")
    p.add_argument("--compare", metavar="BASELINE.json", help="flag regressions against a committed baseline")
    args = p.parse_args(argv)
    sizes = args.sizes or (SMOKE_SIZES if args.smoke else SIZES)
    rect = () if args.no_rect else (SMOKE_RECT if args.smoke else RECT)
    todo = [c for c in cases(sizes, rect, args.threads, args.strassen) if c.routine in args.routines]
    if args.smoke:
        args.seconds, args.min_pairs, args.max_pairs = 0.0, 2, 2
    results = []
    for case in todo:
        r = run_case(case, args.seconds, args.min_pairs, args.max_pairs)
        results.append(r)
        print(f"{r['case']:32s} speedup {r['speedup_median']:6.3f} [{r['speedup_q1']:.3f}, {r['speedup_q3']:.3f}] "
              f"({r['pairs']} pairs; {r['baseline_ms']:.3f} vs {r['tuned_ms']:.3f} ms) {r['choice']}", flush=True)
    doc = {"machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
           "numpy": np.__version__, "autotune": autotune.__version__, "results": results}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown(results) + "\n")
    if args.compare:
        with open(args.compare) as fh:
            flagged = compare(results, json.load(fh))
        print("\n".join(flagged) if flagged else "no regressions against the baseline")
        return 1 if flagged else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
