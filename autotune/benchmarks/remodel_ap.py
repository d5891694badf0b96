"""``autotune bench remodel-ap``: fitted models over the block (one T(n, b) per blocked series,
docs/models.md#fitted.polynomial) against per-block polynomials in n, on problems held out of
every fit.

Copies the database twice and runs the installer's validation step on each copy with the same
spec, once fitting a blocked series over its blocks and once one polynomial in n per block. Then,
on sizes off every check and fitting size, it ranks each problem with both copies, times every
candidate either ranking keeps within ``--max-ratio`` of its best (each timed once for both, the
sweep repeated in reverse), and scores each copy's choice: its regret t(chosen) / t(best measured),
re-timed side by side against the best as ``bench validate`` does, and the median error of its
predictions. Results only where ``--out``/``--markdown`` say.

    autotune bench remodel-ap --db DB --out RESULTS/remodel-ap.json --markdown RESULTS/remodel-ap.md
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from autotune.benchmarks._common import output_problem, probed_sp, write_json, write_text
from autotune.benchmarks.validate import SETTLE_SECONDS, measure, paired_regret, runner
from autotune.cli.common import add_db_argument
from autotune.core.families import FAMILIES, as_problem
from autotune.db import load_sp
from autotune.select import clear_cache, rank

HELP = "one fitted T(n, b) per blocked series vs per-block polynomials in n, on held-out problems"
# Off the probe's grid and off every validation spec's check and fitting sizes.
SIZES = (260, 600, 1000, 1650)
MODELS = ("over blocks", "per block")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p, "a probed database (read only: the validation runs on copies)")
    p.add_argument("--spec", default="install", help="validation spec (install, quick, standard, full, or a file)")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="held-out orders")
    p.add_argument("--routines", nargs="+", choices=["cholesky", "lu"], default=["cholesky", "lu"])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--max-ratio", type=float, default=3.0, help="time candidates predicted within this x the best")
    p.add_argument("--seconds", type=float, default=0.5, help="time budget per candidate and pass")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--pairs", type=int, default=7, help="A/B pairs re-timing a choice against the best")
    p.add_argument("--work", default=None, help="directory for the two database copies (default: a temporary one)")
    p.add_argument("--out", metavar="FILE.json")
    p.add_argument("--markdown", metavar="FILE.md")


def validated_copies(db: Path, spec_name: str, work: Path) -> dict[str, dict]:
    """Each model's database copy, validated with the spec (over blocks or not), and its summary."""
    from autotune.install_probe.validate import load_spec, validate

    spec = load_spec(spec_name)
    out = {}
    for name, over in zip(MODELS, (True, False), strict=True):
        copy = work / f"{name.replace(' ', '_')}.h5"
        shutil.copyfile(db, copy)
        report = validate(copy, replace(spec, over_blocks=over), progress=False)
        out[name] = {"db": str(copy), "summary": report.summary(),
                     "entries": [str(e) for e in report.entries if e.in_use]}
        print(f"{name}: {report.text().splitlines()[-1]}", flush=True)
    return out


def held_out(routine: str, n: int, threads: int, copies: dict[str, dict], args, rng) -> dict:
    """One problem: both rankings, every kept candidate timed (two passes), each choice scored."""
    problem = as_problem(routine, FAMILIES[routine].square(n).dims)
    decisions = {name: rank(problem, load_sp(c["db"]), threads) for name, c in copies.items()}
    keep = {}                                   # each copy's choice and the candidates near its best, in order
    for dec in decisions.values():
        best = min(r.predicted for r in dec.ranking)
        keep.update(dict.fromkeys([dec.chosen, *(r.candidate for r in dec.ranking
                                                 if r.predicted <= args.max_ratio * best)]))
    cands = list(keep)
    dims = problem.dims
    times = {c: np.inf for c in cands}
    for sweep in (cands, cands[::-1]):
        for c in sweep:
            if c.threads > 1:
                time.sleep(SETTLE_SECONDS)
            times[c] = min(times[c], measure(runner(routine, dims, c, rng), args.seconds, args.reps)[0])
    best = min(cands, key=times.get)
    row = {"routine": routine, "n": n, "threads": threads, "best": str(best), "candidates": len(cands)}
    for name, dec in decisions.items():
        pred = {r.candidate: r.predicted for r in dec.ranking}
        errors = [abs(pred[c] - times[c]) / times[c] * 100 for c in cands if c in pred]
        regret = 1.0 if dec.chosen == best else paired_regret(routine, dims, dec.chosen, best.as_dict(), args, rng)
        row[name] = {"chosen": str(dec.chosen), "regret": regret, "ape_median": float(np.median(errors))}
    return row


def summary(rows: list[dict]) -> dict:
    """Per model: mean and worst regret, share within 3%, median prediction error."""
    out = {}
    for name in MODELS:
        regrets = np.array([r[name]["regret"] for r in rows])
        out[name] = {"regret_mean": float(regrets.mean()), "regret_max": float(regrets.max()),
                     "within_3pct": float(np.mean(regrets <= 1.03)),
                     "ape_median": float(np.median([r[name]["ape_median"] for r in rows]))}
    return out


def markdown(rows: list[dict], summ: dict, copies: dict[str, dict]) -> str:
    lines = ["| model | fitted in use | mean regret | worst | within 3% | median APE |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in MODELS:
        s = summ[name]
        lines.append(f"| {name} | {len(copies[name]['entries'])} | {s['regret_mean']:.3f} | {s['regret_max']:.3f} | "
                     f"{s['within_3pct']:.0%} | {s['ape_median']:.1f}% |")
    lines += ["", "| problem | threads | best measured | " + " | ".join(f"{m}: chosen, regret" for m in MODELS) + " |",
              "|---|---:|---|" + "---|" * len(MODELS)]
    for r in rows:
        lines.append(f"| {r['routine']} {r['n']} | {r['threads']} | {r['best']} | "
                     + " | ".join(f"{r[m]['chosen']}, {r[m]['regret']:.3f}" for m in MODELS) + " |")
    return "\n".join(lines)


def _input_problem(args) -> str:
    if min(args.sizes) < 1 or min(args.threads) < 1 or args.reps < 1 or args.max_ratio < 1:
        return "--sizes, --threads and --reps must be positive, --max-ratio at least 1"
    return output_problem("--out", args.out) or output_problem("--markdown", args.markdown)


def run(args) -> int:
    """Validate two copies, then score both on the held-out problems."""
    sp, status = probed_sp("remodel-ap", args.db, _input_problem(args))
    if sp is None:
        return status
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        copies = validated_copies(Path(sp.path), args.spec, work)
        clear_cache()
        rng = np.random.default_rng(0)
        rows = []
        for routine in args.routines:
            for threads in args.threads:
                for n in args.sizes:
                    rows.append(held_out(routine, n, threads, copies, args, rng))
                    print(f"{routine} {n} t={threads}: best {rows[-1]['best']}; "
                          + "; ".join(f"{m} chose {rows[-1][m]['chosen']} (regret {rows[-1][m]['regret']:.3f})"
                                      for m in MODELS), flush=True)
    summ = summary(rows)
    for name, s in summ.items():
        print(f"{name}: mean regret {s['regret_mean']:.3f} (worst {s['regret_max']:.3f}), "
              f"median APE {s['ape_median']:.1f}%", flush=True)
    if args.out:
        write_json(args.out, {"summary": summ, "copies": copies, "rows": rows})
    if args.markdown:
        write_text(args.markdown, markdown(rows, summ, copies))
    return 0
