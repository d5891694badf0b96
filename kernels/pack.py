"""Pack and unpack the pieces of a distributed matrix (Numba loops, no Python-level temporaries).

``take(src, rows, cols, out)`` copies ``src[rows[i], cols[j]]`` into ``out[i, j]`` and ``put`` does
the reverse; index arrays select any set of rows and columns (a block-cyclic piece, an
intersection of two layouts), so one pair of kernels serves scatter, gather and redistribution.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["put", "take", "take_flat"]

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def take(src, rows, cols, out):
    """``out[i, j] = src[rows[i], cols[j]]`` (column by column: contiguous in Fortran order)."""
    for j in range(cols.size):
        cj = cols[j]
        for i in range(rows.size):
            out[i, j] = src[rows[i], cj]


@njit(**_JIT)
def put(dst, rows, cols, src):
    """``dst[rows[i], cols[j]] = src[i, j]``."""
    for j in range(cols.size):
        cj = cols[j]
        for i in range(rows.size):
            dst[rows[i], cj] = src[i, j]


@njit(**_JIT)
def take_flat(src, rows, cols, out, start):
    """Pack ``src[rows, cols]`` column-major into the 1-D ``out[start:]``; returns the end offset."""
    pos = start
    for j in range(cols.size):
        cj = cols[j]
        for i in range(rows.size):
            out[pos] = src[rows[i], cj]
            pos += 1
    return pos


def as_index(idx) -> np.ndarray:
    """Index arrays the kernels accept (int64, contiguous)."""
    return np.ascontiguousarray(idx, dtype=np.int64)
