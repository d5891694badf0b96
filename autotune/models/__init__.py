"""Analytical cost models (docs/models.md): pure functions of (problem, algorithm parameters, SP lookup).

Each returns predicted seconds, vectorised over the numeric algorithm parameter (block size,
recursion level) so the selector can evaluate a whole candidate grid per call. ``sp`` is any
object with the ``SystemParameters.k(routine, backend, threads, x, pattern, param)`` signature.
"""
from . import cholesky, gemm, lu

__all__ = ["cholesky", "gemm", "lu"]
