"""``autotune bench placement``: tuned calls with ``comm=`` (their own placement and plan) against
plans forced on the same ranks, side by side, on a real or emulated cluster. Run under ``mpiexec``,
every rank a slot:

    autotune testbed up --hosts 2 --rate 10gbit --cpu 100 50
    autotune testbed mpiexec 2 python -m autotune.install_probe.cli --mpi --profile links.yaml --db DB
    autotune testbed mpiexec 2 autotune bench placement --db DB --n 2048 3072 --out R.json

For each family and order: the tuned call (decision included after the first call), the root
alone (the library call), every rank on every grid at each usable ``--blocks``, for gemm BSR
with equal rows, and for the factorizations the same grids with blocks by the hosts' measured
speeds (HoHe) where they differ. Rounds interleave them, ``--reps`` rounds after one warm-up; medians
kept. The root prints the tuned call's explanation, each median, the tuned call's time over the
best alternative's, and checks every result against numpy/scipy.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import time
from pathlib import Path

import numpy as np

from autotune.benchmarks.calls import CALLS, agrees
from autotune.benchmarks.mapping_testbed import args_problem, cluster_problem, plans
from autotune.cli.common import add_db_argument, error
from autotune.core.families import FAMILIES, usable_blocks
from autotune.core.plans import Plan
from autotune.db.comm_lookup import load_comm
from autotune.models.mapping import MODELS as MAPPING_MODELS
from autotune.settings import options

HELP = "tuned calls with comm= (their own placement) against forced plans, under mpiexec on a cluster"

# The families the mapping search places (``Family.mapping``).
MAPPED = [name for name, f in FAMILIES.items() if f.mapping]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", nargs="+", default=MAPPED, choices=MAPPED)
    p.add_argument("--n", type=int, nargs="+", default=[2048, 3072], help="matrix orders")
    p.add_argument("--blocks", type=int, nargs="+", default=[64, 128], help="blocks of the forced grids")
    p.add_argument("--reps", type=int, default=3, help="interleaved rounds after one warm-up")
    add_db_argument(p, "database with the BLAS SPs and the cluster's comm probe")
    p.add_argument("--out", default=None, metavar="FILE.json", help="the root writes the results here")


def alternatives(family: str, p: int, blocks, speeds: tuple[float, ...] | None = None) -> dict[str, Plan]:
    """The forced plans by label: the root alone and, on p > 1 ranks, every grid x block,
    gemm's equal-row BSR, and the factorizations' grids with blocks by the ranks' ``speeds``
    (mapping_testbed.plans)."""
    label = {"library": lambda q: "root alone", "cyclic": lambda q: f"{q.r}x{q.c} b={q.b}",
             "weighted": lambda q: f"{q.r}x{q.c}w b={q.b}" if q.b else "bsr equal rows"}
    out = {"root alone": plans(family, 1, blocks, None)[0][0]}
    if p > 1:
        # a HoHe plan of another algorithm's rows (gemm's BSR) runs with equal rows here
        weights = None if MAPPING_MODELS[family].weighted_rows else speeds
        out.update((label[layout](plan), plan) for plan, layout in plans(family, p, blocks, weights))
    return out


def rank_speeds(world, db) -> tuple[float, ...] | None:
    """Each rank's host speed as the comm probe measured it (None where a host was not)."""
    names = world.allgather(socket.gethostname())
    speeds = load_comm(db, nprocs=world.size).host_speeds
    return tuple(float(speeds[h]) for h in names) if all(h in speeds for h in names) else None


def _problem(world, family: str, n: int, args, speeds: tuple[float, ...] | None) -> dict:
    """Time the tuned call and the alternatives on one problem; the root's record."""
    prob, calls = cluster_problem(family, n), CALLS[family]
    ops = calls.operands(prob, np.random.default_rng(n)) if world.rank == 0 else (None,) * calls.count
    want = calls.reference(prob, *ops) if world.rank == 0 else None
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        first = calls.collective(prob, *ops, comm=world, explain=True)
    forced = alternatives(family, world.size, usable_blocks(n, args.blocks), speeds)
    runs = {"tuned": {}, **{k: {"config": v} for k, v in forced.items()}}
    times: dict[str, list[float]] = {k: [] for k in runs}
    correct = {"tuned": agrees(first, want) if world.rank == 0 else None}
    for i in range(args.reps + 1):
        for name in (list(runs) if i % 2 else list(runs)[::-1]):
            world.Barrier()
            t0 = time.perf_counter()
            res = calls.collective(prob, *ops, comm=world, **runs[name])
            if i:
                times[name].append(time.perf_counter() - t0)
            elif world.rank == 0 and name != "tuned":
                correct[name] = agrees(res, want)
    med = {k: float(np.median(v)) for k, v in times.items()}
    best = min((k for k in med if k != "tuned"), key=med.get)
    return {"family": family, "n": n, "explain": text.getvalue().strip(), "seconds": med, "best_alternative": best,
            "tuned_over_best": med["tuned"] / med[best], "correct": correct}


def lines(res: dict) -> list[str]:
    out = [f"{res['family']} n={res['n']}: tuned / best alternative ({res['best_alternative']}) = "
           f"{res['tuned_over_best']:.3f}; all correct: {all(res['correct'].values())}"]
    out += ["  " + x for x in res["explain"].splitlines()[:4]]
    out.append("  medians ms: " + "; ".join(f"{k} {v * 1e3:.1f}" for k, v in res["seconds"].items()))
    return out


def run(args) -> int:
    problem = args_problem(args)
    if problem:
        return error("bench placement", problem, 2)
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    world = MPI.COMM_WORLD
    results = []
    speeds = rank_speeds(world, args.db)
    with options(db=args.db), threadpool_limits(1, "blas"):
        for family in args.family:
            for n in args.n:
                res = _problem(world, family, n, args, speeds)
                if world.rank == 0:
                    results.append(res)
                    print("\n".join(lines(res)), flush=True)
    if world.rank == 0 and args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0
