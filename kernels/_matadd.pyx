# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Fused matrix addition on 2-D views of any strides: one pass, no temporaries."""


def add(const double[:, :] a, const double[:, :] b, double[:, :] c, double beta=1.0, Py_ssize_t repeat=1):
    """c = a + beta * b, column by column (a, b, c may be strided sub-views, a and b read-only); ``repeat`` times."""
    cdef Py_ssize_t m = c.shape[0], n = c.shape[1], i, j, r
    if a.shape[0] != m or a.shape[1] != n or b.shape[0] != m or b.shape[1] != n:
        raise ValueError("add: shapes differ")
    with nogil:
        for r in range(repeat):
            for j in range(n):
                for i in range(m):
                    c[i, j] = a[i, j] + beta * b[i, j]


def zero_triangle(double[:, :] a, bint upper):
    """Zero the strictly upper (``upper``) or strictly lower triangle of a square view in place."""
    cdef Py_ssize_t n = a.shape[0], i, j
    with nogil:
        for j in range(n):
            if upper:
                for i in range(j):
                    a[i, j] = 0.0
            else:
                for i in range(j + 1, n):
                    a[i, j] = 0.0
