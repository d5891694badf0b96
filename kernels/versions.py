"""Kernel versions: the compiled builds of the loop-parallel kernels, an algorithm parameter (001 §6.2-6.3).

``"numba"`` (``kernels/numba_parallel.py``, always present) and ``"omp"`` (``kernels/_omp.pyx``,
Cython with OpenMP, present only when it was built). Both expose ``generate``, ``pfor``,
``barriers``, ``jacobi_sweep`` and ``add`` with an explicit ``threads`` argument. The BLAS-threaded
version of a routine is the backend's own call (``autotune.backends``), not listed here.
"""
from __future__ import annotations

import importlib
from types import ModuleType

VERSIONS = ("numba", "omp")
_MODULES = {"numba": "autotune.kernels.numba_parallel", "omp": "autotune.kernels._omp"}


def load(version: str) -> ModuleType | None:
    """The module of one kernel version, or None when it is not available here (never raises ImportError)."""
    if version not in _MODULES:
        raise ValueError(f"unknown kernel version {version!r}; known: {', '.join(VERSIONS)}")
    try:
        return importlib.import_module(_MODULES[version])
    except ImportError:
        return None


def available() -> list[str]:
    """The kernel versions that load on this machine."""
    return [v for v in VERSIONS if load(v) is not None]


__all__ = ["VERSIONS", "available", "load"]
