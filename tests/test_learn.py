"""On-line refinement: O(1) recording, distrust and recovery, the selector moving away and back, refit."""
from __future__ import annotations

import builtins
import os
import shutil

import numpy as np
import pytest

import autotune
from autotune.core.families import as_problem
from autotune.db import load_sp
from autotune.db.store import load
from autotune.feedback import learn
from autotune.select import Candidate, choose, rank

CAND = Candidate("blas", "numpy-openblas", 1)
OTHER = Candidate("blas", "scipy-openblas", 1)


@pytest.fixture(autouse=True)
def _fresh():
    learn.reset()
    learn.set_learning(None)
    yield
    learn.reset()
    learn.set_learning(None)


def _feed(cand, ratio, times, predicted=1e-3, dims=(256, 256, 256)):
    for _ in range(times):
        learn.record("gemm", dims, cand, predicted, predicted * ratio)


def test_enabled_env_and_flag(monkeypatch):
    monkeypatch.delenv(learn.ENV_VAR, raising=False)
    assert not learn.enabled()
    monkeypatch.setenv(learn.ENV_VAR, "1")
    assert learn.enabled()
    learn.set_learning(False)
    assert not learn.enabled()


def test_record_is_constant_time_and_does_no_io(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("I/O on the call path")

    monkeypatch.setattr(builtins, "open", fail)
    monkeypatch.setattr(os, "replace", fail)
    monkeypatch.setattr(os, "open", fail)
    learn.configure(capacity=50)
    try:
        for i in range(500):
            learn.record("gemm", (64, 64, 64), Candidate("blas", "numpy-openblas", 1 + i % 2), 1e-3, 1.1e-3)
        assert len(learn.observations()) == 50              # bounded ring
        assert learn.stats(CAND).count == 250
        assert len(learn.stats(CAND).recent) == learn.configure().n
    finally:
        learn.configure(capacity=10_000)


def test_welford_statistics():
    ratios = [1.0, 1.1, 0.9, 1.2]
    for r in ratios:
        learn.record("gemm", (64,) * 3, CAND, 1e-3, 1e-3 * r)
    s = learn.stats(CAND)
    assert s.mean == pytest.approx(np.mean(np.log(ratios)))
    assert s.std == pytest.approx(np.std(np.log(ratios), ddof=1))


def test_distrust_after_n_departures_and_recovery():
    v0 = learn.version()
    _feed(CAND, 5.0, 2)
    assert learn.distrust(CAND) is None                   # 2 < N departures
    _feed(CAND, 1.0, 1)                                    # streak broken
    _feed(CAND, 5.0, 2)
    assert learn.distrust(CAND) is None
    _feed(CAND, 5.0, 1)
    assert learn.distrust(CAND) == pytest.approx(5.0)
    assert learn.version() > v0
    assert learn.adjust(CAND, 2.0) == pytest.approx(10.0)
    assert learn.adjust(OTHER, 2.0) == 2.0
    assert learn.ranked_seconds(CAND, 1.0, 1.5) == pytest.approx(5.0)
    assert learn.ranked_seconds(OTHER, 1.0, 1.5) == 1.5
    assert learn.active()
    v1 = learn.version()
    _feed(CAND, 1.05, 2)
    assert learn.distrust(CAND) == pytest.approx(5.0)      # not yet N in line
    _feed(CAND, 1.05, 1)
    assert learn.distrust(CAND) is None
    assert learn.version() > v1


def test_small_predictions_do_not_move_trust():
    _feed(CAND, 5.0, 5, predicted=1e-6)
    assert learn.distrust(CAND) is None
    assert len(learn.observations()) == 5


def test_distrust_expires(monkeypatch):
    learn.configure(ttl=10.0)
    _feed(CAND, 5.0, 3)
    assert learn.distrust(CAND) is not None
    now = learn.time.monotonic()
    monkeypatch.setattr(learn.time, "monotonic", lambda: now + 11.0)
    learn.version()
    assert learn.distrust(CAND) is None
    learn.configure(ttl=600.0)


def _slow_down_and_recover(family, dims, sp, threads):
    """Through the real selector (``choose``, cached decisions keyed on learn.version())."""
    chosen = choose(as_problem(family, dims), sp, threads).chosen
    pred = next(r.predicted for r in choose(as_problem(family, dims), sp, threads).ranking if r.candidate == chosen)
    for _ in range(4):                                     # the chosen candidate runs 5x slower
        learn.record(family, dims, chosen, pred, 5 * pred)
    moved = choose(as_problem(family, dims), sp, threads).chosen
    assert moved != chosen
    for _ in range(3):                                     # the slowdown ends
        learn.record(family, dims, chosen, pred, 1.02 * pred)
    assert choose(as_problem(family, dims), sp, threads).chosen == chosen
    return chosen, moved


def test_selector_moves_away_and_back(tiny_db):
    with autotune.options(db=str(tiny_db), threads=2):
        sp = load_sp(str(tiny_db))
        _slow_down_and_recover("gemm", (256, 256, 256), sp, 2)
        _slow_down_and_recover("cholesky", (256,), sp, 2)


def test_tuned_calls_record_when_learning(tiny_db):
    """With learning on, tuned calls append their measured time (and still return numpy's result)."""
    learn.set_learning(True)
    a = np.random.default_rng(0).standard_normal((96, 96))
    with autotune.options(db=str(tiny_db)):
        np.testing.assert_allclose(autotune.tuned_gemm(a, a), a @ a)
        spd = a @ a.T + 96 * np.eye(96)
        autotune.tuned_cholesky(spd)
    assert [e[2] for e in learn.observations()] == ["gemm", "cholesky"]


def test_observe_uses_pure_model_time(tiny_db):
    dec = rank(as_problem("gemm", (256, 256, 256)), load_sp(str(tiny_db)), 2)
    learn.observe(dec, 1.0)
    (entry,) = learn.observations()
    pred = next(r.predicted for r in dec.ranking if r.candidate == dec.chosen)
    assert entry[4] == dec.chosen and entry[5] == pred


def test_flush_refit_and_load_learned(tiny_db, tmp_path):
    db = tmp_path / "sp.h5"
    shutil.copy(tiny_db, db)
    before = load(db, check_machine=False).records
    for n in (64, 128, 256, 512, 1024):
        for _ in range(2):
            learn.record("gemm", (n, n, n), CAND, 1e-3, 2e-3, db=str(db))
    learn.record("gemm", (64, 64, 64), OTHER, 1e-3, 1e-3, db=str(db))   # one point: not refitted
    assert learn.flush() == 11
    assert learn.flush() == 0                              # nothing new
    assert len(learn.read_log(db)) == 11
    summary = learn.refit(db)
    assert summary["observations"] == 11 and len(summary["corrections"]) == 1
    got = learn.load_learned(db)
    assert set(got) == {CAND}
    assert got[CAND].scale == pytest.approx(2.0)
    assert got[CAND].factor(300) == pytest.approx(2.0, rel=1e-6)
    assert learn.ranked_seconds(CAND, 1.0, 1.5, (300, 300, 300), got) == pytest.approx(2.0)
    assert learn.ranked_seconds(OTHER, 1.0, 1.5, (300, 300, 300), got) == 1.5
    after = load(db, check_machine=False).records
    np.testing.assert_array_equal(np.sort(before, order=["routine", "x"]), np.sort(after, order=["routine", "x"]))


def test_refit_missing_db_and_damaged(tmp_path):
    assert learn.refit(tmp_path / "none.h5")["error"] == "no database"
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5")
    with pytest.warns(RuntimeWarning):
        assert learn.load_learned(bad) == {}
    assert learn.load_learned(tmp_path / "none.h5") == {}


def test_cli_refit(tiny_db, tmp_path, capsys):
    from autotune.cli.command import main

    db = tmp_path / "sp.h5"
    shutil.copy(tiny_db, db)
    for _ in range(3):
        learn.record("cholesky", (128,), Candidate("potrf", "scipy-openblas", 1), 1e-3, 1.5e-3, db=str(db))
    learn.flush()
    assert main(["refit", "--db", str(db)]) == 0
    assert "x1.500" in capsys.readouterr().out
