"""Numba loops for the distributed GEMM family (``autotune.distributed.gemm``).

Two groups, none of which allocates:

- ``take_padded`` / ``put_clipped``: pack and unpack the local pieces of a matrix that is padded
  with zeros up to a multiple of ``2^l`` (parallel Strassen): indices past the real matrix read
  as zero and are not written back.
- Strassen additions. 2-D (master-worker Strassen on the root; the loop order follows the
  destination's memory order, so C- and F-ordered quadrant views are both swept contiguously) and
  4-D (parallel Strassen on block-cyclic quadrants: a rank holds each quadrant of a level as a
  ``(rows, cols, g, g)`` Fortran array of ``g x g`` leaf pieces, so every addition of every level
  is one local elementwise sweep, no communication).

The 2-D/4-D kernels are compiled once for any-layout float64 views (explicit signatures).
"""
from __future__ import annotations

from numba import float64, njit, void

__all__ = ["acc", "acc2", "acc2_4", "acc_4", "add2", "axpby_4", "combine22_4",
           "put_clipped", "take_padded"]

_JIT = {"cache": True, "nogil": True}
_M = float64[:, :]
_Q = float64[:, :, :, :]


@njit(**_JIT)
def take_padded(src, rows, cols, out, start):
    """Pack ``src[rows, cols]`` column-major into ``out[start:]``, zeros where an index is past
    the matrix (the zero padding); returns the end offset."""
    m, n = src.shape
    pos = start
    for j in range(cols.size):
        cj = cols[j]
        if cj >= n:
            for i in range(rows.size):
                out[pos + i] = 0.0
        else:
            for i in range(rows.size):
                ri = rows[i]
                out[pos + i] = src[ri, cj] if ri < m else 0.0
        pos += rows.size
    return pos


@njit(**_JIT)
def put_clipped(dst, rows, cols, src):
    """``dst[rows[i], cols[j]] = src[i, j]`` for the indices inside ``dst`` (padding dropped)."""
    m, n = dst.shape
    for j in range(cols.size):
        cj = cols[j]
        if cj >= n:
            continue
        for i in range(rows.size):
            ri = rows[i]
            if ri < m:
                dst[ri, cj] = src[i, j]


# -- 2-D, loop order of the destination -------------------------------------------------------

@njit(void(_M, _M, float64, _M), **_JIT)
def add2(x, y, beta, out):
    """out = x + beta * y."""
    m, n = out.shape
    if m > 1 and n > 1 and out.strides[1] < out.strides[0]:
        for i in range(m):
            for j in range(n):
                out[i, j] = x[i, j] + beta * y[i, j]
    else:
        for j in range(n):
            for i in range(m):
                out[i, j] = x[i, j] + beta * y[i, j]


@njit(void(_M, _M, float64), **_JIT)
def acc(p, c, s):
    """c += s * p."""
    m, n = c.shape
    if m > 1 and n > 1 and c.strides[1] < c.strides[0]:
        for i in range(m):
            for j in range(n):
                c[i, j] += s * p[i, j]
    else:
        for j in range(n):
            for i in range(m):
                c[i, j] += s * p[i, j]


@njit(void(_M, _M, float64, _M, float64), **_JIT)
def acc2(p, c1, s1, c2, s2):
    """c1 += s1 * p; c2 += s2 * p in one pass over p."""
    m, n = c1.shape
    if m > 1 and n > 1 and c1.strides[1] < c1.strides[0]:
        for i in range(m):
            for j in range(n):
                v = p[i, j]
                c1[i, j] += s1 * v
                c2[i, j] += s2 * v
    else:
        for j in range(n):
            for i in range(m):
                v = p[i, j]
                c1[i, j] += s1 * v
                c2[i, j] += s2 * v


# -- 4-D: (rows, cols, g, g) stacks of leaf pieces, Fortran order --------------------------------

@njit(void(_Q, _Q, float64, _Q), **_JIT)
def axpby_4(x, y, beta, out):
    """out = x + beta * y."""
    m, n, g1, g2 = out.shape
    for q in range(g2):
        for p in range(g1):
            for j in range(n):
                for i in range(m):
                    out[i, j, p, q] = x[i, j, p, q] + beta * y[i, j, p, q]


@njit(void(_Q, _Q, _Q, _Q), **_JIT)
def combine22_4(c11, c21, c12, c22):
    """c22 = c11 - c21 + c12 (M1 - M2 + M3)."""
    m, n, g1, g2 = c22.shape
    for q in range(g2):
        for p in range(g1):
            for j in range(n):
                for i in range(m):
                    c22[i, j, p, q] = c11[i, j, p, q] - c21[i, j, p, q] + c12[i, j, p, q]


@njit(void(_Q, _Q, float64, _Q, float64), **_JIT)
def acc2_4(x, c1, s1, c2, s2):
    """c1 += s1 * x; c2 += s2 * x in one pass over x."""
    m, n, g1, g2 = x.shape
    for q in range(g2):
        for p in range(g1):
            for j in range(n):
                for i in range(m):
                    v = x[i, j, p, q]
                    c1[i, j, p, q] += s1 * v
                    c2[i, j, p, q] += s2 * v


@njit(void(_Q, _Q), **_JIT)
def acc_4(x, c):
    """c += x."""
    m, n, g1, g2 = x.shape
    for q in range(g2):
        for p in range(g1):
            for j in range(n):
                for i in range(m):
                    c[i, j, p, q] += x[i, j, p, q]
