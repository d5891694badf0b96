"""Run a Cholesky candidate in place on a Fortran-ordered float64 matrix; returns LAPACK's info."""
from __future__ import annotations

import numpy as np

from autotune import backends
from autotune.select import Candidate

from .layout import call_with_threads


def run_cholesky(cand: Candidate, w: np.ndarray, lower: bool) -> int:
    """Factor ``w`` (Fortran order) in place with ``cand``; only the ``lower`` (or upper) triangle is used."""
    be = backends.get(cand.backend)
    if cand.algorithm == "potrf":
        return call_with_threads(be, cand.threads, be.ops["potrf"], w, lower)
    if cand.algorithm == "blocked":
        return call_with_threads(be, cand.threads, be.ops["potrf_blocked"], w, cand.param, lower, cand.variant)
    op = be.ops.get(f"potrf_{cand.algorithm}")
    if op is None:
        raise ValueError(f"backend {cand.backend!r} has no {cand.algorithm} Cholesky driver")
    return call_with_threads(be, cand.threads, op, w, lower)
