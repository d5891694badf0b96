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

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.benchmarks._common import error, output_problem, timed, write_json
from autotune.config import options
from autotune.db import load_sp
from autotune.db.comm_lookup import load_comm
from autotune.families import as_problem
from autotune.plans import Plan
from autotune.select.distributed import rank_plans
from autotune.tuned_mpi import (
    MPI_MISSING,
    distributed_cholesky,
    distributed_gemm,
    distributed_lu_factor,
    distributed_solve,
)

HELP = "distributed speed at P ranks vs numpy/scipy and dask (under mpiexec -n P)"
# Pause after the one-process baselines: their BLAS and dask pools keep spinning for a while and
# would slow the next distributed run (the probe settles the same way).
SETTLE_SECONDS = 0.5


def best_plan(family: str, n: int, comm, db, nrhs: int = 16) -> Plan:
    """The model's best plan that uses every rank with one BLAS thread each, for the cores of the
    root's node (collective: a rank bound to one core does not see the node's count)."""
    from autotune.distributed.collective import gather_cores

    plan = None
    cores, _ = gather_cores(comm)
    if comm.rank == 0:
        dims = {"gemm": (n, n, n), "solve": (n, nrhs)}.get(family, (n,))
        dec = rank_plans(as_problem(family, dims), comm.size, load_sp(db), load_comm(db, nprocs=comm.size), cores)
        plan = next(r.plan for r in dec.ranking if r.plan.p == comm.size and r.plan.threads == 1)
    return comm.bcast(plan, root=0)


def baselines(family: str, a, b, P: int, chunks) -> dict[str, float]:
    """One-process times on the root: numpy/scipy with P threads, dask per chunk size."""
    import scipy.linalg as sl

    out = {}
    calls = {"gemm": lambda: a @ b, "cholesky": lambda: sl.cholesky(a, lower=True),
             "lu": lambda: sl.lu_factor(a), "solve": lambda: sl.solve(a, b)}
    with threadpool_limits(P):
        out["numpy" if family == "gemm" else "scipy"] = timed(calls[family])
    if not chunks:
        return out
    import dask
    import dask.array as da

    with threadpool_limits(1), dask.config.set(scheduler="threads", num_workers=P):
        for ch in chunks:
            if family == "gemm":
                x, y = da.from_array(a, chunks=ch), da.from_array(b, chunks=ch)
                out[f"dask{ch}"] = timed(lambda x=x, y=y: (x @ y).compute())
            elif family == "lu":
                x = da.from_array(a, chunks=ch)
                out[f"dask{ch}"] = timed(lambda x=x: dask.compute(*da.linalg.lu(x)))
            elif family == "solve":
                x, y = da.from_array(a, chunks=ch), da.from_array(b, chunks=(ch, b.shape[1]))
                out[f"dask{ch}"] = timed(lambda x=x, y=y: da.linalg.solve(x, y).compute())
            else:
                x = da.from_array(a, chunks=ch)
                out[f"dask{ch}"] = timed(lambda x=x: da.linalg.cholesky(x, lower=True).compute())
    return out


def run_family(family: str, a, b, comm, plan: Plan) -> None:
    """One collective tuned call of ``family`` with the forced ``plan``."""
    if family == "gemm":
        distributed_gemm(a, b, comm, config=plan)
    elif family == "cholesky":
        distributed_cholesky(a, comm, lower=True, config=plan)
    elif family == "lu":
        distributed_lu_factor(a, comm, config=plan)
    else:
        distributed_solve(a, b, comm, config=plan)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", choices=["gemm", "cholesky", "lu", "solve"], default="gemm")
    p.add_argument("--nrhs", type=int, default=16, help="right-hand sides of the solve")
    p.add_argument("--n", type=int, default=4096, help="square size")
    p.add_argument("--rounds", type=int, default=3, help="timed runs per block (after one warm-up run)")
    p.add_argument("--blocks", type=int, default=2, help="alternating blocks: distributed runs, then baselines")
    p.add_argument("--chunks", type=int, nargs="*", default=[1024, 2048],
                   help="dask chunk sizes (none: no dask comparison)")
    p.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def run(args) -> int:
    """Time the blocks collectively; the root prints the report (and writes it to --out)."""
    problem = output_problem("--out", args.out) or (
        "" if args.n >= 1 and args.rounds >= 1 and args.blocks >= 1 and min(args.chunks, default=1) >= 1
        else "--n, --rounds, --blocks and --chunks must be positive")
    if problem:
        return error("mpi-speed", problem)
    if importlib.util.find_spec("mpi4py") is None:
        return error("mpi-speed", MPI_MISSING)
    if args.chunks and importlib.util.find_spec("dask") is None:
        return error("mpi-speed", 'the dask comparison needs dask: pip install "autotune[bench]" '
                                  "(or --chunks with no size to leave it out)")
    from mpi4py import MPI

    from autotune.distributed.collective import quiet_barrier
    from autotune.install_probe.operands import spd_matrix

    comm, P = MPI.COMM_WORLD, MPI.COMM_WORLD.size
    rng = np.random.default_rng(0)
    n = args.n
    a = b = None
    if comm.rank == 0:
        if args.family == "gemm":
            a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        elif args.family in ("lu", "solve"):
            a, b = rng.standard_normal((n, n)), rng.standard_normal((n, max(args.nrhs, 1)))
        else:
            a = spd_matrix(rng, n, order="C")    # no BLAS call: no pool left spinning
    with options(db=args.db):
        plan = best_plan(args.family, n, comm, args.db, args.nrhs)
        times: dict[str, list[float]] = {}
        for _ in range(args.blocks):
            for _ in range(args.rounds + 1):              # the first run of a block warms up
                comm.Barrier()
                t0 = time.perf_counter()
                run_family(args.family, a, b, comm, plan)
                times.setdefault("autotune", []).append(time.perf_counter() - t0)
            if comm.rank == 0:
                for _ in range(args.rounds + 1):
                    for k, v in baselines(args.family, a, b, P, args.chunks).items():
                        times.setdefault(k, []).append(v)
                time.sleep(SETTLE_SECONDS)            # let the baselines' thread pools stop spinning
            quiet_barrier(comm)         # the root is timing one-process baselines
    if comm.rank == 0:
        times = {k: [x for i, x in enumerate(v) if i % (args.rounds + 1)] for k, v in times.items()}
        med = {k: float(np.median(v)) for k, v in times.items()}
        base = "numpy" if args.family == "gemm" else "scipy"
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
