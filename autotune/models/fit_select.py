"""AICc model selection among term sets, with Akaike weights and term importances
(docs/models.md#fitted.aicc)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .fit_terms import RSS_FLOOR, FittedModel, Samples, Term, TermSet, lstsq_rel

# ----------------------------------------------------------------------------- AICc selection

def aicc(rss_rel: float, n_obs: int, n_coef: int) -> float:
    """``n ln(RSS/n) + 2K + 2K(K+1)/(n-K-1)`` with K = coefficients + 1 (the variance);
    docs/models.md#fitted.aicc."""
    k = n_coef + 1
    if n_obs - k - 1 <= 0:
        raise ValueError(f"AICc needs n_obs - K - 1 > 0: {n_obs} points, K = {k}")
    return n_obs * math.log(max(rss_rel / n_obs, RSS_FLOOR)) + 2 * k + 2 * k * (k + 1) / (n_obs - k - 1)


@dataclass(frozen=True, eq=False)  # holds arrays: identity equality
class TermCandidate:
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

    ranked: tuple[TermCandidate, ...]
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

    def best_by_dimension(self) -> dict[int, TermCandidate]:
        """Lowest-AICc candidate for each number of terms (TIA's report to judge the chosen one)."""
        out: dict[int, TermCandidate] = {}
        for c in self.ranked:
            out.setdefault(len(c.termset), c)
        return dict(sorted(out.items()))


def _score(termset: TermSet, s: Samples) -> TermCandidate | None:
    """Fit one candidate; None if the data cannot support it (too few points for AICc, rank-deficient)."""
    d = len(termset)
    if len(s) - (d + 1) - 1 <= 0:
        return None
    c, rss, rank = lstsq_rel(termset.design(s.n, s.a), s.t)
    if rank < d:
        return None
    return TermCandidate(termset, aicc(rss, len(s), d), 0.0, 0.0, math.sqrt(rss / (len(s) - d)), c)


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
    ranked = tuple(TermCandidate(c.termset, c.aicc, float(dl), float(wi), c.sigma, c.coefficients)
                   for c, dl, wi in zip(fitted, delta, w, strict=True))
    skipped = tuple(ts for ts, c in scored if c is None)
    return Selection(ranked, _importances(ranked), _best_model(ranked[0], s), skipped)


def _importances(ranked: Sequence[TermCandidate]) -> dict[str, float]:
    """Sum of Akaike weights of the sets containing each term, most important first."""
    imp: dict[str, float] = {}
    for c in ranked:
        for name in c.termset.names:
            imp[name] = imp.get(name, 0.0) + c.weight
    return dict(sorted(imp.items(), key=lambda kv: -kv[1]))


def _best_model(c: TermCandidate, s: Samples) -> FittedModel:
    """The winning candidate as a single-region FittedModel over the data's size range."""
    edges = np.array([s.n.min(), s.n.max()])
    return FittedModel(c.termset, "FI-LS", edges, c.coefficients[None, :], s, c.sigma)
