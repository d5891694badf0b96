"""Collective entry points behind ``tuned_gemm(..., comm=comm)`` and ``tuned_cholesky(..., comm=comm)``.

The root checks the input and picks the plan (forced ``config`` or the distributed selector over
the database's BLAS SP and the platform's communication parameters); every rank learns the
verdict and the plan from one small broadcast, so all ranks raise the same error or run the same
plan. A ``local`` plan (one process is fastest) runs on the root with the single-process
selector; other ranks return None at once.
"""
from __future__ import annotations

import numpy as np

from autotune.config import available_cores, get_options, options

from .checks import all_finite
from .collective import agree
from .plan import Phases, Plan, timed

_DECISIONS: dict[tuple, Plan] = {}


def _plan(family: str, dims: tuple[int, ...], nprocs: int, config, explain: bool, **problem) -> Plan:
    """Root only: the forced plan or the selector's choice (cached per problem and rank count);
    ``problem``: Cholesky's ``lower`` and input memory ``order``."""
    from autotune.select.distributed import as_plan, describe, rank_plans

    if config is not None:
        plan = as_plan(config)
        if plan.p > nprocs:
            raise ValueError(f"plan needs {plan.p} ranks, communicator has {nprocs}")
        return plan
    opts = get_options()
    key = (family, dims, nprocs, opts.allow_strassen, opts.db, tuple(sorted(problem.items())))
    if key in _DECISIONS and not explain:
        return _DECISIONS[key]
    from autotune.db import load_sp
    from autotune.db.comm import load_comm

    sp, cp = load_sp(opts.db), load_comm(opts.db, nprocs=nprocs)
    cores = available_cores()
    dec = rank_plans(family, dims, nprocs, sp, cp, cores, opts.allow_strassen, **problem)
    if explain:
        print(describe(dec))
    _DECISIONS[key] = dec.chosen
    return dec.chosen


def _root_check(family: str, arrays: tuple) -> tuple[tuple[int, ...], bool]:
    """(dims, tuned) for the root's operands; raises ValueError for what no rank can compute."""
    if any(x is None for x in arrays):
        raise ValueError("the root rank must pass the matrices (other ranks pass None)")
    arrs = [np.asarray(x) for x in arrays]
    if any(x.ndim != 2 for x in arrs):
        raise ValueError("distributed routines take 2-D matrices")
    tuned = all(x.dtype == np.float64 for x in arrs)
    if family == "gemm":
        (m, k), (k2, n) = arrs[0].shape, arrs[1].shape
        if k != k2:
            raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 (size {k2} is "
                             f"different from {k})")
        return (m, k, n), tuned and 0 not in (m, k, n)
    n, n2 = arrs[0].shape
    if n != n2:
        raise ValueError(f"expected square matrix, got {arrs[0].shape}")
    return (n,), tuned and n > 0


def _decide(family: str, arrays: tuple, comm, root: int, config, explain: bool, phases: Phases | None,
            **problem) -> tuple[Plan | None, tuple]:
    """Collective: the root's verdict and plan, on every rank (a local Cholesky's finiteness check
    counts as its ``distribution`` phase, as the distributed runs' check does)."""
    err = verdict = None
    if comm.rank == root:
        try:
            dims, tuned = _root_check(family, arrays)
            if family == "cholesky":
                from autotune.models.distributed_cholesky import memory_order

                problem["order"] = memory_order(arrays[0])
            plan = _plan(family, dims, comm.size, config, explain, **problem) if tuned else Plan("local", 1)
            # The distributed run checks its own input (on the root, agreed); the local one is
            # checked here, where the verdict still reaches every rank.
            local = family == "cholesky" and plan.algorithm == "local"
            if local:
                with timed(phases, "distribution"):
                    finite = all_finite(np.asarray(arrays[0]), plan.backend, max(plan.threads, 1))
                if not finite:
                    raise ValueError("array must not contain infs or NaNs")
            verdict = (plan, dims)
        except (ValueError, TypeError, LookupError) as exc:
            err = exc if not isinstance(exc, LookupError) else ValueError(str(exc))
    agree(comm, err if comm.rank == root else None)
    return comm.bcast(verdict, root=root)


def distributed_gemm(a, b, comm, *, root: int = 0, config=None, explain: bool = False,
                     phases: Phases | None = None) -> np.ndarray | None:
    """Collective ``a @ b``: the root passes a and b and gets the product; others get None."""
    plan, _ = _decide("gemm", (a, b), comm, root, config, explain, phases)
    if plan.algorithm == "local":
        if comm.rank != root:
            return None
        from autotune.api import tuned_gemm

        with options(threads=max(plan.threads, 1)), timed(phases, "compute"):
            return tuned_gemm(a, b)
    from .gemm import ALGORITHMS

    return ALGORITHMS[plan.algorithm](a if comm.rank == root else None, b if comm.rank == root else None,
                                      comm, plan, root=root, phases=phases)


def distributed_cholesky(a, comm, *, lower: bool = False, root: int = 0, config=None, explain: bool = False,
                         phases: Phases | None = None) -> np.ndarray | None:
    """Collective Cholesky factor: the root passes a and gets the factor; others get None."""
    plan, _ = _decide("cholesky", (a,), comm, root, config, explain, phases, lower=bool(lower))
    if plan.algorithm == "local":
        if comm.rank != root:
            return None
        from autotune.api import tuned_cholesky

        with options(threads=max(plan.threads, 1)), timed(phases, "compute"):
            return tuned_cholesky(a, lower=lower, check_finite=False)
    from .cholesky import ALGORITHMS

    return ALGORITHMS[plan.algorithm](a if comm.rank == root else None, comm, plan, lower=lower, root=root,
                                      phases=phases)
