"""Finding BLAS entry points: scipy capsules, ctypes symbols, threadpoolctl handles."""
from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable

from .base import BackendUnavailable

_GET_NAME = ctypes.pythonapi.PyCapsule_GetName
_GET_NAME.restype, _GET_NAME.argtypes = ctypes.c_char_p, [ctypes.py_object]
_GET_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
_GET_POINTER.restype, _GET_POINTER.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

TABLE_ROUTINES = ("gemm", "syrk", "trsm", "gemv", "axpy", "potrf", "potf2", "getrf", "getrs", "gecon", "lange",
                  "potrs", "lansy", "pocon", "laswp")
_LAPACK = {"potrf", "potf2", "getrf", "getrs", "gecon", "lange", "potrs", "lansy", "pocon", "laswp"}


def capsule_address(capsule: object) -> int:
    """The C function pointer inside a Cython ``__pyx_capi__`` capsule."""
    return int(_GET_POINTER(capsule, _GET_NAME(capsule)))


def scipy_addresses() -> dict[str, int]:
    """Addresses of scipy's own BLAS/LAPACK (its bundled library) via cython_blas/cython_lapack."""
    from scipy.linalg import cython_blas, cython_lapack

    return {r: capsule_address((cython_lapack if r in _LAPACK else cython_blas).__pyx_capi__["d" + r])
            for r in TABLE_ROUTINES}


def symbol_addresses(lib: ctypes.CDLL, template: str) -> dict[str, int]:
    """Addresses of ``template.format('dgemm')``-style symbols; BackendUnavailable if any is missing."""
    out = {}
    for r in TABLE_ROUTINES:
        sym = template.format("d" + r)
        try:
            out[r] = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value
        except AttributeError:
            raise BackendUnavailable(f"{lib._name}: no symbol {sym}") from None
    return out


def openblas_thread_addresses(lib: ctypes.CDLL) -> tuple[int, int] | None:
    """C addresses of OpenBLAS's set/get thread-count functions, whatever their symbol affixes."""
    for prefix in ("scipy_", ""):
        for suffix in ("64_", "_64", ""):
            try:
                set_fn = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")
                get_fn = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}")
            except AttributeError:
                continue
            return (ctypes.cast(set_fn, ctypes.c_void_p).value, ctypes.cast(get_fn, ctypes.c_void_p).value)
    return None


def find_library(pattern: str) -> str:
    """First file matching a glob pattern; BackendUnavailable when none does."""
    hits = sorted(glob.glob(pattern))
    if not hits:
        raise BackendUnavailable(f"no library matches {pattern}")
    return hits[0]


def threadpool_setter(filepath: str) -> tuple[Callable[[int], None], Callable[[], int]]:
    """(set, get) thread-count functions for one loaded library, through threadpoolctl."""
    from threadpoolctl import ThreadpoolController

    ctl = ThreadpoolController().select(filepath=os.path.realpath(filepath))
    if not ctl.lib_controllers:
        raise BackendUnavailable(f"threadpoolctl cannot see {filepath}")
    lib = ctl.lib_controllers[0]
    return lib.set_num_threads, lambda: lib.num_threads
