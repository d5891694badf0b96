"""Timed runs of a forced candidate on a fresh problem (the validation step's and ``autotune bench
validate``'s measurements): one runner per validated family, in place on restored copies so that
only the algorithm is timed, as the models predict it."""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import autotune
from autotune.plans import Candidate

from .operands import spd_matrix


def candidate_runner(family: str, dims: tuple[int, ...], cand: Candidate, rng) -> Callable[[], float]:
    """One timed call of ``cand`` on a fresh problem of ``dims`` (shared with autotune bench validate)."""
    return RUNNERS[family](family, dims, cand, rng)


def _gemm_runner(family: str, dims: tuple[int, ...], cand: Candidate, rng) -> Callable[[], float]:
    m, k, n = dims
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = np.empty((m, n))
    return lambda: _once(lambda: autotune.tuned_gemm(a, b, out=out, config=cand))


def _cholesky_runner(family: str, dims: tuple[int, ...], cand: Candidate, rng) -> Callable[[], float]:
    """Cholesky factors a C-ordered copy in place so only the algorithm is timed: numpy's default
    layout with scipy's default lower=False, so the drivers factor the lower triangle of the Fortran
    view, the formulation the probe measures."""
    (n,) = dims
    spd = spd_matrix(rng, n, order="C")
    work = np.empty_like(spd)

    def run() -> float:
        work[...] = spd
        return _once(lambda: autotune.tuned_cholesky(work, overwrite_a=True, check_finite=False, config=cand))
    return run


def _lu_runner(family: str, dims: tuple[int, ...], cand: Candidate, rng) -> Callable[[], float]:
    """One timed LU factorisation (or solve) by ``cand`` in place on a Fortran-ordered copy of a
    general matrix, restored outside the timed region: the algorithm alone, as the models predict it."""
    a = np.asfortranarray(rng.standard_normal((dims[0], dims[0])))
    work = np.empty_like(a, order="F")
    rhs = np.asfortranarray(rng.standard_normal((dims[0], dims[1]))) if family == "solve" else None
    x = np.empty_like(rhs, order="F") if rhs is not None else None

    def run() -> float:
        work[...] = a
        if rhs is None:
            return _once(lambda: autotune.tuned_lu_factor(work, overwrite_a=True, check_finite=False, config=cand))
        x[...] = rhs
        return _once(lambda: autotune.tuned_solve(work, x, overwrite_a=True, overwrite_b=True, check_finite=False,
                                                  assume_a="gen", config=cand))
    return run


# How each validated family's candidate is timed.
RUNNERS = {"gemm": _gemm_runner, "cholesky": _cholesky_runner, "lu": _lu_runner, "solve": _lu_runner}


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
