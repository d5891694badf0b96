"""The stencil family in one process: kernels and regions against numpy, the user-kernel hook,
004's border/interior counts, the model's terms and the selector, the API's errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from autotune.kernels.stencil import Sweeper, heat_weights, reference, run_local
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import autotune
from autotune import stencil
from autotune.core.assumptions import UNMEASURED_OVERLAP
from autotune.core.families import FAMILIES, HALOS, STENCIL_BACKENDS, StencilProblem, family
from autotune.core.plans import Plan
from autotune.db.comm_lookup import CommParams
from autotune.geometry.halo import Rect, Tile, border_cells, fits, interior_cells, tiles
from autotune.models import stencil as model
from autotune.select.distributed import plans, predict, rank_plans
from autotune.select.ranking import choose


@njit(cache=True)
def laplace_kernel(src, dst, r0, r1, c0, c1):
    """A user's own point update (Jacobi for Laplace's equation)."""
    for i in range(r0, r1):
        for j in range(c0, c1):
            dst[i, j] = 0.25 * (src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1])


def _laplace_reference(u, steps):
    w = np.array([[0, 0.25, 0], [0.25, 0, 0.25], [0, 0.25, 0]])
    return reference(u, steps, w)


# -- 004's counts ----------------------------------------------------------------------------------

def test_table_3_5_border_and_interior_cells():
    """004 Table 3.5 / 3.6: 900 x 900 cells on a 3 x 3 grid, tiles of 300 x 300 with 2, 3 and 4
    neighbours."""
    assert [border_cells(300, 300, p, p1) for p, p1 in ((1, 1), (1, 2), (2, 2))] == [599, 898, 1196]
    assert [interior_cells(300, 300, p, p1) for p, p1 in ((1, 1), (1, 2), (2, 2))] == [89401, 89102, 88804]
    grid = tiles(900, 900, 3, 3)
    by_neighbours = {len(t.directions(False)): t for t in grid}
    for count, cf in ((2, 599), (3, 898), (4, 1196)):
        t = by_neighbours[count]
        (nr, nc), (p, p1) = t.shape, t.borders
        assert border_cells(nc, nr, p, p1) == cf
        # the regions a schedule sweeps hold those cells (on a tile away from the field's edges)
    inner = Tile(2700, 2700, 9, 9, 4, 4)
    sweep = inner.sweep()
    assert sum(r.cells for r in sweep.border) == 1196 and sweep.interior.cells == 88804


def test_regions_cover_the_update_once():
    for t in tiles(23, 31, 3, 2, h=2, radius=1):
        for grow in (0, 1):
            s = t.sweep(grow)
            covered = np.zeros(t.local_shape, int)
            for rect in (s.interior, *s.border):
                covered[rect.r0:rect.r1, rect.c0:rect.c1] += 1
            want = np.zeros(t.local_shape, int)
            w = s.whole
            want[w.r0:w.r1, w.c0:w.c1] = 1
            assert np.array_equal(covered, want)


def test_fits_names_the_tiles_thinner_than_the_halo():
    assert fits(10, 10, 2, 2, 2) is None
    assert "does not fit a 10x10 field" in fits(10, 10, 6, 1, 2)


# -- kernels ---------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), steps=st.integers(0, 4), radius=st.integers(1, 2),
       backend=st.sampled_from(STENCIL_BACKENDS), seed=st.integers(0, 2**16))
def test_sweeps_equal_numpy_for_any_shape(rows, cols, steps, radius, backend, seed):
    rng = np.random.default_rng(seed)
    u = rng.random((rows, cols))
    w = rng.random((2 * radius + 1,) * 2) / (2 * radius + 1) ** 2
    if min(rows, cols) <= 2 * radius:
        return
    got = run_local(u, steps, radius, Sweeper(w, backend=backend))
    np.testing.assert_allclose(got, reference(u, steps, w), rtol=1e-13, atol=1e-15)


def test_heat_cross_kernel_and_threads_equal_numpy():
    u = np.random.default_rng(1).random((65, 47))
    want = reference(u, 6, heat_weights(0.2))
    for threads in (1, 2):
        got = run_local(u, 6, 1, Sweeper(heat_weights(0.2), threads=threads))
        np.testing.assert_allclose(got, want, rtol=1e-13)


@settings(max_examples=25, deadline=None)
@given(levels=st.integers(1, 6), shrink=st.integers(0, 1), radius=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_fused_levels_are_the_same_bits_as_a_call_a_step(levels, shrink, radius, seed):
    """The wavefront sweeps a run of (possibly shrinking) rectangles exactly as one call each."""
    rng = np.random.default_rng(seed)
    shape = (20 + 4 * levels, 17 + 4 * levels)
    w = heat_weights(0.2) if radius == 1 and seed % 2 else rng.random((2 * radius + 1,) * 2) / 9
    rects = [Rect(radius + k * shrink * radius, shape[0] - radius - k * shrink, radius + k * shrink,
                  shape[1] - radius - k * shrink * radius) for k in range(levels)]
    bufs = {}
    for name in ("numba-stencil", "numba-wavefront"):
        a = rng.random(shape) if not bufs else bufs["numba-stencil"][2].copy()
        init = a.copy()
        b = a.copy()
        Sweeper(w, backend=name).levels(a, b, rects)
        bufs[name] = (a, b, init)
    np.testing.assert_array_equal(bufs["numba-stencil"][0], bufs["numba-wavefront"][0])
    np.testing.assert_array_equal(bufs["numba-stencil"][1], bufs["numba-wavefront"][1])


def test_user_kernel_hook():
    u = np.random.default_rng(2).random((30, 41))
    got = stencil.apply(u, 5, kernel=laplace_kernel, radius=1)
    np.testing.assert_allclose(got, _laplace_reference(u, 5), rtol=1e-13)


# -- API -------------------------------------------------------------------------------------------

def test_heat2d_is_numpy_and_keeps_the_input(tiny_db):
    u = np.random.default_rng(3).random((37, 53))
    keep = u.copy()
    with autotune.options(db=str(tiny_db)):
        got = stencil.heat2d(u, 10, 0.2)
    assert np.array_equal(u, keep) and got.dtype == np.float64
    np.testing.assert_allclose(got, reference(u, 10, heat_weights(0.2)), rtol=1e-13)
    assert np.array_equal(stencil.heat2d(u, 0, 0.2), u)
    ints = np.arange(20).reshape(4, 5)
    np.testing.assert_allclose(stencil.heat2d(ints, 2, 0.1), reference(ints, 2, heat_weights(0.1)))


def test_a_stencil_decides_after_a_gap_that_may_hide_a_numpy_call(tiny_db):
    """After such a gap the family's library is taken to have run last; numpy's slices have no
    pool, so the decision is an idle spell's (it raised 'NoneType' object is not callable)."""
    from autotune.kernels import _front

    from autotune.core.families import StencilProblem
    from autotune.entry.decide import decide

    with autotune.options(db=str(tiny_db)):
        cand, _ = decide(StencilProblem(40, 40, 5), None, False, state=_front.FOREIGN)
    assert cand is not None and cand.family == "stencil"


def test_missing_database_runs_numpy_with_a_warning(tmp_path):
    u = np.random.default_rng(4).random((20, 20))
    with autotune.options(db=str(tmp_path / "none.h5")), pytest.warns(RuntimeWarning, match="unavailable"):
        got = stencil.heat2d(u, 3, 0.1)
    np.testing.assert_allclose(got, reference(u, 3, heat_weights(0.1)), rtol=1e-13)


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    ((np.ones(5), 2), {}, "must be 2-D"),
    ((np.ones((2, 3, 4)), 2), {}, "must be 2-D"),
    ((np.full((5, 5), np.nan), 2), {}, "infs or NaNs"),
    ((np.ones((5, 5)), -1), {}, "non-negative"),
    ((np.ones((5, 5)), 1.5), {}, "must be an int"),
    ((np.ones((5, 5)) * 1j, 1), {}, "must be real"),
    ((np.ones((5, 5)), 1), {"alpha": np.inf}, "alpha"),
])
def test_bad_input_raises_value_error(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        stencil.heat2d(*args, **kwargs)


def test_bad_stencils():
    u = np.ones((6, 6))
    for bad in (np.ones((2, 2)), np.ones((1, 1)), np.ones(3)):
        with pytest.raises(ValueError, match="odd side >= 3"):
            stencil.apply(u, 1, bad)
    with pytest.raises(ValueError, match="radius"):
        stencil.apply(u, 1, kernel=laplace_kernel)
    with pytest.raises(ValueError, match="not both"):
        stencil.apply(u, 1, np.ones((3, 3)), kernel=laplace_kernel, radius=1)
    with pytest.raises(TypeError, match="callable"):
        stencil.apply(u, 1, kernel=3, radius=1)
    with warnings.catch_warnings():              # complex weights: an error, not a ComplexWarning and a cast
        warnings.simplefilter("error")
        for bad in (heat_weights(0.1) * 1j, heat_weights(0.1).astype(complex)):
            with pytest.raises(ValueError, match="weights must be real"):
                stencil.apply(u, 1, bad)
        for alpha in (1j, float("nan"), "0.1", None):
            with pytest.raises(ValueError, match="alpha must be a finite real"):
                stencil.heat2d(u, 1, alpha)
    # non-finite values pass when the caller says they are fine, as scipy's check_finite=False
    got = stencil.heat2d(np.full((5, 5), np.inf), 1, 0.1, check_finite=False)
    assert got.shape == (5, 5)


# -- model and selection ---------------------------------------------------------------------------

class _Link:
    """Comm parameters with one (ts, tw) per link kind and ``hosts`` hosts."""

    def __init__(self, hosts=1, ts=(2e-6, 1e-4), tw=(1e-10, 8e-8), overlap=None):
        self.platform = {"hosts": hosts, "key": None}
        self._overlap = {**UNMEASURED_OVERLAP, **(overlap or {})}
        self.ts, self.tw = dict(zip(("link_host", "link_net"), ts, strict=True)), \
            dict(zip(("link_host", "link_net"), tw, strict=True))

    def primitives(self):
        return ("link_host", "link_net")

    def overlap(self, kind, nbytes):
        return self._overlap[kind]

    def step_overhead(self, kind, schedule):
        return 0.0

    host_speeds: dict = {}
    rank_names = None
    rank_shares = None

    def compute_skew(self, p):
        return 0.01

    def time(self, prim, p, nbytes, grid=None):
        prim = prim if prim in self.ts else "link_host"
        return np.asarray(self.ts[prim] + self.tw[prim] * np.asarray(nbytes, float))


class _K:
    """SP with one k for every stencil pattern and copy."""

    table = None
    path = None

    def __init__(self, k=2e-10):
        self.value = k

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        return np.full(np.shape(x), self.value)


def test_blocking_pays_every_message_overlap_hides_the_network_ones():
    sp, cp = _K(), _Link(hosts=2)
    prob = StencilProblem(2000, 2000, 10)
    block = model.per_step(prob, Plan("blocking", 2, 1, 2, 1, backend="numba-stencil"), sp, cp)
    over = model.per_step(prob, Plan("overlap", 2, 1, 2, 1, backend="numba-stencil"), sp, cp)
    assert block["net"] > 0 and block["hidden"] == 0
    assert over["total"] < block["total"]
    assert over["hidden"] == pytest.approx(min(over["interior"], over["net"]))
    # one host: in-host copies are not hidden
    one = _Link(hosts=1)
    b1 = model.per_step(prob, Plan("blocking", 2, 1, 2, 1, backend="numba-stencil"), sp, one)
    o1 = model.per_step(prob, Plan("overlap", 2, 1, 2, 1, backend="numba-stencil"), sp, one)
    assert b1["net"] == o1["net"] == 0 and o1["total"] >= b1["total"] - 1e-12


def test_the_cpu_a_message_costs_can_make_overlap_lose():
    """A network whose messages half hide and cost as much CPU as their time when overlapped:
    overlapping costs the sweep more than it hides, and the model says so (the sign the 100 Mbit/s
    testbed measured). Each 1 x 2 tile sends one message a step."""
    sp, prob = _K(), StencilProblem(2000, 2000, 10)
    plans = [Plan(a, 2, 1, 2, 1, backend="numba-stencil") for a in ("blocking", "overlap")]
    free = [model.per_step(prob, p, sp, _Link(hosts=2)) for p in plans]
    net = free[1]["net"]
    costly = [model.per_step(prob, p, sp, _Link(hosts=2, overlap={"net": (0.5, net)})) for p in plans]
    assert free[1]["total"] < free[0]["total"]
    assert costly[0]["total"] == pytest.approx(free[0]["total"])        # blocking: the message's time only
    assert costly[1]["total"] > costly[0]["total"]
    assert costly[1]["compute"] - free[1]["compute"] == pytest.approx(net)   # its CPU, a step
    assert costly[1]["hidden"] == pytest.approx(0.5 * net)


def test_a_slow_host_slows_its_rank_and_the_selector_weights_the_tiles():
    """Ranks on a host at half the speed sweep at half the rate (the run's or the probe's host
    speeds, by the ranks' host names); the selector adds plans whose tiles follow those speeds, and
    with two hosts of speeds 2:1 the weighted plan's step is the faster."""
    from autotune.select.distributed import by_speed

    sp, prob = _K(), StencilProblem(2000, 2000, 10)
    cp = _Link(hosts=2)
    cp.rank_names, cp.host_speeds = ("h0", "h1"), {"h0": 2.0, "h1": 1.0}
    plan = Plan("blocking", 2, 2, 1, 1, backend="numba-stencil")
    even = model.per_step(prob, plan, sp, _Link(hosts=2))
    slow = model.per_step(prob, plan, sp, cp)
    assert slow["compute"] == pytest.approx(2.0 * even["compute"], rel=0.01)
    (weighted,) = by_speed(prob, [plan], cp)
    assert weighted.weights == (1.0, 0.5)
    assert model.per_step(prob, weighted, sp, cp)["total"] < 0.8 * slow["total"]
    assert by_speed(prob, [plan], _Link(hosts=2)) == []                  # speeds unknown: nothing added


@pytest.mark.filterwarnings("ignore:communication parameters unavailable:RuntimeWarning")
def test_a_throttled_rank_stalls_its_neighbours():
    """A host under a CFS quota of half a core runs its rank half the time, in windows far longer
    than a step: its neighbours wait through the rest, so the whole step loop runs at that share
    (the selector's quota step); its speed while it runs is its measured speed over the quota."""
    sp, prob = _K(), StencilProblem(2000, 2000, 10)
    plan = Plan("blocking", 2, 2, 1, 1, backend="numba-stencil")
    alone = model.per_step(prob, plan, sp, _Link(hosts=2))
    cp = _Link(hosts=2)
    cp.rank_names, cp.rank_shares, cp.host_speeds = ("h0", "h1"), (0.0, 0.5), {"h0": 2.0, "h1": 1.0}
    assert model.per_step(prob, plan, sp, cp)["total"] == pytest.approx(alone["total"], rel=0.01)
    base = CommParams(None, "test")                      # no comm probe: nominal costs (warned)
    free, capped = (predict(prob, plan, sp, c, fitted=False) for c in (base, base.with_ranks(["h0", "h1"], [0, 0.5])))
    for phase, slice_ in (("compute", 2.0), ("communication", 2.0), ("distribution", 1.0), ("collection", 1.0)):
        assert capped[phase] == pytest.approx(slice_ * free[phase])      # the root's host has no quota
    assert free["total"] < capped["total"] < 2.0 * free["total"]
    root = predict(prob, plan, sp, base.with_ranks(["h1", "h0"], [0.5, 0], root=1), fitted=False)
    assert root == pytest.approx(capped)                                # the same ranks, from the root
    one_host = base.with_ranks(["h", "h"], [0, 0])         # two ranks on one host: time-sliced on one core
    assert predict(prob, plan, sp, one_host, fitted=False, cores=2) == pytest.approx(free)
    assert predict(prob, plan, sp, one_host, fitted=False, cores=1)["compute"] == pytest.approx(2 * free["compute"])
    cp.rank_shares = (0.0, 0.0)                    # no quota: h1 is a slower processor, not a throttled one
    assert model.per_step(prob, plan, sp, cp)["compute"] == pytest.approx(2.0 * alone["compute"], rel=0.01)


def test_overlap_condition_and_crossover():
    sp, cp = _K(), _Link(hosts=2)
    plan = Plan("overlap", 2, 1, 2, 1, backend="numba-stencil")
    n = model.crossover(StencilProblem(100, 100), plan, sp, cp)
    assert n is not None
    below = model.per_step(StencilProblem((n - 1), 2 * (n - 1)), plan, sp, cp)
    at = model.per_step(StencilProblem(n, 2 * n), plan, sp, cp)
    assert not model.overlap_pays(below["interior"], below["net"]) and model.overlap_pays(at["interior"], at["net"])
    # a faster network moves the crossover to smaller tiles
    fast = model.crossover(StencilProblem(100, 100), plan, sp, _Link(hosts=2, ts=(2e-6, 1e-5), tw=(1e-10, 8e-9)))
    assert fast < n


def test_deep_halo_trades_messages_for_sweeps():
    sp, cp = _K(), _Link(hosts=2, ts=(2e-6, 1e-3))            # latency-bound network
    prob = StencilProblem(400, 400, 100)
    one = model.per_step(prob, Plan("blocking", 2, 1, 2, 1, backend="numba-stencil"), sp, cp)
    four = model.per_step(prob, Plan("blocking", 2, 1, 2, 4, backend="numba-stencil"), sp, cp)
    assert four["communication"] < one["communication"] / 2 and four["compute"] > one["compute"]


def test_plans_cover_schedules_halos_and_backends():
    prob = StencilProblem(64, 64, 10)
    ps = plans(prob, 4, 2)
    assert {p.algorithm for p in ps} == set(FAMILIES["stencil"].distributed)
    assert {p.b for p in ps} == set(HALOS) and {p.backend for p in ps} == set(STENCIL_BACKENDS)
    assert all(p.b == 1 for p in ps if p.algorithm == "border_first")
    assert not plans(StencilProblem(6, 64, 10), 4, 4, oversubscribe=True) or all(
        fits(6, 64, p.r, p.c, p.b) is None for p in plans(StencilProblem(6, 64, 10), 4, 4, oversubscribe=True))


def test_selector_ranks_backends_and_plans(tiny_db):
    from autotune.db import load_sp
    from autotune.db.comm_lookup import CommParams

    sp = load_sp(tiny_db)
    prob = family("stencil").read((300, 400))
    dec = choose(prob, sp, 2)
    assert dec.chosen.algorithm == "sweep" and {r.candidate.backend for r in dec.ranking} == set(STENCIL_BACKENDS)
    with pytest.warns(RuntimeWarning):
        dist = rank_plans(StencilProblem(2000, 2000, 50), 2, sp, CommParams(None, "test"), 2, min_efficiency=0.8)
    assert dist.ranking[0].efficiency is not None
    chosen = dist.ranking[0]
    assert chosen.plan.algorithm == "local" or chosen.efficiency >= 0.8 or all(
        r.efficiency < 0.8 for r in dist.ranking if r.efficiency is not None)
    phases = predict(StencilProblem(2000, 2000, 50), Plan("overlap", 2, 1, 2, 1, backend="numba-stencil"), sp,
                     CommParams(None, "test"))
    assert phases["total"] > 0 and phases["compute"] > 0


def test_only_weights_are_priced_fused():
    """The wavefront fuses weights; a user's kernel runs a step a call on it, and is priced so."""
    class Fused(_K):                     # a fused step at half the cost of a step a call
        def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
            return super().k(routine, backend, threads, x) * (0.5 if pattern == "levels" else 1.0)

    sp = Fused()
    weights, kernel = StencilProblem(512, 512, 16), StencilProblem(512, 512, 16, kernel=True)
    assert model.fuses(weights, "numba-wavefront") and not model.fuses(kernel, "numba-wavefront")
    assert not model.fuses(weights, "numba-stencil")
    one = model.sweep(sp, "numba-wavefront", 1, (510, 510), "interior")
    assert model.fused(sp, "numba-wavefront", 1, [(510, 510)] * 4) == pytest.approx(2 * one)
    assert model.fused(sp, "numba-wavefront", 1, [(510, 510)] * 4, fuse=False) == pytest.approx(4 * one)
    copy = model.single(StencilProblem(512, 512, 0), "numba-wavefront", 1, sp)
    assert model.single(weights, "numba-wavefront", 1, sp) - copy == pytest.approx(8 * one)
    assert model.single(kernel, "numba-wavefront", 1, sp) - copy == pytest.approx(16 * one)
