"""Point-stencil sweeps over a rectangle of a 2-D array (Numba, serial and threaded) and numpy's.

``sweep(src, dst, di, dj, w, r0, r1, c0, c1)`` sets ``dst[i, j] = sum_k w[k] src[i + di[k], j + dj[k]]``
for rows [r0, r1) and columns [c0, c1): only the nonzero points of a (2R+1) x (2R+1) weight
matrix are visited. ``cross5`` is the 5-point case unrolled (the heat step); the ``_par`` forms
split the rows over Numba's threads; the ``_levels`` forms fuse several steps in one row
wavefront (the ``numba-wavefront`` backend: one pass over memory for a halo's sub-steps). The numpy
forms do the same with slices (what a user writes by hand). Interior and border passes are
separate calls on separate rectangles, so each can run on its own (while messages travel, 004
§3.2.3). ``Sweeper`` picks the kernel for a stencil given by its weights, or runs a user's Numba
function ``kernel(src, dst, r0, r1, c0, c1)`` (as PETSc's DMDA or Devito let users write their own
point update).
"""
from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence

import numpy as np
from numba import njit, prange

from autotune.core.assumptions import LOCAL_LEVELS
from autotune.core.families import WAVEFRONT_BACKEND
from autotune.geometry.halo import Rect

_JIT = {"cache": True, "nogil": True, "boundscheck": False, "fastmath": {"contract"}}   # FMA: no reassociation


@njit(inline="always", **_JIT)
def _cross5_row(src, dst, w, i, c0, c1):
    """Row i of the 5-point sweep. The row is read through slices starting at column 0, so Numba
    proves every index non-negative and the loop vectorises (indices like ``j - 1`` keep
    negative-index wraparound in the loop and it does not)."""
    up, mid, down, out = src[i - 1, c0:c1], src[i, c0 - 1:c1 + 1], src[i + 1, c0:c1], dst[i, c0:c1]
    wc, wn, ws, ww, we = w[0], w[1], w[2], w[3], w[4]
    for j in range(c1 - c0):
        out[j] = wc * mid[j + 1] + wn * up[j] + ws * down[j] + ww * mid[j] + we * mid[j + 2]


@njit(inline="always", **_JIT)
def _points_row(src, dst, di, dj, w, i, c0, c1):
    """Row i of the general point stencil: the first point sets the row, each further point adds
    its shifted source row (unit-stride loops that vectorise)."""
    out = dst[i, c0:c1]
    first = src[i + di[0], c0 + dj[0]:c1 + dj[0]]
    w0 = w[0]
    for j in range(c1 - c0):
        out[j] = w0 * first[j]
    for k in range(1, w.size):
        row = src[i + di[k], c0 + dj[k]:c1 + dj[k]]
        wk = w[k]
        for j in range(c1 - c0):
            out[j] += wk * row[j]


# Below this width a rectangle (a tile's border columns) is swept by plain indexing: four row
# slices a row cost more than the few cells they would vectorise.
NARROW = 8


def _cross5(src, dst, w, r0, r1, c0, c1):
    """5-point sweep: w = (centre, north, south, west, east)."""
    if c1 - c0 < NARROW:
        wc, wn, ws, ww, we = w[0], w[1], w[2], w[3], w[4]
        for i in prange(r0, r1):
            for j in range(c0, c1):
                dst[i, j] = (wc * src[i, j] + wn * src[i - 1, j] + ws * src[i + 1, j]
                             + ww * src[i, j - 1] + we * src[i, j + 1])
        return
    for i in prange(r0, r1):
        _cross5_row(src, dst, w, i, c0, c1)


def _points(src, dst, di, dj, w, r0, r1, c0, c1):
    """General point stencil over the rectangle."""
    if c1 - c0 < NARROW:
        for i in prange(r0, r1):
            for j in range(c0, c1):
                acc = 0.0
                for k in range(w.size):
                    acc += w[k] * src[i + di[k], j + dj[k]]
                dst[i, j] = acc
        return
    for i in prange(r0, r1):
        _points_row(src, dst, di, dj, w, i, c0, c1)


@njit(**_JIT)
def _span(rects, radius):
    """The wavefront's clock: rows from the first level's first to the last level's last, lagged."""
    return rects[:, 0].min(), rects[:, 1].max() + (rects.shape[0] - 1) * radius


@njit(**_JIT)
def cross5_levels(a, b, w, rects):
    """``len(rects)`` 5-point sweeps fused in one row wavefront: level k sweeps ``rects[k]``
    (r0, r1, c0, c1) from ``a`` into ``b`` (k even) or back (k odd), row ``t - k`` at clock t.
    A level runs one row behind the one before, so each row it reads is final and each row it
    overwrites is no longer read; the rows in flight stay in cache, so the field streams through
    memory once per call instead of once per step (time skewing; the results are the same bits)."""
    lo, hi = _span(rects, 1)
    for t in range(lo, hi):
        for lev in range(rects.shape[0]):
            i = t - lev
            if rects[lev, 0] <= i < rects[lev, 1]:
                if lev % 2 == 0:
                    _cross5_row(a, b, w, i, rects[lev, 2], rects[lev, 3])
                else:
                    _cross5_row(b, a, w, i, rects[lev, 2], rects[lev, 3])


@njit(**_JIT)
def points_levels(a, b, di, dj, w, rects, radius):
    """``cross5_levels`` for a point stencil of ``radius`` (a level runs ``radius`` rows behind)."""
    lo, hi = _span(rects, radius)
    for t in range(lo, hi):
        for lev in range(rects.shape[0]):
            i = t - lev * radius
            if rects[lev, 0] <= i < rects[lev, 1]:
                if lev % 2 == 0:
                    _points_row(a, b, di, dj, w, i, rects[lev, 2], rects[lev, 3])
                else:
                    _points_row(b, a, di, dj, w, i, rects[lev, 2], rects[lev, 3])


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
    """``sweeper(src, dst, rect)`` sweeps ``rect`` of ``dst`` from ``src`` with one kernel call;
    ``sweeper.levels(a, b, rects)`` sweeps a run of steps, fused in one wavefront on the
    ``numba-wavefront`` backend (``fuses``), one call a step on the others."""

    def __init__(self, weights: np.ndarray | None = None, kernel: Callable | None = None,
                 backend: str = "numba-stencil", threads: int = 1):
        self.kernel = kernel
        self._fused: Callable | None = None
        if kernel is not None:
            self._run = kernel
        elif backend == "numpy-stencil":
            self._run = _numpy(weights)
        else:
            self._run, self._fused = _numba(weights, threads, backend == WAVEFRONT_BACKEND)

    @property
    def fuses(self) -> bool:
        return self._fused is not None

    def __call__(self, src: np.ndarray, dst: np.ndarray, rect: Rect) -> None:
        if not rect.empty:
            self._run(src, dst, rect.r0, rect.r1, rect.c0, rect.c1)

    def levels(self, a: np.ndarray, b: np.ndarray, rects: Sequence[Rect] | np.ndarray) -> None:
        """Step k sweeps ``rects[k]`` from ``a`` into ``b`` (k even) or back (k odd): the sub-steps
        of one halo exchange (each reaching one radius less into the halo), or a run of whole
        steps. ``rects`` may be given as an (L, 4) int64 array of (r0, r1, c0, c1)."""
        arr = rects if isinstance(rects, np.ndarray) else level_rects(rects)
        if self._fused is not None and arr.shape[0] > 1:
            self._fused(a, b, arr)
            return
        for k, (r0, r1, c0, c1) in enumerate(arr.tolist()):
            src, dst = (a, b) if k % 2 == 0 else (b, a)
            if r1 > r0 and c1 > c0:
                self._run(src, dst, r0, r1, c0, c1)


def level_rects(rects: Sequence[Rect]) -> np.ndarray:
    """The (L, 4) int64 array of (r0, r1, c0, c1) the fused kernels read."""
    return np.array([(r.r0, r.r1, r.c0, r.c1) for r in rects], dtype=np.int64).reshape(-1, 4)


@functools.lru_cache(maxsize=64)
def repeated_rects(r0: int, r1: int, c0: int, c1: int, levels: int) -> np.ndarray:
    """``levels`` steps over one rectangle as the fused kernels read them (built once per shape:
    the probe times calls on it)."""
    out = level_rects([Rect(r0, r1, c0, c1)] * levels)
    out.flags.writeable = False
    return out


def _numba(weights: np.ndarray, threads: int, fused: bool) -> tuple[Callable, Callable | None]:
    """The per-step kernel for ``weights`` (threaded beyond one thread), and the fused one."""
    cross = as_cross5(weights)
    if cross is not None:
        fn = cross5_par if threads > 1 else cross5
        return ((lambda s, d, r0, r1, c0, c1: fn(s, d, cross, r0, r1, c0, c1)),
                (lambda a, b, rects: cross5_levels(a, b, cross, rects)) if fused else None)
    di, dj, w = offsets(weights)
    rad = np.asarray(weights).shape[0] // 2
    fn = points_par if threads > 1 else points
    return ((lambda s, d, r0, r1, c0, c1: fn(s, d, di, dj, w, r0, r1, c0, c1)),
            (lambda a, b, rects: points_levels(a, b, di, dj, w, rects, rad)) if fused else None)


def _numpy(weights: np.ndarray) -> Callable:
    di, dj, w = offsets(weights)
    return lambda s, d, r0, r1, c0, c1: numpy_sweep(s, d, di, dj, w, r0, r1, c0, c1)


def run_local(u: np.ndarray, steps: int, radius: int, sweeper: Sweeper) -> np.ndarray:
    """``steps`` sweeps of the whole field ``u`` (the outer ``radius`` rings fixed), in two
    buffers; a fusing sweeper runs LOCAL_LEVELS steps a call."""
    cur = np.array(u, dtype=np.float64, order="C")
    nxt = cur.copy()
    region = Rect(radius, cur.shape[0] - radius, radius, cur.shape[1] - radius)
    levels = LOCAL_LEVELS if sweeper.fuses else 1
    done = 0
    while done < steps:
        n = min(levels, steps - done)
        sweeper.levels(cur, nxt, repeated_rects(region.r0, region.r1, region.c0, region.c1, n))
        if n % 2:
            cur, nxt = nxt, cur
        done += n
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
    rects = np.array([[1, 3, 1, 3]] * 2, dtype=np.int64)
    cross5_levels(a, b, w5, rects)
    points_levels(a, b, di, dj, w, rects, 1)


__all__ = ["Sweeper", "as_cross5", "cross5", "cross5_levels", "cross5_par", "heat_weights", "level_rects",
           "numpy_sweep", "offsets", "points", "points_levels", "points_par", "reference", "repeated_rects",
           "run_local", "warm_up"]
