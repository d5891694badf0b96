"""Database warnings name the user's line (file and line of the tuned call), not autotune's, on every
path a call takes: the C entry, the Python layer (explain=True, trans_a), a damaged database, damaged
side data, and the communication fallbacks."""
from __future__ import annotations

import shutil
import sys
import warnings

import numpy as np
import pytest
from db_helpers import damaged_copy

import autotune
from autotune.core.families import as_problem
from autotune.db import load_comm, load_sp
from autotune.db._warn import user_stacklevel
from autotune.db.pools import ROW_DTYPE, save_transitions
from autotune.select import clear_cache
from autotune.select.distributed import rank_plans


def _here() -> int:
    """The caller's current line."""
    return sys._getframe(1).f_lineno


def _only_runtime_warning(caught) -> warnings.WarningMessage:
    found = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(found) == 1, [str(w.message) for w in found]
    return found[0]


@pytest.fixture
def no_db(tmp_path):
    clear_cache()
    with autotune.options(db=str(tmp_path / "missing.h5")):
        yield


@pytest.mark.parametrize("path", ["c-entry", "explain", "transposed", "cholesky"])
def test_the_no_database_warning_names_the_users_line(no_db, path, capsys):
    a = np.eye(37) * 4 + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if path == "c-entry":
            line, _ = _here(), autotune.tuned_gemm(a, a)
        elif path == "explain":
            line, _ = _here(), autotune.tuned_gemm(a, a, explain=True)
        elif path == "transposed":
            line, _ = _here(), autotune.tuned_gemm(a, a, trans_a=True)
        else:
            line, _ = _here(), autotune.tuned_cholesky(a)
    w = _only_runtime_warning(caught)
    assert "system parameters unavailable" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line)


def _gemm_warning(db, n: int):
    """The one RuntimeWarning of an n x n tuned_gemm on ``db``, and the line of that call here."""
    a = np.ones((n, n))
    with autotune.options(db=str(db)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line, _ = _here(), autotune.tuned_gemm(a, a)
    return _only_runtime_warning(caught), line


def test_a_damaged_database_warns_at_the_users_line(tiny_db, tmp_path):
    clear_cache()
    w, line = _gemm_warning(damaged_copy(tiny_db, tmp_path / "damaged.h5"), 41)
    assert "ignoring 2 of" in str(w.message) and (w.filename, w.lineno) == (__file__, line)


def test_unreadable_pool_rows_warn_at_the_users_line(tiny_db, tmp_path):
    clear_cache()
    path = tmp_path / "pools.h5"
    shutil.copy(tiny_db, path)
    row = np.zeros(1, ROW_DTYPE)
    row["gap"] = -1.0                     # no gap is negative: an unreadable row
    save_transitions(path, row)
    w, line = _gemm_warning(path, 43)
    assert "thread-pool rows" in str(w.message) and (w.filename, w.lineno) == (__file__, line)


def test_the_communication_fallback_warns_at_the_users_line(tiny_db, tmp_path):
    path = tmp_path / "no-comm.h5"           # its own copy: comm parameters not consulted (warned) yet
    shutil.copy(tiny_db, path)
    sp, cp = load_sp(path), load_comm(path, nprocs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line, _ = _here(), rank_plans(as_problem("gemm", (256, 256, 256)), 2, sp, cp, 2)
    w = _only_runtime_warning(caught)
    assert "communication parameters unavailable" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line)


def test_a_warning_raised_outside_autotune_is_its_own_callers():
    """Called from outside the package the level is 1: warnings.warn's own default."""
    assert user_stacklevel() == 1
