"""The load-balancing policy (002): moving averages against Table 5.3, weight rules, shares, the
interval, the stop rule and the cost-benefit gate (pure: no MPI)."""
import socket

import numpy as np
import pytest

from autotune.distributed import collective
from autotune.distributed.balance import busy, moved_cells
from autotune.distributed.plan import Mark
from autotune.feedback.balance import (
    Balancer,
    MovingAverage,
    Policy,
    moving_averages,
    policy_of,
    shares,
    step_time,
    weights,
)
from autotune.feedback.speeds import HostSpeeds
from autotune.models.movement import LinkCost

# 002 Table 5.3: days 1..33, the data, and the EMA and SMA columns (window 10; "-" while it fills)
DATA = [101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 98, 96, 94, 92, 90, 65, 63, 61, 62, 64, 66,
        68, 70, 58, 56, 54, 52, 50, 48, 46, 44, 42]
EMA = [106.3182, 107.1694, 105.5023, 103.7746, 101.9974, 100.1797, 98.3288, 92.2690, 86.9474, 82.2297,
       78.5516, 75.9058, 74.1048, 72.9948, 72.4503, 69.8230, 67.3097, 64.8898, 62.5462, 60.2650, 58.0350,
       55.8468, 53.6929, 51.5669]
SMA = [105.5, 106.5, 106.1, 105.4, 104.4, 103.1, 101.5, 97.3, 92.8, 88.0, 83.2, 78.5, 75.3, 72.5, 70.1,
       66.7, 63.3, 62.2, 61.1, 60.0, 58.6, 56.8, 54.6, 52.0]


@pytest.mark.parametrize("kind, column", [("ema", EMA), ("sma", SMA)])
def test_table_5_3_columns(kind, column):
    got = moving_averages(kind, DATA, 10)
    assert got[:9] == [None] * 9
    np.testing.assert_allclose(got[9:], column, atol=5e-5)


def test_lwma_follows_its_formula():
    # eq. 3.6 with weights 1..W oldest to newest (Table 5.3's LWMA column does not follow it)
    got = moving_averages("lwma", DATA, 10)
    for day in range(9, len(DATA)):
        window = np.array(DATA[day - 9:day + 1], float)
        assert got[day] == pytest.approx(window @ np.arange(1, 11) / 55)
    assert moving_averages("lwma", range(1, 11), 10)[-1] == pytest.approx(7.0)


def test_average_reset_and_bad_arguments():
    avg = MovingAverage("ema", 3)
    for x in (1, 2, 3):
        avg.push(x)
    assert avg.value is not None and avg.spread > 0
    avg.reset()
    assert avg.value is None and avg.push(5) is None
    with pytest.raises(ValueError):
        MovingAverage("cma", 3)
    with pytest.raises(ValueError):
        MovingAverage("sma", 0)


def test_weight_rules():
    t = np.array([1.0, 2.0])
    np.testing.assert_allclose(weights(t), [3.0, 1.5])                         # eq. 4.1
    np.testing.assert_allclose(weights(t, "half_step"), [3 / 1.25, 3 / 1.75])  # eq. 4.3
    np.testing.assert_allclose(weights([1.0, 0.0, 2.0]), [3.0, 0.0, 1.5])      # an inactive rank reports 0
    w = weights(t, "half_step")
    assert 1 < w[0] / w[1] < 2                 # half a step towards the inverse ratio
    with pytest.raises(ValueError):
        weights(t, "sum")


def test_shares_proportional_with_a_minimum():
    assert shares(300, [2.0, 1.0]).tolist() == [200, 100]
    assert shares(10, [100.0, 1.0], minimum=3).tolist() == [7, 3]
    assert shares(7, [1.0, 1.0, 1.0]).sum() == 7
    with pytest.raises(ValueError):
        shares(5, [1.0, 1.0, 1.0], minimum=2)


def test_moved_cells_between_block_shares():
    v = moved_cells([5, 5], [4], [7, 3], [4])
    assert v.tolist() == [[20, 0], [8, 12]]
    v = moved_cells([2, 2], [3, 3], [2, 2], [3, 3])
    assert (v == np.diag(np.full(4, 6))).all()


def test_link_cost_prices_the_busiest_rank_by_link():
    link = LinkCost(1e-6, 1e-9, 1e-4, 1e-7)
    vol = np.array([[0, 1000], [0, 0]])
    assert link.move(vol, [0, 0]) == pytest.approx(1e-6 + 1e-6)
    assert link.move(vol, [0, 1]) == pytest.approx(1e-4 + 1e-4)


def _balancer(known: bool = True, **kw) -> Balancer:
    """A balancer with a full window (and, if ``known``, two quiet pairs of windows behind it)."""
    policy = Policy(**{"window": 4, "interval": "fixed", **kw})
    b = Balancer(policy, minimum=1)
    for _ in range(policy.window):
        b.sample(1.0)
    if known:
        b.jitter.extend([0.0, 0.0])
    return b


def test_no_move_before_the_noise_is_known():
    b = _balancer(known=False)
    for _ in range(2):
        d = b.decide([1e-6, 3e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
        assert not d.move and d.reason == "measuring the noise"
        b.since += 4
    assert b.decide([1e-6, 3e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0).move


def test_decide_moves_to_the_speed_ratio():
    b = _balancer()
    d = b.decide([1e-6, 2e-6], [0, 0], [300, 300], [100], remaining=1000, move_cost=lambda r, c: 1e-3)
    assert d.move and d.rows.tolist() == [400, 200] and d.cols.tolist() == [100]
    assert d.now == pytest.approx(step_time([1e-6, 2e-6], [300, 300], [100]))
    assert d.gain == pytest.approx(1000 * (d.now - d.new * 1.05))   # counted beyond the noise (tol)
    b.moved()
    assert b.avg.value is None and b.since == 0        # the window restarts


def test_grid_shares_rows_and_columns():
    b = _balancer()
    # 2 x 2 grid, the second process column twice as slow: columns shift, rows stay
    d = b.decide([1e-6, 2e-6, 1e-6, 2e-6], [0] * 4, [50, 50], [60, 60], 10**6, lambda r, c: 0.0)
    assert d.move and d.rows.tolist() == [50, 50] and d.cols.tolist() == [80, 40]


def test_gate_refuses_a_move_that_costs_more_than_it_saves():
    b = _balancer()
    d = b.decide([1e-6, 2e-6], [0, 0], [300, 300], [100], remaining=10, move_cost=lambda r, c: 1.0)
    assert not d.move and d.reason.startswith("gate")
    ungated = _balancer(gate=False).decide([1e-6, 2e-6], [0, 0], [300, 300], [100], 10, lambda r, c: 1.0)
    assert ungated.move


def test_equal_rates_within_noise_never_move():
    b = _balancer()
    rng = np.random.default_rng(1)
    for _ in range(20):
        rates = 1e-6 * (1 + 0.02 * rng.standard_normal(2))
        d = b.decide(rates, [0.02, 0.02], [300, 300], [100], 10**6, lambda r, c: 0.0)
        assert not d.move
        b.since += 4


def test_noisy_windows_widen_the_tolerance():
    b = _balancer()
    # 8% apart, but each rank's samples spread 30%: 2 x 0.3 / sqrt(4) = 30% noise
    d = b.decide([1e-6, 1.08e-6], [0.3, 0.3], [300, 300], [100], 10**6, lambda r, c: 0.0)
    assert not d.move and "30.0%" in d.reason


def test_wandering_window_averages_widen_the_tolerance():
    b = _balancer(known=False)
    # each window alone looks precise (spread 0), but the averages wander 20% from window to window
    for rates in ([1e-6, 1e-6], [1.2e-6, 1e-6], [1e-6, 1e-6]):
        d = b.decide(rates, [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
        b.since += 4
    assert b.noise([0, 0]) == pytest.approx(2 * 1.4826 * np.median([0.2, 1 - 1 / 1.2]) / np.sqrt(2))
    d = b.decide([1.25e-6, 1e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
    assert not d.move and "noise" in d.reason
    b.moved()                                        # the wander is the machine's: kept across moves
    assert b.noise([0, 0]) > 0.2
    b.jitter += [0.01] * 6 + [2.0]                   # one real change among quiet pairs: not noise
    assert b.noise([0, 0]) < 0.2


def test_stop_rule_and_restart_on_drift():
    b = _balancer(stable_windows=2)
    for _ in range(2):
        d = b.decide([1e-6, 1e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
        b.since += 4
    assert b.stopped
    d = b.decide([1.01e-6, 1e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
    assert not d.move and d.reason.startswith("stopped")
    d = b.decide([1e-6, 2e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)    # drift: look again
    assert d.move and not b.stopped


def test_growing_interval():
    b = _balancer(interval="growing")
    assert b.interval() == 4
    b.moved()
    assert b.interval() == 8
    for _ in range(4):
        b.sample(1.0)
    d = b.decide([1e-6, 2e-6], [0, 0], [300, 300], [100], 10**6, lambda r, c: 0.0)
    assert not d.move and d.reason == "interval not due"
    b.seen = None
    fixed = _balancer(interval="fixed")
    fixed.moved()
    assert fixed.interval() == 4


def test_policy_of():
    assert policy_of(None) is None and policy_of(False) is None
    assert policy_of(True) == Policy()
    assert policy_of("sma").average == "sma"
    for bad in ("cma", 3, Policy):
        with pytest.raises(ValueError):
            policy_of(bad)
    with pytest.raises(ValueError):
        Policy(timing="wall")


def test_host_speeds_replace_the_probe_once_calls_disagree():
    hs = HostSpeeds(Policy(window=2))
    probe = {"h0": 10.0, "h1": 10.0}
    assert hs.effective(probe, "h0") == (probe, "probe")
    # h1 now does half the work per busy second of h0 (its quota dropped after the probe)
    for _ in range(2):
        hs.observe([("h0", 1.0, 0.5), ("h1", 2.0, 0.5)], root=0)
    speeds, source = hs.effective(probe, "h0")
    assert speeds == {"h0": 10.0, "h1": 5.0} and source.startswith("run time")
    # calls too short to measure a speed are not counted
    short = HostSpeeds(Policy(window=2))
    for _ in range(2):
        short.observe([("h0", 0.001, 0.5), ("h1", 0.002, 0.5)], root=0)
    assert short.effective(probe, "h0") == (probe, "probe")
    # agreeing calls keep the probe's speeds
    same = HostSpeeds(Policy(window=2))
    for _ in range(2):
        same.observe([("h0", 1.0, 0.5), ("h0", 1.0, 0.0), ("h1", 1.02, 0.5)], root=0)
    assert same.effective(probe, "h0")[0] is probe


def test_tuned_calls_plan_with_the_speeds_they_saw():
    from autotune.core.plans import Plan
    from autotune.feedback import speeds

    class Lookup:
        host_speeds = {"h0": 10.0, "h1": 10.0}

        def primitives(self):
            return ["link_net"]

        def with_host_speeds(self, seen):
            view = Lookup()
            view.host_speeds = seen
            return view

    plan = Plan("bsr", 2, 2, 1, weights=(3.0, 1.0))
    assert speeds.work_share(plan, 3, 0, 1) == pytest.approx(0.25)
    assert speeds.work_share(plan, 3, 0, 2) == 0.0
    speeds.RUN_SPEEDS.pop(("h0", "h1"), None)
    cp = Lookup()
    assert speeds.speeds_for(cp, ["h0", "h1"], 0) == (cp, "probe")
    for _ in range(3):
        speeds.RUN_SPEEDS.setdefault(("h0", "h1"), HostSpeeds()).observe([("h0", 1.0, 0.5), ("h1", 2.5, 0.5)],
                                                                              root=0)
    seen, source = speeds.speeds_for(cp, ["h0", "h1"], 0)
    assert seen.host_speeds["h1"] == pytest.approx(4.0) and seen.primitives() == ["link_net"]
    assert source.startswith("run time")
    speeds.RUN_SPEEDS.pop(("h0", "h1"))


def test_a_rank_under_a_quota_is_rated_at_the_quotas_share(monkeypatch):
    """Sweeps of 0.2 CPU s in a 1 s period the rank ran 0.3 s of: 0.2 / 0.3 at the share it ran;
    under a quota of half a core (its waits sleep, so CPU / wall undercounts it) 0.2 / 0.5."""
    spent = Mark(wall=1.0, cpu=0.3, phase=0.25, phase_cpu=0.2)
    assert busy(spent, "compute") == pytest.approx(0.2 / 0.3)
    assert busy(spent, "compute", 0.5) == pytest.approx(0.4)
    assert busy(spent, "iteration", 0.5) == 1.0

    class Two:                          # two ranks of the job on this host
        def allgather(self, x):
            return [socket.gethostname()] * 2 + ["elsewhere"]
    monkeypatch.setattr(collective, "cpu_share", lambda: 1.5)
    assert collective.quota_share(Two()) == 0.75 and collective.quota_bound(Two())
    monkeypatch.setattr(collective, "cpu_share", lambda: 4.0)
    assert collective.quota_share(Two()) == 1.0 and not collective.quota_bound(Two())
    monkeypatch.setattr(collective, "cpu_share", lambda: None)
    assert collective.quota_share(Two()) is None and not collective.quota_bound(Two())
