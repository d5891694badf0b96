"""The fitting engine (DESIGN §5): coefficient methods, cascade, AICc selection, Strassen remodel."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.models.fit_select import aicc, select_terms
from autotune.models.fit_strassen import fit_strassen, strassen_basis
from autotune.models.fit_terms import METHODS, Samples, TermSet
from autotune.models.fitting import first_nonpositive, fit, median_ape, phi_err, remodel

CUBIC = TermSet.polynomial(range(4))  # n^3, n^2, n, 1
TENSOR = TermSet.polynomial(range(4), (-1, 0, 1), "b")  # DESIGN §5: sum beta_ij n^i b^j
BLOCKS = [16, 32, 64, 128, 256]
C_CUBIC = np.array([1e-9, 5e-8, 1e-6, 1e-4])
# (1e-9 n^3 + 5e-8 n^2 + 1e-6 n + 1e-4) * (0.8 + 8/b + b/1000): every term matters somewhere
C_TENSOR = np.array([C_CUBIC[3 - i] * {-1: 8.0, 0: 0.8, 1: 1e-3}[j] for i, j in TENSOR.terms])
FUNCS = {m: functools.partial(fit, m) for m in ("FI-ME", "VA-ME", "FI-LS", "VA-LS")}
CASES = {"cubic": (CUBIC, C_CUBIC, None), "tensor": (TENSOR, C_TENSOR, BLOCKS)}


def poly_measure(termset, coef, noise=0.0, seed=0, calls=None):
    """measure(n, a) of a known polynomial with multiplicative Gaussian noise; logs calls if given a list."""
    rng = np.random.default_rng(seed)

    def measure(n, a):
        if calls is not None:
            calls.append((n, a))
        return float((termset.design(n, a) @ coef)[0]) * (1.0 + noise * rng.standard_normal())
    return measure


def piecewise_measure(calls=None):
    """A cubic whose coefficients jump at n = 1000 (a cache effect) that one polynomial cannot follow."""
    low, high = C_CUBIC, np.array([1.6e-9, -2e-7, 4e-4, -0.05])

    def measure(n, a):
        if calls is not None:
            calls.append((n, a))
        return float((CUBIC.design(n) @ (low if n < 1000 else high))[0])
    return measure


def grid(ns, a_values):
    """Flat (n, a) arrays over sizes x parameter values (a None: no parameter)."""
    if a_values is None:
        return np.asarray(ns, float), None
    gn, ga = np.meshgrid(ns, a_values, indexing="ij")
    return gn.ravel(), ga.ravel()


# ----------------------------------------------------------------------------- term sets

def test_termset_names_order_and_design():
    ts = TermSet(((2, -1), (3, 0), (0, 0), (1, 1)), param="b")
    assert ts.terms == ((3, 0), (2, -1), (1, 1), (0, 0))
    assert ts.names == ("n^3", "n^2 b^-1", "n b", "1")
    assert ts == TermSet(((0, 0), (1, 1), (3, 0), (2, -1)), param="b") and ts.leading == (3, 0)
    x = ts.design([10.0, 20.0], [2.0, 4.0])
    np.testing.assert_allclose(x, [[1000, 50, 20, 1], [8000, 100, 80, 1]])
    assert ts.design(10.0, np.array([1.0, 2.0, 4.0])).shape == (3, 4)
    assert TENSOR.leading == (3, 0) and len(TENSOR) == 12 and CUBIC.names == ("n^3", "n^2", "n", "1")


def test_candidates_all_subsets_when_few_and_bounded_otherwise():
    small = CUBIC.candidates()
    assert len(small) == 8 and all((3, 0) in s.terms for s in small) and len(set(small)) == 8
    assert len(TermSet.polynomial(range(-1, 5)).candidates(required=())) == 63
    many = TENSOR.candidates(max_sets=256)
    assert len(many) <= 256 and len(set(many)) == len(many)
    assert all((3, 0) in s.terms for s in many)
    assert TENSOR in many  # the full set (nested by degree) is always a candidate
    assert all(s in many for s in TENSOR.nested())
    assert max(len(s) for s in many if s not in TENSOR.nested()) == 4  # leading + up to 3 terms fit in 256
    assert len(TENSOR.candidates(max_sets=20)) <= 20


# ----------------------------------------------------------------------------- coefficient methods

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_methods_recover_noise_free_coefficients_exactly(method, case):
    termset, coef, a_values = CASES[case]
    model = FUNCS[method](poly_measure(termset, coef), termset, (200, 2000), a_values)
    assert model.method == method and model.names == termset.names
    assert model.coefficients.shape == (1 if method.startswith("FI") else 2, len(termset))
    # exact up to round-off amplified by the conditioning of 12 monomials on a narrow region
    np.testing.assert_allclose(model.coefficients, np.broadcast_to(coef, model.coefficients.shape), rtol=1e-6)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_methods_follow_noisy_data(method, case):
    """1% noise: every method predicts the range within a few %; least squares also pins the leading term.

    The ME methods interpolate the noise of d points, so their coefficients (and extrapolation
    towards n_i) are loose: that is why the cascade checks them on separate points.
    """
    termset, coef, a_values = CASES[case]
    model = FUNCS[method](poly_measure(termset, coef, noise=0.01, seed=3), termset, (200, 2000), a_values)
    n, a = grid(np.linspace(200, 2000, 40), a_values)
    rel = np.abs(model.predict(n, a) / (termset.design(n, a) @ coef) - 1)
    assert np.median(rel) < 0.03
    if method.endswith("LS"):
        assert rel.max() < 0.06
    if method == "FI-LS":
        lead = termset.terms.index(termset.leading)
        assert model.coefficients[0, lead] == pytest.approx(coef[lead], rel=0.1)
        assert 0.005 < model.sigma < 0.015  # the relative residual sigma estimates the 1% noise


def test_me_methods_run_as_many_points_as_coefficients_at_evenly_spaced_sizes():
    calls = []
    model = fit("FI-ME", poly_measure(CUBIC, C_CUBIC, calls=calls), CUBIC, (100, 600))
    assert [n for n, _ in calls] == [200, 300, 400, 500] and all(a is None for _, a in calls)
    assert len(model.points) == 4 and math.isnan(model.sigma)
    calls.clear()
    fit("VA-ME", poly_measure(CUBIC, C_CUBIC, calls=calls), CUBIC, (100, 600), regions=2)
    assert [n for n, _ in calls] == [150, 200, 250, 300, 400, 450, 500, 550]
    calls.clear()
    fit("FI-ME", poly_measure(TENSOR, C_TENSOR, calls=calls), TENSOR, (200, 2000), BLOCKS)
    assert len(calls) == 12 and sorted({a for _, a in calls}) == [16, 64, 256]
    sub = TENSOR.subset([(3, 0), (2, -1), (2, 0), (1, 1), (0, 0)])  # not a tensor product: QR-picked points
    calls.clear()
    model = fit("FI-ME", poly_measure(sub, C_TENSOR[[1, 5, 4, 6, 10]], calls=calls), sub, (200, 2000), BLOCKS)
    assert len(calls) == len(set(calls)) == 5
    np.testing.assert_allclose(model.coefficients[0], C_TENSOR[[1, 5, 4, 6, 10]], rtol=1e-8)


def test_ls_sampling_plans():
    calls = []
    fit("FI-LS", poly_measure(CUBIC, C_CUBIC, calls=calls), CUBIC, (500, 10000), n_inc=500)
    assert [n for n, _ in calls] == list(range(500, 10001, 500))  # (n_e - n_i + n_inc) / n_inc runs
    calls.clear()
    model = fit("VA-LS", poly_measure(CUBIC, C_CUBIC, calls=calls), CUBIC, (100, 500), regions=2, n_dat=5)
    assert [n for n, _ in calls] == [100, 140, 180, 220, 260, 300, 340, 380, 420, 460]  # [n_i + jw, +w) at w/n_dat
    assert model.regions == [(100.0, 300.0), (300.0, 500.0)]
    calls.clear()
    fit("FI-LS", poly_measure(TENSOR, C_TENSOR, calls=calls), TENSOR, (200, 2000), BLOCKS)
    assert len(calls) == 13 * len(BLOCKS)  # default n_inc: 3 d_n + 1 sizes, every block


def test_measured_arrays_instead_of_measure():
    n, a = grid(np.arange(200, 2001, 100), BLOCKS)
    t = TENSOR.design(n, a) @ C_TENSOR
    data = Samples(n, a, t)
    for func in FUNCS.values():
        model = func(data, TENSOR, (200, 2000))  # a_values default: those in the data
        np.testing.assert_allclose(model.coefficients, np.broadcast_to(C_TENSOR, model.coefficients.shape), rtol=1e-7)
    me = fit("FI-ME", (n, a, t), TENSOR, (200, 2000), BLOCKS)
    assert sorted(set(me.points.n)) == [600, 900, 1300, 1600]  # nearest measured to 560, 920, 1280, 1640
    assert len(fit("FI-LS", data, TENSOR, (500, 1000)).points) == 6 * len(BLOCKS)  # only points in the range


def test_predict_is_vectorised_and_picks_regions():
    model = fit("VA-LS", piecewise_measure(), CUBIC, (200, 1800), regions=2)
    assert model.edges.tolist() == [200.0, 1000.0, 1800.0]
    assert model.region_of([100, 999, 1000, 5000]).tolist() == [0, 0, 1, 1]
    pred = model.predict(np.array([[300.0, 1500.0]]))
    assert pred.shape == (1, 2)
    np.testing.assert_allclose(pred[0], [piecewise_measure()(300, None), piecewise_measure()(1500, None)], rtol=1e-8)
    assert model.predict(700).shape == () and "VA-LS" in str(model)


def test_va_methods_capture_a_piecewise_polynomial_that_fi_cannot():
    checks = [(n, None) for n in (300, 500, 700, 900, 1100, 1300, 1500, 1700)]
    check_n = np.array([n for n, _ in checks], float)
    truth = np.array([piecewise_measure()(n, None) for n in check_n])
    err = {}
    for method, func in FUNCS.items():
        model = func(piecewise_measure(), CUBIC, (200, 1800))
        err[method] = median_ape(model, check_n, None, truth)
    assert err["VA-ME"] < 1e-6 and err["VA-LS"] < 1e-6
    assert err["FI-ME"] > 5 and err["FI-LS"] > 5


# ----------------------------------------------------------------------------- check points and cascade

class Scaled:
    """A model predicting a fixed multiple of the measured times of the hand example."""

    def __init__(self, times, factor):
        self.times, self.factor = np.asarray(times, float), factor

    def predict(self, n, a=None):
        return self.times[np.asarray(n, int) - 1] * self.factor


def test_phi_err_and_ape_on_a_hand_example():
    measured = [1.0, 2.0, 3.0]
    over = Scaled([1.1, 2.2, 3.3], 1.0)  # 10% too slow everywhere: sum 6.6 against 6
    assert phi_err(over, [1, 2, 3], None, measured) == pytest.approx(-10.0)
    assert median_ape(over, [1, 2, 3], None, measured) == pytest.approx(10.0)
    under = Scaled([0.5, 2.0, 3.0], 1.0)  # 5.5 against 6: model too fast, Phi_err > 0
    assert phi_err(under, [1, 2, 3], None, measured) == pytest.approx((1 - 5.5 / 6) * 100)
    mixed = Scaled([1.5, 1.5, 3.0], 1.0)  # errors cancel in the sum, not in the APE
    assert phi_err(mixed, [1, 2, 3], None, measured) == pytest.approx(0.0)
    assert median_ape(mixed, [1, 2, 3], None, measured) == pytest.approx(25.0)


def test_cascade_stops_at_the_first_method_within_tolerance():
    calls = []
    checks = [(n, None) for n in (250, 750, 1250, 1750)]
    out = remodel(poly_measure(CUBIC, C_CUBIC, calls=calls), (200, 2000), None, CUBIC, checks, tol=1.0)
    assert out.accepted and [t.method for t in out.trials] == ["FI-ME"] and out.model.method == "FI-ME"
    trial = out.trials[0]
    assert trial.points == trial.runs == 4 and abs(trial.phi_err) < 1e-6 and trial.ape < 1e-6
    assert out.check_runs == 4 and out.runs == len(calls) == 8
    assert out.seconds == pytest.approx(sum(poly_measure(CUBIC, C_CUBIC)(n, a) for n, a in calls))


def test_cascade_moves_on_when_the_cheap_methods_miss():
    calls = []
    checks = [(n, None) for n in (300, 500, 700, 900, 1100, 1300, 1500, 1700)]
    out = remodel(piecewise_measure(calls), (200, 1800), None, CUBIC, checks, tol=1.0)
    assert out.accepted and [t.method for t in out.trials] == ["FI-ME", "VA-ME"]
    fi, va = out.trials
    assert not fi.accepted and abs(fi.phi_err) > 1.0 and fi.runs == 4
    # VA-ME's 8 points: 360 520 680 840 | 1160 1320 1480 1640, four already run by FI-ME (520 840 1160 1480)
    assert va.accepted and va.points == 8 and va.runs == 4 and out.model is va.model
    assert out.runs == len(calls) == 4 + 4 + len(checks)


def test_cascade_reuses_measurements_and_reports_failure():
    calls = []
    checks = [(n, None) for n in (263, 777, 1291, 1733)]  # in no method's plan
    noisy = poly_measure(CUBIC, C_CUBIC, noise=0.05, seed=1, calls=calls)
    out = remodel(noisy, (200, 2000), None, CUBIC, checks, tol=1e-3)  # unreachable with 5% noise
    assert not out.accepted and [t.method for t in out.trials] == list(METHODS)
    best = min(out.trials, key=lambda t: abs(t.phi_err))
    assert out.model is best.model
    assert out.runs == len(calls) == len(set(calls))  # nothing measured twice
    assert out.trials[3].runs < out.trials[3].points  # VA-LS reused FI-LS's 200, 500, 800, ...


def test_cascade_records_a_method_that_cannot_be_applied():
    checks = Samples([13, 27], None, [CUBIC.design(13) @ C_CUBIC, CUBIC.design(27) @ C_CUBIC])
    out = remodel(poly_measure(CUBIC, C_CUBIC), (10, 30), None, CUBIC, checks, tol=1e-6,
                  methods=("VA-ME", "FI-LS"), regions=5)
    va, fi = out.trials
    assert va.model is None and "too narrow" in va.error and va.runs == 0
    assert fi.accepted and out.model.method == "FI-LS" and out.check_runs == 0


# ----------------------------------------------------------------------------- AICc selection

def test_aicc_formula():
    n, p = 20, 3
    k = p + 1
    expected = n * math.log(0.5 / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)
    assert aicc(0.5, n, p) == pytest.approx(expected)
    with pytest.raises(ValueError, match="n_obs - K - 1"):
        aicc(0.5, 5, 3)


def _aicc_data(seed):
    n = np.geomspace(100, 4000, 60)
    rng = np.random.default_rng(seed)
    return n, (1e-9 * n**3 + 1e-6 * n**2) * (1 + 0.02 * rng.standard_normal(n.size))


def test_aicc_recovers_the_true_term_set():
    full = TermSet.polynomial(range(-1, 5))  # n^-1 .. n^4: 63 candidate sets
    n, t = _aicc_data(seed=1)
    sel = select_terms(n, None, t, full, required=())
    true = full.subset([(3, 0), (2, 0)])
    assert len(sel.ranked) == 63 and not sel.skipped
    assert sel.ranked[0].termset == true and sel.best.termset == true
    assert sel.ranked[0].weight == max(sel.weights) and sel.weights.sum() == pytest.approx(1.0)
    assert np.all(np.diff([c.aicc for c in sel.ranked]) >= 0) and sel.ranked[0].delta == 0
    assert sel.importances["n^3"] > 0.99 and sel.importances["n^2"] > 0.99
    assert max(v for k, v in sel.importances.items() if k not in ("n^3", "n^2")) < 0.5
    assert 0.01 < sel.sigma < 0.03  # the 2% noise
    np.testing.assert_allclose(sel.best.coefficients[0], [1e-9, 1e-6], rtol=0.05)
    assert sel.best_by_dimension()[2].termset == true
    assert list(sel.best_by_dimension()) == [1, 2, 3, 4, 5, 6]


def test_aicc_importances_are_stable_across_noise():
    """AIC admits each spurious term with ~16% odds, so the winner varies; the true terms' importances do not."""
    full = TermSet.polynomial(range(-1, 5))
    true = full.subset([(3, 0), (2, 0)])
    wins = 0
    for seed in range(1, 21):
        n, t = _aicc_data(seed)
        sel = select_terms(n, None, t, full, required=())
        wins += sel.best.termset == true
        assert set(true.terms) <= set(sel.best.termset.terms)
        assert sel.importances["n^3"] > 0.95 and sel.importances["n^2"] > 0.95
    assert wins >= 8  # 4 spurious terms: about 0.84^4 = 50% expected


def test_aicc_with_an_algorithm_parameter_and_skipped_sets():
    n, b = grid(np.geomspace(200, 3000, 12), BLOCKS)
    t = (1e-9 * n**3 + 1e-6 * n**2) * (1 + 0.02 * np.random.default_rng(5).standard_normal(n.size))
    sel = select_terms(n, b, t, TENSOR)
    assert sel.importances["n^3"] > 0.99 and sel.importances["n^2"] > 0.9
    few = select_terms(n[:6], b[:6], t[:6], [CUBIC.subset([(3, 0)]), CUBIC])  # 6 points: K = 5 needs n > 6
    assert few.skipped == (CUBIC,) and len(few.ranked) == 1


# ----------------------------------------------------------------------------- Strassen remodel (eq. 4.10)

def k3(s):
    """Seconds per flop of the leaf gemm: small leaves are slower."""
    return 1e-10 * (1 + 40.0 / np.asarray(s, float))


def k2(s):
    """Seconds per element of the additions: small quadrants pay overhead."""
    return 1e-9 * (1 + 60.0 / np.asarray(s, float))


M_TRUE = {1: 1.10, 2: 1.05, 3: 1.20, 4: 1.60}
A_TRUE = {1: 1.30, 2: 1.00, 3: 0.90, 4: 0.80}
SIZES = np.arange(512, 4609, 512)


def strassen_data(m, a, noise=0.0, seed=0):
    n, lv = grid(SIZES, [1, 2, 3, 4])
    mult, add = strassen_basis(n, lv, k3, k2)
    t = np.array([m(x) for x in lv]) * mult + np.array([a(x) for x in lv]) * add
    return n, lv, t * (1 + noise * np.random.default_rng(seed).standard_normal(t.size))


def test_strassen_basis_matches_eq_4_10_for_constant_k():
    mult, add = strassen_basis(1024, 3, lambda s: 2.0, lambda s: 3.0)
    assert mult == pytest.approx(7**3 * 2 * (1024 / 8) ** 3 * 2.0)
    assert add == pytest.approx(18 / 4 * 1024**2 * (1 + 7 / 4 + (7 / 4) ** 2) * 3.0)
    assert strassen_basis(1024, 0, k3, k2)[1] == 0.0


def test_strassen_remodel_recovers_per_level_factors_and_best_level():
    n, lv, t = strassen_data(M_TRUE.get, A_TRUE.get)
    fit = fit_strassen(n, lv, t, k3, k2)
    assert fit.levels == (1, 2, 3, 4)
    np.testing.assert_allclose(fit.M([1, 2, 3, 4]), list(M_TRUE.values()), rtol=1e-8)
    np.testing.assert_allclose(fit.A([1, 2, 3, 4]), list(A_TRUE.values()), rtol=1e-8)
    for size in (512, 1500, 4096, 8000):
        true_times = [M_TRUE[x] * strassen_basis(size, x, k3, k2)[0] + A_TRUE[x] * strassen_basis(size, x, k3, k2)[1]
                      for x in (1, 2, 3, 4)]
        assert fit.best_level(size) == 1 + int(np.argmin(true_times))
    assert fit.best_level(np.array([512, 4096])).shape == (2,)
    with pytest.raises(ValueError, match="not fitted"):
        fit.predict(1024, 5)


def test_strassen_remodel_with_noise_and_polynomial_factors():
    m_poly, a_poly = [1.0, 0.1, -0.02], [1.4, -0.15]  # M quadratic, A linear in l (001 §4.3.2)
    m = lambda x: np.polynomial.polynomial.polyval(x, m_poly)  # noqa: E731
    a = lambda x: np.polynomial.polynomial.polyval(x, a_poly)  # noqa: E731
    n, lv, t = strassen_data(m, a)
    exact = fit_strassen(n, lv, t, k3, k2, degrees=(2, 1))
    np.testing.assert_allclose(exact.m_poly, m_poly, rtol=1e-7)
    np.testing.assert_allclose(exact.a_poly, a_poly, rtol=1e-7)
    assert exact.M(5) == pytest.approx(m(5))  # one formula for any level
    n, lv, t = strassen_data(M_TRUE.get, A_TRUE.get, noise=0.01, seed=2)
    noisy = fit_strassen(n, lv, t, k3, k2)
    np.testing.assert_allclose(noisy.M([1, 2, 3, 4]), list(M_TRUE.values()), rtol=0.03)
    np.testing.assert_allclose(noisy.A([1, 2, 3, 4]), list(A_TRUE.values()), rtol=0.3)  # additions: a small share
    assert 0.005 < noisy.sigma < 0.015
    truth = strassen_data(M_TRUE.get, A_TRUE.get)[2]
    assert np.abs(noisy.predict(n, lv) / truth - 1).max() < 0.03


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, match", [
    (lambda: fit("FI-LS", (np.array([100.0, 200, 300]), None, np.ones(3)), CUBIC, (100, 300)),
     "3 points for 4 coefficients"),
    (lambda: fit("FI-LS", poly_measure(CUBIC, C_CUBIC), CUBIC, (100, 2000), n_inc=1000), "2 points for 4 coefficients"),
    (lambda: fit("FI-LS", poly_measure(CUBIC, C_CUBIC), CUBIC, (100, 2000), n_inc=0), "n_inc must be positive"),
    (lambda: Samples([100, 200], None, [1.0, 0.0]), "positive"),
    (lambda: Samples([100, 200], None, [1.0, -2.0]), "positive"),
    (lambda: Samples([100, 200], None, [1.0]), "2 sizes"),
    (lambda: fit("FI-ME", lambda n, a: -1.0, CUBIC, (100, 500)), "positive time"),
    (lambda: fit("FI-ME", lambda n, a: float("nan"), CUBIC, (100, 500)), "positive time"),
    (lambda: fit("FI-ME", poly_measure(CUBIC, C_CUBIC), CUBIC, (500, 500)), "empty or invalid size range"),
    (lambda: fit("VA-LS", poly_measure(CUBIC, C_CUBIC), CUBIC, (600, 100)), "empty or invalid size range"),
    (lambda: fit("FI-LS", poly_measure(CUBIC, C_CUBIC), CUBIC, (0, 100)), "empty or invalid size range"),
    (lambda: fit("FI-ME", poly_measure(CUBIC, C_CUBIC), CUBIC, (100, 103)), "too narrow"),
    (lambda: fit("FI-ME", poly_measure(TENSOR, C_TENSOR), TENSOR, (100, 500)), "give a_values"),
    (lambda: fit("FI-ME", poly_measure(TENSOR, C_TENSOR), TENSOR, (100, 500), []), "non-empty"),
    (lambda: fit("FI-ME", poly_measure(TENSOR, C_TENSOR), TENSOR, (100, 500), [16, 32]), "2 parameter values"),
    (lambda: fit("FI-LS", poly_measure(CUBIC, C_CUBIC), CUBIC, (100, 500), [16, 32]), "do not use"),
    (lambda: TermSet(()), "at least one term"),
    (lambda: TermSet(((1, 0), (1, 0))), "duplicate"),
    (lambda: TermSet(((1.5, 0),)), "integer exponents"),
    (lambda: TENSOR.design([100.0], [0.0]), "non-finite"),
    (lambda: CUBIC.candidates(required=[(5, 0)]), "not in the term set"),
    (lambda: remodel(poly_measure(CUBIC, C_CUBIC), (100, 500), None, CUBIC, [], 1.0), "non-empty list"),
    (lambda: remodel(poly_measure(CUBIC, C_CUBIC), (100, 500), None, CUBIC, [(200, None)], 0.0), "tol"),
    (lambda: remodel(poly_measure(CUBIC, C_CUBIC), (100, 500), None, CUBIC, [(200, None)], 1.0,
                     methods=("XX",)), "unknown"),
    (lambda: phi_err(Scaled([1.0], 1.0), [], None, []), "no check points"),
    (lambda: select_terms([100.0, 200, 300], None, [1.0, 2, 3], CUBIC), "support none"),
    (lambda: fit_strassen([512, 1024], [1, 1], [1.0, 2.0], k3, k2, degrees=(2, 1)), "2 points for 5"),
    (lambda: fit_strassen([512, 512], [1, 1], [1.0, 1.0], k3, k2), "determine only 1"),
    (lambda: fit_strassen([512, 1024], [1.5, 1], [1.0, 2.0], k3, k2), "integers >= 0"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- properties

@settings(max_examples=30, deadline=None, derandomize=True)
@given(mask=st.integers(1, 2**6 - 1), scale=st.lists(st.floats(0.2, 5.0), min_size=6, max_size=6),
       lo=st.integers(50, 500), width=st.integers(400, 4000))
def test_fi_ls_recovers_any_positive_polynomial(mask, scale, lo, width):
    full = TermSet.polynomial(range(-1, 5))
    terms = [t for k, t in enumerate(full.terms) if mask >> k & 1]
    ts = full.subset(terms)
    ref = lo + width / 2
    coef = np.array([scale[k] / ref ** i for k, (i, _) in enumerate(terms)])
    model = fit("FI-LS", poly_measure(ts, coef), ts, (lo, lo + width))
    np.testing.assert_allclose(model.coefficients[0], coef, rtol=1e-6)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(times=st.lists(st.floats(1e-6, 1e3), min_size=1, max_size=20), factor=st.floats(0.01, 100.0))
def test_phi_err_of_a_uniformly_scaled_model(times, factor):
    n = np.arange(1, len(times) + 1)
    model = Scaled(times, factor)
    assert phi_err(model, n, None, times) == pytest.approx((1 - factor) * 100, rel=1e-9, abs=1e-9)
    assert median_ape(model, n, None, times) == pytest.approx(abs(factor - 1) * 100, rel=1e-9, abs=1e-9)


def test_cascade_refuses_a_model_that_dives_below_zero():
    """Real fitting data (blocked Cholesky b=32, one thread): VA-ME fitted 3 points per region exactly
    and met Phi_err and median APE, yet predicted -0.15 ms at n = 160, one of its own sizes."""
    fit = Samples([160, 320, 500, 900, 1200, 2000, 2500, 3200], None,
                  [5.528e-05, 2.5086e-04, 7.6364e-04, 3.6153e-03, 7.8621e-03, 3.36104e-02, 6.77561e-02, 1.446659e-01])
    check = Samples([200, 700, 1500, 3000], None, [1.15353e-04, 1.842468e-03, 1.521084e-02, 1.19275097e-01])
    out = remodel(fit, (160.0, 3200.0), None, TermSet(((3, 0), (1, 0), (0, 0))), check, tol=3.0)
    va_me = next(t for t in out.trials if t.method == "VA-ME")
    assert abs(va_me.phi_err) < 3.0 and va_me.ape < 3.0                 # it met the error criteria ...
    assert not va_me.accepted and "non-positive" in va_me.error         # ... but is not a time model
    assert first_nonpositive(va_me.model, 160.0, 3200.0) is not None
    assert out.accepted and first_nonpositive(out.model, 128.0, 4000.0) is None
    assert out.model.predict(np.array([256.0]), None)[0] == pytest.approx(1.6e-4, rel=0.3)
