"""Run-time options: thread budget, whether Strassen may be used, which database to read.

Per context, like ``decimal.localcontext`` and numpy's ``errstate``: ``with options(...):``
changes them for the current thread (or asyncio task) only, and ``set_options(...)`` changes
the process default, seen by every context that has not overridden it (new threads start from
it). The selector caches decisions per option values.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

from autotune.host.budget import Budget, thread_budget
from autotune.host.resources import available_cores, available_memory


@dataclass(frozen=True)
class Options:
    """``threads``: most threads a tuned call may use (default: all available cores; other limits
    the user set, such as ``threadpool_limits`` or a cgroup quota, may lower it: ``budget``).
    ``allow_strassen``: Strassen changes rounding error, so it is opt-in.
    ``db``: database path (None: $AUTOTUNE_DB or the per-user default).
    ``workspace_bytes``: most bytes the distributed runs keep in buffers reused between calls
    (None: an eighth of physical memory; 0: allocate afresh every call, see
    ``autotune.distributed.workspace``).
    ``min_efficiency``: on a shared cluster, run the fastest distributed plan whose predicted
    efficiency ``T_seq / (cores T_par)`` is at least this (None: the fastest plan; 0.8 in 004).
    ``memory_bytes``: most bytes a call may allocate on one host beyond its operands; candidates
    and plans predicted to need more are dropped (None: the host's available memory, 0: no cap).
    ``guard``: time the first calls of each choice against numpy/scipy's own call and demote a
    choice that is not faster (``autotune.feedback.guard``; False: run the choice unchecked)."""

    threads: int | None = None
    allow_strassen: bool = False
    db: str | None = None
    workspace_bytes: int | None = None
    min_efficiency: float | None = None
    memory_bytes: int | None = None
    guard: bool = True

    @property
    def thread_budget(self) -> int:
        """Most threads a tuned call may use: the smallest limit set (``budget``)."""
        return self.budget.threads

    @property
    def budget(self) -> Budget:
        """The thread budget and the limit that sets it: ``threads``, the thread-count environment
        variables, the count left on numpy's and scipy's OpenBLAS (``threadpool_limits``), the
        cgroup CPU quota or the affinity mask, whichever is smallest (``autotune.host.budget``)."""
        return thread_budget(self.threads, available_cores())

    @property
    def memory_cap(self) -> int | None:
        """The cap in bytes in force (None: none)."""
        if self.memory_bytes is None:
            return available_memory()
        return self.memory_bytes or None


_default = Options()
# This context's override of the process default (None: none, the default applies).
_local: ContextVar[Options | None] = ContextVar("autotune_options", default=None)


def get_options() -> Options:
    """The options in force in the current context (its override, else the process default)."""
    local = _local.get()
    return _default if local is None else local


def set_options(**changes) -> Options:
    """Change the process default (contexts inside ``options()`` keep their own); returns the previous default."""
    global _default
    previous = _default
    _default = _validated(replace(_default, **changes))
    return previous


@contextlib.contextmanager
def options(**changes) -> Iterator[Options]:
    """Change options for this block in the current context only:
    ``with autotune.options(threads=1, allow_strassen=True): ...``; other threads are unaffected.
    The block sees the options in force when it began with ``changes`` applied."""
    token = _local.set(_validated(replace(get_options(), **changes)))
    try:
        yield _local.get()
    finally:
        _local.reset(token)


def _validated(opts: Options) -> Options:
    if opts.threads is not None and (not isinstance(opts.threads, int) or isinstance(opts.threads, bool)
                                     or opts.threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {opts.threads!r}")
    if opts.workspace_bytes is not None and (not isinstance(opts.workspace_bytes, int) or opts.workspace_bytes < 0):
        raise ValueError(f"workspace_bytes must be a non-negative integer or None, got {opts.workspace_bytes!r}")
    if opts.memory_bytes is not None and (isinstance(opts.memory_bytes, bool) or not isinstance(opts.memory_bytes, int)
                                          or opts.memory_bytes < 0):
        raise ValueError(f"memory_bytes must be a non-negative integer or None, got {opts.memory_bytes!r}")
    if not isinstance(opts.guard, bool):
        raise ValueError(f"guard must be True or False, got {opts.guard!r}")
    eff = opts.min_efficiency
    if eff is not None and (isinstance(eff, bool) or not isinstance(eff, (int, float)) or not 0.0 < eff <= 1.0):
        raise ValueError(f"min_efficiency must be in (0, 1] or None, got {eff!r}")
    return opts
