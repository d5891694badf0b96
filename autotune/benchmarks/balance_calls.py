"""``autotune bench balance-calls`` (under ``autotune testbed mpiexec P``): repeated distributed
factorizations on data that stays distributed, on weighted (HoHe) block-cyclic layouts, after a
host's CPU share drops (002's adaptation applied to ``lu_dist`` / ``cholesky_dist``).

Before the calls each rank's speed is measured with every host at its ``--probe-quota`` (the
install-time weights); then ``--quota HOST=PCT`` applies and each configuration factors the same
matrix ``--calls`` times on a 1 x P grid:

- ``probe``: columns by the probe-time speeds, never moved;
- ``adaptive``: the same start; after each call every rank reports its compute seconds at its CPU
  share (``distributed.balance.busy``) and its share of the columns, ``balance.HostSpeeds``
  averages them (EMA over 3 calls) and, where they differ from the weights in use by more than
  their noise, the matrix moves to the new weights (``movement.redistribute``, timed with the call).

Reported: per configuration the seconds of every call, the median over the last half ("once
adapted"), the ratio probe / adaptive, and the weights over the calls; each configuration's first
and last factors are checked against scipy on the root.
"""
from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

import numpy as np

from autotune import testbed
from autotune.benchmarks._common import mpi_world, output_problem, report_root
from autotune.benchmarks.balance import measure_speeds
from autotune.benchmarks.quotas import parse_share, restored, set_quotas
from autotune.cli.common import error
from autotune.feedback.balance import Policy
from autotune.feedback.speeds import HostSpeeds
from autotune.geometry.layout import block_cyclic

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "repeated distributed LU / Cholesky on data kept distributed, weights adapting after a host slows"
CONFIGS = ("probe", "adaptive")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", choices=["lu", "cholesky"], default="lu")
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--calls", type=int, default=8, help="factorizations per configuration")
    p.add_argument("--rounds", type=int, default=2, help="rounds, configurations interleaved")
    p.add_argument("--probe-quota", nargs="*", default=[], metavar="HOST=PCT",
                   help="the hosts' CPU shares while the probe-time speeds are measured")
    p.add_argument("--quota", nargs="*", default=[], metavar="HOST=PCT", help="the shares during the calls")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def run(args) -> int:
    try:
        probe_q = dict(parse_share(q, "--probe-quota") for q in args.probe_quota)
        call_q = dict(parse_share(q) for q in args.quota)
    except ValueError as exc:
        return error("bench balance-calls", str(exc), 2)
    problem = output_problem("--out", args.out) or (
        "" if args.n >= 2 * args.block and args.block >= 1 and args.calls >= 2 and args.rounds >= 1
        else "--n (>= 2 blocks), --block, --calls (>= 2), --rounds must be positive")
    comm, status = mpi_world("balance-calls", problem)
    if comm is None:
        return status
    if (probe_q or call_q) and testbed.saved() is None:
        return error("bench balance-calls", "--quota needs a testbed (autotune testbed up)", 2)
    report_root(comm, compare(comm, args, probe_q, call_q), args.out)
    return 0


def _matrix(n: int, family: str) -> np.ndarray:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n) if family == "cholesky" else a


def compare(comm: MPI.Comm, args, probe_q: dict, call_q: dict) -> dict:
    P, n = comm.size, args.n
    a = _matrix(n, args.family)
    runs: dict[str, list] = {c: [] for c in CONFIGS}
    with restored(comm, {*probe_q, *call_q}):
        set_quotas(comm, probe_q)
        probe = measure_speeds(comm, 256, 256)
        set_quotas(comm, call_q)
        for r in range(args.rounds):
            for name in (CONFIGS if r % 2 == 0 else CONFIGS[::-1]):
                runs[name].append(calls(comm, a, probe, name == "adaptive", args))
    if comm.rank != 0:
        return {}
    out: dict = {"P": P, "family": args.family, "n": n, "block": args.block, "calls": args.calls,
                 "probe_quota": args.probe_quota, "quota": args.quota, "probe_speeds": probe.tolist()}
    half = args.calls // 2
    for name, rs in runs.items():
        out[name] = {"seconds": [r["seconds"] for r in rs], "weights": [r["weights"] for r in rs],
                     "adapted_median_s": float(np.median([s for r in rs for s in r["seconds"][half:]]))}
    out["probe_over_adaptive"] = out["probe"]["adapted_median_s"] / out["adaptive"]["adapted_median_s"]
    return out


def calls(comm: MPI.Comm, a: np.ndarray, probe: np.ndarray, adapt: bool, args) -> dict:
    """``--calls`` factorizations of ``a`` kept distributed (columns by ``probe``, moved when
    ``adapt`` and the speeds the calls measure say so): seconds of each (moves included)."""
    from autotune.distributed import DistMatrix, ProcessGrid, movement
    from autotune.distributed.balance import busy
    from autotune.distributed.cholesky import cholesky_dist
    from autotune.distributed.lu import lu_dist
    from autotune.distributed.plan import Phases

    P, n, b = comm.size, args.n, args.block
    grid = ProcessGrid(comm, 1, P)
    weights = tuple(float(x) for x in probe)
    layout = block_cyclic(n, n, 1, P, b, weights=(None, weights))
    pristine = movement.scatter(a if comm.rank == 0 else None, layout, comm)
    seen = HostSpeeds(Policy(window=3))
    names = [f"rank{i}" for i in range(P)]
    seconds, history = [], [weights]
    for k in range(args.calls):
        ph = Phases()
        comm.Barrier()
        t0 = time.perf_counter()
        work = np.asfortranarray(pristine.copy())
        A = DistMatrix(work, layout, comm)
        before = ph.mark("compute")
        if args.family == "lu":
            F, piv, info = lu_dist(A, grid, b, threads=1, phases=ph)
        else:
            F = cholesky_dist(A, grid, b, lower=True, threads=1, overwrite_a=True, check_finite=False, phases=ph,
                              backend="scipy-openblas")
        spent = ph.mark("compute") - before
        cols = layout.cols.count(comm.rank)
        samples = comm.allgather((names[comm.rank], busy(spent, "compute"), cols / n))
        if adapt:
            seen.observe(samples, 0)
            current = dict(zip(names, weights, strict=True))
            speeds, source = seen.effective(current, names[0])
            if speeds is not current:
                weights = tuple(float(speeds[h]) for h in names)
                new = block_cyclic(n, n, 1, P, b, weights=(None, weights))
                pristine = movement.redistribute(pristine, layout, new, comm)
                layout = new
        comm.Barrier()
        seconds.append(time.perf_counter() - t0)
        history.append(weights)
        if k in (0, args.calls - 1):             # the first and last factors against scipy
            whole = F.to_root(order="F")
            if comm.rank == 0:
                _check(args.family, a, whole, piv if args.family == "lu" else None)
    return {"seconds": seconds, "weights": history}


def _check(family: str, a: np.ndarray, f: np.ndarray, piv) -> None:
    import scipy.linalg as sl

    if family == "lu":
        ref, ref_piv = sl.lu_factor(a)
        if not (np.array_equal(piv, ref_piv) and np.allclose(f, ref, rtol=1e-8, atol=1e-8)):
            raise AssertionError("distributed LU differs from scipy's")
    elif not np.allclose(np.tril(f), sl.cholesky(a, lower=True), rtol=1e-8, atol=1e-8):
        raise AssertionError("distributed Cholesky differs from scipy's")
