# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""OpenMP kernel version (docs/models.md#multicore): Cython ``prange`` loops built with -fopenmp.

Every function takes its thread count explicitly (``threads``). The micro-routines ``generate``,
``pfor`` and ``barriers`` are the source's R-generate, R-pfor and R-barriers (001 §6.3.1); their
elementary operation is one step of a dependent floating-point chain (a multiply-add the compiler
cannot fold), so ``N`` operations cost ``N T_work`` on one core.
"""
from cython.parallel cimport prange
from libc.math cimport sqrt

import numpy as np

cdef extern from *:
    """
    #include <omp.h>
    /* N elementary operations: a dependent multiply-add chain seeded by s. */
    static double at_work(long n, double s) {
        double x = s;
        for (long i = 0; i < n; ++i) x = x * 0.999999 + 1e-7;
        return x;
    }
    /* R-barriers: P threads, each does n operations then waits at a barrier, reps times. */
    static void at_barriers(int p, long n, long reps, double *out) {
        #pragma omp parallel num_threads(p)
        {
            int t = omp_get_thread_num();
            double x = t;
            for (long r = 0; r < reps; ++r) {
                x = at_work(n, x);
                #pragma omp barrier
            }
            out[8 * t] = x;
        }
    }
    """
    double at_work(long n, double s) noexcept nogil
    void at_barriers(int p, long n, long reps, double *out) noexcept nogil

cdef enum:
    PAD = 8  # doubles between two threads' result slots (one cache line: no false sharing)
    GRAIN = 64  # elementary operations per iteration of pfor's loop


def _check_threads(int threads) -> None:
    if threads < 1:
        raise ValueError("threads must be >= 1")


def add(const double[:, :] a, const double[:, :] b, double[:, :] c, double beta=1.0, int threads=1):
    """c = a + beta * b on 2-D views (same semantics as ``_matadd.add``), outer loop over ``threads``."""
    cdef Py_ssize_t m = c.shape[0], n = c.shape[1], i, j
    _check_threads(threads)
    if a.shape[0] != m or a.shape[1] != n or b.shape[0] != m or b.shape[1] != n:
        raise ValueError("add: shapes differ")
    if c.strides[0] <= c.strides[1]:  # column-major: parallel over columns
        for j in prange(n, nogil=True, num_threads=threads, schedule="static"):
            for i in range(m):
                c[i, j] = a[i, j] + beta * b[i, j]
    else:
        for i in prange(m, nogil=True, num_threads=threads, schedule="static"):
            for j in range(n):
                c[i, j] = a[i, j] + beta * b[i, j]


def jacobi_sweep(const double[:, :] old, double[:, :] new, int threads=1) -> float:
    """One Jacobi relaxation sweep on an n x n grid (5-point stencil, boundary copied); returns
    the sum of squared changes of the interior points (the source's model routine R-jacobi)."""
    cdef Py_ssize_t m = old.shape[0], n = old.shape[1], i, j
    cdef double s = 0.0, v
    _check_threads(threads)
    if new.shape[0] != m or new.shape[1] != n:
        raise ValueError("jacobi_sweep: shapes differ")
    new[...] = old
    if m < 3 or n < 3:
        return 0.0
    if old.strides[0] >= old.strides[1]:  # row-major: parallel over rows
        for i in prange(1, m - 1, nogil=True, num_threads=threads, schedule="static"):
            for j in range(1, n - 1):
                v = 0.25 * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])
                s += (v - old[i, j]) * (v - old[i, j])
                new[i, j] = v
    else:
        for j in prange(1, n - 1, nogil=True, num_threads=threads, schedule="static"):
            for i in range(1, m - 1):
                v = 0.25 * (old[i - 1, j] + old[i + 1, j] + old[i, j - 1] + old[i, j + 1])
                s += (v - old[i, j]) * (v - old[i, j])
                new[i, j] = v
    return s


def generate(int threads, long n) -> None:
    """R-generate: start ``threads`` threads, each doing ``n`` elementary operations."""
    cdef double[::1] out = np.zeros(PAD * max(threads, 1))
    cdef Py_ssize_t t
    _check_threads(threads)
    for t in prange(threads, nogil=True, num_threads=threads, schedule="static", chunksize=1):
        out[PAD * t] = at_work(n, <double>t)


def pfor(int threads, long total) -> None:
    """R-pfor: a parallel loop of ``total`` elementary operations (GRAIN per iteration, dynamic schedule)."""
    cdef long iters = max(total // GRAIN, 1), i
    cdef double s = 0.0
    _check_threads(threads)
    for i in prange(iters, nogil=True, num_threads=threads, schedule="dynamic", chunksize=16):
        s += at_work(GRAIN, <double>i)
    if s != s:  # keeps the loop observable
        raise FloatingPointError("pfor: NaN")


def barriers(int threads, long n, long reps=1) -> None:
    """R-barriers: ``threads`` threads each do ``n`` operations then meet at a barrier, ``reps`` times."""
    cdef double[::1] out = np.zeros(PAD * max(threads, 1))
    _check_threads(threads)
    with nogil:
        at_barriers(threads, n, reps, &out[0])


def potf2_axpy(double[:, :] a, bint lower=True, int threads=1):
    """Unblocked right-looking (axpy) Cholesky in place, the trailing update split over ``threads``;
    returns LAPACK's info (0, or j + 1 when the j-th pivot is not positive). Any memory order."""
    cdef Py_ssize_t n = a.shape[0], j
    _check_threads(threads)
    if a.shape[1] != n:
        raise ValueError("potf2_axpy: matrix is not square")
    for j in range(n):
        if not _step(a, j, n, lower, threads):
            return j + 1
    return 0


cdef bint _step(double[:, :] a, Py_ssize_t j, Py_ssize_t n, bint lower, int threads):
    """Pivot j: sqrt, scale its column (row), then update each trailing column (row) k > j in parallel."""
    cdef double ajj = a[j, j], rcp, alpha
    cdef Py_ssize_t i, k
    if not (ajj > 0.0):  # also catches NaN
        return False
    ajj = sqrt(ajj)
    a[j, j] = ajj
    rcp = 1.0 / ajj
    if lower:
        for i in range(j + 1, n):
            a[i, j] = a[i, j] * rcp
        for k in prange(j + 1, n, nogil=True, num_threads=threads, schedule="dynamic", chunksize=8):
            alpha = a[k, j]
            for i in range(k, n):
                a[i, k] = a[i, k] - alpha * a[i, j]
    else:
        for i in range(j + 1, n):
            a[j, i] = a[j, i] * rcp
        for k in prange(j + 1, n, nogil=True, num_threads=threads, schedule="dynamic", chunksize=8):
            alpha = a[j, k]
            for i in range(j + 1, k + 1):
                a[i, k] = a[i, k] - alpha * a[j, i]
    return True


def max_threads() -> int:
    """The OpenMP runtime's default team size."""
    return _omp_max()


cdef extern from "omp.h":
    int omp_get_max_threads() nogil


cdef int _omp_max():
    return omp_get_max_threads()
