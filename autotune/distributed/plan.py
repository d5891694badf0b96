"""How distributed runs report their phases (``Phases``, ``timed``); the ``Plan`` they run is in
``autotune.core.plans``."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

# ``Plan`` and ``PHASES`` live in ``autotune.core.plans`` (the selector builds plans without importing
# this package); re-exported here for existing callers.
from autotune.core.plans import PHASES, Plan

__all__ = ["PHASES", "Mark", "Phases", "Plan", "timed"]


class Phases:
    """Wall seconds per phase on this rank: ``with phases("compute"): ...`` adds to that phase (and
    its CPU seconds, all threads of the process, to ``cpu``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0
            self.cpu[name] += time.process_time() - c0

    def total(self) -> float:
        return sum(self.seconds.values())

    def mark(self, phase: str) -> Mark:
        """Now: wall and CPU clocks, and ``phase``'s wall and CPU seconds so far."""
        return Mark(time.perf_counter(), time.process_time(), self.seconds.get(phase, 0.0), self.cpu.get(phase, 0.0))


@dataclass(frozen=True)
class Mark:
    """Clocks and one phase's totals at an instant; ``b - a`` is what passed between two marks."""

    wall: float
    cpu: float
    phase: float
    phase_cpu: float

    def __sub__(self, other: Mark) -> Mark:
        return Mark(self.wall - other.wall, self.cpu - other.cpu, self.phase - other.phase,
                    self.phase_cpu - other.phase_cpu)

    def __add__(self, other: Mark) -> Mark:
        return Mark(self.wall + other.wall, self.cpu + other.cpu, self.phase + other.phase,
                    self.phase_cpu + other.phase_cpu)

    @property
    def share(self) -> float:
        """The share of the wall time the process ran (CPU / wall, at most 1; 1 when unknown)."""
        return min(1.0, self.cpu / self.wall) if self.wall > 0 and self.cpu > 0 else 1.0


def timed(phases: Phases | None, name: str) -> AbstractContextManager:
    """``phases(name)``, or nothing when the caller passed no ``Phases``."""
    return phases(name) if phases is not None else nullcontext()
