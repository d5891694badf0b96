"""autotune: auto-tuned dense linear algebra driven by measured system parameters.

Architecture: ``install_probe`` (measure) -> ``db`` (store, look up) -> models -> selection ->
dispatch -> ``kernels``/``backends``. Importing this package loads neither MPI nor any BLAS
backend; they load on first use.
"""
from ._version import __version__
from .db import load_sp

__all__ = ["__version__", "load_sp"]
