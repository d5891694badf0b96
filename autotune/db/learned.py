"""Storage of the on-line learned corrections: ``/learned/default``, dataset ``corrections``.

One plain row per candidate (``LEARNED_DTYPE``: the candidate's fields, the number of points,
scale, sigma, size range, and the ratio(n) terms and coefficients as JSON). Logging, fitting and
applying them is ``autotune.feedback.learn``; this module only reads and writes rows.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

import numpy as np

from .store import check_member, open_file, replace_group

GROUP = "learned"
MEMBER = "default"
REBUILD = "autotune refit --db {path}"

LEARNED_DTYPE = np.dtype([
    ("family", "S16"), ("algorithm", "S16"), ("backend", "S32"), ("threads", "i4"), ("param", "i4"),
    ("variant", "i4"), ("npts", "i4"), ("scale", "f8"), ("sigma", "f8"), ("n_lo", "f8"), ("n_hi", "f8"),
    ("terms", "S256"), ("coef", "S512"),
])
_TEXT = ("family", "algorithm", "backend")
_INTS = ("threads", "param", "variant", "npts")
_FLOATS = ("scale", "sigma", "n_lo", "n_hi")


def save_learned(path: str | os.PathLike, rows: Sequence[dict]) -> None:
    """Replace ``/learned/default`` by ``rows`` (dicts with LEARNED_DTYPE's fields; ``terms`` a list
    of (i, j) pairs, ``coef`` a list of floats), keeping the rest of the database."""
    data = np.array([tuple(json.dumps([list(t) for t in r[k]]) if k == "terms" else json.dumps(list(r[k]))
                           if k == "coef" else r[k] for k in LEARNED_DTYPE.names) for r in rows], dtype=LEARNED_DTYPE)

    def write(g) -> None:
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        g.create_dataset("corrections", data=data)

    replace_group(path, GROUP, MEMBER, write)


def read_learned(path: str | os.PathLike) -> list[dict]:
    """The stored rows as plain dicts ([] when there are none); raises on a damaged file or a
    schema no migration reads (SchemaMismatch, naming the command that rebuilds it)."""
    with open_file(path) as f:
        if GROUP not in f or MEMBER not in f[GROUP]:
            return []
        g = f[GROUP][MEMBER]
        check_member(f, GROUP, g, path, REBUILD)
        rows = g["corrections"][()]
    return [_row(r) for r in rows]


def _row(r) -> dict:
    """One stored row as a dict of Python values."""
    out = {k: r[k].decode() for k in _TEXT}
    out.update({k: int(r[k]) for k in _INTS})
    out.update({k: float(r[k]) for k in _FLOATS})
    out["terms"] = tuple(tuple(t) for t in json.loads(r["terms"].decode()))
    out["coef"] = tuple(json.loads(r["coef"].decode()))
    return out


__all__ = ["GROUP", "LEARNED_DTYPE", "MEMBER", "read_learned", "save_learned"]
