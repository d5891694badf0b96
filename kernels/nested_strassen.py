"""Strassen with nested parallelism P1 x P2 (docs/models.md#multicore.nested-strassen, 001 §6.4.2).

The 7 products of the top level run as tasks on ``P1`` Python threads; each task forms its two
operands (numpy ufuncs with ``out=``, which release the GIL), then multiplies them with the
backend's gemm (or with ``levels - 1`` further sequential Strassen levels over that gemm,
``kernels/strassen.py``), and the 4 quadrants of C are then combined as 4 tasks. The BLAS library
runs with ``P2`` threads: its thread count is process-global, so ``P2`` applies to all ``P1``
workers at once (``P1 P2`` threads in all, the ``P`` of eqs. 6.9-6.12). Odd sizes are peeled as
in ``kernels/strassen.py``: the even leading part goes through Strassen, gemm fixes the rest.
The caller passes the gemm and the thread control (e.g. ``be.ops["gemm"]`` and ``be.threads`` of
``autotune.backends.get("numpy-openblas")``): kernels sit below the backends and do not import them.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .strassen import peel, strassen

# (S operand of A's quadrants, T operand of B's quadrants) of M1..M7: (first, second, sign).
_A_OPS = ((0, 3, 1.0), (2, 3, 1.0), (0, None, 0.0), (3, None, 0.0), (0, 1, 1.0), (2, 0, -1.0), (1, 3, -1.0))
_B_OPS = ((0, 3, 1.0), (0, None, 0.0), (1, 3, -1.0), (2, 0, -1.0), (3, None, 0.0), (0, 1, 1.0), (2, 3, 1.0))
# C quadrant = sum of sign * M_i (C11, C12, C21, C22).
_C_OPS = (((0, 1.0), (3, 1.0), (4, -1.0), (6, 1.0)), ((2, 1.0), (4, 1.0)), ((1, 1.0), (3, 1.0)),
          ((0, 1.0), (1, -1.0), (2, 1.0), (5, 1.0)))


@functools.cache
def pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (kept for reuse: starting threads costs more than a task)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"strassen{workers}")


def _operand(quads: tuple, spec: tuple) -> np.ndarray:
    """A quadrant, or the sum / difference of two into a new column-major buffer."""
    first, second, sign = spec
    if second is None:
        return quads[first]
    out = np.empty(quads[first].shape, order="F")
    (np.add if sign > 0 else np.subtract)(quads[first], quads[second], out=out)
    return out


def _product(aq: tuple, bq: tuple, i: int, levels: int, gemm: Callable) -> np.ndarray:
    """M_i of the top level: its operands, then gemm or ``levels`` sequential Strassen levels."""
    s, t = _operand(aq, _A_OPS[i]), _operand(bq, _B_OPS[i])
    out = np.empty((s.shape[0], t.shape[1]), order="F")
    if levels > 0:
        return strassen(s, t, out, levels, gemm)
    gemm(1.0, s, t, 0.0, out)
    return out


def _combine(m: list, ops: tuple, out: np.ndarray) -> None:
    """out = sum of sign * M_i over ``ops``."""
    np.copyto(out, m[ops[0][0]])
    for i, sign in ops[1:]:
        (np.add if sign > 0 else np.subtract)(out, m[i], out=out)


def _quads(x: np.ndarray, r: int, s: int) -> tuple:
    """The four r x s quadrants of the even leading part of x (11, 12, 21, 22)."""
    return x[:r, :s], x[:r, s:2 * s], x[r:2 * r, :s], x[r:2 * r, s:2 * s]


def nested_strassen(a: np.ndarray, b: np.ndarray, p1: int, p2: int, gemm: Callable,
                    threads: Callable[[int], contextlib.AbstractContextManager] | None = None, levels: int = 1,
                    c: np.ndarray | None = None) -> np.ndarray:
    """c = a @ b by Strassen: the top level's 7 products on ``p1`` threads, each with ``levels - 1``
    more sequential levels over ``gemm(alpha, a, b, beta, c)`` (column-major views), run inside
    ``threads(p2)`` (a backend's ``threads``: the library's count is process-global). ``c``, if
    given, must be Fortran-ordered."""
    if p1 < 1 or p2 < 1 or levels < 1:
        raise ValueError("nested_strassen: p1, p2 and levels must be >= 1")
    a, b = np.asfortranarray(a, dtype=np.float64), np.asfortranarray(b, dtype=np.float64)
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"nested_strassen: shapes {a.shape} @ {b.shape} do not conform")
    if c is None:
        c = np.empty((m, n), order="F")
    elif c.shape != (m, n) or c.dtype != np.float64 or not c.flags.f_contiguous:
        raise ValueError("nested_strassen: c must be a Fortran-ordered float64 array of the product's shape")
    with threads(p2) if threads is not None else contextlib.nullcontext():
        if min(m, k, n) < 2:
            gemm(1.0, a, b, 0.0, c)
        else:
            _top(a, b, c, p1, levels - 1, gemm)
    return c


def _top(a: np.ndarray, b: np.ndarray, c: np.ndarray, p1: int, levels: int, gemm: Callable) -> None:
    """The parallel top level on the even part, then the peeled odd row / column / inner index."""
    m, k = a.shape
    n = b.shape[1]
    m2, k2, n2 = m // 2, k // 2, n // 2
    aq, bq, cq = _quads(a, m2, k2), _quads(b, k2, n2), _quads(c, m2, n2)
    workers = pool(p1)
    prods = list(workers.map(lambda i: _product(aq, bq, i, levels, gemm), range(7)))
    list(workers.map(lambda q: _combine(prods, _C_OPS[q], cq[q]), range(4)))
    peel(a, b, c, 2 * m2, 2 * k2, 2 * n2, gemm)


__all__ = ["nested_strassen", "pool"]
