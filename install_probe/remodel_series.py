"""Remodelling step of the validation (``install_probe.validate``): fit the series the analytical
model gets wrong, from their fitting sizes, and score each fit against it on the check points.

A flagged series gets a polynomial in ``n`` (terms by AICc, coefficients by the FI-ME..VA-LS
cascade; a Strassen series also eq. 4.10's form). A blocked series (every block of one algorithm,
library, thread count and variant) with a flagged member also gets one polynomial in ``n`` and the
block ``b`` (001 §4.3, eq. 4.15), fitted at every other block and checked at all of them; it serves
each block where it beats both that block's analytical model and its own fit. A fit is in use where
it is better than the analytical model on its check points (``_scores``). ``series`` map candidates
to their check points (``validate.Point``); ``spec`` and ``timer`` are the validation's.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from autotune.core.plans import ALGORITHMS, Candidate
from autotune.db.lookup import SystemParameters
from autotune.models.fit_select import select_terms
from autotune.models.fit_terms import METHODS, Samples, TermSet
from autotune.models.fitted import ANY_PARAM, EXTRAPOLATION, FittedEntry, eq410_terms
from autotune.models.fitting import first_nonpositive, remodel


def _key(cand: Candidate) -> tuple[str, str, int, int, int]:
    return (cand.algorithm, cand.backend, cand.threads, cand.param, cand.variant)


# Terms of a fitted series: powers of n, and for a series over blocks powers of b (001 eq. 4.15).
N_DEGREES = range(4)
B_DEGREES = (-1, 0, 1)


def fit_series(family: str, cand: Candidate, check: Samples, analytical: np.ndarray, fit: Samples, tol: float,
               reason: str, methods: Sequence[str] = METHODS) -> FittedEntry:
    """Fit a polynomial in n, or in (n, b) when the points carry blocks (``cand.param`` is then
    ANY_PARAM), to ``fit`` (terms by AICc, coefficients by the remodel cascade); score both models
    on ``check``."""
    blocks = None if np.isnan(fit.a).all() else np.unique(np.concatenate([fit.a, check.a]))
    full = TermSet.polynomial(N_DEGREES, (0,) if blocks is None else B_DEGREES, "b")
    a = None if blocks is None else fit.a
    try:
        selection = select_terms(fit.n, a, fit.t, full)
        termset, sigma, akaike = selection.best.termset, selection.best.sigma, _akaike_json(selection)
    except ValueError:                       # too few points for AICc: the leading term alone
        termset, sigma, akaike = full.subset([full.leading]), float("nan"), "{}"
    n_range = (float(fit.n.min()), float(fit.n.max()))
    model = remodel(fit, n_range, None if a is None else np.unique(a), termset, check, tol, methods=methods).model
    bad = first_nonpositive(model, n_range[0], n_range[1] * EXTRAPOLATION, blocks)   # where it is used
    predicted = np.asarray(model.predict(check.n, None if a is None else check.a), dtype=float)
    scores = _scores(predicted, check, analytical, tol, reason, bad)
    over = {} if a is None else {"fit_a": fit.a, "check_a": check.a}
    return FittedEntry.from_model(family, _key(cand), model, **scores, check_n=check.n, check_t=check.t,
                                  check_analytical=analytical, fit_n=fit.n, fit_t=fit.t, sigma=float(sigma),
                                  akaike=akaike, **over)


def fit_strassen_series(cand: Candidate, check: Samples, analytical: np.ndarray, fit: Samples,
                        parts: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], tol: float,
                        reason: str) -> FittedEntry:
    """docs/models.md#fitted.strassen for one Strassen series: ``M leaves + A additions``, the
    analytical model's two terms (``parts(n)``, square n) with M, A >= 0 by relative least squares
    on ``fit``; scored as ``fit_series``. The terms carry the probe's k at each leaf and quadrant
    size, which a polynomial in n cannot follow (leaf sizes cross cache and kernel thresholds)."""
    from scipy.optimize import nnls

    leaves, adds = parts(fit.n)
    (m_l, a_l), _ = nnls(np.column_stack([leaves, adds]) / fit.t[:, None], np.ones(fit.n.size))
    c_leaves, c_adds = parts(check.n)
    scores = _scores(m_l * c_leaves + a_l * c_adds, check, analytical, tol, reason, None)  # terms > 0, M, A >= 0
    rel = (m_l * leaves + a_l * adds) / fit.t - 1
    return FittedEntry("gemm", cand.algorithm, cand.backend, cand.threads, cand.param, cand.variant,
                       ((1, 0), (0, 1)), np.array([[m_l, a_l]]), np.array([fit.n.min(), fit.n.max()]),
                       "eq4.10-LS", **scores, check_n=check.n, check_t=check.t, check_analytical=analytical,
                       fit_n=fit.n, fit_t=fit.t, sigma=float(np.sqrt(np.mean(rel ** 2))), form="eq4.10")


# A fitted model whose worst check point is off by more than this (and more than the analytical
# model's worst) is wild somewhere, however good its median: not used.
WILD_PERCENT = 10.0


def _scores(fitted: np.ndarray, check: Samples, analytical: np.ndarray, tol: float, reason: str,
            bad: float | None) -> dict:
    """Both models' errors on the check points and the in-use verdict: in use only where the fitted
    model is better in the median, not wild at its worst check point (WILD_PERCENT), and a time
    (positive) over every size the selector may ask it for (``bad``: a size where it is not, or None)."""
    f_err = np.abs(fitted - check.t) / check.t * 100
    a_err = np.abs(analytical - check.t) / check.t * 100
    f_ape, a_ape = float(np.median(f_err)), float(np.median(a_err))
    in_use = bool(f_ape < a_ape and f_err.max() <= max(a_err.max(), WILD_PERCENT, tol) and bad is None)
    why = (f"{reason}; fitted APE {f_ape:.1f}% (worst {f_err.max():.0f}%) vs analytical {a_ape:.1f}% "
           f"(worst {a_err.max():.0f}%): " + ("in use" if in_use else
                                             f"not used, non-positive at n = {bad:.0f}" if bad is not None
                                             else "not used"))
    return {"fitted_ape": f_ape, "fitted_phi": float((1 - fitted.sum() / check.t.sum()) * 100),
            "analytical_ape": a_ape, "analytical_phi": float((1 - analytical.sum() / check.t.sum()) * 100),
            "reason": why, "in_use": in_use}


def _akaike_json(selection, top: int = 8) -> str:
    """The AICc evidence kept with a fitted entry: the best sets' Akaike weights, term importances."""
    sets = [[list(c.termset.names), round(float(c.weight), 6)] for c in selection.ranked[:top]]
    return json.dumps({"sets": sets, "importances": {k: round(float(v), 6) for k, v in selection.importances.items()}})


def _fit_sizes(pts: list, spec) -> list[int]:
    """Fitting sizes of a series: the spec's, minus any of its check sizes, and for a blocked
    series those above its block (where the selector offers it)."""
    cand, checked = pts[0].cand, {p.n for p in pts}
    low = cand.param if ALGORITHMS[cand.algorithm][1] == "block" else 0
    return [n for n in spec.fit.get(pts[0].family, ()) if n not in checked and n > low]


# Fewest blocks a series over blocks is checked at (one per power of b).
MIN_BLOCKS = len(B_DEGREES)


def _over_blocks(series: dict[Candidate, list], flagged: dict[Candidate, str],
                 spec) -> dict[Candidate, list[Candidate]]:
    """Blocked series with a flagged member, checked at MIN_BLOCKS blocks or more: the series (its
    candidate at ANY_PARAM) -> its members, by block."""
    if not spec.over_blocks:
        return {}
    groups: dict[Candidate, list[Candidate]] = defaultdict(list)
    for cand in series:
        if ALGORITHMS[cand.algorithm][1] == "block":
            groups[replace(cand, param=ANY_PARAM)].append(cand)
    return {g: sorted(m, key=lambda c: c.param) for g, m in groups.items()
            if len(m) >= MIN_BLOCKS and any(c in flagged for c in m)}


def fit_blocks(members: Sequence[Candidate]) -> list[Candidate]:
    """The members a series over blocks is fitted at: with more than MIN_BLOCKS, every other
    block from the smallest and the largest (the others are only checked: blocks the model has
    not seen); else all of them (each power of b needs its block)."""
    if len(members) <= MIN_BLOCKS:
        return list(members)
    return list(dict.fromkeys([*members[::2], members[-1]]))


def remodel_all(series: dict[Candidate, list], why: dict[Candidate, str], spec, tol: float,
                 timer, sp: SystemParameters) -> dict[Candidate, FittedEntry]:
    """Fit the flagged (``why``) series one by one, then each blocked series with a flagged member
    over its blocks: its T(n, b) serves a member where it beats that member's analytical model and
    own fit on the member's check points (the better kept per block). The fitting sizes are timed
    in one batch (pools settle once per group)."""
    groups = _over_blocks(series, why, spec)
    _time_fits(timer, series, list(dict.fromkeys([*why, *(c for m in groups.values() for c in fit_blocks(m))])),
               spec)
    out: dict[Candidate, FittedEntry] = {}
    for cand in why:
        entry = _remodel(cand, series[cand], why[cand], spec, tol, timer, sp)
        if entry is not None:
            out[cand] = entry
    for group, members in groups.items():
        over = _remodel_blocks(group, members, why, spec, tol, timer, series)
        if over is None:
            continue
        served = {m: e for m in members if (e := _serve(over, m, series[m], out.get(m), tol)) is not None}
        out.update(served)
        blocks = ", ".join(str(m.param) for m in served) or "none"
        out[group] = replace(over, in_use=False, reason=f"{over.reason}; serves blocks {blocks}")
    return out


def _serve(over: FittedEntry, member: Candidate, pts: list, own: FittedEntry | None,
           tol: float) -> FittedEntry | None:
    """The series' T(n, b) at ``member``'s block as its entry, if in use there (better than the
    analytical model on its check points, not wild, positive) and better than its own fit."""
    check, analytical = _checks(pts)
    b = np.full(check.n.size, float(member.param))
    bad = first_nonpositive(over, float(over.fit_n.min()), float(over.fit_n.max()) * EXTRAPOLATION, [member.param])
    scores = _scores(over.predict(check.n, b), check, analytical, tol, f"{over.reason}, at b = {member.param}", bad)
    if not scores["in_use"] or (own is not None and own.in_use and own.fitted_ape <= scores["fitted_ape"]):
        return None
    return over.at(member.param, **scores, check_n=check.n, check_t=check.t, check_analytical=analytical)


def _checks(pts: list, blocks: bool = False) -> tuple[Samples, np.ndarray]:
    """A series' check points as samples (with each point's block when ``blocks``) and the
    analytical model's predictions there."""
    a = np.array([p.cand.param for p in pts], float) if blocks else None
    return (Samples(np.array([p.n for p in pts], float), a, np.array([p.measured for p in pts])),
            np.array([p.predicted for p in pts]))


def _time_fits(timer, series: dict[Candidate, list], cands: Sequence[Candidate], spec) -> None:
    """Time the fitting sizes of ``cands`` in one batch."""
    timer.many([(series[c][0].family, n, c) for c in cands for n in _fit_sizes(series[c], spec)])


def _remodel_blocks(group: Candidate, members: list[Candidate], why: dict[Candidate, str], spec, tol: float,
                    timer, series: dict[Candidate, list]) -> FittedEntry | None:
    """One T(n, b) for a blocked series: fitted on its fitting sizes at ``fit_blocks``, checked at
    every member's check points; None if it cannot be fitted."""
    family = series[members[0]][0].family
    fit = [(n, c.param, timer(family, n, c)) for c in fit_blocks(members) for n in _fit_sizes(series[c], spec)]
    fit = [x for x in fit if math.isfinite(x[2])]
    pts = [p for c in members for p in series[c]]
    if len(fit) < 2:
        return None
    reason = next(why[c] for c in members if c in why)
    check, analytical = _checks(pts, blocks=True)
    try:
        return fit_series(family, group, check, analytical,
                          Samples(*(np.array(x, float) for x in zip(*fit, strict=True))), tol,
                          f"{reason} (one model over blocks {', '.join(str(c.param) for c in members)})",
                          spec.methods)
    except ValueError:
        return None


def _remodel(cand: Candidate, pts: list, why: str, spec, tol: float, timer,
             sp: SystemParameters) -> FittedEntry | None:
    """Fit one series on its (already timed) fitting sizes; None if it cannot be fitted. A Strassen
    series also gets the form of docs/models.md#fitted.strassen; the better of the two on the check
    points is kept."""
    family = pts[0].family
    timed = {n: timer(family, n, cand) for n in _fit_sizes(pts, spec)}
    sizes = [n for n, t in timed.items() if math.isfinite(t)]
    if len(sizes) < 2:
        return None
    fit = Samples(np.array(sizes, float), None, np.array([timed[n] for n in sizes]))
    check, analytical = _checks(pts)
    tried = []
    try:
        tried.append(fit_series(family, cand, check, analytical, fit, tol, why, spec.methods))
    except ValueError:
        pass
    if cand.algorithm == "strassen":
        tried.append(fit_strassen_series(cand, check, analytical, fit, _strassen_parts(cand, sp), tol, why))
    return min(tried, key=lambda e: (not e.in_use, e.fitted_ape), default=None)


def _strassen_parts(cand: Candidate, sp: SystemParameters) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``parts(n)``: the two terms of docs/models.md#fitted.strassen for this Strassen candidate at
    square sizes n, as the runtime has them."""
    def parts(ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        terms = np.array([eq410_terms(cand.backend, cand.threads, cand.param, (n, n, n), sp) for n in ns])
        return terms[:, 0], terms[:, 1]
    return parts


__all__ = ["ANY_PARAM", "fit_blocks", "fit_series", "fit_strassen_series", "remodel_all"]
