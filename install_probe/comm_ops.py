"""The comm probe's timed operations: one point's timing rule, the buffers, cache flushes, MPI
operations per primitive (warm and cold), round trips for LoOgGP, the platform's description."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

import math
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autotune.db import comm as dbc
from autotune.distributed import workspace
from autotune.distributed.movement import scatter_columns
from autotune.geometry.layout import Axis

from .comm_profile import (
    BATCH_OVERRUN,
    COLD,
    DARRAY_BLOCK,
    FOOTPRINT,
    LINK,
    SWAP,
    VECTOR_STRIDE,
    VECTOR_WIDTH,
    CommProfile,
    CommTiming,
)


@dataclass
class Point:
    mean: float
    median: float
    minimum: float
    q1: float
    q3: float
    reps: int
    inner: int


def time_point(comm: MPI.Comm, op, timing: CommTiming, *, batch: bool = True, prepare=None) -> Point:
    """Collective timing of ``op`` over ``comm`` (every member calls this with its own ``op``);
    ``prepare()``, if given, runs untimed before each repetition, after the re-warming calls."""
    from mpi4py import MPI

    from .timing import stable

    red = np.zeros(2)
    out = np.zeros(2)

    def maxed(a: float, b: float) -> tuple[float, float]:
        red[0], red[1] = a, b
        comm.Allreduce(red, out, op=MPI.MAX)
        return float(out[0]), float(out[1])

    start = MPI.Wtime()
    op()
    first, _ = maxed(MPI.Wtime() - start, 0.0)
    for _ in range(max(1, timing.warmup) - 1 if first < timing.rewarm_below_seconds else 0):
        op()          # a long first call has warmed what more calls would (the max over ranks: all agree)
    comm.Barrier()
    t0 = MPI.Wtime()
    op()
    single, _ = maxed(MPI.Wtime() - t0, 0.0)
    for _ in range(min(timing.max_inner, int(timing.warmup_seconds / max(single, 1e-7)))):
        op()
    inner = 1
    if batch and single < timing.min_sample_seconds:
        inner = int(min(timing.max_inner, max(1, math.ceil(timing.min_sample_seconds / max(single, 1e-9)))))
    rewarm = timing.rewarm if single < timing.rewarm_below_seconds else 0   # the max over ranks: all agree
    # A long call timed alone after a Barrier, with nothing to prepare, is a repetition already.
    times: list[float] = [single] if rewarm == 0 and inner == 1 and prepare is None else []
    while True:
        for _ in range(rewarm):   # untimed: the bookkeeping below evicted MPI's state from the caches
            op()
        if prepare is not None:
            prepare()
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(inner):
            op()
        t, wall = maxed((MPI.Wtime() - t0) / inner, MPI.Wtime() - start)
        times.append(t)
        if inner > 1 and t * inner > BATCH_OVERRUN * timing.min_sample_seconds:
            # the batch was sized on one fast call; calls this slow (ranks descheduled on shared
            # cores) need fewer per repetition. t is the max over ranks: every rank agrees.
            inner = int(max(1, math.ceil(timing.min_sample_seconds / t)))
        if len(times) >= timing.min_reps and stable(times, timing.rel_tol) and _mean_known(times, timing.mean_tol):
            break
        if len(times) >= timing.max_reps or (wall > timing.point_budget_seconds and len(times) >= 2):
            break
    arr = np.asarray(times)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Point(float(arr.mean()), float(med), float(arr.min()), float(q1), float(q3), len(times), inner)


def _mean_known(times: list[float], tol: float) -> bool:
    """The mean's standard error is within ``tol`` of it: oversubscribed ranks give two-mode
    times (the receiver running or asleep), whose median jumps between the modes from one
    size to the next while the mean, what a phase of many calls costs, settles."""
    arr = np.asarray(times)
    return float(arr.std(ddof=1)) / math.sqrt(len(arr)) <= tol * float(arr.mean())


# -- the operations -------------------------------------------------------------------------------

def _message_buffer(nbytes: int) -> np.ndarray:
    """``nbytes`` of memory made as the runs' workspace makes theirs (huge pages from
    ``workspace.HUGE_MIN_BYTES``: a transfer's time depends on the page size), touched once."""
    buf = workspace.huge_empty(-(-nbytes // 8)).view(np.uint8)[:nbytes]
    buf.fill(1)
    return buf


class Buffers:
    """Send/receive arrays sized for the largest message, touched once (no page faults timed)."""

    def __init__(self, nbytes: int):
        self.n = nbytes
        self.send = _message_buffer(nbytes)
        self.recv = _message_buffer(nbytes)


class CacheFlush:
    """Evicts this process's data from the caches: one read-modify-write sweep over four times
    the last-level cache (128 MiB if its size is unknown; twice leaves a sixth of it behind)."""

    def __init__(self, nbytes: int | None = None):
        self.buf = np.ones(max(1, (nbytes or 4 * last_level_cache_bytes()) // 8))

    def __call__(self) -> None:
        np.add(self.buf, 1.0, out=self.buf)


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """Size of the largest CPU cache (Linux sysfs), ``default`` where unknown."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=default)


def _vector_type(m: int):
    """A strided column block of a row-major matrix: rows x VECTOR_WIDTH doubles, stride 4x wider."""
    from mpi4py import MPI

    nd = max(1, m // 8)
    width = min(VECTOR_WIDTH, nd)
    rows = max(1, nd // width)
    dt = MPI.DOUBLE.Create_vector(rows, width, width * VECTOR_STRIDE).Commit()
    return dt, rows * width * VECTOR_STRIDE, rows * width


def _darray_type(m: int):
    """Rank 0's piece of a matrix distributed block-cyclically on a 2 x 2 grid (blocks of DARRAY_BLOCK)."""
    from mpi4py import MPI

    nd = max(1, m // 8)
    rows = 2 ** int(math.floor(math.log2(math.sqrt(nd))))
    cols = max(1, nd // rows)
    gsizes = [2 * rows, 2 * cols]
    dargs = [min(DARRAY_BLOCK, rows), min(DARRAY_BLOCK, cols)]
    dt = MPI.DOUBLE.Create_darray(4, 0, gsizes, [MPI.DISTRIBUTE_CYCLIC] * 2, dargs, [2, 2], MPI.ORDER_C).Commit()
    return dt, gsizes[0] * gsizes[1], dt.Get_size() // 8


def make_op(prim: str, comm: MPI.Comm, m: int, bufs: Buffers, *, row=None, col=None):
    """(op, payload bytes, cleanup) for one call of ``prim`` moving ``m`` bytes on ``comm``."""
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    B = MPI.BYTE
    s, r = bufs.send, bufs.recv
    counts = np.full(p, m, dtype=np.int64)
    displs = np.arange(p, dtype=np.int64) * m
    nothing = lambda: None  # noqa: E731
    if prim in SWAP:                          # both ranks send and receive at once
        sb, rb = [s[:m], B], [r[:m], B]
        return (lambda: comm.Sendrecv(sb, 1 - rank, 6, rb, 1 - rank, 6)), m, nothing
    if prim == "pingpong" or prim in LINK:
        sb, rb = [s[:m], B], [r[:m], B]
        if rank == 0:
            def op():
                comm.Send(sb, 1, 7)
                comm.Recv(rb, 1, 7)
        else:
            def op():
                comm.Recv(rb, 0, 7)
                comm.Send(sb, 0, 7)
        return op, m, nothing
    if prim in ("send_vector", "send_subarray"):
        dt, elements, payload = (_vector_type if prim == "send_vector" else _darray_type)(m)
        mat = np.ones(elements, dtype=np.float64)
        flat = np.ones(payload, dtype=np.float64)
        if rank == 0:
            def op():
                comm.Send([mat, 1, dt], 1, 8)
                comm.Recv([mat, 1, dt], 1, 8)
        else:
            def op():
                comm.Recv([flat, payload, MPI.DOUBLE], 0, 8)
                comm.Send([flat, payload, MPI.DOUBLE], 0, 8)
        return op, payload * 8, dt.Free
    if prim in ("bcast", "bcast_row", "bcast_col"):
        c = {"bcast": comm, "bcast_row": row, "bcast_col": col}[prim]
        buf = [s[:m], B]
        return (lambda: c.Bcast(buf, 0)), m, nothing
    if prim == "sendrecv":
        sb, rb = [s[:m], B], [r[:m], B]
        right, left = (rank + 1) % p, (rank - 1) % p
        return (lambda: comm.Sendrecv(sb, right, 9, rb, left, 9)), m, nothing
    if prim == "allgather":
        sb, rb = [s[:m], B], [r[:p * m], B]
        return (lambda: comm.Allgather(sb, rb)), m, nothing
    if prim == "allgatherv":
        sb, rb = [s[:m], B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Allgatherv(sb, rb)), m, nothing
    if prim in ("reduce", "allreduce"):
        nd = m // 8
        sd = s[:nd * 8].view(np.float64)
        rd = r[:nd * 8].view(np.float64)
        sb, rb = [sd, MPI.DOUBLE], [rd, MPI.DOUBLE]
        if prim == "reduce":
            return (lambda: comm.Reduce(sb, rb, MPI.SUM, 0)), nd * 8, nothing
        return (lambda: comm.Allreduce(sb, rb, MPI.SUM)), nd * 8, nothing
    if prim == "scatterv":
        sb, rb = [s[:p * m], (counts, displs), B], [r[:m], B]
        return (lambda: comm.Scatterv(sb, rb, 0)), m, nothing
    if prim == "gatherv":
        sb, rb = [s[:m], B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Gatherv(sb, rb, 0)), m, nothing
    if prim == "alltoallv":
        sb, rb = [s[:p * m], (counts, displs), B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Alltoallv(sb, rb)), m, nothing
    raise ValueError(f"unknown primitive {prim!r}")


class ColdOp:
    """One call of a cold primitive: a run's distribution of a user's matrix. Arrays of exactly
    the matrix's size, in float64, the root's own Scatterv block left in place; ``renew()`` (before
    each repetition, untimed) allocates and touches new ones, then every member's caches are
    flushed. The root's is a numpy array, as a user's matrix is: the single-copy transfer walks
    its pages, and how much of it huge pages back depends on where it falls. The other members
    receive into memory made as the runs' workspace is (``_message_buffer``). The root's array is
    not put on huge pages: the runs send from the user's matrices (or pack them first), so that
    would read low."""

    def __init__(self, prim: str, comm: MPI.Comm, m: int, flush: CacheFlush | None = None):
        if prim not in COLD:
            raise ValueError(f"unknown cold primitive {prim!r}")
        self.prim, self.comm, self.d, self.flush = prim, comm, m // 8, flush
        p = comm.Get_size()
        self.blocks = (np.full(p, self.d, dtype=np.int64), np.arange(p, dtype=np.int64) * self.d)
        self.renew()

    def renew(self) -> None:
        p, d = self.comm.Get_size(), self.d
        self.buf = None                          # the old arrays go before the new ones come
        if self.comm.Get_rank() == 0:
            self.buf = np.ones(d if self.prim == "bcast_cold" else p * d)
        elif self.prim != "colscatter_cold":   # that one receives into the runs' workspace
            self.buf = _message_buffer(8 * d).view(np.float64)
        if self.flush is not None:
            self.flush()

    def __call__(self) -> None:
        from mpi4py import MPI

        comm = self.comm
        if self.prim == "bcast_cold":
            comm.Bcast([self.buf, MPI.DOUBLE], 0)
        elif self.prim == "colscatter_cold":     # one column block of d elements per rank
            src = self.buf.reshape(1, -1) if self.buf is not None else None
            scatter_columns(src, 1, Axis(comm.Get_size() * self.d, comm.Get_size(), self.d), comm, 0)
        elif comm.Get_rank() == 0:
            comm.Scatterv([self.buf, self.blocks, MPI.DOUBLE], MPI.IN_PLACE, 0)
        else:
            comm.Scatterv(None, [self.buf, MPI.DOUBLE], 0)


def make_prtt(comm: MPI.Comm, m: int, n: int, delay: float, bufs: Buffers):
    """PRTT(n, d, s) (Kielmann et al.; Hoefler et al.'s LoOgGP): rank 0 sends n messages of s
    bytes, waiting ``delay`` seconds (busy) after each but the last; rank 1 receives them all and
    answers with one message of s bytes."""
    from mpi4py import MPI

    sb, rb = [bufs.send[:m], MPI.BYTE], [bufs.recv[:m], MPI.BYTE]
    clock = time.perf_counter
    if comm.Get_rank() == 0:
        def op():
            for i in range(n):
                comm.Send(sb, 1, 11)
                if delay and i < n - 1:
                    until = clock() + delay
                    while clock() < until:
                        pass
            comm.Recv(rb, 1, 12)
    else:
        def op():
            for _ in range(n):
                comm.Recv(rb, 0, 11)
            comm.Send(sb, 0, 12)
    return op


# Rooted, non-synchronising collectives: back-to-back calls would overlap (pipelining), so each
# repetition times a single call.
SINGLE_CALL = ("bcast", "reduce", "scatterv", "gatherv", "bcast_row", "bcast_col")   # and their cold timings


def footprint(prim: str, p: int, m: int) -> int:
    return m * FOOTPRINT.get(dbc.base_primitive(prim), lambda _p: 2)(p)


def buffer_bytes(profile: CommProfile, prims, p: int) -> int:
    """Bytes of each of the send and receive buffers ``prims`` need on p ranks: a whole
    p-block vector for the gathers, scatters and all-to-all, one message for the others (the
    cold primitives allocate their own)."""
    need = [(p if pr in FOOTPRINT else 1) * m for pr in prims if pr not in COLD for m in profile.sizes_for(pr)
            if footprint(pr, p, m) <= profile.max_buffer_bytes]
    if profile.loggp and p == 2:
        need += [m for m in profile.sizes if m <= profile.loggp_max_bytes]
    return max(need + [8])


# -- the run --------------------------------------------------------------------------------------

def link_pair(hosts: list[str], same: bool) -> tuple[int, int] | None:
    """The first pair of ranks (by rank) on one host (``same``) or on two different hosts."""
    for i in range(len(hosts)):
        for j in range(i + 1, len(hosts)):
            if (hosts[i] == hosts[j]) == same:
                return i, j
    return None


def platform_info(world) -> dict:
    """MPI library, world size, hosts, oversubscription (collective over ``world``)."""
    from mpi4py import MPI

    hw = dbc.hardware()
    host = MPI.Get_processor_name() or socket.gethostname()
    everyone = world.allgather((host, int(hw["physical_cores"])))
    per_host: dict[str, list[int]] = {}
    for h, cores in everyone:
        per_host.setdefault(h, []).append(cores)
    oversubscribed = any(len(cores) > cores[0] for cores in per_host.values())  # ranks on a host > its cores
    import mpi4py

    return {"library": MPI.Get_library_version().strip().splitlines()[0].strip(),
            "library_version": MPI.Get_library_version().strip(),
            "mpi_standard": "{}.{}".format(*MPI.Get_version()),
            "P": world.Get_size(), "oversubscribed": bool(oversubscribed), "hosts": len(per_host),
            "ranks_per_host": max(len(v) for v in per_host.values()),
            "physical_cores": int(hw["physical_cores"]), "hardware": hw, "dist": dbc.mpi_distributions(),
            "mpi4py": mpi4py.__version__}
