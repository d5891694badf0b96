"""Strassen's analytical form with fitted per-level factors M(l), A(l) (docs/models.md#fitted.strassen)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .fit_terms import Samples, lstsq_rel

# ------------------------------------------------------------- Strassen (docs/models.md#fitted.strassen)

def strassen_basis(n, level, k3: Callable, k2: Callable) -> tuple[np.ndarray, np.ndarray]:
    """The cost terms of docs/models.md#fitted.strassen at (n, l): ``7^l 2 (n/2^l)^3 k3(n/2^l)`` and
    ``(18/4) n^2 sum_i (7/4)^(i-1) k2(n/2^i)``.

    ``k2`` is taken at each level's quadrant size ``n/2^i``; for a constant ``k2`` this is exactly
    the source's ``(18/4) n^2 k2 sum_{i=1..l} (7/4)^(i-1)`` (docs/models.md#fitted.strassen).
    """
    n, lv = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(level, dtype=float))
    if not np.isfinite(lv).all() or (lv < 0).any() or (lv != np.round(lv)).any():
        raise ValueError(f"recursion levels must be integers >= 0, got {np.unique(lv)}")
    lv = lv.astype(int)
    leaf = n / 2.0 ** lv
    mult = 7.0 ** lv * 2.0 * leaf ** 3 * np.broadcast_to(k3(leaf), n.shape)
    add = np.zeros(n.shape)
    for i in range(1, int(lv.max(initial=0)) + 1):
        q = n / 2.0 ** i
        add += np.where(i <= lv, 18.0 * 7.0 ** (i - 1) * q ** 2 * np.broadcast_to(k2(q), n.shape), 0.0)
    return mult, add


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class StrassenFit:
    """Strassen remodel ``T(n, l) = M(l) mult(n, l) + A(l) add(n, l)`` (docs/models.md#fitted.strassen).

    Per-level mode (``m_poly is None``): one ``M``, ``A`` per measured level.
    Polynomial mode: ``M(l) = sum m_poly[q] l^q``, ``A(l) = sum a_poly[r] l^r`` fitted jointly.
    """

    levels: tuple[int, ...]
    m: np.ndarray
    a: np.ndarray
    m_poly: np.ndarray | None
    a_poly: np.ndarray | None
    k3: Callable
    k2: Callable
    points: Samples
    sigma: float

    def _coef(self, level, values: np.ndarray, poly: np.ndarray | None) -> np.ndarray:
        """M or A at the given levels (polynomial, or lookup of the fitted levels)."""
        level = np.asarray(level)
        if poly is not None:
            return np.polynomial.polynomial.polyval(level.astype(float), poly)
        unknown = np.setdiff1d(level, self.levels)
        if unknown.size:
            raise ValueError(f"levels {unknown.tolist()} were not fitted (per-level fit of {list(self.levels)})")
        return values[np.searchsorted(self.levels, level)]

    def M(self, level) -> np.ndarray:
        """Fitted multiplication factor M(l) (the thesis' name)."""
        return self._coef(level, self.m, self.m_poly)

    def A(self, level) -> np.ndarray:
        """Fitted addition factor A(l) (the thesis' name)."""
        return self._coef(level, self.a, self.a_poly)

    def predict(self, n, level) -> np.ndarray:
        """Predicted seconds of Strassen with ``level`` recursion levels at size ``n`` (vectorised)."""
        mult, add = strassen_basis(n, level, self.k3, self.k2)
        lv = np.broadcast_to(np.asarray(level), mult.shape)
        return self.M(lv) * mult + self.A(lv) * add

    def best_level(self, n, levels: Iterable[int] | None = None) -> int | np.ndarray:
        """Level with the smallest predicted time at each size (default: the fitted levels, or their span)."""
        lv = np.array(sorted(levels) if levels is not None else (
            self.levels if self.m_poly is None else range(min(self.levels), max(self.levels) + 1)))
        n_arr = np.asarray(n, dtype=float)
        times = self.predict(n_arr[..., None], lv)
        best = lv[np.argmin(times, axis=-1)]
        return int(best) if best.ndim == 0 else best


def fit_strassen(n, level, t, k3: Callable, k2: Callable, *, degrees: tuple[int, int] | None = None) -> StrassenFit:
    """Fit M(l), A(l) of docs/models.md#fitted.strassen to measured Strassen times by relative least squares.

    ``degrees=None``: one (M, A) per level from that level's sizes (a level-0
    point has no additions, so A(0) = 0). ``degrees=(dm, da)``: ``M`` and ``A`` polynomials in
    ``l`` of those degrees (the thesis found (2, 1)), fitted in one least squares over all points.
    ``k3``, ``k2``: seconds per flop as vectorised callables of the (leaf, quadrant) size.
    """
    s = Samples(n, level, t)
    if np.isnan(s.a).any():
        raise ValueError("every point needs its recursion level l")
    mult, add = strassen_basis(s.n, s.a, k3, k2)
    levels = tuple(int(v) for v in np.unique(s.a))
    if degrees is None:
        m, a, rss = _fit_per_level(s, mult, add, levels)
        m_poly = a_poly = None
        n_coef = 2 * len(levels) - (0 in levels)
    else:
        m_poly, a_poly, rss = _fit_level_poly(s, mult, add, degrees)
        m = np.polynomial.polynomial.polyval(np.array(levels, float), m_poly)
        a = np.polynomial.polynomial.polyval(np.array(levels, float), a_poly)
        n_coef = m_poly.size + a_poly.size
    sigma = math.sqrt(rss / (len(s) - n_coef)) if len(s) > n_coef else math.nan
    return StrassenFit(levels, np.asarray(m), np.asarray(a), m_poly, a_poly, k3, k2, s, sigma)


def _fit_per_level(s: Samples, mult: np.ndarray, add: np.ndarray,
                   levels: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, float]:
    """(M_l, A_l) per level by relative least squares on that level's sizes."""
    m, a, rss = [], [], 0.0
    for lv in levels:
        sel = s.a == lv
        x = np.column_stack([mult[sel]] + ([add[sel]] if lv > 0 else []))
        c, r = _solve_checked(x, s.t[sel], f"level {lv}")
        m.append(c[0])
        a.append(c[1] if lv > 0 else 0.0)
        rss += r
    return np.array(m), np.array(a), rss


def _fit_level_poly(s: Samples, mult: np.ndarray, add: np.ndarray,
                    degrees: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, float]:
    """M(l), A(l) polynomial coefficients (increasing powers) in one relative least squares."""
    dm, da = (int(d) for d in degrees)
    if dm < 0 or da < 0:
        raise ValueError(f"degrees must be >= 0, got {degrees}")
    x = np.column_stack([mult * s.a ** q for q in range(dm + 1)] + [add * s.a ** r for r in range(da + 1)])
    c, rss = _solve_checked(x, s.t, f"M(l) of degree {dm}, A(l) of degree {da}")
    return c[: dm + 1], c[dm + 1:], rss


def _solve_checked(x: np.ndarray, t: np.ndarray, what: str) -> tuple[np.ndarray, float]:
    """Relative least squares that raises a clear ValueError when the points do not determine the coefficients."""
    if t.size < x.shape[1]:
        raise ValueError(f"{what}: {t.size} points for {x.shape[1]} coefficients")
    c, rss, rank = lstsq_rel(x, t)
    if rank < x.shape[1]:
        raise ValueError(f"{what}: the points determine only {rank} of {x.shape[1]} coefficients "
                         "(need more distinct sizes or levels)")
    return c, rss
