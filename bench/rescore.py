"""Re-score a validate.py run against another database or model version without re-timing.

    python bench/rescore.py RUN.json --db DB.h5 [--retime]

For each problem, the candidates are re-ranked with the current code and ``--db``; each measured
candidate's prediction is replaced and its APE recomputed. The choice may change: its regret is
then the sweep's ratio t(new choice) / t(best) (sequential, not A/B), marked in the output.
``--retime`` re-times every problem whose choice was not the best with validate.py's A/B pairs (the
old value is kept).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from validate import finish, summarise  # run as a script: bench/ is on sys.path

import autotune
from autotune.select import rank


def rescore(results: list[dict], sp, strassen: bool = False) -> tuple[list[dict], int]:
    """(results with new predictions, number of problems whose choice changed)."""
    changed = 0
    for r in results:
        dec = rank(r["routine"], tuple(r["dims"]), sp, r["threads"], allow_strassen=strassen)
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--db", required=True)
    p.add_argument("--out")
    p.add_argument("--retime", action="store_true", help="re-time chosen vs best with A/B pairs")
    p.add_argument("--pairs", type=int, default=7)
    args = p.parse_args(argv)
    data = json.load(open(args.run))
    results, changed = rescore(data["results"], autotune.load_sp(args.db))
    if args.retime:
        retime(results, args.pairs, np.random.default_rng(1))
    summary = summarise(results)
    summary["choices_changed"] = changed
    print(json.dumps(summary, indent=2))
    by_routine = {rt: [c["ape"] for r in results if r["routine"] == rt for c in r["candidates"]
                       if "ape" in c and c["predicted"] >= 1e-3] for rt in ("gemm", "cholesky")}
    print({rt: round(float(np.median(v)), 1) for rt, v in by_routine.items() if v})
    if args.out:
        json.dump({"summary": summary, "results": results}, open(args.out, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
