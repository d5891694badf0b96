"""LU family in one process: tuned_lu_factor, tuned_lu_solve and tuned_solve against scipy's results,
errors and warnings (property-based where the input space is wide), the C hot path, the models,
the selector's candidates and explain."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.linalg as sl
from autotune.kernels import _front
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune
from autotune import backends, options, tuned_lu_factor, tuned_lu_solve, tuned_solve
from autotune.cli.command import main as cli_main
from autotune.core.families import as_problem
from autotune.core.plans import Candidate
from autotune.db import load_sp
from autotune.models import lu as lu_models
from autotune.select import rank

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _tiny(tiny_db):
    with options(db=str(tiny_db)):
        _front.forget()
        yield tiny_db
    _front.forget()


def _matrix(rng, n, m=None, order="C", dtype=np.float64):
    a = rng.standard_normal((n, m or n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(a.shape)
    return np.asarray(a.astype(dtype), order=order)


def _same_factor(got, want, a):
    (lu, piv), (lu2, piv2) = got, want
    assert lu.shape == lu2.shape and lu.dtype == lu2.dtype and piv.dtype == piv2.dtype == np.int32
    np.testing.assert_array_equal(piv, piv2)                 # unique pivots on random matrices
    scale = np.abs(lu2).max() * max(a.shape) * np.finfo(lu2.dtype).eps * 100
    np.testing.assert_allclose(lu, lu2, rtol=0, atol=scale)


@SETTINGS
@given(n=st.integers(1, 80), order=st.sampled_from("CF"), seed=st.integers(0, 2**31),
       dtype=st.sampled_from([np.float64, np.float64, np.float32, np.complex128, np.int64]))
def test_lu_factor_equals_scipy(n, order, seed, dtype):
    rng = np.random.default_rng(seed)
    a = _matrix(rng, n, order=order, dtype=dtype) if dtype is not np.int64 else \
        np.asarray(rng.integers(-9, 10, (n, n)), order=order)
    if dtype is np.int64 and abs(np.linalg.det(a)) < 0.5:
        a[np.diag_indices(n)] += 50
    before = a.copy()
    for _ in range(2):                                        # the second call takes the hot path
        _same_factor(tuned_lu_factor(a), sl.lu_factor(a), a)
    np.testing.assert_array_equal(a, before)                  # the caller's array untouched


@SETTINGS
@given(m=st.integers(1, 60), n=st.integers(1, 60), seed=st.integers(0, 2**31))
def test_lu_factor_rectangular_and_strided_like_scipy(m, n, seed):
    rng = np.random.default_rng(seed)
    a = _matrix(rng, m, n)
    _same_factor(tuned_lu_factor(a), sl.lu_factor(a), a)
    big = _matrix(rng, 2 * m, 2 * m)[::2, ::2]                 # a strided view
    _same_factor(tuned_lu_factor(big), sl.lu_factor(big), big)


def test_lu_factor_empty_and_one_by_one():
    for a in (np.empty((0, 0)), np.array([[3.0]]), np.empty((0, 3))):
        got, want = tuned_lu_factor(a), sl.lu_factor(a)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("n", [40, 100])
def test_lu_factor_singular_warns_as_scipy(n):
    a = np.ones((n, n))
    for _ in range(2):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            lu, piv = tuned_lu_factor(a)
        assert [type(w.message) for w in got] == [sl.LinAlgWarning]
        assert "exactly zero" in str(got[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sl.LinAlgWarning)
            _same_factor((lu, piv), sl.lu_factor(a), a)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_raises_value_error_with_check_and_not_without(bad):
    a = _matrix(np.random.default_rng(1), 50)
    a[7, 3] = bad
    for _ in range(2):
        with pytest.raises(ValueError, match="infs or NaNs"):
            tuned_lu_factor(a)
        with pytest.raises(ValueError, match="infs or NaNs"):
            tuned_solve(a, np.ones(50))
    tuned_lu_factor(a, check_finite=False)                    # LAPACK runs on it, as scipy's does


def test_overwrite_a_honoured():
    a = np.asfortranarray(_matrix(np.random.default_rng(2), 60))
    want = sl.lu_factor(a)
    lu, piv = tuned_lu_factor(a, overwrite_a=True)
    assert lu is a
    _same_factor((lu, piv), want, lu)


@SETTINGS
@given(n=st.integers(1, 70), k=st.integers(0, 5), trans=st.sampled_from([0, 1, 2]), one=st.booleans(),
       order=st.sampled_from("CF"), seed=st.integers(0, 2**31))
def test_lu_solve_equals_scipy(n, k, trans, one, order, seed):
    rng = np.random.default_rng(seed)
    a = _matrix(rng, n, order=order)
    b = rng.standard_normal(n) if one else np.asarray(rng.standard_normal((n, k)), order=order)
    factors = tuned_lu_factor(a)
    before = b.copy()
    got, want = tuned_lu_solve(factors, b, trans=trans), sl.lu_solve(factors, b, trans=trans)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8 * np.abs(want).max(initial=1.0))
    np.testing.assert_array_equal(b, before)


def test_lu_solve_errors_as_scipy():
    a = _matrix(np.random.default_rng(3), 40)
    factors = tuned_lu_factor(a)
    for b in (np.ones(39), np.ones((41, 2))):
        with pytest.raises(ValueError) as ours:
            tuned_lu_solve(factors, b)
        with pytest.raises(ValueError) as theirs:
            sl.lu_solve(factors, b)
        assert str(ours.value) == str(theirs.value)


@SETTINGS
@given(n=st.integers(1, 70), k=st.integers(1, 5), one=st.booleans(), transposed=st.booleans(),
       order=st.sampled_from("CF"), seed=st.integers(0, 2**31))
def test_solve_general_equals_scipy(n, k, one, transposed, order, seed):
    rng = np.random.default_rng(seed)
    a = _matrix(rng, n, order=order)
    b = rng.standard_normal(n) if one else np.asarray(rng.standard_normal((n, k)), order=order)
    before_a, before_b = a.copy(), b.copy()
    for _ in range(2):                                        # the second call takes the hot path
        got = tuned_solve(a, b, transposed=transposed)
        want = sl.solve(a, b, transposed=transposed)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7 * np.abs(want).max(initial=1.0))
    np.testing.assert_array_equal(a, before_a)
    np.testing.assert_array_equal(b, before_b)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("assume_a", ["pos", "positive definite", "sym", "her", "diagonal", "upper triangular",
                                      "lower triangular", "gen", "general", None])
def test_solve_structures_equal_scipy(assume_a, lower):
    rng = np.random.default_rng(4)
    g = rng.standard_normal((60, 60))
    a = g @ g.T + 60 * np.eye(60)
    if assume_a in ("upper triangular", "diagonal"):
        a = np.triu(a) if assume_a != "diagonal" else np.diag(np.diag(a))
    elif assume_a == "lower triangular":
        a = np.tril(a)
    b = rng.standard_normal((60, 3))
    got = tuned_solve(a, b, assume_a=assume_a, lower=lower)
    np.testing.assert_allclose(got, sl.solve(a, b, assume_a=assume_a, lower=lower), rtol=1e-9, atol=1e-12)


def test_solve_detects_what_scipy_detects_with_assume_a_none():
    rng = np.random.default_rng(5)
    tri = np.triu(rng.standard_normal((50, 50))) + 50 * np.eye(50)
    sym = tri + tri.T
    b = rng.standard_normal(50)
    for a in (tri, tri.T, sym):
        np.testing.assert_allclose(tuned_solve(a, b), sl.solve(a, b), rtol=1e-10, atol=1e-12)


def test_solve_singular_raises_and_ill_conditioned_warns_as_scipy():
    for _ in range(2):
        with pytest.raises(np.linalg.LinAlgError, match="singular"):
            tuned_solve(np.ones((50, 50)), np.ones(50))
    ill = sl.hilbert(40)
    ill[0, 1] += 1e-20            # not symmetric: the general (tuned) path
    ill[0, -1] = 1e-3
    for _ in range(2):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            tuned_solve(ill, np.ones(40))
        assert [type(w.message) for w in got] == [sl.LinAlgWarning]
        assert "ill-conditioned" in str(got[0].message)


@pytest.mark.parametrize("a, b", [(np.ones((40, 41)), np.ones(40)), (np.eye(40), np.ones(39)),
                                  (np.eye(40), np.ones((41, 2))), (np.ones(40), np.ones(40))])
def test_solve_bad_shapes_raise_as_scipy(a, b):
    with pytest.raises(ValueError) as theirs:
        sl.solve(a, b)
    with pytest.raises(ValueError) as ours:
        tuned_solve(a, b)
    assert str(ours.value) == str(theirs.value)


def test_solve_other_dtypes_empty_and_scalar_as_scipy():
    rng = np.random.default_rng(6)
    cases = [(rng.integers(-5, 6, (40, 40)) + 40 * np.eye(40, dtype=int), rng.integers(0, 3, 40)),
             (_matrix(rng, 40, dtype=np.complex128), np.ones(40)),
             (_matrix(rng, 40, dtype=np.float32), np.ones(40, np.float32)),
             (np.empty((0, 0)), np.empty(0)), (np.array([[2.0]]), np.array([4.0])),
             (np.stack([np.eye(40)] * 2), np.ones((2, 40, 1)))]
    for a, b in cases:
        got, want = tuned_solve(a, b), sl.solve(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_solve_overwrite_flags_keep_scipy_semantics():
    rng = np.random.default_rng(7)
    a, b = np.asfortranarray(_matrix(rng, 50)), np.asfortranarray(rng.standard_normal((50, 2)))
    want = sl.solve(a, b)
    np.testing.assert_allclose(tuned_solve(a.copy(order="F"), b.copy(order="F"), overwrite_a=True,
                                           overwrite_b=True), want, rtol=1e-10)


def test_hot_path_remembers_the_decision_per_order():
    a = _matrix(np.random.default_rng(8), 64)
    _front.forget()
    assert not _front.remembered_lu(64)
    with options(guard=False):            # unguarded, a choice is remembered at its first call
        tuned_lu_factor(a)
        assert _front.remembered_lu(64)
        _same_factor(tuned_lu_factor(a), sl.lu_factor(a), a)


def test_forced_config_and_every_candidate_library(tiny_db):
    a = _matrix(np.random.default_rng(9), 64)
    b = np.ones((64, 2))
    for lib in ("numpy-openblas", "scipy-openblas", "numba-reference"):
        for t in (1, 2):
            _same_factor(tuned_lu_factor(a, config=Candidate("getrf", lib, t)), sl.lu_factor(a), a)
            np.testing.assert_allclose(tuned_solve(a, b, config=Candidate("gesv", lib, t)), sl.solve(a, b),
                                       rtol=1e-9)
    with pytest.raises(ValueError, match="not a lu algorithm"):
        tuned_lu_factor(a, config=Candidate("potrf", "scipy-openblas", 1))


def test_models_and_ranking(tiny_db):
    sp = load_sp(str(tiny_db))
    t_f = lu_models.getrf(200, "scipy-openblas", 1, sp)
    t_s = lu_models.getrs(200, 4, "scipy-openblas", 1, sp)
    assert 0 < t_s < t_f
    assert lu_models.gesv(200, 4, "scipy-openblas", 1, sp) == pytest.approx(t_f + t_s)
    assert lu_models.getrs(200, 4, "scipy-openblas", 1, sp) > lu_models.getrs(200, 1, "scipy-openblas", 1, sp)
    dec = rank(as_problem("lu", (200,)), sp, 2)
    algorithms = {r.candidate.algorithm for r in dec.ranking}
    assert "getrf" in algorithms and algorithms <= {"getrf", "getrf_blocked"}
    assert {r.candidate.threads for r in dec.ranking} == {1, 2}
    dec = rank(as_problem("solve", (200, 4)), sp, 1, explain=True)
    assert {r.candidate.algorithm for r in dec.ranking} == {"gesv"}
    assert "getrf" in str(dec) and "getrs" in str(dec)
    assert isinstance(autotune.explain("lu_solve", 200, 8, db=str(tiny_db)).chosen, Candidate)


def test_explain_cli_ranks_lu_and_solve(tiny_db, capsys):
    assert cli_main(["explain", "lu", "100", "--db", str(tiny_db), "--run"]) == 0
    out = capsys.readouterr().out
    assert "lu 100" in out and "getrf [" in out and "ran tuned_lu" in out
    assert cli_main(["explain", "solve", "100", "16", "--db", str(tiny_db)]) == 0
    assert "solve 100x16" in capsys.readouterr().out
    assert cli_main(["explain", "lu", "100", "2", "--db", str(tiny_db)]) == 2
    assert cli_main(["explain", "lu_solve", "100", "--np", "2", "--db", str(tiny_db)]) == 2


@pytest.mark.parametrize("b", [1, 7, 16, 64, 500])
def test_blocked_lu_candidate_equals_scipy(b, tiny_db):
    a = _matrix(np.random.default_rng(b), 150)
    for lib in ("numpy-openblas", "scipy-openblas"):
        _same_factor(tuned_lu_factor(a, config=Candidate("getrf_blocked", lib, 1, param=b)), sl.lu_factor(a), a)
    s = a.copy()
    s[:, 20] = 0.0                     # exactly singular: LAPACK's info, scipy's warning
    with pytest.warns(sl.LinAlgWarning, match="Diagonal number 21"):
        tuned_lu_factor(s, config=Candidate("getrf_blocked", "scipy-openblas", 1, param=b))


def test_blocked_lu_model_sums_its_calls(tiny_db):
    sp = load_sp(str(tiny_db))
    parts: dict = {}
    t = lu_models.blocked(256, [16, 64], "scipy-openblas", 1, sp, parts)
    assert t.shape == (2,) and (t > 0).all()
    assert set(parts) == {"getrf", "laswp", "trsm", "gemm"}
    np.testing.assert_allclose(sum(parts.values()), t)
    assert parts["gemm"][0] > parts["getrf"][0] * 0.1      # the trailing updates carry most flops
    dec = rank(as_problem("lu", (256,)), sp, 1)
    assert any(r.candidate.algorithm == "getrf_blocked" for r in dec.ranking)


def test_reference_getrs_solves_both_ways():
    be = backends.get("numba-reference")
    rng = np.random.default_rng(10)
    a, b = np.asfortranarray(rng.standard_normal((30, 30))), np.asfortranarray(rng.standard_normal((30, 3)))
    lu, ipiv = a.copy(order="F"), np.zeros(30, dtype=np.int64)
    assert be.ops["getrf"](lu, ipiv) == 0
    for trans, op in ((0, a), (1, a.T)):
        x = b.copy(order="F")
        assert be.ops["getrs"](lu, ipiv, x, trans) == 0
        np.testing.assert_allclose(op @ x, b, atol=1e-10)


PIVOT_CASES = {   # name -> expression of the pivots for lu, piv = lu_factor(order-64 matrix)
    "far": "np.where(np.arange(64) == 5, 10**6, piv)", "minus one": "np.where(np.arange(64) == 5, -1, piv)",
    "n": "np.where(np.arange(64) == 5, 64, piv)", "list": "[10**6] * 64",
    "nan": "np.where(np.arange(64) == 5, np.nan, piv)",
    "fraction": "piv + 0.5", "complex": "piv.astype(complex)", "object": "np.full(64, 10**6, dtype=object)",
    "short": "piv[:63]", "2-D": "piv[:, None]", "stacked": "np.full((2, 64), 10**6)",
}
PIVOT_SCRIPT = """
import numpy as np, scipy.linalg as sl, autotune
lu, piv = sl.lu_factor(np.random.default_rng(11).standard_normal((64, 64)))
for name, expr in CASES.items():
    stack = name == "stacked"
    f, b = ((np.stack([lu, lu]), np.ones((2, 64, 1))) if stack else (lu, np.ones(64)))
    try:
        autotune.tuned_lu_solve((f, eval(expr)), b)
        print(name, "returned", flush=True)
    except Exception as e:
        print(name, type(e).__name__, str(e)[:60], flush=True)
x = autotune.tuned_lu_solve((lu, piv.astype(float)), np.ones(64))   # whole numbers: scipy's result
np.testing.assert_allclose(x, sl.lu_solve((lu, piv), np.ones(64)))
print("done")
"""


def test_lu_solve_refuses_pivots_that_are_no_row_index():
    """Pivots that are not integers in [0, n), one per row, raise ValueError (scipy's own call
    crashes the process on many: out of range, NaN): run in a child, where a crash is a failure."""
    out = subprocess.run([sys.executable, "-c", f"CASES = {PIVOT_CASES!r}\n{PIVOT_SCRIPT}"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.endswith("done\n"), out.stdout + out.stderr[-2000:]
    lines = out.stdout.splitlines()[:-1]
    assert [ln.split(" ")[0] for ln in lines] == [name.split(" ")[0] for name in PIVOT_CASES], lines
    for ln in lines:
        assert " ValueError piv " in ln, ln


DTYPES = [bool, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          np.float32, np.float64, np.complex64, np.complex128]


def _dtype_operands(n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(symmetric positive definite, general: neither symmetric nor triangular) order-n matrices of
    ``dtype``, nonsingular (bool ones too)."""
    if dtype is bool:
        g = np.eye(n, dtype=bool)
        g[n - 1, 0] = g[0, 1] = True
        return np.eye(n, dtype=bool), g
    g = np.eye(n) * 4 + 1
    g[n - 1, 0] = 2
    return (np.eye(n) * 4 + 1).astype(dtype), g.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_result_dtypes_follow_scipys_rules(tiny_db, dtype):
    """Every tuned call returns the dtype (and values) scipy/numpy returns: bool and integers up to
    16 bits give float32 from lu_factor and cholesky, below and above the tuned sizes, with a
    database to tune from, twice (the second call may take the C hot path)."""
    with options(db=str(tiny_db)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, _ in [(n, rep) for n in (8, 48) for rep in range(2)]:
            s, g = _dtype_operands(n, dtype)
            b = np.ones((n, 2), dtype=dtype)
            pairs = {"lu_factor": (tuned_lu_factor(g)[0], sl.lu_factor(g)[0]),
                     "cholesky": (autotune.tuned_cholesky(s), sl.cholesky(s)),
                     "solve": (tuned_solve(g, b), sl.solve(g, b)),
                     "solve 1-D": (tuned_solve(g, b[:, 0]), sl.solve(g, b[:, 0])),
                     "solve pos": (tuned_solve(s, b, assume_a="pos"), sl.solve(s, b, assume_a="pos")),
                     "lu_solve": (tuned_lu_solve(sl.lu_factor(g), b), sl.lu_solve(sl.lu_factor(g), b)),
                     "gemm": (autotune.tuned_gemm(g, s), np.matmul(g, s))}
            for name, (got, want) in pairs.items():
                assert got.dtype == want.dtype, (name, n, got.dtype, want.dtype)
                np.testing.assert_allclose(got, want, rtol=1e-10 if want.dtype in (np.float64, np.complex128) else 1e-3)
