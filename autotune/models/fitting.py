"""Remodelling engine (docs/models.md#fitted.polynomial): fitted polynomial models when the
analytical ones are not enough.

* ``fit_terms.TermSet``: a polynomial ``sum c_ij n^i a^j`` in the problem size ``n`` and one
  algorithm parameter ``a`` (block ``b``, processes ``p``, level ``l``...), its design matrix, term
  names and the candidate subsets for model selection; ``Samples``, ``FittedModel``.
* Here, the four coefficient methods of docs/models.md#fitted.polynomial, in order of cost: FI-ME (one
  polynomial, as many runs as coefficients at evenly spaced sizes), VA-ME (FI-ME per size region),
  FI-LS (least squares on a size sweep), VA-LS (least squares per region); ``remodel`` applies them
  in that order and stops at the first whose error on separate check points is under the tolerance
  (``phi_err``).
* ``fit_select.select_terms``: AICc model selection among term sets with Akaike weights and term
  importances (docs/models.md#fitted.aicc).
* ``fit_strassen.fit_strassen``: Strassen's analytical form with fitted ``M(l)``, ``A(l)``
  (docs/models.md#fitted.strassen).

Every fit minimises the *relative* residual ``sum ((t - t_hat) / t)^2`` (relative weighting,
docs/models.md#fitted.aicc: times span orders of magnitude and the large sizes must not decide
alone) on a column-scaled system solved by ``numpy.linalg.lstsq``. Pure numerics: the caller supplies
``measure(n, a) -> seconds`` (the engine then decides which points to run) or measured arrays.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .fit_terms import (
    METHODS,
    FittedModel,
    Measure,
    MeasureRecorder,
    Samples,
    TermSet,
    as_points,
    as_source,
    assemble,
    fit_points,
    measure_cost,
)

# ----------------------------------------------------------------------------- coefficient methods

def _check_range(n_range: Sequence[float]) -> tuple[float, float]:
    """Validated ``(n_i, n_e)`` with ``0 < n_i < n_e``."""
    if len(n_range) != 2:
        raise ValueError(f"n_range must be (n_i, n_e), got {n_range!r}")
    lo, hi = float(n_range[0]), float(n_range[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise ValueError(f"empty or invalid size range [{lo:g}, {hi:g}]: need 0 < n_i < n_e")
    return lo, hi


def _check_params(termset: TermSet, a_values, source) -> np.ndarray:
    """Sorted distinct parameter values to plan with (``[nan]`` when the terms do not use the parameter)."""
    if a_values is None and isinstance(source, Samples):
        a_values = None if np.isnan(source.a).all() else np.unique(source.a[~np.isnan(source.a)])
    if a_values is None:
        if termset.uses_param:
            raise ValueError(f"terms {termset.names} use {termset.param!r}: give a_values")
        return np.array([np.nan])
    vals = np.unique(np.asarray(a_values, dtype=float).ravel())
    if vals.size == 0 or not np.isfinite(vals).all():
        raise ValueError(f"a_values must be a non-empty list of finite numbers, got {a_values!r}")
    if not termset.uses_param and vals.size > 1:
        raise ValueError(f"terms {termset.names} do not use {termset.param!r}: give one a value (the fixed one)")
    return vals


def _pick(values: np.ndarray, k: int) -> np.ndarray:
    """k values spread evenly over the sorted ``values`` (ValueError if there are fewer)."""
    if values.size < k:
        raise ValueError(f"{values.size} parameter values for {k} distinct powers of the parameter: need {k}")
    return values[np.round(np.linspace(0, values.size - 1, k)).astype(int)]


def _sizes(sizes: np.ndarray, integer: bool, distinct: int = 0) -> np.ndarray:
    """Planned sizes, rounded to integers if asked; ValueError if fewer than ``distinct`` remain distinct."""
    out = np.unique(np.rint(sizes)) if integer else np.unique(sizes)
    if out.size < distinct:
        raise ValueError(f"the interval is too narrow for {distinct} distinct sizes (got {out.tolist()})")
    return out


def _grid(sizes: np.ndarray, a_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (size, parameter) combination."""
    gn, ga = np.meshgrid(sizes, a_vals, indexing="ij")
    return gn.ravel(), ga.ravel()


def _select_rows(termset: TermSet, n: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Indices of ``len(termset)`` points whose design rows are most independent (pivoted QR)."""
    d = len(termset)
    if n.size == d:
        return np.arange(d)
    x = termset.design(n, a)
    x = x / np.abs(x).max(axis=0)
    return np.sort(scipy.linalg.qr(x.T, pivoting=True, mode="r")[1][:d])


def _snap(s: Samples, n: np.ndarray, a: np.ndarray) -> Samples:
    """For each planned point the nearest unused measured point with the same parameter value."""
    used: set[int] = set()
    for x, y in zip(n, a, strict=True):
        same = np.isnan(s.a) if math.isnan(y) else s.a == y
        idx = [i for i in np.flatnonzero(same) if i not in used]
        if not idx:
            raise ValueError(f"no measured point left near n={x:g}, a={y:g} in this region: measure more or use LS")
        used.add(int(min(idx, key=lambda i: (abs(s.n[i] - x), s.n[i]))))
    return s.take(sorted(used))


def _in_region(s: Samples, lo: float, hi: float, last: bool) -> Samples:
    """The points with ``lo <= n < hi`` (``<= hi`` for the last region)."""
    return s.take((s.n >= lo) & ((s.n <= hi) if last else (s.n < hi)))


def _me_points(source, termset: TermSet, lo: float, hi: float, a_vals: np.ndarray, integer: bool,
               last: bool) -> Samples:
    """FI-ME points on [lo, hi]: sizes ``lo + k (hi - lo) / (d + 1)``, k = 1..d, times parameter
    values (docs/models.md#fitted.polynomial)."""
    dn = len(termset.n_degrees)
    sizes = _sizes(lo + np.arange(1, dn + 1) * (hi - lo) / (dn + 1), integer, dn)
    n, a = _grid(sizes, _pick(a_vals, len(termset.a_degrees)))
    if isinstance(source, Samples):
        s = _snap(_in_region(source, lo, hi, last), n, a)
        return s.take(_select_rows(termset, s.n, s.a))
    keep = _select_rows(termset, n, a)
    return source.samples(n[keep], a[keep])


def _ls_points(source, lo: float, hi: float, a_vals: np.ndarray, sizes: np.ndarray, last: bool) -> Samples:
    """Least-squares points: every planned size times every parameter value, or all given points in the region."""
    if isinstance(source, Samples):
        return _in_region(source, lo, hi, last)
    return source.samples(*_grid(sizes, a_vals))


def _ls_sizes(method: str, dn: int, n_range: tuple[float, float], region: tuple[float, float],
              n_inc: float | None, n_dat: int | None, integer: bool) -> np.ndarray:
    """FI-LS: n_i, n_i + n_inc, ... <= n_e; VA-LS: ``n_dat`` sizes from the region's start at step ``w / n_dat``."""
    (lo, hi), (rlo, rhi) = n_range, region
    if method == "FI-LS":
        step = (hi - lo) / (3 * dn) if n_inc is None else float(n_inc)
        if not step > 0:
            raise ValueError(f"n_inc must be positive, got {n_inc}")
        count = int(math.floor((hi - lo) / step * (1 + 1e-12))) + 1  # (n_e - n_i + n_inc) / n_inc sizes
        return _sizes(lo + step * np.arange(count), integer)
    nd = 2 * dn + 1 if n_dat is None else int(n_dat)
    if nd < 1:
        raise ValueError(f"n_dat must be >= 1, got {n_dat}")
    return _sizes(rlo + np.arange(nd) * (rhi - rlo) / nd, integer)


def fit(method: str, source: Measure | Samples, termset: TermSet, n_range: Sequence[float],
        a_values: Sequence[float] | None = None, *, regions: int = 2, n_inc: float | None = None,
        n_dat: int | None = None, integer: bool = True) -> FittedModel:
    """One of the four coefficient methods (plans points, measures or selects them, fits per region).

    FI-ME: one polynomial from exactly as many runs as coefficients, at sizes ``n_i + k (n_e - n_i) /
    (d_n + 1)`` times d_a values over ``a_values`` (the ``len(termset)`` most independent points,
    pivoted QR, when the terms are not a full tensor product). VA-ME: ``regions`` equal intervals,
    FI-ME in each. FI-LS: relative least squares on sizes n_i, n_i + n_inc, ... <= n_e (default
    ``3 d_n + 1`` sizes). VA-LS: ``regions`` intervals, ``n_dat`` sizes each (default ``2 d_n + 1``),
    LS in each. With measured ``Samples``, each planned point is the nearest measured one (LS: all
    points in the range)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: one of {METHODS}")
    lo, hi = _check_range(n_range)
    src = as_source(source)
    a_vals = _check_params(termset, a_values, src)
    r = 1 if method.startswith("FI") else int(regions)
    if r < 1:
        raise ValueError(f"regions must be >= 1, got {regions}")
    edges = np.linspace(lo, hi, r + 1)
    parts = []
    for k, (rlo, rhi) in enumerate(itertools.pairwise(edges)):
        last = k == r - 1
        if method.endswith("ME"):
            parts.append(_me_points(src, termset, rlo, rhi, a_vals, integer, last))
        else:
            sizes = _ls_sizes(method, len(termset.n_degrees), (lo, hi), (rlo, rhi), n_inc, n_dat, integer)
            parts.append(_ls_points(src, rlo, rhi, a_vals, sizes, last))
    fits = [_fit_region(termset, p, method, k) for k, p in enumerate(parts)]
    return assemble(termset, method, edges, fits, parts)


def _fit_region(termset: TermSet, s: Samples, method: str, k: int) -> tuple[np.ndarray, float]:
    """One region's fit, with the method and region named in any error."""
    try:
        return fit_points(termset, s)
    except ValueError as err:
        raise ValueError(f"{method}, region {k}: {err}") from None


# ----------------------------------------------------------------------------- check points

def _check_arrays(check_n, check_a, measured) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated check points (at least one, positive measured times)."""
    s = Samples(check_n, check_a, measured)
    if len(s) == 0:
        raise ValueError("no check points")
    return s.n, s.a, s.t


def phi_err(model, check_n, check_a, measured) -> float:
    """Phi_err (docs/models.md#fitted.polynomial): ``(1 - sum t_model / sum t_measured) * 100`` on the
    check points (> 0: the model underestimates)."""
    n, a, t = _check_arrays(check_n, check_a, measured)
    pred = np.asarray(model.predict(n, None if np.isnan(a).all() else a), dtype=float)
    return float((1.0 - pred.sum() / t.sum()) * 100.0)


def first_nonpositive(model, lo: float, hi: float, a_values=None, points: int = 96) -> float | None:
    """The smallest size in ``[lo, hi]`` (dense log grid, every ``a``) where ``model`` predicts a time
    <= 0, or None: a time model must be positive wherever it is used. Exact-fit methods (FI-ME,
    VA-ME) pass through their few points and can dive below zero between or beside them."""
    n = np.geomspace(lo, hi, points)
    for a in (None,) if a_values is None else a_values:
        pred = np.asarray(model.predict(n, None if a is None else np.full_like(n, a)), dtype=float)
        bad = ~(pred > 0)
        if bad.any():
            return float(n[bad.argmax()])
    return None


def median_ape(model, check_n, check_a, measured) -> float:
    """Median absolute percentage error on the check points (Phi_err can hide errors of opposite signs)."""
    n, a, t = _check_arrays(check_n, check_a, measured)
    pred = np.asarray(model.predict(n, None if np.isnan(a).all() else a), dtype=float)
    return float(np.median(np.abs(pred - t) / t) * 100.0)


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Trial:
    """One method tried by ``remodel``: its model, cost and errors on the check points.

    ``points`` counts the points the fit used; ``runs`` and ``seconds`` count only the new
    measurements it needed (points already run by a cheaper method are reused, not re-run).
    """

    method: str
    model: FittedModel | None
    points: int
    runs: int
    seconds: float
    phi_err: float = math.nan
    ape: float = math.nan
    accepted: bool = False
    error: str = ""


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Remodel:
    """Result of the cascade: the chosen model, whether it met the tolerance, every trial, the check points."""

    model: FittedModel
    accepted: bool
    trials: tuple[Trial, ...]
    check: Samples
    check_runs: int = 0
    check_seconds: float = 0.0

    @property
    def runs(self) -> int:
        """Measurements run in total, check points included."""
        return sum(t.runs for t in self.trials) + self.check_runs

    @property
    def seconds(self) -> float:
        """Seconds measured in total, check points included."""
        return sum(t.seconds for t in self.trials) + self.check_seconds


def _measure_checks(source, check_points) -> tuple[Samples, int, float]:
    """Check-point samples: given measured, or run through ``measure`` (own cache: they are never fitting points)."""
    if isinstance(check_points, Samples):
        if len(check_points) == 0:
            raise ValueError("no check points")
        return check_points, 0, 0.0
    if not callable(source):
        raise ValueError("with measured points instead of measure(), check_points must be measured Samples")
    try:
        pts = [tuple(p) for p in check_points]
    except TypeError:
        pts = []
    if not pts or any(len(p) != 2 for p in pts):
        raise ValueError(f"check_points must be a non-empty list of (n, a) pairs, got {check_points!r}")
    rec = MeasureRecorder(source)
    s = rec.samples(*as_points([p[0] for p in pts], [np.nan if p[1] is None else p[1] for p in pts]))
    return s, rec.runs, rec.seconds


def _trial(method: str, src, termset: TermSet, n_range, a_values, check: Samples, tol: float, ape_tol: float,
           **opts) -> Trial:
    """Fit one method and score it on the check points; a method that cannot be applied is recorded, not raised."""
    runs0, secs0 = measure_cost(src)
    try:
        model = fit(method, src, termset, n_range, a_values, **opts)
    except (ValueError, np.linalg.LinAlgError) as err:
        runs, secs = measure_cost(src)
        return Trial(method, None, 0, runs - runs0, secs - secs0, error=str(err))
    phi, ape = phi_err(model, check.n, check.a, check.t), median_ape(model, check.n, check.a, check.t)
    runs, secs = measure_cost(src)
    bad = first_nonpositive(model, n_range[0], n_range[1], a_values)
    return Trial(method, model, len(model.points), runs - runs0, secs - secs0, phi, ape,
                 abs(phi) < tol and ape < ape_tol and bad is None,
                 "" if bad is None else f"predicts a non-positive time at n = {bad:.0f}")


def remodel(measure: Measure | Samples, n_range: Sequence[float], a_values: Sequence[float] | None,
            termset: TermSet, check_points, tol: float, *, ape_tol: float | None = None,
            methods: Sequence[str] = METHODS, regions: int = 2, n_inc: float | None = None,
            n_dat: int | None = None, integer: bool = True) -> Remodel:
    """The cascade of docs/models.md#fitted.polynomial: FI-ME, VA-ME, FI-LS, VA-LS in order of cost,
    stopping at the first within tolerance.

    A method is accepted when ``|Phi_err| < tol`` and the median APE on the check points is
    below ``ape_tol`` (default ``tol``; ``math.inf`` uses Phi_err alone), both in percent, and its
    times are positive over ``n_range`` (``first_nonpositive``).
    ``check_points``: a list of ``(n, a)`` pairs run through ``measure``, or measured ``Samples``
    (required when ``measure`` is itself measured points). Measurements are cached across
    methods. If none is accepted, the tried model with the smallest ``|Phi_err|`` (then APE) is
    returned with ``accepted=False``; a method that cannot be applied is recorded with its error.
    """
    if not tol > 0:
        raise ValueError(f"tol must be a positive percentage, got {tol}")
    if not methods or any(m not in METHODS for m in methods):
        raise ValueError(f"unknown or no methods {list(methods)}: choose from {METHODS}")
    _check_range(n_range)
    check, check_runs, check_secs = _measure_checks(measure, check_points)
    src = as_source(measure)
    opts = {"regions": regions, "n_inc": n_inc, "n_dat": n_dat, "integer": integer}
    trials: list[Trial] = []
    for method in methods:
        trials.append(_trial(method, src, termset, n_range, a_values, check, tol,
                             tol if ape_tol is None else ape_tol, **opts))
        last = trials[-1]
        if last.accepted and last.model is not None:      # accepted: fitted, within tolerance
            return Remodel(last.model, True, tuple(trials), check, check_runs, check_secs)
    fitted = [(t, t.model) for t in trials if t.model is not None]
    if not fitted:
        raise ValueError("no method could be applied: " + "; ".join(f"{t.method}: {t.error}" for t in trials))
    _, model = min(fitted, key=lambda tm: (abs(tm[0].phi_err), tm[0].ape))
    return Remodel(model, False, tuple(trials), check, check_runs, check_secs)
