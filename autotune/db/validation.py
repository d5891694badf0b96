"""Storage of the validation step's check points: ``/validation/<machine>``.

``autotune-install --validate`` (``install_probe.validate``) writes one row per candidate and
check size (``POINT_DTYPE``: the candidate, the size, the analytical prediction, the measured
time, the prediction of the model in use, which model that is and why) and the attributes
``info`` (JSON: the validation summary) and ``updated``. ``autotune report`` reads them back.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .store import read_group_member, replace_group

GROUP = "validation"
REBUILD = "autotune-install --validate --db {path}"

POINT_DTYPE = np.dtype([
    ("family", "S16"), ("algorithm", "S16"), ("backend", "S32"), ("threads", "i4"), ("param", "i4"),
    ("variant", "i4"), ("n", "i8"), ("predicted", "f8"), ("measured", "f8"), ("in_use", "f8"),
    ("model", "S16"), ("reason", "S256"),
])
_TEXT = ("family", "algorithm", "backend", "model", "reason")
_INTS = ("threads", "param", "variant", "n")
_FLOATS = ("predicted", "measured", "in_use")


class ValidationGroup(NamedTuple):
    """What ``read_validation`` found: the check points, the summary, and why there are none (or "")."""

    points: list[dict]
    info: dict
    reason: str


def save_validation(path: str | os.PathLike, points: Sequence[dict], *, machine: str = "default",
                    info: dict | None = None) -> None:
    """Replace ``/validation/<machine>`` by ``points`` (dicts with POINT_DTYPE's fields), keeping the rest."""
    rows = np.array([tuple(_field(p, k) for k in POINT_DTYPE.names) for p in points], dtype=POINT_DTYPE)

    def write(g) -> None:
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        g.attrs["info"] = json.dumps(info or {}, sort_keys=True, default=str)
        g.create_dataset("points", data=rows)

    replace_group(path, GROUP, machine, write)


def _field(point: dict, name: str):
    """One field of a point as stored (text truncated to its width)."""
    value = point[name]
    return str(value).encode()[:POINT_DTYPE[name].itemsize] if name in _TEXT else value


def read_validation(path: str | os.PathLike | None = None, machine: str = "default") -> ValidationGroup:
    """The stored check points; none, with the reason, when absent (silently) or unreadable
    (one RuntimeWarning per cause). Never raises."""
    rows, info, reason = read_group_member(path, GROUP, machine, lambda g: [_row(r) for r in g["points"][()]],
                                           "validation results", REBUILD)
    return ValidationGroup(rows or [], info, reason)


def _row(r) -> dict:
    """One stored row as a dict of Python values."""
    out = {k: r[k].decode() for k in _TEXT}
    out.update({k: int(r[k]) for k in _INTS})
    out.update({k: float(r[k]) for k in _FLOATS})
    return out


__all__ = ["GROUP", "POINT_DTYPE", "ValidationGroup", "read_validation", "save_validation"]
