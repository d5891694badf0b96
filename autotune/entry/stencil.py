"""Tuned stencil runs: the checks every rank agrees on, the plan (one process or a schedule on a
grid), and its run, in this process or collectively over ``comm=``.

As the other families' collective calls (``tuned_mpi``): every rank checks its own arguments and
one allgather agrees on them (``steps``, the stencil, ``root``, and the field's shape where a rank
passes one: different shapes raise the same ValueError everywhere); the root checks the field
(2-D, real, finite under ``check_finite``) and picks the plan, which reaches the others with its
verdict in one broadcast, so all ranks raise together or run the same plan.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.families import CHECK_STEPS, StencilProblem
from autotune.core.plans import Candidate, Plan
from autotune.core.routines import STENCIL_FLOPS
from autotune.db import load_sp
from autotune.db.comm_lookup import load_comm
from autotune.entry import protocol
from autotune.entry.decide import decide
from autotune.feedback.balance import Policy, policy_of
from autotune.geometry.halo import fits
from autotune.kernels import stencil as kernels
from autotune.kernels.inputs import finite_checked
from autotune.kernels.stencil import Sweeper, run_local
from autotune.models.links import link_cost
from autotune.models.movement import LinkCost
from autotune.select.ranking import choose
from autotune.settings import get_options

if TYPE_CHECKING:
    from mpi4py import MPI

UNTUNED = Candidate("sweep", "numpy-stencil", 1)     # no usable database: numpy's slices, as by hand
_KERNEL_FLOPS: dict[int, float] = {}


@dataclass(frozen=True)
class Stencil:
    """A stencil as the user gave it: weights or a kernel function, and its radius."""

    weights: np.ndarray | None
    kernel: Callable | None
    radius: int

    @property
    def corners(self) -> bool:
        if self.kernel is not None:
            return True
        w = self.weights
        assert w is not None, "weights where there is no kernel"
        rad = self.radius
        ii, jj = np.nonzero(w)
        return bool(np.any((ii != rad) & (jj != rad)))

    def cell_flops(self) -> float:
        """Flops per cell: 2·points - 1 for weights; a kernel's time per cell against the probed
        5-point kernel's, measured once per kernel on a 128 x 128 region."""
        if self.kernel is None:
            assert self.weights is not None, "weights where there is no kernel"
            return 2.0 * float(np.count_nonzero(self.weights)) - 1.0
        key = id(self.kernel)
        if key not in _KERNEL_FLOPS:
            _KERNEL_FLOPS[key] = float(STENCIL_FLOPS * _time(self.kernel, self.radius) / _time(None, 1))
        return _KERNEL_FLOPS[key]

    def key(self) -> str:
        """What every rank must pass alike (compared in the agreement)."""
        if self.kernel is not None:
            return f"kernel {getattr(self.kernel, '__qualname__', type(self.kernel).__name__)} radius {self.radius}"
        assert self.weights is not None, "weights where there is no kernel"
        return f"weights {self.weights.tolist()!r}"

    def sweeper(self, backend: str, threads: int) -> Sweeper:
        return Sweeper(self.weights, self.kernel, backend, threads)


def _time(kernel: Callable | None, radius: int, n: int = 128) -> float:
    """Best of five sweeps of an n x n region (the 5-point kernel when ``kernel`` is None)."""
    src = np.random.default_rng(0).random((n + 2 * radius, n + 2 * radius))
    dst = np.zeros_like(src)
    w = np.array([0.6, 0.1, 0.1, 0.1, 0.1])
    run = (lambda: kernels.cross5(src, dst, w, 1, n + 1, 1, n + 1)) if kernel is None else (
        lambda: kernel(src, dst, radius, n + radius, radius, n + radius))
    run()
    best = np.inf
    for _ in range(5):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def stencil_of(weights, kernel, radius) -> Stencil:
    """The checked stencil: a square, odd-sided, finite, real 2-D weight matrix, or a callable
    kernel with a positive int ``radius``; ValueError / TypeError otherwise."""
    if kernel is not None:
        if not callable(kernel):
            raise TypeError(f"kernel must be callable, got {type(kernel).__name__}")
        if weights is not None:
            raise ValueError("pass weights or kernel, not both")
        if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 1:
            raise ValueError(f"a kernel needs its radius: a positive int, got {radius!r}")
        return Stencil(None, kernel, int(radius))
    if weights is None:
        raise ValueError("pass the stencil's weights or a kernel")
    if np.iscomplexobj(weights):
        raise ValueError(f"weights must be real, got dtype {np.asarray(weights).dtype}")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] % 2 == 0 or w.shape[0] < 3:
        raise ValueError(f"weights must be a square 2-D array of odd side >= 3, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("weights must be finite")
    rad = w.shape[0] // 2
    if radius is not None and radius != rad:
        raise ValueError(f"radius {radius!r} does not match weights of side {w.shape[0]}")
    return Stencil(np.ascontiguousarray(w), None, rad)


def heat_stencil(alpha) -> Stencil:
    """The explicit heat step's 5-point stencil for a finite real ``alpha``; ValueError otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) \
            or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a finite real number, got {alpha!r}")
    return stencil_of(kernels.heat_weights(float(alpha)), None, None)


@dataclass(frozen=True)
class StencilArgs:
    """The stencil as a call passed it (weights, or a kernel and its radius, or heat2d's ``alpha``),
    checked on every rank inside the agreement so that a bad one raises on all."""

    weights: object = None
    kernel: object = None
    radius: object = None
    alpha: object = None
    heat: bool = False

    def checked(self) -> Stencil:
        return heat_stencil(self.alpha) if self.heat else stencil_of(self.weights, self.kernel, self.radius)


def check_steps(steps) -> int:
    """``steps`` as an int; ValueError for a negative count or a non-integer (as numpy's ``repeat``)."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise ValueError(f"steps must be an int, got {type(steps).__name__}")
    if steps < 0:
        raise ValueError(f"steps must be non-negative, got {steps}")
    return int(steps)


def check_field(u, check_finite: bool) -> np.ndarray:
    """The field as a 2-D real array; ValueError for another shape, a complex or non-numeric
    dtype, or (``check_finite``) an inf or NaN."""
    if u is None:
        raise ValueError("the root rank must pass the field (other ranks may pass None)")
    a = np.asarray(u)
    if a.ndim != 2:
        raise ValueError(f"the field must be 2-D, got {a.ndim}-D")
    if np.iscomplexobj(a) or a.dtype.kind not in "biuf":
        raise ValueError(f"the field must be real, got dtype {a.dtype}")
    finite_checked(a, check_finite)
    return a


def problem_of(shape: tuple[int, int], steps: int, stencil: Stencil) -> StencilProblem:
    return StencilProblem(int(shape[0]), int(shape[1]), max(steps, 1), stencil.radius, stencil.corners,
                          stencil.cell_flops(), kernel=stencil.kernel is not None)


# ------------------------------------------------------------------------------ one process

def local(u, steps, stencil: Stencil, *, check_finite: bool = True, config=None, explain: bool = False) -> np.ndarray:
    """``steps`` sweeps in this process with the candidate the selector picks (numpy's slices
    when no database is usable: the computation never depends on it)."""
    steps = check_steps(steps)
    a = check_field(u, check_finite)
    if steps == 0 or min(a.shape) <= 2 * stencil.radius:
        return np.array(a, dtype=np.float64)
    cand, dec = decide(problem_of(a.shape, steps, stencil), config, explain)
    cand = UNTUNED if cand is None else cand
    if cand.backend != "numba-stencil" and cand.threads > 1:
        raise ValueError(f"backend {cand.backend!r} runs one thread, got {cand.threads}")
    from autotune import backends

    be = backends.get(cand.backend)
    t0 = time.perf_counter()
    with be.threads(min(cand.threads, be.max_threads)):
        out = run_local(a, steps, stencil.radius, stencil.sweeper(cand.backend, cand.threads))
    if explain and dec is not None:
        print(f"ran {cand}: {time.perf_counter() - t0:.3g} s measured, {dec.predicted(cand):.3g} s predicted")
    return out


# ------------------------------------------------------------------------------ over MPI

@dataclass(frozen=True)
class Agreed:
    """What every rank holds after the agreement: the plan and the checked arguments (the field,
    problem and ``explain`` on the root only), and with ``balance=`` the policy and the root's link
    costs."""

    plan: Plan
    stencil: Stencil
    steps: int
    root: int
    field: np.ndarray | None = None
    problem: StencilProblem | None = None
    policy: Policy | None = None
    link: LinkCost | None = None
    explain: bool = False


def agreed_plan(u, steps, stencil_args: StencilArgs, comm: MPI.Comm, root, check_finite: bool, config, explain: bool,
                plan_steps: int | None = None, balance=None, phases=None) -> Agreed:
    """Collective: every rank checks and agrees on its arguments (the stencil, ``steps``,
    ``plan_steps``, ``balance``, ``root``, ``phases``, the field's shape), then the root checks the
    field and chooses the plan (and prices moving cells for ``balance``), shared in one broadcast."""
    from autotune.distributed.collective import agree_args, core_info, share

    protocol.require_mpi4py()
    args, err = protocol.call_args(comm, root, "stencil", phases=phases)
    stencil, steps_ok, planned, policy = None, 0, 0, None
    try:
        stencil = stencil_args.checked()
        steps_ok = check_steps(steps)
        planned = steps_ok if plan_steps is None else check_steps(plan_steps)
        policy = policy_of(balance)
        args.update(steps=steps_ok, planned=planned, stencil=stencil.key(), balance=policy)
        if u is not None:                       # every rank that passes a field passes the same shape
            args["shape"] = tuple(np.shape(u))
    except Exception as exc:
        err = err or exc
    infos = agree_args(comm, err, args, core_info())
    assert stencil is not None, "agree_args raised every rank's error"
    root = args["root"]
    plan = a = problem = link = None
    err = None
    if comm.rank == root:
        try:
            explain = bool(explain)
            a = check_field(u, check_finite)
            problem = problem_of(a.shape, planned, stencil)
            small = min(a.shape) <= 2 * stencil.radius or planned == 0
            plan = Plan("local", 1) if small and config is None else protocol.root_plan(
                "stencil", problem, infos, root, config, explain)
            if plan.algorithm != "local":
                _check_plan(plan, problem)
            link = None if policy is None else link_cost(load_comm(get_options().db, nprocs=comm.size))
        except Exception as exc:
            err = ValueError(str(exc)) if isinstance(exc, LookupError) else exc
    plan, link = share(comm, root, err, (plan, link))
    return Agreed(plan, stencil, steps_ok, root, a, problem, policy, link, comm.rank == root and bool(explain))


def _check_plan(plan: Plan, problem: StencilProblem) -> None:
    why = fits(problem.rows, problem.cols, plan.r, plan.c, plan.b)
    if why:
        raise ValueError(why)
    if plan.b < problem.radius or plan.b % problem.radius:
        raise ValueError(f"halo width {plan.b} must be a positive multiple of the stencil's radius {problem.radius}")
    if plan.algorithm == "border_first" and plan.b != problem.radius:
        raise ValueError("border_first runs one step per exchange: halo width = the stencil's radius")


def collective(u, steps, stencil_args: StencilArgs, comm: MPI.Comm, *, root=0, check_finite: bool = True, config=None,
               explain: bool = False, phases=None, balance=None) -> np.ndarray | None:
    """Collective ``steps`` sweeps: the field on the root, None elsewhere."""
    ag = agreed_plan(u, steps, stencil_args, comm, root, check_finite, config, explain, balance=balance,
                     phases=phases)
    t0 = time.perf_counter()
    out = _run(ag, comm, phases)
    if ag.explain and ag.problem is not None:
        print(measured_efficiency(ag.problem, ag.plan, time.perf_counter() - t0))
    return out


def measured_efficiency(problem: StencilProblem, plan: Plan, seconds: float) -> str:
    """explain's line after a run: its wall time and efficiency T_seq / (cores x T), T_seq the
    single-process best on one core as predicted (measuring it would take the run again)."""
    t_seq = sequential_estimate(problem)
    used = max(plan.p * plan.threads, 1)
    eff = "" if t_seq is None else f"; efficiency {t_seq / (used * seconds):.2f} (T_seq predicted {t_seq:.3g} s)"
    return f"ran {plan}: {seconds:.3g} s measured on {used} core(s){eff}"


def _run(ag: Agreed, comm: MPI.Comm, phases):
    plan, stencil, steps = ag.plan, ag.stencil, ag.steps
    if plan.algorithm == "local":
        return protocol.run_local(comm, ag.root, plan, phases,
                                   lambda: local(ag.field, steps, stencil, check_finite=False))
    from autotune.distributed.runs import plan_run
    from autotune.distributed.stencil import ALGORITHMS

    def run():
        with plan_run(comm, plan, ag.root, phases) as pr:
            if pr is None:
                return None
            shape = pr.comm.bcast(ag.field.shape if pr.is_root else None, root=0)
            prob = StencilProblem(shape[0], shape[1], max(steps, 1), stencil.radius, stencil.corners)
            rebalancer = rebalancer_of(ag, pr.comm)
            try:
                return ALGORITHMS[plan.algorithm](ag.field if pr.is_root else None, pr.comm, plan, problem=prob,
                                                  sweeper=stencil.sweeper(plan.backend, plan.threads),
                                                  steps=steps, phases=phases, rebalancer=rebalancer)
            finally:
                if rebalancer is not None:
                    rebalancer.finish()

    return protocol.agreed(comm, run)


def rebalancer_of(ag: Agreed, comm: MPI.Comm, horizon: int | None = None):
    """Collective over the plan's ranks: the run's ``Rebalancer`` (None without ``balance=``)."""
    if ag.policy is None:
        return None
    from autotune.distributed.balance import Rebalancer

    assert ag.link is not None, "priced with the policy (agreed_plan)"
    return Rebalancer(comm, ag.policy, ag.link, ag.plan.b, horizon)


def sequential_estimate(problem: StencilProblem) -> float | None:
    """T_seq: the single-process best on one core, predicted (None without a database)."""
    sp = load_sp(get_options().db)
    if sp.table is None:
        return None
    dec = choose(problem, sp, 1)
    return next(r.predicted for r in dec.ranking if r.candidate == dec.chosen)


__all__ = ["CHECK_STEPS", "Agreed", "Stencil", "StencilArgs", "agreed_plan", "check_field", "check_steps", "collective",
           "heat_stencil", "local", "problem_of", "sequential_estimate", "stencil_of"]
