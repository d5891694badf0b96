"""Run a Cholesky candidate in place on a Fortran-ordered float64 matrix; returns LAPACK's info."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from autotune import backends
from autotune.backends.pools import call_with_threads
from autotune.core.plans import Candidate


def run_cholesky(cand: Candidate, w: np.ndarray, lower: bool) -> int:
    """Factor ``w`` (Fortran order) in place with ``cand``; only the ``lower`` (or upper) triangle is used."""
    be = backends.get(cand.backend)
    return call_with_threads(be, cand.threads, cholesky_runner(cand), w, lower)


def cholesky_runner(cand: Candidate) -> Callable[[np.ndarray, bool], int]:
    """``run(w, lower) -> info``: the candidate's kernel at whatever thread count the library has."""
    be = backends.get(cand.backend)
    if cand.algorithm == "potrf":
        return be.ops["potrf"]
    if cand.algorithm == "blocked":
        return partial(_blocked, be.ops["potrf_blocked"], cand.param, cand.variant)
    op = be.ops.get(f"potrf_{cand.algorithm}")
    if op is None:
        raise ValueError(f"backend {cand.backend!r} has no {cand.algorithm} Cholesky driver")
    return op


def _blocked(op, block: int, variant: int, w: np.ndarray, lower: bool) -> int:
    return op(w, block, lower, variant)
