"""Candidate configurations (algorithm parameters, AP) and how each is enumerated."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

# algorithm -> (routine family, name of the numeric parameter or None)
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "blas": ("gemm", None),           # the library's dgemm
    "strassen": ("gemm", "levels"),   # sequential Strassen, leaves on the library's dgemm
    "potrf": ("cholesky", None),      # the library's LAPACK dpotrf
    "blocked": ("cholesky", "block"),  # our right-looking blocked driver (variant: trailing update form)
    "gemv": ("cholesky", None),       # unblocked, left-looking, one gemv per column
    "axpy": ("cholesky", None),       # unblocked, outer product by axpy
}

# Backends whose BLAS tables carry the Cython Cholesky drivers (blocked/gemv/axpy).
DRIVER_BACKENDS = ("numpy-openblas", "scipy-openblas", "mkl")
STRASSEN_LEVELS = (1, 2, 3, 4)
# Smallest Strassen leaf worth considering (below it additions dominate everywhere).
MIN_STRASSEN_LEAF = 64


@dataclass(frozen=True, order=True)
class Candidate:
    """One point of the AP space: algorithm, library, thread count, block/level, variant."""

    algorithm: str
    backend: str
    threads: int
    param: int = 0
    variant: int = 0

    def __str__(self) -> str:
        extra = ""
        if self.algorithm == "strassen":
            extra = f" l={self.param}"
        elif self.algorithm == "blocked":
            extra = f" b={self.param} v{self.variant}"
        return f"{self.algorithm}{extra} [{self.backend}, {self.threads}t]"

    @property
    def family(self) -> str:
        return ALGORITHMS[self.algorithm][0]

    def as_dict(self) -> dict:
        return asdict(self)


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
