"""Cholesky family, one process: LAPACK potrf, blocked, unblocked variants (docs/models.md#cholesky.potrf,
#cholesky.blocked, #cholesky.gemv, #cholesky.axpy)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import cast

import numpy as np

from autotune.core.assumptions import MEMORY_SHARE
from autotune.core.routines import ROUTINES, SEGMENT_FRACTIONS
from autotune.db.lookup import SPLookup

# Share of the unblocked gemv variant's n^3/3 flops falling in each eighth-segment (x 96/n^3).
SEGMENT_WEIGHTS = (5.0, 11.0, 11.0, 5.0)
# MEMORY_SHARE (set by hand, autotune/core/assumptions.py): the share of an ``add`` pass per trailing
# element a right-looking b-wide update pays (docs/models.md#cholesky.blocked).


def chol_flops(n) -> np.ndarray:
    """Cholesky flop count, the probe's definition, over an array of orders."""
    # ``routines.flops`` is annotated for integer dims; its counts are numpy expressions of them.
    return cast(np.ndarray, ROUTINES["potrf"].flops(n=np.asarray(n, dtype=float)))


def potrf(n: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None,
          pattern: str = "square") -> float:
    """A library's own LAPACK potrf: ``flops(n) * k_potrf(backend, threads, n)``, on the series of
    its triangle (``pattern``: "square", the lower; "upper"). ``parts``, if given, receives the time
    by routine call kind (here the one call), for ``explain``."""
    t = float(chol_flops(n) * sp.k("potrf", backend, threads, n, pattern))
    if parts is not None:
        parts["potrf"] = t
    return t


def blocked(n: int, blocks, variant: int, backend: str, threads: int, sp: SPLookup) -> np.ndarray:
    """Right-looking blocked Cholesky, one variant, per block b (see ``blocked_variants``)."""
    return blocked_variants(n, blocks, (variant,), backend, threads, sp)[0]


def blocked_variants(n: int, blocks, variants, backend: str, threads: int, sp: SPLookup,
                     parts: dict | None = None) -> np.ndarray:
    """Right-looking blocked Cholesky per (variant, block b): array of shape (variants, blocks).

    Each step j: potf2 on the b x b diagonal block, trsm on the (x x b) panel below it
    (x = n - j - b), then the trailing update: one syrk of order x and rank b (variant 0), or
    (variant 1, docs/models.md#cholesky.blocked) per trailing block column a b x b syrk plus an
    (rows below) x b x b gemm
    (these gemms summed by shape, ``_Steps``), plus variant 1's memory traffic: the probe times
    its small calls on hot operands, while every step streams the whole trailing triangle
    (``MEMORY_SHARE`` of an ``add`` pass per element; variant 0's one syrk is timed on a trailing
    matrix of the real size, so its timing already holds that traffic).
    The k of every call is the one measured on that call's shape (panel pattern). All blocks are
    evaluated together: one lookup per routine over the concatenated steps of every b.
    ``parts``, if given, receives the time by routine call kind, each of shape (variants, blocks).
    """
    g = _Steps.of(n, tuple(int(b) for b in np.atleast_1d(blocks)))
    diag = g.diag_flops * sp.k("potf2", backend, threads, g.widths)
    panel = g.panel_flops * sp.k("trsm", backend, threads, g.xl, "panel", g.bl)
    cost = diag.copy()
    cost[g.live] += panel
    common = np.bincount(g.owner, weights=cost, minlength=g.nb)
    out, split = [], []
    for variant in variants:
        upd, mem = np.zeros(g.owner.size), np.zeros(g.live.sum())
        gemm: np.ndarray = np.zeros(g.nb)
        if variant == 0:
            upd[g.live] = g.syrk_flops * sp.k("syrk", backend, threads, g.xl, "panel", g.bl)
        else:
            ks = sp.k("syrk", backend, threads, g.square_orders)
            upd[g.live] = (g.full * (g.bl + 1) * ks[:g.bl.size] + g.w * (g.w + 1) / g.bl * ks[g.bl.size:]) \
                * g.bl * g.bl
            mem = MEMORY_SHARE * g.trailing * sp.k("add", backend, threads, np.sqrt(g.trailing))
            syrk = upd[g.live].copy()
            upd[g.live] += mem
        total: np.ndarray = common + np.bincount(g.owner, weights=upd, minlength=g.nb)
        if variant == 1 and g.rows.size:
            gemm = np.bincount(g.gemm_owner, minlength=g.nb, weights=g.gemm_flops * sp.k(
                "gemm", backend, threads, g.rows, "panel", g.gemm_b))
            total += gemm
        out.append(total)
        if parts is not None:
            split.append(g.by_block({"potf2": diag, "trsm": (g.live, panel),
                                     "syrk": (g.live, upd[g.live] if variant == 0 else syrk),
                                     "add": (g.live, mem)}) | {"gemm": gemm})
    if parts is not None:
        parts.update({term: np.array([d[term] for d in split]) for term in split[0]} if split else {})
    return np.array(out)


@dataclass(frozen=True)
class _Steps:
    """The shapes and flop counts of blocked Cholesky's calls for (n, blocks): the same for every
    backend and thread count, so computed once per problem."""

    nb: int
    owner: np.ndarray         # block index of each step
    widths: np.ndarray        # diagonal block order per step
    diag_flops: np.ndarray
    live: np.ndarray          # steps with a trailing matrix (x > 0)
    xl: np.ndarray            # trailing order x of live steps
    bl: np.ndarray            # their block b
    panel_flops: np.ndarray   # x b^2 (trsm)
    syrk_flops: np.ndarray    # x (x + 1) b (variant 0's one syrk)
    full: np.ndarray          # variant 1: full b x b diagonal blocks of the trailing matrix
    w: np.ndarray             # ... and the order of its last, partial one
    square_orders: np.ndarray  # orders of variant 1's syrks: bl then max(w, 1)
    trailing: np.ndarray      # elements of the trailing triangle variant 1 updates, by block column
    rows: np.ndarray          # variant 1's below-diagonal gemms, grouped by shape: rows x b x b ...
    gemm_b: np.ndarray
    gemm_owner: np.ndarray
    gemm_flops: np.ndarray    # ... occurring i - 1 times (once per earlier block column)

    def by_block(self, terms: dict) -> dict[str, np.ndarray]:
        """Per-step arrays (all steps, or ``(mask, values)`` for the masked steps) summed per block."""
        out = {}
        for name, v in terms.items():
            w = np.zeros(self.owner.size)
            if isinstance(v, tuple):
                w[v[0]] = v[1]
            else:
                w = v
            out[name] = np.bincount(self.owner, weights=w, minlength=self.nb)
        return out

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def of(n: int, blocks: tuple[int, ...]) -> _Steps:
        b_arr = np.asarray(blocks, dtype=int)
        steps = [np.arange(0, n, b) for b in blocks]
        owner = np.repeat(np.arange(len(blocks)), [len(s) for s in steps])
        start = np.concatenate(steps).astype(float)
        bb = b_arr[owner].astype(float)
        widths = np.minimum(bb, n - start)
        x = n - start - widths
        live = x > 0
        xl, bl = x[live], bb[live]
        full = np.floor(xl / bl)
        w = xl - full * bl
        idx = [np.arange(2, -(-n // b)) for b in blocks]   # block columns with rows below them
        g_owner = np.repeat(np.arange(len(blocks)), [len(i) for i in idx])
        i = np.concatenate(idx).astype(float)
        g_b = b_arr[g_owner].astype(float)
        rows = n - i * g_b
        trailing = bl * full * xl - bl * bl * full * (full - 1) / 2.0 + w * w
        return _Steps(len(blocks), owner, widths, chol_flops(widths), live, xl, bl, xl * bl * bl,
                      xl * (xl + 1) * bl, full, w, np.concatenate([bl, np.maximum(w, 1.0)]), trailing,
                      rows, g_b, g_owner, (i - 1) * 2.0 * rows * g_b * g_b)


def unblocked_gemv(n: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None) -> float:
    """Left-looking unblocked Cholesky, one gemv per column on (n-i) x i (segment pattern);
    ``parts``, if given, receives the time by routine call kind."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    fractions = np.array(SEGMENT_FRACTIONS)
    k2 = sp.k("gemv", backend, threads, np.full(4, float(n)), "segment", fractions)
    gemv, column = float(np.dot(SEGMENT_WEIGHTS, k2)) / 96.0 * n**3, _column_work(n, backend, threads, sp)
    if parts is not None:
        parts.update(gemv=gemv, axpy=column)
    return gemv + column


def unblocked_axpy(n: int, backend: str, threads: int, sp: SPLookup) -> float:
    """Right-looking outer-product Cholesky: one step per pivot on the trailing matrix of order
    x = n..2, each timed by the probe as one whole step (axpy, "trail" pattern: the axpys stream
    the trailing triangle from memory, which per-call axpy timings on hot vectors would miss)."""
    if n < 2:
        return float(n * sp.k("axpy", backend, threads, 1))
    x = np.arange(2, n + 1, dtype=float)
    return float(np.sum(x * (x - 1) * sp.k("axpy", backend, threads, x, "trail")))


def _column_work(n: int, backend: str, threads: int, sp: SPLookup) -> float:
    """Square roots and column scaling (n^2/2 flops), costed like a level-1 sweep of that length."""
    return float(n * n / 2.0 * sp.k("axpy", backend, 1, n)[()] / 2.0)
