"""The cores and memory this process may use now (affinity, /proc/meminfo, the cgroup limit), re-read
at most once a second."""
from __future__ import annotations

import os
import time

_cores: list = [0, 0.0]     # cached core count and when to look again (it is asked on every call)



_memory: list = [0, 0.0]    # the same for the available memory



MEMORY_GRAIN = 256 << 20    # the available memory is rounded down to this, so decisions cached under it last



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



def available_memory() -> int:
    """Bytes this host can still give without swapping (/proc/meminfo's MemAvailable, else the
    physical memory), rounded down to ``MEMORY_GRAIN``; re-read at most once a second."""
    now = time.monotonic()
    if now > _memory[1]:
        _memory[0], _memory[1] = _read_available(), now + 1.0
    return _memory[0]



def _read_available() -> int:
    """MemAvailable (else the free pages), capped by a cgroup v2 limit."""
    try:
        with open("/proc/meminfo") as f:
            avail = 1024 * next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read())
        if limit != "max":
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(avail // MEMORY_GRAIN, 1) * MEMORY_GRAIN


