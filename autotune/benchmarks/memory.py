"""``autotune bench memory`` (under ``mpiexec -n P``; P = 1 for the one-process calls alone): the
memory each call really takes against ``models.memory``'s prediction.

Per call and rank: the growth of the resident set's high-water mark (``VmHWM`` after resetting it
through ``/proc/self/clear_refs``) over the resident set before the call, the workspace and the
released-block cache emptied first and large allocations returned to the system when freed
(``mallopt``), so buffers kept from an earlier call do not hide what this one needs. Each call runs
once untimed first (Numba compiles, MPI connects). The root's one-process candidates
(``--local``), then the distributed plans of every grid of P. Reported: measured / predicted on
the root and on the largest other rank; the acceptance bound is 1.1.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import gc
from typing import TYPE_CHECKING

import numpy as np

from autotune.benchmarks._common import mpi_world, output_problem, report_root
from autotune.benchmarks.calls import CALLS, HEAT_ALPHA
from autotune.core.families import as_problem
from autotune.core.plans import Candidate, Plan, grids
from autotune.models.memory import local, plan_footprint
from autotune.stencil import heat2d

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "each call's measured peak memory (RSS high-water) against the memory model's prediction"
M_MMAP_THRESHOLD = -3       # glibc's mallopt parameter
GEMM_PLANS = ("summa", "strassen_summa", "bsr", "cbsr", "cannon", "strassen_ms")
STENCIL = ("blocking", "overlap")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=2048, help="matrix order (default 2048)")
    p.add_argument("--block", type=int, default=128, help="block of the block-cyclic plans")
    p.add_argument("--no-local", dest="local", action="store_false", help="skip the one-process candidates")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def _fresh() -> None:
    """Nothing kept from earlier calls: workspace, released blocks, Python garbage."""
    from autotune.distributed import workspace
    from autotune.kernels import _front

    workspace.release()
    limit = _front.block_cache()[2]
    _front.set_block_cache(0)
    _front.set_block_cache(limit)
    gc.collect()


def peak(call) -> int:
    """Bytes the resident set's high-water mark grows by during ``call()``."""
    _fresh()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS:")
    call()
    return max(_status("VmHWM:") - before, 0)


def _local_cases(n: int) -> list[tuple[str, tuple, Candidate]]:
    return [("gemm", (n, n, n), Candidate("blas", "numpy-openblas", 1)),
            ("gemm", (n, n, n), Candidate("strassen", "numpy-openblas", 1, 1)),
            ("gemm", (n, n, n), Candidate("strassen", "numpy-openblas", 1, 2)),
            ("lu", (n,), Candidate("getrf", "scipy-openblas", 1)),
            ("cholesky", (n,), Candidate("potrf", "scipy-openblas", 1)),
            ("solve", (n, 4), Candidate("gesv", "scipy-openblas", 1)),
            ("stencil", (n, n, 4), Candidate("sweep", "numba-stencil", 1))]


def _plans(P: int, b: int) -> list[Plan]:
    out = []
    for r, c in grids(P):
        out += [Plan("summa", P, r, c, b=b), Plan("strassen_summa", P, r, c, b=b, level=1),
                Plan("lu", P, r, c, b=b), Plan("cholesky", P, r, c, b=b)]
        out += [Plan("cbsr", P, r, c)] if c > 1 else [Plan("bsr", P, r, c)]
        out += [Plan("cannon", P, r, c)] if r == c else []
        out += [Plan("gesv", P, r, c, b=b)] if r == 1 else []
        out += [Plan("strassen_ms", P, r, c, level=1)] if (r, c) == (P, 1) and P > 1 else []
        out += [Plan(alg, P, r, c, b=1) for alg in ("blocking", "overlap")]
    return [p for p in out if p.p > 1]


STENCIL_STEPS = 3


def _dims(plan: Plan, n: int) -> tuple[int, ...]:
    """The problem's dims as the plan's model takes them (gemm n x n x n; a stencil's rows, cols, steps)."""
    if plan.algorithm in STENCIL:
        return n, n, STENCIL_STEPS
    return {"lu": (n,), "cholesky": (n,), "gesv": (n, 4)}.get(plan.algorithm, (n, n, n))


def _row(name: str, peaks: list[int], fp) -> dict:
    other = max(peaks[1:], default=0)
    return {"case": name, "root_bytes": peaks[0], "root_predicted": fp.root_bytes,
            "other_bytes": other, "other_predicted": fp.other_bytes,
            "root_ratio": peaks[0] / max(fp.root_bytes, 1.0),
            "other_ratio": other / fp.other_bytes if len(peaks) > 1 and fp.other_bytes else None}


def _local_rows(n: int, rng) -> list[dict]:
    rows = []
    for family, dims, cand in _local_cases(n):
        prob = as_problem(family, dims)
        call = functools.partial(CALLS[family].tuned, prob, *CALLS[family].operands(prob, rng), config=cand)
        peak(call)
        rows.append(_row(f"{family} {cand}", [peak(call)], local(dims, family, cand)))
    return rows


def _plan_rows(comm: MPI.Comm, n: int, block: int, rng) -> list[dict]:
    from autotune.distributed.cholesky import ALGORITHMS as CHOLESKY
    from autotune.distributed.gemm import ALGORITHMS as GEMM
    from autotune.distributed.lu import ALGORITHMS as LU

    root = comm.rank == 0
    a = rng.standard_normal((n, n)) if root else None
    b = rng.standard_normal((n, n)) if root else None
    s = a @ a.T + n * np.eye(n) if root else None
    rhs = rng.standard_normal((n, 4)) if root else None
    operands = {**dict.fromkeys(GEMM_PLANS, (a, b)), "lu": (a,), "gesv": (a, rhs), "cholesky": (s,)}
    algorithms = {**GEMM, **LU, **CHOLESKY}
    rows = []
    for plan in _plans(comm.size, block):
        if plan.algorithm in STENCIL:
            call = functools.partial(heat2d, a, STENCIL_STEPS, HEAT_ALPHA, comm=comm, config=plan)
        else:
            call = functools.partial(algorithms[plan.algorithm], *operands[plan.algorithm], comm, plan)
        peak(call)
        comm.Barrier()
        peaks = comm.gather(peak(call), root=0)
        if root:
            rows.append(_row(f"{plan.algorithm} {plan.r}x{plan.c}", peaks, plan_footprint(_dims(plan, n), plan)))
    return rows


def _print(rows: list[dict]) -> None:
    for r in rows:
        other = "" if r["other_ratio"] is None else (f"  other {r['other_bytes'] / 2**20:7.1f} MiB / "
                                                     f"{r['other_predicted'] / 2**20:7.1f} = {r['other_ratio']:.2f}")
        print(f"{r['case']:44s} root {r['root_bytes'] / 2**20:7.1f} MiB / {r['root_predicted'] / 2**20:7.1f}"
              f" = {r['root_ratio']:.2f}{other}", flush=True)


def run(args) -> int:
    problem = output_problem("--out", args.out) or ("" if args.n >= 2 and args.block >= 1
                                                    else "--n must be >= 2 and --block >= 1")
    comm, status = mpi_world("memory", problem)
    if comm is None:
        return status
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 16)
    rng = np.random.default_rng(0)
    rows = _local_rows(args.n, rng) if args.local and comm.rank == 0 else []
    comm.Barrier()
    rows += _plan_rows(comm, args.n, args.block, rng)
    report = {}
    if comm.rank == 0:
        _print(rows)
        ratios = [x for r in rows for x in (r["root_ratio"], r["other_ratio"]) if x is not None]
        report = {"n": args.n, "ranks": comm.size, "block": args.block, "rows": rows,
                  "max_ratio": max(ratios), "min_ratio": min(ratios), "median_ratio": float(np.median(ratios))}
    report_root(comm, report, args.out)
    return 0
