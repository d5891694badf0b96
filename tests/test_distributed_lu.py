"""Distributed block-cyclic LU and solve: scipy's factors, pivots and solutions on every grid and
awkward size, errors and singular matrices agreed by all ranks; the tuned comm= calls; the model."""
from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import run_mpi_variants
from test_distributed_cholesky import FakeCP, FakeSP

from autotune.core.families import BLOCKS, LuProblem, SolveProblem
from autotune.core.plans import PHASES, Plan
from autotune.models.distributed_lu import model, solve_model
from autotune.select.distributed import plans

FACTOR = """
import warnings
import numpy as np
import scipy.linalg as sl
from mpi4py import MPI
from autotune.distributed.lu import ALGORITHMS, lu_factor, solve
from autotune.distributed.plan import Phases
from autotune.core.plans import PHASES, Plan
from autotune.core.families import as_problem

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
rng = np.random.default_rng(3)            # same draws on every rank
grids = [(r, P // r) for r in range(1, P + 1) if P % r == 0]
blocks = [1, 3, 16, 64, 7, 32, 200]
speeds = tuple(1.0 / (1 + i % 3) for i in range(P))   # HoHe: blocks per cycle by speed, every other case
case = 0
for n in (1, 2, 5, 37, 100, 129):
    a = rng.standard_normal((n, n))
    rhs = rng.standard_normal((n, 3))
    for r, c in grids:
        for la in (True, False):
            b = blocks[case % len(blocks)]
            x = np.asfortranarray(a) if case % 3 == 0 else a
            keep = x.copy()
            ph = Phases()
            w = (speeds if case % 4 == 1 else speeds[::-1]) if case % 2 else None   # part 0 slowest: maybe no block
            out = lu_factor(x if me == 0 else None, comm, Plan("lu", P, r, c, b=b, weights=w), lookahead=la,
                            phases=ph)
            where = (n, r, c, b, la, w)
            if me == 0:
                lu0, piv0 = sl.lu_factor(a)
                lu, piv, info = out
                assert info == 0 and piv.dtype == np.int32, where
                assert np.array_equal(piv, piv0), ("pivots", where)
                assert np.abs(lu - lu0).max() <= 1e-10 * max(1.0, np.abs(lu0).max()), where
                assert np.array_equal(x, keep), ("input changed", where)
                assert set(ph.seconds) == set(PHASES), (ph.seconds, where)
            else:
                assert out is None, where
            if r == 1:
                got = solve(a if me == 0 else None, rhs if me == 0 else None, comm,
                            Plan("gesv", P, 1, P, b=b, weights=w), lookahead=la)
                if me == 0:
                    xs, info = got
                    assert info == 0 and np.allclose(xs, sl.solve(a, rhs), atol=1e-9), where
            case += 1

# An exactly singular matrix: the factor completes with LAPACK's info; the solve reports it.
a = rng.standard_normal((40, 40))
a[:, 9] = 0.0
out = lu_factor(a if me == 0 else None, comm, Plan("lu", P, 1, P, b=8))
tall = lu_factor(a if me == 0 else None, comm, Plan("lu", P, P, 1, b=4))
got = solve(a if me == 0 else None, np.ones((40, 1)) if me == 0 else None, comm, Plan("gesv", P, 1, P, b=8))
if me == 0:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lu0, piv0 = sl.lu_factor(a)
    for o in (out, tall):
        assert o[2] == 10 and np.array_equal(o[1], piv0) and np.allclose(o[0], lu0)
    assert got[1] == 10

# Bad input on the root: the same ValueError on every rank.
for bad in (np.ones((3, 4)), np.array([[1.0, np.nan], [0.0, 1.0]]), None):
    try:
        lu_factor(bad if me == 0 else None, comm, Plan("lu", P, 1, P, b=2))
    except ValueError:
        pass
    else:
        raise AssertionError(("no error", bad))
try:
    solve(np.eye(4) if me == 0 else None, np.ones((3, 1)) if me == 0 else None, comm, Plan("gesv", P, 1, P, b=2))
except ValueError:
    pass
else:
    raise AssertionError("mismatched b")
if P > 1:
    try:
        solve(np.eye(4) if me == 0 else None, np.ones((4, 1)) if me == 0 else None, comm, Plan("gesv", P, P, 1, b=2))
    except ValueError:
        pass
    else:
        raise AssertionError("solve on r > 1")
print("OK", me)
"""


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_distributed_lu_matches_scipy(launched, nprocs):
    proc = launched.check(f"factor np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


TUNED = """
import warnings
import numpy as np
import scipy.linalg as sl
from mpi4py import MPI
from autotune import tuned_lu_factor, tuned_solve
from autotune.core.plans import Plan

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
rng = np.random.default_rng(5)
a = rng.standard_normal((90, 90))
b = rng.standard_normal(90)
B = rng.standard_normal((90, 4))
lu0, piv0 = sl.lu_factor(a)
for config in (None, Plan("lu", P, 1, P, b=16, backend="scipy-openblas"), {"algorithm": "local", "p": 1}):
    out = tuned_lu_factor(a if me == 0 else None, comm=comm, config=config)
    if me == 0:
        assert np.allclose(out[0], lu0) and np.array_equal(out[1], piv0), config
    else:
        assert out is None
for config in (None, Plan("gesv", P, 1, P, b=16, backend="scipy-openblas")):
    for rhs in (b, B):
        x = tuned_solve(a if me == 0 else None, rhs if me == 0 else None, comm=comm, config=config)
        if me == 0:
            assert x.shape == rhs.shape and np.allclose(x, sl.solve(a, rhs)), config
    x = tuned_solve(a if me == 0 else None, B if me == 0 else None, comm=comm, config=config, transposed=True)
    if me == 0:
        assert np.allclose(x, sl.solve(a, B, transposed=True)), config
# A singular system raises LinAlgError on every rank; a rectangular lu_factor is scipy's.
s = np.ones((20, 20))
try:
    tuned_solve(s if me == 0 else None, np.ones(20) if me == 0 else None, comm=comm,
                config=Plan("gesv", P, 1, P, b=4, backend="scipy-openblas"))
except np.linalg.LinAlgError:
    pass
else:
    raise AssertionError("singular")
rect = rng.standard_normal((30, 20))
out = tuned_lu_factor(rect if me == 0 else None, comm=comm)
if me == 0:
    ref = sl.lu_factor(rect)
    assert np.allclose(out[0], ref[0]) and np.array_equal(out[1], ref[1])
try:
    tuned_solve(np.ones((3, 4)) if me == 0 else None, np.ones(3) if me == 0 else None, comm=comm)
except ValueError:
    pass
else:
    raise AssertionError("non-square")
print("OK", me)
"""


@pytest.fixture(scope="module")
def launched(tiny_db, tmp_path_factory):
    """FACTOR at every world size and TUNED (reading the tiny database) at 1 and 2, in one launch at
    -n 4, each on that many of its ranks."""
    return run_mpi_variants([*((f"factor np{p}", FACTOR, p) for p in (1, 2, 3, 4)),
                             *((f"tuned np{p}", TUNED, p, [], {"AUTOTUNE_DB": str(tiny_db)}) for p in (1, 2))],
                            tmp_path_factory.mktemp("lu"))


@pytest.mark.parametrize("nprocs", [1, 2])
def test_tuned_lu_and_solve_with_comm(launched, nprocs):
    proc = launched.check(f"tuned np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


# -- model -------------------------------------------------------------------------------------

GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3)]


@pytest.mark.parametrize("r,c", GRIDS)
@pytest.mark.parametrize("lookahead", [True, False])
def test_model_phases_are_consistent(r, c, lookahead):
    plan = Plan("lu", r * c, r, c, b=64)
    for n in (1, 50, 64, 65, 1000, 2500):
        out = model(n, plan, FakeSP(), FakeCP(), lookahead=lookahead)
        assert set(out) == {*PHASES, "total"}
        assert all(np.isfinite(v) and v >= 0 for v in out.values()), out
        assert max(out[p] for p in PHASES) <= out["total"] + 1e-15
    small, big = (model(n, plan, FakeSP(), FakeCP(), lookahead=lookahead) for n in (1000, 2000))
    assert big["total"] > small["total"] and big["compute"] > small["compute"]


class _Overlapped(FakeCP):
    """FakeCP whose messages within a host hide ``hidden`` of their time and cost ``cpu`` seconds."""

    def __init__(self, hidden: float, cpu: float):
        super().__init__()
        self.measured = (hidden, cpu)

    def overlap(self, kind, nbytes):
        return tuple(np.full(np.shape(nbytes), v) for v in self.measured)


def test_a_panel_that_does_not_hide_holds_its_receivers():
    """The panel's message overlaps the receivers' update: what of it does not hide and the CPU its
    arrival costs add to their step; a message that hides whole and costs nothing adds nothing."""
    plan, n = Plan("lu", 2, 1, 2, b=64), 2000
    free, shown, busy = (model(n, plan, FakeSP(), cp)["total"] for cp in
                         (_Overlapped(1.0, 0.0), _Overlapped(0.0, 0.0), _Overlapped(1.0, 1e-4)))
    steps = -(-n // 64)
    assert free < shown and free < busy
    assert busy - free == pytest.approx(1e-4 * steps / 2, rel=0.1)   # on 1 x 2 each rank receives every other panel


def test_model_one_rank_is_the_blocked_lu_flop_count():
    sp = FakeSP()
    n, b = 1024, 128
    out = model(n, Plan("lu", 1, 1, 1, b=b), sp, FakeCP())
    flops = 2.0 * n**3 / 3.0          # FakeSP: 2.5e-11 s per flop, a little more at small sizes
    assert flops * 2.5e-11 <= out["compute"] < 1.5 * flops * 2.5e-11, out
    assert {("getrf", "panel"), ("laswp", "panel"), ("trsm", "panel"), ("gemm", "rankb")} <= set(sp.calls)


def test_model_lookahead_never_slower_and_two_ranks_beat_one():
    sp, cp = FakeSP(), FakeCP(ts=1e-6, tw=1e-11)
    one = model(4096, Plan("lu", 1, 1, 1, b=128), sp, cp)
    for b in (64, 128, 256):
        plan = Plan("lu", 2, 1, 2, b=b)
        ahead, plain = model(4096, plan, sp, cp), model(4096, plan, sp, cp, lookahead=False)
        assert ahead["total"] <= plain["total"] + 1e-12
        assert ahead["compute"] < 0.7 * one["compute"]


def test_model_loop_pays_the_ranks_contention_the_roots_moves_do_not():
    """Two ranks computing at once run 1.3x slower (the probe's factor): the loop's compute
    grows by that, the root's distribution and collection (the other rank waiting) do not."""
    from autotune.db.contention import ContendedSP, Contention

    sizes = [64, 256, 512, 1024, 2048]
    cont = Contention(p=[1] * 5 + [2] * 5, n=sizes * 2, t=[1.0] * 5 + [1.3] * 5)
    plan = Plan("lu", 2, 1, 2, b=64)
    free, shared = (model(2048, plan, sp, FakeCP()) for sp in (FakeSP(), ContendedSP(FakeSP(), cont, 2)))
    assert shared["compute"] == pytest.approx(1.3 * free["compute"], rel=1e-6)
    assert (shared["distribution"], shared["collection"]) == (free["distribution"], free["collection"])


class CachedSP(FakeSP):
    """FakeSP whose additions cost 3x as much per element past 512 x 512 (memory no cache holds)."""

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        if routine == "add":
            return np.where(np.asarray(x, float) > 512, 3e-9, 1e-9)
        return super().k(routine, backend, threads, x, pattern, param, dtype)


def test_update_traffic_is_what_a_larger_c_moves_beyond_the_timed_one():
    from autotune.core.assumptions import COPY_SHARE
    from autotune.models.movement import update_traffic

    sp = CachedSP()
    big, timed = 4096.0 ** 2, 400.0 ** 2
    assert update_traffic(sp, big, timed) == pytest.approx(big * COPY_SHARE * 2e-9)
    assert update_traffic(sp, 500.0 ** 2, timed) == 0.0            # both in cache: the probe paid it
    assert update_traffic(sp, 0.0, timed) == 0.0


def test_small_blocks_pay_the_trailing_matrix_traffic_more_often():
    """Out of cache, each step reads and writes the trailing matrix once: b = 32 does it 4x as
    often as b = 128, so its update costs more over the flops alone than b = 128's."""
    plan = Plan("lu", 2, 1, 2, b=32)
    extra = {b: model(3072, plan, CachedSP(), FakeCP(), b=b)["compute"]
             - model(3072, plan, FakeSP(), FakeCP(), b=b)["compute"] for b in (32, 128)}
    assert extra[128] > 0 and extra[32] > 3 * extra[128]


def test_solve_model_adds_the_back_substitution_and_no_collection():
    plan = Plan("gesv", 2, 1, 2, b=64)
    lu, sv = model(2048, plan, FakeSP(), FakeCP()), solve_model(2048, 16, plan, FakeSP(), FakeCP())
    assert sv["collection"] == 0.0 and lu["collection"] > 0.0
    assert sv["total"] - sv["distribution"] > lu["total"] - lu["distribution"] - lu["collection"]


def test_model_vectorised_over_blocks_matches_scalar_calls():
    plan = Plan("lu", 2, 1, 2, b=64)
    many = model(777, plan, FakeSP(), FakeCP(), b=np.array([16, 64, 100]))
    for i, b in enumerate((16, 64, 100)):
        one = model(777, plan, FakeSP(), FakeCP(), b=b)
        assert all(abs(many[k][i] - one[k]) <= 1e-12 * max(1.0, one[k]) for k in one)


def test_selector_plans_lu_on_every_grid_and_solves_on_one_row():
    lu = plans(LuProblem(2048), 4, 4, oversubscribe=True)
    assert {(p.r, p.c) for p in lu} >= {(1, 2), (2, 1), (2, 2), (1, 4), (4, 1)}
    assert all(p.algorithm == "lu" and p.b >= 1 for p in lu)
    sv = plans(SolveProblem(2048, 16), 4, 4, oversubscribe=True)
    assert sv and all(p.algorithm == "gesv" and p.r == 1 for p in sv)
    assert {p.b for p in sv} == set(BLOCKS)         # the probe's measured blocks, all <= n / 2


def test_efficiency_threshold_orders_plans_and_reaches_the_choice(tiny_db, monkeypatch, capsys):
    """Each plan's predicted efficiency T_seq / (cores x T); with a threshold the fastest plan at or
    above it is chosen (004), shown by explain; bad thresholds are refused."""
    import warnings

    import autotune
    from autotune.cli.command import main as cli_main
    from autotune.db import load_sp
    from autotune.db.comm_lookup import CommParams
    from autotune.select.distributed import rank_plans

    sp, cp = load_sp(str(tiny_db)), CommParams(None, "test", 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        free = rank_plans(LuProblem(256), 2, sp, cp, 2)
        effs = [r.efficiency for r in free.ranking]
        assert all(e is not None and 0 < e for e in effs)
        strict = rank_plans(LuProblem(256), 2, sp, cp, 2, min_efficiency=0.999)
    ok = [r for r in strict.ranking if r.efficiency >= 0.999]
    assert any(r.plan.algorithm == "local" for r in ok)      # one process on one core: T_seq itself
    assert strict.chosen == min(ok, key=lambda r: r.seconds).plan
    assert (len(ok) < len(strict.ranking)) == any("below efficiency" in n for n in strict.notes)
    assert sorted(r.seconds for r in free.ranking) == [r.seconds for r in free.ranking]
    with pytest.raises(ValueError, match="min_efficiency"):
        with autotune.options(min_efficiency=1.5):
            pass
    assert cli_main(["explain", "lu", "256", "--np", "2", "--db", str(tiny_db), "--min-efficiency", "0.5"]) == 0
    assert " eff " in capsys.readouterr().out
    assert cli_main(["explain", "lu", "256", "--db", str(tiny_db), "--min-efficiency", "0.5"]) == 2


@pytest.mark.parametrize("r,c", [(1, 2), (2, 1)])
def test_explain_lists_the_terms_the_model_adds(r, c):
    """``explain`` names each term added to 001's phases with its seconds for the chosen plan; the
    column syncs only on r > 1 grids, and the panel sends' pricing."""
    from autotune.models.distributed_lu import explain

    lines = explain(LuProblem(1000), Plan("lu", 2, r, c, b=64), FakeSP(), FakeCP())
    text = "\n".join(lines)
    for term in ("U12 solves", "trailing update", "loop costs", "checked Fortran copy", "panel sends"):
        assert term in text, text
    assert ("column syncs" in text) == (r > 1)
    assert all(" ms" in line for line in lines[:4])
