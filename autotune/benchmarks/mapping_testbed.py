"""``autotune bench mapping-testbed``: every mapping, grid and block timed on a real (or emulated)
cluster, against what the mapping search methods chose (001 tables 5.3-5.4). Run under
``mpiexec`` on the cluster, every rank a slot (``autotune testbed mpiexec``):

    autotune testbed up --hosts 2 --rate 1gbit --cpu 100 50 --slots 2
    autotune testbed mpiexec 4 python -m autotune.install_probe.cli --mpi --profile links.yaml --db DB
    autotune testbed mpiexec 4 autotune bench mapping-testbed --db DB --family lu --n 1024 2048 --out R.json

The platform is the one the comm probe measured (``db.platform.measured_platform``: a processor
per host, its speed, the link types, and the mapping model's factors its phase calibration fitted,
as the tuned calls use it). A mapping puts ``d_h`` of a host's ranks to work (a
sub-communicator, ranks host by host); each (mapping, grid, block) runs ``--reps`` times, the
median root-to-root time kept, and its result is checked against numpy/scipy's. The root then
runs every method and user on the model and reports the measured time of each one's plan, the
ratio of the chosen plan to the best of all timed plans, and the greedy user's.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import time
from pathlib import Path

import numpy as np

from autotune.benchmarks._common import output_problem
from autotune.benchmarks.calls import CALLS, agrees, square
from autotune.cli.common import add_db_argument, error
from autotune.core.families import FAMILIES, Problem, usable_blocks
from autotune.core.plans import Plan, grids
from autotune.db import load_sp
from autotune.db.comm_lookup import load_comm
from autotune.db.platform import PlatformError, measured_platform
from autotune.entry.protocol import MPI_MISSING
from autotune.models.fitted_phases import platform_factors
from autotune.models.mapping import MODELS as MAPPING_MODELS
from autotune.models.mapping import database_k
from autotune.select import mapping as sm
from autotune.settings import options

HELP = "time every mapping/grid/block on a cluster (under mpiexec) against the mapping search's choices"


def add_arguments(p: argparse.ArgumentParser) -> None:
    mapped = [name for name, f in FAMILIES.items() if f.mapping]
    p.add_argument("--family", nargs="+", default=mapped, choices=mapped)
    p.add_argument("--n", type=int, nargs="+", default=[1024, 2048], help="matrix orders")
    p.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--reps", type=int, default=3, help="timed runs per plan (after one warm-up)")
    add_db_argument(p, "database with the BLAS and the cluster's comm probe")
    p.add_argument("--out", default=None, metavar="FILE.json", help="the root writes every timing here")


def host_ranks(world) -> dict[str, list[int]]:
    """World ranks per host, hosts in order of their first rank (collective)."""
    from mpi4py import MPI

    out: dict[str, list[int]] = {}
    for rank, host in enumerate(world.allgather(MPI.Get_processor_name())):
        out.setdefault(host, []).append(rank)
    return out


def mappings(per_host: list[int]) -> list[tuple[int, ...]]:
    """Every (d_1..d_H) with 0 <= d_h <= ranks on host h, not all zero."""
    return [d for d in itertools.product(*(range(k + 1) for k in per_host)) if sum(d)]


def cluster_problem(family: str, n: int) -> Problem:
    """The order-n problem the cluster benchmarks time (Cholesky: the lower factor)."""
    return square(family, n, lower=True)


def plans(family: str, p: int, blocks, weights: tuple[float, ...] | None) -> list[tuple[Plan, str]]:
    """(plan, layout) of every grid x block on p ranks, and where the ranks' ``weights`` differ
    the same with blocks by speed (HoHe; for gemm BSR with rows by ``weights``, equal rows for
    None); the library call on the root for p = 1."""
    be, algorithm = FAMILIES[family].library, FAMILIES[family].mapping
    if p == 1:
        return [(Plan("local", 1, threads=1, backend=be), "library")]
    rows = MAPPING_MODELS[family].weighted_rows     # HoHe as another algorithm's rows by weight
    if rows is not None:
        return [(Plan(algorithm, p, r, c, b=blk, threads=1, backend=be), "cyclic")
                for (r, c), blk in itertools.product(grids(p), blocks)] + \
            [(Plan(rows[0], p, p, 1, threads=1, backend=be, weights=weights), "weighted")]
    layouts = [(None, "cyclic")]
    if weights is not None and max(weights) > min(weights):
        layouts.append((weights, "weighted"))
    return [(Plan(algorithm, p, r, c, b=blk, threads=1, backend=be, weights=w), layout)
            for w, layout in layouts for (r, c), blk in itertools.product(grids(p), blocks)]


def _time_plans(sub, family: str, n: int, operands: tuple, d, args, weights: tuple[float, ...]) -> list[dict]:
    """Median root-to-root time of each plan on ``sub`` (the mapping's ranks), checked."""
    out, p, prob, calls = [], sub.size, cluster_problem(family, n), CALLS[family]
    want = calls.reference(prob, *operands) if sub.rank == 0 else None
    for plan, layout in plans(family, p, usable_blocks(n, args.blocks), weights):
        times, ok = [], True
        for i in range(args.reps + 1):
            sub.Barrier()
            t0 = time.perf_counter()
            res = calls.collective(prob, *operands, comm=sub, config=plan)
            if i:
                times.append(time.perf_counter() - t0)
            if sub.rank == 0 and i == 1:
                ok = agrees(res, want)
        if sub.rank == 0:
            out.append({"d": list(d), "p": p, "r": plan.r, "c": plan.c, "b": plan.b, "layout": layout,
                        "seconds": float(np.median(times)),
                        "spread": float(np.ptp(times) / np.median(times)), "correct": ok})
    return out


def _split(world, ranks: list[int]):
    """The sub-communicator of ``ranks`` in that order (MPI.COMM_NULL elsewhere)."""
    from mpi4py import MPI

    mine = world.rank in ranks
    return world.Split(0 if mine else MPI.UNDEFINED, ranks.index(world.rank) if mine else 0)


def _methods_table(family: str, n: int, platform, timed: list[dict], blocks: tuple[int, ...]) -> dict:
    """Each method's and user's plan, its measured time, against the best timed plan."""

    measured = {(tuple(t["d"]), t["r"], t["c"], t["b"], t["layout"]): t["seconds"] for t in timed}
    best = min(timed, key=lambda t: t["seconds"])
    rows = []
    for method in sm.METHODS + sm.USERS:
        ch = sm.run_method(method, family, n, platform, blocks=blocks)
        e = ch.estimate
        rows.append({"method": method, "d": list(ch.d), "r": e.r, "c": e.c, "b": e.b, "layout": e.layout,
                     "predicted": e.seconds, "measured": measured.get((ch.d, e.r, e.c, e.b, e.layout)),
                     "solve_seconds": ch.solve_seconds,
                     "depth": ch.depth})
    return {"family": family, "n": n, "best": best, "methods": rows, "plans": timed}


def table_lines(res: dict) -> list[str]:
    best = res["best"]["seconds"]
    lines = [f"{res['family']} n={res['n']}: best timed plan d={tuple(res['best']['d'])} "
             f"{res['best']['r']}x{res['best']['c']} b={res['best']['b']} {res['best']['layout']} {best:.4f} s "
             f"(of {len(res['plans'])} plans)",
             f"  {'method':12s} {'mapping':10s} {'b':>4s} {'grid':>6s} {'predicted':>10s} {'measured':>9s} "
             f"{'/best':>6s} {'t.sol s':>8s}"]
    for r in res["methods"]:
        meas = r["measured"]
        ratio = f"{meas / best:6.3f}" if meas else "     -"
        grid = sm.grid_label(r["layout"], r["r"], r["c"], r["b"])
        lines.append(f"  {r['method']:12s} {str(tuple(r['d'])):10s} {r['b']:4d} {grid:>6s} "
                     f"{r['predicted']:10.4f} {meas if meas else float('nan'):9.4f} {ratio} {r['solve_seconds']:8.4f}")
    return lines


def _run_all(world, args, platform, hosts: list[list[int]], speeds: list[float]) -> list[dict]:
    """Every family x n x mapping x grid x block timed; the root's tables."""
    from mpi4py import MPI

    from autotune.distributed.collective import quiet_barrier

    results = []
    for family, n in itertools.product(args.family, args.n):
        calls = CALLS[family]
        none = (None,) * calls.count
        ops = calls.operands(cluster_problem(family, n), np.random.default_rng(n)) if world.rank == 0 else none
        timed = []
        for d in mappings([len(h) for h in hosts]):
            ranks = [r for k, rs in zip(d, hosts, strict=True) for r in rs[:k]]
            weights = tuple(s / k for k, s in zip(d, speeds, strict=True) for _ in range(k))
            lead = ranks[0]                       # the sub-communicator's root: it needs the operands
            if lead != 0 and world.rank == 0:
                world.send(ops, dest=lead, tag=7)
            elif lead != 0 and world.rank == lead:
                ops = world.recv(source=0, tag=7)
            sub, got = _split(world, ranks), []
            if sub != MPI.COMM_NULL:
                got = _time_plans(sub, family, n, ops, d, args, weights)
                sub.Free()
            if lead != 0 and world.rank == lead:
                world.send(got, dest=0, tag=8)
                ops = none
            elif lead != 0 and world.rank == 0:
                got = world.recv(source=lead, tag=8)
            timed += got if world.rank == 0 else []
            quiet_barrier(world)
        if world.rank == 0:
            results.append(_methods_table(family, n, platform, timed, tuple(args.blocks)))
            print("\n".join(table_lines(results[-1])), flush=True)
    return results


def args_problem(args) -> str:
    """What makes a cluster benchmark's arguments unusable here ("" if nothing): orders, repetitions
    and blocks must be positive, ``--out`` writable, and mpi4py importable."""
    if min(args.n) < 1 or args.reps < 1 or min(args.blocks) < 1:
        return "--n, --reps and --blocks must be positive"
    return output_problem("--out", args.out) or ("" if importlib.util.find_spec("mpi4py") else MPI_MISSING)


def run(args) -> int:
    problem = args_problem(args)
    if problem:
        return error("bench mapping-testbed", problem, 2)
    from dataclasses import replace

    from mpi4py import MPI
    from threadpoolctl import threadpool_limits


    world = MPI.COMM_WORLD
    names = host_ranks(world)
    hosts = list(names.values())
    platform, problem = None, None
    if world.rank == 0:
        try:
            cp, sp = load_comm(args.db, nprocs=world.size), load_sp(args.db)
            platform = measured_platform(cp, database_k(sp), order=list(names))
            fitted = sm.model_factors(platform_factors(sp, cp))
            platform = replace(platform, max_per_processor=max(len(h) for h in hosts), model_factors=fitted)
        except PlatformError as e:
            problem = str(e)
    problem, speeds = world.bcast((problem, [h.speed for h in platform.hosts] if platform else None), root=0)
    if problem:
        return error("bench mapping-testbed", problem, 2)
    with options(db=args.db), threadpool_limits(1, "blas"):
        results = _run_all(world, args, platform, hosts, speeds)
    if world.rank == 0 and args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0
