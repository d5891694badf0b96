"""The one input preparation of the tuned calls, one process and distributed alike (scipy's
``_asarray_validated`` and its ``overwrite_a`` contract): the finiteness error and the float64
buffer a kernel works in."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from autotune.kernels import _front

NOT_FINITE = "array must not contain infs or NaNs"
F64 = np.dtype(np.float64)


def require_finite(finite: bool) -> None:
    """scipy's ValueError for an operand with an inf or NaN."""
    if not finite:
        raise ValueError(NOT_FINITE)


def _numpy_finite(a: np.ndarray) -> bool:
    return bool(np.isfinite(a).all())


def finite_checked(a: np.ndarray, check_finite: bool,
                   finite: Callable[[np.ndarray], bool] = _numpy_finite) -> np.ndarray:
    """``a`` itself, after scipy's ValueError when ``check_finite`` and it holds an inf or NaN
    (``finite``: the check to run, e.g. the distributed runs' threaded one)."""
    require_finite(not check_finite or finite(a))
    return a


def work_buffer(a, a1: np.ndarray, *, overwrite: bool, check_finite: bool, order: str = "F",
                prepare: Callable[[np.ndarray, bool], np.ndarray | None] | None = None,
                finite: Callable[[np.ndarray], bool] = _numpy_finite) -> tuple[np.ndarray, bool]:
    """The float64 buffer to work in and whether ``prepare`` made it: ``a`` itself when
    ``overwrite`` allows (writeable float64 already in ``order``; "A": either), else a copy in
    ``order`` on a 64-byte boundary (a contiguous float64 ``a1`` is copied and checked in one pass
    by ``prepare``, ``_front.fortran_copy`` by default). ValueError for inf/NaN when ``check_finite``."""
    c, f = a1.flags.c_contiguous, a1.flags.f_contiguous
    in_order = f if order == "F" else (c or f)
    if overwrite and a1 is a and a1.dtype == F64 and a1.flags.writeable and in_order:
        w, checked = a1, False
    elif a1.ndim == 2 and a1.dtype == F64 and (c or f):
        w, checked = (prepare or _front.fortran_copy)(a1, check_finite), True
    else:
        w, checked = _front.aligned_copy(a1, order if order != "A" else ("C" if c else "F")), False
    require_finite(w is not None and (not check_finite or checked or finite(w)))
    return w, checked
