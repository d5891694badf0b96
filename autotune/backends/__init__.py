"""Registry of BLAS backends: each loaded lazily, once, and only when asked for."""
from __future__ import annotations

import functools
from collections.abc import Callable

from .base import ALL_ROUTINES, BLAS_ROUTINES, Backend, BackendUnavailable

__all__ = ["ALL_ROUTINES", "BLAS_ROUTINES", "BACKENDS", "Backend", "BackendUnavailable", "available", "get"]


def _factory(module: str, func: str) -> Callable[[], Backend]:
    def load() -> Backend:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{module}"), func)()
    return load


BACKENDS: dict[str, Callable[[], Backend]] = {
    "numpy-openblas": _factory("openblas", "numpy_openblas"),
    "scipy-openblas": _factory("openblas", "scipy_openblas"),
    "mkl": _factory("mkl", "mkl"),
    "blis": _factory("blis", "blis"),
    "numba-reference": _factory("numba_ref", "numba_reference"),
    "numba-stencil": _factory("stencil", "numba_stencil"),
    "numba-wavefront": _factory("stencil", "numba_wavefront"),
    "numpy-stencil": _factory("stencil", "numpy_stencil"),
}


@functools.cache
def get(name: str) -> Backend:
    """The backend called ``name``; ValueError if unknown, BackendUnavailable if not loadable."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    try:
        return BACKENDS[name]()
    except OSError as exc:
        raise BackendUnavailable(f"{name}: {exc}") from exc


def available() -> list[str]:
    """Names of the backends that load on this machine."""
    out = []
    for name in BACKENDS:
        try:
            get(name)
            out.append(name)
        except BackendUnavailable:
            continue
    return out
