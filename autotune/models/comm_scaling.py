"""Communication models in (p, m): per primitive and message-size regime, ts(p) and tw(p) of a
form chosen by AICc across the process counts the probe measured, so that a p it did not measure
is predicted instead of given the nearest measured p's curve (docs/models.md, "Models in (p, m)").

Regimes are shared by all the primitive's curves: one segmentation of every measured p at once
(each curve its own line per regime, the cuts common, charged as ``comm_fit.fit_hockney`` charges
them). In each regime T(p, m) = ts_a + ts_b F(p) + (tw_a + tw_b G(p)) (m - m0), with F and G
each one of FORMS (shifted to 0 at p = 2, so ts_a and tw_a are the costs there), every
coefficient >= 0 (a collective does not get cheaper with more processes; m0, the last size below
the regime, keeps T positive from there up, so a later regime's "ts" is its time at m0, whose form
mixes ts's and tw's), fitted by relative least squares on the measured
points; of the 16 (F, G) pairs the lowest AICc wins, as the source chooses its broadcast models.
For the grid broadcasts "p" is a broadcast's members (c for a row, r for a column). The held-out
error leaves each measured p but the two smallest out in turn and predicts it from the others.

Pure numpy (scipy's nnls for the fits); nothing here imports mpi4py.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np

from autotune.db import comm as dbc
from autotune.db.comm_pmodel import FORM_TEXT, FORMS, PMODEL_DTYPE, PModel, form_values

from . import comm_fit

SKIP = dbc.PAIR_PRIMITIVES + dbc.LINK_PRIMITIVES     # one pair of ranks: no p to model


def aicc(rss: float, n: int, k: int) -> float:
    """Corrected Akaike criterion n ln(RSS/n) + 2k + 2k(k+1)/(n-k-1); inf where n <= k + 1."""
    if n - k - 1 <= 0:
        return math.inf
    rss = max(float(rss), n * 1e-14)
    return n * math.log(rss / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def members(primitive: str, p, r, c) -> np.ndarray:
    """The model's p of measured curves: the broadcast's members for the grid ones, else p."""
    if primitive == "bcast_row":
        return np.asarray(c, dtype=int)
    if primitive == "bcast_col":
        return np.asarray(r, dtype=int)
    return np.asarray(p, dtype=int)


# -- fitting ------------------------------------------------------------------------------------

def _nnls(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares with the columns scaled to 1 (the fits mix seconds and bytes)."""
    from scipy.optimize import nnls

    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    coef, norm = nnls(X / scale, y)
    return coef / scale, float(norm) ** 2


def fit_forms(p, m, t, m0: float = 0.0, forms=FORMS) -> tuple[str, str, np.ndarray, float]:
    """(ts form, tw form, [ts_a, ts_b, tw_a, tw_b], AICc) of the pair of ``forms`` with the lowest
    AICc for T(p, m) = ts(p) + tw(p) (m - m0) on these points, relative least squares, coefficients >= 0."""
    p, m, t = (np.asarray(v, dtype=float) for v in (p, m, t))
    n, dm = len(t), m - m0
    best: tuple[tuple[float, int, int, int], str, str, np.ndarray, float] | None = None
    for fi, ts_form in enumerate(forms):
        for gi, tw_form in enumerate(forms):
            cols = [np.ones(n), form_values(ts_form, p), dm, form_values(tw_form, p) * dm]
            used = [0, 1, 2, 3] if ts_form != "const" else [0, 2, 3]
            used = [j for j in used if j != 3 or tw_form != "const"]
            X = np.column_stack([cols[j] for j in used]) / t[:, None]
            sol, rss = _nnls(X, np.ones(n))
            coef = np.zeros(4)
            coef[used] = sol
            score = aicc(rss, n, len(used))
            key = (round(score, 6) if math.isfinite(score) else math.inf, len(used), fi, gi)   # ties: simpler
            if best is None or key < best[0]:
                best = (key, ts_form, tw_form, coef, score)
    assert best is not None, "no forms to fit"
    return best[1], best[2], best[3], best[4]


def shared_bounds(curves: list[tuple[np.ndarray, np.ndarray]], max_regimes: int = 8, min_points: int = 3) -> np.ndarray:
    """Interior regime boundaries (bytes) shared by ``curves`` ((sizes, times) each, sizes
    ascending): one segmentation of them all on their common sizes, each curve its own line per
    regime, scored by ``comm_fit``'s mbic with every curve's lines counted."""
    common = reduce(np.intersect1d, [np.asarray(m, dtype=float) for m, _ in curves])
    if len(common) < 2:
        return np.zeros(0)
    min_seg = max(1, min(min_points, len(common)))
    cost = reduce(np.add, [comm_fit.segment_costs(common, np.maximum(np.asarray(t, float)[np.isin(m, common)], 1e-12),
                                                  min_seg) for m, t in curves])
    k_curves, n = len(curves), len(curves) * len(common)

    def mbic(rss: float, k: int) -> float:
        params = 2 * k * k_curves + comm_fit.BREAK_PARAMS * (k - 1) + 1
        return n * math.log(max(rss, n * 1e-14) / n) + params * math.log(n)

    cuts, _, _ = comm_fit.best_cuts(cost, max_regimes, min_seg, mbic)
    return np.array([comm_fit.regime_boundary(common[i - 1], common[i]) for i in cuts], dtype=float)


def _curves_of(m: np.ndarray, t: np.ndarray, keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(sizes, times) of each curve (one per distinct key), sizes ascending."""
    out = []
    for key in np.unique(keys):
        sel = keys == key
        order = np.argsort(m[sel], kind="stable")
        out.append((m[sel][order], t[sel][order]))
    return out


def fit_primitive(primitive: str, pts: np.ndarray, max_regimes: int = 8) -> list[tuple]:
    """PMODEL_DTYPE rows of one primitive from its POINT_DTYPE points (the fitted sizes only);
    [] where fewer than two p were measured."""
    x = members(primitive, pts["p"], pts["r"], pts["c"])
    if len(np.unique(x)) < 2:
        return []
    m, t = pts["nbytes"].astype(float), np.maximum(pts["t_mean"].astype(float), 1e-12)
    keys = pts["p"].astype(np.int64) * 1_000_003 + pts["r"] * 1009 + pts["c"]
    bounds = shared_bounds(_curves_of(m, t, keys), max_regimes)
    edges = [0.0, *bounds.tolist(), math.inf]
    rows = []
    for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        sel = (m >= lo) & (m < hi)
        if not sel.any():
            continue
        below = m[m < lo]
        m0 = float(below.max()) if j and len(below) else 0.0
        ts_form, tw_form, coef, score = fit_forms(x[sel], m[sel], t[sel], m0)
        rows.append((primitive, j, len(edges) - 1, lo, hi, m0, ts_form, coef[0], coef[1], tw_form, coef[2], coef[3],
                     int(sel.sum()), int(x[sel].min()), int(x[sel].max()), len(np.unique(x[sel])),
                     float(m.min()), score))
    return [(*r[:1], i, len(rows), *r[3:]) for i, r in enumerate(rows)]


def _fitted(points: np.ndarray, heldout_sizes=()) -> np.ndarray:
    """The points the fits use: POINT_DTYPE, the size-held-out ones left out."""
    points = dbc.as_points(points)
    return points[~np.isin(points["nbytes"].astype(float), np.asarray(heldout_sizes, dtype=float))]


def fit_models(points: np.ndarray, heldout_sizes=(), max_regimes: int = 8) -> np.ndarray:
    """PMODEL_DTYPE rows for every primitive measured at two p or more (``fit_primitive``)."""
    pts = _fitted(points, heldout_sizes)
    rows = []
    for prim in dbc.PRIMITIVES:
        if prim not in SKIP:
            rows += fit_primitive(prim, pts[pts["primitive"] == prim.encode()], max_regimes)
    return np.array(rows, dtype=PMODEL_DTYPE)


# -- held-out error at the p left out --------------------------------------------------------------

def heldout_errors(points: np.ndarray, heldout_sizes=(), max_regimes: int = 8) -> dict[str, dict]:
    """Per primitive measured at three p or more: leave each measured p but the two smallest out,
    fit the rest (``fit_primitive``), and take the relative error of its prediction at every point
    measured at that p. ``{prim: {"p": [...], "err_med", "err_max", "n", "by_p": [[p, med, max, n], ...]}}``."""
    all_pts = dbc.as_points(points)
    fitted = _fitted(all_pts, heldout_sizes)
    out = {}
    for prim in dbc.PRIMITIVES:
        if prim in SKIP:
            continue
        mine, every = fitted[fitted["primitive"] == prim.encode()], all_pts[all_pts["primitive"] == prim.encode()]
        x, x_all = members(prim, mine["p"], mine["r"], mine["c"]), members(prim, every["p"], every["r"], every["c"])
        ps = np.unique(x)
        if len(ps) < 3:
            continue
        errs, by_p = [], []
        for q in ps[2:]:
            rows = fit_primitive(prim, mine[x != q], max_regimes)
            if not rows:
                continue
            model, at = PModel.from_rows(np.array(rows, dtype=PMODEL_DTYPE)), every[x_all == q]
            t = at["t_mean"].astype(float)
            e = np.abs(model.predict(q, at["nbytes"].astype(float)) - t) / t
            errs.append(e)
            by_p.append([int(q), float(np.median(e)), float(e.max()), int(len(e))])
        if errs:
            e = np.concatenate(errs)
            out[prim] = {"p": [b[0] for b in by_p], "err_med": float(np.median(e)), "err_max": float(e.max()),
                         "n": int(len(e)), "by_p": by_p}
    return out


# -- text -------------------------------------------------------------------------------------------

def _term(a: float, b: float, form: str, scale: float, unit: str) -> str:
    return f"{a * scale:.3g}{unit}" + (f" + {b * scale:.3g}{unit}*{FORM_TEXT[form]}" if form != "const" else "")


def model_lines(rows: np.ndarray) -> list[str]:
    """One line per regime of each stored (p, m) model: ts(p) in us, tw(p) in ns/B (each form shifted
    to 0 at p = 2, so the constant is the cost there)."""
    lines = []
    for r in np.asarray(rows).astype(PMODEL_DTYPE):
        hi = "inf" if not math.isfinite(r["hi"]) else f"{r['hi']:.0f}"
        ts_form, tw_form = r["ts_form"].decode(), r["tw_form"].decode()
        lines.append(f"{r['primitive'].decode():14s} (p, m) regime {r['regime'] + 1}/{r['n_regimes']} "
                     f"[{r['lo']:.0f}, {hi}) B, p {r['p_min']}..{r['p_max']} ({r['n_p']}): "
                     f"T(p, m) = ts + tw (m - {r['m0']:.0f}), ts = {_term(r['ts_a'], r['ts_b'], ts_form, 1e6, ' us')} "
                     f"[{ts_form}], tw = {_term(r['tw_a'], r['tw_b'], tw_form, 1e9, ' ns/B')} [{tw_form}]")
    return lines


def heldout_lines(errors: dict[str, dict], measured: dict[str, list[int]] | None = None) -> list[str]:
    """The held-out error per primitive (median, max, per p left out); with ``measured`` (primitive
    -> its measured p), a line for each primitive that had too few p to hold one out."""
    lines = []
    for prim, e in errors.items():
        each = ", ".join(f"p={p}: {100 * med:.1f}%/{100 * mx:.1f}%" for p, med, mx, _ in e["by_p"])
        flag = "  > 10%" if e["err_med"] > 0.10 else ""
        lines.append(f"{prim:14s} (p, m) held-out p {e['p']}: median {100 * e['err_med']:.1f}%, "
                     f"max {100 * e['err_max']:.1f}% ({e['n']} points; median/max {each}){flag}")
    for prim, ps in (measured or {}).items():
        if prim not in errors:
            why = "one pair of ranks" if prim in SKIP else f"measured at p = {ps}"
            lines.append(f"{prim:14s} (p, m) held-out: none ({why}: no p to leave out)")
    return lines


def measured_p(points: np.ndarray) -> dict[str, list[int]]:
    """Primitive -> the distinct model p (members for the grid broadcasts) its points were measured at."""
    pts = dbc.as_points(points)
    out = {}
    for prim in dbc.PRIMITIVES:
        sel = pts[pts["primitive"] == prim.encode()]
        if len(sel):
            out[prim] = [int(v) for v in np.unique(members(prim, sel["p"], sel["r"], sel["c"]))]
    return out


__all__ = ["FORMS", "PMODEL_DTYPE", "PModel", "aicc", "fit_forms", "fit_models", "fit_primitive", "form_values",
           "heldout_errors", "heldout_lines", "measured_p", "members", "model_lines", "shared_bounds"]
