"""The Numba reference implementation: standing for an unoptimised BLAS/LAPACK."""
from __future__ import annotations

from .base import BLAS_ROUTINES, Backend, BackendUnavailable, package_info


def numba_reference() -> Backend:
    """Plain blocked loops compiled by Numba; threads via numba.set_num_threads."""
    try:
        import numba

        from autotune.kernels import reference as ref
    except ImportError as exc:
        raise BackendUnavailable(f"numba reference kernels unavailable: {exc}") from exc
    ops = {r: getattr(ref, r) for r in BLAS_ROUTINES}
    info = {"name": "numba-reference", "library": ref.__file__, "version": numba.__version__,
            "corename": numba.config.THREADING_LAYER, **package_info("numba")}
    return Backend("numba-reference", ops, info, numba.set_num_threads, numba.get_num_threads,
                   int_dtype="int64", extra={"warm_up": ref.warm_up})
