# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Fused matrix addition on 2-D views of any strides: one pass, no temporaries."""


def add(double[:, :] a, double[:, :] b, double[:, :] c, double beta=1.0, Py_ssize_t repeat=1):
    """c = a + beta * b, column by column (a, b, c may be strided sub-views); ``repeat`` times."""
    cdef Py_ssize_t m = c.shape[0], n = c.shape[1], i, j, r
    if a.shape[0] != m or a.shape[1] != n or b.shape[0] != m or b.shape[1] != n:
        raise ValueError("add: shapes differ")
    with nogil:
        for r in range(repeat):
            for j in range(n):
                for i in range(m):
                    c[i, j] = a[i, j] + beta * b[i, j]
