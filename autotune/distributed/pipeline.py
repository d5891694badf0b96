"""Run a synthetic master/worker-of-pipelines plan (003 §3.3, §4.3) over mpi4py.

Every rank learns every rank's host, deals the plan's processors round-robin over the hosts (a
group's stages and a manager with its first replica share one) and takes the process the plan puts
on it; ranks left over idle, as the source's surplus processes exit. The master, the stages, the
communication managers and the replicas then follow 003's protocol (``workload.plan`` counts its
messages), each counting what it sends and receives. A waiting process polls (``Iprobe``) with a
backoff up to ``PIPELINE_POLL_SECONDS`` rather than spinning in MPI: sixteen ranks share two cores
here. A process that waits past the deadline aborts the job: a dead peer never leaves it hanging.
"""
from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from autotune.core.assumptions import PIPELINE_POLL_SECONDS
from autotune.core.routines import flops_of
from autotune.core.workload import MANAGER, MASTER, REPLICA, STAGE, Process, WorkloadPlan, assign

if TYPE_CHECKING:
    from mpi4py import MPI

BATCH, TASK, RESULT, REPLY, END = 31, 32, 33, 34, 35
IN_FLIGHT_POLL = PIPELINE_POLL_SECONDS / 10     # seconds between progress calls while sends are in flight


@dataclass(frozen=True)
class Row:
    """One process's report (003 §4.4's statistics): where it ran, its time, its units (the
    master's iterations, a stage's tasks), their mean and relative spread, its messages."""

    rank: int
    index: int
    role: str
    worker: int
    stage: int
    host: str
    seconds: float
    units: int
    per_unit: float
    spread: float
    sent: int
    received: int
    drained: int


@dataclass(frozen=True)
class Report:
    """A run on the root: every process's row (plan order) and the job's time (the master's)."""

    rows: tuple[Row, ...]
    seconds: float

    @property
    def sent(self) -> int:
        return sum(r.sent for r in self.rows)

    @property
    def received(self) -> int:
        return sum(r.received for r in self.rows)


class Work:
    """A stage's work for given seconds: a timed wait, or gemm calls sized by the probe's k. While
    its messages move it lets MPI progress as often as ``progress`` asks: a message above the eager
    limit moves only while its sender and receiver are inside MPI, and a working stage must not hold
    its neighbours."""

    def __init__(self, kind: str, seconds_per_call: float | None = None, n: int = 128):
        self.kind = kind
        self.n = n
        self.per_call = seconds_per_call
        if kind == "compute":
            rng = np.random.default_rng(0)
            self.a, self.b = rng.random((n, n)), rng.random((n, n))
            self.c = np.empty((n, n))

    def __call__(self, seconds: float, progress=lambda: None) -> None:
        if seconds <= 0:
            return
        if self.kind == "compute":
            every = max(1, round(IN_FLIGHT_POLL / self.per_call))
            for i in range(max(1, round(seconds / self.per_call))):
                np.matmul(self.a, self.b, out=self.c)
                if i % every == every - 1:
                    progress()
            return
        end = time.monotonic() + seconds
        every = progress()
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, every) if every else left)
            every = every and progress()


class Channel:
    """One process's messages: counted sends (kept until complete) and polled receives."""

    def __init__(self, comm: MPI.Comm, ranks: list[int], deadline: float, nbytes: int):
        from mpi4py import MPI
        self.MPI, self.comm, self.ranks, self.deadline = MPI, comm, ranks, deadline
        self.index_of = {r: i for i, r in enumerate(ranks)}
        self.out = np.zeros(max(nbytes, 1), np.uint8)
        self.inbox = np.empty(max(nbytes, 1), np.uint8)
        self.spare = np.empty(max(nbytes, 1), np.uint8)
        self.status = MPI.Status()
        self.pending: list = []
        self.posted, self.posted_from, self.arrived = None, -1, None
        self.sent = self.received = self.drained = 0
        self.delay = 0.0

    def send(self, to: int, tag: int, nbytes: int = 0) -> None:
        self.pending.append(self.comm.Isend([self.out[:nbytes], self.MPI.BYTE], self.ranks[to], tag))
        self.sent += 1

    def probe(self, source: int | None = None, tag: int | None = None) -> bool:
        """Is a message from plan process ``source`` (None: any) with ``tag`` (None: any) waiting?"""
        src = self.MPI.ANY_SOURCE if source is None else self.ranks[source]
        found = self.comm.Iprobe(src, self.MPI.ANY_TAG if tag is None else tag, self.status)
        self.progress()
        return found

    def post(self, source: int) -> None:
        """Post the receive of the next message from plan process ``source`` before working: a
        message above the eager limit moves only once its receive is posted."""
        self.posted = self.comm.Irecv([self.spare, self.MPI.BYTE], self.ranks[source], self.MPI.ANY_TAG)
        self.posted_from, self.arrived = source, None

    def progress(self) -> float | None:
        """Drive the sends in flight (dropping those complete) and the posted receive; seconds
        until this should be called again (None: nothing is moving)."""
        if self.pending:
            self.pending = [r for r in self.pending if not r.Test()]
        if self.posted is not None and self.arrived is None:
            st = self.MPI.Status()
            if self.posted.Test(st):
                self.arrived = (st.Get_source(), st.Get_tag(), st.Get_count(self.MPI.BYTE))
        if self.pending:
            return IN_FLIGHT_POLL
        return PIPELINE_POLL_SECONDS if self.posted is not None and self.arrived is None else None

    def take(self, count: bool = True) -> tuple[int, int, int]:
        """Receive the probed message: (plan index of its sender, tag, bytes)."""
        src, tag, n = self.status.Get_source(), self.status.Get_tag(), self.status.Get_count(self.MPI.BYTE)
        self.comm.Recv([self.inbox[:n], self.MPI.BYTE], src, tag)
        self.received += count
        self.drained += not count
        self.delay = 0.0
        return self.index_of.get(src, -1), tag, n

    def pause(self) -> None:
        """Sleep before the next poll, doubling up to the cap (``IN_FLIGHT_POLL`` while sends are
        in flight: a large message moves a fragment per call); abort the job past the deadline."""
        if time.monotonic() > self.deadline:
            sys.stderr.write(f"autotune synthetic: rank {self.comm.rank} waited past the run's deadline; "
                             "a peer died or hangs: aborting the job\n")
            sys.stderr.flush()
            self.comm.Abort(3)
        self.delay = min(max(self.delay * 2, 2e-5), IN_FLIGHT_POLL if self.pending else PIPELINE_POLL_SECONDS)
        time.sleep(self.delay)

    def wait(self, source: int | None = None, tag: int | None = None, count: bool = True) -> tuple[int, int, int]:
        """The next message from ``source`` with ``tag`` (the posted receive's if it is for them)."""
        if self.posted is not None and source == self.posted_from and tag is None:
            self.progress()
            while self.arrived is None:
                self.pause()
                self.progress()
            (src, tag, n), self.posted, self.arrived = self.arrived, None, None
            self.inbox, self.spare = self.spare, self.inbox
            self.received += count
            self.delay = 0.0
            return self.index_of.get(src, -1), tag, n
        while not self.probe(source, tag):
            self.pause()
        return self.take(count)

    def flush(self) -> None:
        while self.pending:
            self.progress()
            if self.pending:
                self.pause()

    def barrier(self) -> None:
        req = self.comm.Ibarrier()
        while not req.Test():
            self.pause()
        self.delay = 0.0


def _draw(rng, p: Process, pl: WorkloadPlan) -> float:
    s = pl.spec.workers[p.worker].stages[p.stage]
    return max(s.mean + s.spread * rng.uniform(-1.0, 1.0), 0.0)


def _master(ch: Channel, pl: WorkloadPlan, p: Process, units: list[float]) -> None:
    spec = pl.spec
    replies = len(spec.workers) * spec.initial_messages
    for _ in range(spec.iterations):
        t = time.perf_counter()
        for head in pl.heads:
            ch.send(head, BATCH, spec.task_bytes * spec.initial_messages)
        for _ in range(replies):
            ch.wait(None, REPLY)
        units.append(time.perf_counter() - t)
    for head in pl.heads:
        ch.send(head, END)


def _stage(ch: Channel, pl: WorkloadPlan, p: Process, units: list[float], work: Work, rng) -> None:
    spec = pl.spec
    out = (REPLY, spec.workers[p.worker].reply_bytes) if p.last else (TASK, spec.task_bytes)
    ch.post(p.source)
    while True:
        _, tag, _ = ch.wait(p.source)
        if tag == END:
            if not p.last:
                ch.send(p.target, END)
            return
        ch.post(p.source)
        for _ in range(spec.initial_messages if tag == BATCH else 1):
            t = _draw(rng, p, pl)
            work(t, ch.progress)
            units.append(t)
            ch.send(p.target, *out)


def _replica(ch: Channel, pl: WorkloadPlan, p: Process, units: list[float], work: Work, rng) -> None:
    size = pl.spec.workers[p.worker].reply_bytes if p.last else pl.spec.task_bytes
    ch.post(p.source)
    while True:
        _, tag, _ = ch.wait(p.source)
        if tag == END:
            ch.send(p.source, END)
            return
        ch.post(p.source)
        t = _draw(rng, p, pl)
        work(t, ch.progress)
        units.append(t)
        ch.send(p.source, RESULT, size)


def _manager(ch: Channel, pl: WorkloadPlan, p: Process, units: list[float]) -> None:
    """Hand each task to the first free replica, forward results; take a task from upstream only
    while a replica is free (003 §2.6: the manager must not change the pipeline's behaviour)."""
    spec = pl.spec
    out = (REPLY, spec.workers[p.worker].reply_bytes) if p.last else (TASK, spec.task_bytes)
    free, queued, ended = list(p.replicas), 0, False
    while not (ended and queued == 0 and len(free) == len(p.replicas)):
        busy = False
        while queued and free:
            ch.send(free.pop(0), TASK, spec.task_bytes)
            queued -= 1
        if not ended and free and not queued and ch.probe(p.source):
            _, tag, _ = ch.take()
            ended = tag == END
            queued += 0 if ended else spec.initial_messages if tag == BATCH else 1
            busy = True
        if ch.probe(None, RESULT):
            src, _, _ = ch.take()
            free = sorted([*free, src])
            ch.send(p.target, *out)
            units.append(0.0)
            busy = True
        if not busy:
            ch.pause()
    for r in p.replicas:
        ch.send(r, END)
    ch.send(p.target, END)          # to the master too, as the source does (drained there)


def _drain(ch: Channel, pl: WorkloadPlan, p: Process) -> None:
    """Receive the ends nobody waits for (``workload.plan``), counted as drained."""
    if p.role == MANAGER:
        for r in p.replicas:
            ch.wait(r, END, count=False)
    elif p.role == MASTER:
        for _ in range(p.drains):
            ch.wait(None, END, count=False)


GEMM_N = 128          # order of the gemm calls a compute stage repeats (a call is ~0.1 ms)


def calibrate(n: int = GEMM_N, calls: int = 12) -> float:
    """Seconds of one n x n gemm call on one thread, timed here (when the probe's k is not given)."""
    a, b, c = np.ones((n, n)), np.ones((n, n)), np.empty((n, n))
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t)
    return float(np.median(times[2:]))


def run(comm: MPI.Comm, pl: WorkloadPlan, timeout: float, root: int = 0, gemm_k: float | None = None) -> Report | None:
    """Run ``pl`` on ``comm`` (collective); the report on ``root``, None elsewhere. Every rank
    raises PipelineError alike if the ranks cannot hold the plan; past ``timeout`` seconds a
    waiting rank aborts the job. Compute stages repeat ``GEMM_N`` gemm calls on one thread, each
    its flops x ``gemm_k`` seconds (the probe's k; None: timed here)."""
    if pl.spec.work != "compute":
        return _run(comm, pl, timeout, root, Work("wait"))
    per_call = float(flops_of("gemm", "square", GEMM_N)[0]) * gemm_k if gemm_k else calibrate()
    with threadpool_limits(1):
        return _run(comm, pl, timeout, root, Work("compute", per_call, GEMM_N))


def _run(comm: MPI.Comm, pl: WorkloadPlan, timeout: float, root: int, work: Work) -> Report | None:
    names = comm.allgather(socket.gethostname())
    ranks, _ = assign(pl, names)              # deterministic: every rank raises alike
    me = ranks.index(comm.rank) if comm.rank in ranks else -1
    nbytes = max(pl.spec.task_bytes * pl.spec.initial_messages,
                 max(w.reply_bytes for w in pl.spec.workers))
    ch = Channel(comm, ranks, time.monotonic() + timeout, nbytes)
    units: list[float] = []
    ch.barrier()
    start = time.perf_counter()
    if me >= 0:
        p = pl.processes[me]
        rng = np.random.default_rng((pl.spec.seed, me))
        if p.role == MASTER:
            _master(ch, pl, p, units)
        elif p.role == STAGE:
            _stage(ch, pl, p, units, work, rng)
        elif p.role == MANAGER:
            _manager(ch, pl, p, units)
        elif p.role == REPLICA:
            _replica(ch, pl, p, units, work, rng)
        seconds = time.perf_counter() - start
        ch.flush()
        _drain(ch, pl, p)
    else:
        p, seconds = None, 0.0
    ch.flush()
    ch.barrier()
    row = None if p is None else _row(comm.rank, p, names[comm.rank], seconds, units, ch)
    rows = comm.gather(row, root)
    if comm.rank != root:
        return None
    got = sorted((r for r in rows if r is not None), key=lambda r: r.index)
    master = got[0]
    return Report(tuple(got), master.seconds)


def _row(rank: int, p: Process, host: str, seconds: float, units: list[float], ch: Channel) -> Row:
    u = np.asarray(units, float)
    if p.role == MASTER or p.role == MANAGER:
        per = seconds / max(len(u), 1)
        spread = float(u.std() / u.mean() * 100) if p.role == MASTER and len(u) and u.mean() > 0 else 0.0
    else:
        per = float(u.mean()) if len(u) else 0.0
        spread = float(u.std() / u.mean() * 100) if len(u) and u.mean() > 0 else 0.0
    return Row(rank, p.index, p.role, p.worker, p.stage, host, seconds, len(u), per, spread,
               ch.sent, ch.received, ch.drained)


def table(report: Report, title: str = "") -> str:
    """The report as 003's Cuadros 8-9: one process per line, then the totals."""
    lines = [title] if title else []
    lines.append(f"{'proc':>4} {'rank':>4} {'role':<8} {'w':>2} {'s':>2} {'host':<10} {'total s':>9} "
                 f"{'units':>5} {'per unit':>9} {'spread%':>7} {'sent':>5} {'recv':>5}")
    for r in report.rows:
        lines.append(f"{r.index:>4} {r.rank:>4} {r.role:<8} {r.worker:>2} {r.stage:>2} {r.host[:10]:<10} "
                     f"{r.seconds:>9.3f} {r.units:>5} {r.per_unit:>9.4f} {r.spread:>7.1f} {r.sent:>5} {r.received:>5}")
    lines.append(f"totals: {report.seconds:.3f} s, {report.sent} sent, {report.received} received, "
                 f"{sum(r.drained for r in report.rows)} ends drained")
    return "\n".join(lines)


__all__ = ["GEMM_N", "Report", "Row", "calibrate", "run", "table"]
