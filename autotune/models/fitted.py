"""Fitted models (docs/models.md#fitted.polynomial): polynomials in n, or in n and the block b,
that replace an analytical model where it fails.

``autotune-install --validate`` (``install_probe.validate``) times candidates on check points;
where the analytical model errs beyond the tolerance or mis-ranks the candidates it fits a
polynomial ``T(n) = sum c_i n^i`` per candidate series, and one ``T(n, b) = sum c_ij n^i b^j`` per
blocked series over its blocks (kept under ``param = ANY_PARAM`` for the record) that serves a
block, as its polynomial in n at that b, where it beats the block's own fit, and stores them here,
in use when their check-point error is lower. Every entry keeps its provenance (method, check and
fit points, the errors of both models on the same check points, why it is or is not in use).

Selector integration (one call per ranked candidate)::

    from autotune.models.fitted import override
    seconds, source = override(cand, dims, analytical_seconds, sp)   # source: "fitted" | "analytical"

``cand`` is a ``Candidate`` (or a ``Ranked``), ``dims`` ``(m, k, n)`` for gemm or ``(n,)`` for
Cholesky, ``sp`` a ``SystemParameters`` (``fitted_for(sp)``: its file's entries, read once). It never raises:
anything missing gives back ``(analytical_seconds, "analytical")``. The fitted time is a pure
model time: apply the selector's charges (pool contention, ...) on top as for analytical ones.

Storage: HDF5 group ``/fitted/<machine>`` (``'default'``) of the SP database, read and written by
``autotune.db.fitted`` (``save_fitted`` is re-exported here); this module evaluates the entries.
"""
from __future__ import annotations

import bisect
import functools
import math
import os
import weakref
from collections.abc import Sequence

import numpy as np

from autotune.db.fitted import ANY_PARAM, GROUP, FittedRecord, Key, read_fitted, save_fitted
from autotune.db.lookup import SPLookup, SystemParameters
from autotune.db.store import kept_with
from autotune.models.fit_terms import FittedModel, TermSet
from autotune.models.gemm import STRASSEN_ADD_BACKEND, strassen_parts

# A fitted model is trusted from its smallest fitted size up to this ratio beyond its largest. Not
# below: no check point lies there, and exact-fit polynomials dive towards zero under their sizes.
EXTRAPOLATION = 1.25
# SystemParameters -> its FittedModels, read on first use (``fitted_for``), dropped with it.
_FOR_SP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class FittedEntry(FittedRecord):
    """One candidate series' fitted polynomial, its and the analytical model's check-point errors,
    provenance: the stored fields (``db.fitted.FittedRecord``) and their evaluation."""

    @classmethod
    def from_model(cls, family: str, key: Key, model: FittedModel, **kw) -> FittedEntry:
        """An entry holding ``model``'s polynomial (terms, coefficient rows, region edges, method)."""
        alg, be, threads, param, variant = key
        return cls(family, alg, be, int(threads), int(param), int(variant), model.termset.terms,
                   np.asarray(model.coefficients, float), np.asarray(model.edges, float), model.method, **kw)

    @property
    def over_param(self) -> bool:
        """Whether the entry is a blocked series' polynomial in (n, b) (kept for the record; its
        blocks are served by ``at``)."""
        return self.param == ANY_PARAM

    def covers(self, n: float) -> bool:
        """Whether ``n`` lies within the fitted size range (widened upwards by EXTRAPOLATION)."""
        return self.edges[0] <= n <= self.edges[-1] * EXTRAPOLATION

    def at(self, param: int, **kw) -> FittedEntry:
        """This (n, b) polynomial at block ``param``: the polynomial in n that serves that one
        candidate (``kw``: its scores and check points), keeping the fit's provenance."""
        powers = sorted({i for i, _ in self.terms}, reverse=True)
        coef = [[sum(c * float(param) ** j for (i, j), c in zip(self.terms, row, strict=True) if i == p)
                 for p in powers] for row in self.coefficients.tolist()]
        return FittedEntry(self.family, self.algorithm, self.backend, self.threads, int(param), self.variant,
                           tuple((p, 0) for p in powers), np.array(coef), self.edges, f"{self.method} over b",
                           fit_n=self.fit_n, fit_t=self.fit_t, fit_a=self.fit_a, sigma=self.sigma,
                           akaike=self.akaike, **kw)

    @property
    def termset(self) -> TermSet:
        return TermSet(self.terms, "b")

    def predict(self, n, a=None) -> np.ndarray:
        """Predicted seconds at sizes ``n`` (vectorised; each size in its region, nearest region outside).
        Polynomial entries only: ``eq4.10`` entries (docs/models.md#fitted.strassen) need the system
        parameters (``predict_dims``)."""
        if self.form != "polynomial":
            raise ValueError(f"a {self.form} entry is evaluated with predict_dims(dims, sp)")
        shape = np.broadcast_shapes(np.shape(n), np.shape(a) if a is not None else ())
        n = np.broadcast_to(np.asarray(n, dtype=float), shape)
        region = np.searchsorted(self.edges[1:-1], n, side="right")
        design = self.termset.design(n, a)
        return np.einsum("ij,ij->i", design, self.coefficients[region.ravel()]).reshape(shape)

    @functools.cached_property
    def _plain(self) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """Interior edges and per-region (power, coefficient) pairs as Python numbers, for ``predict_one``."""
        powers = [i for i, _ in self.terms]
        return self.edges[1:-1].tolist(), [list(zip(powers, row, strict=True)) for row in self.coefficients.tolist()]

    def predict_one(self, n: float) -> float:
        """Scalar prediction in plain Python (the selector calls it per candidate: no array overhead;
        an entry in n alone)."""
        inner, rows = self._plain
        return float(sum(c * n ** i for i, c in rows[bisect.bisect_right(inner, n)]))

    def predict_dims(self, dims: Sequence[float], sp: SPLookup | None) -> float:
        """Seconds for the problem ``dims``: the polynomial at its size, or the weighted
        analytical terms of docs/models.md#fitted.strassen (which need the system parameters ``sp``)."""
        if self.form == "polynomial":
            return self.predict_one(size_variable(dims))
        assert sp is not None, "eq4.10 entries weight the analytical terms of the system parameters"
        leaves, adds = eq410_terms(self.backend, self.threads, self.param, dims, sp)
        return float(self.coefficients[0, 0] * leaves + self.coefficients[0, 1] * adds)

    def __str__(self) -> str:
        state = "in use" if self.in_use else "not used"
        poly = " + ".join(f"{c:.4g}*{self.termset.name(t)}" for t, c in zip(self.terms, self.coefficients[0],
                                                                        strict=True))
        if self.form != "polynomial":
            poly = f"M = {self.coefficients[0, 0]:.4g} x leaves + A = {self.coefficients[0, 1]:.4g} x additions"
        param = (f"b={self.fit_a.min():.0f}..{self.fit_a.max():.0f}" if self.over_param and self.fit_a.size
                 else f"p={self.param}")
        return (f"{self.algorithm} {param} v{self.variant} [{self.backend}, {self.threads}t] {self.method}: "
                f"{poly}; APE fitted {self.fitted_ape:.1f}% vs analytical {self.analytical_ape:.1f}% ({state}: "
                f"{self.reason})")


def eq410_terms(backend: str, threads: int, levels: int, dims: Sequence[float], sp: SPLookup) -> tuple[float, float]:
    """The two terms docs/models.md#fitted.strassen weights by M(l) and A(l): the analytical
    Strassen model's leaf products and additions (``models.gemm.strassen_parts``) for the selector's
    Strassen candidate."""
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

    def predict(self, candidate_key: Key, dims: Sequence[float], sp: SPLookup | None = None) -> float | None:
        """Fitted seconds for a candidate at ``dims``; None without an in-use entry, outside its size
        range, or (``eq4.10`` entries, docs/models.md#fitted.strassen) without system parameters ``sp``."""
        entry = self._in_use.get(candidate_key) if self._in_use else None
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


def override(ranking_candidate, dims: Sequence[float], analytical_seconds: float, sp: SystemParameters) -> tuple[float,
             str]:
    """(fitted seconds, "fitted") when a fitted model is in use for this candidate, else (analytical, "analytical")."""
    try:
        fitted = fitted_for(sp)
        t = fitted.predict(candidate_key(ranking_candidate), dims, sp) if fitted else None
    except Exception:  # the selector must never fail because of a fitted model
        t = None
    return (t, "fitted") if t is not None else (analytical_seconds, "analytical")


def load_fitted(path: str | os.PathLike | None = None, machine: str = "default") -> FittedModels:
    """The fitted models stored in the database at ``path`` (read by ``db.fitted.read_fitted``); never raises.

    No file or no ``/fitted/<machine>`` group (not validated yet): empty, silently. A damaged
    group or file: empty, with one RuntimeWarning per cause (like ``db.lookup``).
    """
    entries, info, reason = read_fitted(path, machine, FittedEntry)
    return FittedModels(entries, reason=reason, info=info)


def fitted_for(sp: SystemParameters) -> FittedModels | None:
    """The fitted models stored with the system parameters ``sp`` (``db.SystemParameters``, or a view
    forwarding its ``db``/``path``/``reason``), read on first use and kept as long as ``sp`` is.

    None for an object without those (a model test's stand-in, a contended view): no fitted models.
    Without a usable database (or its path) nothing is read: empty, with ``sp``'s reason.
    """
    try:
        db, path = sp.db, sp.path
    except AttributeError:
        return None

    def read() -> FittedModels:
        if db is None or path is None:      # no usable (or a foreign) database: nor its fitted models
            return FittedModels(reason=getattr(sp, "reason", "") or "no database path")
        return load_fitted(path)
    return kept_with(sp, _FOR_SP, read)


__all__ = ["ANY_PARAM", "EXTRAPOLATION", "GROUP", "FittedEntry", "FittedModels", "candidate_key", "eq410_terms",
           "fitted_for", "load_fitted", "override", "save_fitted", "size_variable"]
