"""Intel MKL from the optional ``mkl`` wheel, loaded with ctypes (LP64 interface of mkl_rt)."""
from __future__ import annotations

import ctypes
import os
import sys

from ._loader import find_library, symbol_addresses
from .base import Backend, BackendUnavailable, package_info


def _mkl_rt() -> tuple[ctypes.CDLL, str]:
    for root in (sys.prefix, os.path.dirname(sys.executable)):
        try:
            path = find_library(os.path.join(root, "lib", "libmkl_rt.so*"))
            return ctypes.CDLL(path), path
        except (BackendUnavailable, OSError):
            continue
    raise BackendUnavailable("MKL not installed (pip install mkl)")


def mkl() -> Backend:
    """MKL's dgemm & co. via function pointers; threads via MKL_Set_Num_Threads."""
    from autotune.kernels._blas_lp64 import DRIVERS, BlasTable

    lib, path = _mkl_rt()
    table = BlasTable(symbol_addresses(lib, "{}_"))
    buf = ctypes.create_string_buffer(256)
    lib.MKL_Get_Version_String(buf, 256)
    lib.MKL_Set_Num_Threads.argtypes = [ctypes.c_int]
    info = {"name": "mkl", "library": os.path.realpath(path), "version": buf.value.decode(),
            "corename": "", **package_info("mkl")}
    ops = {r: getattr(table, r) for r in (*table.addresses, *DRIVERS)}
    return Backend("mkl", ops, info, lib.MKL_Set_Num_Threads, lib.MKL_Get_Max_Threads,
                   native_repeat=True)
