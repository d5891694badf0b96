"""``autotune-install``: measure this machine's system parameters into the database.

``autotune-install --mpi`` measures the MPI communication parameters instead (install_probe.comm):
collectively when started under mpiexec, else it launches ``mpiexec -n P`` itself (``--np P``).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import time

from autotune.cli.common import OneLineParser, add_db_argument, positive_number
from autotune.db import resolve
from autotune.db.comm import mpi_world_size_env
from autotune.db.store import read_only
from autotune.entry.protocol import MPI_MISSING
from autotune.settings import get_options

from .launch import (
    DEFAULT_TIMEOUT_SECONDS,
    launch_comm_probe,
    physical_cores,
)
from .pools import probe_pools
from .profile import BLAS_DEFAULT as BLAS_DEFAULT_PROFILE
from .profile import COMM_DEFAULT as MPI_DEFAULT_PROFILE
from .profile import ProfileError, load_profile
from .runner import ProbeError, Progress, finish_phase, progress_mode, run_probe
from .stopping import StopSignals, stop_signals
from .threads import probe_and_save

# Built-in profiles whose install ends with the validation step (unless --no-validate), so that the
# database holds the check points `autotune report` draws, and the validation spec each runs
# (install_probe.validate.SPECS); `quick` skips it to stay well under a minute.
VALIDATE_AFTER = {"standard": "install", "full": "standard"}
# The validation step gets what is left of the profile's time limit, but at least this long.
MIN_VALIDATION_SECONDS = 60.0


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="autotune-install", description=__doc__)
    p.add_argument("--profile", default=None,
                   help=f"quick | standard | full | PATH.yaml (default: {BLAS_DEFAULT_PROFILE}; "
                        f"with --mpi: {MPI_DEFAULT_PROFILE})")
    add_db_argument(p)
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="measure only these routines and/or backends (e.g. --only gemm potrf mkl)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted run of the same profile")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (on a terminal) or phase lines (elsewhere)")
    val = p.add_argument_group("validation: check models on off-grid sizes, store fitted ones where needed")
    step = val.add_mutually_exclusive_group()
    step.add_argument("--validate", action="store_true",
                      help="run only the validation step on the existing database (--profile quick|standard|FILE)")
    step.add_argument("--with-validate", action="store_true",
                      help="after measuring, run the validation step (standard and full do unless --no-validate)")
    step.add_argument("--no-validate", action="store_true",
                      help="end a standard or full install without the validation step")
    val.add_argument("--tol", type=float, default=3.0, help="validation tolerance, median APE in percent (default 3)")
    mpi = p.add_argument_group("MPI communication probe (ts, tw per primitive, p and message size)")
    mpi.add_argument("--mpi", action="store_true",
                     help="measure MPI communication instead of BLAS: run collectively under mpiexec, "
                          "or give --np P to have mpiexec started for you (profiles: quick, standard, links, FILE)")
    mpi.add_argument("--np", type=int, default=None, metavar="P",
                     help="with --mpi outside mpiexec: number of processes to launch (default: physical cores, "
                          "at least 2); P above the core count is probed as its own, oversubscribed platform")
    mpi.add_argument("--timeout", type=positive_number, default=None, metavar="SECONDS",
                     help=f"with --mpi outside mpiexec: stop the launched mpiexec after this long "
                          f"(default {DEFAULT_TIMEOUT_SECONDS:g})")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    for option in ("np", "timeout"):
        if getattr(args, option) is not None and not args.mpi:
            p.error(f"--{option} applies only with --mpi (the MPI probe's launch)")
    if args.profile is None:
        args.profile = MPI_DEFAULT_PROFILE if args.mpi else BLAS_DEFAULT_PROFILE
    problem = db_path_problem(args.db)
    if problem:
        print(f"autotune-install: error: {problem}", file=sys.stderr)
        return 2
    if args.mpi:
        return main_mpi(args)
    if args.validate:
        return main_validate(args)
    with stop_signals() as stop:
        return main_probe(args, stop)


def main_probe(args, stop: StopSignals) -> int:
    """Measure the BLAS profile; an error if it measured nothing (tuned calls would stay untuned)."""
    try:
        profile = load_profile(args.profile)
        only = {t for tok in args.only for t in tok.split(",") if t} if args.only else None
        if profile.time_limit_minutes and not only:
            print(f"autotune-install: {limit_line(profile, validates(args))}", file=sys.stderr, flush=True)
        if line := budget_line(profile):
            print(f"autotune-install: {line}", file=sys.stderr, flush=True)
        result = run_probe(profile, args.db, only=only, resume=args.resume,
                           progress=False if args.no_progress else None, after=phases_after(args, profile, only),
                           completing=stop.hold)
    except (ProfileError, ProbeError, OSError) as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:       # before the run was first saved: nothing to keep
        print("autotune-install: interrupted before measuring; nothing was written", file=sys.stderr)
        return stop.exit_code()
    try:
        code = report_points(result, stop)
        return code if code is not None else run_phases(args, profile, result, stop)
    except KeyboardInterrupt:       # between the points and the next phase
        print(f"autotune-install: interrupted; the measurements are kept in {result.path}. "
              "Run again with --resume to finish.", file=sys.stderr)
        return stop.exit_code()


def report_points(result, stop: StopSignals) -> int | None:
    """Print the point sweep's outcome; its exit status if the install ends here, else None."""
    for name, why in result.skipped_backends.items():
        print(f"autotune-install: skipped backend {name}: {why}", file=sys.stderr)
    for key, why in result.failures.items():
        print(f"autotune-install: failed {key}: {why}", file=sys.stderr)
    if result.complete and not result.measured:
        print(f"autotune-install: error: nothing was measured: all {len(result.failures)} points failed "
              f"(listed above); {result.path} holds no new points", file=sys.stderr)
        return 1
    state = "complete" if result.complete else "interrupted"
    print(f"autotune-install: {state}: {result.measured} points in {result.path} ({result.seconds:.1f} s)")
    for line in result.verdict:
        print(f"autotune-install: {line}")
    return None if result.complete else stop.exit_code()


def phases_after(args, profile, only) -> tuple[str, ...]:
    """The phases this install runs after its points, in order (a resumed run keeps its own)."""
    wanted = {"pools": bool(profile.pools) and not only, "threads": bool(profile.thread_sps) and not only,
              "validate": validates(args)}
    return tuple(name for name, on in wanted.items() if on)


def run_phases(args, profile, result, stop: StopSignals) -> int:
    """The run's pending phases after the points, each marked done in the database when it ends; a
    stop signal keeps what was done (exit 128 + the signal) and ``--resume`` runs the rest. The
    save that completes the run holds stop signals: a stop then finds the run complete (exit 0)."""
    spent, phase = result.seconds, None
    try:
        for i, phase in enumerate(result.pending):
            seconds, code = PHASES[phase](args, profile, spent)
            if code:
                return code
            if i == len(result.pending) - 1:
                stop.hold()
            finish_phase(result.path, phase)
            spent += seconds
    except KeyboardInterrupt:
        print(f"autotune-install: interrupted during {PHASE_NAMES.get(phase, 'the phases')}; the measurements "
              f"before it are kept in {result.path}. Run again with --resume to finish.", file=sys.stderr)
        return stop.exit_code()
    if stop.signum is not None:
        print(f"autotune-install: {signal.Signals(stop.signum).name} arrived while the run's end was saved; "
              f"the run is complete", file=sys.stderr)
    return 0


def _progress(args, phase: str, unit: str = "points") -> Progress:
    """The phase's progress display: a bar on a terminal, a line elsewhere, none with --no-progress."""
    return Progress(phase, progress_mode(False if args.no_progress else None), unit)


def main_pools(args, profile, spent: float = 0.0) -> tuple[float, int]:
    """Measure the thread-pool transition costs of the profile's libraries; the seconds it took."""
    with _progress(args, "pool transitions", "transitions") as bar:
        info = probe_pools(args.db, profile.backends, profile.pools, bar)
    print(f"autotune-install: thread-pool transitions of {', '.join(info['libraries'])} "
          f"(hot window {info['hot_window'] * 1e3:g} ms) in {info['seconds']:.1f} s")
    return float(info["seconds"]), 0


def main_thread_sps(args, profile, spent: float = 0.0) -> tuple[float, int]:
    """Measure the thread SPs of each kernel version (001 §6.3.1); the seconds it took."""
    t0 = time.perf_counter()
    with _progress(args, "thread SPs", "steps") as bar:
        sps = probe_and_save(resolve(args.db), quick=profile.thread_sps == "quick", progress=bar)
    seconds = time.perf_counter() - t0
    print(f"autotune-install: thread SPs of {', '.join(sorted(sps.versions))} in {seconds:.1f} s")
    return seconds, 0


def main_validation(args, profile, spent: float) -> tuple[float, int]:
    """The validation step ending an install, within what is left of the profile's time limit."""
    budget = None if profile.time_limit_minutes is None else \
        max(MIN_VALIDATION_SECONDS, 60 * profile.time_limit_minutes - spent)
    spec = args.profile if args.with_validate else VALIDATE_AFTER.get(args.profile, args.profile)
    t0 = time.perf_counter()
    code = main_validate(args, spec, budget)
    return time.perf_counter() - t0, code


PHASES = {"pools": main_pools, "threads": main_thread_sps, "validate": main_validation}
PHASE_NAMES = {"pools": "the thread-pool transitions", "threads": "the thread SPs", "validate": "the validation"}


def validates(args) -> bool:
    """Whether this install ends with the validation step."""
    return args.with_validate or (args.profile in VALIDATE_AFTER and not args.no_validate and not args.only)


def limit_line(profile, validating: bool) -> str:
    """The up-front promise: the profile's time limit, and whether the model check is inside it."""
    check = ", the check of its models included (--no-validate skips it)" if validating else ""
    return (f"profile {profile.name!r} takes about {profile.time_limit_minutes:g} minutes on two cores{check}; "
            "other programs on the machine make it longer")


def budget_line(profile) -> str:
    """The thread budget when it keeps some of the profile's thread counts from being measured ("" if none)."""
    budget = get_options().budget
    most = max((t for m in profile.measures for t in (m.threads or profile.threads)), default=0)
    return f"thread budget {budget}: thread counts above it are not measured" if most > budget.threads else ""


def db_path_problem(db) -> str | None:
    """Why the database path (``--db``, else the default) cannot be written, checked before any
    measuring; None if it can. Missing parent directories are created here."""

    path = resolve(db)
    where = "--db" if db is not None else "database path"
    if path.is_dir():
        return f"{where} {path} is a directory; give a file path, e.g. {path / 'system_parameters.h5'}"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{where} {path}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{where} {path}: directory {parent} is not writable"
    if path.exists() and not os.access(path, os.R_OK):
        return f"{where} {path} is not readable"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{where} {path}: cannot create {path.parent} ({exc.strerror or exc})"
    return read_only(path)


def main_validate(args, spec: str | None = None, budget: float | None = None) -> int:
    """``--validate``: time the candidates on check points (``spec``, else the profile's), store
    fitted models where the analytical ones fail and every check point for ``autotune report``."""
    from .validate import validate

    try:
        with _progress(args, "validation") as bar:
            report = validate(args.db, spec or args.profile, tol=args.tol, progress=bar, budget_seconds=budget)
    except (ValueError, LookupError, PermissionError) as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    return 0


# -- --mpi: the communication probe -----------------------------------------------------------------

def main_mpi(args) -> int:
    """Under mpiexec: run the comm probe collectively. Otherwise: launch mpiexec -n P on it."""
    if importlib.util.find_spec("mpi4py") is None:
        print(f"autotune-install: error: --mpi {MPI_MISSING}", file=sys.stderr)
        return 2
    if args.only or args.resume:
        print("autotune-install: error: --only and --resume do not apply to --mpi", file=sys.stderr)
        return 2
    size = mpi_world_size_env()
    if size is not None and size < 2:
        print("autotune-install: error: --mpi under mpiexec needs at least 2 processes", file=sys.stderr)
        return 2
    if size is not None and (args.np is not None or args.timeout is not None):
        print("autotune-install: error: --np and --timeout are for the launch autotune-install makes itself; "
              "under mpiexec its -n sets P", file=sys.stderr)
        return 2
    if size is not None:
        from .comm import main as comm_main

        argv = ["--profile", args.profile] + (["--db", args.db] if args.db else []) + (
            ["--quiet"] if args.no_progress else [])
        return comm_main(argv)
    from .comm_profile import CommProfileError, load_comm_profile

    try:
        load_comm_profile(args.profile)      # fail here, not in P processes
    except CommProfileError as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    nprocs = args.np if args.np is not None else max(2, physical_cores())
    if nprocs < 2:
        print("autotune-install: error: --np must be at least 2", file=sys.stderr)
        return 2
    with stop_signals():       # not under mpiexec: a rank blocked in MPI would run no Python handler
        return launch_comm_probe(nprocs, args.profile, args.db, timeout=args.timeout or DEFAULT_TIMEOUT_SECONDS,
                                 quiet=args.no_progress)




















def run(argv: list[str] | None = None) -> None:
    """The console entry point: a run a stop signal ended exits 128 + the signal without the
    interpreter's teardown, which can abort (double free) in native thread pools the signal cut short."""
    code = main(argv)
    if code >= 128:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
