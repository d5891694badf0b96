"""SP lookup: ``k(routine, backend, threads, x, pattern, param)`` from measured points.

Between measured sizes, log k is interpolated linearly in log x; outside the measured range the
nearest point is used (docs/models.md#sp.lookup). Between measured parameters (block b, process count p, ...)
the same interpolation runs in log param. Any miss (no database, damaged, old, foreign, or a
key never measured) falls back to nominal defaults with one warning, never an error. Records
with a non-finite or non-positive k (or a non-finite or negative time) are dropped with one
warning; a database left with none counts as unusable.
"""
from __future__ import annotations

import functools
import os
import shlex
import time
from collections import defaultdict
from typing import Protocol

import numpy as np

from autotune.core.assumptions import (
    DEFAULT_RATE,
    DRIFT_PERCENTILE,
    EXTRAPOLATION_PENALTY,
    MAX_DRIFT_CORRECTION,
    RECHECK_SECONDS,
)
from autotune.core.routines import ROUTINES

from . import location
from ._warn import warn_user
from .fingerprint import stale_backends
from .store import Database, DatabaseError, load, valid_mask


def drift_corrected_k(records: np.ndarray) -> np.ndarray:
    """k of each record scaled by (quiet reference / reference near the point): an analysis tool
    (``autotune bench compare --drift``, not applied by the runtime).

    The probe re-times a fixed reference call (its backend's gemm, same thread count) every few
    seconds, meant to divide out a machine slowing down for a while. The reference is too short to
    track the point, so the runtime reads k as measured; the probe's passes handle disturbances.
    """
    k = records["k"].astype(float).copy()
    ref = records["ref"]
    keys = np.char.add(np.char.add(records["run_id"], records["backend"]), records["threads"].astype("S4"))
    for key in np.unique(keys[ref > 0]):
        sel = (keys == key) & (ref > 0)
        factor = np.percentile(ref[sel], DRIFT_PERCENTILE) / ref[sel]
        k[sel] *= np.clip(factor, 1.0 / MAX_DRIFT_CORRECTION, MAX_DRIFT_CORRECTION)
    return k


class SPLookup(Protocol):
    """What the models and the selector read of the system parameters: ``SystemParameters``, or a
    view of it that records each lookup for ``explain`` (``select.recorder``)."""

    @property
    def table(self) -> SPTable | None: ...

    def has(self, routine: str, backend: str, threads: int, pattern: str = "square",
            dtype: str = "float64") -> bool: ...

    def k(self, routine: str, backend: str, threads: int, x, pattern: str = "square",
          param=0.0, dtype: str = "float64"): ...


class SPTable:
    """Measured k values indexed for fast, vectorised interpolation."""

    def __init__(self, records: np.ndarray):
        grouped: dict[tuple, dict[float, list]] = defaultdict(lambda: defaultdict(list))
        for r, k in zip(records, records["k"], strict=True):
            key = (r["routine"].decode(), r["backend"].decode(), int(r["threads"]),
                   r["pattern"].decode(), r["dtype"].decode())
            grouped[key][float(r["param"])].append((float(r["x"]), float(k)))
        self._curves: dict[tuple, tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]] = {}
        self._merged: dict[tuple, tuple[np.ndarray, ...]] = {}
        self._kmin: dict[tuple, float] = {}
        for key, by_param in grouped.items():
            params = np.array(sorted(by_param))
            curves = []
            for p in params:
                pts = sorted(by_param[p])
                curves.append((np.log([x for x, _ in pts]), np.log([k for _, k in pts])))
            self._curves[key] = (params, curves)
            self._merged[key] = _merge(curves)

    def keys(self) -> list[tuple]:
        """(routine, backend, threads, pattern, dtype) combinations present."""
        return sorted(self._curves)

    @functools.cached_property
    def backends(self) -> tuple[str, ...]:
        """Backends with at least one measurement, sorted."""
        return tuple(sorted({key[1] for key in self._curves}))

    def has(self, routine: str, backend: str, threads: int, pattern: str = "square",
            dtype: str = "float64") -> bool:
        return (routine, backend, threads, pattern, dtype) in self._curves

    def k_min(self, routine: str, backend: str, threads: int, pattern: str = "square",
              dtype: str = "float64", upto: float = np.inf) -> float:
        """Fastest k a series can give for calls whose size and parameter are <= ``upto``: a bound
        for pruning.

        Interpolation and end clamping only blend measured points, so the points up to the first
        one at or beyond ``upto`` (in size and in parameter) bound every such lookup: tighter than
        the series' overall best for small problems, whose calls and blocks are all small.
        """
        key = (routine, backend, int(threads), pattern, dtype)
        cut = (key, float(upto))
        if cut not in self._kmin:
            params, curves = self._curves[key]
            lu = np.log(max(upto, 1.0)) if np.isfinite(upto) else np.inf
            last = int(np.searchsorted(params, upto)) + 1
            self._kmin[cut] = float(np.exp(min(
                ks[:int(np.searchsorted(xs, lu)) + 1].min() for xs, ks in curves[:last])))
        return self._kmin[cut]

    def measured_range(self, routine: str, backend: str, threads: int, pattern: str = "square",
                       dtype: str = "float64") -> tuple[float, float]:
        """(smallest, largest) size measured for a series, over its parameters; KeyError if none."""
        _, lo, hi, _, _ = self._merged[(routine, backend, int(threads), pattern, dtype)]
        return float(np.exp(lo.min())), float(np.exp(hi.max()))

    def params(self, routine: str, backend: str, threads: int, pattern: str,
               dtype: str = "float64") -> tuple[float, ...]:
        """Parameter values (blocks, fractions, ...) measured for a series; () if none."""
        entry = self._curves.get((routine, backend, int(threads), pattern, dtype))
        return tuple(float(p) for p in entry[0]) if entry else ()

    def k(self, routine: str, backend: str, threads: int, x, pattern: str = "square",
          param: float = 0.0, dtype: str = "float64") -> np.ndarray:
        """Seconds per flop at sizes ``x`` (array-like); KeyError if the series was never measured."""
        key = (routine, backend, int(threads), pattern, dtype)
        params, curves = self._curves[key]
        lx = np.log(np.maximum(x, 1.0))                     # float64 for any real x
        offset, lo, hi, xs, ks = self._merged[key]
        if isinstance(param, np.ndarray) and param.ndim:     # one parameter per size
            idx = np.minimum(params.searchsorted(param), len(params) - 1)
            if (params[idx] == param).all():                  # all measured: one interpolation
                inside = np.minimum(np.maximum(lx, lo[idx]), hi[idx])
                return np.exp(np.interp(inside + offset[idx], xs, ks)) * _penalty(lx, lo.min(), hi.max())
            out = np.empty(lx.shape)
            for p in np.unique(param):
                sel = param == p
                out[sel] = self._at(params, curves, lx[sel], float(p))
            return out * _penalty(lx, lo.min(), hi.max())
        return self._at(params, curves, lx, float(param)) * _penalty(lx, lo.min(), hi.max())

    @staticmethod
    def _at(params: np.ndarray, curves: list, lx: np.ndarray, param: float) -> np.ndarray:
        if len(params) == 1 or param <= params[0]:
            xs, ks = curves[0]
            return np.exp(np.interp(lx, xs, ks))
        if param >= params[-1]:
            return np.exp(np.interp(lx, *curves[-1]))
        hi = int(np.searchsorted(params, param))
        lo = hi - 1
        w = (np.log(param) - np.log(params[lo])) / (np.log(params[hi]) - np.log(params[lo]))
        return np.exp((1 - w) * _interp(lx, *curves[lo]) + w * _interp(lx, *curves[hi]))


_OCTAVE = np.log(2.0)


def _penalty(lx: np.ndarray, lo: float, hi: float) -> np.ndarray | float:
    """The factor on k at log sizes ``lx`` outside the measured log range [lo, hi]: 1 inside,
    (1 + EXTRAPOLATION_PENALTY) per octave beyond (the value itself is the nearest measured one).
    A series measured at one size is a constant by design (a call's overhead): never penalised."""
    if hi <= lo:
        return 1.0
    out = np.maximum(np.maximum(lx - hi, lo - lx), 0.0)
    return (1.0 + EXTRAPOLATION_PENALTY) ** (out / _OCTAVE)


_SPAN = 1000.0   # log sizes are < 50: curves placed this far apart never overlap


def _merge(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """All parameter curves on one axis (curve i shifted by i * _SPAN) for a single np.interp."""
    offset = np.arange(len(curves)) * _SPAN
    lo = np.array([c[0][0] for c in curves])
    hi = np.array([c[0][-1] for c in curves])
    xs = np.concatenate([c[0] + off for c, off in zip(curves, offset, strict=True)])
    ks = np.concatenate([c[1] for c in curves])
    return offset, lo, hi, xs, ks


def _interp(lx: np.ndarray, xs: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Piecewise-linear in log-log; np.interp clamps to the end values outside the range."""
    return np.interp(lx, xs, ks)


BUILTIN_PROFILES = ("quick", "standard", "full")
INVALID = "an unreadable field, a NaN, infinite, zero or negative k or an invalid time"   # valid_mask, in words


def remeasure_command(run: dict, path: str | os.PathLike | None, bad: np.ndarray) -> str:
    """The ``autotune-install`` call that measures again the routines of the records ``bad``
    (same profile as the last run, so the same points are replaced)."""
    profile = run.get("profile")
    parts = ["autotune-install", "--profile", profile if profile in BUILTIN_PROFILES else "PROFILE.yaml"]
    if path is not None:
        parts += ["--db", shlex.quote(str(path))]
    names = {r.decode("ascii", "replace") for r in bad["routine"]}
    if not names <= set(ROUTINES):       # a routine's name unreadable: measure everything again
        return " ".join(parts)
    return " ".join(parts + ["--only", *sorted(names)]) if names else " ".join(parts)


def _nothing_valid(db: Database, path: str | os.PathLike | None) -> str:
    """Why a database without one usable record is unusable, with the command that rebuilds it."""
    where = path or "the database"
    if not len(db.records):
        return f"no measurements in {where}"
    return (f"all {len(db.records)} measurements in {where} have {INVALID}; "
            f"re-measure with `{remeasure_command(db.run, path, db.records[:0])}`")


def default_k(routine: str, threads: int) -> float:
    """Nominal seconds per flop for a routine at a thread count (the fallback)."""
    return 1.0 / (DEFAULT_RATE[ROUTINES[routine].level] * max(1, threads))


class SystemParameters:
    """What models consult: the measured table when usable, defaults (with one warning) otherwise.

    ``db``, ``path`` and ``reason`` say which file it came from, or why none is usable
    (``models.fitted.fitted_for(sp)`` reads the fitted models stored in the same file)."""

    def __init__(self, db: Database | None, reason: str = "", path: str | os.PathLike | None = None):
        self.db = db
        self.reason = reason
        self.path = path
        self._warned: set[str] = set()
        self.stale = stale_backends(db.backends) if db is not None else {}
        records = self._valid(db) if db is not None else None
        if records is not None and not len(records):
            self.db, self.reason = None, _nothing_valid(db, path)
        self.table = SPTable(self._usable(records)) if self.db is not None else None

    def _valid(self, db: Database) -> np.ndarray:
        """The records ``valid_mask`` accepts; the rest are dropped with one warning (unless none is left:
        then the database is unusable, and says so once when consulted)."""
        ok = valid_mask(db.records)
        if ok.all():
            return db.records
        bad = db.records[~ok]
        if ok.any():
            self._warn(f"ignoring {len(bad)} of {len(ok)} measurements with {INVALID} in "
                       f"{self.path or 'the database'}; re-measure them with "
                       f"`{remeasure_command(db.run, self.path, bad)}`")
        return db.records[ok]

    def _usable(self, records: np.ndarray) -> np.ndarray:
        """Records minus those of backends whose library changed since (warned once)."""
        if not self.stale:
            return records
        self._warn("ignoring measurements of changed backends: "
                   + "; ".join(f"{b} ({why})" for b, why in self.stale.items()))
        return records[~np.isin(records["backend"], [b.encode() for b in self.stale])]

    def has(self, routine: str, backend: str, threads: int, pattern: str = "square",
            dtype: str = "float64") -> bool:
        """Was this series measured? (False without a usable database.)"""
        return self.table is not None and self.table.has(routine, backend, threads, pattern, dtype)

    @property
    def source(self) -> str:
        return "database" if self.table is not None else "defaults"

    def k(self, routine: str, backend: str, threads: int, x, pattern: str = "square",
          param: float = 0.0, dtype: str = "float64") -> np.ndarray:
        """Measured-and-interpolated k, or the default for a miss (warned once per cause)."""
        if self.table is not None:
            try:
                return self.table.k(routine, backend, threads, x, pattern, param, dtype)
            except KeyError:
                self._warn(f"no measurement of {routine}/{pattern} on {backend} with {threads} "
                           f"thread(s) ({dtype}); using a nominal default")
        else:
            self._warn(f"system parameters unavailable ({self.reason}); using nominal defaults. "
                       "Run `autotune-install` to measure this machine.")
        return np.full(np.shape(x), default_k(routine, threads), dtype=float)

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warn_user(message)


_CACHE: dict[tuple, SystemParameters] = {}
_RECENT: dict[tuple, tuple[float, SystemParameters]] = {}


def _read(p) -> SystemParameters:
    """The system parameters in the file ``p``; an unusable file (whatever is wrong in it) gives the
    defaults with the reason, never an error: a tuned call then runs numpy/scipy."""
    try:
        return SystemParameters(load(p), path=p)
    except DatabaseError as exc:
        return SystemParameters(None, reason=str(exc), path=p)
    except Exception as exc:  # a damaged file's values that load could not tell apart from good ones
        return SystemParameters(None, reason=f"{p}: unreadable ({type(exc).__name__}: {exc})", path=p)


def load_sp(path: str | os.PathLike | None = None, *, refresh: bool = False) -> SystemParameters:
    """System parameters from ``path`` (default location if None); a bad database is a miss.

    Cached per (path, mtime), so a database rewritten by the probe is picked up on next load;
    the file is stat'ed at most once per RECHECK_SECONDS per path (tuned calls stay cheap).
    """
    recent_key = (path, os.environ.get(location.ENV_VAR))
    now = time.monotonic()
    hit = _RECENT.get(recent_key)
    if hit is not None and not refresh and now - hit[0] < RECHECK_SECONDS:
        return hit[1]
    p = location.resolve(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        mtime = None
    key = (str(p), mtime)
    if refresh or key not in _CACHE:
        _CACHE[key] = _read(p)
    _RECENT[recent_key] = (now, _CACHE[key])
    return _CACHE[key]
