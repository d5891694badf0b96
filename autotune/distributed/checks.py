"""The root's input checks, shared by the distributed routines (Cholesky, Strassen gemm) and
the API's local path: one BLAS pass where numpy's would take two or run at one element per cycle."""
from __future__ import annotations

import numpy as np

__all__ = ["all_finite", "root_square"]


def root_square(a, routine: str) -> np.ndarray:
    """The root's square real matrix ``a`` as an array; ValueError (scipy's wording where scipy
    has one) for what no rank can factor: None, not 2-D square, complex or non-numeric."""
    if a is None:
        raise ValueError("the root rank must pass the matrix (other ranks may pass None)")
    arr = np.asarray(a)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"Input array is expected to be square but has the shape: {arr.shape}.")
    if np.iscomplexobj(arr) or arr.dtype.kind not in "biuf":
        raise ValueError(f"distributed {routine} factors real matrices only, got {arr.dtype}")
    return arr


def all_finite(x: np.ndarray, backend: str, threads: int) -> bool:
    """Whether no element of the 2-D ``x`` is NaN or infinite, checked as the plan would run it
    (``backend`` with ``threads``): one gemv of the column sums, then ``np.isfinite`` only if a
    sum is not finite (a NaN/inf, or finite values overflowing) or the gemv cannot run."""
    return _finite_sums(x, backend, threads) or bool(np.isfinite(x).all())


def _finite_sums(x: np.ndarray, backend: str, threads: int) -> bool:
    """Whether every column sum of float64 ``x`` is finite (False also when it cannot tell: other
    dtype, not contiguous, no gemv), by one gemv with a ones vector on the plan's BLAS and thread
    count (another library's idle threads would spin on the cores the ranks use): a NaN or inf
    anywhere makes its sum non-finite. Faster than ``x.sum()``, which runs at one element per
    cycle."""
    from autotune import backends

    cols = x if x.flags.f_contiguous else x.T
    if x.dtype != np.float64 or not cols.flags.f_contiguous or not cols.size:
        return False
    try:
        be = backends.get(backend)
    except backends.BackendUnavailable:
        return False
    if not be.supports("gemv"):
        return False
    sums = np.zeros(cols.shape[0])
    with be.threads(max(1, min(int(threads), be.max_threads))):
        be.gemv(1.0, cols, np.ones(cols.shape[1]), 0.0, sums)
    return bool(np.isfinite(sums).all())
