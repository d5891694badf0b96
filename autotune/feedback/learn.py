"""On-line refinement (docs/models.md#learned): tuned calls log (candidate, size, predicted,
measured) in O(1).

Opt-in: ``AUTOTUNE_LEARN=1`` or ``set_learning(True)``. ``record`` appends to a bounded in-memory
ring and updates per-candidate statistics of the log-ratio ``r = ln(measured / predicted)``
(Welford mean/variance, an exponentially weighted mean, streaks of departures beyond ``k sigma``
and of observations back in line). After ``n`` consecutive departures a candidate is
*distrusted*: ``adjust`` replaces its model time by ``model * exp(mean of its last n r)``;
after ``n`` consecutive in-line observations (or ``ttl`` seconds without news) the distrust
clears. ``version()`` changes whenever any candidate's trust (or its factor, noticeably) changes,
so decision caches can be keyed on it.

No I/O on the call path: ``flush`` writes the ring to ``<db>.learn.jsonl`` next to the database
(lock, temporary file, ``os.replace``; at exit too when learning is on); ``refit`` fits a
per-candidate correction of the model from that log and stores it as ``/learned/default`` in the
database; ``load_learned`` reads it back (never raises).

``predicted`` is always the pure model prediction (``Ranked.predicted``), never a time that
already includes a learned factor: otherwise the correction would cancel itself out.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import tempfile
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autotune.core.plans import Candidate
from autotune.db import DatabaseError, load, location
from autotune.db._warn import warn_user
from autotune.db.learned import read_learned, save_learned
from autotune.models.fit_select import select_terms
from autotune.models.fit_terms import TermSet

ENV_VAR = "AUTOTUNE_LEARN"
SIDECAR_SUFFIX = ".learn.jsonl"
# Sidecar log: at most this many observations are kept (the newest).
SIDECAR_LIMIT = 100_000
# refit uses each candidate's newest observations only (a slowdown that ended must not linger).
REFIT_WINDOW = 64
# Fewer distinct sizes than this: a single scale factor instead of a fitted ratio(n).
REFIT_MIN_SIZES = 4
REFIT_MIN_POINTS = 3

@dataclass
class Settings:
    """k: departure threshold in sigmas; n: streak length; sigma: the model's expected relative
    error (log-ratio scale); capacity: ring size; alpha: EWMA weight of the newest observation;
    ttl: seconds after which an unobserved distrust expires (0: never); min_seconds: predictions
    below this (timer noise) are logged but do not move trust."""

    k: float = 3.0
    n: int = 3
    sigma: float = 0.10
    capacity: int = 10_000
    alpha: float = 0.2
    ttl: float = 600.0
    min_seconds: float = 2e-5


@dataclass
class Stats:
    """Running statistics of one candidate's log-ratio ln(measured / predicted)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    ewma: float = 0.0
    departures: int = 0
    inline: int = 0
    recent: deque = field(default_factory=deque)
    factor: float | None = None
    last: float = 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else math.nan


_settings = Settings()
_enabled: bool | None = None
_lock = threading.Lock()
_ring: deque = deque(maxlen=_settings.capacity)
_stats: dict[Candidate, Stats] = {}
_distrusted: dict[Candidate, float] = {}
_state = {"version": 0, "seq": 0, "flushed": 0, "expiry": math.inf, "kept": False}
_warned: set[str] = set()


# -- switches ---------------------------------------------------------------------------------------

def enabled() -> bool:
    """Whether tuned calls should record (``set_learning`` wins over $AUTOTUNE_LEARN)."""
    if _enabled is not None:
        return _enabled
    return os.environ.get(ENV_VAR, "") not in ("", "0")


def set_learning(on: bool | None) -> None:
    """Turn learning on or off for this process (None: follow $AUTOTUNE_LEARN again)."""
    global _enabled
    _enabled = on


def configure(**changes) -> Settings:
    """Change ``Settings`` fields (k, n, sigma, capacity, alpha, ttl, min_seconds); returns them."""
    global _ring
    for key, value in changes.items():
        if not hasattr(_settings, key):
            raise ValueError(f"unknown learning setting {key!r}")
        setattr(_settings, key, type(getattr(_settings, key))(value))
    if "capacity" in changes:
        with _lock:
            _ring = deque(_ring, maxlen=_settings.capacity)
    return _settings


def reset() -> None:
    """Forget every observation and all distrust (the flushed log is kept)."""
    with _lock:
        _ring.clear()
        _stats.clear()
        _distrusted.clear()
        _state.update(seq=0, flushed=0, expiry=math.inf, kept=False)
        _state["version"] += 1


# -- the call path ----------------------------------------------------------------------------------

def record(family: str, dims: tuple[int, ...], candidate: Candidate, predicted_seconds: float,
           measured_seconds: float, db: str | None = None, keep: bool = False) -> None:
    """Log one tuned call and update the candidate's trust: O(1), no I/O. ``keep``: a run-time guard
    verdict, written at exit even with learning off (which then leaves trust alone)."""
    now = time.time()
    with _lock:
        _state["seq"] += 1
        _ring.append((_state["seq"], now, family, tuple(dims), candidate, float(predicted_seconds),
                      float(measured_seconds), db))
        _state["kept"] = _state["kept"] or keep
        if keep and not enabled():
            return
        if predicted_seconds >= _settings.min_seconds and measured_seconds > 0:
            _update(candidate, math.log(measured_seconds / predicted_seconds), time.monotonic())


def observe(decision, measured_seconds: float, db: str | None = None) -> None:
    """``record`` for a selector ``Decision``: its chosen candidate against its pure model time."""
    pred = getattr(decision, "_learn_predicted", None)
    if pred is None:
        pred = next(r.predicted for r in decision.ranking if r.candidate == decision.chosen)
        decision._learn_predicted = pred       # cached: later calls with this decision are O(1)
    record(decision.family, decision.dims, decision.chosen, pred, measured_seconds, db)


def _update(cand: Candidate, r: float, now: float) -> None:
    """Welford + EWMA update and the departure / in-line streaks (caller holds the lock)."""
    s = _stats.get(cand)
    if s is None:
        s = _stats[cand] = Stats(recent=deque(maxlen=_settings.n), ewma=r)
    s.count += 1
    delta = r - s.mean
    s.mean += delta / s.count
    s.m2 += delta * (r - s.mean)
    s.ewma += _settings.alpha * (r - s.ewma)
    s.last = now
    s.recent.append(r)
    if s.recent.maxlen != _settings.n:
        s.recent = deque(s.recent, maxlen=_settings.n)
    if abs(r) > _settings.k * _settings.sigma:
        s.departures, s.inline = s.departures + 1, 0
    else:
        s.departures, s.inline = 0, s.inline + 1
    if s.departures >= _settings.n:
        _distrust(s, cand, math.exp(sum(s.recent) / len(s.recent)))
    elif s.factor is not None and s.inline >= _settings.n:
        _clear(s, cand)


def _distrust(s: Stats, cand: Candidate, factor: float) -> None:
    """Mark ``cand`` distrusted (or move its factor); bump the version on a noticeable change."""
    old = s.factor
    s.factor = _distrusted[cand] = factor
    if old is None or abs(math.log(factor / old)) > _settings.sigma:
        _state["version"] += 1
    if _settings.ttl > 0:
        _state["expiry"] = min(_state["expiry"], s.last + _settings.ttl)


def _clear(s: Stats, cand: Candidate) -> None:
    s.factor = None
    s.departures = 0
    _distrusted.pop(cand, None)
    _state["version"] += 1


def _expire() -> None:
    """Clear distrust not confirmed for ``ttl`` seconds (the selector then tries the candidate again)."""
    now = time.monotonic()
    with _lock:
        if now < _state["expiry"]:
            return
        nxt = math.inf
        for cand in list(_distrusted):
            s = _stats[cand]
            if now >= s.last + _settings.ttl:
                _clear(s, cand)
            else:
                nxt = min(nxt, s.last + _settings.ttl)
        _state["expiry"] = nxt


def version() -> int:
    """Changes whenever a candidate's trust (or its factor, by more than sigma) changes."""
    if _distrusted and time.monotonic() >= _state["expiry"]:
        _expire()
    return _state["version"]


def distrust(candidate: Candidate) -> float | None:
    """Correction factor (measured / predicted, recent) for a distrusted candidate, else None."""
    return _distrusted.get(candidate)


def adjust(candidate: Candidate, seconds: float) -> float:
    """``seconds`` times the candidate's distrust factor (unchanged when it is trusted)."""
    f = _distrusted.get(candidate)
    return seconds if f is None else seconds * f


def ranked_seconds(candidate: Candidate, model_seconds: float, charged_seconds: float, dims=None,
                   learned: dict | None = None) -> float:
    """Time to rank by: ``model * factor`` for a distrusted candidate, else ``model * correction``
    for one with a stored ``/learned`` correction (``learned``: ``load_learned(db)``), else the
    charged time. Measured factors replace the selection charges, which guess what a
    measurement already shows."""
    f = _distrusted.get(candidate)
    if f is not None:
        return model_seconds * f
    c = learned.get(candidate) if learned else None
    if c is not None:
        return model_seconds * c.factor(size_of(dims) if dims is not None else None)
    return charged_seconds


def active() -> bool:
    """Whether any candidate is distrusted now."""
    return bool(_distrusted)


def stats(candidate: Candidate) -> Stats | None:
    """The candidate's running statistics (None if never observed)."""
    return _stats.get(candidate)


def observations() -> list[tuple]:
    """The ring's entries, oldest first: (seq, time, family, dims, candidate, predicted, measured, db)."""
    with _lock:
        return list(_ring)


# -- the sidecar log --------------------------------------------------------------------------------

def sidecar(db: str | os.PathLike | None = None) -> Path:
    """The learning log next to the database: ``<db>.learn.jsonl``."""
    p = location.resolve(db)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def _entry_json(e: tuple) -> str:
    _, t, family, dims, cand, pred, meas, _ = e
    return json.dumps({"time": t, "family": family, "dims": list(dims), "candidate": cand.as_dict(),
                       "predicted": pred, "measured": meas}, sort_keys=True)


def flush(path: str | os.PathLike | None = None) -> int:
    """Append the observations not yet written to the sidecar log(s); returns how many.

    ``path``: the database whose sidecar receives them all; None: each observation goes next to
    the database it was recorded under. Atomic (lock, temporary file, os.replace).
    """
    with _lock:
        new = [e for e in _ring if e[0] > _state["flushed"]]
        last = _state["seq"]
    groups: dict = {}
    for e in new:
        groups.setdefault(path if path is not None else e[7], []).append(e)
    for db, entries in groups.items():
        _append(sidecar(db), [_entry_json(e) for e in entries])
    with _lock:
        _state["flushed"] = max(_state["flushed"], last)
    return len(new)


def _append(target: Path, lines: list[str]) -> None:
    """Rewrite ``target`` with its newest lines plus ``lines`` (at most SIDECAR_LIMIT), atomically."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=30):
        old = target.read_text().splitlines() if target.is_file() else []
        keep = (old + lines)[-SIDECAR_LIMIT:]
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write("\n".join(keep) + "\n")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def read_log(db: str | os.PathLike | None = None) -> list[dict]:
    """Observations in the sidecar log of ``db`` (damaged lines skipped; [] if none)."""
    p = sidecar(db)
    if not p.is_file():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            e = json.loads(line)
            e["candidate"] = Candidate(**e["candidate"])
            if e["predicted"] > 0 and e["measured"] > 0:
                out.append(e)
        except (ValueError, TypeError, KeyError):
            continue
    return out


def _atexit_flush() -> None:
    if not (enabled() or _state["kept"]) or _state["flushed"] >= _state["seq"]:
        return
    try:
        flush()
    except Exception as exc:  # never fail the interpreter's exit
        warnings.warn(f"autotune: could not write the learning log ({exc})", RuntimeWarning, stacklevel=1)


atexit.register(_atexit_flush)


# -- refit and the stored corrections ---------------------------------------------------------------

@dataclass(frozen=True)
class LearnedCorrection:
    """Learned measured/predicted ratio of one candidate: ``scale``, or ``ratio(n)`` over [n_lo, n_hi]."""

    family: str
    candidate: Candidate
    npts: int
    scale: float
    sigma: float
    n_lo: float
    n_hi: float
    terms: tuple[tuple[int, int], ...] = ()
    coef: tuple[float, ...] = ()

    def factor(self, n: float | None = None) -> float:
        """Correction at size ``n`` (clamped to the observed range); ``scale`` when no ratio(n) was fitted."""
        if n is None or not self.terms:
            return self.scale
        x = min(max(float(n), self.n_lo), self.n_hi)
        val = sum(c * x ** i for (i, _), c in zip(self.terms, self.coef, strict=True))
        return val if val > 0 else self.scale


def size_of(dims) -> float:
    """One size per problem: the geometric mean of its dimensions."""
    return float(np.exp(np.mean(np.log(np.maximum(np.asarray(dims, dtype=float), 1.0)))))


def fit_correction(family: str, cand: Candidate, n, ratio) -> LearnedCorrection:
    """Per-series correction: AICc-selected ratio(n) in {1, n^-1, n} with >= REFIT_MIN_SIZES sizes, else a scale."""
    n, ratio = np.asarray(n, dtype=float), np.asarray(ratio, dtype=float)
    lr = np.log(ratio)
    scale = float(np.exp(lr.mean()))
    sigma = float(lr.std(ddof=1)) if len(lr) > 1 else math.nan
    base = LearnedCorrection(family, cand, len(n), scale, sigma, float(n.min()), float(n.max()))
    if len(np.unique(n)) < REFIT_MIN_SIZES:
        return base
    try:
        sel = select_terms(n, None, ratio, TermSet.polynomial((-1, 0, 1), (0,), "n"), required=[(0, 0)])
    except ValueError:
        return base
    terms, coef = sel.ranked[0].termset.terms, tuple(float(c) for c in sel.ranked[0].coefficients)
    fitted = LearnedCorrection(family, cand, len(n), scale, float(sel.sigma), base.n_lo, base.n_hi, terms, coef)
    grid = np.geomspace(base.n_lo, base.n_hi, 16)
    return fitted if all(fitted.factor(x) > 0 for x in grid) else base


def refit(db_path: str | os.PathLike | None = None) -> dict:
    """Fit per-candidate corrections from the sidecar log and store them as ``/learned/default``."""
    path = location.resolve(db_path)
    if not path.is_file():
        return {"db": str(path), "error": "no database", "observations": 0, "corrections": []}
    try:
        load(path, check_machine=False)
    except DatabaseError as exc:
        return {"db": str(path), "error": f"unusable database ({exc})", "observations": 0, "corrections": []}
    if enabled() or _state["flushed"] < _state["seq"]:
        flush()
    log = read_log(path)
    series: dict = {}
    for e in log:
        series.setdefault((e["family"], e["candidate"]), []).append(e)
    fits = []
    for (family, cand), obs in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        obs = obs[-REFIT_WINDOW:]
        if len(obs) >= REFIT_MIN_POINTS:
            n = [size_of(e["dims"]) for e in obs]
            fits.append(fit_correction(family, cand, n, [e["measured"] / e["predicted"] for e in obs]))
    if fits:
        save_learned(path, [_row(c) for c in fits])
        _load_cache.clear()
    return {"db": str(path), "observations": len(log), "series": len(series),
            "corrections": [_describe(c) for c in fits]}


def _describe(c: LearnedCorrection) -> dict:
    model = " + ".join(f"{v:.4g}*n^{i}" for (i, _), v in zip(c.terms, c.coef, strict=True)) if c.terms else None
    return {"family": c.family, "candidate": str(c.candidate), "points": c.npts, "scale": c.scale,
            "sigma": c.sigma, "n_range": [c.n_lo, c.n_hi], "ratio_model": model}


def _row(c: LearnedCorrection) -> dict:
    """The plain record ``db.learned`` stores for one correction."""
    cand = c.candidate
    return {"family": c.family, "algorithm": cand.algorithm, "backend": cand.backend, "threads": cand.threads,
            "param": cand.param, "variant": cand.variant, "npts": c.npts, "scale": c.scale, "sigma": c.sigma,
            "n_lo": c.n_lo, "n_hi": c.n_hi, "terms": c.terms, "coef": c.coef}


_load_cache: dict = {}


def load_learned(path: str | os.PathLike | None = None) -> dict[Candidate, LearnedCorrection]:
    """Stored corrections by candidate; {} when missing or damaged (one warning). Cached per file mtime."""
    try:
        p = location.resolve(path)
        key = (str(p), p.stat().st_mtime_ns)
    except Exception:
        return {}
    if key not in _load_cache:
        _load_cache.clear()
        _load_cache[key] = _read_learned(p)
    return _load_cache[key]


def _read_learned(p: Path) -> dict[Candidate, LearnedCorrection]:
    try:
        out = {}
        for r in read_learned(p):
            cand = Candidate(r["algorithm"], r["backend"], r["threads"], r["param"], r["variant"])
            out[cand] = LearnedCorrection(r["family"], cand, r["npts"], r["scale"], r["sigma"], r["n_lo"], r["n_hi"],
                                   r["terms"], r["coef"])
        return out
    except Exception as exc:
        if str(p) not in _warned:
            _warned.add(str(p))
            warn_user(f"autotune: learned corrections in {p} unreadable ({exc}); ignoring them")
        return {}
