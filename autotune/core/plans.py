"""What selection produces and execution runs: a single-process ``Candidate`` and a distributed ``Plan``.

Plain data at the bottom of the layers (docs/architecture.md#layers): the selector (``select``,
``learn``) builds them, execution (``dispatch``, ``distributed``) runs them, and neither has to
import the other to share them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# algorithm -> (routine family, name of the numeric parameter or None)
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "blas": ("gemm", None),           # the library's dgemm
    "strassen": ("gemm", "levels"),   # sequential Strassen, leaves on the library's dgemm (variant: add kernel)
    "strassen_nested": ("gemm", "levels"),  # Strassen's top-level products on P1 workers (variant: P1)
    "potrf": ("cholesky", None),      # the library's LAPACK dpotrf
    "blocked": ("cholesky", "block"),  # our right-looking blocked driver (variant: trailing update form)
    "gemv": ("cholesky", None),       # unblocked, left-looking, one gemv per column
    "axpy": ("cholesky", None),       # unblocked, outer product by axpy
    "getrf": ("lu", None),            # the library's LAPACK dgetrf
    "getrf_blocked": ("lu", "block"),  # our right-looking blocked LU (Cython driver over the library)
    "gesv": ("solve", None),          # the library's dgetrf then dgetrs on the right-hand sides
    "getrs": ("lu_solve", None),      # the library's dgetrs from given factors
    "sweep": ("stencil", None),       # the field swept step by step by the backend's stencil kernel
}

# Distributed algorithms whose data may follow the ranks' speeds (``Plan.weights``, HoHe): BSR's
# rows; the block-cyclic factorizations' blocks per cycle (``layout.grid_weights``).
WEIGHTED = ("bsr", "cholesky", "lu", "gesv", "blocking", "overlap", "border_first")

# Phase names shared by the distributed algorithms (measured) and their models (predicted).
PHASES = ("distribution", "communication", "compute", "collection")


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
            extra = f" l={self.param}" + (" add=omp" if self.variant == 1 else "")
        elif self.algorithm == "strassen_nested":
            p1 = max(self.variant, 1)
            extra = f" l={self.param} P1={p1}xP2={max(self.threads // p1, 1)}"
        elif self.algorithm == "blocked":
            extra = f" b={self.param} v{self.variant}"
        elif self.algorithm == "getrf_blocked":
            extra = f" b={self.param}"
        return f"{self.algorithm}{extra} [{self.backend}, {self.threads}t]"

    @property
    def family(self) -> str:
        return ALGORITHMS[self.algorithm][0]

    def as_dict(self) -> dict:
        return asdict(self)


def grids(p: int) -> list[tuple[int, int]]:
    """Every r x c process grid with r * c = p (1 x p and p x 1 included: primes allowed)."""
    return [(r, p // r) for r in range(1, p + 1) if p % r == 0]


@dataclass(frozen=True)
class Plan:
    """A distributed configuration: algorithm, processes used, grid, block, recursion level,
    BLAS threads per rank and the per-rank BLAS backend. Ranks >= p take no part."""

    algorithm: str          # bsr | cbsr | cannon | summa | strassen_summa | strassen_ms | cholesky | lu | gesv
    #                         | blocking | overlap | border_first (stencil schedules)
    p: int
    r: int = 1
    c: int = 1
    b: int = 0              # SUMMA panel / block-cyclic block / stencil halo width (0: unused)
    level: int = 0          # Strassen recursion level (0: unused)
    threads: int = 1
    backend: str = "numpy-openblas"
    weights: tuple[float, ...] | None = None   # each rank's speed: its share of the data follows it (HoHe)
    ranks: tuple[int, ...] | None = None       # the communicator's ranks taking part, in grid order, the
    #                                            root first (a mapping, 001 §5.4); None: ranks 0..p-1

    def used_ranks(self, size: int, root: int = 0) -> tuple[int, ...]:
        """The communicator ranks that run the plan, in their order in it (the root first)."""
        if self.ranks is not None:
            return self.ranks
        return tuple(sorted(range(min(self.p, size)), key=lambda r: (r - root) % size))

    def __post_init__(self):
        if self.p < 1 or self.r * self.c != self.p:
            raise ValueError(f"grid {self.r}x{self.c} does not hold p={self.p} processes")
        if self.weights is not None:
            if (self.algorithm not in WEIGHTED or len(self.weights) != self.p
                    or not all(w > 0 for w in self.weights)):
                raise ValueError(f"weights {self.weights}: {', '.join(WEIGHTED)} only, one positive weight per process")
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if self.ranks is not None:
            ranks = tuple(int(r) for r in self.ranks)
            if len(ranks) != self.p or len(set(ranks)) != self.p or min(ranks) < 0:
                raise ValueError(f"ranks {self.ranks}: p={self.p} distinct non-negative ranks")
            object.__setattr__(self, "ranks", ranks)

    def __str__(self) -> str:
        extra = (f" b={self.b}" if self.b else "") + (f" l={self.level}" if self.level else "")
        extra += " w=" + ",".join(f"{w:.2g}" for w in self.weights) if self.weights else ""
        extra += " ranks=" + ",".join(map(str, self.ranks)) if self.ranks else ""
        return f"{self.algorithm} p={self.p} grid={self.r}x{self.c}{extra} [{self.backend}, {self.threads}t]"


__all__ = ["ALGORITHMS", "PHASES", "WEIGHTED", "Candidate", "Plan", "grids"]
