"""Candidate configurations (algorithm parameters, AP) and how each is enumerated."""
from __future__ import annotations

from dataclasses import fields

# ``Candidate`` and ``ALGORITHMS`` live in ``autotune.plans`` (shared by selection and execution).
from autotune.plans import ALGORITHMS, Candidate

# Backends whose BLAS tables carry the Cython Cholesky drivers (blocked/gemv/axpy).
DRIVER_BACKENDS = ("numpy-openblas", "scipy-openblas", "mkl")
STRASSEN_LEVELS = (1, 2, 3, 4)
# Nested Strassen (algorithm "strassen_nested"): its levels (001 eqs. 6.9-6.12 cover 1 and 2) and the
# backend whose gemm and thread control it runs on (the one the thread probe measures T_mul on).
NESTED_LEVELS = (1, 2)
NESTED_BACKEND = "numpy-openblas"
# Smallest Strassen leaf worth considering (below it additions dominate everywhere).
MIN_STRASSEN_LEAF = 64


def as_candidate(config, family: str) -> Candidate:
    """A forced configuration (Candidate or dict of its fields) checked for ``family``."""
    if isinstance(config, Candidate):
        cand = config
    elif isinstance(config, dict):
        known = {f.name for f in fields(Candidate)}
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"config has unknown keys {sorted(unknown)}; expected {sorted(known)}")
        try:
            cand = Candidate(**config)
        except TypeError as exc:
            raise ValueError(f"config incomplete: {exc}") from None
    else:
        raise TypeError(f"config must be a Candidate or a dict, not {type(config).__name__}")
    if cand.algorithm not in ALGORITHMS or ALGORITHMS[cand.algorithm][0] != family:
        valid = [a for a, (f, _) in ALGORITHMS.items() if f == family]
        raise ValueError(f"algorithm {cand.algorithm!r} is not a {family} algorithm; choose from {valid}")
    if not isinstance(cand.threads, int) or cand.threads < 1:
        raise ValueError(f"threads must be a positive integer, got {cand.threads!r}")
    from autotune.backends import BACKENDS

    if cand.backend not in BACKENDS:
        raise ValueError(f"unknown backend {cand.backend!r}; known: {', '.join(BACKENDS)}")
    return cand
