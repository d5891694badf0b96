"""Tuned stencils: ``steps`` sweeps of a point stencil over a 2-D field, in one process or over MPI.

``heat2d(u0, steps, alpha)`` runs the explicit heat step u + alpha (N + S + W + E - 4u) (004's
heat-diffusion program); ``apply`` any point stencil given by its weights or by a Numba kernel
``kernel(src, dst, r0, r1, c0, c1)`` of a given ``radius``. The field's outer ``radius`` rings
stay fixed (Dirichlet edges). Without ``comm`` the selector picks the kernel backend and threads;
with ``comm`` it also picks the processes, grid, halo width and schedule (blocking, overlapped,
border-first) from the models, the root gets the field and the other ranks None. ``distribute``
keeps the field distributed between calls (``DistributedField.advance``, ``gather``).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.families import CHECK_STEPS, StencilProblem
from autotune.entry import protocol
from autotune.entry import stencil as stencil_entry
from autotune.entry.stencil import StencilArgs

if TYPE_CHECKING:
    from mpi4py import MPI


def heat2d(u0, steps: int, alpha: float = 0.1, *, comm: MPI.Comm | None = None, root: int = 0,
           check_finite: bool = True,
           config=None, explain: bool = False, phases=None, balance=None) -> np.ndarray | None:
    """``steps`` explicit heat steps of the field ``u0`` (edges fixed): a new float64 array (on the
    root under ``comm``; None on the other ranks)."""
    if comm is None:
        return stencil_entry.local(u0, steps, stencil_entry.heat_stencil(alpha), check_finite=check_finite,
                                   config=config, explain=explain)
    return stencil_entry.collective(u0, steps, StencilArgs(alpha=alpha, heat=True), comm, root=root,
                                    check_finite=check_finite, config=config, explain=explain, phases=phases,
                                    balance=balance)


def apply(u0, steps: int, weights=None, *, kernel: Callable | None = None, radius: int | None = None,
          comm: MPI.Comm | None = None,
          root: int = 0, check_finite: bool = True, config=None, explain: bool = False,
          phases=None, balance=None) -> np.ndarray | None:
    """``steps`` sweeps of the stencil ``weights`` ((2R+1) x (2R+1): new[i, j] = sum w[a, b]
    u[i + a - R, j + b - R]) or of ``kernel`` over ``u0``, its outer R rings fixed. Under ``comm``,
    ``balance`` (True, an average's name or a ``balance.Policy``) moves rows and columns between
    ranks as their measured speeds change (002)."""
    if comm is None:
        return stencil_entry.local(u0, steps, stencil_entry.stencil_of(weights, kernel, radius),
                                   check_finite=check_finite, config=config, explain=explain)
    return stencil_entry.collective(u0, steps, StencilArgs(weights, kernel, radius), comm, root=root,
                                    check_finite=check_finite, config=config, explain=explain, phases=phases,
                                    balance=balance)


class DistributedField:
    """A field kept in halo tiles over a plan's ranks between calls (collective to build, advance,
    gather and free). Under a one-process plan the root holds it whole. Every method's checks are
    agreed by all ranks, so a bad ``steps`` or a freed field raises the same error on every rank."""

    def __init__(self, comm: MPI.Comm, agreed: stencil_entry.Agreed, phases=None, horizon: int | None = None):
        from autotune.distributed.runs import open_run
        from autotune.distributed.stencil import scatter_field
        plan, stencil, root, a = agreed.plan, agreed.stencil, agreed.root, agreed.field
        self.comm, self.plan, self.stencil, self.root, self.phases = comm, plan, stencil, root, phases
        self.whole, self.run, self.field, self.rebalancer = None, None, None, None
        self.freed = False
        if plan.algorithm == "local":
            self.whole = None if comm.rank != root else np.array(a, dtype=np.float64)
            return

        def build():
            self.run = open_run(comm, plan, root, phases)
            if self.run is None:
                return
            shape = self.run.comm.bcast(None if a is None else a.shape, root=0)
            prob = StencilProblem(shape[0], shape[1], 1, stencil.radius, stencil.corners)
            with self.run.be.threads(plan.threads):
                self.field = scatter_field(self.run.comm, prob, plan, a, stencil.sweeper(plan.backend, plan.threads),
                                           phases)
            self.rebalancer = stencil_entry.rebalancer_of(agreed, self.run.comm, horizon)

        protocol.agreed(comm, build)

    def _agree(self, method: str, err: Exception | None = None, **args) -> None:
        """Collective: every rank calls ``method`` with equal ``args`` on a field not freed, or
        all raise the same ValueError (``err``: this rank's own)."""
        from autotune.distributed.collective import agree_args

        if self.freed:
            err = ValueError(f"DistributedField.{method}: the field was freed (free() or the end of its with block)")
        agree_args(self.comm, err, {"method": method, **args})

    def _steps(self, steps) -> int:
        """Collective: ``steps`` checked and agreed by every rank."""
        try:
            count, err = stencil_entry.check_steps(steps), None
        except ValueError as exc:
            count, err = 0, exc
        self._agree("advance", err, **({} if err else {"steps": count}))
        return count

    def advance(self, steps: int) -> None:
        """Collective: ``steps`` more steps."""
        steps = self._steps(steps)
        if self.plan.algorithm == "local":
            def work():
                if self.comm.rank == self.root:
                    self.whole = stencil_entry.local(self.whole, steps, self.stencil, check_finite=False,
                                                     config=None)
            protocol.agreed(self.comm, work)
            return

        def work():
            if self.field is not None:
                with self.run.be.threads(self.plan.threads):
                    self.field.advance(steps, self.rebalancer)
        protocol.agreed(self.comm, work)

    def gather(self) -> np.ndarray | None:
        """Collective: a copy of the whole field on the root, None elsewhere."""
        self._agree("gather")
        if self.plan.algorithm == "local":
            return None if self.whole is None else self.whole.copy()
        return protocol.agreed(self.comm, lambda: None if self.field is None else self.field.gather())

    @property
    def local(self) -> np.ndarray | None:
        """This rank's tile (a view; the whole field on the root under a one-process plan)."""
        if self.freed:
            raise ValueError("DistributedField.local: the field was freed")
        return self.whole if self.field is None else self.field.local

    def free(self) -> None:
        """Collective: release the tiles, requests and the plan's communicator (again: nothing)."""
        self.freed = True
        self.whole = None
        if self.rebalancer is not None:
            self.rebalancer.finish()
            self.rebalancer = None
        if self.field is not None:
            self.field.free()
            self.field = None
        if self.run is not None:
            self.run.close()
            self.run = None

    def __enter__(self) -> DistributedField:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def distribute(u0, weights=None, *, kernel: Callable | None = None, radius: int | None = None,
               comm: MPI.Comm,
               steps: int = CHECK_STEPS, root: int = 0, check_finite: bool = True, config=None,
               explain: bool = False, phases=None, balance=None) -> DistributedField:
    """Collective: the root's ``u0`` cut into halo tiles on the plan chosen for ``steps`` steps
    per call (or ``config``); advance it with ``DistributedField.advance``, fetch it with ``gather``;
    with ``balance``, it rebalances while it advances (``DistributedField.rebalancer.events``)."""
    agreed = stencil_entry.agreed_plan(u0, 0, StencilArgs(weights, kernel, radius), comm, root, check_finite, config,
                                       explain, plan_steps=steps, balance=balance, phases=phases)
    return DistributedField(comm, agreed, phases, horizon=steps)


__all__ = ["DistributedField", "apply", "distribute", "heat2d"]
