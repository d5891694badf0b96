"""Distributed block-cyclic Cholesky: scipy's factor on every grid, errors agreed by all ranks; its model."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from mpi_helpers import run_mpi_variants

from autotune.core.assumptions import UNMEASURED_OVERLAP
from autotune.core.plans import PHASES, Plan
from autotune.models.distributed_cholesky import MODELS, model

FACTOR = """
import numpy as np
import scipy.linalg as sl
from mpi4py import MPI
from autotune.distributed import DistMatrix, ProcessGrid, block_cyclic
from autotune.distributed.cholesky import ALGORITHMS, cholesky, cholesky_dist
from autotune.distributed.plan import Phases
from autotune.core.plans import PHASES, Plan

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
rng = np.random.default_rng(7)            # same draws on every rank


def spd(n):
    g = rng.standard_normal((n, n))
    return g @ g.T + n * np.eye(n)


def check(out, a, lower, where):
    ref = sl.cholesky(a, lower=lower)
    assert out.shape == ref.shape and out.dtype == np.float64, where
    tri = np.tril if lower else np.triu
    assert np.array_equal(out, tri(out)), ("other triangle not zeroed", where)
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < 1e-12, (err, where)


assert ALGORITHMS["cholesky"] is cholesky
grids = [(r, P // r) for r in range(1, P + 1) if P % r == 0]
blocks = [1, 3, 16, 64, 200, 7, 32]        # b > n, b not dividing n, b = 1
case = 0
for n in (1, 2, 5, 37, 100, 129):
    a = spd(n)
    for r, c in grids:
        for lower in (False, True):
            for la in (True, False):
                b = blocks[case % len(blocks)] if n > 5 or case % 2 else n + 3
                x = np.asfortranarray(a) if case % 3 == 0 else a        # both memory orders
                ph = Phases()
                # HoHe, every other case; half of them with part 0 the slowest (it may own no block)
                w = tuple(1.0 / (1 + (i if case % 4 == 1 else P - 1 - i) % 3) for i in range(P)) if case % 2 else None
                out = cholesky(x if me == 0 else None, comm, Plan("cholesky", P, r, c, b=b, weights=w), lower=lower,
                               lookahead=la, phases=ph)
                where = (n, r, c, b, lower, la, w)
                if me == 0:
                    check(out, a, lower, where)
                else:
                    assert out is None, where
                assert set(ph.seconds) == set(PHASES), (ph.seconds, where)
                assert all(v >= 0 for v in ph.seconds.values()) and ph.seconds["compute"] > 0, where
                case += 1

# cholesky_dist on data already distributed; input untouched unless overwrite_a.
n = 75
a = spd(n)
for r, c in grids:
    for b, lower, la, w in ((8, True, True, None), (13, False, False, ((1,) * r, (1,) * (c - 1) + (2.5,))),
                            (80, True, False, None), (4, False, True, ((3,) + (1,) * (r - 1), (1,) * c))):
        grid = ProcessGrid(comm, r, c)
        lay = block_cyclic(n, n, r, c, b, weights=w)
        dm = DistMatrix.from_root(a if me == 0 else None, lay, comm)
        before = dm.local.copy()
        f = cholesky_dist(dm, grid, b, lower=lower, lookahead=la, threads=1)
        assert np.array_equal(dm.local, before) and f.layout == lay and f.local.flags.f_contiguous
        out = f.to_root()
        if me == 0:
            check(out, a, lower, ("dist", r, c, b, lower))
        # C-ordered pieces are factored in their order (BLAS on the transposes).
        cm = DistMatrix(np.ascontiguousarray(before), lay, comm)
        f = cholesky_dist(cm, grid, b, lower=not lower, lookahead=not la, overwrite_a=True)
        assert f.local.flags.c_contiguous
        out = f.to_root()
        if me == 0:
            check(out, a, not lower, ("dist C", r, c, b, lower))
        grid.free()

# Fewer ranks than the communicator: unused ranks return None at once, any root inside the plan.
if P > 1:
    a = spd(50)
    for p, root in ((1, 0), (P - 1, P - 2)):
        ph = Phases()
        out = cholesky(a if me == root else None, comm, Plan("cholesky", p, p, 1, b=8), lower=True, root=root,
                       phases=ph)
        if me == root:
            check(out, a, True, ("sub", p, root))
        else:
            assert out is None
        assert bool(ph.seconds) == (me < p)


def verdict(fn):
    try:
        fn()
        return None
    except Exception as exc:              # noqa: BLE001 - the type is part of the verdict
        return type(exc).__name__, str(exc)


# Not positive definite: scipy's LinAlgError on every rank, whichever block fails (incl. the look-ahead one).
for n, bad in ((1, 0), (5, 4), (37, 0), (37, 20), (100, 99), (129, 64)):
    a = spd(n)
    a[bad, bad] = -1.0
    for r, c in grids:
        for lower, la, b in ((False, True, 16), (True, False, 7), (True, True, 1)):
            expect = verdict(lambda: sl.cholesky(a, lower=lower))
            assert expect is not None and expect[0] == "LinAlgError"
            got = verdict(lambda: cholesky(a if me == 0 else None, comm, Plan("cholesky", P, r, c, b=b),
                                           lower=lower, lookahead=la))
            assert got == expect, (got, expect, n, bad, r, c, b, lower, la)
            assert len({str(v) for v in comm.allgather(got)}) == 1

# Bad input: the same ValueError on every rank (unused ones included), then the next call still works.
bads = [None, np.ones((2, 3)), np.ones(4), np.array([[1.0, np.nan], [np.nan, 1.0]]),
        np.array([[np.inf]]), np.eye(3, dtype=complex)]
plans = [Plan("cholesky", P, 1, P, b=4), Plan("cholesky", 1, 1, 1, b=4)]
for i, bad in enumerate(bads):
    got = verdict(lambda: cholesky(bad if me == 0 else None, comm, plans[i % 2]))
    assert got is not None and got[0] == "ValueError", got
    assert len(set(comm.allgather(got))) == 1
for args in ((Plan("cholesky", P, P, 1, b=0), 0), (Plan("cholesky", 1, 1, 1, b=4), P - 1 if P > 1 else 5)):
    got = verdict(lambda: cholesky(np.eye(3), comm, args[0], root=args[1]))
    assert got is not None and got[0] == "ValueError", got
    assert len(set(comm.allgather(got))) == 1
a = spd(20)
out = cholesky(a if me == 0 else None, comm, Plan("cholesky", P, 1, P, b=4))
if me == 0:
    check(out, a, False, "after errors")
out = cholesky(np.zeros((0, 0)) if me == 0 else None, comm, Plan("cholesky", P, P, 1, b=4))
assert (out.shape == (0, 0)) if me == 0 else out is None
print("OK", me)
"""


CALIBRATE = """
import json, sys
from mpi4py import MPI
from autotune.install_probe.calibrate import call_overheads, loop_costs, step_waits
for db in sys.argv[1:]:
    x = loop_costs(MPI.COMM_WORLD, db, reps=2, cases=((128, 16), (256, 32)))
    calls = call_overheads(MPI.COMM_WORLD, db, reps=2)
    waits = step_waits(MPI.COMM_WORLD, db, reps=3, blocks=(16, 32), target=256)
    if MPI.COMM_WORLD.rank == 0:
        print("CAL", json.dumps([x, calls, waits]))
"""


@pytest.fixture(scope="module")
def factored(tiny_db, tmp_path_factory):
    """FACTOR at every world size and CALIBRATE at 2 (on a copy of the tiny database and on one
    without BLAS records, both with synthetic comm records), in one launch at -n 4, each on that
    many of its ranks."""
    import shutil

    from test_comm import write_synthetic

    d = tmp_path_factory.mktemp("cholesky")
    path, bare = d / "db.h5", d / "bare.h5"
    shutil.copy(tiny_db, path)
    write_synthetic(path, 2)
    write_synthetic(bare, 2)
    runs = run_mpi_variants([*((f"np{p}", FACTOR, p) for p in (1, 2, 3, 4)),
                             ("calibrate np2", CALIBRATE, 2, [str(path), str(bare)])], d)
    return runs, path, bare


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_distributed_cholesky_matches_scipy(factored, nprocs):
    proc = factored[0].check(f"np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


# -- model -------------------------------------------------------------------------------------

class FakeSP:
    """Seconds per flop: level-3 a bit faster at larger sizes, potrf and add slower."""

    def __init__(self, k3: float = 2.5e-11):
        self.k3 = k3
        self.calls: list[tuple] = []

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        self.calls.append((routine, pattern))
        x = np.asarray(x, dtype=float)
        base = {"potrf": 2.0, "add": 8.0, "trsm": 1.2}.get(routine, 1.0) * self.k3
        return base * (1.0 + 16.0 / np.maximum(x, 1.0)) / threads


class FakeCP:
    platform = {"hosts": 1}

    def __init__(self, ts: float = 5e-6, tw: float = 1e-10):
        self.ts, self.tw = ts, tw
        self.calls: list[tuple] = []

    def primitives(self):
        return ()

    def overlap(self, kind, nbytes):
        return tuple(np.full(np.shape(nbytes), v) for v in UNMEASURED_OVERLAP[kind])

    def time(self, primitive, p, nbytes, grid=None):
        self.calls.append((primitive, p, grid))
        return self.ts + self.tw * np.asarray(nbytes, dtype=float)

    def ts_tw(self, primitive, p, nbytes, grid=None):
        return self.ts, self.tw


GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (2, 3)]


@pytest.mark.parametrize("r,c", GRIDS)
@pytest.mark.parametrize("lookahead", [True, False])
def test_model_phases_are_consistent(r, c, lookahead):
    plan = Plan("cholesky", r * c, r, c, b=64)
    for n in (1, 50, 64, 65, 1000, 3000):
        out = model(n, plan, FakeSP(), FakeCP(), lookahead=lookahead)
        assert set(out) == {*PHASES, "total"}
        assert all(np.isfinite(v) and v >= 0 for v in out.values()), out
        phases = [out[p] for p in PHASES]
        assert max(phases) <= out["total"] + 1e-15
        assert out["total"] <= sum(phases) * (1 + 1e-12) + 1e-15
    small, big = (model(n, plan, FakeSP(), FakeCP(), lookahead=lookahead) for n in (1000, 2000))
    assert big["total"] > small["total"] and big["compute"] > small["compute"]
    assert big["distribution"] > small["distribution"] and big["collection"] > small["collection"]


def test_model_one_process_is_the_blocked_flop_count():
    sp = FakeSP()
    n, b = 2048, 128
    out = model(n, Plan("cholesky", 1, 1, 1, b=b), sp, FakeCP())
    assert out["communication"] == 0.0
    flops = n**3 / 3.0
    k = sp.k3 * (1 + 16.0 / b)                 # most flops: gemm/syrk at b-sized operands or larger
    assert 0.9 * flops * sp.k3 < out["compute"] < 1.3 * flops * k
    assert {("potrf", "square"), ("trsm", "panel"), ("gemm", "panel"), ("syrk", "square")} <= set(sp.calls)


def test_model_uses_grid_broadcasts_at_message_sizes():
    cp = FakeCP()
    model(1000, Plan("cholesky", 6, 2, 3, b=50), FakeSP(), cp)
    prims = {c[0] for c in cp.calls}
    assert {"bcast_row", "bcast_col", "scatterv_cold", "gatherv"} <= prims   # distribution: cold
    assert all(c[2] == (2, 3) for c in cp.calls if c[0].startswith("bcast_"))
    cp = FakeCP()
    model(1000, Plan("cholesky", 2, 1, 2, b=50), FakeSP(), cp)
    prims = {c[0] for c in cp.calls}
    assert "bcast_col" not in prims and "bcast_row" in prims      # r = 1: nothing down a column
    assert {"scatterv_cold", "gatherv"} <= prims and "pingpong" not in prims   # 1-D: one cold stream per receiver


def test_model_distribution_charges_check_copy_and_faults():
    """1-D: the root's gemv check plus its own blocks' copy plus the cold stream; collection: the
    new factor's page faults (``first_touch_time``) plus the copy plus the gather."""
    from autotune.models import movement

    class TouchCP(FakeCP):
        def first_touch_time(self, nbytes):
            return 3e-11 * nbytes

    sp, cp = FakeSP(), TouchCP()
    for n in (2100, 1000):
        out = model(n, Plan("cholesky", 2, 1, 2, b=100), sp, cp)
        own = movement.copy(sp, n * n / 2)
        assert ("gemv", "square") in sp.calls
        check = movement.finite_check(sp, n, n, "numpy-openblas", 1)
        faults = 3e-11 * 8 * n * n
        assert out["distribution"] == pytest.approx(check + own + cp.time("scatterv_cold", 2, 8.0 * n * n / 2))
        assert out["collection"] == pytest.approx(faults + own + cp.time("gatherv", 2, 8.0 * n * n / 2))
        assert own == pytest.approx(movement.COPY_SHARE * movement.passes(sp, n * n / 2))


def test_model_distribution_of_1d_grids_is_the_probed_column_scatter():
    """With the probe's timing of the runs' own column scatter (``colscatter_cold``, the root's
    copy of its blocks inside it) and of the check, 1-D distribution is their sum; 2-D grids keep
    packing plus Scatterv."""
    from autotune.models import movement

    class NewCP(FakeCP):
        def primitives(self):
            return ("colscatter_cold", "scatterv_cold", "gatherv")

        def time(self, primitive, p, nbytes, grid=None):
            scale = 3.0 if primitive == "colscatter_cold" else 1.0
            return scale * super().time(primitive, p, nbytes, grid)

        def check_time(self, backend, elements):
            return 1e-9 * elements

    sp, cp, n = FakeSP(), NewCP(), 2000
    blk = 8.0 * n * n / 2
    for r, c in ((1, 2), (2, 1)):
        out = model(n, Plan("cholesky", 2, r, c, b=100), sp, cp)
        assert out["distribution"] == pytest.approx(1e-9 * n * n + cp.time("colscatter_cold", 2, blk))
    two_d = model(n, Plan("cholesky", 4, 2, 2, b=100), sp, cp)
    assert ("scatterv_cold", 4, None) in cp.calls and ("colscatter_cold", 4, None) not in cp.calls
    assert two_d["distribution"] > 1e-9 * n * n + movement.copy(sp, n * n / 4)


def test_all_finite_any_dtype_and_order():
    from autotune.distributed.checks import all_finite

    for x in (np.eye(4), np.eye(4, dtype=np.float32), np.asfortranarray(np.ones((3, 5))), np.ones((0, 3))):
        assert all_finite(x, "numpy-openblas", 1)
    for dtype in (np.float64, np.float32, np.complex128):
        x = np.ones((3, 5), dtype=dtype)
        x[2, 4] = np.nan
        assert not all_finite(x, "numpy-openblas", 1)
        assert not all_finite(x.T, "mkl", 1)      # MKL absent here: the full check


def test_root_check_finds_nan_and_inf_and_survives_overflowing_sums():
    from autotune.distributed.cholesky import _check_root_matrix

    plan = Plan("cholesky", 2, 1, 2, b=2)
    big = np.full((4, 4), 1e308)                 # finite, but every column sum overflows
    assert _check_root_matrix(big, plan) is not None
    assert _check_root_matrix(big[::2, ::2], plan) is not None     # not contiguous: the full check
    for bad in (np.nan, np.inf, -np.inf):
        a = np.eye(5)
        a[3, 1] = bad
        with pytest.raises(ValueError, match="infs or NaNs"):
            _check_root_matrix(a, plan)
        with pytest.raises(ValueError, match="infs or NaNs"):
            _check_root_matrix(np.asfortranarray(a), plan)


@pytest.mark.parametrize("r,c", [(1, 2), (2, 1), (2, 2), (1, 4)])
def test_model_lookahead_never_slower_and_hides_panels(r, c):
    plan = Plan("cholesky", r * c, r, c, b=128)
    for cp in (FakeCP(), FakeCP(ts=1e-4, tw=1e-9)):
        on = model(4096, plan, FakeSP(), cp, lookahead=True)
        off = model(4096, plan, FakeSP(), cp, lookahead=False)
        assert on["total"] <= off["total"] * (1 + 1e-12)
        assert on["compute"] == pytest.approx(off["compute"])
    if c > 1:                                   # panels rotate over process columns: real gain
        assert on["total"] < 0.99 * off["total"]


def test_model_block_size_trends():
    plan = Plan("cholesky", 2, 2, 1, b=64)
    # Slow messages: fewer, larger panels win.
    slow = model(2048, plan, FakeSP(), FakeCP(ts=1e-3, tw=0.0), b=[16, 64, 256])["total"]
    assert slow[0] > slow[1] > slow[2]
    # Free messages and flat k: past a few passes over memory, larger blocks only lengthen the
    # serial panel work; smaller ones stream the trailing matrix through memory more often.
    free = FakeCP(ts=0.0, tw=0.0)
    flat = FakeSP()
    flat.k = lambda routine, backend, threads, x, pattern="square", param=0.0, dtype="float64": \
        np.full(np.shape(x), 2e-11 if routine != "add" else 1e-9)
    res = model(2048, Plan("cholesky", 2, 1, 2, b=64), flat, free, b=[8, 32, 128, 512, 1024])
    assert np.all(np.diff(res["total"][2:]) > 0)
    assert res["total"][0] > res["total"][1] > res["total"][2]
    assert np.all(np.diff(res["compute"][:3]) < 0)


def test_model_vectorised_over_blocks_matches_scalar_calls():
    plan = Plan("cholesky", 4, 2, 2, b=64)
    sp, cp = FakeSP(), FakeCP()
    many = model(777, plan, sp, cp, b=np.array([16, 64, 100, 1000]))
    for i, b in enumerate((16, 64, 100, 1000)):
        one = model(777, Plan("cholesky", 4, 2, 2, b=b), sp, cp)
        for key, v in one.items():
            assert many[key][i] == pytest.approx(v)
    assert MODELS["cholesky"] is model
    with pytest.raises(ValueError):
        model(100, Plan("cholesky", 1, b=0), sp, cp)


def test_model_on_a_measured_database(tiny_db):
    from autotune.db import load_sp

    sp = load_sp(tiny_db)
    for r, c in ((1, 2), (2, 1)):
        plan = Plan("cholesky", 2, r, c, b=32, backend="scipy-openblas")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # "add" is not in the tiny profile
            out = model(512, plan, sp, FakeCP())
        assert all(np.isfinite(v) and v >= 0 for v in out.values())
        assert out["compute"] > 0 and out["total"] >= out["compute"]


def test_model_orients_the_loop_grid_as_the_run_does():
    """The run factors a or a^T (whichever is contiguous in the order the plan moves) and always
    computes a lower factor, of the transposed problem on c x r when upper is wanted: on 1-D
    grids r x 1 and 1 x r run the same loop, set by lower and the input's order."""
    from autotune.models.distributed_cholesky import loop_grid

    assert loop_grid(2, 1, lower=False, order="C") == (1, 2) == loop_grid(1, 2, lower=False, order="C")
    assert loop_grid(2, 1, lower=True, order="C") == (2, 1) == loop_grid(1, 2, lower=True, order="C")
    assert loop_grid(2, 1, lower=True, order="F") == (1, 2)
    assert loop_grid(2, 3, lower=False, order="C") == (2, 3)
    assert loop_grid(2, 3, lower=False, order="F") == (3, 2)
    assert loop_grid(2, 1, lower=False, order="A") == (1, 2)          # neither order: copied, no flip
    sp, cp = FakeSP(), FakeCP(ts=1e-4, tw=1e-9)
    up = [model(2048, Plan("cholesky", 2, r, c, b=256), sp, cp) for r, c in ((2, 1), (1, 2))]
    low = model(2048, Plan("cholesky", 2, 2, 1, b=256), sp, cp, lower=True)
    assert up[0] == up[1] != low
    assert model(2048, Plan("cholesky", 2, 2, 1, b=256), sp, cp, lower=True, order="F") == up[0]


def test_model_charges_the_measured_loop_overhead_on_every_rank_each_panel():
    """``cp.loop_overhead`` (the probe's calibration) is time on every rank's clock per panel
    step, outside BLAS: communication and total grow by it times the panel count."""
    class Overhead(FakeCP):
        loop_overhead = 2e-4

    for r, c in ((1, 2), (2, 1), (2, 2)):
        plan = Plan("cholesky", r * c, r, c, b=64)
        base, more = (model(1000, plan, FakeSP(), cp) for cp in (FakeCP(), Overhead()))
        assert more["communication"] - base["communication"] == pytest.approx(16 * 2e-4, rel=1e-6)
        assert more["total"] - base["total"] == pytest.approx(16 * 2e-4, rel=1e-6)
        assert more["compute"] == base["compute"]


def test_model_charges_the_calibrated_loop_share_per_element_moved_in_the_loop():
    """``cp.loop_share`` replaces the nominal ``movement.LOOP_SHARE``: communication grows
    linearly with it (the elements each step moves are fixed), compute does not move."""
    from autotune.models import movement

    class Share(FakeCP):
        def __init__(self, share):
            super().__init__()
            self.loop_share = share

    plan = Plan("cholesky", 2, 1, 2, b=64)
    nominal, zero, one, two = (model(1000, plan, FakeSP(), cp)
                               for cp in (FakeCP(), Share(0.0), Share(1.0), Share(2.0)))
    step = one["communication"] - zero["communication"]
    assert step > 0 and two["communication"] - one["communication"] == pytest.approx(step, rel=1e-6)
    assert nominal["communication"] == pytest.approx(zero["communication"] + movement.LOOP_SHARE * step, rel=1e-6)
    assert one["compute"] == zero["compute"]


def test_loop_costs_fit_recovers_the_overhead_and_share_and_never_goes_negative():
    """``fit_loop_costs``: the model's response to each trial step, fitted by relative least squares
    with both values >= 0 (runs faster than the model with both at 0 give 0, not a negative cost)."""
    from autotune.install_probe.calibrate import LOOP_STEPS, fit_loop_costs

    rng = np.random.default_rng(1)
    base = rng.uniform(1e-4, 1e-3, 6)
    per = rng.uniform(1e-3, 5e-3, (6, 2))                 # d(comm)/d(value) per run
    truth = np.array([2e-5, 0.3])
    steps = np.array(list(LOOP_STEPS.values()))
    models = np.column_stack([base, base + per[:, 0] * steps[0], base + per[:, 1] * steps[1]])
    fit = fit_loop_costs(base + per @ truth, models)
    assert list(fit) == list(LOOP_STEPS)
    assert [fit["loop_overhead"], fit["loop_share"]] == pytest.approx(truth, rel=1e-6)
    assert fit_loop_costs(0.5 * base, models) == dict.fromkeys(LOOP_STEPS, 0.0)


def test_calibrations_run_the_real_routines(factored):
    """The comm probe's calibrations on a database with BLAS records: the distributed Cholesky's
    loop overhead per panel, each algorithm's fixed per-call costs and SUMMA's step waits by
    block; none without BLAS records. Stored, the platform reads them back; bad values read as nothing."""
    import json

    from test_comm import write_synthetic

    from autotune.db.comm_lookup import load_comm

    runs, path, bare = factored
    out = runs.check("calibrate np2")
    (loop, calls, waits), none = [json.loads(line[4:]) for line in out.stdout.splitlines() if line.startswith("CAL ")]
    assert none == [None, None, None]
    assert waits["p"] == [2] and waits["b"] == [16, 32] and len(waits["wait"][0]) == len(waits["end"][0]) == 2
    # a measured share of the compute: under load a rank waits on a descheduled partner for any
    # time, so only its sign and finiteness are fixed
    assert all(math.isfinite(w) and w >= 0.0 for w in waits["wait"][0])
    assert all(0.0 <= w < 1000.0 for w in waits["end"][0])         # steps of the root's update
    assert set(loop) == {"loop_overhead", "loop_share"}
    assert math.isfinite(loop["loop_overhead"]) and loop["loop_overhead"] >= 0.0   # seconds per panel (a loaded
    # host stretches any measured time: no upper bound)
    assert 0.0 <= loop["loop_share"] < 100.0               # out-of-cache passes per element moved
    assert set(calls) == {"cholesky", "lu", "bsr", "cbsr", "summa", "blocking", "overlap", "border_first"}
    assert all(set(c) == {"distribution", "collection"} and all(math.isfinite(t) and t >= 0 for t in c.values())
               for c in calls.values())
    write_synthetic(path, 2, **loop, call_overhead=calls, step_wait=waits)
    cp = load_comm(path, nprocs=2)
    assert cp.loop_overhead == loop["loop_overhead"] and cp.loop_share == loop["loop_share"]
    assert cp.call_overhead("summa") == calls["summa"]
    assert cp.step_wait(2, 16) == pytest.approx(waits["wait"][0][0])
    assert cp.end_wait(2, 32) == pytest.approx(waits["end"][0][1])
    assert cp.call_overhead("cannon") == {}
    for bad in ("x", -1.0, float("nan")):
        write_synthetic(bare, 2, loop_overhead=bad, loop_share=bad, call_overhead={"bsr": {"distribution": bad}})
        cp = load_comm(bare, nprocs=2)
        assert cp.loop_overhead == 0.0 and cp.loop_share is None and cp.call_overhead("bsr") == {}


def test_contention_per_step_short_calls_run_free_but_wait_for_a_core():
    """Oversubscribed (4 ranks, the probe's 2x slowdown of long dgemm on 4 busy ranks, none below
    1 ms): the loop's short calls (b = 32) measure their uncontended time, the run still waits for
    a core (the total stretches); with few wide panels the last steps keep fewer ranks busy, and
    each step pays the contention of its own busy ranks."""
    from autotune.db.contention import ContendedSP, Contention

    sizes = [64, 256, 512, 1024, 2048]                     # 2.5e-11 s/flop: 1024^3 dgemm ~54 ms
    slow = [1.0, 1.0, 1.0, 2.0, 2.0]
    cont = Contention(p=[1] * 5 + [4] * 5, n=sizes * 2, t=[1.0] * 5 + slow)
    plan = Plan("cholesky", 4, 1, 4, b=32)
    free = model(1024, plan, FakeSP(), FakeCP())
    shared = model(1024, plan, ContendedSP(FakeSP(), cont, 4), FakeCP())
    assert shared["compute"] == pytest.approx(free["compute"], rel=0.02)
    loop = [m["total"] - m["distribution"] - m["collection"] for m in (free, shared)]
    assert loop[1] > 1.5 * loop[0]                         # time sharing: waits, not compute
    # 4 panels of 1024: 3, 2, then 1 rank updating. Where 2 busy ranks also run 2x slower, the
    # steps with 2 ranks cost more: the contention follows each step's busy ranks, not p.
    wide = Plan("cholesky", 4, 1, 4, b=1024)
    two = Contention(p=[1] * 5 + [2] * 5 + [4] * 5, n=sizes * 3, t=[1.0] * 5 + slow + slow)
    free, shared, both = (model(4096, wide, sp, FakeCP()) for sp in
                          (FakeSP(), ContendedSP(FakeSP(), cont, 4), ContendedSP(FakeSP(), two, 4)))
    assert free["compute"] < shared["compute"] <= both["compute"]     # the busiest rank works at 3
    assert free["total"] < shared["total"] < both["total"]
