"""Re-score saved ``mpi_validate`` runs with the current analytical models, without re-timing:
each distributed row's analytical prediction is replaced, then ``mpi_validate.summarise`` gives
the median APE per phase (one-process rows keep their saved prediction).

    python bench/mpi_rescore.py DB P FAMILY RUN.json...      # P: the platform's world size
"""
from __future__ import annotations

import json
import re
import sys

from mpi_validate import summarise  # run as a script: bench/ is on sys.path

from autotune.db import load_sp
from autotune.db.comm import load_comm
from autotune.plans import Plan
from autotune.select.distributed import predict

PLAN = re.compile(r"(\w+) p=(\d+) grid=(\d+)x(\d+)(?: b=(\d+))?(?: l=(\d+))? \[([\w-]+), (\d+)t\]")


def parse(text: str) -> Plan | None:
    """The Plan a result row names (``str(plan)``); None for the one-process row."""
    m = PLAN.match(text)
    if not m or m.group(1) == "local":
        return None
    alg, p, r, c, b, level, backend, threads = m.groups()
    return Plan(alg, int(p), int(r), int(c), int(b or 0), int(level or 0), int(threads), backend)


def rescore(results: list[dict], family: str, sp, cp) -> list[dict]:
    """``results`` with every distributed row's ``model`` predicted by the current code."""
    for res in results:
        dims = (res["n"],) if family == "cholesky" else (res["n"],) * 3
        for row in res["rows"]:
            plan = parse(row["plan"])
            if plan is not None:
                row["model"] = predict(family, dims, plan, sp, cp, fitted=False)
    return results


if __name__ == "__main__":
    db, nprocs, family = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sp, cp = load_sp(db), load_comm(db, nprocs=nprocs)
    results = [res for path in sys.argv[4:] for res in json.load(open(path))["results"]]
    ape = summarise(rescore(results, family, sp, cp))["ape_median_analytical"]
    print(" ".join(f"{k} {v:.1f}" for k, v in ape.items() if v is not None))
