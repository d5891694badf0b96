"""Point-stencil sweeps over a rectangle of a 2-D array (Numba, serial and threaded) and numpy's.

``sweep(src, dst, di, dj, w, r0, r1, c0, c1)`` sets ``dst[i, j] = sum_k w[k] src[i + di[k], j + dj[k]]``
for rows [r0, r1) and columns [c0, c1): only the nonzero points of a (2R+1) x (2R+1) weight
matrix are visited. ``cross5`` is the 5-point case unrolled (the heat step); the ``_par`` forms
split the rows over Numba's threads. The numpy forms do the same with slices (what a user writes
by hand). Interior and border passes are separate calls on separate rectangles, so each can run
on its own (while messages travel, 004 §3.2.3). ``Sweeper`` picks the kernel for a stencil given
by its weights, or runs a user's Numba function ``kernel(src, dst, r0, r1, c0, c1)`` (as PETSc's
DMDA or Devito let users write their own point update).
"""
from __future__ import annotations

import types
from collections.abc import Callable

import numpy as np
from numba import njit, prange

from autotune.geometry.halo import Rect

_JIT = {"cache": True, "nogil": True, "boundscheck": False}


def _cross5(src, dst, w, r0, r1, c0, c1):
    """5-point sweep: w = (centre, north, south, west, east)."""
    wc, wn, ws, ww, we = w[0], w[1], w[2], w[3], w[4]
    for i in prange(r0, r1):
        for j in range(c0, c1):
            dst[i, j] = (wc * src[i, j] + wn * src[i - 1, j] + ws * src[i + 1, j]
                         + ww * src[i, j - 1] + we * src[i, j + 1])


def _points(src, dst, di, dj, w, r0, r1, c0, c1):
    """General point stencil over the rectangle."""
    for i in prange(r0, r1):
        for j in range(c0, c1):
            acc = 0.0
            for k in range(w.size):
                acc += w[k] * src[i + di[k], j + dj[k]]
            dst[i, j] = acc


def _builds(fn):
    """``fn`` compiled serial (``prange`` runs as ``range``) and with its rows over Numba's threads;
    the parallel build compiles a renamed copy, so Numba's cache keeps the two apart."""
    name = fn.__name__.lstrip("_") + "_par"
    twin = types.FunctionType(fn.__code__.replace(co_name=name, co_qualname=name), fn.__globals__, name)
    return njit(**_JIT)(fn), njit(parallel=True, **_JIT)(twin)


cross5, cross5_par = _builds(_cross5)
points, points_par = _builds(_points)


def numpy_sweep(src, dst, di, dj, w, r0, r1, c0, c1) -> None:
    """The same sweep with numpy slices (one temporary per point)."""
    if r1 <= r0 or c1 <= c0:
        return
    acc = w[0] * src[r0 + di[0]:r1 + di[0], c0 + dj[0]:c1 + dj[0]]
    for k in range(1, w.size):
        acc = acc + w[k] * src[r0 + di[k]:r1 + di[k], c0 + dj[k]:c1 + dj[k]]
    dst[r0:r1, c0:c1] = acc


def offsets(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(di, dj, w) of the nonzero points of a (2R+1) x (2R+1) weight matrix, centre first."""
    weights = np.asarray(weights, dtype=np.float64)
    rad = weights.shape[0] // 2
    ii, jj = np.nonzero(weights)
    order = np.argsort((ii - rad) ** 2 + (jj - rad) ** 2, kind="stable")
    ii, jj = ii[order], jj[order]
    return ((ii - rad).astype(np.int64), (jj - rad).astype(np.int64),
            np.ascontiguousarray(weights[ii, jj]))


def as_cross5(weights: np.ndarray) -> np.ndarray | None:
    """The (centre, north, south, west, east) weights of a 3 x 3 cross, None for any other stencil."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (3, 3) or np.any(w[[0, 0, 2, 2], [0, 2, 0, 2]] != 0.0):
        return None
    return np.array([w[1, 1], w[0, 1], w[2, 1], w[1, 0], w[1, 2]])


def heat_weights(alpha: float) -> np.ndarray:
    """The explicit heat step u + alpha (N + S + W + E - 4u) as a 3 x 3 weight matrix."""
    return np.array([[0.0, alpha, 0.0], [alpha, 1.0 - 4.0 * alpha, alpha], [0.0, alpha, 0.0]])


def reference(u: np.ndarray, steps: int, weights: np.ndarray) -> np.ndarray:
    """``steps`` sweeps of the whole field with numpy slices, the outer R rings fixed: the
    single-process numpy program every result is checked against."""
    cur = np.array(u, dtype=np.float64, order="C")
    nxt = cur.copy()
    rad = np.asarray(weights).shape[0] // 2
    di, dj, w = offsets(weights)
    for _ in range(steps):
        numpy_sweep(cur, nxt, di, dj, w, rad, cur.shape[0] - rad, rad, cur.shape[1] - rad)
        cur, nxt = nxt, cur
    return cur


class Sweeper:
    """``sweeper(src, dst, rect)`` sweeps ``rect`` of ``dst`` from ``src`` with one kernel call."""

    def __init__(self, weights: np.ndarray | None = None, kernel: Callable | None = None,
                 backend: str = "numba-stencil", threads: int = 1):
        self.kernel = kernel
        if kernel is None:
            cross = as_cross5(weights)
            if backend == "numpy-stencil":
                self._run = _numpy(weights)
            elif cross is not None:
                fn = cross5_par if threads > 1 else cross5
                self._run = lambda s, d, r0, r1, c0, c1: fn(s, d, cross, r0, r1, c0, c1)
            else:
                di, dj, w = offsets(weights)
                fn = points_par if threads > 1 else points
                self._run = lambda s, d, r0, r1, c0, c1: fn(s, d, di, dj, w, r0, r1, c0, c1)
        else:
            self._run = kernel

    def __call__(self, src: np.ndarray, dst: np.ndarray, rect: Rect) -> None:
        if not rect.empty:
            self._run(src, dst, rect.r0, rect.r1, rect.c0, rect.c1)


def _numpy(weights: np.ndarray) -> Callable:
    di, dj, w = offsets(weights)
    return lambda s, d, r0, r1, c0, c1: numpy_sweep(s, d, di, dj, w, r0, r1, c0, c1)


def run_local(u: np.ndarray, steps: int, radius: int, sweeper: Sweeper) -> np.ndarray:
    """``steps`` sweeps of the whole field ``u`` (the outer ``radius`` rings fixed), in two buffers."""
    cur = np.array(u, dtype=np.float64, order="C")
    nxt = cur.copy()
    region = Rect(radius, cur.shape[0] - radius, radius, cur.shape[1] - radius)
    for _ in range(steps):
        sweeper(cur, nxt, region)
        cur, nxt = nxt, cur
    return cur


def warm_up() -> None:
    """Compile every kernel once (on a tiny array) so no timed call pays for it."""
    a = np.zeros((4, 4))
    b = np.zeros((4, 4))
    w5 = np.zeros(5)
    di, dj, w = offsets(np.ones((3, 3)))
    cross5(a, b, w5, 1, 3, 1, 3)
    cross5_par(a, b, w5, 1, 3, 1, 3)
    points(a, b, di, dj, w, 1, 3, 1, 3)
    points_par(a, b, di, dj, w, 1, 3, 1, 3)


__all__ = ["Sweeper", "as_cross5", "cross5", "cross5_par", "heat_weights", "numpy_sweep", "offsets", "points",
           "points_par", "reference", "run_local", "warm_up"]
