"""Column-major views for BLAS without copies where the memory order allows it."""
from __future__ import annotations

import numpy as np


def fortran_operand(x: np.ndarray, trans: bool) -> tuple[np.ndarray, bool]:
    """(F-ordered array, trans flag) with ``op(x)`` unchanged: a C-ordered x becomes x.T transposed."""
    if x.flags.f_contiguous:
        return x, trans
    if x.flags.c_contiguous:
        return x.T, not trans
    return np.asfortranarray(x), trans


def call_with_threads(backend, threads: int, fn, *args):
    """``fn(*args)`` with ``backend`` limited to ``threads``, restoring the previous count."""
    if backend.set_threads is None:
        return fn(*args)
    before = backend.get_threads()
    if before == threads:
        return fn(*args)
    backend.set_threads(threads)
    try:
        return fn(*args)
    finally:
        backend.set_threads(before)
