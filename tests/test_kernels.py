"""Compute kernels: Cholesky drivers of the BLAS tables and the Strassen kernel."""
# ruff's isort takes autotune.kernels (source folder kernels/) for third-party: keep it with autotune
from __future__ import annotations  # noqa: I001

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import scipy.linalg as sla
from scipy.linalg import lapack

from autotune import backends as bk
from autotune.kernels.strassen import effective_levels, strassen, strassen_error_bound, strassen_workspace_elems

CHOL_BACKENDS = ["numpy-openblas", "scipy-openblas", "mkl"]
GEMM_BACKENDS = ["numpy-openblas", "scipy-openblas"]
DRIVERS = ("potrf_blocked", "potrf_gemv", "potrf_axpy")
SIZES = (0, 1, 2, 7, 64, 100, 257)
BLOCKS = (1, 3, 32, 64, 300)


def _backend(name: str):
    try:
        return bk.get(name)
    except bk.BackendUnavailable as exc:
        pytest.skip(str(exc))


def _spd(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, n))
    return np.asfortranarray(x @ x.T + n * np.eye(n))


def _calls(be):
    """(label, callable(a, lower) -> info) for every driver configuration under test."""
    out = [(f"blocked nb={nb} v={v}", lambda a, lo, nb=nb, v=v: be.ops["potrf_blocked"](a, nb, lo, v))
           for nb in BLOCKS for v in (0, 1)]
    out.append(("gemv", lambda a, lo: be.ops["potrf_gemv"](a, lo)))
    out.append(("axpy", lambda a, lo: be.ops["potrf_axpy"](a, lo)))
    return out


# ---------------------------------------------------------------------------- Cholesky drivers


@pytest.mark.parametrize("name", CHOL_BACKENDS)
def test_backends_expose_cholesky_drivers(name):
    be = _backend(name)
    for d in DRIVERS:
        assert callable(be.ops[d])
    assert not set(DRIVERS) & set(be.routines)  # ALL_ROUTINES (what the probe measures) unchanged


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("name", CHOL_BACKENDS)
def test_cholesky_drivers_match_lapack(name, lower):
    be = _backend(name)
    for n in SIZES:
        a0 = _spd(n, seed=n)
        ref = sla.cholesky(a0, lower=lower) if n else a0
        other = np.triu(a0, 1) if lower else np.tril(a0, -1)
        for label, call in _calls(be):
            a = a0.copy(order="F")
            assert call(a, lower) == 0, (n, label)
            got = np.tril(a) if lower else np.triu(a)
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * max(n, 1), err_msg=f"n={n} {label}")
            # the other triangle is neither used nor touched
            assert np.array_equal(np.triu(a, 1) if lower else np.tril(a, -1), other), (n, label)


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("name", ["numpy-openblas", "scipy-openblas"])
def test_cholesky_drivers_only_read_their_triangle(name, lower):
    be = _backend(name)
    n = 50
    a0 = _spd(n, seed=3)
    junk = np.where(np.tri(n, k=-1, dtype=bool).T if lower else np.tri(n, k=-1, dtype=bool), np.nan, a0)
    ref = sla.cholesky(a0, lower=lower)
    for label, call in _calls(be):
        a = np.asfortranarray(junk.copy())
        assert call(a, lower) == 0, label
        np.testing.assert_allclose(np.tril(a) if lower else np.triu(a), ref, rtol=1e-12, atol=1e-11,
                                   err_msg=label)


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("name", ["numpy-openblas", "scipy-openblas"])
def test_cholesky_drivers_on_submatrix_views(name, lower):
    """Leading dimension larger than n and an offset start: only the view is read and written."""
    be = _backend(name)
    n = 37
    a0 = _spd(n, seed=5)
    ref = sla.cholesky(a0, lower=lower)
    for label, call in _calls(be):
        big = np.asfortranarray(np.random.default_rng(1).standard_normal((n + 6, n + 4)))
        before = big.copy()
        view = big[2:2 + n, 3:3 + n]
        view[...] = a0
        assert call(view, lower) == 0, label
        np.testing.assert_allclose(np.tril(view) if lower else np.triu(view), ref, rtol=1e-12, atol=1e-11,
                                   err_msg=label)
        mask = np.ones(big.shape, bool)
        mask[2:2 + n, 3:3 + n] = False
        assert np.array_equal(big[mask], before[mask]), label


def _not_pd(n: int, j: int) -> np.ndarray:
    """SPD except that the leading minor of order j+1 is not positive definite."""
    a = _spd(n, seed=j)
    a[j, j] -= 4.0 * n * n  # Schur complement at j becomes negative; leading j x j block stays SPD
    return a


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("name", CHOL_BACKENDS)
def test_cholesky_drivers_report_lapack_info(name, lower):
    be = _backend(name)
    n = 70
    for j in (0, 1, 31, 32, 33, 64, 69):
        a0 = _not_pd(n, j)
        _, expected = lapack.dpotrf(a0, lower=lower, clean=False)
        assert expected == j + 1
        for label, call in _calls(be):
            assert call(a0.copy(order="F"), lower) == expected, (j, label)
    # NaN on the diagonal: the unblocked drivers test like reference LAPACK (ajj <= 0 or NaN);
    # the blocked one inherits the library's potf2 (OpenBLAS lets NaN through, MKL does not)
    nan = _spd(5)
    nan[2, 2] = np.nan
    for label, call in _calls(be)[-2:]:
        assert call(nan.copy(order="F"), lower) == 3, label


@pytest.mark.parametrize("name", ["numpy-openblas", "scipy-openblas"])
def test_cholesky_drivers_reject_bad_input(name):
    be = _backend(name)
    with pytest.raises(ValueError):
        be.ops["potrf_blocked"](np.zeros((3, 4), order="F"), 2)
    with pytest.raises(ValueError):
        be.ops["potrf_blocked"](_spd(4), 0)
    with pytest.raises(ValueError):
        be.ops["potrf_blocked"](_spd(4), 2, True, 2)
    for d in ("potrf_gemv", "potrf_axpy"):
        with pytest.raises(ValueError):
            be.ops[d](np.ascontiguousarray(_spd(4)))
        with pytest.raises(ValueError):
            be.ops[d](np.zeros((3, 4), order="F"))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n", [1, 2, 9, 64])
def test_axpy_trail_is_one_step_of_the_axpy_driver(n, lower):
    """The probe's trail pattern times exactly the first step of potrf_axpy: pivot, scale, update."""
    be = _backend("numpy-openblas")
    a = _spd(n)
    step = a.copy(order="F")
    assert be.ops["axpy_trail"](step, lower) == 0
    want = a.copy(order="F")
    piv = np.sqrt(want[0, 0])
    if lower:
        col = want[1:, 0] / piv
        want[1:, 1:] -= np.tril(np.outer(col, col))
        want[1:, 0] = col
    else:
        row = want[0, 1:] / piv
        want[1:, 1:] -= np.triu(np.outer(row, row))
        want[0, 1:] = row
    want[0, 0] = piv
    tri = np.tril if lower else np.triu
    np.testing.assert_allclose(tri(step), tri(want), rtol=1e-12, atol=1e-12)
    bad = -_spd(n)
    assert be.ops["axpy_trail"](bad, lower) == 1
    with pytest.raises(ValueError):
        be.ops["axpy_trail"](np.zeros((2, 3), order="F"))


# ---------------------------------------------------------------------------- Strassen

SHAPES = [(1, 1, 1), (1, 6, 1), (1, 7, 9), (8, 8, 8), (9, 9, 9), (31, 31, 31), (64, 64, 64),
          (65, 33, 17), (100, 200, 50), (33, 1, 40), (2, 3, 2)]


def _mats(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return np.asfortranarray(rng.standard_normal((m, k))), np.asfortranarray(rng.standard_normal((k, n)))


@pytest.mark.parametrize("name", GEMM_BACKENDS)
def test_strassen_matches_matmul(name):
    gemm = _backend(name).ops["gemm"]
    for m, k, n in SHAPES:
        a, b = _mats(m, k, n, seed=m + k + n)
        ref = a @ b
        for levels in range(5):
            c = np.full((m, n), np.nan, order="F")
            assert strassen(a, b, c, levels, gemm) is c
            np.testing.assert_allclose(c, ref, rtol=0, atol=1e-12 * max(k, 1) * 4 ** levels,
                                       err_msg=f"{m}x{k}x{n} levels={levels}")


def test_strassen_on_views_and_given_workspace():
    gemm = _backend("scipy-openblas").ops["gemm"]
    m, k, n, levels = 45, 38, 29, 3
    big_a, big_b = _mats(m + 7, k + 5, k + 3, seed=7)[0], _mats(k + 9, n + 4, 1, seed=8)[0]
    a, b = big_a[3:3 + m, 2:2 + k], big_b[4:4 + k, 1:1 + n]
    big_c = np.asfortranarray(np.random.default_rng(9).standard_normal((m + 10, n + 6)))
    before = big_c.copy()
    c = big_c[5:5 + m, 2:2 + n]
    need = strassen_workspace_elems(m, k, n, levels)
    assert need == sum(x * y + y * z + x * z for x, y, z in [(22, 19, 14), (11, 9, 7), (5, 4, 3)])
    strassen(a, b, c, levels, gemm, work=np.empty(need + 3))
    np.testing.assert_allclose(c, a @ b, rtol=0, atol=1e-11)
    mask = np.ones(big_c.shape, bool)
    mask[5:5 + m, 2:2 + n] = False
    assert np.array_equal(big_c[mask], before[mask])
    with pytest.raises(ValueError):
        strassen(a, b, c, levels, gemm, work=np.empty(need - 1))


def test_strassen_uses_seven_products_per_level():
    calls = []
    gemm = _backend("scipy-openblas").ops["gemm"]

    def counting(alpha, a, b, beta, c):
        calls.append((a.shape, b.shape, beta))
        gemm(alpha, a, b, beta, c)

    a, b = _mats(16, 16, 16)
    for levels in range(4):
        calls.clear()
        c = np.empty((16, 16), order="F")
        strassen(a, b, c, levels, counting)
        assert len(calls) == 7 ** levels
        assert {s for s, _, _ in calls} == {(16 >> levels, 16 >> levels)}
        np.testing.assert_allclose(c, a @ b, atol=1e-12)


def test_strassen_depth_degrades_gracefully():
    assert effective_levels(8, 8, 8, 10) == 3
    assert effective_levels(65, 33, 17, 4) == 4
    assert effective_levels(100, 1, 100, 3) == 0
    assert effective_levels(64, 64, 64, 5, min_dim=16) == 3  # 64, 32, 16 recurse
    assert strassen_workspace_elems(1, 5, 1, 3) == 0
    gemm = _backend("scipy-openblas").ops["gemm"]
    a, b = _mats(64, 64, 64)
    c = np.empty((64, 64), order="F")
    strassen(a, b, c, 9, gemm, min_dim=16)
    np.testing.assert_allclose(c, a @ b, atol=1e-12)


def test_strassen_edge_cases_and_errors():
    gemm = _backend("scipy-openblas").ops["gemm"]
    c = np.ones((3, 4), order="F")
    strassen(np.zeros((3, 0), order="F"), np.zeros((0, 4), order="F"), c, 2, gemm)
    assert not c.any()
    strassen(np.zeros((0, 5), order="F"), np.zeros((5, 4), order="F"), np.zeros((0, 4), order="F"), 2, gemm)
    a, b = _mats(4, 4, 4)
    with pytest.raises(ValueError):
        strassen(a, b, np.empty((4, 5), order="F"), 1, gemm)
    with pytest.raises(ValueError):
        strassen(np.ascontiguousarray(a), b, np.empty((4, 4), order="F"), 1, gemm)
    with pytest.raises(ValueError):
        strassen(a, b, a, 1, gemm)
    with pytest.raises(ValueError):
        strassen(a, b, np.empty((4, 4), order="F"), -1, gemm)


def test_strassen_error_bound_formula():
    u = 2.0 ** -53
    assert strassen_error_bound(256, 0) == pytest.approx(256 ** 2 * u)
    n, n0 = 256, 256 / 8
    assert strassen_error_bound(n, 3) == pytest.approx(((n0 ** 2 + 5 * n0) * 12 ** 3 - 5 * n) * u)


def test_strassen_error_obeys_higham_bound():
    """max|C - Ĉ| <= ((n0^2 + 5 n0) 12^l - 5 n) u max|A| max|B|, and l = 4 loses accuracy vs gemm."""
    gemm = _backend("scipy-openblas").ops["gemm"]
    n = 128
    rng = np.random.default_rng(1)
    a, b = np.asfortranarray(rng.random((n, n))), np.asfortranarray(rng.random((n, n)))
    exact = a.astype(np.longdouble) @ b.astype(np.longdouble)
    scale = np.abs(a).max() * np.abs(b).max()
    errs = []
    for levels in range(5):
        c = np.empty((n, n), order="F")
        strassen(a, b, c, levels, gemm)
        err = float(np.abs(c - exact).max())
        assert err <= strassen_error_bound(n, levels) * scale, levels
        errs.append(err)
    assert errs[4] > 2 * errs[0]


@pytest.mark.parametrize("shape, order",
                         [((3, 5), "C"), ((3, 5), "F"), ((7,), "C"), (9, "F"), (np.int64(6), "C"),
                          ((0, 4), "F"), ((4, 0), "C")])
def test_aligned_empty_is_numpy_empty_on_a_cache_line(shape, order):
    """Outputs the library writes start on a 64-byte boundary (2-thread OpenBLAS is 5-12% slower
    otherwise), and are otherwise what ``numpy.empty`` gives: float64, writable, asked memory order."""
    import gc

    from autotune.kernels._front import aligned_empty

    x = aligned_empty(shape, order)
    ref = np.empty(shape, order=order)
    assert x.shape == ref.shape and x.dtype == np.float64 and (x.strides == ref.strides or x.size == 0)
    assert x.ctypes.data % 64 == 0 and x.flags.writeable and x.flags[f"{order}_CONTIGUOUS"]
    x[...] = 1.5
    gc.collect()                                   # the byte buffer lives as long as the view
    assert (x == 1.5).all()


@pytest.mark.parametrize("shape, order", [((2, 3, 4), "C"), ((-1, 2), "C"), ((2, 2), "K")])
def test_aligned_empty_rejects_what_it_cannot_make(shape, order):
    from autotune.kernels._front import aligned_empty

    with pytest.raises(ValueError, match="aligned_empty"):
        aligned_empty(shape, order)


@pytest.mark.parametrize("order", "CF")
def test_aligned_copy_is_numpy_array_on_a_cache_line(order):
    from autotune.kernels._front import aligned_copy

    x = np.arange(12).reshape(3, 4)
    y = aligned_copy(x, order)
    np.testing.assert_array_equal(y, np.array(x, dtype=np.float64, order=order))
    assert y.dtype == np.float64 and y.flags[f"{order}_CONTIGUOUS"] and y.ctypes.data % 64 == 0
    assert not np.shares_memory(x, y)


@given(m=st.integers(0, 13), n=st.integers(0, 13), order=st.sampled_from("CF"),
       bad=st.sampled_from([np.nan, np.inf, -np.inf]), where=st.floats(0, 1, exclude_max=True))
@settings(max_examples=60, deadline=None)
def test_fortran_copy_is_a_checked_fortran_copy(m, n, order, bad, where):
    """The tuned LU's one-pass copy: numpy's Fortran-ordered copy on a cache line, and None when
    ``check_finite`` meets inf/NaN anywhere (strips and the remainder columns alike)."""
    from autotune.kernels._front import fortran_copy

    x = np.asarray(np.arange(m * n, dtype=np.float64).reshape(m, n), order=order)
    y = fortran_copy(x, True)
    np.testing.assert_array_equal(y, x)
    assert y.flags.f_contiguous and y.ctypes.data % 64 == 0 and not np.shares_memory(x, y)
    if m * n:
        x[np.unravel_index(int(where * m * n), x.shape)] = bad
        assert fortran_copy(x, True) is None
        np.testing.assert_array_equal(fortran_copy(x, False), x)
