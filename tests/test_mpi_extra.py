"""MPI is an extra: without mpi4py, comm= and autotune-install --mpi stop with one line naming it."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from autotune.install_probe import cli

import autotune


@pytest.fixture
def no_mpi4py(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py" else real(name, *a))


@pytest.mark.parametrize("call", [lambda a, comm: autotune.tuned_gemm(a, a, comm=comm),
                                  lambda a, comm: autotune.tuned_cholesky(a, comm=comm)])
def test_comm_without_mpi4py_names_the_extra(no_mpi4py, call):
    a = np.eye(8)
    with pytest.raises(ImportError, match=r'pip install "autotune\[mpi\]"'):
        call(a, object())


def test_install_mpi_without_mpi4py_is_one_line(no_mpi4py, capsys, tmp_path):
    assert cli.main(["--mpi", "--np", "2", "--db", str(tmp_path / "db.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "autotune[mpi]"' in err[0], err
    assert not (tmp_path / "db.h5").exists()
