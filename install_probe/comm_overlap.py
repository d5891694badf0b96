"""The comm probe's overlap series: per link kind and message size, how much of a message's time
hides behind real compute and how much CPU the message takes from that compute.

On one pair of ranks of the link kind, both ranks at once, interleaved per repetition: the
exchange alone (persistent send and receive of m bytes each way, started and waited, as a halo
exchange), a compute loop alone (stencil sweeps of a tile, sized to twice the exchange), and both
as an overlapped schedule runs them (start, compute with ``OVERLAP_POLLS`` tests between chunks,
wait). Of the overlapped run, the compute's growth is the message's CPU and the wait after it the
part that did not hide. The pair's slower rank counts, as a halo step waits for it. With them,
each halo schedule's own cost a step on a tiny tile (``step_overheads``).
"""
from __future__ import annotations

import time

import numpy as np

from autotune.core.assumptions import OVERLAP_POLLS
from autotune.core.families import StencilProblem
from autotune.core.plans import Plan
from autotune.geometry.halo import Rect
from autotune.models.stencil import SCHEDULES

COVER = 2.0            # the compute loop runs this many times the exchange alone: room to hide all of it
TILE = (128, 512)      # the swept tile (two float64 buffers of 512 KiB: a sweep is tens of microseconds)
TAG = 31


def _sweeps(sweeper, a: np.ndarray, b: np.ndarray, rect, count: int, reqs=None) -> None:
    """``count`` sweeps of ``rect`` (a into b and back), testing ``reqs`` between OVERLAP_POLLS chunks."""
    from mpi4py import MPI

    edges = np.linspace(0, count, min(OVERLAP_POLLS, count) + 1).astype(int)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        for k in range(lo, hi):
            sweeper(a, b, rect) if k % 2 == 0 else sweeper(b, a, rect)
        if reqs:
            MPI.Request.Testall(reqs)


def _requests(comm, m: int) -> tuple[list, np.ndarray, np.ndarray]:
    """Persistent receive and send of ``m`` bytes with the other rank of a two-rank ``comm``."""
    from mpi4py import MPI

    other = 1 - comm.Get_rank()
    send, recv = np.ones(max(m, 1), np.uint8), np.zeros(max(m, 1), np.uint8)
    reqs = [comm.Recv_init([recv, m, MPI.BYTE], source=other, tag=TAG),
            comm.Send_init([send, m, MPI.BYTE], dest=other, tag=TAG)]
    return reqs, send, recv


def _slowest(comm, values: list[float]) -> np.ndarray:
    from mpi4py import MPI

    out = np.zeros(len(values))
    comm.Allreduce(np.asarray(values, float), out, op=MPI.MAX)
    return out


def _exchange(comm, reqs) -> float:
    from mpi4py import MPI

    comm.Barrier()
    t0 = time.perf_counter()
    MPI.Prequest.Startall(reqs)
    MPI.Request.Waitall(reqs)
    return time.perf_counter() - t0


def _compute(comm, run) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    run(None)
    return time.perf_counter() - t0


def _both(comm, reqs, run) -> tuple[float, float]:
    """(seconds from the start to the compute's end, to the wait's end)."""
    from mpi4py import MPI

    comm.Barrier()
    t0 = time.perf_counter()
    MPI.Prequest.Startall(reqs)
    run(reqs)
    t1 = time.perf_counter()
    MPI.Request.Waitall(reqs)
    return t1 - t0, time.perf_counter() - t0


def measure_size(comm, m: int, reps: int) -> dict[str, float]:
    """One size on a two-rank ``comm`` (both ranks call it): medians over ``reps`` interleaved rounds
    of the pair's slower rank's exchange alone, compute alone, overlapped compute and overlapped
    whole; then ``cpu`` (seconds the compute grew, the tests' progress included) and ``hidden``
    (the share of the exchange not left after the slower compute)."""
    from autotune.kernels.stencil import Sweeper, heat_weights

    sweeper = Sweeper(heat_weights(0.1))
    a, b = np.random.default_rng(0).random(TILE), np.zeros(TILE)
    rect = Rect(1, TILE[0] - 1, 1, TILE[1] - 1)
    reqs, send, recv = _requests(comm, m)
    try:
        for _ in range(2):
            _exchange(comm, reqs)
            sweeper(a, b, rect)
        unit = float(np.median([_compute(comm, lambda _: sweeper(a, b, rect)) for _ in range(3)]))
        alone = float(np.median([_slowest(comm, [_exchange(comm, reqs)])[0] for _ in range(3)]))
        count = int(comm.bcast(max(1, int(np.ceil(COVER * alone / max(unit, 1e-7)))), root=0))

        def run(r):
            _sweeps(sweeper, a, b, rect, count, r)

        rows = np.array([_slowest(comm, [_exchange(comm, reqs), _compute(comm, run), *_both(comm, reqs, run)])
                         for _ in range(reps)])
    finally:
        for r in reqs:
            r.Free()
    exchange, compute, busy, total = np.median(rows, axis=0)
    wait = max(float(np.median(rows[:, 3] - rows[:, 2])), 0.0)      # paired: the same round's runs
    return {"bytes": m, "exchange": float(exchange), "compute": float(compute), "busy": float(busy),
            "total": float(total), "hidden": float(np.clip(1.0 - wait / max(exchange, 1e-9), 0.0, 1.0)),
            "cpu": max(float(np.median(rows[:, 2] - rows[:, 1])), 0.0), "spread": _spread(rows[:, 3] - rows[:, 1])}


def _spread(x: np.ndarray) -> float:
    q1, q3 = np.percentile(x, [25, 75])
    return float(q3 - q1)


STEP_TILE = 16        # the tiny tile side of ``step_overheads``: its sweeps and messages cost microseconds
STEP_COUNT = 200      # steps a timed run


def _timed(comm, run) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    run()
    comm.Barrier()
    return float(comm.bcast((time.perf_counter() - t0) / STEP_COUNT, root=0))


def step_overheads(comm, rounds: int) -> dict[str, float]:
    """Seconds a step of each halo schedule costs beyond its exchange and its sweep (Python calls,
    requests, tests, the border pieces' extra calls): on a two-rank ``comm``, a 2 x 1 grid of tiny
    tiles, each schedule's step against the same tile's exchange alone and sweep alone, interleaved."""
    from autotune.kernels.stencil import Sweeper, heat_weights
    from mpi4py import MPI

    from autotune.distributed.stencil import scatter_field

    prob = StencilProblem(2 * STEP_TILE, STEP_TILE, 1)
    u = np.random.default_rng(0).random((prob.rows, prob.cols)) if comm.Get_rank() == 0 else None
    sweeper = Sweeper(heat_weights(0.1))
    fields = {s: scatter_field(comm, prob, Plan(s, 2, 2, 1, 1, backend="numba-stencil"), u, sweeper)
              for s in SCHEDULES}
    base = fields["blocking"]

    def exchange():
        for _ in range(STEP_COUNT):
            MPI.Prequest.Startall(base.requests[0])
            MPI.Request.Waitall(base.requests[0])

    def sweep():
        for _ in range(STEP_COUNT):
            sweeper(base.bufs[0], base.bufs[1], base.sweeps[0].whole)

    try:
        for f in fields.values():
            f.advance(2)
        runs: dict[str, list[float]] = {k: [] for k in (*SCHEDULES, "exchange", "sweep")}
        for _ in range(rounds):
            for s, f in fields.items():
                runs[s].append(_timed(comm, lambda f=f: f.advance(STEP_COUNT)))
            runs["exchange"].append(_timed(comm, exchange))
            runs["sweep"].append(_timed(comm, sweep))
    finally:
        for f in fields.values():
            f.free()
    own = float(np.median(runs["exchange"]) + np.median(runs["sweep"]))
    return {s: max(float(np.median(runs[s])) - own, 0.0) for s in SCHEDULES}


def overlap_series(comm, sizes, reps: int) -> dict[str, list]:
    """Every size of ``sizes`` on a two-rank ``comm``, as the columns the comm lookup reads."""
    rows = [measure_size(comm, int(m), reps) for m in sizes]
    out = {key: [r[key] for r in rows] for key in rows[0]} if rows else {}
    return {**out, "step_overhead": step_overheads(comm, reps)}


__all__ = ["COVER", "measure_size", "overlap_series", "step_overheads"]
