"""Contracts held in one process: the MPI plan cache follows the database's contents and stays
bounded, benchmarks write no database they are not told to, hand-set constants live in
assumptions.py, and a stacked ``tuned_lu_factor`` returns what scipy returns."""
from __future__ import annotations

import ast
import inspect
import os
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg as sl

import autotune
from autotune import tuned_lu_factor
from autotune.cli.command import main as cli_main
from autotune.core import assumptions
from autotune.core.cache import BoundedCache
from autotune.core.families import as_problem
from autotune.core.plans import Plan
from autotune.db import location, lookup
from autotune.distributed import workspace
from autotune.entry import decide as decide_entry
from autotune.entry import gemm as gemm_entry
from autotune.entry import protocol

# the stand-in databases below are unreadable on purpose: each load warns that it is unusable
unusable_db = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")


@pytest.fixture
def counted_plans(monkeypatch):
    """tuned_mpi's selector replaced by one that counts its calls (a fresh plan each time), an
    empty plan cache, and the database re-stat on every load."""
    calls: list = []

    def rank_plans(problem, nprocs, sp, cp, cores, allow_strassen, **kw):
        calls.append(sp)
        return SimpleNamespace(chosen=Plan("summa", 2, 1, 2, b=len(calls)))

    monkeypatch.setattr(protocol, "rank_plans", rank_plans)
    monkeypatch.setattr(protocol, "_PLANS", BoundedCache())
    monkeypatch.setattr(lookup, "RECHECK_SECONDS", 0.0)
    return calls


def _choose(dims=(64, 64, 64)) -> Plan:
    return protocol._plan("gemm", as_problem("gemm", dims), ["host", "host"], [2, 2], 0, None, False)


@unusable_db
def test_mpi_plan_cache_takes_a_rewritten_database(tmp_path, counted_plans):
    db = tmp_path / "sp.h5"
    db.write_bytes(b"first version")
    with autotune.options(db=str(db)):
        first = _choose()
        assert _choose() is first and len(counted_plans) == 1        # cached while the file is unchanged
        stamp = db.stat().st_mtime_ns
        db.write_bytes(b"second version, same path")
        os.utime(db, ns=(stamp + 10 ** 9, stamp + 10 ** 9))
        fresh = _choose()
    assert len(counted_plans) == 2 and fresh != first


@unusable_db
def test_mpi_plan_cache_stays_within_its_bound(tmp_path, counted_plans, monkeypatch):
    monkeypatch.setattr(protocol, "_PLANS", BoundedCache(4))
    (tmp_path / "sp.h5").write_bytes(b"x")
    with autotune.options(db=str(tmp_path / "sp.h5")):
        for n in range(64, 64 + 10):
            _choose((n, n, n))
            assert len(protocol._PLANS) <= 4
        assert len(counted_plans) == 10
        _choose((73, 73, 73))                     # the newest entry survives the clearing
    assert len(counted_plans) == 10


@pytest.mark.parametrize("argv", [["--fit", "--smoke"], ["--fit-from", "earlier.json"]])
def test_mpi_validate_fits_only_into_a_named_database(argv, capsys):
    default = location.resolve(None)
    assert cli_main(["bench", "mpi-validate", *argv]) == 2
    assert "--db" in capsys.readouterr().err
    assert not default.exists()


def test_hand_set_constants_live_in_assumptions():
    names = {"MIN_TUNED_SIZE": gemm_entry, "ALIGNED_OUTPUT_WORK": gemm_entry, "HUGE_PAGE": workspace,
             "HUGE_MIN_BYTES": workspace, "WORKSPACE_SHARE": None, "WORKSPACE_FALLBACK_BYTES": None}
    for name, module in names.items():
        entry = assumptions.ASSUMPTIONS[name]
        assert entry.meaning and entry.source and entry.used_by
        if module is not None:
            assert getattr(module, name) is entry.value
    for module in (gemm_entry, decide_entry, workspace):        # no number set at module level outside assumptions.py
        for node in ast.parse(inspect.getsource(module)).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                leaves = [n for n in ast.walk(node.value) if not isinstance(n, (ast.BinOp, ast.UnaryOp, ast.operator,
                                                                                  ast.unaryop))]
                assert not all(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) for n in leaves), \
                    f"{module.__name__}: {ast.unparse(node)}"


@pytest.mark.filterwarnings("ignore:system parameters unavailable:RuntimeWarning")
@pytest.mark.parametrize("shape", [(3, 40, 40), (2, 3, 4, 4), (3, 0, 0), (2, 1, 1)])
def test_stacked_lu_factor_returns_what_scipy_returns(shape):
    a = np.random.default_rng(7).standard_normal(shape)
    want, got = sl.lu_factor(a), tuned_lu_factor(a)
    assert type(got) is type(want) and len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w)
