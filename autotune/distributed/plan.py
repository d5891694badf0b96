"""How distributed runs report their phases (``Phases``, ``timed``); the ``Plan`` they run is in ``autotune.plans``."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

# ``Plan`` and ``PHASES`` live in ``autotune.plans`` (the selector builds plans without importing
# this package); re-exported here for existing callers.
from autotune.plans import PHASES, Plan

__all__ = ["PHASES", "Phases", "Plan", "timed"]


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
