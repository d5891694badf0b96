"""The registry of the jobs ``testbed mpiexec`` runs: one JSON file per job in the testbed's jobs
directory (``register``), the ones still running (``registered``), and stopping them (``stop_jobs``:
unregistered, which tells each job the testbed was taken down, then their launchers ended)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from autotune.host.processes import start_time

STOP_GRACE = 5.0          # seconds a job's launcher has to end on SIGTERM before it is killed


def register(path: Path, np_: int, argv: list[str], launcher: int) -> None:
    """Record in ``path`` the job of this process, its ``np_`` ranks, ``argv`` and its launcher's pid
    (OSError when its directory is gone: the testbed went down)."""
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"pid": os.getpid(), "start": start_time(os.getpid()), "np": np_, "argv": argv,
                                "launcher": launcher, "launcher_start": start_time(launcher)}))


def registered(jobs_dir: Path) -> list[tuple[Path, dict]]:
    """The jobs registered in ``jobs_dir`` whose ``testbed mpiexec`` still runs, with their files."""
    out = []
    for path in sorted(jobs_dir.glob("*.json")):
        try:
            job = json.loads(path.read_text())
            if job["start"] is not None and start_time(job["pid"]) == job["start"]:
                out.append((path, job))
        except (OSError, ValueError, KeyError, TypeError):
            continue                      # a file half written or not ours: its job was not registered
    return out


def stop_jobs(workdir: Path) -> list[dict]:
    """Unregister the running jobs of the testbed in ``workdir`` (which tells each it was taken
    down) and end their launchers, killed if they outlast STOP_GRACE: a launcher still running when
    the links go can wait for its daemons' connections for minutes. Their ranks die with the namespaces."""
    jobs = registered(workdir / "jobs")
    launchers = [(job["launcher"], job["launcher_start"]) for _, job in jobs if job["launcher_start"] is not None]
    for path, _ in jobs:
        path.unlink(missing_ok=True)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, start in launchers:
            if start_time(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + STOP_GRACE
        while any(start_time(pid) == start for pid, start in launchers) and time.monotonic() < deadline:
            time.sleep(0.05)
    return [job for _, job in jobs]


def brief(argv: list[str], width: int = 72) -> str:
    """``argv`` in one line of at most ``width`` characters, its program by name, to recognize it."""
    line = " ".join(" ".join([Path(argv[0]).name, *argv[1:]] if argv else []).split())
    return line if len(line) <= width else line[:width - 3] + "..."
