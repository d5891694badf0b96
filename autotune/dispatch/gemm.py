"""Run a GEMM candidate: ``c = alpha op(a) op(b) + beta c`` in float64, any memory order."""
from __future__ import annotations

import functools

import numpy as np

from autotune import backends
from autotune.backends.pools import call_with_threads
from autotune.core.plans import Candidate
from autotune.kernels._front import aligned_empty


def run_gemm(cand: Candidate, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
             beta: float = 0.0, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """Overwrite the float64 matrix ``c`` (m x n) with ``alpha op(a) op(b) + beta c``; returns c.

    A C-ordered ``c`` is computed as ``c.T = op(b)^T op(a)^T`` so no operand is copied unless it
    is neither C- nor Fortran-contiguous.
    """
    if c.flags.f_contiguous:
        target, flip = c, False
    elif c.flags.c_contiguous:
        target, flip = c.T, True
    else:
        tmp = np.asfortranarray(c)
        run_gemm(cand, a, b, tmp, alpha, beta, trans_a, trans_b)
        c[...] = tmp
        return c
    if flip:
        a, b, trans_a, trans_b = b, a, not trans_b, not trans_a
    af, ta = fortran_operand(a, trans_a)
    bf, tb = fortran_operand(b, trans_b)
    be = backends.get(cand.backend)
    if cand.algorithm == "strassen":
        add = _omp_add(cand.threads) if cand.variant == 1 else None
        call_with_threads(be, cand.threads, _strassen, be, cand.param, alpha, af, ta, bf, tb, beta, target, add)
    elif cand.algorithm == "strassen_nested":
        p1 = max(cand.variant, 1)
        call_with_threads(be, max(cand.threads // p1, 1), _nested, be, cand.param, p1, max(cand.threads // p1, 1),
                          alpha, af, ta, bf, tb, beta, target)
    else:
        call_with_threads(be, cand.threads, be.ops["gemm"], alpha, af, bf, beta, target, ta, tb)
    return c


def _omp_add(threads: int):
    """The OpenMP addition kernel (kernels/_omp.pyx) at ``threads`` threads as ``add(x, y, out, beta)``;
    LookupError when that kernel version is not built here."""
    from autotune.kernels import versions

    omp = versions.load("omp")
    if omp is None:
        raise LookupError("Strassen variant 1 needs the OpenMP kernel version (kernels/_omp.pyx), not built here")
    return functools.partial(omp.add, threads=threads)


def _strassen(be, levels: int, alpha: float, a, ta: bool, b, tb: bool, beta: float, c, add=None) -> None:
    """Strassen product into ``c`` (additions by ``add`` when given, else the fused Numba loops);
    transposed operands and alpha/beta are applied around it."""
    from autotune.kernels.strassen import strassen

    def product(a, b, out):
        strassen(a, b, out, levels, be.ops["gemm"], add=add)

    _around(product, alpha, a, ta, b, tb, beta, c)


def _nested(be, levels: int, p1: int, p2: int, alpha: float, a, ta: bool, b, tb: bool, beta: float, c) -> None:
    """Nested-parallel Strassen (kernels/nested_strassen.py): ``p1`` workers, the library already at
    ``p2`` threads; transposed operands and alpha/beta are applied around it."""
    from autotune.kernels.nested_strassen import nested_strassen

    def product(a, b, out):
        nested_strassen(a, b, p1, p2, be.ops["gemm"], None, levels, out)

    _around(product, alpha, a, ta, b, tb, beta, c)


def _around(product, alpha: float, a, ta: bool, b, tb: bool, beta: float, c) -> None:
    """``c = alpha op(a) op(b) + beta c`` from ``product(a, b, out)`` (out = a b, Fortran order)."""
    a = np.asfortranarray(a.T) if ta else a
    b = np.asfortranarray(b.T) if tb else b
    if alpha == 1.0 and beta == 0.0:
        product(a, b, c)
        return
    prod = aligned_empty(c.shape, order="F")
    product(a, b, prod)
    if beta == 0.0:
        np.multiply(prod, alpha, out=c)
    else:
        c *= beta
        c += alpha * prod


def fortran_operand(x: np.ndarray, trans: bool) -> tuple[np.ndarray, bool]:
    """(F-ordered array, trans flag) with ``op(x)`` unchanged: a C-ordered x becomes x.T transposed."""
    if x.flags.f_contiguous:
        return x, trans
    if x.flags.c_contiguous:
        return x.T, not trans
    return np.asfortranarray(x), trans
