"""Fitted polynomial models' building blocks: term sets in (n, a), measured samples, the relative
least-squares fit and the fitted model (docs/models.md#fitted.polynomial)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

Term = tuple[int, int]
Measure = Callable[[float, "float | None"], float]
METHODS = ("FI-ME", "VA-ME", "FI-LS", "VA-LS")
# Relative residual variances below (1e-10)^2 are round-off: flooring them makes exact fits tie
# in AICc, so the parameter penalty (not round-off noise) decides among them.
RSS_FLOOR = 1e-20



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
        n, a = as_points(n, a)
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


def as_points(n, a=None) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast (n, a) to flat float arrays; a missing parameter is NaN."""
    a = np.nan if a is None else a
    n, a = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(a, dtype=float))
    return n.ravel(), a.ravel()


# ----------------------------------------------------------------------------- measured points

@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class Samples:
    """Measured points: sizes ``n``, parameter values ``a`` (NaN: none) and positive times ``t`` in seconds
    (each stored as a flat float array; ``a`` may be given as None, no parameter)."""

    n: np.ndarray
    a: np.ndarray
    t: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.t, dtype=float).ravel()
        n, a = as_points(self.n, self.a)
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


class MeasureRecorder:
    """Runs ``measure`` once per distinct point, validates the time, and counts runs and seconds."""

    def __init__(self, measure: Measure) -> None:
        self.measure, self.runs, self.seconds = measure, 0, 0.0
        self.cache: dict[tuple[float, float | None], float] = {}

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


def as_source(source) -> Samples | MeasureRecorder:
    """Measured points as ``Samples``, or ``measure`` wrapped in a ``MeasureRecorder`` (kept if already one)."""
    if isinstance(source, Samples | MeasureRecorder):
        return source
    return MeasureRecorder(source) if callable(source) else _as_samples(source)


def measure_cost(src) -> tuple[int, float]:
    """Runs and seconds measured so far through ``src`` (zero for given points)."""
    return (src.runs, src.seconds) if isinstance(src, MeasureRecorder) else (0, 0.0)


# ----------------------------------------------------------------------------- least squares

def lstsq_rel(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Minimise ``sum ((t - x c) / t)^2`` on the column-scaled system; returns c, relative RSS and rank."""
    xw = x / t[:, None]
    scale = np.abs(xw).max(axis=0)
    scale[scale == 0] = 1.0
    z, _, rank, _ = np.linalg.lstsq(xw / scale, np.ones_like(t), rcond=None)
    c = z / scale
    return c, float(np.sum((1.0 - xw @ c) ** 2)), int(rank)


def fit_points(termset: TermSet, s: Samples) -> tuple[np.ndarray, float]:
    """Relative-weighted coefficients of ``termset`` on the points ``s``; ValueError if they do not determine them."""
    d = len(termset)
    if len(s) < d:
        raise ValueError(f"{len(s)} points for {d} coefficients ({', '.join(termset.names)}): need at least {d}")
    c, rss, rank = lstsq_rel(termset.design(s.n, s.a), s.t)
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
        flat_n, flat_a = as_points(n, a)
        rows = self.coefficients[self.region_of(flat_n)]
        return np.einsum("ij,ij->i", self.termset.design(flat_n, flat_a), rows).reshape(shape)

    def coef_dict(self, region: int = 0) -> dict[str, float]:
        """Coefficients of one region by term name."""
        return dict(zip(self.names, self.coefficients[region].tolist(), strict=True))

    def __str__(self) -> str:
        parts = [" + ".join(f"{c:.4g}*{nm}" for nm, c in self.coef_dict(k).items()) + f"  on [{lo:g}, {hi:g}]"
                 for k, (lo, hi) in enumerate(self.regions)]
        return f"{self.method}: " + "; ".join(parts)


def assemble(termset: TermSet, method: str, edges: np.ndarray, fits: list[tuple[np.ndarray, float]],
              parts: list[Samples]) -> FittedModel:
    """A FittedModel from per-region coefficient fits and the points each used."""
    points = Samples.concat(parts)
    dof = len(points) - len(fits) * len(termset)
    sigma = math.sqrt(sum(rss for _, rss in fits) / dof) if dof > 0 else math.nan
    return FittedModel(termset, method, edges, np.array([c for c, _ in fits]), points, sigma)
