"""Dispatch: run a chosen candidate on the user's arrays (layout, threads, kernels)."""
from .cholesky import cholesky_runner, run_cholesky
from .gemm import run_gemm

__all__ = ["cholesky_runner", "run_cholesky", "run_gemm"]
