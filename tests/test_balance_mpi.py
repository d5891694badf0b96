"""Dynamic load balancing over MPI (002): a field with one slow rank moves rows (and, on a 2 x 2
grid, columns) away from it and still equals the numpy program; whole-step times leave the shares
near equal (002 §4.3.5's failure); a rank raising or dying during a move ends the job on every
rank, never a hang."""
from __future__ import annotations

import pytest
from mpi_helpers import run_mpi, run_mpi_variants

FIELD = """
import sys
import numpy as np
from mpi4py import MPI
from autotune import stencil
from autotune.feedback.balance import Policy
from autotune.models.movement import LinkCost
from autotune.distributed import movement
from autotune.distributed.balance import Rebalancer
from autotune.distributed.stencil import scatter_field
from autotune.core.families import StencilProblem
from autotune.kernels.stencil import Sweeper, heat_weights, reference
from autotune.core.plans import Plan

comm = MPI.COMM_WORLD
me, P = comm.rank, comm.size
SLOW = P - 1                                   # this rank sweeps every region TIMES times over
# At P = 2 six times: the weights' rates stay clearly apart on a host that other work keeps busy
# (three times gave 1.1-1.4 there, 2.3-4 with six); at P = 4 only the moves' results are checked.
TIMES = 6 if P == 2 else 3


class Slow:
    def __init__(self):
        self.base = Sweeper(heat_weights(0.2), None, "numba-stencil", 1)

    def __call__(self, src, dst, rect):
        for _ in range(TIMES if me == SLOW else 1):
            self.base(src, dst, rect)


def run(n, steps, grid, timing, window=5, confidence=2.0, gate=True):
    prob = StencilProblem(n, n, steps, 1, False)
    plan = Plan("overlap", P, grid[0], grid[1], 1, backend="numba-stencil")
    u = np.random.default_rng(5).random((n, n)) if me == 0 else None
    field = scatter_field(comm, prob, plan, u, Slow())
    policy = Policy(window=window, interval="fixed", timing=timing, confidence=confidence,
                    tol=0.05 if gate else 0.0, gate=gate)
    rb = Rebalancer(comm, policy, LinkCost(0, 0, 0, 0), plan.b)
    field.advance(steps, rb)
    rb.finish()
    out = field.gather()
    rows, cols = field.shares()
    field.free()
    if me == 0:
        np.testing.assert_allclose(out, reference(u, steps, heat_weights(0.2)), rtol=1e-12, atol=1e-14)
    return rows, cols, rb


def ratio(rb):                                 # the slow rank's rate over rank 0's, median over the decisions
    return float(np.median([e.rates[SLOW] / e.rates[0] for e in rb.events]))


mode = sys.argv[1]
if mode == "shares":
    grid = (P, 1) if P == 2 else (2, 2)
    # a shared machine's samples spread widely (4 ranks on 2 cores even more): count every difference
    rows, cols, rb = run(256, 150, grid, "compute", confidence=0.0, gate=P == 2)
    assert rb.moves >= 1, [e.reason for e in rb.events]
    slow_rows = rows[SLOW // grid[1]] / rows.sum()
    slow_cols = cols[SLOW % grid[1]] / cols.sum()
    if me == 0:
        print("COMPUTE", rows.tolist(), cols.tolist(), rb.moves)
    if P == 2:
        # ideal about 0.2 (a sixth of the speed, less the halo work); how far the rows move follows
        # the measured rates, which a loaded machine blurs (119 of 256 left once in CI): only the direction
        assert slow_rows < 0.5, rows
        # the weights' rates: TIMES x less the halo work and each sub-step's fixed cost, which at n = 256
        # is large (1.3-1.4 at 3x in a clean-clone CI run on an Intel Xeon, KVM), so only "clearly slower"
        assert ratio(rb) > 1.2, [e.rates for e in rb.events]
        rows, cols, rb = run(256, 150, grid, "iteration")
        if me == 0:
            print("ITERATION", rows.tolist(), ratio(rb), flush=True)
        # whole steps: halo waits even the times out, far from the sweeps' 3x (1.54 once in a loaded CI run)
        assert ratio(rb) < 2.0, [e.rates for e in rb.events]
    else:   # 4 ranks time-slice 2 cores here: their rates are not their speeds; the 2-D moves equal numpy
        assert sum(rows) == sum(cols) == 256, (rows, cols)
    # the API: a balanced heat run equals the numpy program
    u = np.random.default_rng(1).random((40, 33))
    out = stencil.heat2d(u if me == 0 else None, 30, 0.2, comm=comm, balance=Policy(window=3, gate=False),
                         config=Plan("blocking", P, P, 1, 1, backend="numba-stencil"))
    if me == 0:
        np.testing.assert_allclose(out, reference(u, 30, heat_weights(0.2)), rtol=1e-12)
    with stencil.distribute(u if me == 0 else None, heat_weights(0.2), comm=comm, balance="sma",
                            config=Plan("overlap", P, P, 1, 1, backend="numba-stencil")) as field:
        field.advance(12)
        last = field.gather()
        assert field.rebalancer is not None
    if me == 0:
        np.testing.assert_allclose(last, reference(u, 12, heat_weights(0.2)), rtol=1e-12)
    try:
        stencil.heat2d(u if me == 0 else None, 3, comm=comm, balance="cma")
    except ValueError as exc:
        assert "balance" in str(exc), exc
    else:
        raise AssertionError("a bad balance= passed")
elif mode == "raise":
    def broken(*a, **k):
        raise MemoryError("no room for the moved rows")
    if me == 1:
        movement.take_flat = broken
    try:
        run(64, 60, (P, 1), "compute", window=3, confidence=0.0, gate=False)   # any difference moves
    except MemoryError as exc:
        print("RAISED", me, exc, flush=True)
    comm.Barrier()                             # still in step after the error
elif mode == "die":
    import os

    def dead(*a, **k):
        os._exit(7)
    if me == 1:
        movement.take_flat = dead
    run(64, 60, (P, 1), "compute", window=3, confidence=0.0, gate=False)   # (a loaded machine: no gate)
print("OK", me)
"""


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    """FIELD's shares at 4 ranks and its raise at 3, in one launch at -n 4 (each on that many of its
    ranks); its shares at 2 in a launch of its own whose waits spin, as MPI's do unless the ranks
    outnumber the cores: the balancer reads a rank's CPU share from them, and the tests' launches'
    yielding waits give a waiting rank's core to other work on a busy host, so the fast rank's share
    falls with the slow one's and both look equally slow (the moves then follow noise)."""
    d = tmp_path_factory.mktemp("balance")
    runs = run_mpi_variants([("shares np4", FIELD, 4, ["shares"]), ("raise np3", FIELD, 3, ["raise"])], d)
    (d / "np2").mkdir()
    two = run_mpi_variants([("shares np2", FIELD, 2, ["shares"])], d / "np2",
                           launch_env={"OMPI_MCA_mpi_yield_when_idle": "0"})
    return {"shares np4": runs, "raise np3": runs, "shares np2": two}


@pytest.mark.parametrize("nprocs", [2, 4])
def test_a_slow_rank_loses_rows_and_results_stay_equal(fields, nprocs):
    proc = fields[f"shares np{nprocs}"].check(f"shares np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


def test_a_rank_raising_during_a_move_raises_on_every_rank(fields):
    proc = fields["raise np3"].check("raise np3")
    assert proc.stdout.count("RAISED") == 3 and proc.stdout.count("OK") == 3, proc.stdout + proc.stderr
    assert "no room for the moved rows" in proc.stdout


def test_a_rank_dying_during_a_move_ends_the_job(tmp_path):
    proc = run_mpi(FIELD, 3, tmp_path, args=["die"], timeout=90, check=False)
    assert proc.returncode != 0 and "OK" not in proc.stdout, proc.stdout + proc.stderr
