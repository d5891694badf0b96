"""Hockney fits of the comm probe's timings (docs/models.md#comm): piecewise lines ``t = ts + m tw``
per regime of message size, regimes placed by a segmentation search scored by mbic, held-out
errors, and the LoOgGP parameters from round trips. The probe fits, ``db.comm`` stores the fits."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.assumptions import DEFAULT_TS, DEFAULT_TW
from autotune.db.comm import FIT_DTYPE, PRTT_DTYPE


@dataclass(frozen=True)
class Regime:
    lo: float
    hi: float
    ts: float
    tw: float
    m_first: float
    m_last: float
    npts: int


@dataclass(frozen=True)
class HockneyFit:
    """Piecewise Hockney model: regime i covers ``regimes[i].lo <= m < regimes[i].hi``."""

    regimes: tuple[Regime, ...]
    rss: float = 0.0           # sum of squared relative residuals
    criterion: float = 0.0     # mbic (or AICc, BIC) of the chosen segmentation

    @property
    def breakpoints(self) -> tuple[float, ...]:
        return tuple(r.lo for r in self.regimes[1:])

    def index(self, nbytes) -> np.ndarray:
        return np.searchsorted(np.asarray(self.breakpoints, dtype=float), np.asarray(nbytes, dtype=float),
                               side="right")

    def predict(self, nbytes) -> np.ndarray:
        m = np.asarray(nbytes, dtype=float)
        i = self.index(m)
        ts = np.array([r.ts for r in self.regimes])
        tw = np.array([r.tw for r in self.regimes])
        return ts[i] + tw[i] * m


def _line(m: np.ndarray, t: np.ndarray, w: np.ndarray | None = None,
          floor_at: float | None = None) -> tuple[float, float, float]:
    """(ts, tw) minimising sum(w ((t - ts - tw m) / t)^2), and that sum; tw >= 0 and ts >= 0, or,
    given ``floor_at`` (a regime after the first), ts free as long as ts + tw*floor_at >= 0."""
    w = np.ones_like(t) if w is None else w
    r = np.sqrt(w)
    u, v = r / t, r * m / t
    best = None
    if len(t) >= 2 and np.ptp(m) > 0:
        scale = max(float(np.abs(v).max()), 1e-300)
        sol, *_ = np.linalg.lstsq(np.column_stack([u, v / scale]), r, rcond=None)
        ts, tw = float(sol[0]), float(sol[1]) / scale
        lowest = ts if floor_at is None else ts + tw * floor_at
        if lowest >= 0 and tw >= 0:
            best = (ts, tw)
    candidates = [best] if best is not None else [
        (float((r @ u) / (u @ u)), 0.0),                            # tw = 0
        (0.0, float((r @ v) / (v @ v)) if (v @ v) > 0 else 0.0),    # ts = 0
    ]
    fits = [(ts, tw, float((w * ((t - ts - tw * m) / t) ** 2).sum())) for ts, tw in candidates]
    return min(fits, key=lambda f: f[2])        # the first of the least weighted RSS


def segment_costs(m: np.ndarray, t: np.ndarray, min_seg: int, w: np.ndarray | None = None) -> np.ndarray:
    """cost[i, j] = weighted sum of squared relative residuals of the best line through points
    i..j (inf for fewer than ``min_seg`` points), from running sums: O(n^2). tw >= 0; ts >= 0
    for the first regime, for later ones the line only has to stay >= 0 down to point i-1."""
    n = len(m)
    w = np.ones(n) if w is None else w
    cost = np.full((n, n), np.inf)
    for i in range(n):
        ww = w[i:]
        u = 1.0 / t[i:]
        v = m[i:] / t[i:] / max(m[-1], 1.0)        # scaled (only the costs are used)
        su, sv = np.cumsum(ww * u), np.cumsum(ww * v)
        suu, suv, svv = np.cumsum(ww * u * u), np.cumsum(ww * u * v), np.cumsum(ww * v * v)
        cnt = np.cumsum(ww)
        det = suu * svv - suv * suv
        with np.errstate(divide="ignore", invalid="ignore"):
            a = (su * svv - sv * suv) / det
            b = (sv * suu - su * suv) / det
            free = cnt - (a * su + b * sv)
            only_ts = cnt - su * su / suu
            only_tw = np.where(svv > 0, cnt - sv * sv / svv, cnt)
            lowest = a if i == 0 else a + b * m[i - 1] / max(m[-1], 1.0)
        ok = (det > 1e-12 * suu * svv) & (lowest >= 0) & (b >= 0) & np.isfinite(free)
        rss = np.where(ok, free, np.minimum(only_ts, only_tw))
        rss = np.maximum(rss, 0.0)
        rss[: min_seg - 1] = np.inf
        cost[i, i:] = rss
    return cost


BREAK_PARAMS = 3   # a breakpoint placed by search costs as much as 3 fitted parameters (mbic)


def _criterion(rss: float, n: float, k: int, kind: str) -> float:
    """Information criterion for k regimes: 2 line parameters each, k-1 breakpoints, one noise
    variance. ``mbic`` (default): BIC with each breakpoint counted as BREAK_PARAMS parameters,
    because the dynamic programme searches every cut (plain AICc and BIC, counting one, split
    regimes at runs of noise)."""
    rss = max(rss, n * 1e-14)
    if kind == "mbic":
        return n * math.log(rss / n) + (2 * k + BREAK_PARAMS * (k - 1) + 1) * math.log(n)
    params = 3 * k
    if kind == "bic":
        return n * math.log(rss / n) + params * math.log(n)
    if n - params - 1 <= 0:
        return math.inf
    return n * math.log(rss / n) + 2 * params + 2 * params * (params + 1) / (n - params - 1)


POW2_BREAK_LIMIT = 1 << 20   # protocol thresholds (eager, pipelining, algorithm switches) lie below


def regime_boundary(last: float, first: float, below: Regime | None = None, above: Regime | None = None) -> float:
    """Where one regime ends and the next begins, between the measured sizes ``last`` < ``first``.

    Where the two regimes' lines cross inside the gap, the change is gradual (messages outgrowing
    a cache) and the crossing keeps the model continuous. Otherwise, up to POW2_BREAK_LIMIT, a
    step: MPI libraries switch protocol at powers of two, just above ``last`` if it is one (a
    limit of L bytes admits L), else the power of two in (last, first] nearest the middle of the
    gap in log size (a limit that counts a header, such as the 4096 B eager limit, moves a message
    of L bytes up); above it, halfway in log size.
    """
    if below is not None and above is not None and below.tw != above.tw:
        cross = (above.ts - below.ts) / (below.tw - above.tw)
        if last < cross < first:
            return cross
    if POW2_BREAK_LIMIT >= first > last > 0 and last == 2.0 ** round(math.log2(last)):
        return last + 1.0
    if POW2_BREAK_LIMIT >= first > last > 0:
        lo_exp, hi_exp = math.floor(math.log2(last)) + 1, math.floor(math.log2(first))
        if hi_exp >= lo_exp:
            mid = 0.5 * (math.log2(last) + math.log2(first))
            return 2.0 ** min(range(lo_exp, hi_exp + 1), key=lambda e: (abs(e - mid), -e))
    return math.sqrt(last * first)


def _segmentation(m, t, w, max_regimes, min_seg, criterion) -> tuple[tuple[int, ...], float, float]:
    """Best cut points (starts of regimes 2..k), weighted RSS and criterion over k = 1..max_regimes."""
    neff = float(w.sum())
    return best_cuts(segment_costs(m, t, min_seg, w), max_regimes, min_seg,
                     lambda rss, k: _criterion(rss, neff, k, criterion))


def best_cuts(cost: np.ndarray, max_regimes: int, min_seg: int, score) -> tuple[tuple[int, ...], float, float]:
    """Dynamic programme over a segment cost matrix (``cost[i, j]``: points i..j as one regime):
    the cuts, cost and ``score(cost, k)`` of the k = 1..max_regimes split that scores lowest.
    Shared by one curve's fit and the joint regimes of several curves (``comm_scaling``)."""
    n = len(cost)
    best: tuple[tuple[int, ...], float] | None = None
    best_score = math.inf
    dp = cost[0].copy()                           # dp[j]: best split of points 0..j into k regimes
    back: list[np.ndarray] = []                   # back[k-2][j]: start of the last regime
    for k in range(1, max_regimes + 1):
        if k > 1 and n < 2 * min_seg:
            break
        if k > 1:
            total = dp[:-1, None] + cost[1:, :]   # row i-1: points 0..i-1 in k-1 regimes + i..j
            start = np.argmin(total, axis=0)
            dp = total[start, np.arange(n)]
            back.append(start + 1)
        if not np.isfinite(dp[n - 1]):
            break
        value = score(float(dp[n - 1]), k)
        if best is None or value < best_score - 1e-9:
            cuts, j = [], n - 1
            for layer in reversed(back):
                cuts.append(int(layer[j]))
                j = cuts[-1] - 1
            best, best_score = (tuple(reversed(cuts)), float(dp[n - 1])), value
    assert best is not None, "no finite one-regime cost"
    return best[0], best[1], best_score


def fit_hockney(nbytes, times, *, max_regimes: int = 8, min_points: int = 3,
                criterion: str = "mbic", robust: bool = True) -> HockneyFit:
    """Segmented relative least squares: the best 1..max_regimes-regime Hockney model by ``criterion``.

    ``robust``: then once more with Huber weights (sizes whose relative residual exceeds 2.5
    robust standard deviations, and 5%, count less), so a point caught by a disturbance while it
    was measured neither moves a breakpoint nor bends a regime's line.
    """
    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    order = np.argsort(m, kind="stable")
    m, t = m[order], np.maximum(t[order], 1e-12)
    n = len(m)
    if n == 0:
        return HockneyFit((Regime(0.0, math.inf, DEFAULT_TS, DEFAULT_TW, 0.0, 0.0, 0),))
    min_seg = max(1, min(min_points, n))
    w = np.ones(n)
    cuts, rss, score = _segmentation(m, t, w, max_regimes, min_seg, criterion)
    if robust and n >= 2 * min_seg:
        res = (t - _lines(m, t, w, cuts)) / t
        scale = max(1.4826 * float(np.median(np.abs(res))), 0.02)
        k = 2.5 * scale
        w = np.where(np.abs(res) > k, k / np.maximum(np.abs(res), 1e-300), 1.0)
        cuts, rss, score = _segmentation(m, t, w, max_regimes, min_seg, criterion)
    starts, ends, lines = _segment_lines(m, t, w, cuts)
    regimes = [Regime(0.0, math.inf, ts, tw, float(m[i]), float(m[j]), j - i + 1)
               for (ts, tw), i, j in zip(lines, starts, ends, strict=True)]
    for k in range(1, len(regimes)):
        cut = regime_boundary(m[starts[k] - 1], m[starts[k]], regimes[k - 1], regimes[k])
        regimes[k - 1] = dataclasses.replace(regimes[k - 1], hi=cut)
        regimes[k] = dataclasses.replace(regimes[k], lo=cut)
    return HockneyFit(tuple(regimes), rss, score if math.isfinite(score) else 0.0)


def _segment_lines(m: np.ndarray, t: np.ndarray, w: np.ndarray, cuts: tuple[int, ...]):
    """(starts, ends, [(ts, tw) per regime]) of a segmentation (cuts: starts of regimes 2..k)."""
    starts, ends = (0, *cuts), (*(c - 1 for c in cuts), len(m) - 1)
    lines = [_line(m[i:j + 1], t[i:j + 1], w[i:j + 1], None if i == 0 else m[i - 1])[:2]
             for i, j in zip(starts, ends, strict=True)]
    return starts, ends, lines


def _lines(m: np.ndarray, t: np.ndarray, w: np.ndarray, cuts: tuple[int, ...]) -> np.ndarray:
    """Predictions of the per-regime lines for a segmentation."""
    out = np.empty_like(t)
    for i, j, (ts, tw) in zip(*_segment_lines(m, t, w, cuts), strict=True):
        out[i:j + 1] = ts + tw * m[i:j + 1]
    return out


def relative_errors(fit: HockneyFit, nbytes, times) -> np.ndarray:
    """|model - measured| / measured at each point."""
    t = np.asarray(times, dtype=float)
    return np.abs(fit.predict(nbytes) - t) / t


def heldout(nbytes, times, **kw) -> tuple[HockneyFit | None, np.ndarray, np.ndarray]:
    """Fit on every other size (the smallest, the third, ... and always the largest), check on
    the rest: every held-out size lies between two fitted ones, as a lookup between measured
    sizes would. For curves probed without held-out sizes of their own.

    Returns (the half fit, the held-out sizes, their relative errors); (None, [], []) when there
    are too few sizes to split (fewer than 4).
    """
    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    order = np.argsort(m, kind="stable")
    m, t = m[order], t[order]
    if len(m) < 4:
        return None, np.zeros(0), np.zeros(0)
    train = np.zeros(len(m), dtype=bool)
    train[0::2] = True
    train[-1] = True
    fit = fit_hockney(m[train], t[train], **kw)
    return fit, m[~train], relative_errors(fit, m[~train], t[~train])


@dataclass(frozen=True)
class CurveFit:
    """The stored fit plus its held-out error, grouped by regime (``heldout_fit``: the fit the
    error was measured on, when that is not the stored one)."""

    fit: HockneyFit
    err_med: tuple[float, ...]
    err_max: tuple[float, ...]
    n_heldout: tuple[int, ...]
    heldout_fit: HockneyFit | None = None


def fit_curve(nbytes, times, heldout_sizes=(), **kw) -> CurveFit:
    """Fit a curve leaving out the sizes in ``heldout_sizes`` and check it on them; if the curve
    has none of them, fit all sizes and check the every-other procedure (``heldout``)."""
    m = np.asarray(nbytes, dtype=float)
    t = np.asarray(times, dtype=float)
    held = np.isin(m, np.asarray(heldout_sizes, dtype=float))
    if held.any() and (~held).sum() >= 2:
        fit = fit_hockney(m[~held], t[~held], **kw)
        half, hm, herr = None, m[held], relative_errors(fit, m[held], t[held])
    else:
        fit = fit_hockney(m, t, **kw)
        half, hm, herr = heldout(m, t, **kw)
    where = fit.index(hm)
    med, mx, cnt = [], [], []
    for i in range(len(fit.regimes)):
        e = herr[where == i]
        med.append(float(np.median(e)) if len(e) else math.nan)
        mx.append(float(e.max()) if len(e) else math.nan)
        cnt.append(int(len(e)))
    return CurveFit(fit, tuple(med), tuple(mx), tuple(cnt), half)


def curves(points: np.ndarray):
    """``((primitive, p, r, c), rows)`` for every curve in POINT_DTYPE ``points``, its rows by size."""
    for key in sorted({(r["primitive"], int(r["p"]), int(r["r"]), int(r["c"])) for r in points}):
        prim, p, rr, cc = key
        sel = (points["primitive"] == prim) & (points["p"] == p) & (points["r"] == rr) & (points["c"] == cc)
        pts = points[sel]
        yield (_text(prim), p, rr, cc), pts[np.argsort(pts["nbytes"], kind="stable")]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def fit_points(points: np.ndarray, heldout_sizes=(), **kw) -> np.ndarray:
    """FIT_DTYPE rows for every (primitive, p, r, c) curve in ``points``, the sizes in
    ``heldout_sizes`` left out of the fits and used to check them (``fit_curve``)."""
    rows = []
    for (prim, p, rr, cc), pts in curves(points):
        cf = fit_curve(pts["nbytes"], pts["t_mean"], heldout_sizes, **kw)
        k = len(cf.fit.regimes)
        for i, g in enumerate(cf.fit.regimes):
            rows.append((prim, p, rr, cc, i, k, g.lo, g.hi, g.ts, g.tw, g.m_first, g.m_last, g.npts,
                         cf.err_med[i], cf.err_max[i], cf.n_heldout[i]))
    return np.array(rows, dtype=FIT_DTYPE)


# -- LoOgGP: PRTT method (docs/models.md#comm.loggp) ---------------------------------------------------

def fit_loggp(prtt: np.ndarray, fits: np.ndarray | None = None) -> dict:
    """LoOgGP parameters from PRTT(1,0,s), PRTT(n,0,s), PRTT(n,d,s) (seconds, bytes).

    g(s) = (PRTT(n,0,s) - PRTT(1,0,s)) / (n-1); o(s) = (PRTT(n,d,s) - PRTT(1,0,s)) / (n-1) - d;
    L = PRTT(1,0,1)/2 (at the smallest size measured). Within each ping-pong regime (its
    breakpoints, from ``fits``) o(s) = o + O (s-1) and g(s) = g + G (s-1), non-negative, relative
    least squares (values floored at a twentieth of their median so noise near zero cannot
    dominate), and the regime's own latency L_r = median(PRTT(1,0,s)/2 - G (s-1)), so that one
    message takes L_r + G (s-1) in every regime (the eager and rendezvous protocols differ).
    """
    prtt = np.sort(np.asarray(prtt).astype(PRTT_DTYPE), order="nbytes")
    s = prtt["nbytes"].astype(float)
    n = prtt["n"].astype(float)
    g_s = np.maximum((prtt["prttn"] - prtt["prtt1"]) / (n - 1), 0.0)
    o_s = np.maximum((prtt["prttnd"] - prtt["prtt1"]) / (n - 1) - prtt["delay"], 0.0)
    bounds: list[float] = []
    if fits is not None and len(fits):
        pp = np.sort(fits[fits["primitive"] == b"pingpong"], order="regime")
        bounds = [float(b) for b in pp["lo"][1:] if s[0] < b <= s[-1]]
    edges = [0.0, *bounds, math.inf]
    regimes = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        sel = (s >= lo) & (s < hi)
        if not sel.any():
            continue
        row: dict[str, Any] = {"lo": lo, "hi": hi if math.isfinite(hi) else None, "npts": int(sel.sum())}
        for name, vals in (("o", o_s[sel]), ("g", g_s[sel])):
            floor = max(0.05 * float(np.median(vals)), 1e-9)
            a, b, _ = _line(s[sel] - 1.0, np.maximum(vals, floor))
            row[name], row[name.upper()] = a, b
        # the regime's own latency: one way = L_r + G (s - 1) through its round trips
        row["L"] = max(float(np.median(prtt["prtt1"][sel] / 2 - row["G"] * (s[sel] - 1.0))), 0.0)
        regimes.append(row)
    return {"L": float(prtt["prtt1"][0] / 2), "L_size": int(s[0]), "n": int(n[0]), "regimes": regimes,
            "o_s": [float(x) for x in o_s], "g_s": [float(x) for x in g_s], "sizes": [int(x) for x in s]}


@dataclass(frozen=True)
class LoOgGP:
    """A stored LoOgGP fit as a model (docs/models.md#comm.loggp): one message of s bytes one way
    ``L_r + G (s - 1)`` (the latency and G of s's regime), the gap between messages one sender
    issues back to back ``g(s) = g + G (s - 1)``, and a train of k of them, the last delivered
    after ``one_way(s) + (k - 1) g(s)``. The sender's overheads o, O are stored with the fit but
    priced nowhere: a train's sender is not computing meanwhile."""

    bounds: np.ndarray          # regime i covers bounds[i - 1] <= s < bounds[i]
    latency: np.ndarray         # L_r per regime (the fit's L for fits stored without it)
    gap0: np.ndarray            # g per regime
    per_byte: np.ndarray        # G per regime

    @classmethod
    def of(cls, d: dict | None) -> LoOgGP | None:
        if not d or not d.get("regimes"):
            return None
        regs = d["regimes"]
        return cls(np.array([float(r["lo"]) for r in regs[1:]]), np.array([float(r.get("L", d["L"])) for r in regs]),
                   np.array([float(r["g"]) for r in regs]), np.array([float(r["G"]) for r in regs]))

    def _at(self, s) -> np.ndarray:
        return np.searchsorted(self.bounds, np.asarray(s, dtype=float), side="right")

    def one_way(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=float)
        i = self._at(s)
        return self.latency[i] + self.per_byte[i] * np.maximum(s - 1.0, 0.0)

    def gap(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=float)
        i = self._at(s)
        return self.gap0[i] + self.per_byte[i] * np.maximum(s - 1.0, 0.0)

    def train(self, k, s) -> np.ndarray:
        return self.one_way(s) + (np.asarray(k, dtype=float) - 1.0) * self.gap(s)

    def prtt(self, n, s) -> np.ndarray:
        """PRTT(n, 0, s): n messages one way, one back."""
        return self.train(n, s) + self.one_way(s)


def loggp_heldout(prtt: np.ndarray, pingpong: tuple[np.ndarray, np.ndarray], fits: np.ndarray | None = None
                  ) -> dict[str, np.ndarray]:
    """LoOgGP against Hockney on the PRTT runs, both fitted on every other size: at the others,
    the relative errors of each on PRTT(1,0,s) (one round trip) and PRTT(n,0,s) (a train of n
    and the answer). Hockney's is the ping-pong fit (its one-way time t(s); n messages cost
    n t(s): no overlap of consecutive messages). Empty arrays with fewer than 4 sizes."""
    prtt = np.sort(np.asarray(prtt).astype(PRTT_DTYPE), order="nbytes")
    out = {k: np.zeros(0) for k in ("nbytes", "loggp_one", "hockney_one", "loggp_train", "hockney_train")}
    if len(prtt) < 4:
        return out
    train = np.zeros(len(prtt), dtype=bool)
    train[0::2] = True
    train[-1] = True
    model = LoOgGP.of(fit_loggp(prtt[train], fits))
    assert model is not None, "four sizes or more fit one regime at least"
    m, t = (np.asarray(x, dtype=float) for x in pingpong)
    fitted = np.isin(m, prtt["nbytes"][train])
    hock = fit_hockney(m[fitted], t[fitted])
    held = prtt[~train]
    s, n = held["nbytes"].astype(float), held["n"].astype(float)
    rtt = 2.0 * hock.predict(s)

    def rel(pred, meas):
        return np.abs(pred - meas) / meas
    return {"nbytes": s, "loggp_one": rel(2 * model.one_way(s), held["prtt1"]), "hockney_one": rel(rtt, held["prtt1"]),
            "loggp_train": rel(model.prtt(n, s), held["prttn"]), "hockney_train": rel((n + 1) * rtt / 2, held["prttn"])}

