"""Storage of the distributed models' phase factors: ``/fitted_phases/<platform key>``.

Each member holds the attributes ``factors`` (JSON: one plain record per factor, the fields of
``models.fitted_phases.PhaseFactor``), ``plans`` (JSON: one record per fitted T(n, p),
``models.fitted_plans.PlanFit.record``; absent in older databases), ``updated`` and ``info``
(JSON). Fitting the factors and applying them is ``autotune.models.fitted_phases``; this module
only reads and writes records.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable

from .store import read_member, replace_group

GROUP = "fitted_phases"
REBUILD = "autotune-install --mpi --np P --db {path}"


def save_phase_records(path: str | os.PathLike, key: str, rows: Iterable[dict], info: dict | None = None,
                       plans: Iterable[dict] = ()) -> None:
    """Write one platform's factor records and plan-model records, keeping the rest of the database."""
    rows, plans = [dict(r) for r in rows], [dict(r) for r in plans]

    def write(g) -> None:
        g.attrs["factors"] = json.dumps(rows)
        g.attrs["plans"] = json.dumps(plans)
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        g.attrs["info"] = json.dumps(info or {}, sort_keys=True, default=str)

    replace_group(path, GROUP, key, write)


def load_phase_records(path: str | os.PathLike | None, key: str | None, build: Callable[[list[dict], dict], object],
                       empty: Callable[[], object]):
    """``build(records, meta)`` of the platform's stored factors (``meta``: ``{"info": dict,
    "updated": date}``), ``empty()`` when absent or unreadable (one warning); cached per file version."""
    return read_member(path, GROUP, key, lambda g: build(json.loads(g.attrs["factors"]), _meta(g)), empty,
                       "phase factors", REBUILD)


def _meta(g) -> dict:
    """What the factors were fitted from, when they were stored, and the plan-model records."""
    return {"info": json.loads(g.attrs.get("info", "{}")), "updated": str(g.attrs.get("updated", "")),
            "plans": json.loads(g.attrs.get("plans", "[]"))}


__all__ = ["GROUP", "load_phase_records", "save_phase_records"]
