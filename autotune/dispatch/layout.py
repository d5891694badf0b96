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
    """``fn(*args)`` with ``backend`` at ``threads`` threads, under its lease (``backends.pools.lease``:
    concurrent Python threads at other counts wait), noted as the last call on its pool."""
    with pools.lease(backend, threads):
        return fn(*args)
