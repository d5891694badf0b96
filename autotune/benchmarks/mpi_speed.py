"""``autotune bench mpi-speed``: distributed speed at P ranks against one-process numpy/scipy and
dask, side by side in one run, under ``mpiexec -n P``.

Alternating blocks in one run: ``--rounds`` distributed calls (the model's best plan with P ranks
and one BLAS thread per rank, root-held data to gathered result), then on the root only — the
other ranks sleep-wait so they steal no core — as many rounds of numpy's matmul / scipy's
cholesky / lu_factor / solve (``--nrhs`` right-hand sides) with P threads and dask.array (threaded
scheduler, P workers, one BLAS thread each,
chunks of each ``--chunks`` size; dask comes with the ``bench`` extra, ``--chunks`` with no size
leaves it out). Blocks, not per-call interleaving: a P-thread baseline leaves the root's BLAS pool
disturbing the next distributed run for seconds (measured: +0.2 s of data movement at n = 4096).
Reports medians, quartiles and ratios; results only where ``--out`` says.

    mpiexec -n 2 autotune bench mpi-speed --family gemm --n 4096 --rounds 5 --out FILE.json
    mpiexec -n 2 autotune bench mpi-speed --family solve --n 4096 --nrhs 16 --out FILE.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import time
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.benchmarks._common import output_problem, timed, write_json
from autotune.benchmarks.calls import CALLS, HEAT_ALPHA, square
from autotune.cli.common import add_db_argument, error
from autotune.core.families import DISTRIBUTED, Problem
from autotune.core.plans import Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import load_comm
from autotune.entry.protocol import MPI_MISSING
from autotune.kernels.stencil import heat_weights, reference
from autotune.select.distributed import rank_plans
from autotune.settings import options

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "distributed speed at P ranks vs numpy/scipy and dask (under mpiexec -n P)"
# Pause after the one-process baselines: their BLAS and dask pools keep spinning for a while and
# would slow the next distributed run (the probe settles the same way).
SETTLE_SECONDS = 0.5


def best_plan(problem: Problem, comm: MPI.Comm, db) -> Plan:
    """The model's best plan that uses every rank with one BLAS thread each, for the cores of the
    root's node (collective: a rank bound to one core does not see the node's count)."""
    from autotune.distributed.collective import gather_cores

    plan = None
    cores, _ = gather_cores(comm)
    if comm.rank == 0:
        dec = rank_plans(problem, comm.size, load_sp(db), load_comm(db, nprocs=comm.size), cores)
        plan = next(r.plan for r in dec.ranking if r.plan.p == comm.size and r.plan.threads == 1)
    return comm.bcast(plan, root=0)


def _dask_matmul(p, ch, a, b):
    import dask.array as da

    x, y = da.from_array(a, chunks=ch), da.from_array(b, chunks=ch)
    return lambda: (x @ y).compute()


def _dask_cholesky(p, ch, a):
    import dask.array as da

    x = da.from_array(a, chunks=ch)
    return lambda: da.linalg.cholesky(x, lower=p.lower).compute()


def _dask_lu(p, ch, a):
    import dask
    import dask.array as da

    x = da.from_array(a, chunks=ch)
    return lambda: dask.compute(*da.linalg.lu(x))


def _dask_solve(p, ch, a, b):
    import dask.array as da

    x, y = da.from_array(a, chunks=ch), da.from_array(b, chunks=(ch, b.shape[1]))
    return lambda: da.linalg.solve(x, y).compute()


def _dask_stencil(p, ch, u):
    """The heat steps as dask's overlapping blocks: each step one ``map_overlap`` of depth 1 that
    sweeps a block's cells with all their neighbours (the field's edges stay fixed)."""
    import dask.array as da

    w = heat_weights(HEAT_ALPHA)

    def run():
        x = da.from_array(u, chunks=ch)
        for _ in range(p.steps):
            x = x.map_overlap(lambda b: reference(b, 1, w), depth=1, boundary="none")
        return x.compute()
    return run


# Each family's dask.array counterpart: ``DASK[family](problem, chunk, *operands)`` -> the call to time.
DASK = {"gemm": _dask_matmul, "cholesky": _dask_cholesky, "lu": _dask_lu, "solve": _dask_solve,
        "stencil": _dask_stencil}


def baselines(problem: Problem, operands: tuple, P: int, chunks) -> dict[str, float]:
    """One-process times on the root: numpy/scipy with P threads, dask per chunk size."""
    calls = CALLS[problem.family]
    out = {}
    with threadpool_limits(P):
        out[calls.library] = timed(lambda: calls.reference(problem, *operands))
    if not chunks:
        return out
    import dask

    with threadpool_limits(1), dask.config.set(scheduler="threads", num_workers=P):
        for ch in chunks:
            out[f"dask{ch}"] = timed(DASK[problem.family](problem, ch, *operands))
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", choices=list(DISTRIBUTED), default="gemm")
    p.add_argument("--nrhs", type=int, default=16, help="right-hand sides of the solve")
    p.add_argument("--n", type=int, default=4096, help="square size")
    p.add_argument("--rounds", type=int, default=3, help="timed runs per block (after one warm-up run)")
    p.add_argument("--blocks", type=int, default=2, help="alternating blocks: distributed runs, then baselines")
    p.add_argument("--chunks", type=int, nargs="*", default=[1024, 2048],
                   help="dask chunk sizes (none: no dask comparison)")
    add_db_argument(p)
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def run(args) -> int:
    """Time the blocks collectively; the root prints the report (and writes it to --out)."""
    problem = output_problem("--out", args.out) or (
        "" if args.n >= 1 and args.rounds >= 1 and args.blocks >= 1 and min(args.chunks, default=1) >= 1
        else "--n, --rounds, --blocks and --chunks must be positive")
    if problem:
        return error("bench mpi-speed", problem, 2)
    if importlib.util.find_spec("mpi4py") is None:
        return error("bench mpi-speed", MPI_MISSING, 2)
    if args.chunks and importlib.util.find_spec("dask") is None:
        return error("bench mpi-speed", 'the dask comparison needs dask: pip install "autotune[bench]" '
                                  "(or --chunks with no size to leave it out)", 2)
    from mpi4py import MPI

    from autotune.distributed.collective import quiet_barrier

    comm, P = MPI.COMM_WORLD, MPI.COMM_WORLD.size
    n, calls = args.n, CALLS[args.family]
    problem = square(args.family, n, lower=True, nrhs=max(args.nrhs, 1))
    ops = calls.operands(problem, np.random.default_rng(0)) if comm.rank == 0 else (None,) * calls.count
    with options(db=args.db):
        plan = best_plan(problem, comm, args.db)
        times: dict[str, list[float]] = {}
        for _ in range(args.blocks):
            for _ in range(args.rounds + 1):              # the first run of a block warms up
                comm.Barrier()
                t0 = time.perf_counter()
                calls.collective(problem, *ops, comm=comm, config=plan)
                times.setdefault("autotune", []).append(time.perf_counter() - t0)
            if comm.rank == 0:
                for _ in range(args.rounds + 1):
                    for k, v in baselines(problem, ops, P, args.chunks).items():
                        times.setdefault(k, []).append(v)
                time.sleep(SETTLE_SECONDS)            # let the baselines' thread pools stop spinning
            quiet_barrier(comm)         # the root is timing one-process baselines
    if comm.rank == 0:
        times = {k: [x for i, x in enumerate(v) if i % (args.rounds + 1)] for k, v in times.items()}
        med = {k: float(np.median(v)) for k, v in times.items()}
        base = calls.library
        report = {"family": args.family, "n": n, "P": P, "plan": str(plan), "median_s": med,
                  "quartiles_s": {k: np.percentile(v, [25, 75]).tolist() for k, v in times.items()},
                  f"speedup_vs_{base}": med[base] / med["autotune"]}
        if args.chunks:
            dask_best = min(v for k, v in med.items() if k.startswith("dask"))
            report |= {"speedup_vs_dask_best": dask_best / med["autotune"], f"dask_vs_{base}": med[base] / dask_best}
        print(json.dumps(report, indent=1), flush=True)
        if args.out:
            write_json(args.out, report)
    return 0
