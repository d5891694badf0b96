"""This host's processes as Linux's /proc shows them: one reader of ``/proc/PID/stat`` for the
launchers that reap what they started (the installer's mpiexec, the testbed's jobs)."""
from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, ..., start time at [19]);
    None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), None if there is none or it has ended
    (a zombie): with its pid it tells a process from a later one given the same pid."""
    fields = stat_fields(pid)
    return None if fields is None or len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]
