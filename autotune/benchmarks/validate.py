"""``autotune bench validate``: every candidate against its prediction, on sizes on and off the
probe grid.

For each problem (square sizes, rectangular gemm shapes, each thread budget) every ranked
candidate is forced with ``config=`` and timed (median of repeated runs; Cholesky factors a fresh
copy in place so only the algorithm is timed). Reports each prediction's absolute percentage error
(APE) and the regret t(chosen) / t(best measured), re-timed A/B. Candidates predicted slower than
``--max-ratio`` x the best are skipped. Accuracy is scored on the pure model prediction; the choice
(and so the regret) also includes the selector's charges (incumbent margin, thread-pool contention).

    autotune bench validate --out RESULTS/validate.json --markdown RESULTS/validate.md \\
        --plot RESULTS/validate.png          # RESULTS: any directory outside the checkout
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from autotune.benchmarks._common import output_problem, probed_sp, write_json, write_text
from autotune.cli.common import add_db_argument
from autotune.core.families import FAMILIES, as_problem
from autotune.db import load_sp
from autotune.select import as_candidate, rank

HELP = "every candidate timed against its prediction: model error and regret"
GEMM = [(n, n, n) for n in (200, 384, 700, 1024, 1500, 2048, 3000)] + [
    (2000, 200, 2000), (4000, 1000, 500), (500, 3000, 500), (3000, 64, 3000)]
CHOL = [(n,) for n in (100, 256, 500, 1000, 1500, 2048, 3000, 4000)]
# LU and solve off the probe's grids (getrf: 32..4096 by powers of 2 and 1.5x; getrs: nrhs 1, 4, 16, 64, 256).
LU = [(n,) for n in (100, 300, 700, 1200, 1800, 2500, 3500)]
SOLVE = [(100, 10), (300, 40), (700, 10), (1200, 100), (1800, 40), (2500, 10), (3500, 100)]
PROBLEMS = {"gemm": GEMM, "cholesky": CHOL, "lu": LU, "solve": SOLVE}
# Pause between candidates when threads are involved: a library's pool spins for a while after a
# call and would slow the next candidate's warm-up (measured in isolation, as the model predicts).
SETTLE_SECONDS = 0.3


def runner(routine: str, dims: tuple[int, ...], cand, rng):
    from autotune.install_probe.validate_runs import candidate_runner

    return candidate_runner(routine, dims, cand, rng)


def measure(fn, budget: float, reps: int) -> tuple[float, float]:
    """Median and relative spread (IQR / median) of up to ``reps`` runs within ``budget`` seconds."""
    fn()
    times, start = [], time.perf_counter()
    while len(times) < reps and (len(times) < 3 or time.perf_counter() - start < budget):
        times.append(fn())
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float(med), float((q3 - q1) / med)


def sweep(routine: str, dims, threads: int, args, rng) -> dict:
    """One problem, one pass: rank the candidates, time each one not skipped, score it."""
    dec = rank(as_problem(routine, dims), load_sp(args.db), threads, allow_strassen=args.strassen)
    best_pred = min(r.predicted for r in dec.ranking)
    rows = []
    for r in dec.ranking:
        row = {"candidate": str(r.candidate), "config": r.candidate.as_dict(), "predicted": r.predicted,
               "ranked_by": r.seconds}
        if r.predicted > args.max_ratio * best_pred and r.candidate != dec.chosen:
            row["skipped"] = True
        rows.append(row)
    result = {"routine": routine, "dims": list(dims), "threads": threads,
              "chosen": str(dec.chosen), "chosen_config": dec.chosen.as_dict(), "candidates": rows}
    remeasure(result, rng, args)
    return result


def remeasure(result: dict, rng, args) -> None:
    """Time every candidate of ``result`` not skipped once more, keeping each one's fastest pass:
    passes minutes apart let a disturbance of this shared machine hit a candidate in only one."""
    previous_threads = 1
    for row in result["candidates"]:
        if row.get("skipped"):
            continue
        threads = row["config"]["threads"]
        if threads > 1 or previous_threads > 1:
            time.sleep(SETTLE_SECONDS)           # let the last library's thread pool go idle
        previous_threads = threads
        cand = as_candidate(row["config"], result["routine"])
        med, spread = measure(runner(result["routine"], tuple(result["dims"]), cand, rng), args.seconds, args.reps)
        if med < row.get("measured", np.inf):
            row["measured"], row["spread"] = med, spread
        row["passes"] = row.get("passes", 0) + 1
        row["ape"] = abs(row["predicted"] - row["measured"]) / row["measured"] * 100


def finish(result: dict, rng, args) -> dict:
    """Best measured candidate and the regret of the choice, re-timed side by side."""
    ran = [x for x in result["candidates"] if "measured" in x]
    best = min(ran, key=lambda x: x["measured"])
    chosen = next(x for x in ran if x["config"] == result["chosen_config"])
    result["best"] = best["candidate"]
    result["regret_sequential"] = chosen["measured"] / best["measured"]
    result["regret"] = 1.0 if best is chosen else paired_regret(
        result["routine"], tuple(result["dims"]), as_candidate(chosen["config"], result["routine"]),
        best["config"], args, rng)
    return result


def paired_regret(routine: str, dims, chosen, best_config: dict, args, rng) -> float:
    """t(chosen) / t(best) re-timed side by side (A/B pairs, order alternating, median of the pair
    ratios), so drift of this noisy machine between the sweep's candidates cannot fake a regret.
    Below 1 (the sweep's "best" was a lucky draw) it counts as 1. Each timed call follows an untimed
    one of the same candidate: after the settling pause a thread pool is asleep, and a lone small
    call would time the pool's wake-up."""
    runs = [runner(routine, dims, c, rng) for c in (chosen, as_candidate(best_config, routine))]
    for run in runs:
        run()
    ratios, threaded = [], chosen.threads > 1 or best_config["threads"] > 1
    for i in range(max(3, args.pairs)):
        t = {}
        for run in (runs if i % 2 == 0 else runs[::-1]):
            if threaded:                         # the other library's pool must not spin into this run
                time.sleep(SETTLE_SECONDS)
            run()                                # wakes this candidate's pool, warms its caches
            t[id(run)] = run()
        ratios.append(t[id(runs[0])] / t[id(runs[1])])
    return max(1.0, float(np.median(ratios)))


def summarise(results: list[dict], min_seconds: float = 1e-3) -> dict:
    """APE median and p90 over predictions of at least ``min_seconds``, and the regrets."""
    apes = np.array([c["ape"] for r in results for c in r["candidates"]
                     if "ape" in c and c["predicted"] >= min_seconds])
    regrets = np.array([r["regret"] for r in results])
    return {"problems": len(results), "candidates_scored": int(apes.size),
            "ape_median": float(np.median(apes)) if apes.size else None,
            "ape_p90": float(np.percentile(apes, 90)) if apes.size else None,
            "within_5pct": float(np.mean(regrets <= 1.05)), "regret_mean": float(regrets.mean()),
            "regret_max": float(regrets.max())}


def markdown(results: list[dict], summary: dict) -> str:
    """The summary and one table row per problem."""
    ape = ("no candidate predicted >= 1 ms" if summary["ape_median"] is None else
           f"APE median {summary['ape_median']:.1f}%, p90 {summary['ape_p90']:.1f}%")
    lines = [f"Problems: {summary['problems']}; candidates scored (predicted >= 1 ms): "
             f"{summary['candidates_scored']}; {ape}; within 5% of best: {summary['within_5pct']:.0%}; "
             f"mean regret {summary['regret_mean']:.3f} (max {summary['regret_max']:.3f})", "",
             "Regret: chosen vs best re-timed side by side (A/B pairs); the sweep's sequential ratio beside it.", "",
             "| problem | threads | chosen | best measured | regret | sequential | median APE |",
             "|---|---:|---|---|---:|---:|---:|"]
    for r in results:
        apes = [c["ape"] for c in r["candidates"] if "ape" in c]
        lines.append(f"| {r['routine']} {'x'.join(map(str, r['dims']))} | {r['threads']} | {r['chosen']} | "
                     f"{r['best']} | {r['regret']:.3f} | {r.get('regret_sequential', r['regret']):.3f} | "
                     f"{np.median(apes):.1f}% |")
    return "\n".join(lines)


def plot(results: list[dict], filename: str) -> None:
    """Predicted against measured for every candidate, and the regret per problem."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for routine, colour in zip(PROBLEMS, ("C0", "C1", "C3", "C4"), strict=True):   # C2: the regret bars
        pts = [(c["predicted"], c["measured"]) for r in results if r["routine"] == routine
               for c in r["candidates"] if "measured" in c]
        if pts:
            p, m = np.array(pts).T
            ax1.loglog(m, p, ".", color=colour, label=routine, alpha=0.6)
    lim = ax1.get_xlim()
    ax1.plot(lim, lim, "k-", lw=0.8)
    ax1.set(xlabel="measured (s)", ylabel="predicted (s)", title="every candidate: predicted vs measured")
    ax1.legend()
    labels = [f"{r['routine'][:4]} {'x'.join(map(str, r['dims']))} t{r['threads']}" for r in results]
    ax2.bar(range(len(results)), [r["regret"] for r in results], color="C2")
    ax2.axhline(1.05, color="r", lw=0.8, ls="--")
    ax2.set_xticks(range(len(results)), labels, rotation=90, fontsize=6)
    ax2.set_ylim(0.95, max(1.2, max(r["regret"] for r in results) + 0.02))
    ax2.set(ylabel="regret t(chosen)/t(best)", title="regret per problem")
    fig.tight_layout()
    fig.savefig(filename, dpi=110)
    plt.close(fig)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="square sizes for both routines (default: off-grid sizes and rectangular gemm shapes)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--routines", nargs="+", choices=list(PROBLEMS), default=["gemm", "cholesky"])
    p.add_argument("--strassen", action="store_true", help="include Strassen candidates")
    p.add_argument("--max-ratio", type=float, default=6.0, help="skip candidates predicted slower than this x best")
    p.add_argument("--seconds", type=float, default=1.0, help="time budget per candidate")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--pairs", type=int, default=7, help="A/B pairs re-timing chosen against best (regret)")
    p.add_argument("--passes", type=int, default=2,
                   help="sweeps over all problems (alternately reversed); each candidate keeps its fastest")
    p.add_argument("--out", metavar="FILE.json")
    p.add_argument("--markdown", metavar="FILE.md")
    p.add_argument("--plot", metavar="FILE.png")


def _problems(args) -> list[tuple[str, tuple[int, ...], int]]:
    if not args.sizes:
        sizes = PROBLEMS
    else:
        sizes = {routine: [FAMILIES[routine].square(n).dims for n in args.sizes] for routine in PROBLEMS}
    return [(routine, dims, t) for t in args.threads for routine in args.routines for dims in sizes[routine]]


def _input_problem(args) -> str:
    if any(n < 1 for n in args.sizes or [1]) or any(t < 1 for t in args.threads) or min(args.reps, args.passes) < 1:
        return "--sizes, --threads, --reps and --passes must be positive"
    problems = [output_problem(f"--{option}", getattr(args, option)) for option in ("out", "markdown", "plot")]
    return next((p for p in problems if p), "")


def run(args) -> int:
    """Sweep every problem ``--passes`` times, score it, print and write the results."""
    sp, status = probed_sp("validate", args.db, _input_problem(args))
    if sp is None:
        return status
    rng = np.random.default_rng(0)
    results = [sweep(routine, dims, t, args, rng) for routine, dims, t in _problems(args)]
    for i in range(1, args.passes):
        for r in (reversed(results) if i % 2 else results):
            remeasure(r, rng, args)
    for r in results:
        finish(r, rng, args)
        apes = [c["ape"] for c in r["candidates"] if "ape" in c]
        print(f"{r['routine']} {'x'.join(map(str, r['dims']))} t={r['threads']}: chose {r['chosen']}, "
              f"best {r['best']}, regret {r['regret']:.3f}, median APE {np.median(apes):.1f}%", flush=True)
    summary = summarise(results)
    print(json.dumps(summary, indent=2))
    if args.out:
        write_json(args.out, {"summary": summary, "results": results})
    if args.markdown:
        write_text(args.markdown, markdown(results, summary))
    if args.plot:
        plot(results, args.plot)
    return 0
