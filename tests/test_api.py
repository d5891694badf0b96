"""tuned_gemm / tuned_cholesky keep numpy's and scipy's contracts, on every candidate."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.linalg as sl
from autotune.install_probe.operands import spd_matrix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autotune
from autotune import Candidate, tuned_cholesky, tuned_gemm
from autotune.core.families import as_problem
from autotune.db import load_sp
from autotune.select import ALGORITHMS, choose, clear_cache, rank

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def db(tiny_db):
    """Tuned calls read the tiny test database."""
    clear_cache()
    with autotune.options(db=str(tiny_db)):
        yield tiny_db


def _layout(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "C":
        return np.ascontiguousarray(x)
    if kind == "F":
        return np.asfortranarray(x)
    big = np.zeros((x.shape[0] * 2, x.shape[1] * 2), dtype=x.dtype)   # strided view
    big[::2, ::2] = x
    return big[::2, ::2]


def _rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    if np.dtype(dtype).kind in "iu":
        x = np.round(x * 4)
    return x.astype(dtype)


def _tol(dtype, k, exact_ints=True):
    if np.dtype(dtype).kind in "iub" and exact_ints:
        return 0
    eps = np.finfo(np.result_type(dtype, np.float32) if np.dtype(dtype).kind in "fc" else np.float64).eps
    return 8 * eps * max(k, 1)


layouts = st.sampled_from(["C", "F", "strided"])
dims = st.integers(1, 72)


@SETTINGS
@given(m=dims, k=dims, n=dims, la=layouts, lb=layouts,
       dtype=st.sampled_from([np.float64, np.float32, np.complex128, np.int64]))
def test_gemm_matches_matmul(db, m, k, n, la, lb, dtype):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a, b = _layout(_rand(rng, (m, k), dtype), la), _layout(_rand(rng, (k, n), dtype), lb)
    got, want = tuned_gemm(a, b), np.matmul(a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=_tol(dtype, k), atol=_tol(dtype, k) * np.abs(want).max(initial=1))


@SETTINGS
@given(m=dims, k=dims, n=dims, ta=st.booleans(), tb=st.booleans(), lc=layouts,
       alpha=st.sampled_from([1.0, -0.5, 2.0]), beta=st.sampled_from([0.0, 1.0, -3.0]),
       dtype=st.sampled_from([np.float64, np.float32, np.complex128]))
def test_gemm_blas_style(db, m, k, n, ta, tb, lc, alpha, beta, dtype):
    rng = np.random.default_rng(m + 7 * k + 31 * n)
    a = _rand(rng, (k, m) if ta else (m, k), dtype)
    b = _rand(rng, (n, k) if tb else (k, n), dtype)
    c = _layout(_rand(rng, (m, n), dtype), lc)
    want = alpha * ((a.T if ta else a) @ (b.T if tb else b)) + beta * c
    got = tuned_gemm(a, b, alpha=alpha, beta=beta, c=c, trans_a=ta, trans_b=tb)
    np.testing.assert_allclose(got, want, rtol=_tol(dtype, k) * 4, atol=_tol(dtype, k) * 4 * np.abs(want).max())


def test_gemm_beta_zero_ignores_nan_c_and_out_in_place(db):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 40)), rng.standard_normal((40, 50))
    c = np.full((64, 50), np.nan)
    got = tuned_gemm(a, b, c=c, beta=0.0)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)
    c = np.ones((64, 50), order="F")
    out = tuned_gemm(a, b, c=c, beta=2.0, out=c)
    assert out is c
    np.testing.assert_allclose(c, a @ b + 2.0, rtol=1e-12)


def test_gemm_out_and_aliasing(db):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((48, 48))
    want = a @ a
    out = np.empty((48, 48))
    assert tuned_gemm(a, a, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-12)
    assert tuned_gemm(a, a, out=a) is a                        # out aliases an input
    np.testing.assert_allclose(a, want, rtol=1e-12)
    out32 = np.empty((48, 48), dtype=np.float32)
    tuned_gemm(want, want, out=out32)                          # same-kind cast, like numpy
    np.testing.assert_allclose(out32, want @ want, rtol=1e-5)
    for bad in (np.empty((48, 48), dtype=np.int64), [1.0], np.empty((48, 47))):
        with pytest.raises(Exception) as expected:
            np.matmul(want, want, out=bad)
        with pytest.raises(type(expected.value)):
            tuned_gemm(want, want, out=bad)
        with pytest.raises((TypeError, ValueError)):
            tuned_gemm(want, want, out=bad, alpha=2.0)


@pytest.mark.parametrize(("a", "b"), [
    (np.ones((3, 4)), np.ones((5, 6))),            # core dimension mismatch
    (np.ones((40, 40)), np.ones((41, 40))),
    (np.ones(3), np.ones(4)),
    (np.ones((2, 3)), 5.0),                         # scalar operand
])
def test_gemm_errors_like_numpy(db, a, b):
    with pytest.raises(Exception) as want:
        np.matmul(a, b)
    with pytest.raises(type(want.value)) as got:
        tuned_gemm(a, b)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize(("a", "b"), [
    (np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)),     # integers stay exact
    (np.ones(3), np.ones(3)),                                      # 1-D dot
    (np.ones((2, 3, 4)), np.ones((2, 4, 5))),                      # stacks
    (np.ones((40, 40), dtype=bool), np.ones((40, 40), dtype=bool)),
    ([[1.0, 2.0]], [[3.0], [4.0]]),                                 # lists
])
def test_gemm_untuned_domain_defers_to_numpy(db, a, b):
    want, got = np.matmul(a, b), tuned_gemm(a, b)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


def test_gemm_every_candidate_is_correct(db):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((96, 70)), rng.standard_normal((70, 80))
    with autotune.options(allow_strassen=True):
        dec = rank(as_problem("gemm", (96, 70, 80)), load_sp(str(db)), 2, allow_strassen=True)
    assert {r.candidate.backend for r in dec.ranking} >= {"numpy-openblas", "scipy-openblas"}
    for r in dec.ranking:
        np.testing.assert_allclose(tuned_gemm(a, b, config=r.candidate), a @ b, rtol=1e-10, atol=1e-10)


def _spd(rng, n, dtype=np.float64):
    g = _rand(rng, (n, n), dtype)
    return (g @ g.conj().T + n * np.eye(n)).astype(dtype)


@SETTINGS
@given(n=st.integers(0, 90), lower=st.booleans(), layout=layouts,
       dtype=st.sampled_from([np.float64, np.float32, np.complex128, np.int64]))
def test_cholesky_matches_scipy(db, n, lower, layout, dtype):
    rng = np.random.default_rng(n)
    a = _spd(rng, n, np.float64 if dtype == np.int64 else dtype)
    if dtype == np.int64:
        a = np.round(a).astype(np.int64) + n * np.eye(n, dtype=np.int64)
    a = _layout(a, layout) if n else a
    want = sl.cholesky(a, lower=lower)
    got = tuned_cholesky(a, lower=lower)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = _tol(dtype, n, exact_ints=False) * 10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(initial=1))


def test_cholesky_every_candidate(db):
    rng = np.random.default_rng(3)
    a = _spd(rng, 150)
    for lower in (False, True):
        want = sl.cholesky(a, lower=lower)
        for order in ("C", "F"):
            dec = rank(as_problem("cholesky", (150,)), load_sp(str(db)), 2)
            algs = {r.candidate.algorithm for r in dec.ranking}
            assert algs >= {"potrf", "blocked", "gemv", "axpy"}, algs
            for r in dec.ranking:
                got = tuned_cholesky(np.array(a, order=order), lower=lower, config=r.candidate)
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=str(r.candidate))


@pytest.mark.parametrize("algorithm", ["potrf", "blocked", "gemv", "axpy"])
def test_cholesky_not_positive_definite(db, algorithm):
    a = np.eye(40)
    a[17, 17] = -1.0
    cand = Candidate(algorithm, "scipy-openblas", 1, 16 if algorithm == "blocked" else 0)
    with pytest.raises(np.linalg.LinAlgError) as want:
        sl.cholesky(a)
    with pytest.raises(np.linalg.LinAlgError) as got:
        tuned_cholesky(a, config=cand)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("a", [np.ones((3, 4)), np.ones((40, 41)), np.ones(5), np.array([[np.nan, 0], [0, 1.0]]),
                               np.full((40, 40), np.inf)])
def test_cholesky_value_errors_like_scipy(db, a):
    with pytest.raises(ValueError) as want:
        sl.cholesky(a)
    with pytest.raises(ValueError) as got:
        tuned_cholesky(a)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("n", [8, 64, 256])
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_check_finite_is_honoured(db, n, lower):
    """A NaN in the triangle the factorisation never reads: check_finite=True refuses it as scipy
    does, check_finite=False gives scipy's (finite) factor."""
    a = _spd(np.random.default_rng(n), n)
    unread = (0, n - 1) if lower else (n - 1, 0)
    a[unread] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        sl.cholesky(a, lower=lower)
    want = sl.cholesky(a, lower=lower, check_finite=False)
    assert np.isfinite(want).all()
    blocked = Candidate("blocked", "scipy-openblas", 1, 16)
    for config in (None, None, blocked):        # deciding, the remembered decision's C path, forced
        got = tuned_cholesky(a, lower=lower, check_finite=False, config=config)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        with pytest.raises(ValueError, match="infs or NaNs"):
            tuned_cholesky(a, lower=lower, config=config)


@pytest.mark.parametrize("order", ["C", "F"])
def test_cholesky_overwrite_a(db, order):
    rng = np.random.default_rng(4)
    a = np.array(_spd(rng, 64), order=order)
    want = sl.cholesky(a)
    got = tuned_cholesky(a, overwrite_a=True)
    assert got is a
    np.testing.assert_allclose(a, want, rtol=1e-10, atol=1e-10)
    b = np.array(_spd(rng, 64), order=order)
    keep = b.copy()
    tuned_cholesky(b)
    np.testing.assert_array_equal(b, keep)


def test_cholesky_empty_and_1x1(db):
    assert tuned_cholesky(np.zeros((0, 0))).shape == (0, 0)
    np.testing.assert_array_equal(tuned_cholesky(np.array([[4.0]])), [[2.0]])
    with pytest.raises(np.linalg.LinAlgError):
        tuned_cholesky(np.array([[-4.0]]))


def test_decisions_are_cached_per_problem(db):
    sp = load_sp(str(db))
    first = choose(as_problem("cholesky", (500,)), sp, 2)
    assert choose(as_problem("cholesky", (500,)), sp, 2) is first
    assert choose(as_problem("cholesky", (500,)), sp, 1) is not first
    assert all(r.candidate.threads == 1 for r in choose(as_problem("cholesky", (500,)), sp, 1).ranking)


def test_forced_config_errors(db):
    a = np.eye(40)
    with pytest.raises(ValueError, match="not a cholesky algorithm"):
        tuned_cholesky(a, config={"algorithm": "strassen", "backend": "scipy-openblas", "threads": 1})
    with pytest.raises(ValueError, match="unknown backend"):
        tuned_gemm(a, a, config=Candidate("blas", "nope", 1))
    with pytest.raises(ValueError, match="unknown keys"):
        tuned_gemm(a, a, config={"algorithm": "blas", "backend": "mkl", "threads": 1, "block": 3})


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_incomplete_config_says_what_a_config_takes(db, dtype):
    """A config dict missing keys is a ValueError naming them, the keys, the family's algorithms
    and the backends that load here (docs/usage.md#config), not Candidate's own TypeError text."""
    a = np.eye(48, dtype=dtype)
    with pytest.raises(ValueError) as err:
        tuned_gemm(a, a, config={"algorithm": "blas"})
    text = str(err.value)
    assert text.startswith("config misses backend, threads; a gemm config takes algorithm, backend, threads")
    assert "algorithms ['blas', 'strassen', 'strassen_nested']" in text and "'numpy-openblas'" in text
    assert "__init__" not in text


def test_a_backend_not_available_here_is_a_bad_config(db, monkeypatch):
    """A forced backend that does not load here (not installed) or lacks the family's routines is a
    ValueError listing the backends that do, as usage.md says; the load failure is its cause."""
    from autotune.backends import BackendUnavailable
    from autotune.select import candidates

    real = candidates.get_backend

    def without_blis(name):
        if name == "blis":
            raise BackendUnavailable("BLIS not installed (pip install blis)")
        return real(name)

    monkeypatch.setattr(candidates, "get_backend", without_blis)
    a = np.eye(40)
    with pytest.raises(ValueError, match=r"backend 'blis' is not available here \(BLIS not installed") as err:
        tuned_gemm(a, a, config=Candidate("blas", "blis", 1))
    assert isinstance(err.value.__cause__, BackendUnavailable)
    here = str(err.value).split("backends here ")[1]
    assert "'numpy-openblas'" in here and "'blis'" not in here
    with pytest.raises(ValueError, match="backend 'numba-stencil' has no potrf"):
        tuned_cholesky(a.astype(np.float32), config={"algorithm": "potrf", "backend": "numba-stencil", "threads": 1})


@pytest.mark.parametrize("n", [8, 64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_forced_config_is_checked_at_every_size_and_dtype(db, n, dtype):
    """A forced candidate naming no algorithm of the call's family is a ValueError listing the
    family's, also where the call is numpy's or scipy's own (small, another dtype, a structure)."""
    a = (np.eye(n) * 4 + 1).astype(dtype)
    bad = {"algorithm": "nonsense", "backend": "scipy-openblas", "threads": 1}
    calls = {"gemm": lambda cfg: tuned_gemm(a, a, config=cfg), "cholesky": lambda cfg: tuned_cholesky(a, config=cfg),
             "lu": lambda cfg: autotune.tuned_lu_factor(a, config=cfg),
             "lu_solve": lambda cfg: autotune.tuned_lu_solve(sl.lu_factor(a), a[:, 0], config=cfg),
             "solve": lambda cfg: autotune.tuned_solve(a, a[:, 0], config=cfg)}
    for family, call in calls.items():
        known = [name for name, (fam, _) in ALGORITHMS.items() if fam == family]
        message = re.escape(f"'nonsense' is not a {family} algorithm; choose from {known}")
        for cfg in (bad, Candidate("nonsense", "scipy-openblas", 1)):
            with pytest.raises(ValueError, match=message):
                call(cfg)
    with pytest.raises(ValueError, match="not a cholesky algorithm"):
        autotune.tuned_solve(a, a[:, 0], assume_a="pos", config={**bad, "algorithm": "gesv"})


def test_without_database_warns_once_and_matches(tmp_path):
    from autotune import api

    clear_cache()
    rng = np.random.default_rng(5)
    a = _spd(rng, 64)
    with autotune.options(db=str(tmp_path / "missing.h5")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r1 = tuned_gemm(a, a)
            r2 = tuned_cholesky(a)
            # the fallback is remembered by the C entry like any decision: at n = 64 the Python
            # layer made it 0.62x numpy (gemm) and 0.79x scipy (Cholesky)
            assert api._front.remembered(a.shape + a.shape) and api._front.remembered_cholesky(64)
            r3, r4 = tuned_gemm(a, a), tuned_cholesky(a)
            with pytest.raises(np.linalg.LinAlgError):
                tuned_cholesky(-a)
    np.testing.assert_array_equal(r1, a @ a)
    np.testing.assert_array_equal(r3, a @ a)
    np.testing.assert_array_equal(r2, sl.cholesky(a))
    np.testing.assert_allclose(r4, sl.cholesky(a), rtol=1e-12, atol=1e-12)   # the C path: lower of the transpose
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "autotune-install" in msgs[0], msgs


def test_explain_prints_choice_and_sp(db, capsys):
    rng = np.random.default_rng(6)
    a = _spd(rng, 100)
    tuned_cholesky(a, explain=True)
    text = capsys.readouterr().out
    assert "chose" in text and "GF/s" in text and "potrf" in text


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize(("ta", "tb", "alpha", "beta"), [(False, False, 1.0, 0.0), (True, False, 2.0, 1.5),
                                                         (False, True, -1.0, 0.0)])
def test_forced_strassen_within_its_bound(db, levels, ta, tb, alpha, beta):
    from autotune.kernels.strassen import strassen_error_bound

    rng = np.random.default_rng(levels)
    m, k, n = 130, 101, 90
    a = rng.standard_normal((k, m) if ta else (m, k))
    b = rng.standard_normal((n, k) if tb else (k, n))
    c = rng.standard_normal((m, n))
    got = tuned_gemm(a, b, alpha=alpha, beta=beta, c=c, trans_a=ta, trans_b=tb,
                     config=Candidate("strassen", "scipy-openblas", 1, levels))
    want = alpha * ((a.T if ta else a) @ (b.T if tb else b)) + beta * c
    bound = strassen_error_bound(k, levels) * abs(alpha) * np.abs(a).max() * np.abs(b).max()
    assert np.abs(got - want).max() <= bound + 1e-13 * np.abs(want).max()


def test_strassen_only_when_allowed(db):
    sp = load_sp(str(db))
    assert all(r.candidate.algorithm != "strassen" for r in rank(as_problem("gemm", (512, 512, 512)), sp, 2).ranking)
    allowed = rank(as_problem("gemm", (512, 512, 512)), sp, 2, allow_strassen=True).ranking
    assert {r.candidate.param for r in allowed if r.candidate.algorithm == "strassen"} == {1, 2, 3}


def test_gemm_fast_path_follows_options(db):
    """A shape remembered as numpy's own call is forgotten when the options change."""
    from autotune import api, backends

    a = np.random.default_rng(0).standard_normal((64, 64))
    np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
    np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
    remembered = api._front.remembered(a.shape + a.shape)
    with autotune.options(threads=1):
        assert not api._front.remembered(a.shape + a.shape)
        np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
    chosen = choose(as_problem("gemm", (64, 64, 64)), load_sp(str(db)), autotune.get_options().thread_budget).chosen
    own = chosen.backend == "numpy-openblas" and backends.get(chosen.backend).get_threads() == chosen.threads
    assert remembered == own          # only numpy's own call, at the library's current threads, is remembered


def test_cholesky_hot_path_keeps_the_contract(db):
    """A remembered order runs in C: same factor, errors and library thread counts as the Python path."""
    from threadpoolctl import threadpool_info

    from autotune import api

    rng = np.random.default_rng(1)
    g = rng.standard_normal((64, 64))
    s = g @ g.T + 64 * np.eye(64)
    with autotune.options(guard=False):      # unguarded, a choice is remembered at its first call
        tuned_cholesky(s)
        assert api._front.remembered_cholesky(64)
        threads = [i["num_threads"] for i in threadpool_info()]
        for order in "CF":
            for lower in (False, True):
                x = np.array(s, order=order)
                np.testing.assert_allclose(tuned_cholesky(x, lower=lower), sl.cholesky(x, lower=lower),
                                           rtol=1e-12, atol=1e-12)
                np.testing.assert_array_equal(x, s)               # input untouched
        assert [i["num_threads"] for i in threadpool_info()] == threads
        bad = s.copy()
        bad[3, 5] = np.nan
        with pytest.raises(ValueError, match="infs or NaNs"):
            tuned_cholesky(bad)
        indefinite = s.copy()
        indefinite[10, 10] = -1.0
        with pytest.raises(np.linalg.LinAlgError):
            tuned_cholesky(indefinite)
        with autotune.options(threads=1):
            assert not api._front.remembered_cholesky(64)



@pytest.mark.parametrize("order", "CF")
@pytest.mark.parametrize("lower", [False, True])
def test_prepare_cholesky_one_pass(order, lower):
    """The fused check/copy/clean keeps the factor's triangle, zeros the other, sees NaN in either."""
    from autotune.kernels._front import prepare_cholesky

    x = np.array(np.arange(1.0, 26.0).reshape(5, 5), order=order)
    w = prepare_cholesky(x, lower, True)
    np.testing.assert_array_equal(w, np.tril(x) if lower else np.triu(x))
    assert w.flags.c_contiguous == x.flags.c_contiguous and not np.shares_memory(w, x)
    x[(0, 4) if lower else (4, 0)] = np.inf            # in the triangle the factor never reads
    assert prepare_cholesky(x, lower, True) is None
    assert prepare_cholesky(x, lower, False) is not None


def test_tuned_outputs_start_on_a_cache_line(db):
    """What a tuned call writes is cache-line aligned, as the probe measured it (multi-threaded
    OpenBLAS writes an unaligned output 5-12% slower); numpy's own 1-thread call is left as numpy runs it."""
    from autotune import backends

    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((200, 150)), rng.standard_normal((150, 170))
    numpy_threads = backends.get("numpy-openblas").get_threads()
    cands = [Candidate("blas", "scipy-openblas", 2), Candidate("blas", "scipy-openblas", 1),
             Candidate("strassen", "scipy-openblas", 1, 1)]
    if numpy_threads > 1:
        cands.append(Candidate("blas", "numpy-openblas", numpy_threads))
    for cand in cands:
        for _ in range(2):
            out = tuned_gemm(a, b, config=cand)
            np.testing.assert_allclose(out, a @ b, rtol=1e-10, atol=1e-10)
            assert out.ctypes.data % 64 == 0, cand
    s = spd_matrix(rng, 120, order="C")
    with autotune.options(guard=False):             # the guard's trial would run scipy's own call
        for _ in range(3):                          # Python path, then the remembered C path
            for x in (s, np.asfortranarray(s), s[::1, ::1].astype(np.int64)):
                factor = tuned_cholesky(x)
                np.testing.assert_allclose(factor, sl.cholesky(x), rtol=1e-12, atol=1e-12)
                assert factor.ctypes.data % 64 == 0


@pytest.mark.parametrize("n", [8, 64, 200])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_gemm_extras_are_checked_alike_at_every_size_and_dtype(tiny_db, n, dtype):
    """One check of the BLAS-style extras on every path (the C hot path's shapes remembered first):
    c's shape whenever c is given (even with beta 0), alpha/beta scalar numbers (a string, array or
    None is a TypeError), and numpy's result dtype and values for ``alpha * (a @ b) + beta * c``."""
    a = np.arange(n * n, dtype=dtype).reshape(n, n) % 7
    with autotune.options(db=str(tiny_db)):
        for _ in range(3):
            np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
        with pytest.raises(ValueError, match="c has shape"):
            tuned_gemm(a, a, c=np.ones((3, 3)), beta=0.0)
        for bad in ({"alpha": "2"}, {"beta": "1"}, {"alpha": [2.0, 3.0]}, {"alpha": np.array([1.0, 2.0])},
                    {"alpha": np.array([1.0])}, {"beta": np.zeros(2)}, {"alpha": None}):
            with pytest.raises(TypeError, match="must be a number"):
                tuned_gemm(a, a, **bad)
        c = np.ones((n, n), dtype=dtype)
        for alpha, beta, cc in [(2j, 0.0, None), (2, 0.5, c), (np.float64(1.0), 0.0, None), (np.float32(2), 1.0, c),
                                (1.0, 0.5, c.astype(complex)), (np.longdouble(2), 1.0, c), (2.0, 1.0, c.tolist())]:
            got = tuned_gemm(a, a, alpha=alpha, beta=beta, c=cc, trans_b=True)
            want = (a @ a.T) * alpha if alpha != 1 else a @ a.T
            want = want + beta * np.asarray(cc) if beta != 0 else want
            assert got.dtype == want.dtype, (alpha, beta, got.dtype, want.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_outputs_from_the_block_cache_do_not_own_their_memory_as_documented(tiny_db):
    """README and the tuned calls' docstrings: a tuned output from the reused blocks does not own its
    memory, so ``resize`` raises ValueError; ``np.array`` of it is an owning copy."""
    rng = np.random.default_rng(5)
    g = rng.standard_normal((200, 200))
    with autotune.options(db=str(tiny_db)):
        outs = {"gemm": tuned_gemm(g, g), "cholesky": tuned_cholesky(g @ g.T + 200 * np.eye(200)),
                "lu_factor": autotune.tuned_lu_factor(g)[0], "solve": autotune.tuned_solve(g, g[:, :3]),
                "lu_solve": autotune.tuned_lu_solve(sl.lu_factor(g), g[:, :3])}
    for name, x in outs.items():
        assert not x.flags.owndata, name
        with pytest.raises(ValueError):
            x.resize((10,), refcheck=False)
        y = np.array(x)
        y.resize((10,), refcheck=False)
        assert y.shape == (10,)
        assert "resize" in getattr(autotune, f"tuned_{name}").__doc__, name
