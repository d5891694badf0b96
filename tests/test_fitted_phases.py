"""Fitted phase factors of the distributed models: fitting, storage, use in the plan ranking."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
from db_helpers import edited, platform_db

from autotune.core.families import as_problem
from autotune.core.plans import Plan
from autotune.models.fitted_phases import (
    PhaseFactor,
    PhaseFactors,
    fit_phase_factors,
    load_phase_factors,
    save_phase_factors,
)
from autotune.select.distributed import predict, rank_plans


def _row(alg, pred, meas, family="gemm"):
    return {"family": family, "algorithm": alg, "predicted": pred, "measured": meas}


def test_factor_is_the_geometric_median_and_reduces_the_error():
    rng = np.random.default_rng(0)
    rows = [_row("summa", {"compute": 1.0, "collection": 0.01},
                 {"compute": 1.3 * np.exp(rng.normal(0, 0.03)), "collection": 0.05 * np.exp(rng.normal(0, 0.1))})
            for _ in range(9)]
    rows.append(_row("bsr", {"compute": 1.0}, {"compute": 0.9}))          # one run: no factor
    got = {(f.algorithm, f.phase): f for f in fit_phase_factors(rows)}
    assert set(got) == {("summa", "compute"), ("summa", "collection")}
    assert got["summa", "compute"].factor == pytest.approx(1.3, rel=0.05)
    assert got["summa", "collection"].factor == pytest.approx(5.0, rel=0.15)
    for f in got.values():
        assert f.points == 9 and f.ape_after < f.ape_before


def test_apply_scales_each_fitted_phase_and_the_total_by_its_own_factor():
    f = PhaseFactors([PhaseFactor("gemm", "summa", "collection", 4.0, 3, 0.1, 75.0, 5.0),
                      PhaseFactor("gemm", "summa", "total", 1.2, 3, 0.1, 20.0, 5.0)])
    out = f.apply("gemm", "summa", {"distribution": 1.0, "communication": 0.0, "compute": 2.0,
                                    "collection": 0.5, "total": 3.5})
    assert out["collection"] == 2.0 and out["compute"] == 2.0 and out["total"] == pytest.approx(4.2)
    same = {"compute": 1.0, "total": 1.0}
    assert f.apply("gemm", "bsr", same)["total"] == 1.0
    # the phases' change does not move the total (a phase may hold waits off the critical path)
    only = PhaseFactors([PhaseFactor("gemm", "summa", "collection", 4.0, 3, 0.1, 75.0, 5.0)])
    assert only.apply("gemm", "summa", {"compute": 2.0, "collection": 1.0, "total": 2.5})["total"] == 2.5
    assert PhaseFactors().apply("gemm", "summa", same) is same


def _save_three_rank_contention(path) -> None:
    """2 cores: 2 busy ranks run free; 3: the mean rank 1.5x slower, the slowest 2x, the fastest
    not at all; 4: every rank 2x."""
    from autotune.db.contention import save_contention, series

    def f(q, stat):
        return {3: {"mean": 1.5, "max": 2.0, "min": 1.0}[stat], 4: 2.0}.get(q, 1.0)

    rows = [(q, n, series(pat, stat), f(q, stat)) for pat in ("square", "rankb") for n in (256, 1024)
            for stat in ("mean", "max", "min") for q in (1, 2, 3, 4)]
    q, n, pat, t = zip(*rows, strict=True)
    save_contention(path, "test-P4", q, n, t, pattern=pat)


def test_stored_factors_change_the_prediction_and_the_ranking(tiny_db, tmp_path):
    path, sp, cp = platform_db(tiny_db, tmp_path)
    plan = Plan("summa", 2, 1, 2, b=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        before = predict(as_problem("gemm", (512, 512, 512)), plan, sp, cp)
        save_phase_factors(path, "test-P4", [PhaseFactor("gemm", "summa", "compute", 3.0, 4, 0.1, 66.0, 3.0)])
        after = predict(as_problem("gemm", (512, 512, 512)), plan, sp, cp)
        analytical = predict(as_problem("gemm", (512, 512, 512)), plan, sp, cp, fitted=False)
        dec = rank_plans(as_problem("gemm", (512, 512, 512)), 4, sp, cp, cores=4)
    assert after["compute"] == pytest.approx(min(3.0 * before["compute"], after["total"]))   # held at the total
    assert analytical == before
    summa = [r for r in dec.ranking if r.plan.algorithm == "summa"]
    assert summa and all(r.phases["compute"] == pytest.approx(min(3.0 * r.model["compute"], r.seconds))
                         for r in summa)


def test_missing_or_damaged_factors_mean_the_analytical_model(tmp_path, tiny_db):
    assert not load_phase_factors(tmp_path / "absent.h5", "k")
    path = tmp_path / "db.h5"
    shutil.copy(tiny_db, path)
    save_phase_factors(path, "k", [PhaseFactor("gemm", "bsr", "compute", 1.1, 2, 0.0, 10.0, 1.0)])
    assert load_phase_factors(path, "k") and not load_phase_factors(path, "other")
    with edited(path, "a") as f:
        f["fitted_phases/k"].attrs["factors"] = "not json"
    with pytest.warns(RuntimeWarning, match="phase factors"):
        assert not load_phase_factors(path, "k")


def test_per_process_count_factor_wins_over_the_pooled_one():
    rows = [{**_row("cbsr", {"compute": 1.0, "total": 1.0}, {"compute": 1.0, "total": 1.0}), "p": 2}
            for _ in range(2)]
    rows += [{**_row("cbsr", {"compute": 1.0, "total": 1.0}, {"compute": 2.0, "total": 2.0}), "p": 4}
             for _ in range(4)]
    f = PhaseFactors(fit_phase_factors(rows))
    assert f.factor("gemm", "cbsr", "compute", 4) == pytest.approx(2.0)
    assert f.factor("gemm", "cbsr", "compute", 2) == 1.0            # fitted at p=2: no factor needed
    assert f.factor("gemm", "cbsr", "compute", 3) == pytest.approx(2.0)   # pooled over p
    assert f.apply("gemm", "cbsr", {"compute": 1.0, "total": 1.0}, p=4)["total"] == pytest.approx(2.0)


def test_ranks_sharing_a_core_compute_slowest_and_the_rank_alone_waits_for_them(tiny_db, tmp_path):
    """3 ranks on 2 cores (``contention.lockstep``): two share a core, so compute is the slowest
    rank's 2x; BSR's rank alone on a core waits the difference in the gather (collection), off the
    total; SUMMA's pair on one core makes every step 2x too."""
    path, sp, cp = platform_db(tiny_db, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        plans = Plan("bsr", 3, 3, 1), Plan("summa", 3, 1, 3, b=64)
        base = [predict(as_problem("gemm", (512, 512, 512)), plan, sp, cp, fitted=False) for plan in plans]
        _save_three_rank_contention(path)
        bsr, summa = (predict(as_problem("gemm", (512, 512, 512)), plan, sp, cp, fitted=False) for plan in plans)
    assert bsr["compute"] == pytest.approx(2.0 * base[0]["compute"])
    assert bsr["collection"] - base[0]["collection"] == pytest.approx(base[0]["compute"])     # 2x - 1x
    assert bsr["total"] - base[0]["total"] == pytest.approx(base[0]["compute"])               # compute only
    assert summa["compute"] == pytest.approx(2.0 * base[1]["compute"], rel=0.02)
    assert summa["total"] - base[1]["total"] >= base[1]["compute"]


def test_contention_round_trip_through_the_shared_reader(tmp_path, tiny_db):
    """Contention data uses the same cached, never-raising reader as the phase factors."""
    from autotune.db.contention import load_contention, save_contention

    path = tmp_path / "db.h5"
    shutil.copy(tiny_db, path)
    assert not load_contention(path, "k").available
    save_contention(path, "k", p=[1, 2, 1, 2], n=[256, 256, 1024, 1024], t=[1.0, 1.5, 2.0, 2.2])
    c = load_contention(path, "k")
    assert c.available and c.factor(2, 256) == pytest.approx(1.5) and c.factor(2, 1024) == pytest.approx(1.1)
    assert c.factor(1, 512) == 1.0
    with edited(path, "a") as f:
        del f["contention/k/t"]
    with pytest.warns(RuntimeWarning, match="contention"):
        assert not load_contention(path, "k").available


def test_the_roots_solo_phases_run_at_the_uncontended_k(tiny_db, tmp_path):
    """``contention.alone``: Cholesky's distribution and collection (the root's moves while the other
    ranks wait in the scatter and gather) keep the uncontended k; its loop runs contended, and the
    total is their sum again."""
    from autotune.db.contention import ContendedSP, load_contention
    from autotune.models import distributed_cholesky as dc

    path, sp, cp = platform_db(tiny_db, tmp_path)
    plan = Plan("cholesky", 3, 1, 3, b=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        base = predict(as_problem("cholesky", (768,)), plan, sp, cp, fitted=False)
        _save_three_rank_contention(path)
        chol = predict(as_problem("cholesky", (768,)), plan, sp, cp, fitted=False)
        slow = ContendedSP(sp, load_contention(path, "test-P4"), 3, "max")
        contended = dc.model(768, plan, slow, cp)
        moves = dc._moves(768, 1, 3, 64, 3, slow, cp, plan.backend, plan.threads)   # at the contended k
    assert moves[0] > base["distribution"]          # what the contended k would say
    assert chol["distribution"] == pytest.approx(base["distribution"])
    assert chol["collection"] == pytest.approx(base["collection"])
    assert chol["compute"] > 1.5 * base["compute"]
    loop = contended["total"] - contended["distribution"] - contended["collection"]
    assert chol["total"] == pytest.approx(base["distribution"] + loop + base["collection"])
