"""The root's own data-movement costs in the distributed models: what it does to the user's
matrices before the first message and after the last one (check, copy, pack, first touch).

Shared by ``distributed_gemm`` and ``distributed_cholesky`` so both charge the same work the same
way; every cost comes from a probe series (``sp``) or the comm probe's platform (``cp``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autotune.core.assumptions import COPY_SHARE, FILL_SHARE, LOOP_SHARE, READ_SHARE
from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import SPLookup

PACK_BACKEND = "numba-reference"    # Numba loops: packing, Strassen additions
# Hand-set shares of an add pass (copy, cold read, fill, in-loop move): autotune/core/assumptions.py
# (docs/models.md#movement).
COLD_SIDE = 1 << 14                 # an x-by-x view no cache holds: the add series' largest sizes

__all__ = ["COPY_SHARE", "FILL_SHARE", "LOOP_SHARE", "PACK_BACKEND", "READ_SHARE", "checked_copy",
           "cold_copies", "cold_k", "cold_reads", "copies", "copy", "fill", "finite_check", "first_touch", "in_loop",
           "LinkCost", "suffix_sums", "k", "pack", "passes", "run_length"]


def k(sp: SPLookup, routine: str, backend: str, threads: int, x: float, pattern: str = "square",
      param: float = 0.0) -> float:
    """``sp.k`` at one size; a pattern the database never measured falls back to ``square``
    (same routine, size x) rather than to the nominal default."""
    table = getattr(sp, "table", None)
    if pattern != "square" and table is not None and not table.has(routine, backend, int(threads), pattern):
        pattern, param = "square", 0.0
    return float(np.asarray(sp.k(routine, backend, threads, max(float(x), 1.0), pattern, param)))


def add_k(sp: SPLookup, x: float) -> float:
    """Seconds per element of a one-thread Numba addition on x-by-x views (pattern ``view``)."""
    return k(sp, "add", PACK_BACKEND, 1, x, "view")


def passes(sp: SPLookup, elems: float) -> float:
    """Seconds of one memory pass (copy/addition) over ``elems`` float64 elements."""
    if elems <= 0:
        return 0.0
    return float(elems) * add_k(sp, math.sqrt(elems))


def copy(sp: SPLookup, elems: float) -> float:
    """Seconds of copying ``elems`` elements between buffers (slice assignment)."""
    return float(copies(sp, np.asarray(float(elems))))


def copies(sp: SPLookup, elems: np.ndarray) -> np.ndarray:
    """``copy`` of each element count in ``elems`` (vectorised; 0 where elems <= 0)."""
    e = np.asarray(elems, float)
    return COPY_SHARE * np.array([passes(sp, v) for v in e.ravel()]).reshape(e.shape)


def update_traffic(sp: SPLookup, elems, timed) -> np.ndarray:
    """Seconds a rank-b update of ``elems`` elements of C spends moving C beyond what the probe's
    gemm paid on its own C of ``timed`` elements: a read and a write of each element (``copies``)
    at the cost per element of memory that size, less that of the timed size (the probe's C stays
    in cache between its repetitions, a trailing matrix larger than the caches does not)."""
    e, t = (np.maximum(np.asarray(v, float), 1.0) for v in np.broadcast_arrays(elems, timed))
    per = copies(sp, e) / e - copies(sp, t) / t
    return np.where(np.asarray(elems, float) > 0, e * np.maximum(per, 0.0), 0.0)


def cold_k(sp: SPLookup) -> float:
    """Seconds per element of an addition on memory no cache holds (the add series' largest sizes)."""
    return add_k(sp, COLD_SIDE)


def _cold(sp: SPLookup, share: float, elems) -> np.ndarray:
    """``share`` of an out-of-cache pass over each of ``elems`` elements (0 where elems <= 0)."""
    return share * np.maximum(np.asarray(elems, float), 0.0) * cold_k(sp)


def in_loop(sp: SPLookup, elems, share: float | None = None):
    """Extra seconds of moving ``elems`` elements inside a distributed loop, on top of the probe's
    transfer or copy time: ``share`` of an out-of-cache pass per element (the platform's
    calibration, ``cp.loop_share``; None: ``LOOP_SHARE``)."""
    return _cold(sp, LOOP_SHARE if share is None else share, elems)


def cold_copies(sp: SPLookup, elems) -> np.ndarray:
    """Seconds of copying ``elems`` elements out of memory the caches no longer hold (a SUMMA
    Y-panel packed from the local Y the previous update evicted): one out-of-cache pass each."""
    return _cold(sp, 1.0, elems)


def cold_reads(sp: SPLookup, elems) -> np.ndarray:
    """Seconds of reading ``elems`` elements the caches no longer hold (``READ_SHARE`` of an
    out-of-cache pass each): a finiteness check, or a SUMMA X-panel its owner multiplies
    straight out of its local X."""
    return _cold(sp, READ_SHARE, elems)


def fill(sp: SPLookup, elems: np.ndarray) -> np.ndarray:
    """Seconds of zeroing ``elems`` elements of memory the caches no longer hold."""
    return _cold(sp, FILL_SHARE, elems)


def pack(sp: SPLookup, cp: CommParams, elems: float, run: float, kind: str = "take") -> float:
    """The root's block-cyclic packing ("take") or unpacking ("put") of ``elems`` column-major
    elements in contiguous runs of ``run``: the comm probe's measured cost, else one memory pass."""
    measured = getattr(cp, "pack_time", None)
    t = measured(kind, elems, run) if measured is not None else None
    return passes(sp, elems) if t is None else t


def run_length(rows: int, parts: int, b: int) -> int:
    """Contiguous run length of a column-major matrix with ``rows`` rows split block-cyclically
    (block b) over ``parts`` process rows: a block, or the whole column when not split."""
    return min(b, rows) if parts > 1 else rows


def finite_check(sp: SPLookup, rows: int, cols: int, backend: str, threads: int, cp: CommParams | None = None) -> float:
    """The root's finiteness check of a rows x cols matrix: one gemv with a ones vector on the
    plan's library and threads (``distributed.checks.all_finite``), 2 rows cols flops, but
    no faster than the comm probe's timing of the check out of cache (``cp.check_time``), or,
    without one, one read of a matrix the caches no longer hold (``READ_SHARE`` of a pass)."""
    if rows * cols <= 0:
        return 0.0
    elems = float(rows) * cols
    flops = 2.0 * elems * k(sp, "gemv", backend, threads, math.sqrt(elems))
    timer = getattr(cp, "check_time", None)
    floor = timer(backend, elems) if timer is not None else None
    return max(flops, float(cold_reads(sp, elems)) if floor is None else floor)


def checked_copy(sp: SPLookup, cp: CommParams, elems: float) -> float:
    """The root's checked Fortran copy of a C-ordered matrix (a transposing copy with the finiteness
    check, one pass): the comm probe's timing (``cp.fortran_copy_time``), else a plain copy."""
    timer = getattr(cp, "fortran_copy_time", None)
    t = timer(elems) if timer is not None else None
    return copy(sp, elems) if t is None else float(t)


def first_touch(cp: CommParams, nbytes: float) -> float:
    """Page faults of a new array of ``nbytes`` as it is first written (``cp.first_touch_time``;
    nothing for communication parameters that do not model them)."""
    timer = getattr(cp, "first_touch_time", None)
    return float(timer(float(nbytes))) if timer is not None else 0.0


@dataclass(frozen=True)
class LinkCost:
    """(ts, tw) of a point-to-point message within a host and between hosts (the comm probe's)."""

    ts_host: float
    tw_host: float
    ts_net: float
    tw_net: float

    def seconds(self, nbytes, net) -> np.ndarray:
        nbytes, net = np.asarray(nbytes, float), np.asarray(net, bool)
        t = np.where(net, self.ts_net + self.tw_net * nbytes, self.ts_host + self.tw_host * nbytes)
        return np.where(nbytes > 0, t, 0.0)

    def move(self, volume, rank_host) -> float:
        """Seconds to move ``volume[i, j]`` bytes from rank i to rank j: the busiest rank's messages."""
        v = np.asarray(volume, float)
        h = np.asarray(rank_host)
        t = self.seconds(v, h[:, None] != h[None, :])
        np.fill_diagonal(t, 0.0)
        return float(max(t.sum(axis=1).max(), t.sum(axis=0).max()))


def suffix_sums(x: np.ndarray) -> np.ndarray:
    """Suffix sums along the last axis, with a trailing 0: out[..., J] = sum(x[..., J:]) (the steps left
    of a blocked factorisation)."""
    out = np.zeros(x.shape[:-1] + (x.shape[-1] + 1,))
    out[..., :-1] = np.cumsum(x[..., ::-1], axis=-1)[..., ::-1]
    return out
