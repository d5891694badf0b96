"""``autotune bench rescore RUN.json --db DB``: a ``bench validate`` run re-scored against another
database or model version, without re-timing.

For each problem the candidates are re-ranked with the current code and ``--db``; each measured
candidate's prediction is replaced and its APE recomputed. The choice may change: its regret is
then the sweep's ratio t(new choice) / t(best) (sequential, not A/B), marked in the output.
``--retime`` re-times every problem whose choice was not the best with validate's A/B pairs (the
old value is kept).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from autotune.benchmarks._common import output_problem, write_json
from autotune.benchmarks.validate import finish, summarise
from autotune.cli.common import add_db_argument, error
from autotune.core.families import as_problem
from autotune.db import load_sp
from autotune.db.lookup import SystemParameters
from autotune.select import rank

HELP = "re-score a validate run against another database, without re-timing"


def rescore(results: list[dict], sp: SystemParameters, strassen: bool = False) -> tuple[list[dict], int]:
    """(results with new predictions, number of problems whose choice changed)."""
    changed = 0
    for r in results:
        dec = rank(as_problem(r["routine"], tuple(r["dims"])), sp, r["threads"], allow_strassen=strassen)
        pred = {str(x.candidate): x.predicted for x in dec.ranking}
        for c in r["candidates"]:
            if c["candidate"] in pred:
                c["predicted"] = pred[c["candidate"]]
                if "measured" in c:
                    c["ape"] = abs(c["predicted"] - c["measured"]) / c["measured"] * 100
        chosen = str(dec.chosen)
        ran = {c["candidate"]: c["measured"] for c in r["candidates"] if "measured" in c}
        if chosen != r["chosen"] and chosen in ran:
            changed += 1
            r["chosen"], r["chosen_config"] = chosen, dec.chosen.as_dict()
            r["regret"] = max(1.0, ran[chosen] / min(ran.values()))
            r["regret_rescored"] = True
    return results, changed


def retime(results: list[dict], pairs: int, rng) -> None:
    """Re-time chosen against best, A/B (validate.finish), for every problem whose choice was not the best."""
    args = argparse.Namespace(pairs=pairs)
    for r in results:
        if r["chosen"] != r["best"]:
            before = r["regret"]
            finish(r, rng, args)
            r["regret_before_retime"] = before
            print(f"{r['routine']} {r['dims']} t={r['threads']}: regret {before:.3f} -> {r['regret']:.3f} (A/B)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN.json", help="output of `autotune bench validate --out`")
    add_db_argument(p, "database to re-predict with", required=True)
    p.add_argument("--out", metavar="FILE.json")
    p.add_argument("--retime", action="store_true", help="re-time chosen vs best with A/B pairs")
    p.add_argument("--pairs", type=int, default=7)


def _load(path: str) -> list[dict]:
    """The results of a validate run, each with the keys re-scoring reads (KeyError if not)."""
    results = json.loads(Path(path).read_text())["results"]
    for r in results:
        missing = [k for k in ("routine", "dims", "threads", "candidates", "chosen", "best") if k not in r]
        if missing:
            raise KeyError(", ".join(missing))
    return results


def run(args) -> int:
    """Re-predict every candidate of RUN.json, print the new summary, write --out."""
    problem = output_problem("--out", args.out)
    if problem:
        return error("bench rescore", problem, 2)
    try:
        results = _load(args.run)
    except OSError as exc:
        return error("bench rescore", f"{args.run}: {exc.strerror or exc}", 2)
    except (ValueError, KeyError, TypeError) as exc:
        return error("bench rescore",
                     f"{args.run}: not an `autotune bench validate` output ({type(exc).__name__}: {exc})", 2)
    sp = load_sp(args.db)
    if sp.table is None:
        return error("bench rescore", f"--db {args.db}: no usable database ({sp.reason})", 2)
    results, changed = rescore(results, sp)
    if args.retime:
        retime(results, args.pairs, np.random.default_rng(1))
    summary = {**summarise(results), "choices_changed": changed}
    print(json.dumps(summary, indent=2))
    by_routine = {rt: [c["ape"] for r in results if r["routine"] == rt for c in r["candidates"]
                       if "ape" in c and c["predicted"] >= 1e-3] for rt in ("gemm", "cholesky")}
    print({rt: round(float(np.median(v)), 1) for rt, v in by_routine.items() if v})
    if args.out:
        write_json(args.out, {"summary": summary, "results": results})
    return 0
