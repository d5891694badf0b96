"""BLIS through the ``blis`` package: gemm and axpy (single-threaded build).

The package's gemv ignores alpha and beta (blis 1.3.4), so it is not offered.
"""
from __future__ import annotations

import numpy as np

from .base import Backend, BackendUnavailable, package_info


def _c_contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def blis() -> Backend:
    """The routines the ``blis`` package exposes, adapted to the uniform signatures."""
    try:
        import blis as _blis
        from blis import py
    except ImportError as exc:
        raise BackendUnavailable("blis not installed (pip install blis)") from exc

    def gemm(alpha, a, b, beta, c, trans_a=False, trans_b=False):
        # blis.py wants C-contiguous arrays and mishandles its transpose flags (blis 1.3.4): compute
        # c^T = op(b)^T op(a)^T on C-contiguous transposes (free for Fortran-ordered operands,
        # copies for strided views or transposed operands, as any caller of this package must).
        ct = c.T
        out = _c_contiguous(ct)
        py.gemm(_c_contiguous(b if trans_b else b.T), _c_contiguous(a if trans_a else a.T), out=out,
                alpha=alpha, beta=beta)
        if out is not ct:
            ct[...] = out

    def axpy(alpha, x, y):
        out = _c_contiguous(y)
        py.axpy(_c_contiguous(x), scale=alpha, out=out)
        if out is not y:
            y[...] = out

    info = {"name": "blis", "library": _blis.__file__, "version": package_info("blis")["package_version"],
            "corename": "", **package_info("blis")}
    return Backend("blis", {"gemm": gemm, "axpy": axpy}, info)

