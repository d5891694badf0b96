"""numpy's and scipy's bundled OpenBLAS builds: two separate libraries in one process."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ._loader import find_library, openblas_thread_addresses, scipy_addresses, symbol_addresses, threadpool_setter
from .base import Backend, package_info


def _numpy_lib_path() -> str:
    """Path of the OpenBLAS that numpy's wheel bundles (numpy.libs), as threadpoolctl reports it."""
    from threadpoolctl import threadpool_info

    root = os.path.dirname(os.path.dirname(np.__file__))
    for info in threadpool_info():
        if info["internal_api"] == "openblas" and os.path.dirname(info["filepath"]).startswith(
                os.path.join(root, "numpy")):
            return info["filepath"]
    return find_library(os.path.join(root, "numpy.libs", "libscipy_openblas64_*.so*"))


def _scipy_lib_path() -> str:
    root = os.path.dirname(os.path.dirname(np.__file__))
    return find_library(os.path.join(root, "scipy.libs", "libscipy_openblas*.so*"))


def _openblas_info(name: str, path: str, template: str) -> dict[str, str]:
    lib = ctypes.CDLL(path)
    info = {"name": name, "library": os.path.realpath(path), "version": "", "corename": ""}
    for key, sym in (("version", "openblas_get_config"), ("corename", "openblas_get_corename")):
        fn = getattr(lib, template.format(sym), None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            info[key] = fn().decode()
    return info


def _thread_control(lib: ctypes.CDLL, path: str):
    """(setter, getter, C addresses) of a library's thread count: threadpoolctl's setter, and as
    getter the library's own C function called directly where its address is known (a fifth of
    threadpoolctl's cost: tuned calls read the count on every call), else threadpoolctl's."""
    setter, getter = threadpool_setter(path)
    addresses = openblas_thread_addresses(lib)
    if addresses:
        getter = ctypes.CFUNCTYPE(ctypes.c_int)(addresses[1])
    return setter, getter, addresses


def _numpy_add(a, b, c, beta=1.0, repeat=1):
    """c = a + beta b with numpy's ufunc (a Python-level loop for ``repeat``: numpy's real cost)."""
    for _ in range(repeat):
        np.add(a, b if beta == 1.0 else beta * b, out=c)


def numpy_openblas() -> Backend:
    """numpy's OpenBLAS (ILP64, ``scipy_*64_`` symbols) called directly; add is numpy's ufunc."""
    from autotune.kernels._blas_ilp64 import DRIVERS, BlasTable

    path = _numpy_lib_path()
    lib = ctypes.CDLL(path)
    table = BlasTable(symbol_addresses(lib, "scipy_{}_64_"))
    ops = {r: getattr(table, r) for r in (*table.addresses, *DRIVERS)}
    ops["add"] = _numpy_add
    setter, getter, addresses = _thread_control(lib, path)
    info = _openblas_info("numpy-openblas", path, "scipy_{}64_")
    info.update(package_info("numpy"))
    return Backend("numpy-openblas", ops, info, setter, getter, int_dtype="int64", native_repeat=True,
                   thread_addresses=addresses)


def scipy_openblas() -> Backend:
    """scipy's OpenBLAS through cython_blas/cython_lapack; add is the fused Cython loop."""
    from autotune.kernels._blas_lp64 import DRIVERS, BlasTable
    from autotune.kernels._matadd import add

    table = BlasTable(scipy_addresses())
    ops = {r: getattr(table, r) for r in (*table.addresses, *DRIVERS)}
    ops["add"] = add
    path = _scipy_lib_path()
    setter, getter, addresses = _thread_control(ctypes.CDLL(path), path)
    info = _openblas_info("scipy-openblas", path, "scipy_{}")
    info.update(package_info("scipy"))
    return Backend("scipy-openblas", ops, info, setter, getter, int_dtype="int32", native_repeat=True,
                   thread_addresses=addresses)
