"""LoOgGP as a model (models/comm_fit.LoOgGP), its held-out comparison with Hockney on the PRTT
runs, and the choice that prices trains of messages (models/comm_train)."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.db.comm import POINT_DTYPE, PRTT_DTYPE
from autotune.models import comm_train
from autotune.models.comm_fit import LoOgGP, fit_loggp, loggp_heldout

SIZES = 2 ** np.arange(3, 21)
N = 8


def one_way(s):
    return 2e-6 + 1e-10 * (s - 1)


def gap(s):                 # consecutive sends overlap: a sender issues the next long before delivery
    return 0.5e-6 + 1e-10 * (s - 1)


def _prtt() -> np.ndarray:
    s = SIZES.astype(float)
    d = 2 * one_way(s)
    o = 0.3e-6 + 0.5e-10 * (s - 1)
    rows = [(int(m), 2 * one_way(m), 2 * one_way(m) + (N - 1) * gap(m), 2 * one_way(m) + (N - 1) * (dd + oo), N, dd)
            for m, dd, oo in zip(s, d, o, strict=True)]
    return np.array(rows, dtype=PRTT_DTYPE)


def _pingpong() -> tuple[np.ndarray, np.ndarray]:
    return SIZES.astype(float), one_way(SIZES.astype(float))


class FakeCP:
    def __init__(self, prtt):
        self.prtt, self.loggp, self.fits = prtt, fit_loggp(prtt), None

    def points(self, primitive):
        pts = np.zeros(len(SIZES), dtype=POINT_DTYPE)
        pts["nbytes"], pts["t_mean"] = _pingpong()
        return pts


def test_loggp_recovers_one_way_gap_and_trains():
    model = LoOgGP.of(fit_loggp(_prtt()))
    s = np.array([100.0, 5000.0, 300000.0])
    assert model.one_way(s) == pytest.approx(one_way(s), rel=1e-6)
    assert model.gap(s) == pytest.approx(gap(s), rel=1e-6)
    assert model.train(5, s) == pytest.approx(one_way(s) + 4 * gap(s), rel=1e-6)
    assert LoOgGP.of(None) is None and LoOgGP.of({"regimes": []}) is None


def test_heldout_comparison_favours_loggp_on_trains_of_small_messages():
    held = loggp_heldout(_prtt(), _pingpong())
    assert len(held["nbytes"]) == len(SIZES) // 2 - 1
    assert np.all(held["loggp_train"] < 1e-6) and np.all(held["loggp_one"] < 1e-6)
    small = held["nbytes"] < 4096
    assert np.all(held["hockney_train"][small] > 0.3)       # n one-way times: no overlap
    assert np.all(held["hockney_one"] < 1e-6)                # a single message: both exact
    assert loggp_heldout(_prtt()[:3], _pingpong())["nbytes"].size == 0


def test_trains_priced_by_loggp_where_it_won_else_hockney():
    cp = FakeCP(_prtt())
    s = np.array([64.0, 1e5, 1e6, 1e8])
    hockney = np.full(s.shape, -1.0)
    got = comm_train.train_time(cp, 3, s, hockney)
    ch = comm_train.choice(cp)
    assert ch is comm_train.choice(cp)                       # cached per CommParams
    won = ch.uses_loggp(s)
    assert won[0] and not won[-1]                           # beyond the PRTT series: Hockney
    assert np.all(got[won] == pytest.approx(one_way(s[won]) + 2 * gap(s[won]), rel=1e-6))
    assert np.all(got[~won] == -1.0)
    assert comm_train.train_time(object(), 3, s, hockney).tolist() == hockney.tolist()   # nothing measured


def test_compare_reports_each_band():
    cmp = comm_train.compare(_prtt(), _pingpong())
    assert len(cmp["loggp_train"]) == len(comm_train.BANDS) and sum(cmp["sizes"]) == len(SIZES) // 2 - 1
    assert cmp["loggp_train"][0] < cmp["hockney_train"][0]
