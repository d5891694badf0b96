"""Cholesky family, one process (001 §3.4): LAPACK potrf, blocked (eq. 3.30), unblocked variants."""
from __future__ import annotations

import numpy as np

from autotune.routines import SEGMENT_FRACTIONS, flops

# Share of the unblocked gemv variant's n^3/3 flops falling in each eighth-segment (x 96/n^3).
SEGMENT_WEIGHTS = (5.0, 11.0, 11.0, 5.0)


def chol_flops(n) -> np.ndarray:
    """Cholesky flop count, the probe's definition, over an array of orders."""
    return flops("potrf", {"n": np.asarray(n, dtype=float)})


def potrf(n: int, backend: str, threads: int, sp) -> float:
    """A library's own LAPACK potrf: ``flops(n) * k_potrf(backend, threads, n)``."""
    return float(chol_flops(n) * sp.k("potrf", backend, threads, n))


def blocked(n: int, blocks, variant: int, backend: str, threads: int, sp) -> np.ndarray:
    """Right-looking blocked Cholesky with block b (array), summed step by step.

    Each step j: potf2 on the b x b diagonal block, trsm on the (x x b) panel below it
    (x = n - j - b), then the trailing update: one syrk of order x and rank b (variant 0), or
    (variant 1, eq. 3.30) per trailing block column a b x b syrk plus an (rows below) x b x b gemm.
    The k of every call is the one measured on that call's shape (panel pattern). All blocks are
    evaluated together: one lookup per routine over the concatenated steps of every b.
    """
    blocks = np.atleast_1d(np.asarray(blocks, dtype=int))
    steps = [np.arange(0, n, b) for b in blocks]
    owner = np.concatenate([np.full(len(s), i) for i, s in enumerate(steps)])
    bb = blocks[owner].astype(float)
    widths = np.minimum(bb, n - np.concatenate(steps))
    x = n - np.concatenate(steps) - widths
    cost = chol_flops(widths) * sp.k("potf2", backend, threads, widths)
    live = x > 0
    xl, bl = x[live], bb[live]
    upd = np.zeros_like(x)
    upd[live] = xl * bl * bl * sp.k("trsm", backend, threads, xl, "panel", bl)
    if variant == 0:
        upd[live] += xl * (xl + 1) * bl * sp.k("syrk", backend, threads, xl, "panel", bl)
    else:
        nblk = np.ceil(xl / bl)
        upd[live] += nblk * bl * (bl + 1) * bl * sp.k("syrk", backend, threads, bl)
        counts = (nblk - 1).astype(int)                     # gemm calls below the diagonal blocks
        first = np.repeat(np.cumsum(counts) - counts, counts)
        j = np.arange(counts.sum()) - first + 1
        rows = np.repeat(xl, counts) - np.repeat(bl, counts) * j
        gb = np.repeat(bl, counts)
        g = 2.0 * rows * gb * gb * sp.k("gemm", backend, threads, rows, "panel", gb)
        upd[live] += np.bincount(np.repeat(np.arange(xl.size), counts), weights=g, minlength=xl.size)
    return np.bincount(owner, weights=cost + upd, minlength=len(blocks))


def unblocked_gemv(n: int, backend: str, threads: int, sp) -> float:
    """Left-looking unblocked Cholesky, one gemv per column on (n-i) x i (segment pattern)."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    fractions = np.array(SEGMENT_FRACTIONS)
    k2 = sp.k("gemv", backend, threads, np.full(4, float(n)), "segment", fractions)
    return float(np.dot(SEGMENT_WEIGHTS, k2)) / 96.0 * n**3 + _column_work(n, backend, threads, sp)


def unblocked_axpy(n: int, backend: str, threads: int, sp) -> float:
    """Right-looking outer-product Cholesky: for column k, k axpy calls of length n-k (exact sum)."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    length = np.arange(1, n, dtype=float)           # n - k for k = 1..n-1
    count = n - length                              # columns j < k that update column k
    t = float(np.sum(count * 2.0 * length * sp.k("axpy", backend, threads, length)))
    return t + _column_work(n, backend, threads, sp)


def _column_work(n: int, backend: str, threads: int, sp) -> float:
    """Square roots and column scaling (n^2/2 flops), costed like a level-1 sweep of that length."""
    return float(n * n / 2.0 * sp.k("axpy", backend, 1, n)[()] / 2.0)
