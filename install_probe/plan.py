"""Expanding a profile into the ordered list of points to measure."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.core.routines import PATTERNS, ROUTINES, dims_of, flops
from autotune.settings import get_options

from .profile import Profile

# Rough rates used only to weight the progress bar / ETA (flop/s per thread by BLAS level).
_ETA_RATE = {3: 40e9, 2: 4e9, 1: 2e9}
_ETA_SLOWDOWN = {"numba-reference": 6.0, "blis": 1.5}


@dataclass(frozen=True, order=True)
class Task:
    """One measured point: a routine under a pattern at size x (and param) on backend/threads."""

    backend: str
    threads: int
    routine: str
    pattern: str
    param: float
    x: int
    dtype: str = "float64"

    @property
    def key(self) -> tuple:
        """Same order and meaning as the database's KEY_FIELDS."""
        return (self.routine, self.backend, self.threads, self.dtype, self.pattern, self.param, self.x)

    @property
    def flops(self) -> float:
        return flops(self.routine, dims_of(self.routine, self.pattern, self.x, self.param))

    def eta_weight(self, reps: int) -> float:
        """Guess of the seconds this point takes (for the progress bar only)."""
        rate = _ETA_RATE[ROUTINES[self.routine].level] * self.threads
        return 0.02 + reps * self.flops / rate * _ETA_SLOWDOWN.get(self.backend, 1.0)


def expand(profile: Profile, backends: dict, only: set[str] | None = None) -> list[Task]:
    """Tasks for the available ``backends`` (name -> Backend), filtered by ``only`` (routine
    or backend names), grouped by backend and thread count, sizes ascending. Thread counts above
    the thread budget (``Options.budget``: what a tuned call here may use) are not measured."""
    tasks, budget = set(), get_options().thread_budget
    for m in profile.measures:
        for b in m.backends or profile.backends:
            be = backends.get(b)
            if be is None or (only and _excluded(only, b)):
                continue
            for t in m.threads or profile.threads:
                if t > be.max_threads or t > budget:
                    continue
                for r in m.routines:
                    if not be.supports(PATTERNS[m.pattern].driver(r)) or (only and _excluded_routine(only, r)):
                        continue
                    limit = m.max_size.get(b)
                    tasks.update(Task(b, t, r, m.pattern, p, x) for x in m.sizes for p in m.params
                                 if limit is None or x <= limit)
    return sorted(tasks, key=lambda k: (k.backend, k.threads, k.x, k.routine, k.pattern, k.param))


def _excluded(only: set[str], backend: str) -> bool:
    names = {o for o in only if o not in ROUTINES}
    return bool(names) and backend not in names


def _excluded_routine(only: set[str], routine: str) -> bool:
    names = {o for o in only if o in ROUTINES}
    return bool(names) and routine not in names
