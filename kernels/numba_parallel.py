"""Numba kernel version (docs/models.md#multicore): ``numba.prange`` loops on Numba's thread pool.

The same routines as the OpenMP version (``kernels/_omp.pyx``): the micro-routines R-generate,
R-pfor and R-barriers (001 §6.3.1), a Jacobi sweep and the fused addition. Each takes ``threads``.
Numba's pool holds at most ``numba.config.NUMBA_NUM_THREADS`` threads (by default the logical
CPUs): above that, the P tasks of ``generate``/``barriers`` share that many threads, so the
oversubscription measured for this version includes that sharing. Numba has no barrier
primitive: ``barriers`` ends each round with the join of a parallel loop (a barrier plus a fork).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

_JIT = {"cache": True, "nogil": True}
PAD = 8  # doubles between two tasks' result slots (one cache line)
GRAIN = 64  # elementary operations per iteration of pfor's loop


def pool_size() -> int:
    """Most threads this version can run at once (Numba's pool size)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def _set(threads: int) -> None:
    if threads < 1:
        raise ValueError("threads must be >= 1")
    numba.set_num_threads(min(threads, pool_size()))


@njit(**_JIT)
def _work(n, s):
    """``n`` elementary operations: a dependent multiply-add chain seeded by ``s``."""
    x = s
    for _ in range(n):
        x = x * 0.999999 + 1e-7
    return x


@njit(parallel=True, **_JIT)
def _generate(p, n, out):
    for t in prange(p):
        out[PAD * t] = _work(n, float(t))


@njit(parallel=True, **_JIT)
def _pfor(iters):
    s = 0.0
    for i in prange(iters):
        s += _work(GRAIN, float(i))
    return s


@njit(parallel=True, **_JIT)
def _round(p, n, out):
    for t in prange(p):
        out[PAD * t] = _work(n, out[PAD * t])


@njit(**_JIT)
def _barriers(p, n, reps, out):
    for _ in range(reps):
        _round(p, n, out)


def generate(threads: int, n: int) -> None:
    """R-generate: ``threads`` tasks (one per thread up to the pool size), ``n`` operations each."""
    _set(threads)
    _generate(threads, n, np.zeros(PAD * threads))


def pfor(threads: int, total: int) -> None:
    """R-pfor: a parallel loop of ``total`` elementary operations (GRAIN per iteration)."""
    _set(threads)
    if not np.isfinite(_pfor(max(total // GRAIN, 1))):
        raise FloatingPointError("pfor: NaN")


def barriers(threads: int, n: int, reps: int = 1) -> None:
    """R-barriers: ``reps`` rounds of ``n`` operations per task, each round ending at a join."""
    _set(threads)
    _barriers(threads, n, reps, np.zeros(PAD * threads))


@njit(parallel=True, **_JIT)
def _jacobi_rows(old, new):
    m, n = old.shape
    s = 0.0
    for i in prange(1, m - 1):
        for j in range(1, n - 1):
            v = 0.25 * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])
            s += (v - old[i, j]) * (v - old[i, j])
            new[i, j] = v
    return s


def jacobi_sweep(old: np.ndarray, new: np.ndarray, threads: int = 1) -> float:
    """One Jacobi relaxation sweep (5-point stencil, boundary copied); returns the sum of squared
    changes of the interior points. Rows are split over ``threads``."""
    if old.shape != new.shape or old.ndim != 2:
        raise ValueError("jacobi_sweep: shapes differ")
    _set(threads)
    new[...] = old
    if min(old.shape) < 3:
        return 0.0
    return float(_jacobi_rows(old, new))


@njit(parallel=True, **_JIT)
def _add_cols(a, b, c, beta):
    m, n = c.shape
    for j in prange(n):
        for i in range(m):
            c[i, j] = a[i, j] + beta * b[i, j]


def add(a: np.ndarray, b: np.ndarray, c: np.ndarray, beta: float = 1.0, threads: int = 1) -> None:
    """c = a + beta * b (same semantics as ``_matadd.add``), columns split over ``threads``."""
    if a.shape != c.shape or b.shape != c.shape or c.ndim != 2:
        raise ValueError("add: shapes differ")
    _set(threads)
    if c.strides[0] > c.strides[1]:  # row-major: work on the transposes so the inner loop is contiguous
        _add_cols(a.T, b.T, c.T, beta)
    else:
        _add_cols(a, b, c, beta)


__all__ = ["add", "barriers", "generate", "jacobi_sweep", "pfor", "pool_size"]
