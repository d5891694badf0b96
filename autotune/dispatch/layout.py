"""Column-major views for BLAS without copies where the memory order allows it."""
from __future__ import annotations

import numpy as np

from autotune.backends import pools


def fortran_operand(x: np.ndarray, trans: bool) -> tuple[np.ndarray, bool]:
    """(F-ordered array, trans flag) with ``op(x)`` unchanged: a C-ordered x becomes x.T transposed."""
    if x.flags.f_contiguous:
        return x, trans
    if x.flags.c_contiguous:
        return x.T, not trans
    return np.asfortranarray(x), trans


def call_with_threads(backend, threads: int, fn, *args):
    """``fn(*args)`` with ``backend`` limited to ``threads``, restoring the previous count; the call
    is noted as the last one on that library's pool (``backends.pools``)."""
    switch = backend.set_threads is not None and backend.get_threads() != threads
    before = backend.get_threads() if switch else threads
    if switch:
        backend.set_threads(threads)
    try:
        return fn(*args)
    finally:
        pools.note(backend.name, threads)
        if switch:
            backend.set_threads(before)
