"""Remodelling engine (docs/models.md#fitted.polynomial): fitted polynomial models when the
analytical ones are not enough.

* ``TermSet``: a polynomial ``sum c_ij n^i a^j`` in the problem size ``n`` and one algorithm
  parameter ``a`` (block ``b``, processes ``p``, level ``l``...), its design matrix, term names and
  the candidate subsets for model selection.
* The four coefficient methods of docs/models.md#fitted.polynomial, in order of cost: FI-ME (one
  polynomial, as many runs as coefficients at evenly spaced sizes), VA-ME (FI-ME per size region),
  FI-LS (least squares on a size sweep), VA-LS (least squares per region); ``remodel`` applies them
  in that order and stops at the first whose error on separate check points is under the tolerance
  (``phi_err``).
* ``select_terms``: AICc model selection among term sets with Akaike weights and term
  importances (docs/models.md#fitted.aicc).
* ``fit_strassen``: Strassen's analytical form with fitted ``M(l)``, ``A(l)``
  (docs/models.md#fitted.strassen).

Every fit minimises the *relative* residual ``sum ((t - t_hat) / t)^2`` (relative weighting,
docs/models.md#fitted.aicc: times span orders of magnitude and the large sizes must not decide
alone) on a column-scaled system solved by ``numpy.linalg.lstsq``. Pure numerics: the caller supplies
``measure(n, a) -> seconds`` (the engine then decides which points to run) or measured arrays.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

Term = tuple[int, int]
Measure = Callable[[float, "float | None"], float]
METHODS = ("FI-ME", "VA-ME", "FI-LS", "VA-LS")
# Relative residual variances below (1e-10)^2 are round-off: flooring them makes exact fits tie
# in AICc, so the parameter penalty (not round-off noise) decides among them.
_RSS_FLOOR = 1e-20


# ----------------------------------------------------------------------------- term sets

def _power(symbol: str, e: int) -> str:
    """``n``, ``n^3``, ``b^-1``, or '' for exponent 0."""
    return "" if e == 0 else symbol if e == 1 else f"{symbol}^{e}"


@dataclass(frozen=True)
class TermSet:
    """Polynomial ``sum c_ij n^i a^j`` over given exponent pairs ``(i, j)``, kept in canonical order.

    ``param`` only names ``a`` in term names (``"b"`` gives ``"n^2 b^-1"``). Terms are sorted by
    decreasing ``i`` then ``j`` so that equal sets compare and hash equal however they were built.
    """

    terms: tuple[Term, ...]
    param: str = "a"

    def __post_init__(self) -> None:
        try:
            raw = [tuple(t) for t in self.terms]
            valid = all(len(t) == 2 and all(float(e) == int(e) for e in t) for t in raw)
        except (TypeError, ValueError, OverflowError):
            valid = False
        if not valid:
            raise ValueError(f"terms must be pairs of integer exponents (i, j), got {self.terms!r}")
        if not raw:
            raise ValueError("a term set needs at least one term")
        terms = sorted({(int(i), int(j)) for i, j in raw}, key=lambda t: (-t[0], -t[1]))
        if len(terms) != len(raw):
            raise ValueError(f"duplicate terms in {self.terms!r}")
        object.__setattr__(self, "terms", tuple(terms))

    @classmethod
    def polynomial(cls, n_degrees: Iterable[int] = range(4), a_degrees: Iterable[int] = (0,),
                   param: str = "a") -> TermSet:
        """Every ``n^i a^j`` for i in ``n_degrees``, j in ``a_degrees`` (the full set: range(4), (-1, 0, 1))."""
        return cls(tuple(itertools.product(n_degrees, a_degrees)), param)

    def __len__(self) -> int:
        return len(self.terms)

    def name(self, term: Term) -> str:
        """Readable name of one term: ``"1"``, ``"n^3"``, ``"n^2 b^-1"``."""
        return " ".join(p for p in (_power("n", term[0]), _power(self.param, term[1])) if p) or "1"

    @property
    def names(self) -> tuple[str, ...]:
        """Readable name per term, in ``terms`` order (= design-matrix column order)."""
        return tuple(self.name(t) for t in self.terms)

    @property
    def uses_param(self) -> bool:
        """Whether any term depends on the algorithm parameter ``a``."""
        return any(j != 0 for _, j in self.terms)

    @property
    def leading(self) -> Term:
        """The dominant term: highest power of n, then the one closest to ``a^0`` (``n^3`` in the full set)."""
        return max(self.terms, key=lambda t: (t[0], -abs(t[1]), t[1]))

    @property
    def n_degrees(self) -> tuple[int, ...]:
        """Distinct powers of n (how many sizes FI-ME needs)."""
        return tuple(sorted({i for i, _ in self.terms}))

    @property
    def a_degrees(self) -> tuple[int, ...]:
        """Distinct powers of a (how many parameter values FI-ME needs)."""
        return tuple(sorted({j for _, j in self.terms}))

    def design(self, n, a=None) -> np.ndarray:
        """Design matrix, one row per broadcast (n, a) point and one column per term (vectorised)."""
        n, a = _points(n, a)
        if self.uses_param and np.isnan(a).any():
            raise ValueError(f"terms {self.names} use the parameter {self.param!r}: give its values")
        exps = np.array(self.terms, dtype=float)
        with np.errstate(all="ignore"):
            x = n[:, None] ** exps[:, 0] * a[:, None] ** exps[:, 1]
        if not np.isfinite(x).all():
            raise ValueError(f"non-finite design for terms {self.names}: {self.param} = 0 with a negative power?")
        return x

    def subset(self, terms: Iterable[Term]) -> TermSet:
        """A term set with the given terms, same parameter name."""
        return TermSet(tuple(terms), self.param)

    def nested(self, required: Iterable[Term] | None = None) -> list[TermSet]:
        """Nested sets by degree from the top: required terms plus every term of degree >= k, k falling."""
        req = self._required(required)
        return [self.subset(set(req) | {t for t in self.terms if t[0] >= k}) for k in reversed(self.n_degrees)]

    def candidates(self, max_sets: int = 256, required: Iterable[Term] | None = None) -> list[TermSet]:
        """Candidate term sets for AICc selection: subsets keeping ``required`` (default the leading term).

        All ``2^m`` subsets of the ``m`` optional terms when that is at most ``max_sets`` (TIA's
        exhaustive list). Otherwise all subsets up to the largest dimension that fits (parsimony:
        small models first), plus the nested-by-degree sets so the full and degree-truncated
        polynomials are always candidates. Never more than ``max_sets``.
        """
        req = self._required(required)
        optional = [t for t in self.terms if t not in req]
        nested = self.nested(req)
        m = len(optional)
        dims = m if 2 ** m <= max_sets else _max_dimension(m, max_sets - len(nested))
        if dims < 0:
            raise ValueError(f"max_sets={max_sets} is too small for even the {len(nested)} nested sets")
        sets = [self.subset(req + combo) for s in range(dims + 1)
                for combo in itertools.combinations(optional, s) if req or combo]
        seen = set(sets)
        return sets + [s for s in nested if s not in seen]

    def _required(self, required: Iterable[Term] | None) -> tuple[Term, ...]:
        """Validated required terms (default: the leading term)."""
        req = (self.leading,) if required is None else tuple((int(i), int(j)) for i, j in required)
        missing = [t for t in req if t not in self.terms]
        if missing:
            raise ValueError(f"required terms {missing} are not in the term set {self.names}")
        return req

    def __str__(self) -> str:
        return " + ".join(self.names)


def _max_dimension(m: int, budget: int) -> int:
    """Largest s with sum_{r<=s} C(m, r) <= budget (-1 if even the empty subset does not fit)."""
    total, s = 0, -1
    while s < m and total + math.comb(m, s + 1) <= budget:
        s += 1
        total += math.comb(m, s)
    return s


def _points(n, a=None) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast (n, a) to flat float arrays; a missing parameter is NaN."""
    a = np.nan if a is None else a
    n, a = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(a, dtype=float))
    return n.ravel(), a.ravel()


# ----------------------------------------------------------------------------- measured points

@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Samples:
    """Measured points: sizes ``n``, parameter values ``a`` (NaN: none) and positive times ``t`` in seconds."""

    n: np.ndarray
    a: np.ndarray | None
    t: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.t, dtype=float).ravel()
        n, a = _points(self.n, self.a)
        if n.size != t.size:
            raise ValueError(f"{n.size} sizes/parameter values for {t.size} times")
        if not np.isfinite(n).all() or (n <= 0).any():
            raise ValueError(f"problem sizes must be positive and finite, got {n[~(n > 0) | ~np.isfinite(n)][:5]}")
        bad = ~np.isfinite(t) | (t <= 0)
        if bad.any():
            raise ValueError(f"times must be positive and finite seconds, got {t[bad][:5]} at n = {n[bad][:5]}")
        for name, value in (("n", n), ("a", a), ("t", t)):
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return int(self.t.size)

    def take(self, mask) -> Samples:
        """The points selected by a boolean mask or index array."""
        return Samples(self.n[mask], self.a[mask], self.t[mask])

    @staticmethod
    def concat(parts: Sequence[Samples]) -> Samples:
        """All points of several sample sets, in order."""
        return Samples(*(np.concatenate([getattr(p, k) for p in parts]) for k in "nat"))


def _as_samples(points) -> Samples:
    """A ``Samples`` from itself or an ``(n, a, t)`` tuple."""
    if isinstance(points, Samples):
        return points
    if not (isinstance(points, tuple | list) and len(points) == 3):
        raise ValueError(f"measured points must be Samples or an (n, a, t) tuple, got {type(points).__name__}")
    return Samples(*points)


class _Recorder:
    """Runs ``measure`` once per distinct point, validates the time, and counts runs and seconds."""

    def __init__(self, measure: Measure) -> None:
        self.measure, self.cache, self.runs, self.seconds = measure, {}, 0, 0.0

    def __call__(self, n: float, a: float) -> float:
        arg_n = int(n) if float(n).is_integer() else float(n)
        arg_a = None if math.isnan(a) else float(a)
        key = (arg_n, arg_a)  # None, not NaN: NaN keys never compare equal
        if key not in self.cache:
            out = np.asarray(self.measure(arg_n, arg_a), dtype=float)
            t = float(out.reshape(())) if out.size == 1 else math.nan
            if not (math.isfinite(t) and t > 0):
                raise ValueError(f"measure({arg_n}, {arg_a}) returned {out!r}: it must be one positive time in seconds")
            self.cache[key] = t
            self.runs, self.seconds = self.runs + 1, self.seconds + t
        return self.cache[key]

    def samples(self, n: np.ndarray, a: np.ndarray) -> Samples:
        """Measure (or recall) every planned point."""
        return Samples(n, a, np.array([self(x, y) for x, y in zip(n, a, strict=True)]))


def _source(source) -> Samples | _Recorder:
    """Measured points as ``Samples``, or ``measure`` wrapped in a ``_Recorder`` (kept if already one)."""
    if isinstance(source, Samples | _Recorder):
        return source
    return _Recorder(source) if callable(source) else _as_samples(source)


def _cost(src) -> tuple[int, float]:
    """Runs and seconds measured so far through ``src`` (zero for given points)."""
    return (src.runs, src.seconds) if isinstance(src, _Recorder) else (0, 0.0)


# ----------------------------------------------------------------------------- least squares

def _lstsq_rel(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Minimise ``sum ((t - x c) / t)^2`` on the column-scaled system; returns c, relative RSS and rank."""
    xw = x / t[:, None]
    scale = np.abs(xw).max(axis=0)
    scale[scale == 0] = 1.0
    z, _, rank, _ = np.linalg.lstsq(xw / scale, np.ones_like(t), rcond=None)
    c = z / scale
    return c, float(np.sum((1.0 - xw @ c) ** 2)), int(rank)


def _fit_points(termset: TermSet, s: Samples) -> tuple[np.ndarray, float]:
    """Relative-weighted coefficients of ``termset`` on the points ``s``; ValueError if they do not determine them."""
    d = len(termset)
    if len(s) < d:
        raise ValueError(f"{len(s)} points for {d} coefficients ({', '.join(termset.names)}): need at least {d}")
    c, rss, rank = _lstsq_rel(termset.design(s.n, s.a), s.t)
    if rank < d:
        raise ValueError(f"the {len(s)} points determine only {rank} of the {d} coefficients of "
                         f"{termset}: use more distinct sizes or parameter values")
    return c, rss


# ----------------------------------------------------------------------------- fitted model

@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class FittedModel:
    """A fitted polynomial, one coefficient row per size region ``[edges[k], edges[k+1])``.

    ``sigma`` is the relative residual standard deviation on the fitting points (NaN when the
    fit used no more points than coefficients, as FI-ME and VA-ME do).
    """

    termset: TermSet
    method: str
    edges: np.ndarray
    coefficients: np.ndarray
    points: Samples
    sigma: float = math.nan

    @property
    def names(self) -> tuple[str, ...]:
        """Term names, one per coefficient column."""
        return self.termset.names

    @property
    def regions(self) -> list[tuple[float, float]]:
        """Size regions ``(lo, hi)``, one per coefficient row."""
        return list(itertools.pairwise(self.edges.tolist()))

    def region_of(self, n) -> np.ndarray:
        """Region index of each size (sizes outside the fitted interval use the nearest region)."""
        return np.searchsorted(self.edges[1:-1], np.asarray(n, dtype=float), side="right")

    def predict(self, n, a=None) -> np.ndarray:
        """Predicted seconds at the broadcast (n, a) points (vectorised; VA-* pick each size's region)."""
        shape = np.broadcast_shapes(np.shape(n), np.shape(a) if a is not None else ())
        flat_n, flat_a = _points(n, a)
        rows = self.coefficients[self.region_of(flat_n)]
        return np.einsum("ij,ij->i", self.termset.design(flat_n, flat_a), rows).reshape(shape)

    def coef_dict(self, region: int = 0) -> dict[str, float]:
        """Coefficients of one region by term name."""
        return dict(zip(self.names, self.coefficients[region].tolist(), strict=True))

    def __str__(self) -> str:
        parts = [" + ".join(f"{c:.4g}*{nm}" for nm, c in self.coef_dict(k).items()) + f"  on [{lo:g}, {hi:g}]"
                 for k, (lo, hi) in enumerate(self.regions)]
        return f"{self.method}: " + "; ".join(parts)


def _assemble(termset: TermSet, method: str, edges: np.ndarray, fits: list[tuple[np.ndarray, float]],
              parts: list[Samples]) -> FittedModel:
    """A FittedModel from per-region coefficient fits and the points each used."""
    points = Samples.concat(parts)
    dof = len(points) - len(fits) * len(termset)
    sigma = math.sqrt(sum(rss for _, rss in fits) / dof) if dof > 0 else math.nan
    return FittedModel(termset, method, edges, np.array([c for c, _ in fits]), points, sigma)


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
        used.add(min(idx, key=lambda i: (abs(s.n[i] - x), s.n[i])))
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


def _fit_method(method: str, source, termset: TermSet, n_range, a_values, *, regions: int = 2,
                n_inc: float | None = None, n_dat: int | None = None, integer: bool = True) -> FittedModel:
    """Shared body of the four coefficient methods (plans points, measures or selects them, fits per region)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: one of {METHODS}")
    lo, hi = _check_range(n_range)
    src = _source(source)
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
    return _assemble(termset, method, edges, fits, parts)


def _fit_region(termset: TermSet, s: Samples, method: str, k: int) -> tuple[np.ndarray, float]:
    """One region's fit, with the method and region named in any error."""
    try:
        return _fit_points(termset, s)
    except ValueError as err:
        raise ValueError(f"{method}, region {k}: {err}") from None


def fi_me(source: Measure | Samples, termset: TermSet, n_range: Sequence[float],
          a_values: Sequence[float] | None = None, *,
          integer: bool = True) -> FittedModel:
    """FI-ME: one polynomial from exactly as many runs as coefficients, at evenly spaced sizes (square system).

    Sizes ``n_i + k (n_e - n_i) / (d_n + 1)`` (k = 1..d_n, d_n = distinct powers of n) times d_a
    parameter values spread over ``a_values``; when the terms are not a full tensor product the
    ``len(termset)`` most independent of those points are run (pivoted QR). With measured
    ``Samples`` instead of ``measure``, each planned point is the nearest measured one.
    """
    return _fit_method("FI-ME", source, termset, n_range, a_values, integer=integer)


def va_me(source: Measure | Samples, termset: TermSet, n_range: Sequence[float],
          a_values: Sequence[float] | None = None, *,
          regions: int = 2, integer: bool = True) -> FittedModel:
    """VA-ME: ``regions`` equal size intervals, FI-ME in each (one polynomial per region)."""
    return _fit_method("VA-ME", source, termset, n_range, a_values, regions=regions, integer=integer)


def fi_ls(source: Measure | Samples, termset: TermSet, n_range: Sequence[float],
          a_values: Sequence[float] | None = None, *,
          n_inc: float | None = None, integer: bool = True) -> FittedModel:
    """FI-LS: one polynomial by relative least squares on sizes n_i, n_i + n_inc, ..., <= n_e, every a value.

    Default ``n_inc`` gives ``3 d_n + 1`` sizes. With ``Samples``, all given points in the range are used.
    """
    return _fit_method("FI-LS", source, termset, n_range, a_values, n_inc=n_inc, integer=integer)


def va_ls(source: Measure | Samples, termset: TermSet, n_range: Sequence[float],
          a_values: Sequence[float] | None = None, *,
          regions: int = 2, n_dat: int | None = None, integer: bool = True) -> FittedModel:
    """VA-LS: ``regions`` intervals ``[n_i + jw, n_i + (j+1)w)``, ``n_dat`` sizes at step ``w/n_dat``, LS in each.

    Default ``n_dat = 2 d_n + 1``; every a value at each size. The last region also takes ``n_e``
    when measured points are given.
    """
    return _fit_method("VA-LS", source, termset, n_range, a_values, regions=regions, n_dat=n_dat, integer=integer)


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
    rec = _Recorder(source)
    s = rec.samples(*_points([p[0] for p in pts], [np.nan if p[1] is None else p[1] for p in pts]))
    return s, rec.runs, rec.seconds


def _trial(method: str, src, termset: TermSet, n_range, a_values, check: Samples, tol: float, ape_tol: float,
           **opts) -> Trial:
    """Fit one method and score it on the check points; a method that cannot be applied is recorded, not raised."""
    runs0, secs0 = _cost(src)
    try:
        model = _fit_method(method, src, termset, n_range, a_values, **opts)
    except (ValueError, np.linalg.LinAlgError) as err:
        runs, secs = _cost(src)
        return Trial(method, None, 0, runs - runs0, secs - secs0, error=str(err))
    phi, ape = phi_err(model, check.n, check.a, check.t), median_ape(model, check.n, check.a, check.t)
    runs, secs = _cost(src)
    bad = first_nonpositive(model, *n_range, a_values)
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
    src = _source(measure)
    opts = {"regions": regions, "n_inc": n_inc, "n_dat": n_dat, "integer": integer}
    trials: list[Trial] = []
    for method in methods:
        trials.append(_trial(method, src, termset, n_range, a_values, check, tol,
                             tol if ape_tol is None else ape_tol, **opts))
        if trials[-1].accepted:
            return Remodel(trials[-1].model, True, tuple(trials), check, check_runs, check_secs)
    fitted = [t for t in trials if t.model is not None]
    if not fitted:
        raise ValueError("no method could be applied: " + "; ".join(f"{t.method}: {t.error}" for t in trials))
    best = min(fitted, key=lambda t: (abs(t.phi_err), t.ape))
    return Remodel(best.model, False, tuple(trials), check, check_runs, check_secs)


# ----------------------------------------------------------------------------- AICc selection

def aicc(rss_rel: float, n_obs: int, n_coef: int) -> float:
    """``n ln(RSS/n) + 2K + 2K(K+1)/(n-K-1)`` with K = coefficients + 1 (the variance);
    docs/models.md#fitted.aicc."""
    k = n_coef + 1
    if n_obs - k - 1 <= 0:
        raise ValueError(f"AICc needs n_obs - K - 1 > 0: {n_obs} points, K = {k}")
    return n_obs * math.log(max(rss_rel / n_obs, _RSS_FLOOR)) + 2 * k + 2 * k * (k + 1) / (n_obs - k - 1)


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Candidate:
    """One fitted candidate term set: AICc, difference to the best, Akaike weight, relative sigma, coefficients."""

    termset: TermSet
    aicc: float
    delta: float
    weight: float
    sigma: float
    coefficients: np.ndarray


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Selection:
    """AICc model selection result (docs/models.md#fitted.aicc): ranked candidates, term importances
    and the best model."""

    ranked: tuple[Candidate, ...]
    importances: dict[str, float]
    best: FittedModel
    skipped: tuple[TermSet, ...] = ()

    @property
    def sigma(self) -> float:
        """Relative residual standard deviation of the best model (its relative error,
        docs/models.md#fitted.aicc)."""
        return self.ranked[0].sigma

    @property
    def weights(self) -> np.ndarray:
        """Akaike weights in ranking order (they sum to 1)."""
        return np.array([c.weight for c in self.ranked])

    def best_by_dimension(self) -> dict[int, Candidate]:
        """Lowest-AICc candidate for each number of terms (TIA's report to judge the chosen one)."""
        out: dict[int, Candidate] = {}
        for c in self.ranked:
            out.setdefault(len(c.termset), c)
        return dict(sorted(out.items()))


def _score(termset: TermSet, s: Samples) -> Candidate | None:
    """Fit one candidate; None if the data cannot support it (too few points for AICc, rank-deficient)."""
    d = len(termset)
    if len(s) - (d + 1) - 1 <= 0:
        return None
    c, rss, rank = _lstsq_rel(termset.design(s.n, s.a), s.t)
    if rank < d:
        return None
    return Candidate(termset, aicc(rss, len(s), d), 0.0, 0.0, math.sqrt(rss / (len(s) - d)), c)


def select_terms(n, a, t, candidates: TermSet | Sequence[TermSet], *, max_sets: int = 256,
                 required: Iterable[Term] | None = None) -> Selection:
    """Fit every candidate term set by relative least squares and rank them by AICc
    (docs/models.md#fitted.aicc).

    ``candidates`` is a list of term sets, or one full ``TermSet`` whose ``candidates(max_sets,
    required)`` are used. Sets with ``n_obs - K - 1 <= 0`` or whose terms the points cannot
    separate are skipped (listed in ``skipped``). Importance of a term = sum of the Akaike weights
    of the sets that contain it.
    """
    s = Samples(n, a, t)
    sets = candidates.candidates(max_sets, required) if isinstance(candidates, TermSet) else list(candidates)
    if not sets:
        raise ValueError("no candidate term sets")
    scored = [(ts, _score(ts, s)) for ts in sets]
    fitted = sorted((c for _, c in scored if c is not None), key=lambda c: c.aicc)
    if not fitted:
        raise ValueError(f"{len(s)} points support none of the {len(sets)} candidate sets: "
                         "AICc needs more points than coefficients + 2")
    delta = np.array([c.aicc for c in fitted]) - fitted[0].aicc
    w = np.exp(-delta / 2)
    w /= w.sum()
    ranked = tuple(Candidate(c.termset, c.aicc, float(dl), float(wi), c.sigma, c.coefficients)
                   for c, dl, wi in zip(fitted, delta, w, strict=True))
    skipped = tuple(ts for ts, c in scored if c is None)
    return Selection(ranked, _importances(ranked), _best_model(ranked[0], s), skipped)


def _importances(ranked: Sequence[Candidate]) -> dict[str, float]:
    """Sum of Akaike weights of the sets containing each term, most important first."""
    imp: dict[str, float] = {}
    for c in ranked:
        for name in c.termset.names:
            imp[name] = imp.get(name, 0.0) + c.weight
    return dict(sorted(imp.items(), key=lambda kv: -kv[1]))


def _best_model(c: Candidate, s: Samples) -> FittedModel:
    """The winning candidate as a single-region FittedModel over the data's size range."""
    edges = np.array([s.n.min(), s.n.max()])
    return FittedModel(c.termset, "FI-LS", edges, c.coefficients[None, :], s, c.sigma)


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
    c, rss, rank = _lstsq_rel(x, t)
    if rank < x.shape[1]:
        raise ValueError(f"{what}: the points determine only {rank} of {x.shape[1]} coefficients "
                         "(need more distinct sizes or levels)")
    return c, rss
