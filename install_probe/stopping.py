"""How autotune-install stops: SIGINT, SIGTERM and SIGHUP unwind a run as Ctrl-C does (checkpoint, exit
128 + the signal), and what the run launched (mpiexec and every rank, also one no longer below it)
ends with it."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from autotune.host.processes import start_time, stat_fields

STOP_GRACE_SECONDS = 5.0   # after SIGTERM, how long the launched mpiexec and ranks get before SIGKILL


# -- stop signals --------------------------------------------------------

class Stopped(KeyboardInterrupt):
    """A stop signal arrived: unwinds as Ctrl-C does (checkpoint, stop the launched ranks)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """Which stop signal arrived, for the exit status: 128 + its number (130 for Ctrl-C). Raises
    ``Stopped`` on each until ``hold``: from then on they are only recorded."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.holding = False

    def handler(self, signum: int, frame) -> None:
        self.signum = signum
        if not self.holding:
            raise Stopped(signum)

    def hold(self) -> None:
        """The save that completes the run begins: a stop from here on would leave a complete run
        reported as stopped, so it is only recorded (a stop before this left the run resumable)."""
        self.holding = True

    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


@contextlib.contextmanager
def stop_signals():
    """While inside, SIGINT, SIGTERM and SIGHUP raise ``Stopped`` (a KeyboardInterrupt), so ``timeout``
    or a closed terminal stops the run as Ctrl-C does. Main thread only; a signal the parent set to
    be ignored (nohup) stays ignored."""
    stop, old = StopSignals(), {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                old[sig] = signal.signal(sig, stop.handler)
    try:
        yield stop
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_ignored():
    """SIGINT, SIGTERM and SIGHUP ignored while inside: a second signal must not cut the cleanup short."""
    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            old[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# Execs its arguments once the kernel will send them SIGTERM when their parent dies (PR_SET_PDEATHSIG,
# which an exec keeps), or exits if that parent is already gone: a fresh process without threads,
# where preexec_fn in this one (BLAS threads running) is not safe.
_DEATHSIG_EXEC = ("import ctypes, os, signal, sys\n"
                  "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
                  "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
                  "os.execvp(sys.argv[2], sys.argv[2:])\n")


def tied_to_this_process(cmd: list[str]) -> list[str]:
    """``cmd`` run so that it ends (SIGTERM, which mpiexec passes to its ranks) when this process dies,
    even by SIGKILL, where no handler of ours runs (Linux; elsewhere ``cmd`` as it is)."""
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-I", "-S", "-c", _DEATHSIG_EXEC, str(os.getpid()), *cmd]


# -- ending the launched mpiexec ----------------------------------------------------------------------

def stop_launched(proc, grace: float = STOP_GRACE_SECONDS) -> list[int]:
    """End ``proc`` (mpiexec, leader of its own session and process group) and everything it started:
    SIGTERM to its group and to each process below it or in its session (Open MPI puts every rank
    in a process group of its own, and a rank whose mpiexec died is no longer its child), then
    SIGKILL to whatever is left after ``grace`` seconds. The family is listed again while waiting,
    the newcomers signalled too: a dying mpiexec may still have started a rank. Returns the pids
    still running (none, unless one outlives SIGKILL)."""
    family: dict[int, str] = {}
    with signals_ignored():
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal_newcomers(proc.pid, family, sig, everyone=True)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not _all_gone(proc, family):
                time.sleep(0.05)
                _signal_newcomers(proc.pid, family, sig)
            if _all_gone(proc, family):
                return []
    return sorted(pid for pid, start in family.items() if _alive(pid, start))


def _signal_newcomers(leader: int, family: dict[int, str], sig: int, everyone: bool = False) -> None:
    """Add the processes launched under ``leader`` not yet in ``family`` and send ``sig`` to them
    (to the whole family and the leader's group if ``everyone``)."""
    new = {pid: start for pid, start in launched(leader).items() if pid not in family}
    family.update(new)
    _signal_all(leader, family if everyone else new, sig, group=everyone)


def _signal_all(leader: int, family: dict[int, str], sig: int, group: bool = True) -> None:
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, sig)
    for pid, start in family.items():
        if _alive(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _all_gone(proc, family: dict[int, str]) -> bool:
    return proc.poll() is not None and not any(_alive(pid, start) for pid, start in family.items())


def _alive(pid: int, start: str) -> bool:
    """The process that had this start time still runs (not a zombie, not a reused pid)."""
    return start_time(pid) == start


def launched(leader: int) -> dict[int, str]:
    """pid -> start time of every process below ``leader`` or in the session it leads (Linux /proc)."""
    below, session = _tree(leader)
    return {**session, **below}


def _tree(root: int) -> tuple[dict[int, str], dict[int, str]]:
    """(the processes below ``root``, those of the session ``root`` leads), pid -> start time, from one
    read of /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    session = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append((int(entry.name), fields[19]))
            if int(fields[3]) == root and int(entry.name) != root:
                session[int(entry.name)] = fields[19]
    out, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), ()):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out, session
