"""LU family, one process: LAPACK getrf, our blocked LU, and the solve from the factors
(docs/models.md#lu.getrf, #lu.blocked, #lu.gesv)."""
from __future__ import annotations

from typing import cast

import numpy as np

from autotune.core.routines import ROUTINES, flops
from autotune.db.lookup import SPLookup


def lu_flops(n) -> np.ndarray:
    """LU flop count, the probe's definition, over an array of orders."""
    # ``routines.flops`` is annotated for integer dims; its counts are numpy expressions of them.
    return cast(np.ndarray, ROUTINES["getrf"].flops(n=np.asarray(n, dtype=float)))


def u12_pattern(sp: SPLookup, backend: str, threads: int) -> str:
    """The series of the LU's U12 solve (left side, unit lower): "u12" where the probe measured
    it, else the panel solve's (the same flops on the right side; databases probed before it)."""
    has = getattr(sp, "has", None)
    return "u12" if has is not None and has("trsm", backend, threads, "u12") else "panel"


def getrf(n: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None) -> float:
    """A library's own LAPACK getrf: ``flops(n) * k_getrf(backend, threads, n)``."""
    t = float(lu_flops(n) * sp.k("getrf", backend, threads, n))
    if parts is not None:
        parts["getrf"] = t
    return t


def blocked(n: int, blocks, backend: str, threads: int, sp: SPLookup, parts: dict | None = None) -> np.ndarray:
    """Our right-looking blocked LU (``getrf_blocked``) per block b: per step at column j (panel
    width w, m = n - j rows, x = m - w trailing columns) the library's getrf on the m x w panel,
    w interchanges on the n - w other columns (laswp), the w x w unit-lower trsm of the w x x block
    row and the (x x w)(w x x) trailing gemm, each at the k measured on that shape (getrf and
    laswp "panel", trsm "panel", gemm "rankb"). All blocks in one lookup per routine."""
    bs = np.asarray([int(b) for b in np.atleast_1d(blocks)])
    owner = np.concatenate([np.full(-(-n // b), i) for i, b in enumerate(bs)])
    start = np.concatenate([np.arange(0, n, b) for b in bs]).astype(float)
    b = bs[owner].astype(float)
    w = np.minimum(b, n - start)
    m = n - start
    x = m - w
    panel = (m * w * w - w**3 / 3.0 - w * w / 2.0 + 5.0 * w / 6.0) * sp.k("getrf", backend, threads, m, "panel", b)
    swap = w * (n - w) * sp.k("laswp", backend, threads, np.full(m.shape, float(n)), "panel", b)
    live = x > 0
    trsm, gemm = np.zeros(m.shape), np.zeros(m.shape)
    xl, wl, bl = x[live], w[live], b[live]
    trsm[live] = xl * wl * wl * sp.k("trsm", backend, threads, xl, u12_pattern(sp, backend, threads), bl)
    gemm[live] = 2.0 * xl * xl * wl * sp.k("gemm", backend, threads, xl, "rankb", bl)
    terms = {"getrf": panel, "laswp": swap, "trsm": trsm, "gemm": gemm}
    sums = {k: np.bincount(owner, weights=v, minlength=bs.size) for k, v in terms.items()}
    if parts is not None:
        parts.update(sums)
    return sums["getrf"] + sums["laswp"] + sums["trsm"] + sums["gemm"]


def getrs(n: int, nrhs: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None) -> float:
    """Both triangular solves of ``nrhs`` right-hand sides from getrf's factors: ``2 n^2 nrhs``
    flops times k of getrs measured at order n and that many right-hand sides (rhs pattern)."""
    t = float(flops("getrs", {"n": n, "nrhs": nrhs}) * sp.k("getrs", backend, threads, n, "rhs", nrhs))
    if parts is not None:
        parts["getrs"] = t
    return t


def gesv(n: int, nrhs: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None) -> float:
    """``solve``: getrf then getrs on one library at one thread count."""
    return getrf(n, backend, threads, sp, parts) + getrs(n, nrhs, backend, threads, sp, parts)


__all__ = ["blocked", "gesv", "getrf", "getrs", "lu_flops", "u12_pattern"]
