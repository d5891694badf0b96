"""Importing autotune (and reading system parameters) loads neither MPI nor any BLAS backend
(the C hot paths in autotune.kernels._front/_matadd are plain loops and may load)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

from autotune.backends.base import package_info
from autotune.db import RECORD_DTYPE, Database, save

SCRIPT = textwrap.dedent("""
    import sys, warnings

    def loaded_backends():
        mods = [m for m in sys.modules if m.startswith(("autotune.backends.", "autotune.kernels._blas"))]
        return sorted(m for m in mods if m not in ("autotune.backends.base", "autotune.backends.pools"))

    import autotune
    assert "mpi4py" not in sys.modules, "import autotune loaded mpi4py"
    assert loaded_backends() == [], loaded_backends()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sp = autotune.load_sp()
        value = float(sp.k("gemm", "scipy-openblas", 1, 100))
    assert "mpi4py" not in sys.modules, "autotune.load_sp() loaded mpi4py"
    assert loaded_backends() == [], loaded_backends()
    print(sp.source, value)
""")


def _run(db_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_DB": str(db_path)}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)


def test_import_without_database(_private_default_db):
    assert not _private_default_db.exists()
    proc = _run(_private_default_db)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "defaults"


def test_import_with_database(tmp_path):
    path = tmp_path / "db.h5"
    rec = np.zeros(2, RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"] = b"gemm", b"scipy-openblas", 1
    rec["dtype"], rec["pattern"], rec["x"], rec["k"] = b"float64", b"square", [10, 100], 1e-10
    save(Database(records=rec, backends={"scipy-openblas": package_info("scipy")}), path)
    proc = _run(path)
    assert proc.returncode == 0, proc.stderr
    source, value = proc.stdout.split()
    assert source == "database"
    assert abs(float(value) - 1e-10) < 1e-22


def test_every_subpackage_is_packaged():
    """A subpackage missing from pyproject's list works in an editable install and breaks `pip install .`."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"autotune." + p.parent.relative_to(root / "autotune").as_posix().replace("/", ".")
             for p in (root / "autotune").rglob("__init__.py") if p.parent != root / "autotune"}
    assert found <= listed, f"not in pyproject [tool.setuptools] packages: {sorted(found - listed)}"
