"""Run time of a synthetic master/worker-of-pipelines plan (003) on given links.

One iteration: the master sends each worker its batch (one after the other on its link), every
worker's tasks flow through its stages, the iteration ends when the master has every reply; the
pipelines are empty again, so iterations are independent draws and the run is their sum
(docs/models.md#pipeline). A stage is a single server; a replicated stage is r servers behind its
manager, which hands a task to the first replica free (it knows one is free when its result
arrives) and takes a task from upstream only then: a task above the eager limit crosses the link
after the replica frees. Each message costs the (ts + m tw) of its link, within a host or between hosts (the comm
probe's ``link_host`` / ``link_net``), plus the receiver's wake-up (it polls). Stage times are
drawn uniformly from mean ± spread with common random numbers per (worker, stage, task), so two
configurations of one workload are compared on the same draws. Compute stages sharing a processor
share its core: consecutive ones run as one server, their times added.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.core.assumptions import MPI_EAGER_BYTES, PIPELINE_POLL_SECONDS
from autotune.core.workload import MANAGER, STAGE, Spec, WorkloadPlan
from autotune.db.comm_lookup import CommParams
from autotune.models.links import link_primitive, message

SAMPLES = 64          # Monte Carlo runs of the whole workload a prediction averages
_KEPT_DRAWS = 1 << 14     # a stage's SAMPLES-run draws are kept, read-only, up to this many values (128 KB)
_KEPT_STAGES = 128        # stages whose draws are kept (16 MB at most)

Hop = Callable[[float, bool], tuple[float, float, float]]
"""(bytes, between hosts?) -> (latency, seconds the message holds the sender's and receiver's links,
seconds of CPU it takes from the compute it overlaps at each end)"""


@dataclass(frozen=True)
class Prediction:
    """Predicted run time of a plan: the median over sampled runs, their spread (IQR / median)
    and each worker's median iteration time (its pipeline's makespan)."""

    seconds: float
    spread: float
    workers: tuple[float, ...]


def comm_hop(cp: CommParams) -> Hop:
    """A message's (ts, m tw) from the comm probe's one-way link primitives
    (``models.links.link_primitive``) and, between hosts, the CPU it takes from the stage computing
    beside it (``models.links.message``: the probe's overlap series); cached per size: a pipeline
    has three message sizes. Within a host the copy is the message's time, already on the path."""
    cache: dict[tuple[float, bool], tuple[float, float, float]] = {}

    def hop(nbytes: float, net: bool) -> tuple[float, float, float]:
        key = (float(nbytes), bool(net))
        if key not in cache:
            ts, tw = cp.ts_tw(link_primitive(cp, net, one_way=True), 2, nbytes)
            cache[key] = (ts, tw * nbytes, message(cp, True, nbytes, ts + tw * nbytes).cpu if net else 0.0)
        return cache[key]
    return hop


def nominal_hop(ts_host: float, tw_host: float, ts_net: float, tw_net: float, cpu_net: float = 0.0) -> Hop:
    """A hop from given (ts, tw) within a host and between hosts, and a network message's CPU at
    each end (tests, the bench's rates)."""
    return lambda nbytes, net: (ts_net, tw_net * nbytes, cpu_net) if net else (ts_host, tw_host * nbytes, 0.0)


def _link(hop: Hop, host: tuple[int, ...], a: int, b: int, nbytes: float) -> tuple[float, float]:
    """(latency, seconds on the links) of a message from plan process ``a`` to ``b``: between hosts
    it holds the sender's outgoing and the receiver's incoming link for m tw, within one nothing."""
    lat, occ, _ = hop(nbytes, host[a] != host[b])
    return (lat, occ) if host[a] != host[b] else (lat + occ, 0.0)


def _cpu(hop: Hop, host: tuple[int, ...], a: int, b: int, nbytes: float) -> float:
    """CPU a message from ``a`` to ``b`` takes at each end from the stage computing there (between
    hosts: the kernel's packets and the MPI library's progress; within a host nothing beyond its time)."""
    return hop(nbytes, True)[2] if host[a] != host[b] else 0.0


def _paced(ready: np.ndarray, gap: float) -> np.ndarray:
    """Departures of messages ready at ``ready`` (n runs x tasks, in order) over a link that
    carries one per ``gap`` seconds: the tasks in flight share it. out_i = max(ready_i, out_i-1 + gap),
    i.e. i gap + the running max of ready_k - k gap."""
    if gap <= 0:
        return ready
    steps = np.arange(ready.shape[1]) * gap
    return steps + np.maximum.accumulate(ready - steps, axis=1)


def _served(arrive: np.ndarray, t: np.ndarray) -> np.ndarray:
    """When one server, free from 0, finishes tasks arriving at ``arrive`` (in order) that take ``t``:
    done_i = max(arrive_i, done_i-1) + t_i, i.e. T_i + the running max of 0 and arrive_k - T_k-1
    (T the running sum of t)."""
    total = np.cumsum(t, axis=1)
    return total + np.maximum(np.maximum.accumulate(arrive - (total - t), axis=1), 0.0)


def draws(spec: Spec, worker: int, stage: int, n: int) -> np.ndarray:
    """Uniform(-1, 1) draws (n runs x tasks per batch) of one stage: common to every configuration.
    A generator fills its rows in order, so n runs' draws are the first n of SAMPLES runs': those
    are kept when small (the tuner screens hundreds of configurations on the same draws)."""
    if n <= SAMPLES and SAMPLES * spec.initial_messages <= _KEPT_DRAWS:
        return _kept_draws(spec.seed, worker, stage, spec.initial_messages)[:n]
    return _drawn(spec.seed, worker, stage, n, spec.initial_messages)


def _drawn(seed: int, worker: int, stage: int, n: int, tasks: int) -> np.ndarray:
    return np.random.default_rng((seed, worker, stage)).uniform(-1.0, 1.0, (n, tasks))


@lru_cache(maxsize=_KEPT_STAGES)
def _kept_draws(seed: int, worker: int, stage: int, tasks: int) -> np.ndarray:
    """A stage's draws for SAMPLES runs, read-only."""
    out = _drawn(seed, worker, stage, SAMPLES, tasks)
    out.flags.writeable = False
    return out


def _units(pl: WorkloadPlan, worker: int) -> list[tuple[int, tuple[int, ...]]]:
    """The worker's stages in order as (process receiving its tasks, its servers), from its head
    along each process's target back to the master."""
    out, k = [], pl.heads[worker]
    while k:
        p = pl.processes[k]
        out.append((k, p.replicas if p.role == MANAGER else (k,)))
        k = p.target
    return out


def _service(pl: WorkloadPlan, worker: int, n: int, receiver: int, merged: dict, key: int) -> np.ndarray:
    """Service times (n runs x tasks) of one stage's servers (a merged compute group: their sum)."""
    spec = pl.spec
    stages = merged.get(receiver, [pl.processes[receiver].stage])
    w = spec.workers[worker]
    return sum(np.maximum(w.stages[j].mean + w.stages[j].spread * draws(spec, key, j, n), 0.0) for j in stages)


def _merge(pl: WorkloadPlan, worker: int, units) -> tuple[list, dict]:
    """Compute work: consecutive single stages on one processor become one server."""
    if pl.spec.work != "compute":
        return units, {}
    out: list = []
    merged: dict[int, list] = {}
    for u in units:
        p = pl.processes[u[0]]
        if out and p.role == STAGE and pl.processes[out[-1][0]].role == STAGE \
                and pl.processes[out[-1][0]].processor == p.processor:
            merged.setdefault(out[-1][0], [pl.processes[out[-1][0]].stage]).append(p.stage)
            continue
        out.append(u)
    return out, merged


def makespan(pl: WorkloadPlan, worker: int, arrive: np.ndarray, hop: Hop, host: tuple[int, ...],
             wake: float = PIPELINE_POLL_SECONDS / 2, draw_worker: int | None = None) -> np.ndarray:
    """When the master has the last reply of ``worker``'s batch, which reached its head at ``arrive``
    (n runs; stage times drawn as worker ``draw_worker``'s, default its own). A stage's links carry
    one task's messages per their m tw: a manager's carry the task to a replica on another host and
    back, and its forward. A stage's network messages also take their CPU from its compute."""
    spec = pl.spec
    units, merged = _merge(pl, worker, _units(pl, worker))
    cm = spec.initial_messages
    arrive = np.repeat(arrive[:, None], cm, axis=1)
    reply = spec.workers[worker].reply_bytes
    rows = np.arange(arrive.shape[0])
    upstream = 0
    for k, (receiver, servers) in enumerate(units):
        nxt = units[k + 1][0] if k + 1 < len(units) else 0
        out = spec.task_bytes if nxt else reply
        t = _service(pl, worker, arrive.shape[0], receiver, merged, worker if draw_worker is None else draw_worker)
        lat, occ = _link(hop, host, receiver, nxt, out)
        incoming = _link(hop, host, upstream, receiver, spec.task_bytes)[1] if k else 0.0
        if servers == (receiver,):
            cpu_in = _cpu(hop, host, upstream, receiver, spec.task_bytes) if k else 0.0
            done = _served(arrive, t + cpu_in + _cpu(hop, host, receiver, nxt, out))
            gap = max(occ, incoming)
        else:
            done = np.empty_like(arrive)
            to = np.array([sum(_link(hop, host, receiver, s, spec.task_bytes)) for s in servers]) + wake
            back = np.array([sum(_link(hop, host, s, receiver, out)) for s in servers]) + wake
            back += [_cpu(hop, host, receiver, s, spec.task_bytes) + _cpu(hop, host, s, receiver, out) for s in servers]
            free = np.zeros((arrive.shape[0], len(servers)))
            late = incoming if spec.task_bytes >= MPI_EAGER_BYTES else 0.0
            for i in range(cm):
                r = free.argmin(axis=1)
                end = np.maximum(arrive[:, i], free[rows, r] + late) + to[r] + t[:, i] + back[r]
                free[rows, r] = end
                done[:, i] = end
            done = np.sort(done, axis=1)
            remote = [s for s in servers if host[s] != host[receiver]]
            share = len(remote) / len(servers)
            gap = max(occ + share * _link(hop, host, receiver, remote[0], spec.task_bytes)[1] if remote else occ,
                      incoming + share * _link(hop, host, remote[0], receiver, out)[1] if remote else incoming)
        arrive = np.sort(_paced(done, gap) + lat + occ + wake, axis=1)
        upstream = receiver
    return arrive[:, -1]


def iteration_times(pl: WorkloadPlan, hop: Hop, hosts: int | None = None, n: int = SAMPLES) -> tuple[np.ndarray,
                    np.ndarray]:
    """Sampled iteration times (n runs x iterations), and per worker (workers x n x iterations)."""
    spec = pl.spec
    host = pl.host_of(hosts or pl.processors)
    runs = n * spec.iterations
    batch = spec.task_bytes * spec.initial_messages
    ends, sent = [], 0.0
    for w, head in enumerate(pl.heads):                 # the master's batches leave one by one
        lat, occ = _link(hop, host, 0, head, batch)
        sent += occ
        ends.append(makespan(pl, w, np.full(runs, sent + lat + PIPELINE_POLL_SECONDS / 2), hop, host))
    per_worker = np.stack(ends)
    return per_worker.max(axis=0).reshape(n, spec.iterations), per_worker.reshape(len(ends), n, spec.iterations)


def predict(pl: WorkloadPlan, hop: Hop, hosts: int | None = None, n: int = SAMPLES) -> Prediction:
    """Predicted run time of ``pl`` with processors dealt round-robin over ``hosts`` hosts
    (default: one host per processor), from ``n`` sampled runs."""
    it, per_worker = iteration_times(pl, hop, hosts, n)
    total = it.sum(axis=1)
    q1, med, q3 = np.percentile(total, [25, 50, 75])
    return Prediction(float(med), float((q3 - q1) / med) if med > 0 else 0.0,
                      tuple(float(np.median(w.mean(axis=1))) for w in per_worker))


__all__ = ["Hop", "Prediction", "comm_hop", "draws", "iteration_times", "makespan", "nominal_hop",
           "predict"]
