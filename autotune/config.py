"""Run-time options: thread budget, whether Strassen may be used, which database to read.

Set globally with ``set_options(...)`` or for a block with ``with options(...):`` (like
threadpoolctl's ``threadpool_limits``). The selector caches decisions per option values.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

_cores: list = [0, 0.0]     # cached core count and when to look again (it is asked on every call)


def available_cores() -> int:
    """Cores this process may run on (affinity-aware; re-read at most once a second)."""
    now = time.monotonic()
    if now > _cores[1]:
        try:
            _cores[0] = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - non-Linux
            _cores[0] = os.cpu_count() or 1
        _cores[1] = now + 1.0
    return _cores[0]


@dataclass(frozen=True)
class Options:
    """``threads``: most threads a tuned call may use (default: all available cores).
    ``allow_strassen``: Strassen changes rounding error, so it is opt-in.
    ``db``: database path (None: $AUTOTUNE_DB or the per-user default).
    ``workspace_bytes``: most bytes the distributed runs keep in buffers reused between calls
    (None: an eighth of physical memory; 0: allocate afresh every call, see
    ``autotune.distributed.workspace``)."""

    threads: int | None = None
    allow_strassen: bool = False
    db: str | None = None
    workspace_bytes: int | None = None

    @property
    def thread_budget(self) -> int:
        return self.threads if self.threads is not None else available_cores()


_current = Options()


def get_options() -> Options:
    return _current


def set_options(**changes) -> Options:
    """Change options for the rest of the process; returns the previous ones."""
    global _current
    previous = _current
    _current = _validated(replace(_current, **changes))
    return previous


@contextlib.contextmanager
def options(**changes) -> Iterator[Options]:
    """Temporarily change options: ``with autotune.options(threads=1, allow_strassen=True): ...``."""
    previous = set_options(**changes)
    try:
        yield _current
    finally:
        _restore(previous)


def _restore(previous: Options) -> None:
    global _current
    _current = previous


def _validated(opts: Options) -> Options:
    if opts.threads is not None and (not isinstance(opts.threads, int) or opts.threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {opts.threads!r}")
    if opts.workspace_bytes is not None and (not isinstance(opts.workspace_bytes, int) or opts.workspace_bytes < 0):
        raise ValueError(f"workspace_bytes must be a non-negative integer or None, got {opts.workspace_bytes!r}")
    return opts
