"""The collective protocol every family's ``comm=`` entry uses (``tuned_gemm``, ``tuned_cholesky``,
``tuned_lu_factor``, ``tuned_solve``, the stencil).

Every rank first checks its own arguments (``root`` in range) and, in one allgather, that all
ranks passed the same family, ``root`` and ``lower`` and which cores each may run on; then the
root checks the input and picks the plan (forced ``config``; the mapping search, which also picks
the ranks, when they span hosts of measured, different speeds; else the distributed selector over
the database's BLAS SP, the platform's communication parameters and the cores of the root's node),
and every rank learns the verdict and the plan from one small broadcast, so all ranks raise the
same error or run the same plan. ``config`` and ``explain`` are the root's. A ``local`` plan (one
process is fastest) runs on the root with the one-process tuned call while the other ranks wait
quietly for its outcome, so an error there is raised on every rank too. The plan itself runs in
``autotune.distributed`` (execution only).
"""
from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.cache import BoundedCache
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import CommParams, load_comm
from autotune.db.lookup import SPLookup, SystemParameters
from autotune.db.platform import PlatformError
from autotune.feedback.speeds import RUN_SPEEDS, HostSpeeds, speeds_for, work_share
from autotune.kernels.inputs import require_finite
from autotune.models.fitted_phases import platform_factors
from autotune.select.distributed import as_plan, rank_plans
from autotune.select.placement import (
    Placement,
    communicator_platform,
    heterogeneous,
    placement,
    rank_hosts,
)
from autotune.settings import get_options, options

if TYPE_CHECKING:
    from mpi4py import MPI

    from autotune.distributed.collective import RankCores

# The selector's plans, keyed as select.rank.choose keys its decisions: by the loaded database
# objects (load_sp, load_comm: one object per file version) and cleared when full.
_PLANS: BoundedCache[tuple[object, object, Plan]] = BoundedCache()
MPI_MISSING = ('needs mpi4py: pip install "autotune[mpi]" (or mpi4py built against your site\'s MPI, '
               "see the README)")










# ------------------------------------------------------------------------------ run-time host speeds



def observed(comm: MPI.Comm, root: int, plan: Plan, phases, work: Callable):
    """Collective: ``work(phases)`` on every rank (errors agreed, as ``settled``), then each rank's
    sweep of the plan's work at its CPU share (``distributed.balance.busy`` of its compute phase)
    and its share of the work gathered on the root, which averages them into ``RUN_SPEEDS``."""
    import socket

    from autotune.distributed.balance import busy
    from autotune.distributed.plan import Phases

    own = phases if phases is not None else Phases()
    before = own.mark("compute")
    out = agreed(comm, lambda: work(own))
    spent = own.mark("compute") - before
    samples = comm.gather((socket.gethostname(), busy(spent, "compute"), work_share(plan, comm.size, root, comm.rank)),
                          root=root)
    if comm.rank == root:
        assert samples is not None, "the root gathers"
        key = tuple(sorted({h for h, _, _ in samples}))
        RUN_SPEEDS.setdefault(key, HostSpeeds()).observe(samples, root)
    return out








# ------------------------------------------------------------------------------ agreement and plan

def require_mpi4py() -> None:
    """ImportError naming the extra when mpi4py is missing (every rank raises it alone: no collective)."""
    if importlib.util.find_spec("mpi4py") is None:
        raise ImportError(f"comm= {MPI_MISSING}")


def agree_plan(family: str, operands: Callable[[], tuple], comm: MPI.Comm, root, config, explain: bool, phases, *,
            guard: Callable | None = None, refused: Exception | None = None,
            **flags) -> tuple[Plan, dict, tuple | None]:
    """Collective: the arguments every rank passed (agreed, ``root`` validated), the root's plan
    and its operands (``operands() -> (operands, typed problem or None where untuned)``, evaluated
    on the root), or the same error on every rank: any exception on the root reaches the others.
    ``guard(plan, operands, phases) -> plan``: the family's last word on the root's plan;
    ``refused``: this rank's error found before the call."""
    from autotune.distributed.collective import agree_args, core_info, share

    args, err = call_args(comm, root, family, phases=phases, **flags)
    err = refused or err
    infos = agree_args(comm, err, args, core_info())
    root, plan, ops, err = args["root"], None, None, None
    if comm.rank == root:
        try:
            ops, problem = operands()
            plan = root_plan(family, problem, infos, root, config, explain)
            plan = plan if guard is None else guard(plan, ops, phases)
        except Exception as exc:
            err = ValueError(str(exc)) if isinstance(exc, LookupError) else exc
    return share(comm, root, err, plan), args, ops


def call_args(comm: MPI.Comm, root, family: str, phases=None, **flags) -> tuple[dict, Exception | None]:
    """This rank's arguments every rank must pass alike, as comparable values, and what is wrong
    with them (``root`` must be an int in range(comm.size), ``phases`` None or a ``Phases``: every
    rank knows without asking)."""
    from autotune.distributed.plan import Phases

    args: dict = {"family": family, "root": f"<{type(root).__name__}>"}
    err: Exception | None = None if phases is None or isinstance(phases, Phases) else TypeError(
        f"phases must be an autotune.distributed.plan.Phases or None, got {type(phases).__name__}")
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)):
        err = err or ValueError(f"root must be an int rank, got {type(root).__name__}")
    else:
        args["root"] = int(root)
        if not 0 <= root < comm.size:
            err = err or ValueError(f"root {root} is not a rank of the communicator (0..{comm.size - 1})")
    for name, value in flags.items():
        try:
            args[name] = bool(value)
        except Exception:
            args[name] = f"<{type(value).__name__}>"
            err = err or ValueError(f"{name} must be true or false, got {type(value).__name__}")
    return args, err


def root_plan(family: str, problem: Problem | None, infos: list[RankCores], root: int, config,
               explain: bool) -> Plan:
    """Root only: the plan for the root node's cores (one process where the call is untuned)."""
    from autotune.distributed.collective import RankCores, node_cores

    if problem is None:
        return Plan("local", 1)
    names, cores = [RankCores(*i).host for i in infos], [node_cores(infos, r) for r in range(len(infos))]
    shares = [float(RankCores(*i).share) for i in infos]
    plan = _plan(family, problem, names, cores, root, config, explain, shares)
    return plan if config is not None else _fit_threads(plan, infos, root)




def checked_finite(plan: Plan, ops: tuple, phases) -> Plan:
    """A local Cholesky's finiteness check, on the root before the run (its ``distribution``
    phase, as the distributed runs' check and the model count it); the distributed run checks its
    own input."""
    from autotune.distributed.checks import all_finite
    from autotune.distributed.plan import timed

    if plan.algorithm == "local" and np.ndim(ops[0]) == 2:
        with timed(phases, "distribution"):
            finite = all_finite(np.asarray(ops[0]), plan.backend, max(plan.threads, 1))
        require_finite(finite)
    return plan




def square_problem(a, make: Callable[[int], Problem], rectangular: bool = False) -> tuple[tuple, Problem | None]:
    """((a,), ``make(n)`` or None) for the root's square matrix; scipy's error for another shape,
    unless ``rectangular`` (then scipy's own call on the root takes it)."""
    arrs = root_matrices((a,))
    if arrs is None:
        return (a,), None
    n, n2 = arrs[0].shape
    if n != n2 and not rectangular:
        raise ValueError(f"expected square matrix, got {arrs[0].shape}")
    return (a,), make(n) if n == n2 and n > 0 and arrs[0].dtype == np.float64 else None


def root_matrices(ops: tuple) -> list[np.ndarray] | None:
    """The root's operands as arrays, None when one is not 2-D (1-D or stacked: the one-process
    call, numpy/scipy's, on the root); ValueError where the root passed None."""
    if any(x is None for x in ops):
        raise ValueError("the root rank must pass the matrices (other ranks pass None)")
    arrs = [np.asarray(x) for x in ops]
    return None if any(x.ndim != 2 for x in arrs) else arrs




def _plan(family: str, problem: Problem, names: list[str], cores: list[int], root: int, config,
          explain: bool, shares: list[float] | None = None) -> Plan:
    """Root only: the forced plan or the selector's choice (cached per problem, ranks' hosts and
    database contents).
    ``names``, ``cores``: each rank's host name and the cores of its node. Ranks on hosts of measured,
    different speeds are placed by the mapping search (select.placement.placement); otherwise the
    distributed selector plans for the root node's cores. One rank without a usable database:
    the one-process library call."""
    nprocs = len(names)
    if config is not None:
        plan = as_plan(config, family)
        need = plan.p if plan.ranks is None else max(plan.ranks) + 1
        if need > nprocs:
            raise ValueError(f"plan needs {need} ranks, communicator has {nprocs}")
        return plan
    opts = get_options()
    sp, cp = load_sp(opts.db), load_comm(opts.db, nprocs=nprocs)
    if sp.table is None and nprocs == 1:     # no database and no second rank: nothing to plan,
        return Plan("local", 1)              # the library call (load_sp warned once)
    seen, source = speeds_for(cp, names, root)
    seen = seen.with_ranks(names, shares, root)
    key = (problem, tuple(names), tuple(cores), tuple(shares or ()), root, opts.allow_strassen, opts.min_efficiency,
           id(sp), id(cp), tuple(sorted(seen.host_speeds.items())))
    hit = _PLANS.get(key)
    if hit is not None and not explain:
        return hit[2]
    placed = _placement(problem, names, cores, root, sp, seen)
    if placed is not None:
        if explain:
            print(placed.describe())
            print(f"host speeds from the {source}: " + ", ".join(
                f"{h} {v:.3g}" for h, v in sorted(seen.host_speeds.items())) + " GFLOP/s (one-thread dgemm)")
        return _remember(key, sp, cp, placed.plan)
    dec = rank_plans(problem, nprocs, sp, seen, cores[root], opts.allow_strassen, min_efficiency=opts.min_efficiency,
                     memory_bytes=opts.memory_cap)
    if explain:
        print(dec)
    return _remember(key, sp, cp, dec.chosen)


def _remember(key: tuple, sp: SPLookup, cp: CommParams, plan: Plan) -> Plan:
    """Cache ``plan`` under ``key`` (emptied first when full); the entry holds ``sp`` and ``cp``, so
    the ids in its key stay theirs while it lives."""
    _PLANS.put(key, (sp, cp, plan))
    return plan


def _placement(problem: Problem, names: list[str], cores: list[int], root: int, sp: SystemParameters,
               cp: CommParams) -> Placement | None:
    """The mapping search's placement when the ranks span hosts of measured, different speeds and
    the problem is one the mapping model covers (square orders of gemm, Cholesky, LU); else None."""
    if not FAMILIES[problem.family].mapping or len(set(problem.dims)) != 1 or sp.table is None:
        return None
    hosts = rank_hosts(names, cores, root)
    if not heterogeneous(hosts, cp):
        return None
    try:
        platform = communicator_platform(hosts, cp, sp, platform_factors(sp, cp))
        return placement(problem.family, problem.order, hosts, platform)
    except (PlatformError, LookupError):
        return None


def _fit_threads(plan: Plan, infos: list[RankCores], root: int) -> Plan:
    """``plan`` with no more BLAS threads per rank than the fewest cores a rank running it may use
    (its affinity mask; the root alone runs a local plan) and than the root's thread budget (its
    quota, thread variables and library limits: the ranks start alike)."""
    from autotune.distributed.collective import mask_cores

    own = mask_cores(infos)
    most = own[root] if plan.algorithm == "local" else min(own[r] for r in plan.used_ranks(len(own), root))
    most = min(most, get_options().thread_budget)
    return plan if plan.threads <= most else dataclasses.replace(plan, threads=most)


def run_local(comm: MPI.Comm, root: int, plan: Plan, phases, work: Callable[[], np.ndarray]) -> np.ndarray | None:
    """Collective: ``work()`` on the root with the plan's threads, the others waiting quietly;
    its error is raised on every rank."""
    from autotune.distributed.plan import timed

    def run():
        if comm.rank != root:
            return None
        with options(threads=max(plan.threads, 1)), timed(phases, "compute"):
            return work()

    return agreed(comm, run)


def agreed(comm: MPI.Comm, work: Callable[[], object]):
    """Collective: ``work()`` on every rank (a plan may use only some of them), then an error any
    rank met is raised on every rank of ``comm`` (``collective.settle``), none left returning None."""
    from autotune.distributed.collective import settle

    out = err = None
    try:
        out = work()
    except Exception as exc:
        err = exc
    settle(comm, err)
    return out


# ------------------------------------------------------------------------------------- gemm extras



