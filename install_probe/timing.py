"""Timing one call: warm-up, repeated samples, early stop once the median is stable; the share of
the CPU its threads got meanwhile (``cpu_share``), which tells a busy machine's timings apart."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from time import process_time, thread_time

import numpy as np

from autotune.db.noise import noise_bits

from .operands import Call
from .profile import Timing

SCHEDSTAT = "/proc/self/task"    # Linux: <tid>/schedstat holds ns on a CPU, ns waiting on a run queue, slices
THREAD_CLOCK_RESOLUTION = time.get_clock_info("thread_time").resolution


@dataclass(frozen=True)
class Sample:
    """Summary of the per-call times of one measured point (seconds)."""

    median: float
    minimum: float
    q1: float
    q3: float
    reps: int
    t_wall: float = 0.0       # over the timed samples: wall seconds, process CPU seconds,
    t_cpu: float = 0.0        # and the share of the CPU the threads got (0: not measured)
    cpu_share: float = 0.0

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else 0.0

    @property
    def noise(self) -> int:
        """Its noise bits (``autotune.db.noise``): short of CPU, spread too wide, or 0."""
        return noise_bits(self.cpu_share, self.spread)


@dataclass(frozen=True)
class Clocks:
    """One reading of the clocks a point's CPU share comes from (seconds): wall, the measuring
    thread's CPU, the process's CPU (all threads), and its threads' time on a CPU and waiting on a
    run queue (-1 where the system does not say)."""

    wall: float
    thread: float
    process: float
    ran: float
    waited: float


def clocks() -> Clocks:
    """The clocks now."""
    ran, waited = _schedstat()
    return Clocks(time.perf_counter(), thread_time(), process_time(), ran, waited)


def _schedstat() -> tuple[float, float]:
    """Seconds on a CPU and waiting on a run queue, summed over this process's threads; (-1, -1)
    where /proc does not have them."""
    try:
        tids = os.listdir(SCHEDSTAT)
    except OSError:
        return -1.0, -1.0
    ran = waited = 0
    for tid in tids:
        try:
            with open(f"{SCHEDSTAT}/{tid}/schedstat", "rb") as fh:
                fields = fh.read().split()
            ran, waited = ran + int(fields[0]), waited + int(fields[1])
        except (OSError, ValueError, IndexError):   # a thread that ended meanwhile
            continue
    return ran * 1e-9, waited * 1e-9


def cpu_share(start: Clocks, end: Clocks) -> float:
    """The share of the CPU a point's threads got between two readings: the lower of the measuring
    thread's CPU over wall time (what went to other programs or the hypervisor) and the threads'
    CPU over CPU plus run-queue wait (a worker starved while the measuring thread spins). About 1 on
    a quiet machine at any thread count (a library running a small call on one thread leaves the
    others asleep, not waiting); 0 when it cannot be told (nothing timed, a coarse thread clock)."""
    wall = end.wall - start.wall
    if wall <= 0 or wall < 10 * THREAD_CLOCK_RESOLUTION:
        return 0.0
    share = (end.thread - start.thread) / wall
    ran, waited = end.ran - start.ran, end.waited - start.waited
    if min(start.ran, end.ran, ran, waited) >= 0 and ran + waited > 0:
        share = min(share, ran / (ran + waited))
    return float(min(max(share, 1e-6), 1.0))


def lower_median(passes: list, key):
    """The pass with the lower median ``key`` (the faster of two, the middle of three, the second
    of four): what a probe keeps of a point timed in several passes, so one pass caught by a
    disturbance, or by a slow state of the machine lasting a few points, moves nothing."""
    return sorted(passes, key=key)[(len(passes) - 1) // 2]


def _once(call: Call, inner: int) -> float:
    """Seconds per call for one sample (``inner`` back-to-back calls, or one after a restore)."""
    if call.restore is not None:
        call.restore()
        t0 = time.perf_counter()
        call.run(1)
        return time.perf_counter() - t0
    t0 = time.perf_counter()
    call.run(inner)
    return (time.perf_counter() - t0) / inner


def stable(times: list[float], rel_tol: float) -> bool:
    """True once adding the last sample moved the median by at most ``rel_tol/2`` and the
    median's robust standard error is within ``rel_tol`` (so the median is good to ±rel_tol)."""
    if len(times) < 3:
        return False
    arr = np.asarray(times)
    med = float(np.median(arr))
    moved = abs(med - float(np.median(arr[:-1]))) / med
    q1, q3 = np.percentile(arr, [25, 75])
    stderr = 1.253 * (q3 - q1) / 1.349 / np.sqrt(len(arr))
    return moved <= rel_tol / 2 and stderr <= rel_tol * med


def _calibrate(call: Call, min_seconds: float) -> int:
    """Calls per sample so that a (warm) sample lasts at least ``min_seconds`` (like timeit)."""
    inner = 1
    while inner < 1_000_000:
        if _once(call, inner) * inner >= min_seconds:
            return inner
        inner *= 4
    return inner


def measure(call: Call, policy: Timing) -> Sample:
    """Time ``call`` under ``policy``: one warm-up, then samples until stable, max_reps, or budget.

    Fast out-of-place calls are batched so each sample lasts at least ``min_sample_seconds``.
    A point whose single call exceeds the budget counts its warm-up call as a sample and gets at
    most one more; one whose call exceeds three budgets is timed once (its warm-up call). The
    sample's ``cpu_share`` covers the samples it counts.
    """
    t_start = time.perf_counter()
    start = clocks()
    warm = _once(call, 1)
    batch = call.restore is None and warm < policy.min_sample_seconds
    inner = _calibrate(call, policy.min_sample_seconds) if batch else 1
    times: list[float] = [warm] if warm > policy.point_budget_seconds else []  # too long to repeat
    start = start if times else clocks()
    while len(times) < policy.max_reps and warm <= 3 * policy.point_budget_seconds:
        times.append(_once(call, inner))
        elapsed = time.perf_counter() - t_start
        if len(times) >= policy.min_reps and stable(times, policy.rel_tol):
            break
        if elapsed > policy.point_budget_seconds and (
                len(times) >= policy.min_reps or elapsed + times[-1] > 3 * policy.point_budget_seconds):
            break
    end = clocks()
    arr = np.asarray(times)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Sample(float(med), float(arr.min()), float(q1), float(q3), len(times), end.wall - start.wall,
                  end.process - start.process, cpu_share(start, end))
