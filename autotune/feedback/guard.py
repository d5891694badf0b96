"""The run-time guard (DESIGN §10): FFTW never keeps a plan slower than one it timed, and neither do
we. The first calls of each key (family, size class, layout flags, thread budget, choice) run the
selector's choice and the reference call (what numpy/scipy would have run) in turn, timed; once each
ran GUARD_ROUNDS times and for GUARD_SECONDS in all (at most GUARD_MAX_ROUNDS times) the choice is
kept if its best time per flop is strictly under the reference's, else demoted to the reference for
the rest of the process. Every call computes the user's result, so a trial adds no work; after it
a key costs one dict lookup. The verdict's timings go to ``learn.record`` (written beside the
database at exit) for ``refit``.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from autotune.core.assumptions import GUARD_CLASS_STEPS, GUARD_MAX_ROUNDS, GUARD_ROUNDS, GUARD_SECONDS
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import Candidate
from autotune.db import location
from autotune.feedback import learn

T = TypeVar("T")
CHOICE, REFERENCE = "choice", "reference"
Key = tuple


@dataclass
class Trial:
    """One key's timings (seconds per flop) of the choice and of the reference, and its verdict
    (None while on trial, CHOICE kept, REFERENCE demoted)."""

    choice: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    started: int = 0
    verdict: str | None = None
    seconds: dict[str, float] = field(default_factory=lambda: {CHOICE: 0.0, REFERENCE: 0.0})

    def next(self) -> str:
        """Which to run on the next call of the trial: choice first, then in turn."""
        which = CHOICE if self.started % 2 == 0 else REFERENCE
        self.started += 1
        return which

    def add(self, which: str, per_flop: float, seconds: float) -> bool:
        """Keep one timing (``seconds`` the call took); True when it settles the verdict."""
        (self.choice if which == CHOICE else self.reference).append(per_flop)
        self.seconds[which] += seconds
        if self.verdict is None and self._done():
            self.verdict = CHOICE if min(self.choice) < min(self.reference) else REFERENCE
            return True
        return False

    def _done(self) -> bool:
        """Each side ran GUARD_ROUNDS times and GUARD_SECONDS in all, or GUARD_MAX_ROUNDS times."""
        calls = min(len(self.choice), len(self.reference))
        return calls >= GUARD_MAX_ROUNDS or (calls >= GUARD_ROUNDS and min(self.seconds.values()) >= GUARD_SECONDS)

    @property
    def ratio(self) -> float:
        """The choice's best time over the reference's (nan before both ran)."""
        return min(self.choice) / min(self.reference) if self.choice and self.reference else math.nan


_trials: dict[Key, Trial] = {}
_by_call: dict[tuple, Trial] = {}        # (problem, choice, threads) -> its key's trial: no key built per call
_CALLS_KEPT = 4096
_lock = threading.Lock()
clock = time.perf_counter       # the guard's timer (a test may give it another)


def key(problem: Problem, chosen: Candidate, threads: int) -> Key:
    """The guard's key: family, each dimension's size class, the flags (a count by whether it is
    zero), the thread budget and the choice."""
    sizes = tuple(round(GUARD_CLASS_STEPS * math.log2(d)) if d > 0 else 0 for d in problem.dims)
    flags = tuple((name, bool(v) if isinstance(v, int) and not isinstance(v, bool) else v)
                  for name, v in problem.flags.items())
    return (problem.family, sizes, flags, threads, chosen)


def run(problem: Problem, decision, choice: Callable[[], T], reference: Callable[[], T], db=None) -> T:
    """``choice()`` for the selector's ``decision`` on ``problem``, or ``reference()`` where the guard
    demoted it; on trial, the one or the other in turn, timed. A call that raises is not counted."""
    call = (problem, decision.chosen, decision.threads)
    trial = _by_call.get(call)             # the settled path: one dict lookup
    if trial is not None and trial.verdict is not None:
        return choice() if trial.verdict == CHOICE else reference()
    with _lock:
        trial = _trials.setdefault(key(*call), Trial())
        if len(_by_call) >= _CALLS_KEPT:
            _by_call.clear()
        _by_call[call] = trial
        which = trial.next() if trial.verdict is None else trial.verdict
    start = clock()
    out = (choice if which == CHOICE else reference)()
    seconds = clock() - start
    flops = max(FAMILIES[problem.family].flops(problem), 1.0)
    with _lock:
        settled = trial.add(which, seconds / flops, seconds)
    if settled:
        _log(problem, decision, trial, flops, db)
    return out


def _log(problem: Problem, decision, trial: Trial, flops: float, db) -> None:
    """The verdict's best timings against their predictions, for ``refit`` (O(1), no I/O), under
    the database in force now (the default location is resolved here, not when the log is written)."""
    db = str(location.resolve(db))
    learn.record(problem.family, problem.dims, decision.chosen, decision.predicted(decision.chosen),
                 min(trial.choice) * flops, db, keep=True)
    if decision.incumbent is not None:
        learn.record(problem.family, problem.dims, decision.incumbent, decision.predicted(decision.incumbent),
                     min(trial.reference) * flops, db, keep=True)


def verdict(problem: Problem, chosen: Candidate, threads: int) -> Trial | None:
    """The guard's trial of this key so far (None: never run)."""
    return _trials.get(key(problem, chosen, threads))


def kept(problem: Problem, chosen: Candidate, threads: int) -> bool:
    """Whether the guard kept this choice (only then may the C hot path run it without the guard)."""
    return _settled(problem, chosen, threads) == CHOICE


def demoted(problem: Problem, chosen: Candidate, threads: int) -> bool:
    """Whether the guard demoted this choice (the C hot path may then run the reference itself)."""
    return _settled(problem, chosen, threads) == REFERENCE


def _settled(problem: Problem, chosen: Candidate, threads: int) -> str | None:
    trial = _trials.get(key(problem, chosen, threads))
    return None if trial is None else trial.verdict


def verdicts() -> dict[Key, Trial]:
    """Every key's trial in this process."""
    with _lock:
        return dict(_trials)


def reset() -> None:
    """Forget every trial and verdict (tests; a program that changed its machine's load)."""
    with _lock:
        _trials.clear()
        _by_call.clear()


__all__ = ["CHOICE", "REFERENCE", "Trial", "demoted", "kept", "key", "reset", "run", "verdict", "verdicts"]
