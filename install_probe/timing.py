"""Timing one call: warm-up, repeated samples, early stop once the median is stable."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .operands import Call
from .profile import Timing


@dataclass(frozen=True)
class Sample:
    """Summary of the per-call times of one measured point (seconds)."""

    median: float
    minimum: float
    q1: float
    q3: float
    reps: int

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else 0.0


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
    most one more; one whose call exceeds three budgets is timed once (its warm-up call).
    """
    t_start = time.perf_counter()
    warm = _once(call, 1)
    batch = call.restore is None and warm < policy.min_sample_seconds
    inner = _calibrate(call, policy.min_sample_seconds) if batch else 1
    times: list[float] = [warm] if warm > policy.point_budget_seconds else []  # too long to repeat
    while len(times) < policy.max_reps and warm <= 3 * policy.point_budget_seconds:
        times.append(_once(call, inner))
        elapsed = time.perf_counter() - t_start
        if len(times) >= policy.min_reps and stable(times, policy.rel_tol):
            break
        if elapsed > policy.point_budget_seconds and (
                len(times) >= policy.min_reps or elapsed + times[-1] > 3 * policy.point_budget_seconds):
            break
    arr = np.asarray(times)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Sample(float(med), float(arr.min()), float(q1), float(q3), len(times))
