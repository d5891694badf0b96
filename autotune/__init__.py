"""autotune: auto-tuned dense linear algebra driven by measured system parameters.

Architecture: ``install_probe`` (measure) -> ``db`` (store, look up) -> ``models`` (predict) ->
``select`` (rank, cache) -> ``dispatch`` (layout, threads) -> ``kernels``/``backends`` (compute).
Importing this package loads neither MPI nor any BLAS backend; they load on first use.
"""
from autotune._version import __version__
from autotune.api import (
    DatabaseUnavailable,
    describe,
    explain,
    tuned_cholesky,
    tuned_gemm,
    tuned_lu_factor,
    tuned_lu_solve,
    tuned_solve,
)
from autotune.core.plans import Candidate
from autotune.db import load_sp
from autotune.select import Decision
from autotune.settings import get_options, options, set_options

__all__ = ["Candidate", "DatabaseUnavailable", "Decision", "__version__", "describe", "explain", "get_options",
           "load_sp", "options", "set_options", "tuned_cholesky", "tuned_gemm", "tuned_lu_factor", "tuned_lu_solve",
           "tuned_solve"]


def __getattr__(name: str):
    """``autotune.stencil`` on first use (it loads the Numba kernels, which ``import autotune`` does not)."""
    if name == "stencil":
        import importlib

        return importlib.import_module(".stencil", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
