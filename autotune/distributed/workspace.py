"""Buffers the distributed runs reuse from one call to the next (per process and thread).

Why: a receive or packing buffer allocated fresh on every call is faulted in page by page while
the data arrive, which can cost several times the transfer itself (the MPI probe times warm
buffers, as repeated calls see them once their buffers are kept). So every buffer that lives
only inside one call (pieces on the non-root ranks, the root's packing and gather buffers,
panels) comes from ``empty(name, shape)``: a named, grow-only, cache-line-aligned buffer of this
thread. What a call returns to the user (C, L on the root; the local pieces of a ``DistMatrix``)
is always fresh memory.

Buffers of ``HUGE_MIN_BYTES`` and more are backed by transparent huge pages (``huge_empty``):
MPI's shared-memory transport moves a message with one kernel copy that walks both processes'
pages, much faster on 2 MiB pages than on 4 KiB ones. numpy's own allocations get huge pages only
where a 2 MiB boundary happens to fall inside them, so the time of a transfer would depend on
where its buffer landed. The communication probe times its messages on buffers made the same way.

The buffers held stay below ``options(workspace_bytes=...)`` (default: ``WORKSPACE_SHARE`` of
physical memory); a request past it gets fresh memory. ``release()`` frees them all.
"""
from __future__ import annotations

import mmap
import os
import threading

import numpy as np

from autotune.core.assumptions import HUGE_MIN_BYTES, HUGE_PAGE, WORKSPACE_FALLBACK_BYTES, WORKSPACE_SHARE
from autotune.core.routines import WORD
from autotune.kernels._front import aligned_empty
from autotune.settings import get_options

__all__ = ["HUGE_MIN_BYTES", "HUGE_PAGE", "empty", "held_bytes", "huge_empty", "limit_bytes", "release"]


_local = threading.local()


def _pool() -> dict[str, np.ndarray]:
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    return pool


def limit_bytes() -> int:
    """Most bytes this thread keeps: the ``workspace_bytes`` option, else a share of physical memory
    (``WORKSPACE_SHARE``)."""
    limit = get_options().workspace_bytes
    if limit is not None:
        return int(limit)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * WORKSPACE_SHARE)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return WORKSPACE_FALLBACK_BYTES


def held_bytes() -> int:
    """Bytes held by this thread's buffers."""
    return sum(buf.nbytes for buf in _pool().values())


def release() -> None:
    """Free this thread's buffers (the next calls allocate, and fault in, fresh ones)."""
    _pool().clear()


def huge_empty(size: int) -> np.ndarray:
    """Uninitialised float64 1-D array of ``size`` elements on a 2 MiB boundary, its pages
    advised huge (``MADV_HUGEPAGE``, which the kernel honours unless THP is off); an aligned
    ``numpy.empty`` where the platform cannot map or advise memory."""
    size = max(int(size), 1)
    nbytes = -(-WORD * size // HUGE_PAGE) * HUGE_PAGE
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if advise is None or not flags:
        return aligned_empty(size)
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=flags)
        raw = np.frombuffer(region, dtype=np.uint8)
        start = -raw.ctypes.data % HUGE_PAGE
        region.madvise(advise, start, nbytes)
    except (OSError, ValueError):
        return aligned_empty(size)
    return raw[start:start + WORD * size].view(np.float64)     # keeps ``region`` alive


def empty(name: str, shape, order: str = "C") -> np.ndarray:
    """A float64 array of ``shape`` in buffer ``name``: its contents are garbage, and it is valid
    until the next request for ``name`` on this thread (so: one name per role within a call)."""
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    size = int(np.prod(shape, dtype=np.int64))
    pool = _pool()
    buf = pool.get(name)
    if buf is None or buf.size < size:
        pool.pop(name, None)
        if held_bytes() + WORD * size > limit_bytes():
            return np.empty(shape, order=order)
        buf = pool[name] = huge_empty(size) if WORD * size >= HUGE_MIN_BYTES else aligned_empty(max(size, 1))
    return buf[:size].reshape(shape, order=order)
