"""Dispatch: run a chosen candidate on the user's arrays (layout, threads, kernels)."""
from .cholesky import cholesky_runner, run_cholesky
from .gemm import run_gemm
from .lu import int_dtype, lu_kernel, run_getrs, run_lu

__all__ = ["cholesky_runner", "int_dtype", "lu_kernel", "run_cholesky", "run_gemm", "run_getrs", "run_lu"]
