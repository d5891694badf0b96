"""Run a GEMM candidate: ``c = alpha op(a) op(b) + beta c`` in float64, any memory order."""
from __future__ import annotations

import numpy as np

from autotune import backends
from autotune.kernels._front import aligned_empty
from autotune.plans import Candidate

from .layout import call_with_threads, fortran_operand


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
        call_with_threads(be, cand.threads, _strassen, be, cand.param, alpha, af, ta, bf, tb, beta, target)
    else:
        call_with_threads(be, cand.threads, be.ops["gemm"], alpha, af, bf, beta, target, ta, tb)
    return c


def _strassen(be, levels: int, alpha: float, a, ta: bool, b, tb: bool, beta: float, c) -> None:
    """Strassen product into ``c``; transposed operands and alpha/beta are applied around it."""
    from autotune.kernels.strassen import strassen

    a = np.asfortranarray(a.T) if ta else a
    b = np.asfortranarray(b.T) if tb else b
    if alpha == 1.0 and beta == 0.0:
        strassen(a, b, c, levels, be.ops["gemm"])
        return
    prod = aligned_empty(c.shape, order="F")
    strassen(a, b, prod, levels, be.ops["gemm"])
    if beta == 0.0:
        np.multiply(prod, alpha, out=c)
    else:
        c *= beta
        c += alpha * prod
