"""Fitted models (issue 5): storage round trip, never-raising load, selector override, validation step."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import h5py
import numpy as np
import pytest
import yaml
from db_helpers import edited

from autotune.core.families import as_problem
from autotune.db import load, load_sp
from autotune.models.fit_terms import TermSet
from autotune.models.fitted import FittedEntry, FittedModels, load_fitted, override, save_fitted
from autotune.models.fitting import fit as fit_coefficients
from autotune.select import Candidate

TINY_SPEC = {"name": "tiny", "check": {"gemm": [48, 80], "cholesky": [48, 80]},
             "fit": {"gemm": [32, 40, 56, 72, 96, 112], "cholesky": [32, 40, 56, 72, 96, 112]},
             "budgets": [1], "reps": 2, "seconds": 0.01, "settle": 0.0, "min_seconds": 0.0}


def entry(in_use: bool = True, backend: str = "numpy-openblas", scale: float = 1e-9) -> FittedEntry:
    """A cubic gemm entry T(n) = scale n^3 on [32, 128]."""
    return FittedEntry("gemm", "blas", backend, 1, 0, 0, ((3, 0), (0, 0)), np.array([[scale, 0.0]]),
                       np.array([32.0, 128.0]), "FI-LS", 1.0, 0.5, 40.0, -30.0, "analytical APE 40% > tol 3%",
                       in_use, check_n=np.array([48.0, 80.0]), check_t=np.array([1e-4, 5e-4]),
                       check_analytical=np.array([2e-4, 1e-3]), fit_n=np.array([32.0, 64.0]),
                       fit_t=np.array([3e-5, 2.6e-4]))


@pytest.fixture
def db(tiny_db, tmp_path):
    """A private copy of the tiny probe database (tests here write to it)."""
    path = tmp_path / "sp.h5"
    shutil.copy(tiny_db, path)
    return path


def test_round_trip(db):
    entries = [entry(True), entry(False, "scipy-openblas")]
    save_fitted(db, entries, info={"spec": "test"})
    got = load_fitted(db)
    assert len(got) == 2 and got.info == {"spec": "test"}
    for a, b in zip(entries, got.entries, strict=True):
        assert (a.key, a.terms, a.method, a.reason, a.in_use, a.timestamp) == (b.key, b.terms, b.method, b.reason,
                                                                                b.in_use, b.timestamp)
        np.testing.assert_array_equal(a.coefficients, b.coefficients)
        np.testing.assert_array_equal(a.check_t, b.check_t)
        assert (a.fitted_ape, a.analytical_ape, a.analytical_phi) == (b.fitted_ape, b.analytical_ape, b.analytical_phi)
        assert b.akaike == a.akaike and np.isnan(b.sigma)
    assert got.predict(("blas", "numpy-openblas", 1, 0, 0), (64, 64, 64)) == pytest.approx(1e-9 * 64 ** 3)
    assert len(load(db).records) > 0                      # the BLAS records are kept


def test_entry_from_model_and_noncanonical_terms():
    n = np.linspace(40, 120, 9)
    model = fit_coefficients("FI-LS", (n, None, 2e-9 * n ** 3 + 1e-6), TermSet(((3, 0), (0, 0))), (40, 120))
    e = FittedEntry.from_model("gemm", ("blas", "mkl", 2, 0, 0), model, fitted_ape=0.0, fitted_phi=0.0,
                               analytical_ape=9.0, analytical_phi=9.0, reason="x", in_use=True)
    np.testing.assert_allclose(e.predict(n), model.predict(n))
    swapped = FittedEntry("gemm", "blas", "mkl", 2, 0, 0, ((0, 0), (3, 0)), e.coefficients[:, ::-1], e.edges,
                          "FI-LS", 0, 0, 9, 9, "x", True)
    np.testing.assert_allclose(swapped.predict(n), model.predict(n))
    assert swapped.predict_one(80.0) == pytest.approx(float(model.predict(80.0)))


def test_missing_and_damaged_give_empty(tmp_path, db):
    assert len(load_fitted(tmp_path / "nothing.h5")) == 0
    assert len(load_fitted(db)) == 0                       # no /fitted group yet
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an hdf5 file")
    with pytest.warns(RuntimeWarning, match="fitted models unusable"):
        assert len(load_fitted(bad)) == 0
    save_fitted(db, [entry()])
    with edited(db, "r+") as f:
        del f["fitted/default/0000/coefficients"]
    with pytest.warns(RuntimeWarning, match="fitted models unusable"):
        assert len(load_fitted(db)) == 0


def test_override_only_in_use(db):
    save_fitted(db, [entry(True), entry(False, "scipy-openblas")])
    sp = load_sp(db, refresh=True)
    used, unused = Candidate("blas", "numpy-openblas", 1), Candidate("blas", "scipy-openblas", 1)
    assert override(used, (64, 64, 64), 1.0, sp) == (pytest.approx(1e-9 * 64 ** 3), "fitted")
    assert override(unused, (64, 64, 64), 1.0, sp) == (1.0, "analytical")
    assert override(Candidate("blas", "numpy-openblas", 2), (64, 64, 64), 1.0, sp) == (1.0, "analytical")
    assert override(used, (4000, 4000, 4000), 1.0, sp) == (1.0, "analytical")    # far outside the fit range
    assert override(used, (64, 64, 64), 1.0, object()) == (1.0, "analytical")
    assert FittedModels().predict(("blas", "numpy-openblas", 1, 0, 0), (64,)) is None


class Scaled:
    """System parameters ``factor`` times too slow: a deliberately wrong analytical model."""

    def __init__(self, sp, factor: float = 10.0):
        self.sp, self.table, self.factor = sp, sp.table, factor

    def k(self, *args, **kw):
        return self.factor * self.sp.k(*args, **kw)

    def __getattr__(self, name):             # everything else (has, k_min, ...) as measured
        return getattr(self.sp, name)


def test_validate_replaces_a_wrong_model(db):
    from autotune.install_probe.validate import validate

    spec = {**TINY_SPEC, "families": ["gemm"]}
    report = validate(db, spec, sp=Scaled(load_sp(db, refresh=True)), progress=False)
    used = [e for e in report.entries if e.in_use]
    assert used, report.text()
    for e in used:
        assert e.fitted_ape < e.analytical_ape and e.analytical_ape > 30
    stored = load_fitted(db)
    evidence = [json.loads(e.akaike) for e in stored.entries if e.akaike != "{}"]
    assert evidence, "the AICc evidence (weights, importances) is kept with the fitted entries"
    for ev in evidence:
        weights = [w for _, w in ev["sets"]]
        assert weights == sorted(weights, reverse=True) and 0 < sum(weights) <= 1 + 1e-5   # 6 decimals kept
        assert max(ev["importances"].values()) <= 1 + 1e-5
    assert {e.key for e in stored.in_use} == {e.key for e in used}
    key = used[0].key
    cand = Candidate(*key)
    seconds, source = override(cand, (80, 80, 80), 1.0, load_sp(db, refresh=True))
    assert source == "fitted" and seconds == pytest.approx(used[0].predict_one(80.0))
    assert report.ape_in_use is not None and report.points_scored > 0


def test_cli_validate_end_to_end(db, tmp_path, capsys):
    from autotune.install_probe.cli import main

    before = load(db).records.copy()
    spec_file = tmp_path / "tiny-validate.yaml"
    spec_file.write_text(yaml.safe_dump({"validate": TINY_SPEC}))
    assert main(["--validate", "--db", str(db), "--profile", str(spec_file), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "median APE of the models in use" in out and "measured composed-model risk" in out
    after = load(db)
    np.testing.assert_array_equal(np.sort(after.records, order=["routine", "backend", "x"]),
                                  np.sort(before, order=["routine", "backend", "x"]))
    with h5py.File(db, "r") as f:
        assert "fitted/default" in f and "info" in f["fitted/default"].attrs
    assert "risk" in load_fitted(db).info          # the selector reads the measured risks from here


def test_cli_validate_without_database(tmp_path, capsys):
    from autotune.install_probe.cli import main

    assert main(["--validate", "--db", str(tmp_path / "none.h5"), "--profile", "quick", "--no-progress"]) == 2
    assert "run the probe first" in capsys.readouterr().err


def test_spec_rejects_overlap_and_unknown_keys():
    from autotune.install_probe.validate import SPECS, load_spec

    for name, spec in SPECS.items():
        for fam in spec.families:
            assert not set(spec.check.get(fam, ())) & set(spec.fit.get(fam, ())), name
    with pytest.raises(ValueError, match="overlap"):
        load_spec({"check": {"gemm": [64]}, "fit": {"gemm": [64, 128]}})
    with pytest.raises(ValueError, match="unknown"):
        load_spec({"sizes": [1]})


def test_measured_risk_is_the_composed_models_extra_optimism():
    """The validation step's risk: median measured/predicted of a composed algorithm over the
    library routine's, never below 1; too few check points give none."""
    from autotune.install_probe.validate import Point, measured_risk

    def pts(alg, ratio, sizes=(500, 700, 900)):
        return [Point("cholesky", n, Candidate(alg, "scipy-openblas", 1, 64 if alg == "blocked" else 0), 0.01,
                      0.01 * ratio) for n in sizes]

    assert measured_risk({("cholesky", 500): pts("potrf", 1.1) + pts("blocked", 1.32)}) == \
        {"cholesky": {"blocked": pytest.approx(1.2)}}
    assert measured_risk({("cholesky", 500): pts("potrf", 1.1) + pts("blocked", 0.9)}) == {"cholesky": {"blocked": 1.0}}
    assert measured_risk({("cholesky", 500): pts("potrf", 1.1) + pts("blocked", 2.0, sizes=(500,))}) == {}
    tiny = [Point("cholesky", 16, Candidate("blocked", "scipy-openblas", 1, 8), 1e-6, 5e-6)] * 3
    assert measured_risk({("cholesky", 16): pts("potrf", 1.0) + tiny}) == {}       # timer noise: not counted


def test_selector_charges_the_measured_risk_in_place_of_the_prior(db):
    from autotune.select import rank
    from autotune.select.ranking import COMPOSED_RISK

    def blocked_charge(sp):
        rows = [r for r in rank(as_problem("cholesky", (200,)), sp, 1).ranking
                if r.candidate.algorithm == "blocked" and r.candidate.backend == "scipy-openblas"]
        assert rows
        return [r.seconds / r.predicted for r in rows]

    prior = blocked_charge(load_sp(db, refresh=True))
    assert prior == pytest.approx([COMPOSED_RISK["blocked"]] * len(prior))
    save_fitted(db, [], info={"risk": {"cholesky": {"blocked": 1.02}}})
    assert blocked_charge(load_sp(db, refresh=True)) == pytest.approx([1.02] * len(prior))
    save_fitted(db, [], info={"risk": {"gemm": {"strassen": 1.3}}})     # another family's: the prior
    assert blocked_charge(load_sp(db, refresh=True)) == pytest.approx(prior)


@pytest.mark.parametrize("fitted_t, used", [
    ([1.0, 1.0, 1.0, 1.0], True),      # better everywhere
    ([1.0, 1.0, 1.0, 3.0], False),     # better in the median, 200% off at one check point
])
def test_fitted_model_in_use_only_if_no_worse_at_its_worst_check_point(monkeypatch, fitted_t, used):
    """A fitted series replaces the analytical one (20% off everywhere) only when it is better in the
    median *and* no worse at its worst check point: a median over 4 points hides one wild point."""
    from types import SimpleNamespace

    from autotune.install_probe import remodel_series as v

    from autotune.models.fit_terms import Samples

    check = Samples([200.0, 700.0, 1500.0, 3000.0], None, [1.0, 1.0, 1.0, 1.0])
    model = fit_coefficients("FI-LS", lambda n, a: 1.0, TermSet.polynomial([0]), (100.0, 4000.0))
    scaled = SimpleNamespace(predict=lambda n, a=None: np.interp(n, check.n, fitted_t), termset=model.termset,
                             coefficients=model.coefficients, edges=model.edges, method="FI-LS")
    monkeypatch.setattr(v, "remodel", lambda *a, **k: SimpleNamespace(model=scaled))
    fit = Samples([160.0, 500.0, 900.0, 2500.0], None, [1.0, 1.0, 1.0, 1.0])
    e = v.fit_series("cholesky", Candidate("potrf", "scipy-openblas", 1, 0, 0), check, np.full(4, 1.2), fit, 3.0,
                     "analytical APE 20% > tol 3%")
    assert e.in_use is used and e.fitted_ape == pytest.approx(0.0)


def test_timer_passes_keep_each_points_fastest_sweep(monkeypatch):
    """Timer.many sweeps its points spec.passes times, the second sweep reversed, keeping the fastest."""
    from autotune.install_probe import validate as v

    seen, clock = [], iter([5.0, 1.0, 3.0, 2.0, 4.0, 9.0])

    def fake_runner(family, dims, cand, rng):
        seen.append(dims[0])
        return lambda: 0.0

    monkeypatch.setattr(v, "candidate_runner", fake_runner)
    monkeypatch.setattr(v, "time_point", lambda run, reps, seconds: next(clock))
    spec = v.load_spec({**TINY_SPEC, "passes": 2})
    cand = Candidate("potrf", "scipy-openblas", 1, 0, 0)
    got = v.Timer(spec).many([("cholesky", n, cand) for n in (30, 10, 20)])
    assert seen == [10, 20, 30, 30, 20, 10]
    assert got == {("cholesky", 10, cand): 5.0, ("cholesky", 20, cand): 1.0, ("cholesky", 30, cand): 2.0}


def test_strassen_series_fits_eq_4_10_factors(db):
    """A Strassen series is remodelled in eq. 4.10's form: the analytical model's leaf and addition
    terms weighted by fitted M, A; stored, read back and used by the selector with the SP at hand."""
    from autotune.install_probe.remodel_series import fit_strassen_series

    from autotune.models.fit_terms import Samples
    from autotune.models.gemm import strassen_parts

    def parts(ns):
        ns = np.asarray(ns, float)
        return 1e-10 * ns ** 3, 1e-8 * ns ** 2

    def truth(ns):
        leaves, adds = parts(ns)
        return 1.3 * leaves + 0.6 * adds

    fit_n, check_n = np.array([160.0, 320.0, 500.0, 900.0, 1200.0]), np.array([200.0, 700.0, 1100.0])
    cand = Candidate("strassen", "numpy-openblas", 1, 2, 0)
    e = fit_strassen_series(cand, Samples(check_n, None, truth(check_n)), 0.8 * truth(check_n),
                            Samples(fit_n, None, truth(fit_n)), parts, 3.0, "analytical APE 20% > tol 3%")
    assert e.form == "eq4.10" and e.in_use and e.fitted_ape < 1e-6
    np.testing.assert_allclose(e.coefficients, [[1.3, 0.6]], rtol=1e-9)
    save_fitted(db, [e])
    sp = load_sp(db, refresh=True)
    (back,) = load_fitted(db).entries
    assert back.form == "eq4.10" and back.coefficients.tolist() == e.coefficients.tolist()
    with pytest.raises(ValueError, match="predict_dims"):
        back.predict([500.0])
    leaves, adds = strassen_parts(500, 500, 500, [2], "numpy-openblas", 1, sp, "numba-reference")
    seconds, source = override(cand, (500, 500, 500), 1.0, sp)
    assert source == "fitted" and seconds == pytest.approx(1.3 * leaves[0] + 0.6 * adds[0])
    assert load_fitted(db).predict(e.key, (500, 500, 500)) is None      # eq. 4.10 needs the SP


def test_fitted_model_negative_below_its_sizes_is_used_without_extrapolating_down(monkeypatch):
    """Positive over its fitted sizes but below zero just under them: in use, since no fitted model
    is used below its smallest fitted size (the selector takes the analytical model there)."""
    from types import SimpleNamespace

    from autotune.install_probe import remodel_series as v

    from autotune.models.fit_terms import Samples

    check = Samples([200.0, 700.0, 1500.0], None, [50.0, 550.0, 1350.0])
    model = SimpleNamespace(predict=lambda n, a=None: np.asarray(n, float) - 150.0,
                            termset=TermSet(((1, 0), (0, 0))), coefficients=np.array([[1.0, -150.0]]),
                            edges=np.array([160.0, 3200.0]), method="FI-LS")
    monkeypatch.setattr(v, "remodel", lambda *a, **k: SimpleNamespace(model=model))
    fit = Samples([160.0, 500.0, 900.0, 2500.0], None, [10.0, 350.0, 750.0, 2350.0])
    e = v.fit_series("cholesky", Candidate("potrf", "scipy-openblas", 1, 0, 0), check, 1.2 * check.t, fit, 3.0,
                     "analytical APE 20% > tol 3%")
    assert e.in_use and e.fitted_ape == pytest.approx(0.0)
    assert not e.covers(150.0) and e.covers(160.0) and e.covers(3200.0 * 1.2)


def test_timer_past_its_deadline_times_nothing_more(monkeypatch):
    """Past the deadline Timer.many leaves points untimed (NaN) and counts them; before it, it times all."""
    from autotune.install_probe import validate as v

    monkeypatch.setattr(v, "candidate_runner", lambda family, dims, cand, rng: (lambda: 0.0))
    monkeypatch.setattr(v, "time_point", lambda run, reps, seconds: 1.0)
    spec = v.load_spec(TINY_SPEC)
    cand = Candidate("potrf", "scipy-openblas", 1, 0, 0)
    points = [("cholesky", n, cand) for n in (10, 20)]
    late = v.Timer(spec, deadline=0.0)
    assert all(np.isnan(t) for t in late.many(points).values()) and late.skipped == 2 and late.runs == 0
    assert np.isnan(late("cholesky", 30, cand))
    on_time = v.Timer(spec)
    assert set(on_time.many(points).values()) == {1.0} and on_time.skipped == 0


def test_validate_within_a_spent_budget_stores_what_it_has(db):
    from autotune.install_probe.validate import validate

    report = validate(db, {**TINY_SPEC, "families": ["gemm"]}, progress=False, budget_seconds=0.0)
    assert report.runs == 0 and report.skipped > 0 and report.ape_in_use is None
    assert "time budget reached" in report.text()
    assert load_fitted(db).info["skipped"] == report.skipped


def test_blocked_series_gets_one_model_over_its_blocks(db):
    """A blocked series is fitted once in (n, b) at every other block; at a block it never saw it
    is the polynomial in n of that block (``at``), which the selector reads like any per-block
    entry; the (n, b) record itself (key ANY_PARAM) is stored and read back, never used directly."""
    from autotune.install_probe import remodel_series as rs
    from autotune.install_probe import validate as v

    from autotune.models.fit_terms import Samples

    def truth(n, b):
        n, b = np.asarray(n, float), np.asarray(b, float)
        return 2e-11 * n ** 3 + 3e-10 * n ** 2 * b + 4e-7 * n ** 2 / b + 1e-6

    blocks = [32, 64, 128, 256, 512]
    members = [Candidate("getrf_blocked", "scipy-openblas", 2, b, 0) for b in blocks]
    fitted_at = [c.param for c in rs.fit_blocks(members)]
    assert fitted_at == [32, 128, 512] and rs.fit_blocks(members[:3]) == members[:3]
    fn, fb = (x.ravel() for x in np.meshgrid([160.0, 320.0, 500.0, 900.0, 1200.0, 1800.0], fitted_at))
    cn, cb = (x.ravel() for x in np.meshgrid([200.0, 700.0, 1500.0], blocks))
    group = Candidate("getrf_blocked", "scipy-openblas", 2, rs.ANY_PARAM, 0)
    over = rs.fit_series("lu", group, Samples(cn, cb, truth(cn, cb)), 1.3 * truth(cn, cb),
                        Samples(fn, fb, truth(fn, fb)), 3.0, "analytical APE 30% > tol 3%")
    assert over.over_param and over.fitted_ape < 0.5, str(over)
    unseen = np.isin(cb, [64, 256])
    assert np.allclose(over.predict(cn[unseen], cb[unseen]), truth(cn[unseen], cb[unseen]), rtol=0.01)
    pts = [v.Point("lu", int(n), members[1], 1.3 * float(truth(n, 64)), float(truth(n, 64))) for n in (700, 1500)]
    worse = entry()                                           # an own fit 1% off: the (n, b) model serves
    served = rs._serve(over, members[1], pts, worse, 3.0)
    assert served is not None and Candidate(*served.key) == members[1] and all(j == 0 for _, j in served.terms)
    assert rs._serve(over, members[1], pts, replace(worse, fitted_ape=0.0), 3.0) is None   # its own is better
    save_fitted(db, [replace(over, in_use=False), served])
    back = load_fitted(db)
    assert back.entries[0].over_param and back.entries[0].fit_a.tolist() == fb.tolist()
    got = back.predict(("getrf_blocked", "scipy-openblas", 2, 64, 0), (1000,))
    assert got == pytest.approx(float(truth(1000, 64)), rel=0.01)
    assert back.predict(("getrf_blocked", "scipy-openblas", 2, 256, 0), (1000,)) is None   # not served


def test_validate_fits_a_blocked_series_over_its_blocks(db, tmp_path, monkeypatch):
    """End to end on the LU with made-up times T(n, b): every flagged block gets its own fit, the
    series one (n, b) model on every other block's fitting sizes (none at a block not below n),
    stored with the blocks it serves; without ``over_blocks`` only the per-block fits."""
    from autotune.install_probe import validate as v

    def truth(n, cand):
        b = cand.param if cand.algorithm == "getrf_blocked" else 64
        return 2e-11 * n ** 3 + 3e-10 * n ** 2 * b + 4e-7 * n ** 2 / b

    timed = []

    def runner(family, dims, cand, rng):
        timed.append((dims[0], cand))
        return lambda: truth(dims[0], cand)

    monkeypatch.setattr(v, "candidate_runner", runner)
    monkeypatch.setattr(v, "time_point", lambda run, reps, seconds: run())
    spec = {**TINY_SPEC, "families": ["lu"], "check": {"lu": [200, 300]},
            "fit": {"lu": [48, 100, 160, 240, 360, 420]}, "max_ratio": 1e9}
    per_block = shutil.copy(db, tmp_path / "per_block.h5")       # unfitted, for the comparison
    report = v.validate(db, spec, sp=Scaled(load_sp(db, refresh=True)), progress=False)
    (over,) = [e for e in report.entries if e.over_param]
    assert not over.in_use and over.fitted_ape < 1.0 and "serves blocks" in over.reason, report.text()
    members = sorted({c.param for _, c in timed if c.algorithm == "getrf_blocked"})
    assert members == [16, 32, 64, 128] and sorted(set(over.fit_a)) == [16, 64, 128]
    blocked_fits = [(n, c.param) for n, c in timed if c.algorithm == "getrf_blocked" and n not in (200, 300)]
    assert all(b < n for n, b in blocked_fits)
    be = over.backend
    got = load_fitted(db).predict(("getrf_blocked", be, 1, 32, 0), (250,))
    assert got == pytest.approx(truth(250, Candidate("getrf_blocked", be, 1, 32)), rel=0.02)

    timed.clear()
    report = v.validate(per_block, {**spec, "over_blocks": False}, sp=Scaled(load_sp(per_block, refresh=True)),
                        progress=False)
    assert not any(e.over_param for e in report.entries)
    assert {e.param for e in report.entries if e.algorithm == "getrf_blocked"} == {16, 32, 64, 128}
