"""Stencil schedules over MPI: a field kept in halo tiles, swept step by step (004 §3.2.3).

``HaloField`` holds this rank's tile in two buffers with a halo of the plan's width ``b``, and
one set of persistent requests per buffer (``Send_init``/``Recv_init`` on subarray datatypes of
the buffer itself: no packing in Python, no collective). A step runs the plan's schedule on the
regions ``autotune.geometry.halo`` defines and ``models.stencil`` prices:

- ``blocking``: exchange, then sweep the whole region;
- ``overlap``: start the exchange, sweep the interior (testing the requests between row chunks so
  large messages progress), wait, sweep the border pieces;
- ``border_first``: sweep the border pieces into the new buffer (corners, then edges), start its
  exchange, sweep the interior, wait (one step per exchange; the halos are filled when the field
  is built).

A halo of b = s·R serves s steps per exchange. The field stays distributed between calls
(``advance``) and is gathered on request (``gather``).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from autotune.core.assumptions import OVERLAP_POLLS
from autotune.core.families import StencilProblem
from autotune.core.plans import Plan
from autotune.geometry.halo import CORNERS, EDGES, Rect, Tile
from autotune.geometry.layout import Axis, Layout, grid_weights
from autotune.kernels.stencil import Sweeper, level_rects

from . import movement
from .collective import quota_bound
from .plan import Phases, timed

if TYPE_CHECKING:
    from mpi4py import MPI

_DIRS = EDGES + CORNERS
TAG = 31000          # + the sender's direction index
QUIET_FIRST, QUIET_LONGEST = 2e-5, 2.5e-4     # a quiet wait's first and longest sleep (s): a step is ms


def layout_of(problem: StencilProblem, plan: Plan) -> Layout:
    """The field's block layout on the plan's grid (rows and columns by the ranks' speeds, if given)."""
    rw, cw = grid_weights(plan.weights, plan.r, plan.c) or (None, None)
    return Layout(Axis(problem.rows, plan.r, weights=rw), Axis(problem.cols, plan.c, weights=cw))


class HaloField:
    """This rank's part of a distributed field (collective to build: every rank of ``comm``, the
    plan's ranks with the root as rank 0, in grid order)."""

    def __init__(self, comm: MPI.Comm, problem: StencilProblem, plan: Plan, sweeper: Sweeper, local: np.ndarray,
                 phases=None, layout: Layout | None = None):
        self.comm, self.problem, self.plan, self.sweeper, self.phases = comm, problem, plan, sweeper, phases
        self._types: list = []
        self.error: Exception | None = None
        self.quiet = quota_bound(comm)
        self._build(layout if layout is not None else layout_of(problem, plan), local)

    def _build(self, lay: Layout, local: np.ndarray) -> None:
        """Tile, buffers, requests and filled halos for this rank's ``local`` piece of ``lay``."""
        pr, pc = divmod(self.comm.rank, self.plan.c)
        self.tile = Tile(self.problem.rows, self.problem.cols, self.plan.r, self.plan.c, pr, pc, self.plan.b,
                         self.problem.radius, (lay.rows.weights, lay.cols.weights))
        self.layout = lay
        self.substeps = self.tile.substeps
        # each sub-step's regions, by how far they reach into the halo (computed once: a step is short)
        rad = self.problem.radius
        self.sweeps = {g: self.tile.sweep(g) for g in range(0, self.substeps * rad, rad)}
        self._runs: dict[tuple[int, int], np.ndarray] = {}
        t = self.tile.tile
        self.bufs = [np.zeros(self.tile.local_shape), np.zeros(self.tile.local_shape)]
        for buf in self.bufs:
            buf[t.r0:t.r1, t.c0:t.c1] = local
        self.requests = [self._requests(buf) for buf in self.bufs]
        self.cur = 0
        self._prime()

    def _prime(self) -> None:
        """Fill both buffers' halos once: the field's fixed edge cells that lie in a halo are read
        from either buffer by the sub-steps that sweep into the halo (and border_first starts
        from a filled halo)."""
        from mpi4py import MPI

        with timed(self.phases, "distribution"):
            for reqs in self.requests:
                MPI.Prequest.Startall(reqs)
                MPI.Request.Waitall(reqs)

    def _subarray(self, rect: Rect):
        from mpi4py import MPI

        dt = MPI.DOUBLE.Create_subarray(list(self.tile.local_shape), list(rect.shape), [rect.r0, rect.c0]).Commit()
        self._types.append(dt)
        return dt

    def _requests(self, buf: np.ndarray) -> list:
        out = []
        for d in self.tile.directions(self.problem.corners):
            npr, npc = self.tile.neighbour(d)
            other = npr * self.plan.c + npc
            back = _DIRS.index((-d[0], -d[1]))
            out.append(self.comm.Recv_init([buf, 1, self._subarray(self.tile.recv(d))], source=other, tag=TAG + back))
            out.append(self.comm.Send_init([buf, 1, self._subarray(self.tile.send(d))], dest=other,
                                           tag=TAG + _DIRS.index(d)))
        return out

    # ------------------------------------------------------------------------------- steps

    def advance(self, steps: int, rebalancer=None) -> None:
        """Run ``steps`` steps of the plan's schedule (collective over the plan's ranks); with a
        ``Rebalancer`` (``distributed.balance``), each exchange period's times feed it and it may
        move the field to new shares between periods. An error in one rank's sweeps is raised on
        every rank of the plan once the steps' exchanges are done."""
        from .collective import settle

        if rebalancer is not None and self.phases is None:
            self.phases = Phases()
        self.error, done = None, 0
        while done < steps:
            n = 1 if self.plan.algorithm == "border_first" else min(self.substeps, steps - done)
            before = self.phases.mark("compute") if rebalancer is not None else None
            if self.plan.algorithm == "border_first":
                self._border_step()
            else:
                self._period(n, overlap=self.plan.algorithm == "overlap")
            done += n
            if rebalancer is not None:
                rebalancer.period(self, self.phases.mark("compute") - before, n, steps - done)
        settle(self.comm, self.error)

    def _sweep(self, rect: Rect) -> None:
        """Sweep ``rect``; once a sweep raised, this rank skips the rest but keeps exchanging halos
        (and balancing), so no rank waits for it, and ``advance`` raises that error on every rank."""
        self._guarded(self.sweeper, self.bufs[self.cur], self.bufs[1 - self.cur], rect)

    def _guarded(self, fn, *args) -> None:
        if self.error is not None:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.error = exc

    def _run_levels(self, n: int, first: int) -> None:
        """Sub-steps ``first``..n-1 of an n-step period, swept whole in one ``Sweeper.levels`` call
        (fused on the wavefront backend)."""
        if first >= n:
            return
        key = (n, first)
        if key not in self._runs:                     # a period's regions never change: built once
            rad = self.problem.radius
            self._runs[key] = level_rects([self.sweeps[(n - 1 - k) * rad].whole for k in range(first, n)])
        self._guarded(self.sweeper.levels, self.bufs[self.cur], self.bufs[1 - self.cur], self._runs[key])
        if (n - first) % 2:
            self.cur = 1 - self.cur

    def _period(self, n: int, overlap: bool) -> None:
        """One exchange, then ``n`` sub-steps (the first overlapped with it when ``overlap``)."""
        from mpi4py import MPI

        reqs = self.requests[self.cur]
        first = self.sweeps[(n - 1) * self.problem.radius]
        with timed(self.phases, "communication"):
            MPI.Prequest.Startall(reqs)
        if not overlap:
            with timed(self.phases, "communication"):
                self._wait(reqs)
            with timed(self.phases, "compute"):
                self._run_levels(n, 0)
            return
        self._polled(first.interior, reqs)
        with timed(self.phases, "communication"):
            self._wait(reqs)
        with timed(self.phases, "compute"):
            for piece in first.border:
                self._sweep(piece)
            self.cur = 1 - self.cur
            self._run_levels(n, 1)

    def _polled(self, rect: Rect, reqs: list) -> None:
        """Sweep ``rect`` in row chunks (the ``compute`` phase), testing ``reqs`` between them (the
        ``communication`` phase: progress for messages the MPI library moves only inside its calls)."""
        from mpi4py import MPI

        if rect.empty or not reqs:
            with timed(self.phases, "compute"):
                self._sweep(rect)
            return
        edges = np.linspace(rect.r0, rect.r1, min(OVERLAP_POLLS, rect.shape[0]) + 1).astype(int)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            with timed(self.phases, "compute"):
                self._sweep(Rect(int(a), int(b), rect.c0, rect.c1))
            with timed(self.phases, "communication"):
                MPI.Request.Testall(reqs)

    def _border_step(self) -> None:
        from mpi4py import MPI

        sweep = self.sweeps[0]
        reqs = self.requests[1 - self.cur]
        with timed(self.phases, "compute"):
            for piece in sweep.border:
                self._sweep(piece)
        with timed(self.phases, "communication"):
            MPI.Prequest.Startall(reqs)
        self._polled(sweep.interior, reqs)
        with timed(self.phases, "communication"):
            self._wait(reqs)
        self.cur = 1 - self.cur

    def _wait(self, reqs: list) -> None:
        """Wait for a step's halos: spinning in ``Waitall``, or, on a rank whose CPU quota is below a
        core (``quiet``), testing them between short sleeps, so that waiting does not spend the
        quota its next sweeps need (a spinning wait runs the rank into the CFS throttle)."""
        from mpi4py import MPI

        if not self.quiet:
            MPI.Request.Waitall(reqs)
            return
        pause = QUIET_FIRST
        while not MPI.Request.Testall(reqs):
            time.sleep(pause)
            pause = min(QUIET_LONGEST, 2 * pause)

    # ------------------------------------------------------------------------------- data

    @property
    def local(self) -> np.ndarray:
        """A view of this rank's tile (current values)."""
        t = self.tile.tile
        return self.bufs[self.cur][t.r0:t.r1, t.c0:t.c1]

    def gather(self) -> np.ndarray | None:
        """Collective: the whole field on the plan's root (rank 0 of ``comm``), None elsewhere."""
        with timed(self.phases, "collection"):
            return movement.gather(self.local, self.layout, self.comm, 0, order="C", piece="C")

    @property
    def cells(self) -> int:
        """Cells this rank owns."""
        return self.tile.tile.cells

    def shares(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows of each process row and columns of each process column."""
        return np.diff(self.layout.rows.bounds()), np.diff(self.layout.cols.bounds())

    def relayout(self, rows, cols) -> None:
        """Collective: move the owned cells to the layout with these row and column shares and
        refill the halos (002 §4.3.1-4: only owned data moves; halos are exchanged afterwards)."""
        new = Layout(Axis(self.problem.rows, self.plan.r, weights=tuple(float(x) for x in rows)),
                     Axis(self.problem.cols, self.plan.c, weights=tuple(float(x) for x in cols)))
        with timed(self.phases, "rebalance"):
            local = movement.redistribute(self.local, self.layout, new, self.comm, agreed=True)
            self.free()
            self._build(new, local)

    def free(self) -> None:
        for reqs in self.requests:
            for r in reqs:
                r.Free()
        for dt in self._types:
            dt.Free()
        self.requests, self._types = [[], []], []


def scatter_field(comm: MPI.Comm, problem: StencilProblem, plan: Plan, u: np.ndarray | None, sweeper: Sweeper,
                  phases=None) -> HaloField:
    """Collective over the plan's ranks: the root's field ``u`` cut into halo tiles."""
    with timed(phases, "distribution"):
        local = movement.scatter(u, layout_of(problem, plan), comm, root=0, piece="C")
        return HaloField(comm, problem, plan, sweeper, local, phases)


def _run(u, comm: MPI.Comm, plan: Plan, *, problem: StencilProblem, sweeper: Sweeper, steps: int, phases=None,
         rebalancer=None):
    """A whole call on the plan's ranks (``comm``: the root is rank 0): scatter, ``steps`` steps
    (rebalanced by ``rebalancer`` if given), gather."""
    field = scatter_field(comm, problem, plan, u, sweeper, phases)
    try:
        field.advance(steps, rebalancer)
        return field.gather()
    finally:
        field.free()


# The schedules this module runs (``Plan.algorithm``); one runner, the schedule is the plan's.
ALGORITHMS = dict.fromkeys(("blocking", "overlap", "border_first"), _run)

__all__ = ["ALGORITHMS", "HaloField", "layout_of", "scatter_field"]
