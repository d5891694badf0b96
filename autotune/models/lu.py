"""LU family, one process: LAPACK getrf, and the solve from its factors (docs/models.md#lu.getrf,
#lu.gesv)."""
from __future__ import annotations

import numpy as np

from autotune.routines import flops


def lu_flops(n) -> np.ndarray:
    """LU flop count, the probe's definition, over an array of orders."""
    return flops("getrf", {"n": np.asarray(n, dtype=float)})


def getrf(n: int, backend: str, threads: int, sp, parts: dict | None = None) -> float:
    """A library's own LAPACK getrf: ``flops(n) * k_getrf(backend, threads, n)``."""
    t = float(lu_flops(n) * sp.k("getrf", backend, threads, n))
    if parts is not None:
        parts["getrf"] = t
    return t


def getrs(n: int, nrhs: int, backend: str, threads: int, sp, parts: dict | None = None) -> float:
    """Both triangular solves of ``nrhs`` right-hand sides from getrf's factors: ``2 n^2 nrhs``
    flops times k of getrs measured at order n and that many right-hand sides (rhs pattern)."""
    t = float(flops("getrs", {"n": n, "nrhs": nrhs}) * sp.k("getrs", backend, threads, n, "rhs", nrhs))
    if parts is not None:
        parts["getrs"] = t
    return t


def gesv(n: int, nrhs: int, backend: str, threads: int, sp, parts: dict | None = None) -> float:
    """``solve``: getrf then getrs on one library at one thread count."""
    return getrf(n, backend, threads, sp, parts) + getrs(n, nrhs, backend, threads, sp, parts)


__all__ = ["gesv", "getrf", "getrs", "lu_flops"]
