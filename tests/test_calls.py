"""The family call registry (``autotune.benchmarks.calls``): each family's operands are well-posed, deterministic
and laid out as asked; its tuned, reference, in-place and collective calls compute the same thing
and pass the problem's flags (Cholesky's ``lower``) on."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from autotune.kernels.stencil import heat_weights, reference

from autotune.benchmarks import calls as calls_mod
from autotune.benchmarks.calls import CALLS, HEAT_ALPHA, agrees, spd_matrix, square
from autotune.core.families import DISTRIBUTED, FAMILIES, CholeskyProblem, GemmProblem
from autotune.core.routines import CHECK_NRHS

pytestmark = pytest.mark.filterwarnings("ignore:system parameters unavailable:RuntimeWarning")
N = 24


def _operands(name, n=N, seed=5, order="C", **fields):
    problem = square(name, n, **fields)
    return problem, CALLS[name].operands(problem, np.random.default_rng(seed), order)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_operands_are_deterministic_shaped_float64_and_in_the_order_asked(name):
    problem, ops = _operands(name)
    again = _operands(name)[1]
    assert len(ops) == CALLS[name].count
    assert all(np.array_equal(x, y) for x, y in zip(ops, again, strict=True))
    assert all(x.dtype == np.float64 and x.flags.c_contiguous for x in ops)
    assert ops[0].shape[0] == problem.order or name == "gemm"
    fortran = _operands(name, order="F")[1]
    if name != "cholesky":                       # a Cholesky problem carries its own memory order
        assert all(x.flags.f_contiguous for x in fortran)
    assert all(np.array_equal(x, y) for x, y in zip(ops, fortran, strict=True))


def test_operand_shapes_follow_the_problem():
    a, b = CALLS["gemm"].operands(GemmProblem(3, 5, 7), np.random.default_rng(0))
    assert a.shape == (3, 5) and b.shape == (5, 7)
    _, (a, b) = _operands("solve")
    assert a.shape == (N, N) and b.shape == (N, CHECK_NRHS)
    _, (a, b) = _operands("lu_solve", nrhs=3)
    assert b.shape == (N, 3)


def test_cholesky_operand_is_spd_in_the_problems_memory_order():
    for memory in ("C", "F"):
        (a,) = CALLS["cholesky"].operands(CholeskyProblem(N, memory=memory), np.random.default_rng(1))
        assert a.flags[f"{memory}_CONTIGUOUS"] and np.array_equal(a, a.T)
        assert np.linalg.eigvalsh(a).min() > 0
    assert np.array_equal(spd_matrix(np.random.default_rng(1), N, "C"), a)


def test_square_applies_only_the_fields_a_problem_has():
    assert square("cholesky", 8, lower=True, nrhs=4) == CholeskyProblem(8, lower=True)
    assert square("solve", 8, lower=True, nrhs=4).dims == (8, 4)
    assert square("gemm", 8, lower=True, nrhs=4).dims == (8, 8, 8)
    assert square("lu", 8) == FAMILIES["lu"].square(8)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_tuned_and_in_place_calls_match_the_reference(name, lower):
    problem, ops = _operands(name, lower=lower)
    calls = CALLS[name]
    want = calls.reference(problem, *ops)
    assert agrees(calls.tuned(problem, *ops), want)
    work = tuple(x.copy() for x in ops)
    assert agrees(calls.tuned(problem, *work, **calls.in_place(problem, *work)), want)
    untouched = [i for i in range(calls.count) if i not in calls.overwrites]
    assert all(np.array_equal(work[i], ops[i]) for i in untouched)


def test_references_are_numpys_and_scipys_calls():
    problem, (a,) = _operands("cholesky", lower=True)
    assert np.array_equal(CALLS["cholesky"].reference(problem, a), sl.cholesky(a, lower=True))
    problem, (a, b) = _operands("lu_solve")
    assert np.array_equal(CALLS["lu_solve"].reference(problem, a, b), sl.lu_solve(sl.lu_factor(a), b))
    problem, (a, b) = _operands("gemm")
    assert np.array_equal(CALLS["gemm"].reference(problem, a, b), a @ b)
    problem, (u,) = _operands("stencil")
    assert np.array_equal(CALLS["stencil"].reference(problem, u), reference(u, problem.steps, heat_weights(HEAT_ALPHA)))
    assert {n: c.library for n, c in CALLS.items()} == {"gemm": "numpy", "cholesky": "scipy", "lu": "scipy",
                                                         "solve": "scipy", "lu_solve": "scipy", "stencil": "numpy"}


def test_in_place_keywords_let_the_tuned_call_overwrite_only_what_they_say():
    problem, (a, b) = _operands("gemm")
    kw = CALLS["gemm"].in_place(problem, a, b)
    assert kw["out"].shape == (N, N)
    assert CALLS["gemm"].tuned(problem, a, b, **kw) is kw["out"]
    problem, ops = _operands("solve")
    assert CALLS["solve"].in_place(problem, *ops)["assume_a"] == "gen"
    assert CALLS["cholesky"].overwrites == CALLS["lu"].overwrites == (0,) and CALLS["solve"].overwrites == (0, 1)


@pytest.mark.parametrize("name", DISTRIBUTED)
def test_collective_calls_pass_operands_comm_and_the_problems_flags(name, monkeypatch):
    seen = {}
    target = {"gemm": "distributed_gemm", "cholesky": "distributed_cholesky", "lu": "distributed_lu_factor",
              "solve": "distributed_solve", "stencil": "heat2d"}[name]
    monkeypatch.setattr(calls_mod, target, lambda *args, **kw: seen.update(args=args, kw=kw))
    problem = square(name, 8, lower=True)
    none = (None,) * CALLS[name].count
    CALLS[name].collective(problem, *none, comm="COMM", config="PLAN")
    if name == "stencil":        # heat2d(u, steps, alpha, comm=...): the problem's steps, the checks' alpha
        assert seen["args"] == (None, problem.steps, HEAT_ALPHA) and seen["kw"] == {"comm": "COMM", "config": "PLAN"}
        return
    assert seen["args"] == (*none, "COMM")
    assert seen["kw"] == ({"lower": True, "config": "PLAN"} if name == "cholesky" else {"config": "PLAN"})
    assert CALLS["lu_solve"].collective is None


def test_agrees_compares_pivots_exactly_and_values_to_a_relative_tolerance():
    a = np.random.default_rng(2).standard_normal((6, 6))
    lu, piv = sl.lu_factor(a)
    assert agrees((lu * (1 + 1e-12), piv), (lu, piv))
    assert not agrees((lu, piv[::-1].copy()), (lu, piv))
    assert not agrees((lu * (1 + 1e-6), piv), (lu, piv))
    assert not agrees(lu, (lu, piv)) and not agrees(lu[:5], lu)
    assert agrees(a @ a, a @ a + 1e-12)
