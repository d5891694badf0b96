"""The stencil kernels as backends: the 5-point sweep compiled by Numba (a step a call, or
several fused in one wavefront), and numpy's slices.

Each offers ``stencil(src, dst, w, r0, r1, c0, c1, levels=1)``: the 5-point sweep with weights
``w`` = (centre, north, south, west, east) over rows [r0, r1) x columns [c0, c1) of ``dst``
(``levels`` > 1: that many steps back and forth between the two arrays, on the fusing backend). The
probe times it as it times a BLAS routine (patterns interior, rows, cols, levels) and the stencil
models look its k up the same way; the runs sweep through ``kernels.stencil.Sweeper``. The per-step Numba
backend also offers ``stream(a, b, c=None)``: STREAM's copy (b = a) and triad (a = b + 3c), the
memory bandwidth the sweeps are judged against (``autotune show``).
"""
from __future__ import annotations

import numpy as np

from .base import Backend, BackendUnavailable, package_info

_CROSS = (np.array([0, -1, 1, 0, 0]), np.array([0, 0, 0, -1, 1]))


def numba_stencil() -> Backend:
    """Numba loops; threads via numba.set_num_threads (rows split over them beyond one)."""
    numba, k, streams = _numba_kernels()

    def stencil(src, dst, w, r0, r1, c0, c1, levels=1):
        _one_level(levels)
        (k.cross5_par if numba.get_num_threads() > 1 else k.cross5)(src, dst, w, r0, r1, c0, c1)

    def warm_up():
        k.warm_up()
        streams.warm_up()

    info = {"name": "numba-stencil", "library": k.__file__, "version": numba.__version__,
            "corename": numba.config.THREADING_LAYER, **package_info("numba")}
    return Backend("numba-stencil", {"stencil": stencil, "stream": streams.stream}, info, numba.set_num_threads,
                   numba.get_num_threads, int_dtype="int64", extra={"warm_up": warm_up})


def numba_wavefront() -> Backend:
    """Numba, one thread: ``levels`` steps fused in one row wavefront (kernels.stencil.cross5_levels)."""
    numba, k, _ = _numba_kernels()

    def stencil(src, dst, w, r0, r1, c0, c1, levels=1):
        if levels == 1:
            k.cross5(src, dst, w, r0, r1, c0, c1)
        else:
            k.cross5_levels(src, dst, w, k.repeated_rects(r0, r1, c0, c1, int(levels)))

    info = {"name": "numba-wavefront", "library": k.__file__, "version": numba.__version__,
            **package_info("numba")}
    return Backend("numba-wavefront", {"stencil": stencil}, info, int_dtype="int64", extra={"warm_up": k.warm_up})


def _numba_kernels():
    """Numba and our kernel modules (stencil, stream), or BackendUnavailable."""
    try:
        import numba

        from autotune.kernels import stencil, stream
    except ImportError as exc:
        raise BackendUnavailable(f"numba stencil kernels unavailable: {exc}") from exc
    return numba, stencil, stream


def _one_level(levels: int) -> None:
    if levels != 1:
        raise ValueError(f"this stencil backend sweeps one step a call, got levels={levels}")


def numpy_stencil() -> Backend:
    """numpy slices, one thread (what a user writes by hand)."""
    from autotune.kernels import stencil as k

    def stencil(src, dst, w, r0, r1, c0, c1, levels=1):
        _one_level(levels)
        k.numpy_sweep(src, dst, *_CROSS, w, r0, r1, c0, c1)

    info = {"name": "numpy-stencil", "library": np.__file__, "version": np.__version__, **package_info("numpy")}
    return Backend("numpy-stencil", {"stencil": stencil}, info)
