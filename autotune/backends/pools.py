"""Which library's thread pool ran last, and how long ago: the state a call's cost depends on.

Each library keeps its own pool of threads that spin for a while after a call; a call on another
library (or on the same one at another thread count) right after pays for them. The record lives
in C (``autotune.kernels._front``) so that the tuned calls' hot paths keep it at no cost; every
path that runs a library call notes it here.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from autotune.host.budget import set_library_limit
from autotune.kernels import _front

from . import BACKENDS, BackendUnavailable, get

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
    code, threads, gap, _, _ = _front.pool_state()
    return PoolState(NAMES[code], threads, gap) if code else None


FOREIGN = PoolState("", 0, 0.0)     # a call of the program's own (numpy, scipy) may have run since


def from_code(code: int) -> PoolState | None:
    """The state a C state code stands for: None (cold), FOREIGN, or the last call (gap taken as 0)."""
    if code == _front.FOREIGN:
        return FOREIGN
    return PoolState(NAMES[code // 256], code % 256, 0.0) if code else None


def hot() -> PoolState | None:
    """The state decisions are taken and remembered under now (``from_code(state_code())``)."""
    return from_code(state_code())


def state_code() -> int:
    """The integer the C hot paths key remembered decisions by: the last call while within the
    foreign gap, FOREIGN up to the hot window (see ``set_hot_window``), else 0 (cold)."""
    return _front.pool_code()


class _Held(threading.local):
    """Per Python thread: the library codes it holds a lease on (each thread starts with none)."""

    def __init__(self):
        self.codes: set[int] = set()


_HELD = _Held()
LEASE_POLL_SECONDS = 2e-4          # how often a waiting call looks again (C holders do not signal)


class lease:
    """Run the block with ``backend`` at ``threads`` threads while other Python threads may call it:
    calls at the same count share the library, a call at another count waits until it is free (a
    library's thread count is process-wide). The first holder sets the count, the last restores it
    (through the library's C setter, in one step under the GIL); nested use within one Python
    thread does not wait. The block's call is noted (``note``)."""

    __slots__ = ("backend", "threads", "code", "setter", "by_python", "nested")

    def __init__(self, backend, threads: int):
        self.backend, self.threads, self.code = backend, threads, CODES[backend.name]

    def __enter__(self) -> None:
        held = _HELD.codes
        self.nested = self.code in held
        if self.nested:
            return
        self.setter, getter = self.backend.thread_addresses or (0, 0)
        self.by_python = self.backend.set_threads is not None and not self.setter
        while not (taken := _front.lease_enter(self.code, self.threads, self.setter, getter)):
            time.sleep(LEASE_POLL_SECONDS)
        held.add(self.code)
        if taken == 1 and self.by_python:
            _front.lease_before(self.code, self.backend.get_threads())
            if _front.lease_before(self.code) != self.threads:
                self.backend.set_threads(self.threads)

    def __exit__(self, *exc) -> None:
        if self.nested:
            return
        _HELD.codes.discard(self.code)
        _front.pool_note(self.code, self.threads)
        if _front.lease_exit(self.code, self.threads, self.setter) and self.by_python \
                and _front.lease_before(self.code) != self.threads:
            self.backend.set_threads(_front.lease_before(self.code))


# The libraries numpy's and scipy's own calls run on: the thread count the program left on them
# (threadpool_limits, their setters, OPENBLAS_NUM_THREADS at start) caps every tuned call.
USER_LIBRARIES = ("numpy-openblas", "scipy-openblas")
_getters: list[tuple[str, int, Callable[[], int]]] | None = None


def user_limit() -> tuple[int, str] | None:
    """The fewest threads the program left set on the ``USER_LIBRARIES`` and that library (None:
    none loads): each library's count now, or while this Python thread holds it at autotune's
    count, the count its lease restores. O(1): one C call per library. Another thread's lease is
    not told apart (the C lease table gives Python no holder count): during it the count read is
    the one that lease set."""
    global _getters
    if _getters is None:
        _getters = _user_getters()
    held = _HELD.codes
    best = None
    for name, code, count in _getters:
        n = _front.lease_before(code) if code in held else count()
        if n >= 1 and (best is None or n < best[0]):
            best = (n, name)
    return best


def _user_getters() -> list[tuple[str, int, Callable[[], int]]]:
    """(name, code, count reader) of each user library that loads and can tell its count."""
    out = []
    for name in USER_LIBRARIES:
        try:
            be = get(name)
        except BackendUnavailable:
            continue
        if be.get_threads is not None:
            out.append((name, CODES[name], be.get_threads))
    return out


set_library_limit(user_limit)


def set_hot_window(seconds: float, foreign_gap: float = float("inf")) -> None:
    """How long after a call its pool still changes the next call's cost, and after how long a call
    of the program's own may have run in between (both from the measured SPs)."""
    _front.set_hot_window(max(0.0, float(seconds)), max(0.0, float(foreign_gap)))


__all__ = ["CODES", "FOREIGN", "NAMES", "USER_LIBRARIES", "PoolState", "from_code", "hot", "last", "lease", "note",
           "parse", "set_hot_window", "state_code", "user_limit"]


def call_with_threads(backend, threads: int, fn, *args):
    """``fn(*args)`` with ``backend`` at ``threads`` threads, under its lease (``lease``:
    concurrent Python threads at other counts wait), noted as the last call on its pool."""
    with lease(backend, threads):
        return fn(*args)
