"""Distributed GEMM family: every algorithm reproduces A @ B on every valid grid under mpiexec,
errors are raised on every rank alike, and the models behave (fakes, no MPI)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from mpi_helpers import run_mpi_variants

from autotune.core.plans import PHASES, Plan
from autotune.models import distributed_gemm as dg
from autotune.models.movement import cold_copies, cold_reads

# -- collective runs -------------------------------------------------------------------------------

SWEEP = """
import itertools
import numpy as np
from mpi4py import MPI
from autotune.distributed.gemm import ALGORITHMS, distributed_gemm
from autotune.distributed.plan import Phases
from autotune.core.plans import PHASES, Plan
from autotune.kernels.strassen import effective_levels, strassen_error_bound
from autotune.core.families import as_problem
comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
U = 2.0 ** -53
rng = np.random.default_rng(7)
bad = []

def grids(p):
    return [(r, p // r) for r in range(1, p + 1) if p % r == 0]

plans = []
for p in range(1, P + 1):
    plans.append(Plan("bsr", p, p, 1))
    plans.append(Plan("bsr", p, p, 1, weights=tuple(0.3 + i for i in range(p))))   # HoHe: rows by speed
    plans.append(Plan("strassen_ms", p, p, 1, level=1))
    plans.append(Plan("strassen_ms", p, 1, p, level=2))
    for r, c in grids(p):
        plans.append(Plan("cbsr", p, r, c))
        plans += [Plan("summa", p, r, c, b=b) for b in (1, 4)]
        plans += [Plan("strassen_summa", p, r, c, b=b, level=lv) for b, lv in ((3, 0), (2, 1), (5, 2))]
        if r == c:
            plans.append(Plan("cannon", p, r, c))
plans.append(Plan("strassen_ms", 1, level=0))
plans.append(Plan("strassen_ms", 1, level=2))
# awkward sizes: not divisible by grids or blocks, rectangular, 1 x k, m x 1, k = 1, even
shapes = [(11, 13, 9), (1, 9, 6), (7, 5, 1), (17, 6, 23), (2, 1, 3), (12, 16, 8)]
orders = ["CC", "FF", "CF", "FC"]
cases = 0
for si, (m, k, n) in enumerate(shapes):
    for pi, plan in enumerate(plans):
        order = orders[(si + pi) % len(orders)]
        root = plan.p - 1 if (si + pi) % 5 == 0 else 0
        a = np.asarray(rng.standard_normal((m, k)), order=order[0])
        b = np.asarray(rng.standard_normal((k, n)), order=order[1])
        a, b = comm.bcast((a, b), root=0)
        ph = Phases()
        mine = (a, b) if me == root else (np.zeros(3), None)     # non-roots' arguments are ignored
        fn = ALGORITHMS[plan.algorithm] if pi % 2 else distributed_gemm
        c = fn(*mine, comm, plan, root=root, phases=ph)
        cases += 1
        tag = f"{plan} shape={m}x{k}x{n} order={order} root={root}"
        if me != root:
            if c is not None:
                bad.append(f"non-root got a result: {tag}")
            if me >= plan.p and ph.seconds:
                bad.append(f"unused rank recorded phases: {tag}")
            continue
        ref = a @ b
        lv = plan.level if plan.algorithm.startswith("strassen") else 0
        if plan.algorithm == "strassen_summa":
            kpad = -(-k // 2 ** lv) * 2 ** lv
            bound = strassen_error_bound(kpad, lv)
        elif plan.algorithm == "strassen_ms":
            bound = strassen_error_bound(k, effective_levels(m, k, n, lv))
        else:
            bound = 0.0
        bound = max(bound, k * k * U) * np.abs(a).max() * np.abs(b).max() + 1e-300
        if not (isinstance(c, np.ndarray) and c.shape == (m, n) and c.dtype == np.float64
                and c.flags.c_contiguous):
            bad.append(f"wrong result type/shape/order: {tag}")
            continue
        err = np.abs(c - ref).max()
        if not err <= bound:
            bad.append(f"error {err:.3g} > bound {bound:.3g}: {tag}")
        keys = set(ph.seconds)
        if not keys <= set(PHASES) or "compute" not in keys:
            bad.append(f"phases {sorted(keys)}: {tag}")
        if plan.p > 1 and plan.algorithm != "strassen_ms" and not {"distribution", "collection"} <= keys:
            bad.append(f"phases {sorted(keys)} lack distribution/collection: {tag}")
        if (plan.algorithm in ("summa", "cannon") or (plan.algorithm == "cbsr" and plan.c > 1)) \\
                and plan.p > 1 and "communication" not in keys:
            bad.append(f"phases {sorted(keys)} lack communication: {tag}")
for line in bad:
    print("BAD", line, flush=True)
print("CASES", me, cases)

# -- lower-level API: SUMMA and BSR on distributed data --------------------------------------------
from autotune.distributed import DistMatrix, ProcessGrid, block_cyclic, row_block
from autotune.distributed.gemm import bsr_dist, summa_dist
m, k, n = 13, 10, 7
a = rng.standard_normal((m, k)); b = rng.standard_normal((k, n)); c0 = rng.standard_normal((m, n))
a, b, c0 = comm.bcast((a, b, c0), root=0)
for r, c in grids(P) + ([(1, P - 1)] if P > 2 else []):
    with ProcessGrid(comm, r, c) as grid:
        for bb in (1, 3):
            A = DistMatrix.from_root(a, block_cyclic(m, k, r, c, 2, bb), comm)
            B = DistMatrix.from_root(b, block_cyclic(k, n, r, c, bb, 4), comm)
            ph = Phases()
            C = summa_dist(A, B, grid, bb, phases=ph)
            got = C.to_root()
            if me == 0 and not np.allclose(got, a @ b, rtol=0, atol=1e-12):
                print("BAD summa_dist", r, c, bb, flush=True)
            if grid.inside and "compute" not in ph.seconds:
                print("BAD summa_dist phases", flush=True)
            C0 = DistMatrix.from_root(c0, C.layout, comm)
            C1 = summa_dist(A, B, grid, bb, C=C0, beta=1.0)
            got = C1.to_root()
            if me == 0 and not np.allclose(got, a @ b + c0, rtol=0, atol=1e-12):
                print("BAD summa_dist beta=1", r, c, bb, flush=True)
A = DistMatrix.from_root(a, row_block(m, k, P), comm)
got = bsr_dist(A, b).to_root()
if me == 0 and not np.allclose(got, a @ b, rtol=0, atol=1e-12):
    print("BAD bsr_dist", flush=True)
print("OK", me, flush=True)
"""


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_every_algorithm_reproduces_numpy(launched, nprocs):
    out = launched.check(f"sweep np{nprocs}")
    bad = [ln for ln in out.stdout.splitlines() if ln.startswith("BAD")]
    assert not bad, "\n".join(bad[:30])
    assert out.stdout.count("OK") == nprocs
    cases = [int(ln.split()[2]) for ln in out.stdout.splitlines() if ln.startswith("CASES")]
    assert len(cases) == nprocs and min(cases) >= 6 * (12 if nprocs == 1 else 20)


ERRORS = """
import numpy as np
from mpi4py import MPI
from autotune.distributed import DistMatrix, ProcessGrid, block_cyclic
from autotune.distributed.gemm import bsr, cannon, cbsr, distributed_gemm, strassen_ms, summa, summa_dist
from autotune.core.plans import Plan
comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
root = me == 0
a, b = np.ones((4, 5)), np.ones((5, 3))
nan = a.copy(); nan[1, 2] = np.nan

def attempt(case, fn, *args, **kw):
    try:
        fn(*args, **kw)
        print("NOERR", case, me, flush=True)
    except ValueError as exc:
        print("ERR", case, "|", type(exc).__name__, "|", exc, flush=True)

attempt("none", bsr, a if root else None, None, comm, Plan("bsr", P, P, 1))
attempt("inner", summa, a if root else None, np.ones((6, 3)) if root else None, comm, Plan("summa", P, 1, P, b=2))
attempt("nan", strassen_ms, nan if root else None, b if root else None, comm, Plan("strassen_ms", P, P, 1, level=1))
attempt("inf", strassen_ms, b if root else None, np.full((3, 2), np.inf) if root else None, comm,
        Plan("strassen_ms", P, P, 1, level=1))
inf = np.full((3, 2), np.inf); inf[0, 1] = -np.inf
for fn, plan in ((cbsr, Plan("cbsr", P, P, 1)), (summa, Plan("summa", P, 1, P, b=2))):   # as numpy's a @ b
    got = fn(nan[:3, :3] if root else None, inf if root else None, comm, plan)
    if root and not np.array_equal(got, nan[:3, :3] @ inf, equal_nan=True):
        print("NOERR nan-propagation", fn.__name__, got, flush=True)
attempt("1d", cbsr, np.ones(5) if root else None, b if root else None, comm, Plan("cbsr", P, 1, P))
attempt("complex", bsr, a.astype(complex) if root else None, b if root else None, comm, Plan("bsr", 1))
attempt("too_many", bsr, a if root else None, b if root else None, comm, Plan("bsr", P + 1, P + 1, 1))
attempt("root_unused", bsr, a, b, comm, Plan("bsr", 1), root=P)
attempt("zero_b", summa, a if root else None, b if root else None, comm, Plan("summa", P, P, 1, b=0))
attempt("wrong_plan", summa, a if root else None, b if root else None, comm, Plan("bsr", 1))
attempt("unknown", distributed_gemm, a if root else None, b if root else None, comm, Plan("magic", 1))
if P >= 2:
    attempt("ms_level0", strassen_ms, a if root else None, b if root else None, comm, Plan("strassen_ms", P, P, 1))
    attempt("cannon_grid", cannon, a if root else None, b if root else None, comm, Plan("cannon", 2, 1, 2))
with ProcessGrid(comm, 1, P) as grid:
    A = DistMatrix.from_root(a, block_cyclic(4, 5, 1, P, 2, 2), comm)
    B = DistMatrix.from_root(b, block_cyclic(5, 3, 1, P, 3, 2), comm)      # rows not in blocks of 2
    attempt("summa_dist_layout", summa_dist, A, B, grid, 2)
# still in step after all that: an ordinary call
c = bsr(a if root else None, b if root else None, comm, Plan("bsr", P, P, 1))
empty = summa(np.ones((0, 3)) if root else None, np.ones((3, 4)) if root else None, comm, Plan("summa", P, P, 1, b=2))
if root:
    assert np.array_equal(c, a @ b) and empty.shape == (0, 4)
# results never share the reused buffers (autotune.distributed.workspace): a later call leaves them be
plan = Plan("summa", P, 1, P, b=2)
c1 = summa(a if root else None, b if root else None, comm, plan)
c2 = summa(2 * a if root else None, b if root else None, comm, plan)
if root:
    assert np.array_equal(c1, a @ b) and np.array_equal(c2, 2 * a @ b)
print("OK", me, flush=True)
"""

ERROR_CASES = {"none": "must pass B", "inner": "inner dimensions", "nan": "NaN or infinity",
               "inf": "NaN or infinity", "1d": "must be 2-D", "complex": "only real",
               "too_many": "communicator has", "root_unused": "root", "zero_b": "block size",
               "wrong_plan": "plan is for", "unknown": "unknown distributed gemm",
               "ms_level0": "level >= 1", "cannon_grid": "square grid", "summa_dist_layout": "rows in blocks"}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """SWEEP at every world size and ERRORS at 1 and 3, in one launch at -n 4, each on that many of
    its ranks."""
    return run_mpi_variants([*((f"sweep np{p}", SWEEP, p) for p in (1, 2, 3, 4)),
                             *((f"errors np{p}", ERRORS, p) for p in (1, 3))], tmp_path_factory.mktemp("gemm"))


@pytest.mark.parametrize("nprocs", [1, 3])
def test_errors_raised_on_every_rank(launched, nprocs):
    out = launched.check(f"errors np{nprocs}")
    assert "NOERR" not in out.stdout, out.stdout
    assert out.stdout.count("OK") == nprocs
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ERR")]
    seen = {}
    for ln in lines:
        _, case, rest = ln.split(" ", 2)
        seen.setdefault(case, []).append(rest)
    expected = {c for c in ERROR_CASES if nprocs >= 2 or c not in ("cannon_grid", "ms_level0")}
    assert set(seen) == expected
    for case, msgs in seen.items():
        assert len(msgs) == nprocs and len(set(msgs)) == 1, (case, msgs)   # same error everywhere
        assert msgs[0].startswith("| ValueError |") and ERROR_CASES[case] in msgs[0], (case, msgs[0])


# -- models (no MPI) -------------------------------------------------------------------------------

class FakeSP:
    """k3 falls with block size (small blocks run slower); k2_add constant."""

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        x = np.asarray(x, dtype=float)
        if routine == "add":
            return np.full(x.shape, 2e-10)
        return 1e-11 * (1.0 + 32.0 / np.maximum(x, 1.0)) / threads


class FakeCP:
    """Hockney ``ts + tw m`` with ts = 5 us, tw = 0.1 ns/B for every primitive."""

    ts, tw = 5e-6, 1e-10

    def time(self, primitive, p, nbytes, grid=None):
        return self.ts + self.tw * np.asarray(nbytes, dtype=float)

    def ts_tw(self, primitive, p, nbytes, grid=None):
        return self.ts, self.tw


SP, CP = FakeSP(), FakeCP()


def plans_for(p: int):
    out = [Plan("bsr", p, p, 1), Plan("strassen_ms", p, p, 1, level=1)]
    for r in range(1, p + 1):
        if p % r:
            continue
        c = p // r
        out += [Plan("cbsr", p, r, c), Plan("summa", p, r, c, b=64), Plan("strassen_summa", p, r, c, b=64, level=1)]
        if r == c:
            out.append(Plan("cannon", p, r, c))
    return out


def test_models_and_algorithms_cover_the_same_names():
    from autotune.distributed.gemm import ALGORITHMS

    assert set(dg.MODELS) == set(ALGORITHMS) == set(dg.ALGORITHM_NAMES)


@pytest.mark.parametrize("p", [1, 2, 4, 6])
def test_phases_sum_to_total_and_grow_with_size(p):
    for plan in plans_for(p):
        small, big = dg.predict(500, 400, 300, plan, SP, CP), dg.predict(1000, 800, 600, plan, SP, CP)
        for t in (small, big):
            assert set(t) == {*PHASES, "total"} and all(v >= 0 and math.isfinite(v) for v in t.values())
            if plan.algorithm == "strassen_ms":        # overlapped: makespan, not the sum
                assert t["total"] >= max(t["compute"], t["distribution"]) > 0
            elif "summa" in plan.algorithm:            # phases of the busiest and the idlest rank
                assert max(t[ph] for ph in PHASES) <= t["total"] <= sum(t[ph] for ph in PHASES) * (1 + 1e-12)
            else:
                assert t["total"] == pytest.approx(sum(t[ph] for ph in PHASES), rel=1e-12)
        for ph in PHASES:
            assert big[ph] >= small[ph], (plan, ph)
        assert big["compute"] > small["compute"] and big["total"] > small["total"]
        if p == 1 or plan.algorithm == "strassen_ms":
            continue
        assert big["distribution"] > small["distribution"] > 0 and big["collection"] > small["collection"] > 0


def test_one_process_is_one_local_gemm():
    from autotune.models.gemm import blas

    ref = blas(300, 200, 100, "numpy-openblas", 1, SP)
    for alg in ("bsr", "cbsr", "cannon", "summa"):
        t = dg.predict(300, 200, 100, Plan(alg, 1, b=32), SP, CP)
        assert t["compute"] == pytest.approx(ref) and t["total"] == pytest.approx(ref)
        assert t["distribution"] == t["communication"] == t["collection"] == 0.0


def test_compute_shrinks_with_processes():
    n = 2000
    comp = {p: dg.bsr(n, n, n, Plan("bsr", p, p, 1), SP, CP)["compute"] for p in (1, 2, 4, 8)}
    assert comp[2] == pytest.approx(comp[4] * 2, rel=0.02) and comp[4] == pytest.approx(comp[8] * 2, rel=0.02)
    cannon = {q: dg.cannon(n, n, n, Plan("cannon", q * q, q, q), SP, CP) for q in (2, 3, 4)}
    assert cannon[2]["compute"] > cannon[3]["compute"] > cannon[4]["compute"]
    # 2q Sendrecv of blocks of n^2/q^2: volume 2 n^2 / q falls, start-ups 2q rise
    vol = {q: cannon[q]["communication"] - 2 * q * CP.ts for q in cannon}
    assert vol[2] > vol[3] > vol[4]


def test_summa_communication_falls_as_b_grows():
    comm = [dg.summa(1024, 1024, 1024, Plan("summa", 4, 2, 2, b=b), SP, CP)["communication"]
            for b in (8, 32, 128, 512)]
    assert comm[0] > comm[1] > comm[2] > comm[3] > 0
    # same volume, ceil(k/b) steps of two broadcasts: the difference is start-ups
    assert comm[0] - comm[3] == pytest.approx(2 * (1024 // 8 - 1024 // 512) * CP.ts, rel=1e-6)
    # a 1 x p or p x 1 grid broadcasts along one direction only (row-major: C^T = B^T A^T on p x 1,
    # so 1024 x 64 panels travel down the column, each packed first by one out-of-cache pass,
    # movement.cold_copies); the synchronous broadcasts pay nothing more (no movement.in_loop)
    pack = float(cold_copies(SP, 1024 * 64))
    assert pack > 0
    row_only = dg.summa(1024, 1024, 1024, Plan("summa", 4, 1, 4, b=64), SP, CP)["communication"]
    assert row_only == pytest.approx(16 * (CP.ts + CP.tw * 8 * 1024 * 64 + pack))
    # the X-panels go as they lie, and each step waits for the owner reading its panel out of
    # memory (movement.cold_reads), 3 of the 4 steps in turn; the owner pays its own as compute
    col_plan, owner = Plan("summa", 4, 4, 1, b=64), float(cold_reads(SP, 1024 * 1024))
    col_only = dg.summa(1024, 1024, 1024, col_plan, SP, CP)
    assert col_only["communication"] == pytest.approx(16 * (CP.ts + CP.tw * 8 * 1024 * 64) + owner * 3 / 4)
    update = 2.0 * 1024 * 1024 * 256 * dg._k3(SP, col_plan, 512.0, "rankb", 64)    # 1024 x 256 per rank
    assert col_only["compute"] == pytest.approx(update + owner / 4)


def test_summa_idle_rank_waits_out_the_imbalance():
    """Uneven block-cyclic splits: the rank with fewer columns waits in the broadcasts (and, for
    the last step, in the gather, while the root is still updating: collection is then the gather
    plus the longer of that wait and the root's unpacking); compute is the loaded rank's, total its
    critical path."""
    even = dg.summa(1024, 1024, 1024, Plan("summa", 2, 2, 1, b=512), SP, CP)
    odd = dg.summa(1536, 1536, 1536, Plan("summa", 2, 2, 1, b=512), SP, CP)   # 3 blocks: 2 vs 1
    assert even["total"] == pytest.approx(sum(even[ph] for ph in PHASES))
    gather = dg._coll(CP, "gatherv", 2, 8 * 1536 * 512)         # rank 1's one block moves, the root's two stay
    unpack = dg._pack(SP, CP, 1536 * 1536, dg._run(1536, 2, 512), "put")
    end = odd["collection"] - gather
    assert end > unpack                                          # the wait hides the unpacking
    idle = odd["communication"] + end - (odd["total"] - odd["distribution"] - odd["compute"] - gather - unpack)
    assert idle == pytest.approx(odd["compute"] / 2, rel=0.05)   # half the columns, the same k
    assert end == pytest.approx(idle / 3, rel=1e-6)              # the last of 3 equal steps


def test_summa_waits_for_the_slowest_of_equal_ranks_or_the_imbalance_whichever_is_larger():
    """Equal loads: every step waits ``cp.step_wait(p, b)`` of its compute for the slowest rank (in
    the broadcasts; the last step's in the gather), which is on the critical path (every rank waits
    for another in turn). Uneven loads: the imbalance alone, when larger."""
    class Skewed(FakeCP):
        def step_wait(self, p, b, grid=None):
            return 0.2 if p == 2 else 1.0

    even_plan, odd_plan = Plan("summa", 2, 2, 1, b=128), Plan("summa", 2, 2, 1, b=512)
    base, skewed = dg.summa(1024, 1024, 1024, even_plan, SP, CP), dg.summa(1024, 1024, 1024, even_plan, SP, Skewed())
    waited = {ph: skewed[ph] - base[ph] for ph in ("communication", "collection", "total")}
    assert waited["communication"] == pytest.approx(0.2 * base["compute"] * 7 / 8)     # 8 steps of b = 128
    unpack = dg._pack(SP, CP, 1024 * 1024, dg._run(1024, 2, 128), "put")      # hidden by the last wait
    assert 0.2 * base["compute"] / 8 > unpack
    assert waited["collection"] == pytest.approx(0.2 * base["compute"] / 8 - unpack)
    assert waited["total"] == pytest.approx(0.2 * base["compute"])       # the loaded rank waits it too
    odd = [dg.summa(1536, 1536, 1536, odd_plan, SP, cp) for cp in (CP, Skewed())]
    assert odd[0] == odd[1]                                       # half the compute idle > 20% of it


def test_summa_waits_the_calibrated_step_wait_of_its_p_and_block_over_the_probe_skew():
    """``cp.step_wait(p, b)`` (the probe's SUMMA calibration) replaces ``compute_skew(p)``: each
    block waits its own share of the compute."""
    class Calibrated(FakeCP):
        def compute_skew(self, p):
            return 0.5

        def step_wait(self, p, b, grid=None):
            return {64: 0.5, 256: 0.2}[b] if p == 2 else 1.0

    for b, share in ((64, 0.5), (256, 0.2)):
        plan = Plan("summa", 2, 2, 1, b=b)
        base, cal = dg.summa(1024, 1024, 1024, plan, SP, CP), dg.summa(1024, 1024, 1024, plan, SP, Calibrated())
        steps = 1024 // b
        waited = share * base["compute"]
        assert cal["communication"] - base["communication"] == pytest.approx(waited * (steps - 1) / steps)
        unpack = dg._pack(SP, CP, 1024 * 1024, dg._run(1024, 2, b), "put")      # hidden by the last wait
        assert waited / steps > unpack
        assert cal["collection"] - base["collection"] == pytest.approx(waited / steps - unpack)


def test_summa_root_waits_its_calibrated_end_share_only_where_another_rank_holds_as_much():
    """``cp.end_wait(p, b)`` steps of the root's update join the root's side of the gather (its
    unpacking) when another rank's piece of C is as large as the root's: none is reliably last.
    Where the root holds the most (uneven blocks) it finishes last and waits for no one. The total
    (the last rank's path) does not change."""
    class Ends(FakeCP):
        def end_wait(self, p, b):
            return 3.0 if p == 2 else 0.0

    even = Plan("summa", 2, 2, 1, b=128)
    base, late = dg.summa(1024, 1024, 1024, even, SP, CP), dg.summa(1024, 1024, 1024, even, SP, Ends())
    assert late["collection"] - base["collection"] == pytest.approx(3.0 * base["compute"] / 8)   # 8 steps
    assert late["total"] == base["total"] and late["communication"] == base["communication"]
    odd = Plan("summa", 2, 2, 1, b=512)                        # 3 blocks: the root holds 2
    assert dg.summa(1536, 1536, 1536, odd, SP, Ends()) == dg.summa(1536, 1536, 1536, odd, SP, CP)


def test_summa_ranks_without_a_piece_of_c_do_not_wait_in_the_gather():
    """4 x 1, n = 1536, b = 512: three blocks on four ranks, the fourth holds nothing of C and
    waits out every step in the broadcasts, but sends nothing to gather: the equal holders arrive
    together and collection is the gather and the root's unpacking."""
    r = dg.summa(1536, 1536, 1536, Plan("summa", 4, 4, 1, b=512), SP, CP)
    gather = dg._coll(CP, "gatherv", 4, 8 * 1536 * 512)
    unpack = dg._pack(SP, CP, 1536 * 1536, dg._run(1536, 1, 512), "put")
    assert r["collection"] == pytest.approx(gather + unpack)
    assert r["communication"] > r["compute"] * 2 / 3           # the empty rank's idle steps, all but the last


def test_cbsr_gathers_along_rows_only_with_several_columns():
    one_col = dg.cbsr(800, 600, 400, Plan("cbsr", 4, 4, 1), SP, CP)
    two_col = dg.cbsr(800, 600, 400, Plan("cbsr", 4, 2, 2), SP, CP)
    assert one_col["communication"] == 0.0 < two_col["communication"]
    assert two_col["communication"] == pytest.approx(CP.ts + CP.tw * 8 * 400 * 300)


def test_cbsr_on_one_process_column_is_bsr_and_is_not_a_separate_candidate():
    """Same scatter, product and gather: one model, and the selector lists the plan once (as BSR)."""
    assert dg.cbsr(800, 600, 400, Plan("cbsr", 4, 4, 1), SP, CP) == dg.bsr(800, 600, 400, Plan("bsr", 4, 4, 1),
                                                                            SP, CP)
    from autotune.core.families import GemmProblem
    from autotune.select.distributed import plans

    listed = plans(GemmProblem(1024, 1024, 1024), 4, cores=4)
    assert not [q for q in listed if q.algorithm == "cbsr" and q.c == 1]
    assert {(q.r, q.c) for q in listed if q.algorithm == "cbsr"} == {(1, 2), (1, 3), (1, 4), (2, 2)}
    assert {(q.r, q.c) for q in listed if q.algorithm == "bsr"} == {(2, 1), (3, 1), (4, 1)}


def test_strassen_summa_levels():
    base = Plan("summa", 4, 2, 2, b=64)
    for n in (300, 1000):
        assert dg.strassen_summa(n, n, n, Plan("strassen_summa", 4, 2, 2, b=64), SP, CP) == \
            pytest.approx(dg.summa(n, n, n, base, SP, CP))
    l0, l1 = (dg.strassen_summa(8192, 8192, 8192, Plan("strassen_summa", 4, 2, 2, b=64, level=lv), SP, CP)
              for lv in (0, 1))
    assert l1["compute"] < l0["compute"]                       # 7/8 of the flops beat the additions
    assert l1["communication"] > l0["communication"]           # 7 SUMMA runs at half size: more start-ups
    s0, s1 = (dg.strassen_summa(64, 64, 64, Plan("strassen_summa", 4, 2, 2, b=8, level=lv), SP, CP)
              for lv in (0, 1))
    assert s1["compute"] > s0["compute"]                       # small: additions dominate


def test_strassen_ms_schedule():
    from autotune.models.gemm import blas, strassen

    n = 2048
    one = dg.strassen_ms(n, n, n, Plan("strassen_ms", 1, level=2), SP, CP)
    assert one["total"] == pytest.approx(float(strassen(n, n, n, [2], "numpy-openblas", 1, SP)[0]))
    prod = blas(n // 2, n // 2, n // 2, "numpy-openblas", 1, SP)
    # busiest worker (table 3.21): p=2: 7 products, p=3: 4, p=4: 3, p=5..7: 2, p=8: 1
    for p, most in ((2, 7), (3, 4), (4, 3), (5, 2), (7, 2), (8, 1)):
        t = dg.strassen_ms(n, n, n, Plan("strassen_ms", p, p, 1, level=1), SP, CP)
        assert t["compute"] == pytest.approx(most * prod)
        assert t["total"] >= most * prod
    totals = [dg.strassen_ms(n, n, n, Plan("strassen_ms", p, p, 1, level=1), SP, CP)["total"] for p in (2, 3, 4, 8)]
    assert totals == sorted(totals, reverse=True)
    deeper = dg.strassen_ms(n, n, n, Plan("strassen_ms", 8, 8, 1, level=2), SP, CP)
    assert deeper["compute"] < dg.strassen_ms(n, n, n, Plan("strassen_ms", 8, 8, 1, level=1), SP, CP)["compute"]


def test_invalid_plans_rejected():
    for plan in (Plan("cannon", 2, 1, 2), Plan("summa", 2, 1, 2), Plan("strassen_ms", 2, 2, 1),
                 Plan("strassen_summa", 1, b=4, level=-1), Plan("nonesuch", 1)):
        assert dg.plan_error(plan)
        with pytest.raises(ValueError):
            dg.predict(10, 10, 10, plan, SP, CP)
    assert dg.plan_error(Plan("cannon", 9, 3, 3)) is None


def test_models_accept_the_real_lookups(tmp_path):
    """The real SP and communication lookups (here without data: nominal defaults) plug in."""
    from autotune.db.comm_lookup import CommParams
    from autotune.db.lookup import load_sp

    sp, cp = load_sp(tmp_path / "absent.h5"), CommParams(None, "test", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for plan in plans_for(4):
            t = dg.predict(777, 555, 333, plan, sp, cp)
            assert t["total"] > 0 and all(math.isfinite(v) for v in t.values()), plan



def test_unmeasured_pattern_falls_back_to_square():
    class Table:
        def has(self, routine, backend, threads, pattern="square", dtype="float64"):
            return pattern == "square"

    class Recording(FakeSP):
        table = Table()

        def __init__(self):
            self.seen = set()

        def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
            self.seen.add((routine, pattern))
            return super().k(routine, backend, threads, x, pattern, param, dtype)

    sp = Recording()
    for plan in plans_for(4):
        dg.predict(900, 700, 500, plan, sp, CP)
    assert {pat for _, pat in sp.seen} == {"square"}


def test_thread_options_keep_ranks_times_threads_within_cores():
    from autotune.select.distributed import thread_options

    assert thread_options(2, 4) == [1, 2] and thread_options(2, 2) == [1]
    assert thread_options(4, 2) == [] and thread_options(4, 2, oversubscribe=True) == [1]
    assert thread_options(4, 2, hosts=2) == [1] and thread_options(3, 2, hosts=2) == [1]


def test_models_charge_the_page_faults_of_the_roots_new_result():
    """C is a new array on the root: every distributed algorithm's collection (and strassen_ms's
    makespan) grows by its page faults (first_touch_time of its bytes); one process pays nothing extra."""
    class Faulting(FakeCP):
        def first_touch_time(self, nbytes):
            return 1e-10 * nbytes

    m, k, n = 300, 200, 250
    for plan in plans_for(4):
        base, more = dg.predict(m, k, n, plan, SP, CP), dg.predict(m, k, n, plan, SP, Faulting())
        assert more["collection"] - base["collection"] == pytest.approx(1e-10 * 8 * m * n), plan
        assert more["total"] - base["total"] == pytest.approx(1e-10 * 8 * m * n), plan
    one = Plan("summa", 1, 1, 1, b=64)
    assert dg.predict(m, k, n, one, SP, Faulting()) == dg.predict(m, k, n, one, SP, CP)


def test_block_cyclic_packing_is_charged_at_the_probes_cost_by_run_length():
    """SUMMA's root packs both operands and unpacks C: with a measured ``pack_time`` the model
    charges it by the contiguous run (block b when the column-major operand's rows are split
    over R = plan.c > 1 process rows, else whole columns) in place of one memory pass."""
    calls = []

    class Packing(FakeCP):
        def pack_time(self, kind, elements, run):
            calls.append((kind, elements, run))
            return 1e-9 * elements * (2.0 if run < 1000 else 1.0)

    m, k, n = 1200, 1100, 1000
    for plan, run_x, run_y in ((Plan("summa", 2, 2, 1, b=64), n, k), (Plan("summa", 2, 1, 2, b=64), 64, 64)):
        calls.clear()
        base, packed = dg.predict(m, k, n, plan, SP, CP), dg.predict(m, k, n, plan, SP, Packing())
        assert sorted(calls) == sorted([("take", n * k, run_x), ("take", k * m, run_y), ("put", n * m, run_x)])
        moved = sum(1e-9 * e * (2.0 if r < 1000 else 1.0) for _, e, r in calls)
        passes = dg._passes(SP, m * k + k * n) + dg._passes(SP, m * n)
        extra = packed["distribution"] + packed["collection"] - base["distribution"] - base["collection"]
        assert extra == pytest.approx(moved - passes)
        assert packed["compute"] == base["compute"] and packed["communication"] == base["communication"]


def test_selector_adds_the_measured_call_overhead_to_the_phases():
    """``cp.call_overhead(algorithm)`` (the probe's calibration) is added to its phases and the
    total of every plan of that algorithm; other algorithms and test doubles without it: as is."""
    from autotune.select.distributed import _with_call_overhead

    class Costly(FakeCP):
        def call_overhead(self, algorithm):
            return {"distribution": 1e-3, "collection": 2e-4} if algorithm == "summa" else {}

    plan = Plan("summa", 2, 2, 1, b=64)
    base = dg.summa(512, 512, 512, plan, SP, CP)
    more = _with_call_overhead(base, plan, Costly())
    assert more["distribution"] == pytest.approx(base["distribution"] + 1e-3)
    assert more["collection"] == pytest.approx(base["collection"] + 2e-4)
    assert more["total"] == pytest.approx(base["total"] + 1.2e-3)
    assert more["compute"] == base["compute"] and more["communication"] == base["communication"]
    assert _with_call_overhead(base, Plan("bsr", 2, 2, 1), Costly()) == base
    assert _with_call_overhead(base, plan, CP) == base


def test_scatter_and_gather_move_the_largest_non_root_piece():
    """The root's own piece (the largest of an uneven block-cyclic split) never travels: 1536 in
    blocks of 512 over 2 ranks is 1024 + 512 columns, and 512 of them move."""
    assert dg._moved(1536, 1536, 1, 2, 512) == 1536 * 512
    assert dg._moved(1536, 1536, 2, 2, 512) == 1024 * 512            # ranks (0,1) and (1,0)
    assert dg._moved(1000, 800, 1, 1, 64) == 1000 * 800              # one rank: its piece


def _two_cores():
    """Contention of 2..4 ranks on 2 cores: long calls (n >= 1024) time-shared, short ones free;
    the slowest of 3 ranks 2x (it shares a core), their mean 1.5x."""
    from autotune.db.contention import Contention, series

    rows = []
    for q, mean, worst in ((1, 1.0, 1.0), (2, 1.0, 1.0), (3, 1.5, 2.0), (4, 2.0, 2.0)):
        for n in (128, 256, 1024, 2048):
            short = n < 1024
            rows += [(q, n, "square", 1.0 if short else mean),
                     (q, n, series("square", "max"), 1.0 if short else worst)]
    q, n, pattern, t = zip(*rows, strict=True)
    return Contention(q, n, t, pattern)


def test_lockstep_packs_ranks_on_cores_largest_load_first():
    """Ranks that synchronise every step keep their cores: loads 2:1:1 on 2 cores end with the
    large rank's own (uncontended) work, which the other two share a core to match; equal loads of
    4 ranks take twice one rank's; 2 ranks on 2 cores run free. Short calls measure their own time."""
    from autotune.db.contention import ContendedSP, lockstep

    sp = ContendedSP(SP, _two_cores(), 4)
    pack = sp.lockstep("openblas", 1)
    busy, wall = pack([2.0, 1.0, 1.0], 1.0)                  # calls of 1 s: long
    assert sp.cores(3) == 2 and sp.cores(4) == 2 and sp.cores(2) == 2
    assert wall == pytest.approx(2.0)
    assert busy == pytest.approx([2.0, 2.0, 2.0])           # the pair time-share their core
    busy, wall = pack([1.0] * 4, 1.0)
    assert wall == pytest.approx(2.0) and busy == pytest.approx([2.0] * 4)
    busy, wall = pack([1.0] * 4, 1e-5)                       # short calls run free, the step waits
    assert wall == pytest.approx(2.0) and busy == pytest.approx([1.0] * 4)
    busy, wall = pack([1.0, 1.0], 1.0)
    assert wall == pytest.approx(1.0) and busy == pytest.approx([1.0, 1.0])
    busy, wall = sp.lockstep("openblas", 2)([1.0, 1.0], 1.0)      # 2 ranks of 2 threads: one place
    assert wall == pytest.approx(2.0) and busy == pytest.approx([2.0, 2.0])
    busy, wall = lockstep(SP, "openblas", 1)([1.0, 3.0], 1.0)    # uncontended: every rank alone
    assert wall == 3.0 and list(busy) == [1.0, 3.0]


def test_summa_on_oversubscribed_cores_runs_for_the_busiest_core_on_its_critical_path():
    """4 ranks on 2 cores, equal loads: the loop takes two ranks' updates; the total carries it
    (before session 24 it left the wait for a core out: 25-35% short at P = 4 here)."""
    from autotune.db.contention import ContendedSP

    sp = ContendedSP(SP, _two_cores(), 4)
    plan = Plan("summa", 4, 1, 4, b=512)                 # updates of ~40 ms: time-shared
    free, shared = (dg.summa(4096, 4096, 4096, plan, x, CP) for x in (SP, sp))
    loop = [t["total"] - t["distribution"] - t["collection"] for t in (free, shared)]
    assert shared["compute"] == pytest.approx(2.0 * free["compute"])
    assert loop[1] - loop[0] == pytest.approx(free["compute"], rel=0.02)   # the other rank's turn on the core
    short = Plan("summa", 4, 1, 4, b=16)                 # updates of ~0.1 ms: they run free, the loop waits
    free, shared = (dg.summa(1024, 1024, 1024, short, x, CP) for x in (SP, sp))
    assert shared["compute"] == pytest.approx(free["compute"])
    assert shared["communication"] - free["communication"] == pytest.approx(free["compute"], rel=0.03)
    assert free["compute"] <= shared["total"] - free["total"] <= 1.1 * free["compute"]   # + contended copies


def test_one_product_per_rank_on_shared_cores_the_rank_alone_waits_in_the_gather():
    """BSR and CBSR on 3 ranks, 2 cores (``_two_cores``): two ranks share a core (their product 2x),
    the third, alone, waits for them in the gather (collection); the total is the pair's product.
    Measured here (session 21): 52 ms of the root's gather at n = 2048 was that wait."""
    from autotune.db.contention import ContendedSP

    sp = ContendedSP(SP, _two_cores(), 3)
    for plan in (Plan("bsr", 3, 3, 1), Plan("cbsr", 3, 1, 3)):
        free, shared = (dg.MODELS[plan.algorithm](2048, 2048, 2048, plan, x, CP) for x in (SP, sp))
        assert shared["compute"] == pytest.approx(2.0 * free["compute"])
        assert shared["collection"] - free["collection"] == pytest.approx(free["compute"], rel=0.02)
        assert shared["total"] - free["total"] == pytest.approx(free["compute"], rel=0.02)


def test_cannon_on_shared_cores_waits_in_its_shifts_for_the_busiest_core():
    """Cannon on 4 ranks, 2 cores: each step's block product runs on a core two ranks share. Long
    products time-share (compute 2x, nobody waits); short ones run free and the shifts wait."""
    from autotune.db.contention import ContendedSP

    sp = ContendedSP(SP, _two_cores(), 4)
    plan = Plan("cannon", 4, 2, 2)
    free, shared = (dg.cannon(4096, 4096, 4096, plan, x, CP) for x in (SP, sp))     # 2 products of ~0.2 s
    assert shared["compute"] == pytest.approx(2.0 * free["compute"])
    assert shared["communication"] == pytest.approx(free["communication"])
    free, shared = (dg.cannon(256, 256, 256, plan, x, CP) for x in (SP, sp))       # of ~0.1 ms
    assert shared["compute"] == pytest.approx(free["compute"])
    assert shared["communication"] - free["communication"] == pytest.approx(free["compute"])
    assert shared["total"] - free["total"] == pytest.approx(free["compute"], rel=0.05)
