"""autotune-install's command line: stopping (SIGINT, SIGTERM) ends everything it launched, a run
that measures nothing is an error, bad --db paths are one-line errors, the MPI run's estimate."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from autotune.install_probe import cli, stopping
from autotune.install_probe import runner as runner_mod
from autotune.install_probe.comm_estimate import estimate_seconds, points_seconds
from autotune.install_probe.comm_profile import load_comm_profile
from autotune.install_probe.stopping import STOP_GRACE_SECONDS
from mpi_helpers import fake_launch, mpi_env

from autotune import backends as bk
from autotune.db import load

BACKENDS = ["scipy-openblas", "numpy-openblas"]
TINY = {
    "name": "tiny",
    "backends": BACKENDS,
    "threads": [1],
    "timing": {"min_reps": 1, "max_reps": 2, "point_budget_seconds": 0.01, "min_sample_seconds": 1e-5},
    "measure": [{"routines": ["gemm", "axpy"], "pattern": "square", "sizes": [8, 16]}],
}
# Never stable, long samples: a few seconds of work, time to be stopped midway.
SLOW = dict(TINY, name="slow", timing={"min_reps": 3, "max_reps": 3, "rel_tol": 1e-9, "min_sample_seconds": 0.1,
                                       "point_budget_seconds": 0.5},
            measure=[{"routines": ["gemm"], "pattern": "square", "sizes": [96, 128, 160, 192, 224, 256, 288]}])
# The comm probe at its smallest (as tests/test_comm.py's): the ranks run for tens of seconds.
COMM_TINY = {
    "name": "tiny-comm", "sizes": [8, 64, 512, 2048, 4096, 8192, 32768, 131072], "procs": [2], "grids": "none",
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "rewarm": 1, "min_reps": 2, "max_reps": 3, "rel_tol": 0.5,
               "min_sample_seconds": 1e-5, "point_budget_seconds": 0.01},
    "passes": 1, "check_sides": [128, 256], "first_touch_sizes": [1 << 22, 1 << 23], "pack_order": 256,
    "root_reps": 1,
}


def write_yaml(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "autotune.install_probe.cli", *args]


# -- /proc: the processes a launch left behind ----------------------------------------------------------

def stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name: [0] state, [1] ppid, [19] start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def tree(root: int) -> dict[int, str]:
    """pid -> start time of every process below ``root``, by the parent links in /proc."""
    kids: dict[int, list[int]] = {}
    starts = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat(int(entry.name))
        if fields:
            kids.setdefault(int(fields[1]), []).append(int(entry.name))
            starts[int(entry.name)] = fields[19]
    out, todo = {}, [root]
    while todo:
        for pid in kids.get(todo.pop(), []):
            out[pid] = starts[pid]
            todo.append(pid)
    return out


def running(pids: dict[int, str]) -> list[int]:
    """Those of ``pids`` still running (same start time, not a zombie)."""
    alive = []
    for pid, start in pids.items():
        fields = stat(pid)
        if fields and fields[19] == start and fields[0] not in ("Z", "X"):
            alive.append(pid)
    return alive


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def ranks(pids) -> list[int]:
    """The Python ranks among ``pids`` (not mpiexec/prterun, whose command line names the module too)."""
    return [p for p in pids if "autotune.install_probe.comm" in cmdline(p) and "python" in Path(cmdline(p)[0]).name]


def wait_for(condition, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


# -- 1. stopping ---------------------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_stop_signal_ends_mpiexec_and_every_rank(tmp_path, sig):
    """SIGTERM (as `timeout` sends) or SIGINT to `autotune-install --mpi --np 2`: mpiexec and both
    ranks end with it, the exit status is 128 + the signal, and the report says what was kept. SIGKILL,
    which no handler sees: they end too (the launcher is tied to the installer's life), nothing written."""
    prof = write_yaml(tmp_path / "tiny.yaml", COMM_TINY)
    db, log = tmp_path / "sp.h5", tmp_path / "err.txt"
    for _ in range(2):       # a launch that ended by itself before the signal is launched once more
        proc = _launch_probe(prof, db, log, tmp_path)
        started = wait_for(lambda p=proc: len(ranks(tree(p.pid))) >= 2 or p.poll() is not None, 90)
        if proc.poll() is None:
            break
        db.unlink(missing_ok=True)
    family: dict[int, str] = {}
    try:
        assert started, "no ranks started"
        assert proc.poll() is None, f"the probe ended before it could be stopped, twice:\n{log.read_text()}"
        time.sleep(1.0)                      # the ranks inside MPI
        family = tree(proc.pid)
        assert len(ranks(family)) == 2 and len(family) >= 3, {p: cmdline(p) for p in family}
        proc.send_signal(sig)
        proc.wait(timeout=60)
        left = wait_for(lambda: not running(family), 3 + STOP_GRACE_SECONDS * (sig == signal.SIGKILL)) \
            or running(family)
        assert left is True, f"still running after the installer ended: {[cmdline(p) for p in running(family)]}"
        err = log.read_text()
        if sig == signal.SIGKILL:
            assert proc.returncode == -sig and not db.exists(), (proc.returncode, err)
            return
        assert proc.returncode == 128 + sig, (proc.returncode, err)
        assert f"stopped by {signal.Signals(sig).name}" in err and "nothing was written" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in running(family):          # never leave a stray rank behind, whatever failed
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _launch_probe(prof, db, log, cwd) -> subprocess.Popen:
    """``autotune-install --mpi --np 2`` on ``prof``, its stderr to ``log``: a file, not a pipe (the
    ranks inherit it, and reading a pipe to its end would wait for them to finish on their own)."""
    with open(log, "w") as err_file:
        return subprocess.Popen(command("--mpi", "--np", "2", "--profile", prof, "--db", str(db), "--no-progress",
                                        "--timeout", "300"),
                                stdout=subprocess.DEVNULL, stderr=err_file, env=mpi_env(), cwd=cwd,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


# The slow points, then the thread-pool transitions and the thread SPs: every phase an install has.
PHASED = dict(SLOW, name="phased", pools="tiny", thread_sps="quick",
              timing={**SLOW["timing"], "min_sample_seconds": 0.05, "passes": 1},
              measure=[{"routines": ["gemm"], "pattern": "square", "sizes": [96, 128, 160, 192]}])
# What each phase prints as it starts off a terminal (points: the run is saved, its points pending).
STARTS = {"pools": "autotune-install: pool transitions: ", "threads": "autotune-install: thread SPs: "}
# The installer with one phase's probe (module:function) repeated until a signal stops it: the quick
# thread SPs take half a second, so a stop sent as the phase starts could otherwise land after it
# ended. The thread SPs repeat their measuring only, not its save (a stop there once hung the run).
PROBES = {"pools": "cli:probe_pools", "threads": "threads:probe_threads"}
ENDLESS = ("import importlib, sys\n"
           "from autotune.install_probe import cli\n"
           "where, name = sys.argv[1].split(':')\n"
           "module = importlib.import_module('autotune.install_probe.' + where)\n"
           "real = getattr(module, name)\n"
           "def endless(*args, **kwargs):\n"
           "    while True:\n"
           "        real(*args, **kwargs)\n"
           "setattr(module, name, endless)\n"
           "cli.run(sys.argv[2:])\n")


class Install:
    """``autotune-install`` on the phased profile, its stderr read as it comes; ``endless``: the
    phase whose probe repeats until stopped."""

    def __init__(self, prof: str, db: Path, *extra: str, endless: str | None = None):
        self.db, self.lines = db, []
        cmd = command("--profile", prof, "--db", str(db), *extra)
        if endless:
            cmd[1:3] = ["-c", ENDLESS, PROBES[endless]]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=db.parent)
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def started(self, phase: str) -> bool:
        if phase == "points":
            try:
                return "points" in load(self.db).run["pending"]
            except Exception:
                return False
        return any(line.startswith(STARTS[phase]) for line in list(self.lines))

    def stop_in(self, phase: str, sig: int) -> tuple[int, str]:
        """Send ``sig`` once ``phase`` has started; (exit status, stderr)."""
        try:
            assert wait_for(lambda: self.started(phase) or self.proc.poll() is not None, 120, 0.005)
            assert self.proc.poll() is None, f"finished before {phase} could be stopped: {self.lines}"
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        return self.proc.returncode, "".join(self.lines)


def content(db: Path) -> tuple:
    """What a complete install holds: its records' keys, its groups' members, its run's state."""

    from autotune.db.store import open_file

    d = load(db)
    with open_file(db) as f:
        members = sorted(f"{g}/{m}" for g in f if g != "k" for m in f[g])
    return d.keys(), members, d.run["complete"], d.run["pending"]


@pytest.fixture(scope="module")
def phased(tmp_path_factory) -> tuple[str, Path]:
    """The phased profile and the database of its uninterrupted run."""
    d = tmp_path_factory.mktemp("phased")
    prof, whole = write_yaml(d / "phased.yaml", PHASED), d / "whole.h5"
    done = subprocess.run(command("--profile", prof, "--db", str(whole)), capture_output=True, text=True, timeout=300,
                          cwd=d)
    assert done.returncode == 0, done.stderr
    return prof, whole


@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGKILL, signal.SIGTERM),
                                     (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)])
def test_every_phase_stops_and_resumes_to_an_uninterrupted_runs_content(phased, tmp_path, signals):
    """SIGTERM or SIGKILL in the points, the pool transitions and the thread SPs: SIGTERM exits 143
    naming --resume, and each --resume finishes it; the end equals an uninterrupted run's content."""
    prof, whole = phased
    db = tmp_path / "db.h5"
    for i, (phase, sig) in enumerate(zip(("points", "pools", "threads"), signals, strict=True)):
        endless = phase if phase in PROBES else None
        code, err = Install(prof, db, *(["--resume"] if i else []), endless=endless).stop_in(phase, sig)
        if sig == signal.SIGTERM:
            assert code == 143 and "--resume" in err, (phase, code, err)
        else:
            assert code == -signal.SIGKILL, (phase, code, err)
        assert load(db).run["complete"] is False and phase in load(db).run["pending"], (phase, load(db).run)
    done = subprocess.run(command("--profile", prof, "--db", str(db), "--resume"), capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert content(db) == content(whole) and content(db)[2:] == (True, [])


def test_stop_launched_kills_what_ignores_sigterm(tmp_path):
    """A launched group whose members ignore SIGTERM still ends: SIGKILL after the grace period."""
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "c = subprocess.Popen([sys.executable, '-c', 'import os, signal, time; os.setpgid(0, 0); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)']); time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        assert wait_for(lambda: len(tree(proc.pid)) >= 1, 20)
        family = tree(proc.pid)
        # no clock: the group sleeps for an hour, so only the SIGKILL ends it within the test's timeout
        stopping.stop_launched(proc, grace=0.5)
        assert proc.poll() is not None and not running(family)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _signal_self(sig: int = signal.SIGTERM) -> None:
    """Deliver ``sig`` to this process now: its Python handler runs before the next line of the caller."""
    os.kill(os.getpid(), sig)


def _fake_thread_sps(path, quick=False, progress=None):
    """The thread-SP phase without its measuring (what is tested here is the run's state around it)."""
    return SimpleNamespace(versions={"fake": None})


@pytest.mark.parametrize("last", ["points", "threads"])
def test_a_stop_as_the_run_completes_never_leaves_it_complete_and_stopped(tmp_path, capsys, monkeypatch, last):
    """SIGTERM right after the save that completes the run (the points' own, or the thread SPs', the
    last phase): the run is complete and the installer says so, exit 0; never exit 143 over a run
    that --resume then refuses."""
    prof = write_yaml(tmp_path / "p.yaml", dict(TINY, **({"thread_sps": "quick"} if last == "threads" else {})))
    db = tmp_path / "db.h5"
    monkeypatch.setattr(cli, "probe_and_save", _fake_thread_sps)
    real_finish, real_save = cli.finish_phase, runner_mod.save

    def finish_then_stop(path, phase):
        real_finish(path, phase)
        _signal_self()

    def save_then_stop(d, path):
        real_save(d, path)
        if d.run["complete"]:
            _signal_self()

    if last == "threads":
        monkeypatch.setattr(cli, "finish_phase", finish_then_stop)
    else:
        monkeypatch.setattr(runner_mod, "save", save_then_stop)
    code = cli.main(["--profile", prof, "--db", str(db), "--no-progress"])
    err = capsys.readouterr().err
    assert (code, load(db).run["complete"]) == (0, True), (code, load(db).run, err)
    assert "SIGTERM arrived while the run's end was saved; the run is complete" in err, err


def test_a_stop_just_before_the_last_phase_is_saved_resumes(tmp_path, capsys, monkeypatch):
    """SIGTERM as the thread-SP probe returns, before its phase is saved: exit 143, the phase still
    pending, and --resume finishes the run."""
    prof, db = write_yaml(tmp_path / "p.yaml", dict(TINY, thread_sps="quick")), tmp_path / "db.h5"
    def probe_then_stop(*args, **kwargs):
        sps = _fake_thread_sps(*args, **kwargs)
        _signal_self()
        return sps

    monkeypatch.setattr(cli, "probe_and_save", probe_then_stop)
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 128 + signal.SIGTERM
    assert load(db).run["complete"] is False and load(db).run["pending"] == ["threads"]
    assert "--resume" in capsys.readouterr().err
    monkeypatch.setattr(cli, "probe_and_save", _fake_thread_sps)
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress", "--resume"]) == 0
    assert load(db).run["complete"] is True


# Stands in for mpiexec: leaves behind a process in a group of its own whose parent has exited (as a
# rank outliving its dying mpiexec), which writes its pid to argv[1] and holds the installer's output.
ORPHANING_MPIEXEC = ("import os, sys, time\n"
                     "middle = os.fork()\n"
                     "if middle == 0:\n"
                     "    os.setpgid(0, 0)\n"
                     "    if os.fork() == 0:\n"
                     "        with open(sys.argv[1] + '.tmp', 'w') as f:\n"
                     "            f.write(str(os.getpid()))\n"
                     "        os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
                     "        time.sleep(120)\n"
                     "    os._exit(0)\n"
                     "os.waitpid(middle, 0)\n"
                     "time.sleep(120)\n")
# autotune-install with that in place of mpiexec: argv[1] the fake's code, argv[2] its pid file.
WITH_FAKE_MPIEXEC = ("import sys\n"
                     "from autotune.install_probe import cli, launch\n"
                     "code, pidfile = sys.argv[1:3]\n"
                     "launch.find_mpiexec = lambda: sys.executable\n"
                     "launch.mpiexec_command = lambda exe, n: [exe, '-c', code, pidfile]\n"
                     "sys.exit(cli.main(sys.argv[3:]))\n")


def test_timeout_ends_what_the_launch_left_and_returns(tmp_path):
    """--timeout: the installer ends every process of the launch, also one no longer below mpiexec
    nor in its group, and exits 124: its output closes (a caller reading it is not left waiting)."""
    mpi_env()                                   # skips without mpi4py, as --mpi stops there
    pidfile = tmp_path / "orphan.pid"
    cmd = [sys.executable, "-c", WITH_FAKE_MPIEXEC, ORPHANING_MPIEXEC, str(pidfile),
           "--mpi", "--np", "2", "--timeout", "2", "--db", str(tmp_path / "db.h5"), "--no-progress"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert pidfile.exists(), f"the fake launch left no process behind:\n{done.stderr}"
        orphan = int(pidfile.read_text())
        assert done.returncode == 124, done.stderr
        assert "timed out after 2 s; mpiexec and its ranks ended" in done.stderr, done.stderr
        assert wait_for(lambda: stat(orphan) is None or stat(orphan)[0] in "ZX", 5), cmdline(orphan)
    finally:
        if pidfile.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


# -- 2. a run that measures nothing ---------------------------------------------------------------------

@pytest.fixture
def no_mkl(monkeypatch):
    """MKL unavailable, whether or not it is installed here."""
    real = bk.get

    def get(name):
        if name == "mkl":
            raise bk.BackendUnavailable("MKL not installed (pip install mkl)")
        return real(name)

    monkeypatch.setattr(bk, "get", get)


def test_only_an_unavailable_backend_is_an_error_and_keeps_the_database(tmp_path, capsys, no_mkl):
    prof = write_yaml(tmp_path / "tiny.yaml", dict(TINY, backends=[*BACKENDS, "mkl"]))
    db = tmp_path / "db.h5"
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 0
    before = db.read_bytes()
    capsys.readouterr()
    code = cli.main(["--profile", prof, "--db", str(db), "--no-progress", "--only", "mkl"])
    out, err = capsys.readouterr()
    assert code != 0
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "nothing was measured" in lines[0], err
    assert "mkl" in lines[0] and "MKL not installed" in lines[0] and "left as it was" in lines[0]
    assert "complete" not in out
    assert db.read_bytes() == before

    fresh = tmp_path / "fresh.h5"                  # no database yet: none is made
    assert cli.main(["--profile", prof, "--db", str(fresh), "--no-progress", "--only", "mkl"]) != 0
    assert not fresh.exists()


def test_only_names_what_the_profile_lacks(tmp_path, capsys):
    prof = write_yaml(tmp_path / "tiny.yaml", TINY)
    db = tmp_path / "db.h5"
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress", "--only", "blis"]) != 0
    assert "does not use backend blis" in capsys.readouterr().err
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress", "--only", "potrf"]) != 0
    err = capsys.readouterr().err
    assert "nothing was measured" in err and "selects no routine" in err and not db.exists()


def test_every_point_failing_is_an_error(tmp_path, capsys, monkeypatch):
    prof = write_yaml(tmp_path / "tiny.yaml", TINY)
    db = tmp_path / "db.h5"
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 0
    records = load(db).records.copy()

    def broken(*args, **kw):
        raise RuntimeError("broken library")

    monkeypatch.setattr(runner_mod, "build", broken)
    capsys.readouterr()
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert "nothing was measured" in err and "complete" not in out
    assert (load(db).records == records).all()        # the earlier points are all still there


# -- 3. --db paths ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mpi", [False, True])
def test_db_naming_a_directory_is_a_one_line_error(tmp_path, capsys, mpi):
    (tmp_path / "keep.txt").write_text("x")
    before = sorted(os.listdir(tmp_path))
    args = ["--mpi", "--np", "2"] if mpi else ["--profile", write_yaml(tmp_path.parent / "t.yaml", TINY)]
    assert cli.main([*args, "--db", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == before


def test_db_directory_from_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    assert cli.main(["--profile", write_yaml(tmp_path / "t.yaml", TINY), "--no-progress"]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_db_in_missing_directories_creates_them(tmp_path, capsys):
    db = tmp_path / "x" / "y" / "sp.h5"
    assert cli.main(["--profile", write_yaml(tmp_path / "t.yaml", TINY), "--db", str(db), "--no-progress"]) == 0
    assert len(load(db).records) > 0


def test_db_under_a_file_or_unwritable_directory(tmp_path, capsys, monkeypatch):
    prof = write_yaml(tmp_path / "t.yaml", TINY)
    (tmp_path / "plain").write_text("x")
    assert cli.main(["--profile", prof, "--db", str(tmp_path / "plain" / "sp.h5"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    assert cli.main(["--profile", prof, "--db", str(locked / "a" / "sp.h5"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not writable" in err and not (locked / "a").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no directory can be made")
def test_db_where_no_directory_can_be_made_or_read_only(tmp_path, capsys):
    """A --db whose directories cannot be created, or a read-only database file: one line, exit 2, the
    file left as it was (mode included)."""
    prof = write_yaml(tmp_path / "t.yaml", TINY)
    assert cli.main(["--profile", prof, "--db", "/proc/no-such-dir/sp.h5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot create /proc/no-such-dir" in err
    db = tmp_path / "sp.h5"
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 0
    db.chmod(0o444)
    before = db.read_bytes()
    assert cli.main(["--profile", prof, "--db", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "read-only" in err
    assert db.read_bytes() == before and db.stat().st_mode & 0o777 == 0o444


# -- 4. the MPI run's default profile and estimate ------------------------------------------------------

def test_mpi_default_profile_and_blas_default(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "launch_comm_probe", lambda n, profile, db, **kw: seen.update(profile=profile) or 0)
    assert cli.main(["--mpi", "--np", "2"]) == 0
    assert seen["profile"] == cli.MPI_DEFAULT_PROFILE
    monkeypatch.setattr(cli, "run_probe", lambda profile, *a, **kw: seen.update(blas=profile.name) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main([])
    assert seen["blas"] == cli.BLAS_DEFAULT_PROFILE == "standard"


def test_estimate_grows_with_the_plan_and_the_default_fits_five_minutes():
    quick, std = load_comm_profile("quick"), load_comm_profile("standard")
    default = load_comm_profile(cli.MPI_DEFAULT_PROFILE)
    for cores in (2, 4):
        assert estimate_seconds(quick, 2, cores)[1] < estimate_seconds(quick, 4, cores)[1]
        assert estimate_seconds(quick, 4, cores)[0] < estimate_seconds(std, 4, cores)[0]
        low, high = estimate_seconds(default, 4, cores)
        assert 0 < low <= high <= 7 * 60
    # standard at P = 4 on two cores: within 5 minutes (4.0 measured; every p and grid: past 15)
    low, high = estimate_seconds(std, 4, 2)
    assert low <= 5 * 60 and high <= 7 * 60
    every = dataclasses.replace(std, procs="all", grids="all")
    assert points_seconds(every, 64, 64) > 5 * points_seconds(std, 64, 64)     # the sample scales


def test_launch_prints_the_estimate_first(tmp_path, monkeypatch, capsys):
    fake_launch(monkeypatch, cli)
    assert cli.launch_comm_probe(4, "quick", tmp_path / "x.h5", quiet=True) == 0
    err = capsys.readouterr().err
    assert "estimated run time" in err and "'quick'" in err and "P = 4" in err and "estimate" in err


def test_profile_time_limit_is_said_up_front_and_bounds_the_validation(tmp_path, capsys, monkeypatch):
    """A profile's time_limit_minutes is printed before measuring; the validation gets what is left."""
    from conftest import TINY_PROFILE

    seen = {}
    monkeypatch.setattr(cli, "main_validate", lambda args, spec=None, budget=None: seen.update(budget=budget) or 0)
    prof = tmp_path / "tiny.yaml"
    prof.write_text(yaml.safe_dump({**TINY_PROFILE, "time_limit_minutes": 2}))
    assert cli.main(["--profile", str(prof), "--db", str(tmp_path / "sp.h5"), "--no-progress",
                     "--with-validate"]) == 0
    err = capsys.readouterr().err
    assert "takes about 2 minutes on two cores, the check of its models included" in err
    assert cli.MIN_VALIDATION_SECONDS <= seen["budget"] <= 120


def test_time_limit_must_be_positive():
    from autotune.install_probe.profile import ProfileError, load_profile, parse_profile
    from conftest import TINY_PROFILE

    with pytest.raises(ProfileError, match="time_limit_minutes"):
        parse_profile({**TINY_PROFILE, "time_limit_minutes": 0}, "bad")
    assert load_profile("standard").time_limit_minutes and load_profile("full").time_limit_minutes is None


# -- 5. arguments that would be ignored or end the run at once ------------------------------------------

def _parse_error(argv: list[str], capsys) -> str:
    """``argv`` is refused before anything runs: exit 2 and one line; returns it."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("autotune-install: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("option", [["--np", "2"], ["--timeout", "60"]])
def test_mpi_launch_options_need_mpi(tmp_path, capsys, option):
    prof = write_yaml(tmp_path / "t.yaml", TINY)
    db = tmp_path / "db.h5"
    err = _parse_error([*option, "--profile", prof, "--db", str(db), "--no-progress"], capsys)
    assert f"{option[0]} applies only with --mpi" in err and not db.exists()


@pytest.mark.parametrize("pair", [("--validate", "--no-validate"), ("--with-validate", "--no-validate"),
                                  ("--validate", "--with-validate")])
def test_validation_options_exclude_each_other(tmp_path, capsys, pair):
    err = _parse_error([*pair, "--profile", write_yaml(tmp_path / "t.yaml", TINY), "--db", str(tmp_path / "db.h5")],
                       capsys)
    assert "not allowed with argument" in err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_timeout_must_be_a_positive_number_of_seconds(tmp_path, monkeypatch, capsys, value):
    seen = fake_launch(monkeypatch, cli)
    err = _parse_error(["--mpi", "--np", "2", "--timeout", value, "--db", str(tmp_path / "db.h5")], capsys)
    assert "--timeout" in err and "finite number > 0" in err and "cmd" not in seen


def test_launch_options_under_mpiexec_are_an_error(tmp_path, monkeypatch, capsys):
    """Under mpiexec the launcher's -n sets P: --np (and --timeout) would be ignored."""
    from autotune.install_probe import comm

    mpi_env()
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setattr(comm, "main", lambda argv: 0)
    assert cli.main(["--mpi", "--np", "4", "--db", str(tmp_path / "db.h5")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "under mpiexec its -n sets P" in err
    assert cli.main(["--mpi", "--db", str(tmp_path / "db.h5")]) == 0
