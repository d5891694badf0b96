"""The one correction stack both selectors (``rank``: one process, ``distributed``: MPI plans) put on
an analytical model's prediction before ranking (docs/models.md#selection.single).

The analytical model comes first; then, in ``STEPS`` order, each measured correction or hedge that
applies to the candidate: a step takes the running prediction and the candidate's context and
returns the new prediction and a one-line note (empty: it did nothing). The incumbent margin
(one process) stays the final choice rule, after the stack.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

# The documented order: what each step does, whichever selector runs it.
STEPS: dict[str, str] = {
    "fitted": "a fitted model of measured times replaces the analytical one",
    "overhead": "fixed cost around the routine: tuned-call dispatch (one process), per-call overhead (MPI)",
    "contention": "cores shared: the previous call's pool or this pool waking, measured (one process); "
                  "ranks on shared cores (MPI)",
    "quota": "a host's CPU quota: ranks x threads beyond what it gives run time-sliced (MPI)",
    "risk": "hedge on composed models: the prior, or validation's measured risk",
    "calibration": "measured factors: learned corrections (one process); a plan series' fitted T(n, p), "
                   "else fitted phase factors (MPI)",
}

P = TypeVar("P")
Step = Callable[[Any, Any], tuple[Any, str]]


@dataclass(frozen=True)
class Correction:
    """One applied step: its name, the predicted seconds before and after it, and what it did."""

    step: str
    before: float
    after: float
    note: str

    def describe(self) -> str:
        """Compact text: ``contention x2.00 (thread-pool contention)`` or ``fitted 3.10->2.95 ms (...)``."""
        if self.before > 0 and self.step in ("contention", "risk", "calibration"):
            change = f"x{self.after / self.before:.2f}"
        else:
            change = f"{self.before * 1e3:.3f}->{self.after * 1e3:.3f} ms"
        return f"{self.step} {change}" + (f" ({self.note})" if self.note else "")


def stack(steps: Mapping[str, Step]) -> tuple[tuple[str, Step], ...]:
    """The given steps (a subset of ``STEPS``, by name) in ``STEPS`` order; checked once, run often."""
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise ValueError(f"unknown correction steps {sorted(unknown)}; the stack is {list(STEPS)}")
    return tuple((name, steps[name]) for name in STEPS if name in steps)


def apply(prediction: P, context, steps: Mapping[str, Step] | tuple[tuple[str, Step], ...],
          total: Callable[[Any], float] = float) -> tuple[P, tuple[Correction, ...]]:
    """Run ``steps`` (a ``stack``, or a mapping made into one) on ``prediction`` in ``STEPS`` order;
    ``total`` reads seconds off a prediction (a float, or a dict of phases). Steps that neither
    change the prediction nor leave a note are not recorded."""
    done: list[Correction] = []
    for name, fn in stack(steps) if isinstance(steps, Mapping) else steps:
        before = total(prediction)
        prediction, note = fn(prediction, context)
        after = total(prediction)
        if note or after != before:
            done.append(Correction(name, before, after, note))
    return prediction, tuple(done)


def summary(corrections: tuple[Correction, ...]) -> str:
    """One line of the steps that did something (empty when none did)."""
    done = [c.describe() for c in corrections if c.after != c.before or c.note]
    return "corrections: " + ", ".join(done) if done else ""


__all__ = ["STEPS", "Correction", "Step", "apply", "stack", "summary"]
