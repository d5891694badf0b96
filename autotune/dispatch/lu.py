"""Run an LU candidate in place on Fortran-ordered float64 operands; returns LAPACK's info."""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from autotune import backends
from autotune.backends.pools import call_with_threads
from autotune.core.plans import Candidate


def lu_kernel(cand: Candidate, be) -> Callable[[np.ndarray, np.ndarray], int]:
    """``run(w, ipiv) -> info`` of ``cand`` on its library ``be``: LAPACK's getrf, or our blocked
    driver at the candidate's block."""
    if cand.algorithm == "getrf_blocked":
        return functools.partial(be.ops["getrf_blocked"], nb=cand.param)
    return be.ops["getrf"]


def run_lu(cand: Candidate, w: np.ndarray, ipiv: np.ndarray) -> int:
    """Factor ``w`` (Fortran order) in place with ``cand``; ``ipiv`` (the backend's integer dtype)
    receives LAPACK's 1-based pivots."""
    be = backends.get(cand.backend)
    return call_with_threads(be, cand.threads, lu_kernel(cand, be), w, ipiv)


def run_getrs(cand: Candidate, lu: np.ndarray, ipiv: np.ndarray, b: np.ndarray, trans: int = 0) -> int:
    """Solve op(A) x = b in place (``b`` Fortran order) from ``lu`` and 1-based ``ipiv`` with ``cand``'s library."""
    be = backends.get(cand.backend)
    return call_with_threads(be, cand.threads, be.ops["getrs"], lu, ipiv, b, trans)


def int_dtype(cand: Candidate) -> np.dtype:
    """The pivot integer type of ``cand``'s library (LAPACK's ``ipiv``)."""
    return np.dtype(backends.get(cand.backend).int_dtype)


__all__ = ["int_dtype", "lu_kernel", "run_getrs", "run_lu"]
