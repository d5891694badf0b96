"""Run an LU candidate in place on Fortran-ordered float64 operands; returns LAPACK's info."""
from __future__ import annotations

import numpy as np

from autotune import backends
from autotune.plans import Candidate

from .layout import call_with_threads


def run_lu(cand: Candidate, w: np.ndarray, ipiv: np.ndarray) -> int:
    """Factor ``w`` (Fortran order) in place with ``cand``; ``ipiv`` (the backend's integer dtype)
    receives LAPACK's 1-based pivots."""
    be = backends.get(cand.backend)
    return call_with_threads(be, cand.threads, be.ops["getrf"], w, ipiv)


def run_getrs(cand: Candidate, lu: np.ndarray, ipiv: np.ndarray, b: np.ndarray, trans: int = 0) -> int:
    """Solve op(A) x = b in place (``b`` Fortran order) from ``lu`` and 1-based ``ipiv`` with ``cand``'s library."""
    be = backends.get(cand.backend)
    return call_with_threads(be, cand.threads, be.ops["getrs"], lu, ipiv, b, trans)


def int_dtype(cand: Candidate) -> np.dtype:
    """The pivot integer type of ``cand``'s library (LAPACK's ``ipiv``)."""
    return np.dtype(backends.get(cand.backend).int_dtype)


__all__ = ["int_dtype", "run_getrs", "run_lu"]
