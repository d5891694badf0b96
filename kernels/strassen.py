"""Sequential Strassen multiplication with BLAS leaves, 3-temporary schedule (docs/models.md#gemm.strassen).

``strassen(a, b, c, levels, gemm)`` computes ``c = a @ b`` for float64 matrices of any shape
``m x k`` by ``k x n``, recursing ``levels`` times and computing the leaves with the callable
``gemm(alpha, a, b, beta, c)`` on column-major views (a backend's ``ops["gemm"]`` or a
``BlasTable.gemm`` can be passed straight in).

Schedule (per level; S1, T1, P1 are the three temporaries, C's quadrants hold intermediates)::

    1: S1 = A11 + A22; T1 = B11 + B22; C11 = S1 T1                       (M1)
    2: S1 = A21 + A22;                 C21 = S1 B11                      (M2)
    3: T1 = B12 - B22;                 C12 = A11 T1                      (M3)
       C22 = C11 - C21 + C12           (= M1 - M2 + M3: the schedule's copy and two updates, one pass)
    4: T1 = B21 - B11; P1 = A22 T1;    C11 += P1; C21 += P1              (M4, one pass)
    5: S1 = A11 + A12; P1 = S1 B22;    C11 -= P1; C12 += P1              (M5, one pass)
    6: S1 = A21 - A11; T1 = B11 + B12; C22 += S1 T1                      (M6)
    7: S1 = A12 - A22; T1 = B21 + B22; C11 += S1 T1                      (M7)

The products of steps 1-3 are written straight into their C quadrant, and when the next level is
a leaf, steps 6-7 accumulate into C with ``gemm(..., beta=1)`` (no P1, no addition pass). All
additions are fused Numba loops over column-major views writing into preallocated buffers, or,
when ``add`` is passed (a kernel version's ``add(x, y, out, beta)``, e.g. the OpenMP one of
``kernels/_omp.pyx`` at some thread count), calls of it: one per addition, two per fused pass.

Workspace: one float64 buffer for all levels, allocated up front (or passed as ``work``); level
``d`` holds S1 (m_d x k_d), T1 (k_d x n_d) and P1 (m_d x n_d) with ``m_d = floor(m_{d-1} / 2)``
(``m_0 = m``), shared by all recursive calls at that depth (they run one after the other). See
``strassen_workspace_elems``. No numpy temporaries are created inside the recursion.

Odd sizes: **dynamic peeling**. At every node the even leading part ``A[:m', :k'] B[:k', :n']``
(``m' = m - m % 2`` etc.) goes through Strassen, then the leaf ``gemm`` fixes up the rest:
``C[:m', :n'] += A[:m', k-1] B[k-1, :n']`` (rank-1, when k is odd), ``C[:, n-1] = A B[:, n-1]``
(gemv-shaped, when n is odd) and ``C[m-1, :n'] = A[m-1, :] B[:, :n']`` (when m is odd).

Depth: a node recurses while fewer than ``levels`` levels are used and all of m, k, n are
``>= max(2, min_dim)``; deeper requests degrade gracefully to fewer levels.

Error bound (docs/models.md#gemm.strassen.error): for n x n matrices, n = 2^l n0, l levels of
Strassen with conventional leaves of size n0 = n / 2^l, to first order in the unit roundoff u,

    ||C - Ĉ|| <= ((n0^2 + 5 n0) 12^l - 5 n) u ||A|| ||B||,      ||X|| = max_ij |x_ij|,

i.e. the conventional ``n^2 u ||A|| ||B||`` (l = 0) grows roughly like 12^l / 4^l = 3^l in the
leading term. ``strassen_error_bound`` evaluates the constant, taking n as the inner dimension k
for rectangular shapes (the max-norm bound does not involve m or n) and n0 = k / 2^l.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import float64, njit, types, void

from .strassen_shape import _level_dims, effective_levels, strassen_workspace_elems

__all__ = ["effective_levels", "strassen", "strassen_error_bound", "strassen_workspace_elems"]

_JIT = {"cache": True, "nogil": True}
_M = float64[:, :]  # any-layout 2-D view: one compiled specialisation serves F arrays and sub-views
# The same for operands only read: accepts read-only arrays (the user's) as well as writable ones.
_R = types.Array(float64, 2, "A", readonly=True)


@njit(void(_R, _R, float64, _M), **_JIT)
def _axpby(x, y, beta, out):
    """out = x + beta * y."""
    m, n = out.shape
    for j in range(n):
        for i in range(m):
            out[i, j] = x[i, j] + beta * y[i, j]


@njit(void(_R, _R, _R, _M), **_JIT)
def _combine22(c11, c21, c12, c22):
    """c22 = c11 - c21 + c12 (M1 - M2 + M3)."""
    m, n = c22.shape
    for j in range(n):
        for i in range(m):
            c22[i, j] = c11[i, j] - c21[i, j] + c12[i, j]


@njit(void(_R, _M, float64, _M, float64), **_JIT)
def _acc2(p, c1, s1, c2, s2):
    """c1 += s1 * p; c2 += s2 * p in one pass over p."""
    m, n = p.shape
    for j in range(n):
        for i in range(m):
            v = p[i, j]
            c1[i, j] += s1 * v
            c2[i, j] += s2 * v


@njit(void(_R, _M), **_JIT)
def _acc(p, c):
    """c += p."""
    m, n = p.shape
    for j in range(n):
        for i in range(m):
            c[i, j] += p[i, j]


def strassen_error_bound(k: int, levels: int, u: float = 2.0 ** -53) -> float:
    """The first-order error bound's constant: max|C - Ĉ| <= this * max|A| * max|B|.

    ``((n0^2 + 5 n0) 12^l - 5 k) u`` with n0 = k / 2^l (docs/models.md#gemm.strassen.error; k is the
    inner dimension, exact for square power-of-two sizes and an estimate otherwise). Pass the
    effective number of levels (``effective_levels``).
    """
    n0 = k / 2.0 ** levels
    return ((n0 * n0 + 5.0 * n0) * 12.0 ** levels - 5.0 * k) * u


def _check(x: np.ndarray, name: str) -> None:
    if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float64:
        raise ValueError(f"strassen: {name} must be a 2-D float64 array")
    if name == "c" and not x.flags.writeable:
        raise ValueError("strassen: output array c is read-only")
    if x.shape[0] > 1 and x.shape[1] > 0 and x.strides[0] != x.itemsize:
        raise ValueError(f"strassen: {name} must be column-major (Fortran order or a column-major view)")


class _AddOps:
    """The driver's addition passes built from one ``add(x, y, out, beta)`` kernel (out = x + beta y)."""

    def __init__(self, add: Callable):
        self.add = add

    def axpby(self, x, y, beta, out):
        self.add(x, y, out, beta)

    def combine22(self, c11, c21, c12, c22):
        self.add(c11, c21, c22, -1.0)
        self.add(c22, c12, c22, 1.0)

    def acc2(self, p, c1, s1, c2, s2):
        self.add(c1, p, c1, s1)
        self.add(c2, p, c2, s2)

    def acc(self, p, c):
        self.add(c, p, c, 1.0)


class _FusedOps:
    """The fused Numba passes (the default)."""

    axpby, combine22 = staticmethod(_axpby), staticmethod(_combine22)
    acc2, acc = staticmethod(_acc2), staticmethod(_acc)


_FUSED = _FusedOps()


def strassen(a: np.ndarray, b: np.ndarray, c: np.ndarray, levels: int, gemm: Callable,
             *, min_dim: int = 2, work: np.ndarray | None = None, add: Callable | None = None) -> np.ndarray:
    """c = a @ b (c overwritten) by ``levels`` levels of Strassen over the leaf ``gemm``.

    ``gemm(alpha, a, b, beta, c)`` computes ``c = alpha a b + beta c`` on column-major views.
    ``min_dim``: do not recurse on sub-problems with a dimension below it (at least 2).
    ``work``: optional float64 buffer of at least ``strassen_workspace_elems(m, k, n, levels,
    min_dim)`` elements (allocated here otherwise). ``add``: the addition kernel
    ``add(x, y, out, beta)`` (out = x + beta y on column-major views; out may be x) in place of
    the fused Numba passes. Odd sizes are peeled (see module doc). Returns ``c``.
    """
    for x, name in ((a, "a"), (b, "b"), (c, "c")):
        _check(x, name)
    m, k = a.shape
    if b.shape[0] != k or c.shape != (m, b.shape[1]):
        raise ValueError(f"strassen: shapes {a.shape} @ {b.shape} -> {c.shape} do not conform")
    if levels < 0:
        raise ValueError("strassen: levels must be >= 0")
    n = c.shape[1]
    if m == 0 or n == 0:
        return c
    if k == 0:
        c[...] = 0.0
        return c
    if np.may_share_memory(c, a) or np.may_share_memory(c, b):
        raise ValueError("strassen: c must not overlap a or b")
    dims = _level_dims(m, k, n, levels, min_dim)
    need = strassen_workspace_elems(m, k, n, levels, min_dim)
    if work is None:
        work = np.empty(need)
    elif work.dtype != np.float64 or work.ndim != 1 or work.size < need or not work.flags.c_contiguous:
        raise ValueError(f"strassen: work must be a contiguous float64 vector of >= {need} elements")
    ws = []
    off = 0
    for dm, dk, dn in dims[1:]:
        views = []
        for r, s in ((dm, dk), (dk, dn), (dm, dn)):
            views.append(work[off:off + r * s].reshape((r, s), order="F"))
            off += r * s
        ws.append(tuple(views))
    _rec(a, b, c, 0, len(ws), ws, gemm, _FUSED if add is None else _AddOps(add))
    return c


def _mul(x, y, out, beta, depth, nlev, ws, gemm, ops):
    """out = x y (beta 0) or out += x y (beta 1), recursing when depth < nlev."""
    if depth >= nlev:
        gemm(1.0, x, y, beta, out)
    elif beta == 0.0:
        _rec(x, y, out, depth, nlev, ws, gemm, ops)
    else:
        p = ws[depth - 1][2]
        _rec(x, y, p, depth, nlev, ws, gemm, ops)
        ops.acc(p, out)


def _rec(a, b, c, depth, nlev, ws, gemm, ops):
    """c = a b at recursion ``depth`` (0 = top); ws[depth] holds this level's S1, T1, P1."""
    if depth >= nlev:
        gemm(1.0, a, b, 0.0, c)
        return
    m, k = a.shape
    n = b.shape[1]
    m2, k2, n2 = m // 2, k // 2, n // 2
    me, ke, ne = 2 * m2, 2 * k2, 2 * n2
    s1, t1, p1 = ws[depth]
    sub = depth + 1
    a11, a12, a21, a22 = a[:m2, :k2], a[:m2, k2:ke], a[m2:me, :k2], a[m2:me, k2:ke]
    b11, b12, b21, b22 = b[:k2, :n2], b[:k2, n2:ne], b[k2:ke, :n2], b[k2:ke, n2:ne]
    c11, c12, c21, c22 = c[:m2, :n2], c[:m2, n2:ne], c[m2:me, :n2], c[m2:me, n2:ne]

    ops.axpby(a11, a22, 1.0, s1)                       # 1
    ops.axpby(b11, b22, 1.0, t1)
    _mul(s1, t1, c11, 0.0, sub, nlev, ws, gemm, ops)
    ops.axpby(a21, a22, 1.0, s1)                       # 2
    _mul(s1, b11, c21, 0.0, sub, nlev, ws, gemm, ops)
    ops.axpby(b12, b22, -1.0, t1)                      # 3
    _mul(a11, t1, c12, 0.0, sub, nlev, ws, gemm, ops)
    ops.combine22(c11, c21, c12, c22)
    ops.axpby(b21, b11, -1.0, t1)                      # 4
    _mul(a22, t1, p1, 0.0, sub, nlev, ws, gemm, ops)
    ops.acc2(p1, c11, 1.0, c21, 1.0)
    ops.axpby(a11, a12, 1.0, s1)                       # 5
    _mul(s1, b22, p1, 0.0, sub, nlev, ws, gemm, ops)
    ops.acc2(p1, c11, -1.0, c12, 1.0)
    ops.axpby(a21, a11, -1.0, s1)                      # 6
    ops.axpby(b11, b12, 1.0, t1)
    _mul(s1, t1, c22, 1.0, sub, nlev, ws, gemm, ops)
    ops.axpby(a12, a22, -1.0, s1)                      # 7
    ops.axpby(b21, b22, 1.0, t1)
    _mul(s1, t1, c11, 1.0, sub, nlev, ws, gemm, ops)

    peel(a, b, c, me, ke, ne, gemm)


def peel(a, b, c, me: int, ke: int, ne: int, gemm) -> None:
    """Dynamic peeling: the odd last row, column and inner index that the even ``me x ke x ne``
    Strassen product left out, added into ``c`` with plain gemm calls."""
    m, k = a.shape
    n = b.shape[1]
    if ke < k:
        gemm(1.0, a[:me, ke:], b[ke:, :ne], 1.0, c[:me, :ne])
    if ne < n:
        gemm(1.0, a, b[:, ne:], 0.0, c[:, ne:])
    if me < m:
        gemm(1.0, a[me:, :], b[:, :ne], 0.0, c[me:, :ne])
