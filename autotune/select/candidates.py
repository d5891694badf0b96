"""Candidate configurations (algorithm parameters, AP) and how each is enumerated."""
from __future__ import annotations

from dataclasses import MISSING, fields

from autotune.backends import BACKENDS, BackendUnavailable
from autotune.backends import get as get_backend
from autotune.core.families import FAMILIES

# ``Candidate`` and ``ALGORITHMS`` live in ``autotune.core.plans`` (shared by selection and execution).
from autotune.core.plans import ALGORITHMS, Candidate

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
    """A forced configuration (Candidate or dict of its fields) checked for ``family``: ValueError,
    saying what a config of the family accepts, for a key missing or unknown, an algorithm of another
    family, a bad thread count, or a backend unknown, not loadable here or without the family's routines."""
    if isinstance(config, dict):
        cand = _from_dict(config, family)
    elif isinstance(config, Candidate):
        cand = config
    else:
        raise TypeError(f"config must be a Candidate or a dict, not {type(config).__name__}")
    if not isinstance(cand.algorithm, str) or ALGORITHMS.get(cand.algorithm, ("",))[0] != family:
        raise ValueError(f"config: algorithm {cand.algorithm!r} is not a {family} algorithm; "
                         f"choose from {_algorithms(family)}")
    if not isinstance(cand.threads, int) or isinstance(cand.threads, bool) or cand.threads < 1:
        raise ValueError(f"config: threads must be a positive integer, got {cand.threads!r}")
    _check_backend(cand.backend, family)
    return cand


def _accepted(family: str) -> str:
    """What a forced config of ``family`` takes, in words (for its errors)."""
    required = [f.name for f in fields(Candidate) if f.default is MISSING]
    optional = [f.name for f in fields(Candidate) if f.default is not MISSING]
    return (f"a {family} config takes {', '.join(required)} (optionally {', '.join(optional)}); "
            f"algorithms {_algorithms(family)}; backends here {_backends_for(family)}")


def _algorithms(family: str) -> list[str]:
    return [a for a, (f, _) in ALGORITHMS.items() if f == family]


def _from_dict(config: dict, family: str) -> Candidate:
    names = [f.name for f in fields(Candidate)]
    unknown = sorted(set(config) - set(names), key=str)
    if unknown:
        raise ValueError(f"config has unknown keys {unknown}; {_accepted(family)}")
    missing = [f.name for f in fields(Candidate) if f.default is MISSING and f.name not in config]
    if missing:
        raise ValueError(f"config misses {', '.join(missing)}; {_accepted(family)}")
    return Candidate(**config)


def _backends_for(family: str) -> list[str]:
    """The backends that load here and have the family's routines."""
    out = []
    for name in BACKENDS:
        try:
            be = get_backend(name)
        except BackendUnavailable:
            continue
        if all(be.supports(r) for r in FAMILIES[family].library_routines):
            out.append(name)
    return out


def _check_backend(name, family: str) -> None:
    """ValueError unless the backend ``name`` is known, loads here and has the family's routines."""
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"config: unknown backend {name!r}; {_accepted(family)}")
    try:
        be = get_backend(name)
    except BackendUnavailable as exc:
        raise ValueError(f"config: backend {name!r} is not available here ({exc}); {_accepted(family)}") from exc
    lacking = [r for r in FAMILIES[family].library_routines if not be.supports(r)]
    if lacking:
        raise ValueError(f"config: backend {name!r} has no {', '.join(lacking)}; {_accepted(family)}")
