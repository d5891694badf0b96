"""The set-up every distributed algorithm shares, written once for all families.

A collective call ``fn(operands, comm, plan, *, root, phases)`` runs in two steps:

1. ``agree_plan``: every rank checks the plan (``check_plan``), the root checks its operands;
   one allgather agrees on the errors and hands every rank the root's metadata (shapes, orders).
2. ``plan_run``: ranks ``0..plan.p-1`` (or the plan's ``ranks``, a mapping of processes to
   hosts, in that order) form a sub-communicator in which the caller's root is rank 0 (the
   models' convention: the root sits at grid position (0, 0) and holds the largest piece); the
   other ranks take no part and get None. It yields a ``PlanRun``: that
   communicator, this rank's position, the process grid (built on first use), the workspace,
   the phase timers and the plan's backend at the plan's thread count.

Collectives: one allgather, one ``Split``, and two more ``Split`` when the run builds a grid.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.core.plans import Plan
from autotune.geometry.layout import Layout, block_cyclic, grid_weights

from . import workspace
from .collective import raise_first, verdict_of
from .grid import ProcessGrid
from .plan import Phases, timed

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["PlanRun", "agree_plan", "check_plan", "cyclic_layout", "open_run", "plan_run"]


def cyclic_layout(plan: Plan, n: int) -> Layout:
    """The plan's block-cyclic layout of an n x n matrix, weighted by its ranks' speeds where the
    plan has them (HoHe, 001 §5.2)."""
    return block_cyclic(n, n, plan.r, plan.c, plan.b, weights=grid_weights(plan.weights, plan.r, plan.c))


def check_plan(plan: Plan, algorithm: str, size: int, root: int,
               problem: Callable[[Plan], str | None]) -> None:
    """Raise ValueError unless ``plan`` runs ``algorithm`` on ``size`` ranks from ``root``;
    ``problem(plan)`` is the family's own reason (None: none)."""
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be an autotune.core.plans.Plan, got {type(plan).__name__}")
    if plan.algorithm != algorithm:
        raise ValueError(f"plan is for {plan.algorithm!r}, not {algorithm!r}")
    why = problem(plan)
    if why:
        raise ValueError(why)
    if not 0 <= root < size:
        raise ValueError(f"root {root} outside the communicator (size {size})")
    if plan.ranks is not None:
        if max(plan.ranks) >= size:
            raise ValueError(f"plan's ranks {list(plan.ranks)} need {max(plan.ranks) + 1} processes, "
                             f"communicator has {size}")
        if plan.ranks[0] != root:
            raise ValueError(f"the plan's first rank ({plan.ranks[0]}) must be the root ({root})")
    elif plan.p > size:
        raise ValueError(f"plan needs p={plan.p} processes, communicator has {size}")
    elif root >= plan.p:
        raise ValueError(f"root {root} is not one of the plan's ranks 0..{plan.p - 1}")
    _backend(plan)


def _backend(plan: Plan):
    """The plan's loaded backend; ValueError when it is missing or cannot run plan.threads."""
    from autotune import backends

    try:
        be = backends.get(plan.backend)
    except Exception as exc:
        raise ValueError(f"backend {plan.backend!r} unavailable: {exc}") from None
    if not 1 <= plan.threads <= be.max_threads:
        raise ValueError(f"backend {plan.backend!r}: {plan.threads} threads outside 1..{be.max_threads}")
    return be


def agree_plan(comm: MPI.Comm, plan: Plan, algorithm: str, root: int, problem: Callable[[Plan], str | None],
               on_root: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
    """Collective: (the root's operands, None elsewhere; the root's metadata on every rank).

    Every rank checks the plan, the root runs ``on_root() -> (operands, metadata)``; one allgather
    carries the verdicts and the metadata, and the lowest rank's error is raised on every rank."""
    err, ops, meta = None, None, None
    try:
        check_plan(plan, algorithm, comm.size, root, problem)
        if comm.rank == root:
            ops, meta = on_root()
    except (ValueError, TypeError) as exc:
        err = exc
    gathered = comm.allgather((None if err is None else verdict_of(err), meta))
    raise_first(comm, [g[0] for g in gathered], err)
    return ops, gathered[root][1]


@dataclass
class PlanRun:
    """One collective call on the plan's ranks: ``comm`` holds them with the caller's root as
    rank 0; ``be`` is the plan's backend, set to ``plan.threads`` for the whole run."""

    comm: Any
    plan: Plan
    be: Any
    phases: Phases | None
    _grids: dict[tuple[int, int], ProcessGrid] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """This rank's position among the plan's ranks (the root is 0)."""
        return self.comm.rank

    @property
    def is_root(self) -> bool:
        return self.comm.rank == 0

    def grid(self, r: int | None = None, c: int | None = None) -> ProcessGrid:
        """The r x c grid (default: the plan's) over ``comm``, built on first use (collective)
        and freed when the run ends; the root is at (0, 0)."""
        key = (self.plan.r if r is None else r, self.plan.c if c is None else c)
        if key not in self._grids:
            self._grids[key] = ProcessGrid(self.comm, *key)
        return self._grids[key]

    def ph(self, name: str):
        """Time a block into phase ``name`` (nothing when the caller passed no ``Phases``)."""
        return timed(self.phases, name)

    def add(self, name: str, seconds: float) -> None:
        """Add seconds measured elsewhere to phase ``name``."""
        if self.phases is not None:
            self.phases.seconds[name] += seconds

    @staticmethod
    def empty(name: str, shape, order: str = "C") -> np.ndarray:
        """A reused buffer valid until the next request for ``name`` (``workspace.empty``)."""
        return workspace.empty(name, shape, order)

    def close(self) -> None:
        for grid in self._grids.values():
            grid.free()
        self._grids.clear()
        self.comm.Free()


def open_run(comm: MPI.Comm, plan: Plan, root: int, phases: Phases | None = None) -> PlanRun | None:
    """Collective (one ``Split``): a ``PlanRun`` on the plan's ranks (``Plan.used_ranks``) in their
    order, ``root`` first, None on the others, which take no part; the caller closes it (a field
    kept distributed between calls keeps its run open)."""
    from mpi4py import MPI

    order = plan.used_ranks(comm.size, root)
    used = comm.rank in order
    sub = comm.Split(0 if used else MPI.UNDEFINED, order.index(comm.rank) if used else 0)
    return PlanRun(sub, plan, _backend(plan), phases) if used else None


@contextmanager
def plan_run(comm: MPI.Comm, plan: Plan, root: int, phases: Phases | None = None) -> Iterator[PlanRun | None]:
    """``open_run`` for one call, at the plan's thread count, closed when it ends. Call after ``agree_plan``."""
    run = open_run(comm, plan, root, phases)
    if run is None:
        yield None
        return
    try:
        with run.be.threads(plan.threads):
            yield run
    finally:
        run.close()
