"""Routines, patterns and builders agree; every available backend computes what numpy/scipy do."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg as sla
from autotune.install_probe.operands import _BUILDERS, build

from autotune import backends as bk
from autotune.backends import Backend
from autotune.core.routines import PATTERNS, ROUTINES, dims_of, flops, flops_of

AVAILABLE = bk.available()
CASES = [(name, r) for name in AVAILABLE for r in bk.get(name).routines]
PARAM = {"square": 0.0, "view": 0.0, "panel": 8.0, "u12": 8.0, "stripe": 4.0, "segment": 0.375, "rankb": 8.0,
         "trail": 0.0, "dispatch": 0.0, "rhs": 3.0, "interior": 0.0, "rows": 2.0, "cols": 2.0,
         "levels": 4.0, "copy": 0.0, "triad": 0.0, "tn": 0.0, "nt": 0.0, "tt": 0.0, "upper": 0.0}
# Builders that time a whole tuned call on purpose (through the API, not a driver's operands).
WHOLE_CALLS = {("gemm", "dispatch")}


# -- routines, patterns, builders --------------------------------------------------------------------

def test_patterns_and_builders_match():
    uses = {(r, p) for p, pat in PATTERNS.items() for r in pat.shapes}
    assert uses == set(_BUILDERS)
    assert {r for r, _ in uses} == set(ROUTINES)
    assert set(bk.ALL_ROUTINES) == set(ROUTINES)


@pytest.mark.parametrize(("routine", "dims", "expected"), [
    ("gemm", {"m": 3, "n": 4, "k": 5}, 2 * 3 * 4 * 5),
    ("gemm", {"m": 100, "n": 1, "k": 7}, 2 * 100 * 7),
    ("syrk", {"n": 4, "k": 3}, 4 * 5 * 3),
    ("trsm", {"m": 3, "n": 4}, 3 * 16),
    ("gemv", {"m": 6, "n": 7}, 2 * 42),
    ("axpy", {"n": 1000}, 2000),
    ("add", {"m": 5, "n": 9}, 45),
    ("potrf", {"n": 3}, 27 / 3 + 9 / 2 + 3 / 6),
    ("potf2", {"n": 6}, 216 / 3 + 36 / 2 + 1),
    ("getrf", {"n": 3}, 18 - 4.5 + 2.5),
    ("getrf", {"n": 12}, 2 * 1728 / 3 - 144 / 2 + 10),
])
def test_flop_counts(routine, dims, expected):
    assert flops(routine, dims) == pytest.approx(expected)


def test_pattern_dims():
    assert dims_of("gemm", "square", 10) == {"m": 10, "n": 10, "k": 10}
    assert dims_of("gemm", "panel", 100, 8) == {"m": 100, "n": 8, "k": 8}
    assert dims_of("trsm", "panel", 100, 8) == {"m": 100, "n": 8}
    assert dims_of("syrk", "panel", 100, 8) == {"n": 100, "k": 8}
    assert dims_of("gemm", "stripe", 100, 4) == {"m": 25, "n": 100, "k": 100}
    assert dims_of("gemv", "segment", 80, 0.25) == {"m": 60, "n": 20}
    assert dims_of("add", "view", 7) == {"m": 7, "n": 7}
    assert flops_of("gemm", "panel", 100, 8)[0] == 2 * 100 * 8 * 8
    np.testing.assert_allclose(flops_of("gemm", "square", [2, 4, 8]), [16, 128, 1024])
    assert flops_of("axpy", "square", 5).shape == (1,)
    with pytest.raises(ValueError, match="no access pattern"):
        dims_of("axpy", "panel", 10, 4)
    with pytest.raises(ValueError, match="no access pattern"):
        dims_of("gemm", "zigzag", 10)
    with pytest.raises(ValueError, match="positive"):
        dims_of("gemm", "square", 0)
    assert dims_of("gemm", "rankb", 100, 8) == {"m": 100, "n": 100, "k": 8}
    assert dims_of("getrs", "rhs", 100, 16) == {"n": 100, "nrhs": 16}
    assert flops_of("getrs", "rhs", 100, 16)[0] == 2 * 100 * 100 * 16
    with_param = ("panel", "u12", "stripe", "segment", "rankb", "rhs", "rows", "cols", "levels")
    assert dims_of("trsm", "u12", 100, 8) == {"m": 100, "n": 8}       # b x x block row: x b^2 flops
    assert dims_of("stencil", "rows", 100, 2) == {"m": 2, "n": 100}
    assert dims_of("stencil", "cols", 100, 2) == {"m": 100, "n": 2}
    assert flops_of("stencil", "interior", 10)[0] == 9 * 100
    assert flops_of("stencil", "levels", 10, 4)[0] == 4 * 9 * 100      # four fused steps
    assert all(p.needs_param == (name in with_param) for name, p in PATTERNS.items())


def _recorder(calls, routine):
    def op(*args, **kwargs):
        calls.append((routine, args, kwargs))
    return op


def _dims_from_call(routine, args, kwargs) -> dict:
    """The routine's dims as read off the operands it was actually given."""
    if routine == "gemm":
        a, c = args[1], args[4]
        return {"m": c.shape[0], "n": c.shape[1], "k": a.shape[0] if kwargs.get("trans_a") else a.shape[1]}
    if routine == "syrk":
        return {"n": args[3].shape[0], "k": args[1].shape[1]}
    if routine == "trsm":                          # trsm(alpha, a, b, right=True, ...): a's side of b
        right = args[3] if len(args) > 3 else kwargs.get("right", True)
        tri, rhs = args[1].shape[0], args[2].shape[1 if right else 0]
        assert args[1].shape[0] == args[1].shape[1] == rhs
        return {"m": args[2].shape[0 if right else 1], "n": tri}
    if routine == "gemv":
        return {"m": args[1].shape[0], "n": args[1].shape[1]}
    if routine == "axpy_trail":                    # one outer-product step on an x-by-x matrix
        x = args[0].shape[0]
        return {"n": max(1, x * (x - 1) // 2)}
    if routine == "axpy":
        return {"n": args[1].shape[0]}
    if routine == "add":
        return {"m": args[2].shape[0], "n": args[2].shape[1]}
    if routine == "stream":                        # stream(a, b[, c]): the arrays it streams
        return {"n": args[0].size, "streams": len(args)}
    if routine == "stencil":                       # stencil(src, dst, w, r0, r1, c0, c1, levels): row-major tiles
        return {"m": args[4] - args[3], "n": args[6] - args[5], "levels": args[7]}
    if routine == "getrs":                         # getrs(lu, ipiv, b): b holds the right-hand sides
        return {"n": args[0].shape[0], "nrhs": args[2].shape[1]}
    if routine == "getrf":                         # an m x n panel (m >= n), or square
        return {"m": args[0].shape[0], "n": args[0].shape[1]}
    if routine == "laswp":                         # laswp(a, ipiv): one interchange per pivot, on every column
        return {"n": args[0].shape[1], "k": args[1].shape[0]}
    return {"n": args[0].shape[0]}


@pytest.mark.parametrize(("routine", "pattern"), sorted(set(_BUILDERS) - WHOLE_CALLS))
def test_builders_give_operands_of_the_pattern(routine, pattern):
    calls = []
    driver = PATTERNS[pattern].driver(routine)
    fake = Backend("fake", {r: _recorder(calls, r) for r in (*bk.ALL_ROUTINES, driver)}, {}, int_dtype="int64")
    for x in (1, 17, 40):
        calls.clear()
        call = build(fake, routine, pattern, x, PARAM[pattern], np.random.default_rng(0))
        call.run(2)
        if call.restore is not None:
            call.restore()
        assert len(calls) == 2 and calls[0][0] == driver
        _, args, kwargs = calls[0]
        expected = dims_of(routine, pattern, x, PARAM[pattern])
        assert flops(routine, _dims_from_call(driver, args, kwargs)) == flops(routine, expected)
        for arr in (a for a in args if isinstance(a, np.ndarray) and a.ndim == 2 and routine != "stencil"):
            assert arr.shape[0] <= 1 or arr.strides[0] == arr.itemsize, "operand not column-major"
            assert arr.dtype == np.float64


def test_dispatch_builder_times_a_whole_tuned_call(monkeypatch):
    """The dispatch pattern times what a user's call costs: tuned_gemm on C-ordered x-by-x
    operands, forced onto the probed backend at its current thread count."""
    import autotune

    seen = []
    monkeypatch.setattr(autotune, "tuned_gemm", lambda a, b, **kw: seen.append((a, b, kw)))
    be = bk.get("scipy-openblas")
    call = build(be, "gemm", "dispatch", 17, 0.0, np.random.default_rng(0))
    assert call.whole and call.restore is None
    call.run(3)
    assert len(seen) == 3
    a, b, kw = seen[0]
    assert a.shape == b.shape == kw["out"].shape == (17, 17) and a.flags.c_contiguous and b.flags.c_contiguous
    assert kw["config"].backend == "scipy-openblas" and kw["config"].algorithm == "blas"
    assert flops("gemm", dims_of("gemm", "dispatch", 17)) == 2 * 17 ** 3


@pytest.mark.parametrize(("routine", "pattern"), sorted(_BUILDERS))
def test_builders_run_on_a_real_backend(routine, pattern):
    name = {"stencil": "numba-wavefront" if pattern == "levels" else "numba-stencil",
            "stream": "numba-stencil"}.get(routine, "scipy-openblas")
    call = build(bk.get(name), routine, pattern, 24, PARAM[pattern], np.random.default_rng(1))
    for _ in range(2):
        if call.restore is not None:
            call.restore()
        result = call.run(1)
        if routine in ("potrf", "potf2", "getrf"):
            assert result == 0
    call.run(3) if call.restore is None else None


# -- numerical agreement ---------------------------------------------------------------------------

def fview(rng, m, n, *, pad=(2, 3)):
    """An m x n column-major strided view inside a larger Fortran matrix, plus the parent."""
    r0, c0 = pad
    parent = np.asfortranarray(rng.standard_normal((m + r0 + 4, n + c0 + 5)))
    return parent[r0:r0 + m, c0:c0 + n], parent


def unchanged_outside(parent, before, view_slices):
    mask = np.ones(parent.shape, dtype=bool)
    mask[view_slices] = False
    return np.array_equal(parent[mask], before[mask])


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def check_gemm(be, rng):
    # the brief's example: P[2:30, 3:20] of a Fortran P
    p = np.asfortranarray(rng.standard_normal((40, 30)))
    c = p[2:30, 3:20]
    assert c.shape == (28, 17) and not c.flags.f_contiguous
    for ta in (False, True):
        for tb in (False, True):
            a, _ = fview(rng, *((9, 28) if ta else (28, 9)))
            b, _ = fview(rng, *((17, 9) if tb else (9, 17)))
            before = p.copy(order="F")
            c0 = c.copy()
            be.gemm(0.5, a, b, -2.0, c, trans_a=ta, trans_b=tb)
            expected = 0.5 * (a.T if ta else a) @ (b.T if tb else b) - 2.0 * c0
            where = f"{be.name} gemm trans_a={ta} trans_b={tb} (c = P[2:30, 3:20])"
            np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12, err_msg=where)
            assert unchanged_outside(p, before, (slice(2, 30), slice(3, 20)))
    # plain contiguous Fortran arrays too
    a, b = np.asfortranarray(rng.random((5, 3))), np.asfortranarray(rng.random((3, 4)))
    c = np.zeros((5, 4), order="F")
    be.gemm(1.0, a, b, 0.0, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def check_syrk(be, rng):
    for lower in (True, False):
        for trans in (False, True):
            a, _ = fview(rng, *((6, 11) if trans else (11, 6)))
            c, parent = fview(rng, 11, 11)
            c0, before = c.copy(), parent.copy(order="F")
            be.syrk(0.75, a, 0.5, c, lower=lower, trans=trans)
            full = 0.75 * ((a.T @ a) if trans else (a @ a.T)) + 0.5 * c0
            tri = np.tril if lower else np.triu
            other = np.triu if lower else np.tril
            np.testing.assert_allclose(tri(c), tri(full), rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(other(c, 1 if lower else -1), other(c0, 1 if lower else -1))
            assert unchanged_outside(parent, before, (slice(2, 13), slice(3, 14)))


def check_trsm(be, rng):
    for right in (True, False):
        for lower in (True, False):
            for trans_a in (True, False):
                for unit in (False, True):
                    n = 7
                    a, _ = fview(rng, n, n)
                    a[np.diag_indices(n)] = 4.0 + np.arange(n)  # well conditioned
                    b, parent = fview(rng, *((9, n) if right else (n, 9)))
                    b0, before = b.copy(), parent.copy(order="F")
                    be.trsm(2.0, a, b, right=right, lower=lower, trans_a=trans_a, unit=unit)
                    t = np.tril(a) if lower else np.triu(a)
                    if unit:
                        t[np.diag_indices(n)] = 1.0
                    op = t.T if trans_a else t
                    expected = 2.0 * (sla.solve(op.T, b0.T).T if right else sla.solve(op, b0))
                    np.testing.assert_allclose(b, expected, rtol=1e-10, atol=1e-12)
                    assert unchanged_outside(parent, before, (slice(2, 2 + b.shape[0]),
                                                              slice(3, 3 + b.shape[1])))


def check_gemv(be, rng):
    for trans in (False, True):
        a, parent = fview(rng, 13, 8)
        # x: a row of a Fortran matrix (stride = leading dimension); y: every third element
        x = parent[0, :13] if trans else parent[0, :8]
        x = x.copy() if trans else x  # a row of the same parent must not alias the output
        ybuf = rng.standard_normal(3 * (8 if trans else 13))
        y = ybuf[::3]
        y0, ybuf0 = y.copy(), ybuf.copy()
        be.gemv(1.5, a, x, -0.5, y, trans=trans)
        expected = 1.5 * ((a.T if trans else a) @ x) - 0.5 * y0
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
        mask = np.ones(ybuf.shape, bool)
        mask[::3] = False
        np.testing.assert_array_equal(ybuf[mask], ybuf0[mask])


def check_axpy(be, rng):
    xb, yb = rng.standard_normal(40), rng.standard_normal(60)
    x, y = xb[::2], yb[1::3]
    y0, yb0 = y.copy(), yb.copy()
    be.axpy(-0.25, x, y)
    np.testing.assert_allclose(y, y0 - 0.25 * x, rtol=1e-14)
    mask = np.ones(60, bool)
    mask[1::3] = False
    np.testing.assert_array_equal(yb[mask], yb0[mask])
    x, y = rng.standard_normal(7), rng.standard_normal(7)
    y0 = y.copy()
    be.axpy(3.0, x, y)
    np.testing.assert_allclose(y, y0 + 3.0 * x, rtol=1e-14)
    if be.native_repeat:
        y0 = y.copy()
        be.axpy(0.5, x, y, repeat=3)
        np.testing.assert_allclose(y, y0 + 1.5 * x, rtol=1e-13)


def check_add(be, rng):
    p = np.asfortranarray(rng.standard_normal((24, 24)))
    a, b = p[:12, :12], p[12:, 12:]
    q = np.asfortranarray(rng.standard_normal((24, 24)))
    c = q[12:, :12]
    qb = q.copy(order="F")
    be.add(a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-14)
    assert unchanged_outside(q, qb, (slice(12, 24), slice(0, 12)))
    be.add(a, b, c, 2.0)
    np.testing.assert_allclose(c, a + 2.0 * b, rtol=1e-14)
    be.add(a, b, c, beta=-1.0)
    np.testing.assert_allclose(c, a - b, rtol=1e-14)


def _spd(rng, n):
    a, parent = fview(rng, n, n)
    m = rng.standard_normal((n, n))
    a[...] = m @ m.T + n * np.eye(n)
    return a, parent


def check_chol(name):
    def check(be, rng):
        fn = getattr(be, name)
        for lower in (True, False):
            a, _ = _spd(rng, 10)
            a0 = a.copy()
            assert fn(a, lower=lower) == 0
            ref = np.linalg.cholesky(a0)
            if lower:
                np.testing.assert_allclose(np.tril(a), ref, rtol=1e-10, atol=1e-12)
                np.testing.assert_array_equal(np.triu(a, 1), np.triu(a0, 1))
            else:
                np.testing.assert_allclose(np.triu(a), ref.T, rtol=1e-10, atol=1e-12)
                np.testing.assert_array_equal(np.tril(a, -1), np.tril(a0, -1))
        bad = np.asfortranarray(-np.eye(4))
        assert fn(bad) > 0  # not positive definite: LAPACK's info, no exception
    return check


def check_getrs(be, rng):
    a = np.asfortranarray(rng.standard_normal((9, 9)))
    lu, ipiv = a.copy(order="F"), np.zeros(9, dtype=be.int_dtype)
    assert be.getrf(lu, ipiv) == 0
    b, parent = fview(rng, 9, 3)
    b0, before = b.copy(), parent.copy(order="F")
    assert be.getrs(lu, ipiv, b, 0) == 0
    np.testing.assert_allclose(a @ b, b0, rtol=1e-10, atol=1e-10)
    assert unchanged_outside(parent, before, (slice(2, 11), slice(3, 6)))


def check_getrf(be, rng):
    a, parent = fview(rng, 9, 9)
    a0, before = a.copy(), parent.copy(order="F")
    ipiv = np.zeros(9, dtype=be.int_dtype)
    assert be.getrf(a, ipiv) == 0
    lu, piv = sla.lu_factor(a0)
    np.testing.assert_allclose(a, lu, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(ipiv, piv + 1)  # LAPACK pivots are 1-based
    assert unchanged_outside(parent, before, (slice(2, 11), slice(3, 12)))


def check_laswp(be, rng):
    a, parent = fview(rng, 9, 5)
    a0, before = a.copy(), parent.copy(order="F")
    ipiv = np.array([3, 2, 9, 4], dtype=be.int_dtype)       # 1-based, each row with one at or below it
    be.laswp(a, ipiv)
    want = a0.copy()
    for i, p in enumerate(ipiv - 1):
        want[[i, p]] = want[[p, i]]
    np.testing.assert_array_equal(a, want)
    assert unchanged_outside(parent, before, (slice(2, 11), slice(3, 8)))
    if "getrf_blocked" in be.ops:                          # the blocked LU driver: LAPACK's factors
        m = np.asfortranarray(rng.standard_normal((37, 37)))
        lu, piv = sla.lu_factor(m)
        for nb in (1, 5, 16, 64):
            x, ip = m.copy(order="F"), np.zeros(37, dtype=be.int_dtype)
            assert be.getrf_blocked(x, ip, nb) == 0
            np.testing.assert_allclose(x, lu, rtol=1e-10, atol=1e-12)
            np.testing.assert_array_equal(ip, piv + 1)


def check_stencil(be, rng):
    """The 5-point sweep over a rectangle equals numpy's, and nothing outside it is written."""
    src = rng.random((9, 11))
    dst = np.zeros_like(src)
    w = np.array([0.2, 0.1, 0.3, 0.15, 0.25])
    be.stencil(src, dst, w, 2, 7, 1, 9)
    want = (w[0] * src[2:7, 1:9] + w[1] * src[1:6, 1:9] + w[2] * src[3:8, 1:9] + w[3] * src[2:7, 0:8]
            + w[4] * src[2:7, 2:10])
    np.testing.assert_allclose(dst[2:7, 1:9], want, rtol=1e-14)
    dst[2:7, 1:9] = 0.0
    assert not dst.any()


def check_stream(be, rng):
    """Copy and triad equal numpy's."""
    a, b, c = rng.random(37), rng.random(37), rng.random(37)
    out = np.zeros(37)
    be.stream(a, out)
    np.testing.assert_array_equal(out, a)
    want = b + 3.0 * c
    be.stream(a, b, c)
    np.testing.assert_allclose(a, want, rtol=1e-15)


CHECKS = {"laswp": check_laswp, "stencil": check_stencil, "stream": check_stream,
          "gemm": check_gemm, "syrk": check_syrk, "trsm": check_trsm, "gemv": check_gemv,
          "axpy": check_axpy, "add": check_add, "potrf": check_chol("potrf"),
          "potf2": check_chol("potf2"), "getrf": check_getrf, "getrs": check_getrs}


def test_backends_found():
    assert {"numpy-openblas", "scipy-openblas"} <= set(AVAILABLE)
    assert set(CHECKS) == set(bk.ALL_ROUTINES)


# Adapters over third-party Python packages (not our BLAS tables) run in a child process: a
# wrong dimension passed down there can write out of bounds and crash the whole test session.
ISOLATED = {"blis"}

CHILD = """
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("backend_checks", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.CHECKS[sys.argv[3]](mod.bk.get(sys.argv[2]), np.random.default_rng(12345))
print("ok")
"""


@pytest.mark.parametrize(("name", "routine"), CASES)
def test_backend_matches_numpy(name, routine, rng):
    be = bk.get(name)
    assert be.supports(routine)
    if name not in ISOLATED:
        CHECKS[routine](be, rng)
        return
    proc = subprocess.run([sys.executable, "-c", CHILD, __file__, name, routine],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"{name}.{routine} check failed in a child process (exit code {proc.returncode}):\n"
        + proc.stderr[-3000:])


def _is_blas_table(be: Backend) -> bool:
    from autotune.kernels import _blas_ilp64, _blas_lp64

    owner = getattr(be.ops.get("gemm"), "__self__", None)
    return isinstance(owner, _blas_lp64.BlasTable | _blas_ilp64.BlasTable)


TABLE_BACKENDS = [n for n in AVAILABLE if _is_blas_table(bk.get(n))]


def test_table_backends_found():
    assert {"numpy-openblas", "scipy-openblas"} <= set(TABLE_BACKENDS)


@pytest.mark.parametrize("name", TABLE_BACKENDS)
def test_blas_table_rejects_row_major(name, rng):
    be = bk.get(name)
    a_c = np.ascontiguousarray(rng.random((5, 4)))
    a_f, b_f = np.asfortranarray(a_c), np.asfortranarray(rng.random((4, 3)))
    c_f = np.zeros((5, 3), order="F")
    with pytest.raises(ValueError, match="column-major"):
        be.gemm(1.0, a_c, b_f, 0.0, c_f)
    with pytest.raises(ValueError, match="column-major"):
        be.gemm(1.0, a_f, b_f, 0.0, np.zeros((5, 3)))
    with pytest.raises(ValueError, match="column-major"):
        be.gemm(1.0, np.asfortranarray(rng.random((10, 4)))[::2], b_f, 0.0, c_f)  # row-strided view
    with pytest.raises(ValueError, match="column-major"):
        be.potrf(np.ascontiguousarray(np.eye(3)))
    with pytest.raises(ValueError, match="column-major"):
        be.gemv(1.0, a_c, np.ones(4), 0.0, np.ones(5))
    with pytest.raises(ValueError, match="conform"):
        be.gemm(1.0, a_f, np.asfortranarray(rng.random((3, 3))), 0.0, c_f)
    with pytest.raises(ValueError):
        be.getrf(np.asfortranarray(np.eye(4)), np.zeros(2, dtype=be.int_dtype))
    # nothing was written into the outputs of the rejected calls
    assert not c_f.any()


@pytest.mark.parametrize("name", AVAILABLE)
def test_threads_set_and_restore(name):
    be = bk.get(name)
    if be.set_threads is None:
        assert be.max_threads == 1
        with be.threads(1):
            pass
    else:
        assert be.max_threads == (os.cpu_count() or 1)
        before = be.get_threads()
        for n in sorted({1, be.max_threads}):
            with be.threads(n):
                assert be.get_threads() == n
            assert be.get_threads() == before
        # restored even when the block raises
        with pytest.raises(RuntimeError), be.threads(1):
            assert be.get_threads() == 1
            raise RuntimeError("boom")
        assert be.get_threads() == before
    for bad in (0, -1, be.max_threads + 1):
        with pytest.raises(ValueError, match="thread count"), be.threads(bad):
            pass


def test_unknown_backend():
    with pytest.raises(ValueError, match="nope"):
        bk.get("nope")
    assert "nope" not in AVAILABLE


def test_unknown_routine_attribute():
    be = bk.get("scipy-openblas")
    with pytest.raises(AttributeError, match="frobnicate"):
        be.frobnicate  # noqa: B018
