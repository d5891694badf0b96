"""``autotune bench mapping``: the mapping search methods (001 §5.4) on simulated platforms.

For each platform (``--processors`` x ``--heterogeneity``, built by
``db.platform.simulated_platform``, or ``--platform FILE.yaml``) and family: every method's and
modelled user's mapping, grid and block, its predicted time against the exhaustive optimum (where
the mappings to enumerate are at most ``--exhaustive-limit``) and against the best method, its
time to solution, tree depth and nodes (as 001 figs. 5.6-5.7, n = 20000). Pure computation.

    autotune bench mapping --processors 16 32 64 --heterogeneity low medium high --family lu --n 20000
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from autotune.cli.common import error
from autotune.db.platform import HETEROGENEITY, PlatformError, load_platform, parse_platform, simulated_platform
from autotune.models.mapping import FAMILIES
from autotune.select import mapping as sm

HELP = "mapping search methods vs exhaustive search on simulated platforms (001 §5.4)"
HEURISTICS = ("BTM", "BGRM", "GRM", "GCTM", "GPTM")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processors", type=int, nargs="*", default=[16, 32, 64], help="simulated platform sizes")
    p.add_argument("--heterogeneity", nargs="*", default=list(HETEROGENEITY), choices=list(HETEROGENEITY))
    p.add_argument("--platform", action="append", default=[], metavar="FILE.yaml", help="also a platform file")
    p.add_argument("--family", nargs="+", default=["lu"], choices=list(FAMILIES))
    p.add_argument("--n", type=int, nargs="+", default=[20000], help="matrix orders")
    p.add_argument("--methods", nargs="+", default=list(sm.METHODS + sm.USERS), choices=list(sm.METHODS + sm.USERS))
    p.add_argument("--max-level", type=int, default=None, help="deepest level (processes; default: all slots)")
    p.add_argument("--budget", type=int, default=sm.NODE_BUDGET, help="node budget of the backtracking methods")
    p.add_argument("--exhaustive-limit", type=int, default=60000,
                   help="run exhaustive search only where it enumerates at most this many mappings")
    p.add_argument("--out", default=None, metavar="FILE.json", help="write every choice here")


def mapping_count(platform) -> int:
    """Distinct mappings exhaustive search enumerates (a host's processors interchangeable)."""
    most = platform.max_per_processor
    return math.prod(math.comb(h.processors + most, most) for h in platform.hosts) - 1


def _platforms(args) -> list:
    out = [parse_platform(simulated_platform(P, deg), f"sim{P}-{deg}") for P in args.processors
           for deg in args.heterogeneity]
    return out + [load_platform(f) for f in args.platform]


def _row(st: sm.MappingStudy) -> dict:
    """The summary of one study: the best heuristic against exhaustive and the best method."""
    exh = st.of("exhaustive")
    heur = [c for c in st.choices if c.method in HEURISTICS]
    best = min(heur, key=lambda c: (round(c.estimate.seconds, 12), c.solve_seconds)) if heur else None
    row = {"platform": st.platform.name, "family": st.family, "n": st.n,
           "best_heuristic": best.method if best else None}
    if best is not None:
        row["ratio_best_method"] = best.estimate.seconds / st.best()
        if exh is not None:
            row["ratio_exhaustive"] = best.estimate.seconds / exh.estimate.seconds
            row["speedup"] = exh.solve_seconds / max(best.solve_seconds, 1e-9)
    return row


def _record(st: sm.MappingStudy) -> dict:
    return {"platform": st.platform.name, "family": st.family, "n": st.n, "choices": [
        {"method": c.method, "d": list(c.d), "p": c.p, "r": c.estimate.r, "c": c.estimate.c, "b": c.estimate.b,
         "seconds": c.estimate.seconds, "solve_seconds": c.solve_seconds, "depth": c.depth, "nodes": c.nodes,
         "complete": c.complete} for c in st.choices], "summary": _row(st)}


def summary_lines(rows: list[dict]) -> list[str]:
    lines = ["summary: the best heuristic (least predicted time, then fastest) per platform",
             f"  {'platform':18s} {'family':8s} {'n':>6s} {'heuristic':9s} {'/exh':>6s} {'/best':>6s} {'x faster':>9s}"]
    for r in rows:
        exh = f"{r['ratio_exhaustive']:6.3f}" if "ratio_exhaustive" in r else "     -"
        fast = f"{r['speedup']:9.0f}" if "speedup" in r else "        -"
        lines.append(f"  {r['platform']:18s} {r['family']:8s} {r['n']:6d} {r['best_heuristic'] or '-':9s} {exh} "
                     f"{r.get('ratio_best_method', math.nan):6.3f} {fast}")
    return lines


def run(args) -> int:
    try:
        platforms = _platforms(args)
    except PlatformError as e:
        return error("bench mapping", str(e), 2)
    if any(n < 1 for n in args.n):
        return error("bench mapping", "--n must be positive", 2)
    records = []
    for pl in platforms:
        methods = [m for m in args.methods if m != "exhaustive" or mapping_count(pl) <= args.exhaustive_limit]
        for fam in args.family:
            for n in args.n:
                st = sm.study(fam, n, pl, methods, args.max_level, args.budget)
                print(sm.describe(st), flush=True)
                records.append(_record(st))
    print("\n".join(summary_lines([r["summary"] for r in records])))
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1))
    return 0
