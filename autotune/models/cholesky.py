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
    """Right-looking blocked Cholesky, one variant, per block b (see ``blocked_variants``)."""
    return blocked_variants(n, blocks, (variant,), backend, threads, sp)[0]


def blocked_variants(n: int, blocks, variants, backend: str, threads: int, sp) -> np.ndarray:
    """Right-looking blocked Cholesky per (variant, block b): array of shape (variants, blocks).

    Each step j: potf2 on the b x b diagonal block, trsm on the (x x b) panel below it
    (x = n - j - b), then the trailing update: one syrk of order x and rank b (variant 0), or
    (variant 1, eq. 3.30) per trailing block column a b x b syrk plus an (rows below) x b x b gemm
    (these gemms summed by shape, ``_below_diagonal_gemms``).
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
    cost[live] += xl * bl * bl * sp.k("trsm", backend, threads, xl, "panel", bl)
    common = np.bincount(owner, weights=cost, minlength=len(blocks))
    out = []
    for variant in variants:
        upd = np.zeros_like(x)
        if variant == 0:
            upd[live] = xl * (xl + 1) * bl * sp.k("syrk", backend, threads, xl, "panel", bl)
        else:
            full = np.floor(xl / bl)                    # full b x b diagonal blocks, then a w x w one
            w = xl - full * bl
            ks = sp.k("syrk", backend, threads, np.concatenate([bl, np.maximum(w, 1.0)]))
            upd[live] = (full * (bl + 1) * ks[:bl.size] + w * (w + 1) / bl * ks[bl.size:]) * bl * bl
        total = common + np.bincount(owner, weights=upd, minlength=len(blocks))
        out.append(total + (_below_diagonal_gemms(n, blocks, backend, threads, sp) if variant == 1 else 0.0))
    return np.array(out)


def _below_diagonal_gemms(n: int, blocks: np.ndarray, backend: str, threads: int, sp) -> np.ndarray:
    """Variant 1's gemm calls grouped by shape: an (n - i b) x b x b product occurs i - 1 times
    (once per earlier block column), so each block needs n/b lookups instead of (n/b)^2 / 2."""
    idx = [np.arange(2, -(-n // b)) for b in blocks]
    owner = np.repeat(np.arange(len(blocks)), [len(i) for i in idx])
    i = np.concatenate(idx).astype(float)
    if i.size == 0:                                  # n <= 2b: no block column has rows below it
        return np.zeros(len(blocks))
    b = blocks[owner].astype(float)
    rows = n - i * b
    g = (i - 1) * 2.0 * rows * b * b * sp.k("gemm", backend, threads, rows, "panel", b)
    return np.bincount(owner, weights=g, minlength=len(blocks))


def unblocked_gemv(n: int, backend: str, threads: int, sp) -> float:
    """Left-looking unblocked Cholesky, one gemv per column on (n-i) x i (segment pattern)."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    fractions = np.array(SEGMENT_FRACTIONS)
    k2 = sp.k("gemv", backend, threads, np.full(4, float(n)), "segment", fractions)
    return float(np.dot(SEGMENT_WEIGHTS, k2)) / 96.0 * n**3 + _column_work(n, backend, threads, sp)


def unblocked_axpy(n: int, backend: str, threads: int, sp) -> float:
    """Right-looking outer-product Cholesky: one step per pivot on the trailing matrix of order
    x = n..2, each timed by the probe as one whole step (axpy, "trail" pattern: the axpys stream
    the trailing triangle from memory, which per-call axpy timings on hot vectors would miss)."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    x = np.arange(2, n + 1, dtype=float)
    return float(np.sum(x * (x - 1) * sp.k("axpy", backend, threads, x, "trail")))


def _column_work(n: int, backend: str, threads: int, sp) -> float:
    """Square roots and column scaling (n^2/2 flops), costed like a level-1 sweep of that length."""
    return float(n * n / 2.0 * sp.k("axpy", backend, 1, n)[()] / 2.0)
