"""STREAM's copy and triad (McCalpin) as Numba loops over Numba's threads: the memory bandwidth
a sweep can reach on this machine, probed beside the stencil kernels so ``autotune show`` can
state each kernel's fraction of it."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "parallel": True}
# Bytes each element moves: copy reads one array and writes one; triad reads two and writes one
# (write-allocate traffic not counted, as STREAM reports it).
STREAMS = {"copy": 2, "triad": 3}


@njit(**_JIT)
def copy(src, dst):
    """dst[i] = src[i]."""
    for i in prange(src.size):
        dst[i] = src[i]


@njit(**_JIT)
def triad(a, b, c, scalar):
    """a[i] = b[i] + scalar c[i]."""
    for i in prange(a.size):
        a[i] = b[i] + scalar * c[i]


def stream(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, scalar: float = 3.0) -> None:
    """Copy ``a`` into ``b`` (``c`` None), else the triad a = b + scalar c."""
    if c is None:
        copy(a, b)
    else:
        triad(a, b, c, scalar)


def warm_up() -> None:
    x = np.zeros(8)
    copy(x, x.copy())
    triad(x, x.copy(), x.copy(), 1.0)


__all__ = ["STREAMS", "copy", "stream", "triad", "warm_up"]
