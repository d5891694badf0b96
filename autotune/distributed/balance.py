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
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.routines import WORD
from autotune.distributed.collective import quota_share
from autotune.distributed.plan import Mark
from autotune.feedback.balance import Balancer, Policy
from autotune.models.movement import LinkCost

if TYPE_CHECKING:
    from mpi4py import MPI

# Periods not sampled at the start: kernels compile, pages are touched, MPI connections open.
WARM_UP = 2
# What each rank sends in the exchange: its average, its window's spread, its last move's seconds
# and that move's bytes (every rank's decision uses the largest), and since the last exchange its
# CPU seconds per step outside the sweeps and its share of the CPU.
FIELDS = 6


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


def busy(spent: Mark, timing: str, quota: float | None = None) -> float:
    """Seconds a period's sweeps take this rank at the CPU share it gets: their CPU seconds over
    that share. Under a CFS quota the share is the quota's (``collective.quota_share``: what the
    rank sustains; its waits sleep, so CPU / wall would undercount it); otherwise the share of the
    period the process ran (CPU / wall; MPI waits spin, so only time the host took away lowers it).
    Lost time slows the rank wherever it falls, in its sweeps or in its halo waits, which the
    sweeps' wall time alone would not show. ``timing="iteration"``: the period's wall time (002's
    failing first measure)."""
    if timing == "iteration":
        return spent.wall
    return (spent.phase_cpu if spent.phase_cpu > 0 else spent.phase) / share(spent, quota)


def share(spent: Mark, quota: float | None) -> float:
    """The share of a core this rank runs at: its quota's (``collective.quota_share``) where it has
    one, else the part of the period it ran (CPU / wall)."""
    return quota if quota else spent.share


def step_overhead(other_cpu, share) -> np.ndarray:
    """Seconds per step each rank needs besides its sweeps: the halo work every rank does (the
    least CPU any rank spent outside its sweeps: the others' extra is waiting) at its CPU share.
    Added to the sweeps' time, it balances a rank whose share is small: its halo work, too, runs
    at that share."""
    return float(np.min(other_cpu)) / np.maximum(np.asarray(share, float), 1e-3)


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

    def __init__(self, comm: MPI.Comm, policy: Policy, link: LinkCost, minimum: int, horizon: int | None = None):
        self.comm, self.link, self.horizon = comm, link, horizon
        self.balancer = Balancer(policy, minimum)
        names = comm.allgather(socket.gethostname())
        self.hosts = np.array([names.index(h) for h in names])
        self.quota = quota_share(comm)
        self.events: list[Event] = []
        self.steps = 0
        self._req, self._skip = None, WARM_UP
        self._mine = np.zeros(FIELDS)
        self._all = np.zeros(FIELDS * comm.size)
        self._moved = (0.0, 0.0)           # this rank's seconds and the bytes of its last move
        self._since = Mark(0.0, 0.0, 0.0, 0.0)   # clocks summed since the last exchange
        self._steps = 0

    def period(self, field, spent: Mark, steps: int, remaining: int) -> None:
        """After an exchange period of ``steps`` steps (``spent``: its clocks and compute phase):
        decide on the exchange started after the previous one (moving the field if so), then
        sample this period."""
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
        self._since, self._steps = self._since + spent, self._steps + steps
        if self.balancer.sample(busy(spent, self.balancer.policy.timing, self.quota) / max(field.cells * steps, 1)):
            w = self._since
            self._mine[:] = (*self.balancer.mine(), *self._moved, (w.cpu - w.phase_cpu) / max(self._steps, 1),
                             share(w, self.quota))
            self._since, self._steps = Mark(0.0, 0.0, 0.0, 0.0), 0
            self._req = self.comm.Iallgather(self._mine, self._all)

    def _decide(self, field, remaining: int) -> bool:
        got = self._all.reshape(self.comm.size, FIELDS)
        rates, spreads = got[:, 0].copy(), got[:, 1].copy()
        last_s, last_bytes = float(got[:, 2].max()), float(got[:, 3].max())
        rows, cols = field.shares()
        if self.balancer.policy.timing == "compute":
            rates = rates + step_overhead(got[:, 4], got[:, 5]) / np.outer(rows, cols).ravel()

        def cost(new_rows, new_cols) -> float:
            """The links' time for the cells moved, or the last move's measured time scaled by the
            bytes (never below it: allocating and refilling the halos cost as much for a small move)."""
            volume = moved_cells(rows, cols, new_rows, new_cols) * WORD
            modelled = self.link.move(volume, self.hosts)
            measured = last_s * max(1.0, float(volume.sum()) / last_bytes) if last_bytes > 0 else 0.0
            return max(modelled, measured)

        if self.horizon is not None:          # steps the field is kept for, beyond this call
            remaining = max(remaining, self.horizon - self.steps)
        d = self.balancer.decide(rates, spreads, rows, cols, remaining, cost)
        if d.move:
            t0 = time.perf_counter()
            field.relayout(d.rows, d.cols)
            volume = float(moved_cells(rows, cols, d.rows, d.cols).sum() * WORD)
            self._moved = (time.perf_counter() - t0, volume)
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


__all__ = ["Event", "Rebalancer", "busy", "moved_cells", "share", "step_overhead"]
