"""The set-up both distributed families share (``autotune.distributed.runs``), under mpiexec:
a root other than rank 0 and fewer plan ranks than the communicator, for every algorithm."""
from __future__ import annotations

from mpi_helpers import run_mpi

SETUP = """
import numpy as np
import scipy.linalg as sl
from mpi4py import MPI
from autotune.distributed import cholesky as dchol, gemm as dgemm
from autotune.distributed.plan import Phases
from autotune.distributed.runs import agree_plan, plan_run
from autotune.core.plans import Plan

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
rng = np.random.default_rng(3)            # same draws on every rank


class Counting:
    # The caller's communicator, counting the collectives the set-up runs on it.
    COLLECTIVES = {"allgather", "bcast", "Split", "Barrier", "Ibarrier", "Allgather", "Bcast"}

    def __init__(self, comm):
        self.comm, self.calls = comm, []

    def __getattr__(self, name):
        if name in self.COLLECTIVES:
            self.calls.append(name)
        return getattr(self.comm, name)


# The shared set-up itself: root renumbered to 0, ranks beyond p left out, one grid per shape.
plan = Plan("summa", 2, 1, 2, b=2)
for root in (0, 1):
    meta = agree_plan(comm, plan, "summa", root, lambda p: None, lambda: ("ops", ("meta", root)))
    assert meta == ("ops" if me == root else None, ("meta", root)), meta
    with plan_run(comm, plan, root) as run:
        if me >= plan.p:
            assert run is None
        else:
            assert run.rank == (me - root) % plan.p and run.is_root == (me == root)
            assert run.grid() is run.grid(1, 2) and (run.grid().pr, run.grid().pc) == (0, run.rank)
            assert run.empty("t", (2, 3), "F").flags.f_contiguous

# A problem on the root only is raised on every rank, in the same allgather.
def refuse():
    raise ValueError("root says no")


try:
    agree_plan(comm, plan, "summa", 1, lambda p: None, refuse)
except ValueError as exc:
    assert "root says no" in str(exc), exc
else:
    raise AssertionError("no error")

# Every gemm algorithm, root != 0, p < comm.size where the grid allows it; both memory orders.
plans = [(Plan("bsr", P - 1, P - 1, 1), P - 2), (Plan("cbsr", 2, 1, 2), 1), (Plan("cannon", 4, 2, 2), 2),
         (Plan("summa", 4, 2, 2, b=2), 3), (Plan("strassen_summa", 4, 2, 2, b=2, level=1), 1),
         (Plan("strassen_ms", 3, 3, 1, level=1), 2), (Plan("summa", 1, 1, 1, b=3), 0)]
for i, (plan, root) in enumerate(plans):
    a, b = rng.standard_normal((11, 9)), rng.standard_normal((9, 7))
    if i % 2:
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    counted, ph = Counting(comm), Phases()
    c = dgemm.ALGORITHMS[plan.algorithm](a if me == root else None, b if me == root else None, counted, plan,
                                         root=root, phases=ph)
    assert counted.calls == ["allgather", "Split"], (plan, counted.calls)
    assert bool(ph.seconds) == (me < plan.p), (plan, ph.seconds)
    if me == root:
        np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12, err_msg=str(plan))
    else:
        assert c is None, plan

# Cholesky on a 2-D grid, 1 x c and r x 1, root != 0, p < comm.size; both triangles and orders.
g = rng.standard_normal((23, 23))
s = g @ g.T + 23 * np.eye(23)
for i, (plan, root) in enumerate([(Plan("cholesky", 4, 2, 2, b=3), 3), (Plan("cholesky", 3, 1, 3, b=4), 2),
                                  (Plan("cholesky", 3, 3, 1, b=2), 1), (Plan("cholesky", 2, 2, 1, b=5), 1)]):
    for lower in (False, True):
        x = np.asfortranarray(s) if (i + lower) % 2 else s
        counted, ph = Counting(comm), Phases()
        f = dchol.cholesky(x if me == root else None, counted, plan, lower=lower, root=root, phases=ph)
        assert counted.calls == ["allgather", "Split"], (plan, counted.calls)
        assert bool(ph.seconds) == (me < plan.p), (plan, ph.seconds)
        if me == root:
            np.testing.assert_allclose(f, sl.cholesky(s, lower=lower), rtol=1e-12, atol=1e-12, err_msg=str(plan))
        else:
            assert f is None, plan

# Not positive definite, root != 0: LinAlgError on the plan's ranks, None beyond; still in step.
bad = s.copy()
bad[5, 5] = -1.0
try:
    out = dchol.cholesky(bad if me == 2 else None, comm, Plan("cholesky", 3, 1, 3, b=4), root=2)
    assert me >= 3 and out is None
except np.linalg.LinAlgError as exc:
    assert me < 3 and "6-th leading minor" in str(exc), exc
comm.Barrier()
print("OK", me, flush=True)
"""


def test_shared_setup_root_not_zero_and_fewer_ranks(tmp_path):
    proc = run_mpi(SETUP, 5, tmp_path)
    assert proc.stdout.count("OK") == 5, proc.stdout + proc.stderr
