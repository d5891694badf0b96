"""What the distributed selector chooses (a ``Plan``) and how runs report their phases."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

# Phase names shared by the algorithms (measured) and the models (predicted).
PHASES = ("distribution", "communication", "compute", "collection")


@dataclass(frozen=True)
class Plan:
    """A distributed configuration: algorithm, processes used, grid, block, recursion level,
    BLAS threads per rank and the per-rank BLAS backend. Ranks >= p take no part."""

    algorithm: str          # bsr | cbsr | cannon | summa | strassen_summa | strassen_ms | cholesky
    p: int
    r: int = 1
    c: int = 1
    b: int = 0              # SUMMA panel / block-cyclic block (0: unused)
    level: int = 0          # Strassen recursion level (0: unused)
    threads: int = 1
    backend: str = "numpy-openblas"

    def __post_init__(self):
        if self.p < 1 or self.r * self.c != self.p:
            raise ValueError(f"grid {self.r}x{self.c} does not hold p={self.p} processes")

    def __str__(self) -> str:
        extra = (f" b={self.b}" if self.b else "") + (f" l={self.level}" if self.level else "")
        return f"{self.algorithm} p={self.p} grid={self.r}x{self.c}{extra} [{self.backend}, {self.threads}t]"


class Phases:
    """Wall seconds per phase on this rank: ``with phases("compute"): ...`` adds to that phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def total(self) -> float:
        return sum(self.seconds.values())


def timed(phases: Phases | None, name: str) -> AbstractContextManager:
    """``phases(name)``, or nothing when the caller passed no ``Phases``."""
    return phases(name) if phases is not None else nullcontext()
