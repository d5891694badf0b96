"""The stencil kernels as backends: the 5-point sweep compiled by Numba, and numpy's slices.

Each offers one routine, ``stencil(src, dst, w, r0, r1, c0, c1)``: the 5-point sweep with weights
``w`` = (centre, north, south, west, east) over rows [r0, r1) x columns [c0, c1) of ``dst``. The
probe times it as it times a BLAS routine (patterns interior, rows, cols) and the stencil models
look its k up the same way; the runs call ``autotune.dispatch.stencil``.
"""
from __future__ import annotations

import numpy as np

from .base import Backend, BackendUnavailable, package_info

_CROSS = (np.array([0, -1, 1, 0, 0]), np.array([0, 0, 0, -1, 1]))


def numba_stencil() -> Backend:
    """Numba loops; threads via numba.set_num_threads (rows split over them beyond one)."""
    try:
        import numba

        from autotune.kernels import stencil as k
    except ImportError as exc:
        raise BackendUnavailable(f"numba stencil kernels unavailable: {exc}") from exc

    def stencil(src, dst, w, r0, r1, c0, c1):
        (k.cross5_par if numba.get_num_threads() > 1 else k.cross5)(src, dst, w, r0, r1, c0, c1)

    info = {"name": "numba-stencil", "library": k.__file__, "version": numba.__version__,
            "corename": numba.config.THREADING_LAYER, **package_info("numba")}
    return Backend("numba-stencil", {"stencil": stencil}, info, numba.set_num_threads, numba.get_num_threads,
                   int_dtype="int64", extra={"warm_up": k.warm_up})


def numpy_stencil() -> Backend:
    """numpy slices, one thread (what a user writes by hand)."""
    from autotune.kernels import stencil as k

    def stencil(src, dst, w, r0, r1, c0, c1):
        k.numpy_sweep(src, dst, *_CROSS, w, r0, r1, c0, c1)

    info = {"name": "numpy-stencil", "library": np.__file__, "version": np.__version__, **package_info("numpy")}
    return Backend("numpy-stencil", {"stencil": stencil}, info)
