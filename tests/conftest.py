"""Shared set-up: every test gets its own default database path, never the user's real one."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from autotune.db import location
from autotune.feedback import guard

_HYPOTHESIS_DIR: str | None = None


def pytest_configure(config):
    """Keep Hypothesis' cache (.hypothesis/) out of the source tree unless the user chose a place."""
    global _HYPOTHESIS_DIR
    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        from hypothesis.configuration import set_hypothesis_home_dir

        _HYPOTHESIS_DIR = tempfile.mkdtemp(prefix="autotune-hypothesis-")
        set_hypothesis_home_dir(_HYPOTHESIS_DIR)


def pytest_unconfigure(config):
    if _HYPOTHESIS_DIR:
        shutil.rmtree(_HYPOTHESIS_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_default_db(tmp_path, monkeypatch):
    """Point $AUTOTUNE_DB at a per-test temporary file (absent unless a test writes it) and forget
    the run-time guard's verdicts.

    Also run each test from its temporary directory: child Pythons started from the source tree
    would import the uninstalled ``autotune/`` folder instead of the installed package.
    """
    monkeypatch.chdir(tmp_path)
    guard.reset()                  # each test starts with no run-time guard verdicts
    path = tmp_path / "default-db" / "system_parameters.h5"
    monkeypatch.setenv(location.ENV_VAR, str(path))
    return path


TINY_PROFILE = {
    "name": "tiny-runtime",
    "description": "just enough for every runtime candidate to be ranked (tests only)",
    "backends": ["numpy-openblas", "scipy-openblas", "numba-reference"],
    "threads": [1, 2],
    "timing": {"min_reps": 1, "max_reps": 2, "rel_tol": 0.5, "min_sample_seconds": 0.0001,
               "point_budget_seconds": 0.02},
    "measure": [
        {"routines": ["gemm", "potrf", "potf2", "syrk", "axpy", "add", "gemv", "getrf"], "pattern": "square",
         "sizes": [16, 64, 256], "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["getrs"], "pattern": "rhs", "sizes": [16, 64, 256], "params": [1, 4],
         "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["gemm"], "pattern": "square", "sizes": [64], "backends": ["numba-reference"]},
        {"routines": ["potrf"], "pattern": "upper", "sizes": [64, 256], "backends": ["numpy-openblas"]},
        {"routines": ["trsm", "syrk", "gemm"], "pattern": "panel", "sizes": [64, 256], "params": [16, 32],
         "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["gemv"], "pattern": "segment", "sizes": [64, 256], "params": [0.125, 0.375, 0.625, 0.875],
         "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["add"], "pattern": "view", "sizes": [16, 64], "backends": ["numba-reference"]},
        {"routines": ["gemm"], "pattern": "dispatch", "sizes": [32], "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["axpy"], "pattern": "trail", "sizes": [16, 64, 256],
         "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["gemm"], "pattern": "stripe", "sizes": [64, 256], "params": [2, 4], "threads": [1],
         "backends": ["numpy-openblas"]},
        {"routines": ["gemm"], "pattern": "rankb", "sizes": [64, 256], "params": [16, 32, 64, 128], "threads": [1],
         "backends": ["numpy-openblas", "scipy-openblas"]},
        {"routines": ["trsm"], "pattern": "u12", "sizes": [64, 256], "params": [16, 32, 64, 128], "threads": [1],
         "backends": ["scipy-openblas"]},
        {"routines": ["getrf", "laswp"], "pattern": "panel", "sizes": [64, 256], "params": [16, 32, 64, 128],
         "threads": [1], "backends": ["scipy-openblas"]},
        {"routines": ["stencil"], "pattern": "interior", "sizes": [32, 128], "threads": [1],
         "backends": ["numba-stencil", "numba-wavefront", "numpy-stencil"]},
        {"routines": ["stencil"], "pattern": "levels", "sizes": [32, 128], "params": [2], "threads": [1],
         "backends": ["numba-wavefront"]},
        {"routines": ["stencil"], "pattern": "rows", "sizes": [32, 128], "params": [1, 2], "threads": [1],
         "backends": ["numba-stencil", "numba-wavefront", "numpy-stencil"]},
        {"routines": ["stencil"], "pattern": "cols", "sizes": [32, 128], "params": [1, 2], "threads": [1],
         "backends": ["numba-stencil", "numba-wavefront", "numpy-stencil"]},
        {"routines": ["stream"], "pattern": "copy", "sizes": [4096, 65536], "threads": [1],
         "backends": ["numba-stencil"]},
        {"routines": ["stream"], "pattern": "triad", "sizes": [4096, 65536], "threads": [1],
         "backends": ["numba-stencil"]},
    ],
}


@pytest.fixture(scope="session")
def tiny_db(tmp_path_factory):
    """A real probe run (seconds) giving every runtime candidate something measured to rank on."""
    from autotune.install_probe.profile import parse_profile
    from autotune.install_probe.runner import run_probe

    path = tmp_path_factory.mktemp("tinydb") / "sp.h5"
    result = run_probe(parse_profile(TINY_PROFILE, "tiny-runtime"), path, progress=False)
    assert result.complete
    return path


def require_kernel_version(name: str):
    """The kernel version's module; skips the calling test when it is not built here (no OpenMP
    compiler), fails under CI, whose build has one."""
    from autotune.kernels import versions

    module = versions.load(name)
    if module is None:
        if os.environ.get("CI"):
            pytest.fail(f"kernel version {name!r} not built although CI's compiler builds it")
        pytest.skip(f"kernel version {name!r} not built here")
    return module
