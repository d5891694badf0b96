"""Distributed speed at P ranks against one-process numpy/scipy and dask, side by side in one run.

Run under ``mpiexec -n P``. Alternating blocks in one run: ``--rounds`` distributed calls (the
model's best plan with P ranks and one BLAS thread per rank, root-held data to gathered result),
then on the root only — the other ranks sleep-wait so they steal no core — as many rounds of
numpy's matmul / scipy's cholesky with P threads and dask.array (threaded scheduler, P workers,
one BLAS thread each, chunks of each ``--chunks`` size). Blocks, not per-call interleaving: a
P-thread baseline leaves the root's BLAS pool disturbing the next distributed run for seconds
(measured: +0.2 s of data movement at n = 4096). Reports medians, quartiles and ratios.

    mpiexec -n 2 python bench/mpi_speed.py --n 4096 --rounds 5 --out bench/results/mpi-speed-P2.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from autotune.install_probe.operands import spd_matrix
from threadpoolctl import threadpool_limits

from autotune.config import options
from autotune.distributed.collective import gather_cores, quiet_barrier
from autotune.plans import Plan

# Pause after the one-process baselines: their BLAS and dask pools keep spinning for a while and
# would slow the next distributed run (the probe settles the same way).
SETTLE_SECONDS = 0.5


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_plan(family: str, n: int, comm, db) -> Plan:
    """The model's best plan that uses every rank with one BLAS thread each, for the cores of the
    root's node (collective: a rank bound to one core does not see the node's count)."""
    from autotune.db import load_sp
    from autotune.db.comm import load_comm
    from autotune.select.distributed import rank_plans

    plan = None
    cores, _ = gather_cores(comm)
    if comm.rank == 0:
        dims = (n, n, n) if family == "gemm" else (n,)
        dec = rank_plans(family, dims, comm.size, load_sp(db), load_comm(db, nprocs=comm.size), cores)
        plan = next(r.plan for r in dec.ranking if r.plan.p == comm.size and r.plan.threads == 1)
    return comm.bcast(plan, root=0)


def baselines(family: str, a, b, P: int, chunks) -> dict[str, float]:
    import dask
    import dask.array as da
    import scipy.linalg as sl

    out = {}
    with threadpool_limits(P):
        out["numpy" if family == "gemm" else "scipy"] = _timed(
            (lambda: a @ b) if family == "gemm" else (lambda: sl.cholesky(a, lower=True)))
    with threadpool_limits(1), dask.config.set(scheduler="threads", num_workers=P):
        for ch in chunks:
            if family == "gemm":
                x, y = da.from_array(a, chunks=ch), da.from_array(b, chunks=ch)
                out[f"dask{ch}"] = _timed(lambda x=x, y=y: (x @ y).compute())
            else:
                x = da.from_array(a, chunks=ch)
                out[f"dask{ch}"] = _timed(lambda x=x: da.linalg.cholesky(x, lower=True).compute())
    return out


def main(argv=None) -> int:
    from mpi4py import MPI

    from autotune.tuned_mpi import distributed_cholesky, distributed_gemm

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--family", choices=["gemm", "cholesky"], default="gemm")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3, help="timed runs per block (after one warm-up run)")
    p.add_argument("--blocks", type=int, default=2, help="alternating blocks: distributed runs, then baselines")
    p.add_argument("--chunks", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--db", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    comm, P = MPI.COMM_WORLD, MPI.COMM_WORLD.size
    rng = np.random.default_rng(0)
    n = args.n
    a = b = None
    if comm.rank == 0:
        if args.family == "gemm":
            a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        else:
            a = spd_matrix(rng, n, order="C")    # no BLAS call: no pool left spinning
    with options(db=args.db):
        plan = best_plan(args.family, n, comm, args.db)
        times: dict[str, list[float]] = {}
        for _ in range(args.blocks):
            for _ in range(args.rounds + 1):              # the first run of a block warms up
                comm.Barrier()
                t0 = time.perf_counter()
                if args.family == "gemm":
                    distributed_gemm(a, b, comm, config=plan)
                else:
                    distributed_cholesky(a, comm, lower=True, config=plan)
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
        dask_best = min(v for k, v in med.items() if k.startswith("dask"))
        report = {"family": args.family, "n": n, "P": P, "plan": str(plan), "median_s": med,
                  "quartiles_s": {k: np.percentile(v, [25, 75]).tolist() for k, v in times.items()},
                  f"speedup_vs_{base}": med[base] / med["autotune"],
                  "speedup_vs_dask_best": dask_best / med["autotune"],
                  f"dask_vs_{base}": med[base] / dask_best}
        print(json.dumps(report, indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
