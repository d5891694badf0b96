"""Fitted models (DESIGN §5, issue 5): polynomials in n that replace an analytical model where it fails.

``autotune-install --validate`` (``install_probe.validate``) times candidates on check points;
where the analytical model errs beyond the tolerance or mis-ranks the candidates it fits a
polynomial ``T(n) = sum c_i n^i`` per candidate series and stores it here, in use when its
check-point error is lower. Every entry keeps its provenance (method, check and fit points, the
errors of both models on the same check points, why it is or is not in use).

Selector integration (one call per ranked candidate)::

    from autotune.models.fitted import override
    seconds, source = override(cand, dims, analytical_seconds, sp)   # source: "fitted" | "analytical"

``cand`` is a ``Candidate`` (or a ``Ranked``), ``dims`` ``(m, k, n)`` for gemm or ``(n,)`` for
Cholesky, ``sp`` a ``SystemParameters`` (its lazily loaded ``sp.fitted``). It never raises:
anything missing gives back ``(analytical_seconds, "analytical")``. The fitted time is a pure
model time: apply the selector's charges (pool contention, ...) on top as for analytical ones.

Storage: HDF5 group ``/fitted/<machine>`` (``'default'``) of the SP database, written with
``store.replace_group``: one subgroup per entry (attributes for the scalars, datasets ``terms``,
``coefficients``, ``edges``, ``check_n``/``check_t``/``check_analytical``, ``fit_n``/``fit_t``).
"""
from __future__ import annotations

import bisect
import functools
import json
import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.models.fitting import FittedModel, TermSet

GROUP = "fitted"
FITTED_SCHEMA = 1
# A fitted model is trusted from its smallest fitted size up to this ratio beyond its largest. Not
# below: no check point lies there, and exact-fit polynomials dive towards zero under their sizes.
EXTRAPOLATION = 1.25

Key = tuple[str, str, int, int, int]   # (algorithm, backend, threads, param, variant)
_WARNED: set[str] = set()


@dataclass(eq=False)  # holds arrays
class FittedEntry:
    """One candidate series' fitted polynomial, its and the analytical model's check-point errors, provenance."""

    family: str
    algorithm: str
    backend: str
    threads: int
    param: int
    variant: int
    terms: tuple[tuple[int, int], ...]
    coefficients: np.ndarray            # (regions, len(terms))
    edges: np.ndarray                   # (regions + 1,) size edges
    method: str
    fitted_ape: float
    fitted_phi: float
    analytical_ape: float
    analytical_phi: float
    reason: str
    in_use: bool
    timestamp: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    check_n: np.ndarray = field(default_factory=lambda: np.zeros(0))
    check_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    check_analytical: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fit_n: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fit_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sigma: float = float("nan")         # relative residual sigma of the AICc winner
    akaike: str = "{}"                  # JSON: {"sets": [[term names, AICc weight], ...], "importances": {...}}
    # "polynomial": T(n) = sum c n^i per region; "eq4.10" (Strassen): T = M * leaves + A * additions,
    # the analytical model's two terms (models.gemm.strassen_parts) weighted by coefficients [[M, A]].
    form: str = "polynomial"

    def __post_init__(self) -> None:
        """Terms in TermSet's canonical order, coefficient columns permuted to match (one row per region)."""
        terms = [(int(i), int(j)) for i, j in self.terms]
        order = sorted(range(len(terms)), key=lambda c: (-terms[c][0], -terms[c][1]))
        self.terms = tuple(terms[c] for c in order)
        self.coefficients = np.atleast_2d(np.asarray(self.coefficients, dtype=float))[:, order]
        self.edges = np.asarray(self.edges, dtype=float).ravel()

    @property
    def key(self) -> Key:
        """(algorithm, backend, threads, param, variant): the candidate this entry models."""
        return (self.algorithm, self.backend, int(self.threads), int(self.param), int(self.variant))

    @classmethod
    def from_model(cls, family: str, key: Key, model: FittedModel, **kw) -> FittedEntry:
        """An entry holding ``model``'s polynomial (terms, coefficient rows, region edges, method)."""
        alg, be, threads, param, variant = key
        return cls(family, alg, be, int(threads), int(param), int(variant), model.termset.terms,
                   np.asarray(model.coefficients, float), np.asarray(model.edges, float), model.method, **kw)

    def covers(self, n: float) -> bool:
        """Whether ``n`` lies within the fitted size range (widened upwards by EXTRAPOLATION)."""
        return self.edges[0] <= n <= self.edges[-1] * EXTRAPOLATION

    def predict(self, n) -> np.ndarray:
        """Predicted seconds at sizes ``n`` (vectorised; each size in its region, nearest region outside).
        Polynomial entries only: eq. 4.10 entries need the system parameters (``predict_dims``)."""
        if self.form != "polynomial":
            raise ValueError(f"a {self.form} entry is evaluated with predict_dims(dims, sp)")
        n = np.asarray(n, dtype=float)
        region = np.searchsorted(self.edges[1:-1], n, side="right")
        design = TermSet(self.terms).design(n)
        return np.einsum("ij,ij->i", design, self.coefficients[region.ravel()]).reshape(n.shape)

    @functools.cached_property
    def _plain(self) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """Interior edges and per-region (power, coefficient) pairs as Python numbers, for ``predict_one``."""
        powers = [i for i, _ in self.terms]
        return self.edges[1:-1].tolist(), [list(zip(powers, row, strict=True)) for row in self.coefficients.tolist()]

    def predict_one(self, n: float) -> float:
        """Scalar prediction in plain Python (the selector calls it per candidate: no array overhead)."""
        inner, rows = self._plain
        return float(sum(c * n ** i for i, c in rows[bisect.bisect_right(inner, n)]))

    def predict_dims(self, dims: Sequence[float], sp) -> float:
        """Seconds for the problem ``dims``: the polynomial at its size, or eq. 4.10's weighted
        analytical terms (which need the system parameters ``sp``)."""
        if self.form == "polynomial":
            return self.predict_one(size_variable(dims))
        leaves, adds = eq410_terms(self.backend, self.threads, self.param, dims, sp)
        return float(self.coefficients[0, 0] * leaves + self.coefficients[0, 1] * adds)

    def __str__(self) -> str:
        state = "in use" if self.in_use else "not used"
        poly = " + ".join(f"{c:.4g}*{TermSet(self.terms).name(t)}" for t, c in zip(self.terms, self.coefficients[0],
                                                                                 strict=True))
        if self.form != "polynomial":
            poly = f"M = {self.coefficients[0, 0]:.4g} x leaves + A = {self.coefficients[0, 1]:.4g} x additions"
        return (f"{self.algorithm} p={self.param} v{self.variant} [{self.backend}, {self.threads}t] {self.method}: "
                f"{poly}; APE fitted {self.fitted_ape:.1f}% vs analytical {self.analytical_ape:.1f}% ({state}: "
                f"{self.reason})")


def eq410_terms(backend: str, threads: int, levels: int, dims: Sequence[float], sp) -> tuple[float, float]:
    """The two terms 001 eq. 4.10 weights by M(l) and A(l): the analytical Strassen model's leaf
    products and additions (``models.gemm.strassen_parts``) for the selector's Strassen candidate."""
    from autotune.models.gemm import strassen_parts
    from autotune.select.rank import STRASSEN_ADD_BACKEND

    m, k, n = dims
    leaves, adds = strassen_parts(m, k, n, [levels], backend, threads, sp, STRASSEN_ADD_BACKEND)
    return float(leaves[0]), float(adds[0])


def size_variable(dims: Sequence[float]) -> float:
    """The polynomial's size ``n``: ``cbrt(m k n)`` for gemm (as ``models.gemm.lookup_size``), ``n`` for Cholesky."""
    if len(dims) == 3:
        m, k, n = dims
        return (float(m) * float(k) * float(n)) ** (1.0 / 3.0)
    return float(dims[0])


class FittedModels:
    """The stored entries of one database, indexed by candidate key for the ones in use."""

    def __init__(self, entries: Sequence[FittedEntry] = (), reason: str = "", info: dict | None = None):
        self.entries = list(entries)
        self.reason = reason
        self.info = info or {}
        self._in_use = {e.key: e for e in self.entries if e.in_use}

    def __len__(self) -> int:
        return len(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def in_use(self) -> list[FittedEntry]:
        """Entries the selector uses."""
        return list(self._in_use.values())

    def predict(self, candidate_key: Key, dims: Sequence[float], sp=None) -> float | None:
        """Fitted seconds for a candidate at ``dims``; None without an in-use entry, outside its size
        range, or (eq. 4.10 entries) without system parameters ``sp``."""
        entry = self._in_use.get(tuple(candidate_key)) if self._in_use else None
        if entry is None or not entry.covers(size_variable(dims)) or (entry.form != "polynomial" and sp is None):
            return None
        t = entry.predict_dims(dims, sp)
        return t if math.isfinite(t) and t > 0 else None


def candidate_key(cand) -> Key:
    """Key of a ``Candidate`` (or of a ``Ranked``'s candidate, or a key tuple as is)."""
    cand = getattr(cand, "candidate", cand)
    if isinstance(cand, tuple):
        return cand
    return (cand.algorithm, cand.backend, int(cand.threads), int(cand.param), int(cand.variant))


def override(ranking_candidate, dims: Sequence[float], analytical_seconds: float, sp) -> tuple[float, str]:
    """(fitted seconds, "fitted") when a fitted model is in use for this candidate, else (analytical, "analytical")."""
    try:
        fitted = getattr(sp, "fitted", None)
        t = fitted.predict(candidate_key(ranking_candidate), dims, sp) if fitted else None
    except Exception:  # the selector must never fail because of a fitted model
        t = None
    return (t, "fitted") if t is not None else (analytical_seconds, "analytical")


# ----------------------------------------------------------------------------- storage

_SCALARS = ("family", "algorithm", "backend", "threads", "param", "variant", "method", "fitted_ape", "fitted_phi",
            "analytical_ape", "analytical_phi", "reason", "in_use", "timestamp", "sigma", "akaike", "form")
_OPTIONAL = {"sigma": float("nan"), "akaike": "{}", "form": "polynomial"}   # absent in older entries
_ARRAYS = ("coefficients", "edges", "check_n", "check_t", "check_analytical", "fit_n", "fit_t")


def save_fitted(path: str | os.PathLike, entries: Sequence[FittedEntry], *, machine: str = "default",
                info: dict | None = None) -> None:
    """Replace ``/fitted/<machine>`` of the database at ``path`` by ``entries`` (all other records kept)."""
    from autotune.db.store import replace_group

    def write(g) -> None:
        g.attrs["fitted_schema"] = FITTED_SCHEMA
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        g.attrs["info"] = json.dumps(info or {}, sort_keys=True, default=str)
        for i, e in enumerate(entries):
            sub = g.create_group(f"{i:04d}")
            for name in _SCALARS:
                value = getattr(e, name)
                sub.attrs[name] = value if not isinstance(value, bool | np.bool_) else int(value)
            sub.create_dataset("terms", data=np.asarray(e.terms, dtype=np.int64).reshape(-1, 2))
            for name in _ARRAYS:
                sub.create_dataset(name, data=np.asarray(getattr(e, name), dtype=float))

    replace_group(path, GROUP, machine, write)


def _read_entry(sub) -> FittedEntry:
    """One entry from its HDF5 subgroup (KeyError/ValueError/TypeError if damaged)."""
    kw = {name: sub.attrs[name] if name in sub.attrs or name not in _OPTIONAL else _OPTIONAL[name]
          for name in _SCALARS}
    for name in ("family", "algorithm", "backend", "method", "reason", "timestamp", "akaike", "form"):
        kw[name] = kw[name].decode() if isinstance(kw[name], bytes) else str(kw[name])
    for name in ("threads", "param", "variant"):
        kw[name] = int(kw[name])
    for name in ("fitted_ape", "fitted_phi", "analytical_ape", "analytical_phi"):
        kw[name] = float(kw[name])
    kw["in_use"] = bool(kw["in_use"])
    terms = tuple((int(i), int(j)) for i, j in np.asarray(sub["terms"][...]).reshape(-1, 2))
    arrays = {name: np.asarray(sub[name][...], dtype=float) for name in _ARRAYS}
    entry = FittedEntry(terms=terms, **kw, **arrays)
    coef = entry.coefficients
    if coef.ndim != 2 or coef.shape != (entry.edges.size - 1, len(terms)) or not np.isfinite(coef).all():
        raise ValueError(f"entry {sub.name}: coefficients {coef.shape} do not match {len(terms)} terms and "
                         f"{entry.edges.size - 1} regions")
    return entry


def load_fitted(path: str | os.PathLike | None = None, machine: str = "default") -> FittedModels:
    """The fitted models stored in the database at ``path``; never raises.

    No file or no ``/fitted/<machine>`` group (not validated yet): empty, silently. A damaged
    group or file: empty, with one RuntimeWarning per cause (like ``db.lookup``).
    """
    import h5py

    from autotune.db import location

    try:
        p = location.resolve(path)
        if not p.is_file():
            return FittedModels(reason=f"no database at {p}")
        with h5py.File(p, "r", locking=False) as f:
            if GROUP not in f or machine not in f[GROUP]:
                return FittedModels(reason=f"no fitted models in {p} (run `autotune-install --validate`)")
            g = f[GROUP][machine]
            if int(g.attrs.get("fitted_schema", -1)) != FITTED_SCHEMA:
                raise ValueError(f"fitted schema {g.attrs.get('fitted_schema')}, this autotune reads {FITTED_SCHEMA}")
            info = json.loads(g.attrs.get("info", "{}"))
            entries = [_read_entry(g[name]) for name in sorted(g)]
        return FittedModels(entries, info=info)
    except Exception as exc:  # h5py raises OSError/KeyError/ValueError for damaged files
        reason = f"fitted models unusable in {path} ({type(exc).__name__}: {exc}); using the analytical models"
        _warn(reason)
        return FittedModels(reason=reason)


def _warn(message: str) -> None:
    """Warn once per message."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


__all__ = ["EXTRAPOLATION", "FittedEntry", "FittedModels", "candidate_key", "eq410_terms", "load_fitted", "override",
           "save_fitted", "size_variable"]
