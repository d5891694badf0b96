"""Buffers the distributed runs reuse from one call to the next (per process and thread).

Why: a receive or packing buffer allocated fresh on every call is faulted in page by page while
the data arrive. Here a fresh 4 MiB receive buffer cost ~1000 page faults and 1.0-1.5 ms, six
times what sending the 4 MiB takes (session 10; the MPI probe times warm buffers, as repeated
calls see them once their buffers are kept). So every buffer that lives only inside one call
(pieces on the non-root ranks, the root's packing and gather buffers, panels) comes from
``empty(name, shape)``: a named, grow-only, cache-line-aligned buffer of this thread. What a
call returns to the user (C, L on the root; the local pieces of a ``DistMatrix``) is always
fresh memory.

The buffers held stay below ``options(workspace_bytes=...)`` (default: an eighth of physical
memory); a request past it gets fresh memory. ``release()`` frees them all.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from autotune.kernels._front import aligned_empty

__all__ = ["empty", "held_bytes", "limit_bytes", "release"]

_local = threading.local()


def _pool() -> dict[str, np.ndarray]:
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    return pool


def limit_bytes() -> int:
    """Most bytes this thread keeps: the ``workspace_bytes`` option, else physical memory / 8."""
    from autotune.config import get_options

    limit = get_options().workspace_bytes
    if limit is not None:
        return int(limit)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 30


def held_bytes() -> int:
    """Bytes held by this thread's buffers."""
    return sum(buf.nbytes for buf in _pool().values())


def release() -> None:
    """Free this thread's buffers (the next calls allocate, and fault in, fresh ones)."""
    _pool().clear()


def empty(name: str, shape, order: str = "C") -> np.ndarray:
    """A float64 array of ``shape`` in buffer ``name``: its contents are garbage, and it is valid
    until the next request for ``name`` on this thread (so: one name per role within a call)."""
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    size = int(np.prod(shape, dtype=np.int64))
    pool = _pool()
    buf = pool.get(name)
    if buf is None or buf.size < size:
        pool.pop(name, None)
        if held_bytes() + 8 * size > limit_bytes():
            return np.empty(shape, order=order)
        buf = pool[name] = aligned_empty(max(size, 1))
    return buf[:size].reshape(shape, order=order)
