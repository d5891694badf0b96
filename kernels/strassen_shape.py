"""The shapes of sequential Strassen (``kernels/strassen.py``): its depths and the workspace it
allocates. Plain Python without Numba, so the memory model (``models.memory``) counts the kernel's
own buffers without compiling it."""
from __future__ import annotations

__all__ = ["effective_levels", "strassen_workspace_elems"]


def _level_dims(m: int, k: int, n: int, levels: int, min_dim: int) -> list[tuple[int, int, int]]:
    """Dimensions of the sub-problems at depths 0..L (L = effective levels)."""
    dims = [(m, k, n)]
    lo = max(2, min_dim)
    while len(dims) <= levels and min(dims[-1]) >= lo:
        dm, dk, dn = dims[-1]
        dims.append((dm // 2, dk // 2, dn // 2))
    return dims


def effective_levels(m: int, k: int, n: int, levels: int, min_dim: int = 2) -> int:
    """How many Strassen levels ``strassen`` really uses for this shape (<= ``levels``)."""
    return len(_level_dims(m, k, n, levels, min_dim)) - 1


def strassen_workspace_elems(m: int, k: int, n: int, levels: int, min_dim: int = 2) -> int:
    """float64 elements of the workspace: sum over used levels of |S1| + |T1| + |P1|."""
    return sum(dm * dk + dk * dn + dm * dn for dm, dk, dn in _level_dims(m, k, n, levels, min_dim)[1:])
