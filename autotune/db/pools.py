"""Cross-call costs of thread pools: ``/pools/default``.

What a library call costs beyond its time in a loop of its own, when the call before it ran on
some library at some thread count and ended ``gap`` seconds ago (that library's pool may still
spin on the cores), or after an idle spell (``COLD``: its own pool has to wake up). Measured by
``install_probe.pools`` as rows (from, to, gap, the call's own time, its time after the switch);
``Transitions.extra`` interpolates them for the selector (docs/models.md#pools.switch).
"""
from __future__ import annotations

import functools
import json
import os
import time
import weakref
from collections.abc import Iterable

import numpy as np

from autotune.backends.pools import PoolState

from ._warn import warn_user
from .lookup import SystemParameters
from .store import kept_with, read_member, readable_rows, replace_group

GROUP = "pools"
MEMBER = "default"
REBUILD = "autotune-install --profile standard --db {path}"
COLD = ""            # from_backend of the rows measured after an idle spell
ROW_DTYPE = np.dtype([("from_backend", "S24"), ("from_threads", "<i4"), ("to_backend", "S24"),
                      ("to_threads", "<i4"), ("gap", "<f8"), ("x", "<i8"), ("t_alone", "<f8"),
                      ("t_after", "<f8")])
Key = tuple[str, int, str, int]


class Transitions:
    """Measured extra seconds of a call after another, by (from library, threads) -> (to library,
    threads) and the call's own time, in a tight alternation (gap 0); 0 where nothing was measured.
    Rows at longer gaps only set the hot window."""

    def __init__(self, rows: np.ndarray | None = None, info: dict | None = None):
        self.rows = np.zeros(0, ROW_DTYPE) if rows is None else np.asarray(rows, ROW_DTYPE)
        self.info = dict(info or {})
        tight = self.rows[self.rows["gap"] == 0.0]
        keys = [_key(r) for r in tight]
        self._curves: dict[Key, tuple[np.ndarray, np.ndarray]] = {
            key: _curve(tight[[k == key for k in keys]]) for key in set(keys)}

    @property
    def empty(self) -> bool:
        return not self._curves

    @property
    def hot_window(self) -> float:
        """Seconds after a call during which its pool was measured to cost the next call something."""
        return float(self.info.get("hot_window", 0.0))

    @functools.cached_property
    def foreign_gap(self) -> float:
        """The shortest measured multi-threaded call: a calling thread that worked longer than this
        between two tuned calls may have made a call of its own that woke numpy's or scipy's pool
        (shorter calls run on one thread; the time around a tuned call is tens of microseconds)."""
        multi = self.rows[(self.rows["to_threads"] > 1) & (self.rows["from_backend"] != COLD.encode())]
        return float(multi["t_alone"].min()) if multi.size else float("inf")

    def extra(self, prev: PoolState | None, backend: str, threads: int, seconds: float) -> float:
        """Extra seconds of a call on ``backend`` at ``threads`` that takes ``seconds`` in a loop of its
        own, right after ``prev`` (None: after an idle spell; a backend with no measured pool then
        pays ``cold_machine``)."""
        key = (COLD, 0, backend, threads) if prev is None else (prev.backend, prev.threads, backend, threads)
        curve = self._curves.get(key)
        if curve is not None:
            return _at(curve, seconds)
        return self.cold_machine(seconds) if prev is None and not self.measured(backend) else 0.0

    def measured(self, backend: str) -> bool:
        """Whether any transition into ``backend`` was measured (it has a pool the probe saw)."""
        return any(to == backend for _, _, to, _ in self._curves)

    def cold_machine(self, seconds: float) -> float:
        """What any call of ``seconds`` pays after an idle spell with no pool to wake (caches, TLB and
        clock gone cold): the least cold extra of a one-thread call on a measured library. A kernel
        with no measured pool (Numba, our own) is charged this, so the pools' wake-up is all that
        sets the libraries apart after a spell."""
        ones = [c for (frm, _, _, threads), c in self._curves.items() if frm == COLD and threads == 1]
        return min((_at(c, seconds) for c in ones), default=0.0)

    def pairs(self) -> list[Key]:
        return sorted(self._curves)

    def curve(self, key: Key) -> tuple[np.ndarray, np.ndarray]:
        """(own times, median extra seconds) of one measured transition, by operand size."""
        return self._curves[key]


def _at(curve: tuple[np.ndarray, np.ndarray], seconds: float) -> float:
    """A transition's extra seconds for a call of ``seconds`` (interpolated in log time, >= 0)."""
    own, extra = curve
    return max(0.0, float(np.interp(np.log(max(seconds, 1e-9)), np.log(own), extra)))


def _key(row) -> Key:
    return (row["from_backend"].decode(), int(row["from_threads"]), row["to_backend"].decode(), int(row["to_threads"]))


def _curve(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(own time, median extra) per operand size of one transition's rows, by increasing own time."""
    sizes = np.unique(rows["x"])
    own = np.array([np.median(rows["t_alone"][rows["x"] == x]) for x in sizes])
    extra = np.array([np.median((rows["t_after"] - rows["t_alone"])[rows["x"] == x]) for x in sizes])
    order = np.argsort(own)
    return own[order], extra[order]


def save_transitions(path: str | os.PathLike, rows: Iterable, info: dict | None = None) -> None:
    """Write the measured transitions (replacing earlier ones), keeping the rest of the database."""
    table = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, ROW_DTYPE)

    def write(g) -> None:
        g.create_dataset("rows", data=table)
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        g.attrs["info"] = json.dumps(info or {}, sort_keys=True, default=str)

    replace_group(path, GROUP, MEMBER, write)


def load_transitions(path: str | os.PathLike | None) -> Transitions:
    """The stored transitions, empty when absent or unreadable (one warning); cached per file version."""
    return read_member(path, GROUP, MEMBER, _parse, Transitions, "thread-pool transition costs", REBUILD)


_FOR_SP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def transitions_for(sp: SystemParameters) -> Transitions:
    """The transitions stored with the system parameters ``sp`` (read once per ``sp`` object,
    ``store.kept_with``); empty without a path."""
    return kept_with(sp, _FOR_SP, lambda: load_transitions(getattr(sp, "path", None)))


def _parse(g) -> Transitions:
    if g["rows"].dtype != ROW_DTYPE:
        raise ValueError(f"pool transition rows of dtype {g['rows'].dtype}, expected {ROW_DTYPE}")
    info = json.loads(g.attrs.get("info", "{}"))
    info["updated"] = str(g.attrs.get("updated", ""))
    rows = g["rows"][()]
    ok = readable_rows(rows) & (rows["gap"] >= 0) & (rows["x"] >= 1) & (rows["t_alone"] > 0) & (rows["t_after"] > 0)
    if not ok.all():
        warn_user(f"ignoring {int((~ok).sum())} of {len(ok)} unreadable thread-pool rows in {g.file.filename}")
    return Transitions(rows[ok], info)


__all__ = ["COLD", "GROUP", "ROW_DTYPE", "Transitions", "load_transitions", "save_transitions", "transitions_for"]
