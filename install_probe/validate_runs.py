"""Timed runs of a forced candidate on a fresh problem (the validation step's and ``autotune bench
validate``'s measurements): in place on restored copies so that only the algorithm is timed, as the
models predict it."""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from autotune.benchmarks.calls import CALLS
from autotune.core.families import as_problem
from autotune.core.plans import Candidate

# The memory order of the general matrices a family's candidates are timed on: the formulation
# the probe measures (LU's Fortran matrices; numpy's C operands for gemm, which the library takes
# as their Fortran transposes; a Cholesky problem's order is its own: C, numpy's default, whose
# Fortran view's lower triangle scipy's default lower=False factors).
CHECKED_ORDER = {"gemm": "C", "cholesky": "C", "lu": "F", "solve": "F"}


def candidate_runner(family: str, dims: tuple[int, ...], cand: Candidate, rng) -> Callable[[], float]:
    """One timed call of ``cand`` on a fresh problem of ``dims``: in place (``FamilyCalls.in_place``)
    on copies of the operands it overwrites, restored outside the timed region, in the memory order
    the probe measures (``CHECKED_ORDER``)."""
    problem, calls = as_problem(family, dims), CALLS[family]
    pristine = calls.operands(problem, rng, CHECKED_ORDER[family])
    work = tuple(np.empty_like(x) if i in calls.overwrites else x for i, x in enumerate(pristine))
    keywords = calls.in_place(problem, *work)

    def run() -> float:
        for i in calls.overwrites:
            work[i][...] = pristine[i]
        return _once(lambda: calls.tuned(problem, *work, config=cand, **keywords))
    return run


def _once(fn) -> float:
    """Seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_point(fn: Callable[[], float], reps: int, seconds: float) -> float:
    """Median of up to ``reps`` runs after a warm-up (at least 2, fewer than ``reps`` once over ``seconds``)."""
    fn()
    times, start = [], time.perf_counter()
    while len(times) < reps and (len(times) < 2 or time.perf_counter() - start < seconds):
        times.append(fn())
    return float(np.median(times))
