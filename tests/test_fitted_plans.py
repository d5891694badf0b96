"""Fitted T(n, p) of the distributed plans (001 eq. 4.15): fitting, held-out choice, storage and use."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from autotune.install_probe.phase_calibration import plan_fits
from db_helpers import platform_db

from autotune.core.families import as_problem
from autotune.core.plans import Plan
from autotune.models.fitted_phases import PhaseFactor, load_phase_factors, save_phase_factors
from autotune.models.fitted_plans import PlanFits, Run, SeriesKey, fit_plan_models
from autotune.select.distributed import predict, rank_plans

SIZES = (512, 768, 1024, 1280)
BSR = Plan("bsr", 2, 2, 1)


def _t(n, p):
    """A plan's time: its flops over the ranks, a gather growing with n^2, a fixed cost."""
    return 2e-10 * n ** 3 / p + 1e-7 * n ** 2 + 1e-3


def _runs(procs, factor_error=1.3, noise=0.02, sizes=SIZES, seed=0):
    rng = np.random.default_rng(seed)
    key = SeriesKey.of("gemm", BSR)
    return [Run(key, n, p, _t(n, p) * np.exp(rng.normal(0, noise)), factor_error * _t(n, p))
            for n in sizes for p in procs for _ in range(2)]


def test_fitted_on_two_process_counts_it_predicts_a_third_and_replaces_a_worse_factor_model():
    (fit,) = fit_plan_models(_runs((2, 4)))
    assert fit.procs == (2, 4) and fit.sizes == SIZES and fit.points == 16
    assert (3, -1) in fit.terms                      # the flops over the ranks are always a term
    assert fit.in_use and fit.ape_fit < 5 < fit.ape_factor
    n = np.array(SIZES)
    assert np.allclose(fit.predict(n, 3), _t(n, 3), rtol=0.05)
    t, used = PlanFits([fit]).seconds("gemm", Plan("bsr", 3, 3, 1), 1100)
    assert used is fit and t == pytest.approx(_t(1100, 3), rel=0.05)


def test_the_factor_model_stays_where_it_predicts_the_held_out_orders_better():
    (fit,) = fit_plan_models(_runs((2, 4), factor_error=1.0, noise=0.05))
    assert not fit.in_use and fit.ape_factor < fit.ape_fit
    assert PlanFits([fit]).get("gemm", BSR) is None


def test_one_process_count_fits_n_alone_and_serves_only_that_p_within_the_orders_fitted():
    (fit,) = fit_plan_models(_runs((2,)))
    assert {j for _, j in fit.terms} == {0} and (3, 0) in fit.terms
    models = PlanFits([fit])
    assert models.seconds("gemm", BSR, 1024) is not None
    assert models.seconds("gemm", Plan("bsr", 3, 3, 1), 1024) is None      # p not fitted
    assert models.seconds("gemm", BSR, 2048) is None                       # past 1.25 x the largest order
    assert models.seconds("gemm", BSR, 256) is None
    assert models.seconds("gemm", Plan("bsr", 2, 1, 2), 1024) is None      # another grid: another series
    assert models.seconds("cholesky", BSR, 1024) is None


def test_a_series_needs_three_orders():
    assert fit_plan_models(_runs((2, 4), sizes=(512, 1024))) == []


def test_calibration_runs_are_fitted_stored_and_replace_the_factored_prediction(tiny_db, tmp_path):
    path, sp, cp = platform_db(tiny_db, tmp_path)
    plan = Plan("bsr", 2, 2, 1, threads=1, backend="numpy-openblas")
    rows = [{"family": "gemm", "n": n, "rows": [
        {"plan": str(plan), "family": "gemm", "algorithm": "bsr", "p": 2, "series": vars(SeriesKey.of("gemm", plan)),
         "model": {"total": _t(n, 2) / 1.5}, "measured": {"total": _t(n, 2), "runs": [_t(n, 2), 1.01 * _t(n, 2)]}},
        {"plan": "local", "family": "gemm", "algorithm": "local", "p": 1,
         "model": {"total": 1.0}, "measured": {"total": 1.0, "runs": [1.0]}}]} for n in SIZES]
    factors = [PhaseFactor("gemm", "bsr", "compute", 1.2, 8, 0.0, 30.0, 20.0)]
    fits = plan_fits(rows, factors)
    assert [f.series.algorithm for f in fits] == ["bsr"] and fits[0].in_use
    save_phase_factors(path, "test-P4", factors, plans=fits)
    stored = load_phase_factors(path, "test-P4")
    assert stored.plans.fits == fits
    problem = as_problem("gemm", (1000, 1000, 1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = predict(problem, plan, sp, cp)
        model = predict(problem, plan, sp, cp, fitted=False)
        dec = rank_plans(problem, 4, sp, cp, cores=4)
        other = predict(as_problem("gemm", (1000, 1000, 900)), plan, sp, cp)     # not square: the factors
    assert got["total"] == pytest.approx(_t(1000, 2), rel=0.03)
    assert got["compute"] / got["total"] == pytest.approx(model["compute"] / model["total"])
    factored = 1.2 * predict(as_problem("gemm", (1000, 1000, 900)), plan, sp, cp, fitted=False)["compute"]
    assert other["compute"] == pytest.approx(min(factored, other["total"]))     # a phase is held at the total
    ranked = next(r for r in dec.ranking if r.plan == plan)
    note = next(c.note for c in ranked.corrections if c.step == "calibration")
    assert note.startswith("fitted T(n, p) = ") and "held-out APE" in note


def test_validation_reports_the_choice_the_phase_factors_alone_make():
    from autotune.benchmarks.mpi_validate import markdown, summarise
    from autotune.core.plans import PHASES

    def row(plan, predicted, factored, measured):
        zero = dict.fromkeys(PHASES, 0.0)
        return {"plan": plan, "predicted": {**zero, "total": predicted}, "model": {**zero, "total": predicted},
                "factored": factored, "measured": {**zero, "total": measured}}

    results = [{"family": "gemm", "n": 512, "nprocs": 2, "choice": "fitted",
                "rows": [row("fitted", 1.0, 2.0, 1.0), row("factored", 2.0, 1.0, 1.5)]}]
    summary = summarise(results)
    assert summary["mean_regret"] == 1.0 and summary["mean_regret_factored"] == pytest.approx(1.5)
    assert summary["selection"][0]["factored"] == "factored"
    assert "with the phase factors alone (no fitted T(n, p)) 1.500" in markdown(results, summary)


def test_a_fit_that_misses_its_held_out_runs_by_more_than_the_cap_stays_unused():
    from dataclasses import replace

    from autotune.core.assumptions import PLAN_FIT_MAX_APE

    (fit,) = fit_plan_models(_runs((2, 4)))
    loose = replace(fit, ape_fit=PLAN_FIT_MAX_APE + 1, ape_factor=10 * PLAN_FIT_MAX_APE)
    assert fit.in_use and not loose.in_use and PlanFits([loose]).get("gemm", BSR) is None
