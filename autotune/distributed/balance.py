"""A distributed field balancing itself while it runs (002): each rank's measured rate, a
non-blocking exchange of the averages, and the move to new shares when the policy says so.

Every rank feeds its own compute time per cell (``Policy.timing = "compute"``; 002 §4.3.5) into
its ``balance.Balancer``. When a window completes, an ``Iallgather`` of (average, spread) starts and
overlaps the next exchange period (§4.3.6); after that period every rank waits for it and makes the
same decision from the same numbers, so they all move or none does. A move is one ``Alltoallv`` of
owned cells (``HaloField.relayout``), with the ranks agreeing on errors before it; the halos are
refilled afterwards. The first ``WARM_UP`` periods and the one right after a move are not
sampled (new buffers, kernels compiling).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

import numpy as np

from autotune.balance import Balancer, LinkCost, Policy
from autotune.models.movement import ITEM

# Periods not sampled at the start: kernels compile, pages are touched, MPI connections open.
WARM_UP = 2


@dataclass(frozen=True)
class Event:
    """One decision of a run: after how many steps, the rates seen, the shares and why."""

    step: int
    rates: tuple[float, ...]
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    reason: str
    moved: bool
    gain: float
    cost: float


def moved_cells(rows, cols, new_rows, new_cols) -> np.ndarray:
    """Cells rank i sends rank j when block shares ``rows`` x ``cols`` become ``new_rows`` x ``new_cols``."""
    def overlap(a, b) -> np.ndarray:
        ea, eb = np.concatenate([[0], np.cumsum(a)]), np.concatenate([[0], np.cumsum(b)])
        lo = np.maximum(ea[:-1, None], eb[None, :-1])
        hi = np.minimum(ea[1:, None], eb[None, 1:])
        return np.maximum(hi - lo, 0)
    return np.kron(overlap(rows, new_rows), overlap(cols, new_cols))


class Rebalancer:
    """Drives one field's balancing (collective to build: it learns each rank's host). The gate
    weighs a move against the steps left in the current call, or to ``horizon`` steps in all."""

    def __init__(self, comm, policy: Policy, link: LinkCost, minimum: int, horizon: int | None = None):
        self.comm, self.link, self.horizon = comm, link, horizon
        self.balancer = Balancer(policy, minimum)
        names = comm.allgather(socket.gethostname())
        self.hosts = np.array([names.index(h) for h in names])
        self.events: list[Event] = []
        self.steps = 0
        self._req, self._skip = None, WARM_UP
        self._mine = np.zeros(2)
        self._all = np.zeros(2 * comm.size)

    def period(self, field, compute: float, wall: float, steps: int, remaining: int) -> None:
        """After an exchange period of ``steps`` steps: decide on the exchange started after the
        previous one (moving the field if so), then sample this period."""
        self.steps += steps
        if self._req is not None:
            self._req.Wait()
            self._req = None
            if self._decide(field, remaining):
                self._skip = 1
                return
        if self._skip:
            self._skip -= 1
            return
        seconds = compute if self.balancer.policy.timing == "compute" else wall
        if self.balancer.sample(seconds / max(field.cells * steps, 1)):
            self._mine[:] = self.balancer.mine()
            self._req = self.comm.Iallgather(self._mine, self._all)

    def _decide(self, field, remaining: int) -> bool:
        rates, spreads = self._all[0::2].copy(), self._all[1::2].copy()
        rows, cols = field.shares()

        def cost(new_rows, new_cols) -> float:
            return self.link.move(moved_cells(rows, cols, new_rows, new_cols) * ITEM, self.hosts)

        if self.horizon is not None:          # steps the field is kept for, beyond this call
            remaining = max(remaining, self.horizon - self.steps)
        d = self.balancer.decide(rates, spreads, rows, cols, remaining, cost)
        if d.move:
            field.relayout(d.rows, d.cols)
            self.balancer.moved()
        shown_rows, shown_cols = (d.rows, d.cols) if d.move else (rows, cols)
        self.events.append(Event(self.steps, tuple(float(x) for x in rates), tuple(int(x) for x in shown_rows),
                                 tuple(int(x) for x in shown_cols), d.reason, d.move, d.gain, d.cost))
        return d.move

    def finish(self) -> None:
        """Complete an exchange still in flight (collective: before the communicator goes away)."""
        if self._req is not None:
            self._req.Wait()
            self._req = None

    @property
    def moves(self) -> int:
        return sum(e.moved for e in self.events)


__all__ = ["Event", "Rebalancer", "moved_cells"]
