"""Remodelled distributed plans (001 §4.3.4, eq. 4.15): per plan series, the measured time as
``T(n, p) = sum a_ij n^i p^j`` (i in 0..3, j in -1..1), its terms chosen by AICc, fitted to the
phase calibration's runs, so one model covers the orders and process counts between those timed.

A series is one algorithm on one grid shape (1 x p, p x 1 or r x c), block, recursion level,
thread count and library. Its model is kept only where it predicts the runs of each order left
out of its fit better than the analytical model with the phase factors does, and within
``PLAN_FIT_MAX_APE`` (docs/models.md#fitted.plans); elsewhere the factors stay.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from autotune.core.assumptions import PLAN_FIT_MAX_APE

from .fit_select import select_terms
from .fit_terms import TermSet
from .fitted import EXTRAPOLATION

TERMS = TermSet.polynomial(range(4), (-1, 0, 1), "p")     # eq. 4.15's twelve terms
MAX_SETS = 128        # candidate term sets per AICc selection (subsets of up to two terms, and the nested ones)
MIN_ORDERS = 3        # orders a series needs: each is left out once, the rest must still fit


@dataclass(frozen=True)
class SeriesKey:
    """What a T(n, p) model is fitted per: everything of a plan but its process count."""

    family: str
    algorithm: str
    grid: str             # "1xp", "px1" or "rxc"
    b: int
    level: int
    threads: int
    backend: str
    weighted: bool

    @classmethod
    def of(cls, family: str, plan) -> SeriesKey:
        """The series of ``plan`` (a ``plans.Plan``)."""
        grid = "1xp" if plan.r == 1 else "px1" if plan.c == 1 else "rxc"
        return cls(family, plan.algorithm, grid, int(plan.b), int(plan.level), int(plan.threads),
                   plan.backend, plan.weights is not None)

    def __str__(self) -> str:
        extra = (f" b={self.b}" if self.b else "") + (f" level={self.level}" if self.level else "")
        return (f"{self.family} {self.algorithm} {self.grid}{extra} [{self.backend}, {self.threads}t"
                f"{', weighted' if self.weighted else ''}]")


@dataclass(frozen=True)
class PlanFit:
    """One series' fitted T(n, p) with its evidence: the orders and process counts it was fitted
    on, and the median APE (%) on each order's runs left out, of this model and of the phase-factor
    model on the same runs."""

    series: SeriesKey
    terms: tuple[tuple[int, int], ...]
    coefficients: tuple[float, ...]
    sizes: tuple[int, ...]
    procs: tuple[int, ...]
    points: int
    ape_fit: float
    ape_factor: float

    @property
    def in_use(self) -> bool:
        """Whether it replaces the factor model: better on the runs it was not fitted to, and
        within ``PLAN_FIT_MAX_APE`` of them."""
        return self.ape_fit < self.ape_factor and self.ape_fit <= PLAN_FIT_MAX_APE

    def predict(self, n, p) -> np.ndarray:
        """Seconds at the broadcast (n, p) points (served only between the process counts fitted:
        ``PlanModels.seconds``)."""
        return TermSet(self.terms, "p").design(n, p) @ np.asarray(self.coefficients)

    @property
    def formula(self) -> str:
        """``3.1e-10 n^3 p^-1 + 2.2e-03`` (coefficients in seconds)."""
        ts = TermSet(self.terms, "p")
        return " + ".join(f"{c:.3g}" + ("" if ts.name(t) == "1" else f" {ts.name(t)}")
                          for t, c in zip(ts.terms, self.coefficients, strict=True))

    def record(self) -> dict:
        """A plain record to store (``from_record`` reads it back)."""
        return {"series": vars(self.series), "terms": [list(t) for t in self.terms],
                "coefficients": list(self.coefficients), "sizes": list(self.sizes), "procs": list(self.procs),
                "points": self.points, "ape_fit": self.ape_fit, "ape_factor": self.ape_factor}

    @classmethod
    def from_record(cls, rec: dict) -> PlanFit:
        return cls(SeriesKey(**rec["series"]), tuple(tuple(t) for t in rec["terms"]), tuple(rec["coefficients"]),
                   tuple(rec["sizes"]), tuple(rec["procs"]), int(rec["points"]), float(rec["ape_fit"]),
                   float(rec["ape_factor"]))


@dataclass(frozen=True)
class Run:
    """One timed run of a plan: its series, order, process count, measured seconds and the phase-factor
    model's prediction of it."""

    series: SeriesKey
    n: int
    p: int
    seconds: float
    factor_model: float


def _fit(runs: list[Run]) -> tuple[TermSet, np.ndarray] | None:
    """(terms, coefficients) of AICc's best eq. 4.15 model of ``runs`` whose flops term (``n^3
    p^-1``, kept in every candidate so the model grows as the work does past the orders fitted) has
    a positive coefficient; None where the runs support none. Runs at one process count fit the
    terms in n alone: they cannot tell p's powers apart."""
    n, p, t = (np.array([getattr(r, f) for r in runs], dtype=float) for f in ("n", "p", "seconds"))
    several = len(set(p)) > 1
    terms, flops = (TERMS, (3, -1)) if several else (TermSet.polynomial(range(4), (0,), "p"), (3, 0))
    try:
        ranked = select_terms(n, p, t, terms, max_sets=MAX_SETS, required=[flops]).ranked
    except ValueError:
        return None
    return next(((c.termset, c.coefficients) for c in ranked
                 if c.coefficients[c.termset.terms.index(flops)] > 0), None)


def _held_out_ape(runs: list[Run]) -> float | None:
    """Median APE (%) of the runs of each order predicted by a fit on the other orders; None where
    some order's complement supports no fit."""
    errs = []
    for n in sorted({r.n for r in runs}):
        model = _fit([r for r in runs if r.n != n])
        if model is None:
            return None
        out = [r for r in runs if r.n == n]
        pred = model[0].design([r.n for r in out], [r.p for r in out]) @ model[1]
        errs += [abs(q / r.seconds - 1.0) for q, r in zip(pred, out, strict=True)]
    return float(np.median(errs) * 100)


def fit_plan_models(runs: Iterable[Run]) -> list[PlanFit]:
    """One T(n, p) per series timed at ``MIN_ORDERS`` orders or more whose runs support an AICc fit
    with each order left out; each with its held-out APE beside the factor model's on the same runs."""
    by_series: dict[SeriesKey, list[Run]] = defaultdict(list)
    for r in runs:
        if r.seconds > 0 and r.factor_model > 0:
            by_series[r.series].append(r)
    out = []
    for key, rs in sorted(by_series.items(), key=lambda kv: str(kv[0])):
        if len({r.n for r in rs}) < MIN_ORDERS:
            continue
        ape, model = _held_out_ape(rs), _fit(rs)
        if ape is None or model is None:
            continue
        factor_ape = float(np.median([abs(r.factor_model / r.seconds - 1.0) for r in rs]) * 100)
        out.append(PlanFit(key, model[0].terms, tuple(model[1].tolist()),
                           tuple(sorted({r.n for r in rs})), tuple(sorted({r.p for r in rs})), len(rs),
                           ape, factor_ape))
    return out


class PlanFits:
    """Lookup of the fitted T(n, p) in use by series; none: the factor model everywhere."""

    def __init__(self, fits: Iterable[PlanFit] = ()):
        self.fits = list(fits)
        self._in_use = {f.series: f for f in self.fits if f.in_use}

    def __bool__(self) -> bool:
        return bool(self._in_use)

    def get(self, family: str, plan) -> PlanFit | None:
        """The model in use for ``plan``'s series, None where the phase factors stay."""
        return self._in_use.get(SeriesKey.of(family, plan)) if self._in_use else None

    def seconds(self, family: str, plan, n: int) -> tuple[float, PlanFit] | None:
        """(predicted seconds, its model) of ``plan`` at order ``n``; None without a model in use,
        outside the process counts and orders it was fitted on (orders widened upwards by
        ``EXTRAPOLATION``, as the one-process fits), or where it is not positive."""
        fit = self.get(family, plan)
        if (fit is None or not min(fit.procs) <= plan.p <= max(fit.procs)
                or not min(fit.sizes) <= n <= max(fit.sizes) * EXTRAPOLATION):
            return None
        t = float(fit.predict(n, plan.p)[0])
        return (t, fit) if t > 0 else None


__all__ = ["MIN_ORDERS", "TERMS", "PlanFit", "PlanFits", "Run", "SeriesKey", "fit_plan_models"]
