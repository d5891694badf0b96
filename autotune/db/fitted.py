"""Storage of fitted models (docs/models.md#fitted.polynomial): the ``/fitted/<machine>`` group.

``autotune-install --validate`` writes one subgroup per entry (``FittedRecord``: attributes for
the scalars, datasets ``terms``, ``coefficients``, ``edges``, ``check_n``/``check_t``/
``check_analytical``, ``fit_n``/``fit_t``) with ``store.replace_group``, and the group attributes
``updated`` and ``info`` (JSON: the validation summary, with the measured
composed-model risks). This module only reads and writes them; evaluating an entry and putting it
in use is ``autotune.models.fitted``.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .store import read_group_member, replace_group

GROUP = "fitted"
REBUILD = "autotune-install --validate --db {path}"

Key = tuple[str, str, int, int, int]   # (algorithm, backend, threads, param, variant)
# The ``param`` of an entry fitted over the algorithm parameter (a block size): a polynomial in
# (n, b) that serves every block of its series within the blocks it was fitted at.
ANY_PARAM = -1


@dataclass(eq=False)  # holds arrays
class FittedRecord:
    """One stored entry: a candidate series' fitted polynomial (or eq. 4.10 weights), its and the
    analytical model's check-point errors, and provenance. Data only (``models.fitted.FittedEntry``
    adds the evaluation)."""

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
    fit_a: np.ndarray = field(default_factory=lambda: np.zeros(0))     # each fitting point's parameter
    check_a: np.ndarray = field(default_factory=lambda: np.zeros(0))   # each check point's parameter

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


class FittedGroup(NamedTuple):
    """What ``read_fitted`` found: the entries, the group's ``info``, and why there are none (or "")."""

    entries: list
    info: dict
    reason: str


_SCALARS = ("family", "algorithm", "backend", "threads", "param", "variant", "method", "fitted_ape", "fitted_phi",
            "analytical_ape", "analytical_phi", "reason", "in_use", "timestamp", "sigma", "akaike", "form")
_OPTIONAL = {"sigma": float("nan"), "akaike": "{}", "form": "polynomial"}   # absent in older entries
_ARRAYS = ("coefficients", "edges", "check_n", "check_t", "check_analytical", "fit_n", "fit_t", "fit_a", "check_a")
_OPTIONAL_ARRAYS = ("fit_a", "check_a")      # entries in n alone may lack them


def save_fitted(path: str | os.PathLike, entries: Sequence[FittedRecord], *, machine: str = "default",
                info: dict | None = None) -> None:
    """Replace ``/fitted/<machine>`` of the database at ``path`` by ``entries`` (all other records kept)."""

    def write(g) -> None:
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


def _read_entry(sub, record: type[FittedRecord] = FittedRecord) -> FittedRecord:
    """One entry (as ``record``) from its HDF5 subgroup (KeyError/ValueError/TypeError if damaged)."""
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
    arrays = {name: np.asarray(sub[name][...], dtype=float) for name in _ARRAYS
              if name in sub or name not in _OPTIONAL_ARRAYS}
    entry = record(terms=terms, **kw, **arrays)
    coef = entry.coefficients
    if coef.ndim != 2 or coef.shape != (entry.edges.size - 1, len(terms)) or not np.isfinite(coef).all():
        raise ValueError(f"entry {sub.name}: coefficients {coef.shape} do not match {len(terms)} terms and "
                         f"{entry.edges.size - 1} regions")
    return entry


def read_fitted(path: str | os.PathLike | None = None, machine: str = "default",
                record: type[FittedRecord] = FittedRecord) -> FittedGroup:
    """The entries (built as ``record``) stored in the database at ``path``; never raises.

    No file or no ``/fitted/<machine>`` group (not validated yet): none, silently, with the reason.
    A damaged group or file: none, with one RuntimeWarning per cause (like ``db.lookup``).
    """
    entries, info, reason = read_group_member(
        path, GROUP, machine, lambda g: [_read_entry(g[name], record) for name in sorted(g)], "fitted models",
        REBUILD, "; using the analytical models")
    return FittedGroup(entries or [], info, reason)



__all__ = ["ANY_PARAM", "GROUP", "FittedGroup", "FittedRecord", "Key", "read_fitted", "save_fitted"]
