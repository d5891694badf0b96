"""SP lookup: exact values, log-log interpolation, clamping, params, misses and fallbacks."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.db import RECORD_DTYPE, Database, SPTable, SystemParameters, default_k

BE = "scipy-openblas"


def records(points, *, routine="gemm", backend=BE, threads=1, pattern="square", dtype="float64"):
    """Records for ``points``: iterable of (x, k) or (x, param, k)."""
    rows = []
    for pt in points:
        x, param, k = (pt[0], 0.0, pt[1]) if len(pt) == 2 else pt
        rows.append((routine, backend, threads, dtype, pattern, param, x, 1.0, k, k, k, k, 1, 0.0, k, "r", 0.0,
                     0.0, 0.0, 0.0, 0))
    return np.array(rows, dtype=RECORD_DTYPE)


def table(*groups) -> SPTable:
    return SPTable(np.concatenate(groups))


def loglog(x, x0, k0, x1, k1):
    """Hand-computed log-log interpolation between (x0, k0) and (x1, k1)."""
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp((1 - w) * math.log(k0) + w * math.log(k1))


XS = [10, 100, 1000]
KS = [1e-9, 4e-10, 2e-10]


@pytest.fixture
def tab() -> SPTable:
    return table(records(zip(XS, KS, strict=True)))


# -- one series ---------------------------------------------------------------------------------

def test_exact_at_measured_points(tab):
    for x, k in zip(XS, KS, strict=True):
        assert tab.k("gemm", BE, 1, x) == pytest.approx(k, rel=1e-12)
    np.testing.assert_allclose(tab.k("gemm", BE, 1, XS), KS, rtol=1e-12)


def test_loglog_interpolation_between_points(tab):
    # geometric midpoint of x gives the geometric mean of k
    assert tab.k("gemm", BE, 1, math.sqrt(10 * 100)) == pytest.approx(math.sqrt(1e-9 * 4e-10), rel=1e-12)
    # x = 20: w = log 2 / log 10
    w = math.log(2) / math.log(10)
    expected = math.exp((1 - w) * math.log(1e-9) + w * math.log(4e-10))
    assert tab.k("gemm", BE, 1, 20) == pytest.approx(expected, rel=1e-12)
    # x = 500, second segment
    assert tab.k("gemm", BE, 1, 500) == pytest.approx(loglog(500, 100, 4e-10, 1000, 2e-10), rel=1e-12)
    # strictly between the neighbours
    assert 4e-10 < float(tab.k("gemm", BE, 1, 50)) < 1e-9


def test_outside_measured_range_the_end_value_is_penalised(tab):
    for x in (0, 1, 2, 9, 9.99):
        assert tab.k("gemm", BE, 1, x) == pytest.approx(1e-9 * _penalty(x, 10), rel=1e-12), x
    for x in (1001, 10**4, 10**9):
        assert tab.k("gemm", BE, 1, x) == pytest.approx(2e-10 * _penalty(x, 1000), rel=1e-12), x


def _penalty(x, edge):
    """The extrapolation factor at size x beyond the measured edge (hand-computed)."""
    from autotune.core.assumptions import EXTRAPOLATION_PENALTY

    return (1 + EXTRAPOLATION_PENALTY) ** abs(math.log2(max(x, 1) / edge))


def test_vectorised_sizes_keep_shape(tab):
    xs = np.array([[1, 10, 20], [100, 500, 10**6]])
    out = tab.k("gemm", BE, 1, xs)
    assert out.shape == xs.shape
    expected = [[1e-9 * _penalty(1, 10), 1e-9, loglog(20, 10, 1e-9, 100, 4e-10)],
                [4e-10, loglog(500, 100, 4e-10, 1000, 2e-10), 2e-10 * _penalty(10**6, 1000)]]
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    # element-wise equals scalar calls
    for x, v in zip(xs.ravel(), out.ravel(), strict=True):
        assert float(tab.k("gemm", BE, 1, int(x))) == pytest.approx(v, rel=1e-14)
    # lists work too
    np.testing.assert_allclose(tab.k("gemm", BE, 1, [10, 100]), [1e-9, 4e-10], rtol=1e-12)


def test_unsorted_records_are_sorted():
    tab = table(records([(1000, 2e-10), (10, 1e-9), (100, 4e-10)]))
    assert tab.k("gemm", BE, 1, 20) == pytest.approx(loglog(20, 10, 1e-9, 100, 4e-10), rel=1e-12)


def test_single_point_series_is_constant():
    tab = table(records([(64, 3e-10)]))
    np.testing.assert_allclose(tab.k("gemm", BE, 1, [1, 64, 10**5]), [3e-10] * 3, rtol=1e-12)


def test_series_are_kept_apart():
    tab = table(records([(10, 1e-9), (100, 1e-10)]),
                records([(10, 5e-9), (100, 5e-10)], threads=2),
                records([(10, 7e-9), (100, 7e-10)], backend="numpy-openblas"),
                records([(10, 3e-9), (100, 3e-10)], routine="syrk"))
    assert tab.k("gemm", BE, 1, 10) == pytest.approx(1e-9)
    assert tab.k("gemm", BE, 2, 10) == pytest.approx(5e-9)
    assert tab.k("gemm", "numpy-openblas", 1, 100) == pytest.approx(7e-10)
    assert tab.k("syrk", BE, 1, 100) == pytest.approx(3e-10)
    assert tab.has("gemm", BE, 2) and not tab.has("gemm", BE, 4)
    assert ("gemm", BE, 2, "square", "float64") in tab.keys()


# -- params -------------------------------------------------------------------------------------

@pytest.fixture
def panel() -> SPTable:
    # param 4: k = 1e-9 flat; param 16: k = 4e-9 flat
    return table(records([(10, 4.0, 1e-9), (100, 4.0, 1e-9), (10, 16.0, 4e-9), (100, 16.0, 4e-9)],
                         pattern="panel"))


def test_param_interpolation_in_log_param(panel):
    # param 8 is the geometric midpoint of 4 and 16: geometric mean of k
    assert panel.k("gemm", BE, 1, 50, "panel", 8.0) == pytest.approx(2e-9, rel=1e-12)
    w = math.log(6 / 4) / math.log(16 / 4)
    expected = math.exp((1 - w) * math.log(1e-9) + w * math.log(4e-9))
    assert panel.k("gemm", BE, 1, 50, "panel", 6.0) == pytest.approx(expected, rel=1e-12)
    assert panel.k("gemm", BE, 1, 50, "panel", 4.0) == pytest.approx(1e-9, rel=1e-12)
    assert panel.k("gemm", BE, 1, 50, "panel", 16.0) == pytest.approx(4e-9, rel=1e-12)


def test_param_clamps_outside_measured_params(panel):
    for p in (0.0, 1.0, 3.99):
        assert panel.k("gemm", BE, 1, 50, "panel", p) == pytest.approx(1e-9, rel=1e-12), p
    for p in (16.01, 64.0, 1e6):
        assert panel.k("gemm", BE, 1, 50, "panel", p) == pytest.approx(4e-9, rel=1e-12), p


def test_param_and_size_interpolate_together():
    # different size grids per param; value = log-param blend of each curve's log-log value
    tab = table(records([(10, 4.0, 1e-9), (100, 4.0, 1e-10), (20, 16.0, 8e-9), (200, 16.0, 8e-10)],
                        pattern="panel"))
    x = 50
    lo = loglog(x, 10, 1e-9, 100, 1e-10)
    hi = loglog(x, 20, 8e-9, 200, 8e-10)
    expected = math.sqrt(lo * hi)  # param 8 halfway (in log) between 4 and 16
    assert tab.k("gemm", BE, 1, x, "panel", 8.0) == pytest.approx(expected, rel=1e-12)
    out = tab.k("gemm", BE, 1, np.array([5, 50, 5000]), "panel", 8.0)
    np.testing.assert_allclose(out, [math.sqrt(1e-9 * 8e-9) * _penalty(5, 10), expected,
                                     math.sqrt(1e-10 * 8e-10) * _penalty(5000, 200)], rtol=1e-12)


def test_three_params_pick_the_right_bracket():
    tab = table(records([(10, 2.0, 1e-9), (10, 8.0, 2e-9), (10, 32.0, 8e-9)], pattern="panel"))
    assert tab.k("gemm", BE, 1, 10, "panel", 4.0) == pytest.approx(math.sqrt(2) * 1e-9, rel=1e-12)
    assert tab.k("gemm", BE, 1, 10, "panel", 16.0) == pytest.approx(4e-9, rel=1e-12)


# -- misses -------------------------------------------------------------------------------------

def test_sptable_unknown_key_raises_keyerror(tab):
    with pytest.raises(KeyError):
        tab.k("gemm", "numpy-openblas", 1, 10)
    with pytest.raises(KeyError):
        tab.k("gemm", BE, 2, 10)
    with pytest.raises(KeyError):
        tab.k("gemm", BE, 1, 10, "panel", 4.0)
    with pytest.raises(KeyError):
        tab.k("syrk", BE, 1, 10)
    with pytest.raises(KeyError):
        tab.k("gemm", BE, 1, 10, dtype="float32")


def _calls_warned(fn, times=2):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [fn() for _ in range(times)]
    return results, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_system_parameters_unknown_key_falls_back_with_one_warning(tab):
    sp = SystemParameters(Database(records=records(zip(XS, KS, strict=True)), backends={}))
    assert sp.source == "database"
    assert sp.k("gemm", BE, 1, 100) == pytest.approx(4e-10)
    results, warned = _calls_warned(lambda: sp.k("potrf", BE, 2, 100))
    assert len(warned) == 1, [str(w.message) for w in warned]
    assert "potrf" in str(warned[0].message)
    for r in results:
        assert float(r) == default_k("potrf", 2)
    assert default_k("potrf", 2) == pytest.approx(1 / (20e9 * 2))
    # vectorised fallback keeps the shape; another cause warns again, once
    out, warned = _calls_warned(lambda: sp.k("gemv", BE, 1, np.array([10, 20, 30])))
    assert len(warned) == 1
    assert out[0].shape == (3,)
    np.testing.assert_array_equal(out[0], np.full(3, default_k("gemv", 1)))
    # the original cause stays silent
    _, warned = _calls_warned(lambda: sp.k("potrf", BE, 2, 100))
    assert warned == []


def test_system_parameters_without_database_uses_defaults():
    sp = SystemParameters(None, reason="no database at /nowhere")
    assert sp.source == "defaults"
    results, warned = _calls_warned(lambda: sp.k("gemm", BE, 4, [1, 2]), times=3)
    assert len(warned) == 1 and "/nowhere" in str(warned[0].message)
    for r in results:
        np.testing.assert_array_equal(r, [default_k("gemm", 4)] * 2)
    assert default_k("gemm", 4) == pytest.approx(1 / (20e9 * 4))
    assert default_k("axpy", 1) == pytest.approx(1 / 1e9)
    assert default_k("gemv", 1) == pytest.approx(1 / 2e9)


# -- properties ---------------------------------------------------------------------------------

k_values = st.floats(min_value=1e-13, max_value=1e-5, allow_nan=False, allow_infinity=False)
sizes = st.lists(st.integers(1, 10**6), min_size=1, max_size=8, unique=True).map(sorted)
queries = st.lists(st.floats(min_value=0.0, max_value=1e8, allow_nan=False), min_size=1, max_size=20)
REL = 1e-12  # exp(log(.)) round-off


@st.composite
def series(draw):
    xs = draw(sizes)
    ks = draw(st.lists(k_values, min_size=len(xs), max_size=len(xs)))
    return xs, ks


@settings(max_examples=150, deadline=None, database=None)
@given(series(), queries)
def test_property_interpolated_value_within_measured_range(data, qs):
    xs, ks = data
    out = table(records(zip(xs, ks, strict=True))).k("gemm", BE, 1, np.array(qs)) / _penalties(qs, xs)
    assert out.shape == (len(qs),)
    assert np.all(np.isfinite(out))
    assert np.all(out >= min(ks) * (1 - REL))
    assert np.all(out <= max(ks) * (1 + REL))


def _penalties(qs, xs) -> np.ndarray | float:
    """The extrapolation factor of each query against the measured sizes ``xs``."""
    from autotune.db.lookup import _penalty as factor

    lx = np.log(np.maximum(np.asarray(qs, dtype=float), 1.0))
    return factor(lx, math.log(max(min(xs), 1.0)), math.log(max(max(xs), 1.0))) if len(qs) else 1.0


@settings(max_examples=150, deadline=None, database=None)
@given(series(), queries, st.booleans())
def test_property_monotone_data_stays_monotone(data, qs, increasing):
    xs, ks = data
    ks = sorted(ks, reverse=not increasing)
    qs = np.clip(np.sort(np.array(qs)), min(xs), max(xs))    # outside, the penalty grows away from both ends
    out = table(records(zip(xs, ks, strict=True))).k("gemm", BE, 1, qs)
    steps = np.diff(out)
    tol = REL * np.maximum(out[:-1], out[1:])
    if increasing:
        assert np.all(steps >= -tol)
    else:
        assert np.all(steps <= tol)


@settings(max_examples=100, deadline=None, database=None)
@given(series(), series(), st.floats(min_value=0.0, max_value=1e3, allow_nan=False), queries)
def test_property_param_blend_within_range(lo, hi, param, qs):
    pts = [(x, 2.0, k) for x, k in zip(*lo, strict=True)] + [(x, 32.0, k) for x, k in zip(*hi, strict=True)]
    out = table(records(pts, pattern="panel")).k("gemm", BE, 1, np.array(qs), "panel", param)
    out = out / _penalties(qs, lo[0] + hi[0])
    allk = lo[1] + hi[1]
    assert np.all(out >= min(allk) * (1 - REL))
    assert np.all(out <= max(allk) * (1 + REL))


def test_drift_correction_divides_out_a_slow_spell():
    from autotune.db import RECORD_DTYPE
    from autotune.db.lookup import MAX_DRIFT_CORRECTION, SPTable, drift_corrected_k

    rec = np.zeros(11, RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"] = b"gemm", b"mkl", 1
    rec["dtype"], rec["pattern"] = b"float64", b"square"
    rec["x"] = 2 ** np.arange(5, 16)
    rec["run_id"] = b"r1"
    rec["ref"] = [1.0] * 7 + [1.1] * 3 + [0.0]      # the machine ran 1.1x slow for points 7-9
    rec["k"] = [1.0] * 7 + [1.1] * 3 + [2.0]        # ... which slowed them by the same factor
    want = [1.0] * 10 + [2.0]                        # ref 0: no reference, left unchanged
    np.testing.assert_allclose(drift_corrected_k(rec), want)
    # an analysis tool only: the runtime reads k as measured
    np.testing.assert_allclose(SPTable(rec).k("gemm", "mkl", 1, rec["x"][7:10]), 1.1)
    rec["run_id"][:5] = b"r0"                      # separate runs are normalised separately
    np.testing.assert_allclose(drift_corrected_k(rec), want)
    rec["backend"][:5] = b"blis"
    np.testing.assert_allclose(drift_corrected_k(rec), want)
    rec["ref"][7:10], rec["k"][7:10] = 2.0, 2.0       # a burst: corrected by at most the cap
    got = drift_corrected_k(rec)[7:10]
    np.testing.assert_allclose(got, 2.0 / MAX_DRIFT_CORRECTION)


@given(st.floats(1.0, 5000.0), st.floats(1.0, 5000.0), st.floats(1.0, 300.0), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_property_k_min_bounds_every_lookup_up_to_its_cut(upto, x, param, seed):
    """k_min(upto) never exceeds a lookup at size and parameter <= upto, and only tightens as upto falls."""
    rng = np.random.default_rng(seed)
    pts = [(s, b, float(k)) for s in (32.0, 128.0, 512.0, 2048.0) for b, k in
           zip((16.0, 64.0, 256.0), rng.uniform(1e-11, 1e-9, 3), strict=True)]
    tab = table(records(pts, pattern="panel"))
    x, param = min(x, upto), min(param, upto)
    bound = tab.k_min("gemm", BE, 1, "panel", upto=upto)
    assert bound <= tab.k("gemm", BE, 1, np.array([x]), "panel", param)[0] * (1 + 1e-12)
    assert tab.k_min("gemm", BE, 1, "panel") <= bound


# -- measured ranges (issue 61 item 2) -----------------------------------------------------------

def test_past_the_measured_sizes_k_is_penalised_per_octave(tab):
    from autotune.core.assumptions import EXTRAPOLATION_PENALTY as P

    assert tab.measured_range("gemm", BE, 1) == pytest.approx((10, 1000))
    assert tab.k("gemm", BE, 1, 1000) == pytest.approx(2e-10, rel=1e-12)         # measured: no penalty
    assert tab.k("gemm", BE, 1, 4000) == pytest.approx(2e-10 * (1 + P) ** 2, rel=1e-12)
    assert tab.k("gemm", BE, 1, 5) == pytest.approx(1e-9 * (1 + P), rel=1e-12)
    many = tab.k("gemm", BE, 1, np.array([2000.0, 500.0]))
    np.testing.assert_allclose(many[0], 2e-10 * (1 + P), rtol=1e-12)
    assert many[1] < 4e-10


def test_a_series_measured_at_one_size_is_a_constant():
    one = table(records([(32, 3e-10)], pattern="dispatch"))
    assert one.k("gemm", BE, 1, 4096, pattern="dispatch") == pytest.approx(3e-10, rel=1e-12)


def test_explain_marks_every_k_it_did_not_measure():
    from autotune.select.recorder import Recorder as _Recorder

    sp = SystemParameters(Database(records=records(zip(XS, KS, strict=True))))
    rec = _Recorder(sp)
    rec.k("gemm", BE, 1, 500)
    rec.k("gemm", BE, 1, 4000)
    rec.k("gemm", BE, 1, np.array([50.0, 5000.0]))
    assert "NOT MEASURED" not in rec.log[0]
    assert all("NOT MEASURED: measured 10..1000" in line for line in rec.log[1:])
