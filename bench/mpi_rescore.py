"""Median APE per phase (phases > 1 ms) of the current analytical models on saved ``mpi_validate``
runs, without re-timing (one-process rows left out):

    python bench/mpi_rescore.py DB P FAMILY RUN.json...      # P: the platform's world size
"""
from __future__ import annotations

import json
import re
import sys

import numpy as np

from autotune.db import load_sp
from autotune.db.comm import load_comm
from autotune.distributed.plan import PHASES, Plan
from autotune.select.distributed import predict

PLAN = re.compile(r"(\w+) p=(\d+) grid=(\d+)x(\d+)(?: b=(\d+))?(?: l=(\d+))? \[([\w-]+), (\d+)t\]")


def parse(text: str) -> Plan | None:
    """The Plan a result row names (None for the one-process row)."""
    m = PLAN.match(text)
    if not m or m.group(1) == "local":
        return None
    alg, p, r, c, b, level, backend, threads = m.groups()
    return Plan(alg, int(p), int(r), int(c), int(b or 0), int(level or 0), int(threads), backend)


def main(db: str, nprocs: int, family: str, files: list[str]) -> dict[str, float]:
    sp, cp = load_sp(db), load_comm(db, nprocs=nprocs)
    apes: dict[str, list[float]] = {k: [] for k in (*PHASES, "total")}
    for path in files:
        for res in json.load(open(path))["results"]:
            dims = (res["n"],) if family == "cholesky" else (res["n"],) * 3
            for row in res["rows"]:
                plan = parse(row["plan"])
                if plan is None:
                    continue
                mod = predict(family, dims, plan, sp, cp, fitted=False)
                for k, v in apes.items():
                    if row["measured"][k] > 1e-3:
                        v.append(abs(mod[k] / row["measured"][k] - 1) * 100)
    return {k: float(np.median(v)) for k, v in apes.items() if v}


if __name__ == "__main__":
    out = main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    print(" ".join(f"{k} {v:.1f}" for k, v in out.items()))
