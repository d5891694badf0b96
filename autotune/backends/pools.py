"""Which library's thread pool ran last, and how long ago: the state a call's cost depends on.

Each library keeps its own pool of threads that spin for a while after a call; a call on another
library (or on the same one at another thread count) right after pays for them. The record lives
in C (``autotune.kernels._front``) so that the tuned calls' hot paths keep it at no cost; every
path that runs a library call notes it here.
"""
from __future__ import annotations

from dataclasses import dataclass

from autotune.kernels import _front

from . import BACKENDS

CODES: dict[str, int] = {name: i + 1 for i, name in enumerate(BACKENDS)}
NAMES: dict[int, str] = {code: name for name, code in CODES.items()}


@dataclass(frozen=True)
class PoolState:
    """The last library call: its library, thread count, and seconds since it ended."""

    backend: str
    threads: int
    gap: float

    def __str__(self) -> str:
        return f"{self.backend} {self.threads}t {self.gap * 1e3:.3g} ms ago"


def parse(text: str) -> PoolState:
    """``"LIBRARY:THREADS"`` (e.g. ``numpy-openblas:2``) as the state right after such a call;
    ValueError if malformed."""
    name, _, threads = str(text).rpartition(":")
    if name not in CODES or not threads.isdigit() or int(threads) < 1:
        raise ValueError(f"after: expected LIBRARY:THREADS with LIBRARY one of {', '.join(CODES)}, got {text!r}")
    return PoolState(name, int(threads), 0.0)


def note(backend: str, threads: int) -> None:
    """Record that a call on ``backend`` with ``threads`` threads just ended."""
    _front.pool_note(CODES[backend], threads)


def last() -> PoolState | None:
    """The last recorded library call, or None if there was none."""
    code, threads, gap = _front.pool_state()
    return PoolState(NAMES[code], threads, gap) if code else None


def hot() -> PoolState | None:
    """The last call while it still counts (within the hot window, see ``set_hot_window``), else None:
    the state decisions are taken and remembered under."""
    code = _front.pool_code()
    return PoolState(NAMES[code // 256], code % 256, 0.0) if code else None


def state_code() -> int:
    """``hot()`` as the integer the C hot paths key remembered decisions by."""
    return _front.pool_code()


def set_hot_window(seconds: float) -> None:
    """How long after a call its pool still changes the next call's cost (from the measured SPs)."""
    _front.set_hot_window(max(0.0, float(seconds)))


__all__ = ["CODES", "NAMES", "PoolState", "hot", "last", "note", "parse", "set_hot_window", "state_code"]
