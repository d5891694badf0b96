"""Collective calls agree on their arguments, errors and cores: no rank hangs or returns alone.

One launch runs every case (mismatched ``lower``/``root``/family, exceptions of any type on the
root, local-plan errors, an out-of-range root, ranks pinned to one core each) and prints one line
per rank and case; the test checks that every rank raised the expected type with one message.
"""
from __future__ import annotations

import os

import pytest
from mpi_helpers import run_mpi, run_mpi_variants

from autotune.distributed.collective import RankCores, mask_cores, node_cores, rebuilt, verdict_of

AGREE_SETUP = """
import contextlib, io, os, sys
import numpy as np, scipy.linalg as sl
from mpi4py import MPI
import autotune
from autotune import tuned_cholesky, tuned_gemm
from autotune.entry.protocol import agree_plan as _decide
from autotune.entry.gemm import _gemm_problem, collective as distributed_gemm
from autotune.distributed.collective import gather_cores
from autotune.distributed.plan import Plan
from autotune.core.families import as_problem
autotune.set_options(db=sys.argv[1])
comm = MPI.COMM_WORLD
P, rank, root = comm.size, comm.rank, comm.rank == 0
rng = np.random.default_rng(2)
g = rng.standard_normal((300, 300)); s = g @ g.T + 300 * np.eye(300)
a = rng.standard_normal((40, 30)); b = rng.standard_normal((30, 20))
dist = {"algorithm": "cholesky", "p": P, "r": 1, "c": P, "b": 32}

class MyError(RuntimeError):
    pass

class Bad:
    def __array__(self, dtype=None, copy=None):
        raise MyError("no array here")

words = np.array([["x", "y"], ["z", "w"]], dtype=object)
cases = {
    "lower": (ValueError, lambda: tuned_cholesky(s if root else None, lower=root, comm=comm)),
    "lower_forced": (ValueError, lambda: tuned_cholesky(s if root else None, lower=root, comm=comm, config=dist)),
    "root_differs": (ValueError, lambda: tuned_cholesky(s if root else None, root=rank, comm=comm)),
    "family": (ValueError, lambda: tuned_gemm(a, b, comm=comm) if root else tuned_cholesky(None, comm=comm)),
    "array_raises_chol": (RuntimeError, lambda: tuned_cholesky(Bad() if root else None, comm=comm)),
    "array_raises_gemm": (RuntimeError, lambda: distributed_gemm(Bad() if root else None, b, comm)),
    "array_raises_tuned": (RuntimeError, lambda: tuned_gemm(Bad() if root else None, b, comm=comm, trans_a=True)),
    "c_shape": (ValueError, lambda: tuned_gemm(a, b, c=np.ones((3, 3)), beta=1.0, comm=comm)),
    "out_shape": (ValueError, lambda: tuned_gemm(a, b, np.empty((2, 2)), comm=comm)),
    "not_pd_local": (np.linalg.LinAlgError, lambda: tuned_cholesky(-s if root else None, comm=comm,
                                                                   config=Plan("local", 1))),
    "not_pd": (np.linalg.LinAlgError, lambda: tuned_cholesky(-s if root else None, comm=comm)),
    "gemm_local": (TypeError, lambda: tuned_gemm(words if root else None, words if root else None, comm=comm)),
    "root_5": (ValueError, lambda: tuned_cholesky(s if root else None, root=5, comm=comm)),
    "root_negative": (ValueError, lambda: tuned_gemm(a, b, root=-1, comm=comm)),
    "root_str": (ValueError, lambda: tuned_gemm(a, b, root="0", comm=comm)),
    "root_mixed": (ValueError, lambda: tuned_gemm(a, b, root=0 if root else 5, comm=comm)),
}
"""
# One line per rank and case: ERR name rank expected-type? type message, or NOERR name rank.
RUN_CASES = """
for name, (want, call) in cases.items():
    try:
        call()
    except Exception as exc:
        print("ERR", name, rank, isinstance(exc, want), type(exc).__name__, str(exc), flush=True)
    else:
        print("NOERR", name, rank, flush=True)
"""
AGREE_CHECKS = """
# every rank raises the root's exception type (defined in this script: every rank can name it)
try:
    tuned_cholesky(Bad() if root else None, comm=comm)
except RuntimeError as exc:
    assert type(exc).__name__ == "MyError", type(exc)      # one type on every rank: the user's own
# still in step after all that
f = tuned_cholesky(s if root else None, lower=True, comm=comm)
c = tuned_gemm(a if root else None, b if root else None, comm=comm)
c0 = rng.standard_normal((20, 40)); o = np.empty((20, 40))
cd = tuned_gemm(b.T if root else None, a if root else None, o, comm=comm, alpha=2.0, beta=0.5, c=c0, trans_b=True,
                config={"algorithm": "bsr", "p": P, "r": P, "c": 1})
if root:
    assert cd is o
    np.testing.assert_allclose(o, 2.0 * (b.T @ a.T) + 0.5 * c0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f, sl.cholesky(s, lower=True), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
# ranks pinned to one core each (as mpiexec binds them): the node still has P cores for the plans
cpus = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
cores, own = gather_cores(comm)
assert cores == min(P, len(cpus)) and own == [1] * P, (cores, own)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    plan, _, _ = _decide("gemm", lambda: _gemm_problem((a, b)), comm, 0, None, True, None)
assert plan.threads == 1, plan
if root:
    assert f"p={P}" in out.getvalue(), out.getvalue()
print("OK", rank, flush=True)
"""
AGREE = AGREE_SETUP + RUN_CASES + AGREE_CHECKS


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin two ranks apart")
def test_ranks_agree_on_arguments_errors_and_cores(tiny_db, tmp_path):
    out = run_mpi(AGREE, 2, tmp_path, args=[str(tiny_db)])
    assert out.stdout.count("OK") == 2 and "NOERR" not in out.stdout, out.stdout + out.stderr
    errs = [ln.split(" ", 5) for ln in out.stdout.splitlines() if ln.startswith("ERR")]
    for case in {e[1] for e in errs} | {"lower", "not_pd_local", "root_5", "gemm_local", "array_raises_gemm",
                                        "array_raises_tuned", "c_shape", "out_shape"}:
        rows = [e for e in errs if e[1] == case]
        assert {e[2] for e in rows} == {"0", "1"}, (case, rows)
        assert all(e[3] == "True" for e in rows), (case, rows)
        assert len({e[5] for e in rows}) == 1, (case, rows)


def test_node_cores_union_of_masks_on_the_roots_host():
    infos = [("a", 0b0001), ("a", 0b0010), ("b", 0b1111), ("a", 0b0010)]
    assert node_cores(infos, 0) == 2 and node_cores(infos, 2) == 4
    assert mask_cores(infos) == [1, 1, 4, 1]


def test_plan_threads_fit_the_smallest_mask():
    from autotune.core.plans import Plan
    from autotune.entry.protocol import _fit_threads

    infos = [("a", 0b0011), ("a", 0b1100), ("a", 0b10000)]
    assert _fit_threads(Plan("summa", 2, 1, 2, b=32, threads=4), infos, 0).threads == 2
    assert _fit_threads(Plan("summa", 3, 1, 3, b=32, threads=2), infos, 0).threads == 1
    assert _fit_threads(Plan("local", 1, threads=3), infos, 2).threads == 1
    assert _fit_threads(Plan("local", 1, threads=1), infos, 0).threads == 1


class ProbeError(RuntimeError):
    """An exception every rank of the same program can name (defined at module level)."""


def test_rebuilt_errors_have_one_type_on_every_rank():
    import numpy as np

    class LocalError(RuntimeError):
        pass

    own = ProbeError("boom")
    mine, other = rebuilt(verdict_of(own), 0, 2, own), rebuilt(verdict_of(own), 0, 2)
    assert type(mine) is type(other) is ProbeError and str(mine) == str(other) == "rank 0: boom"
    assert mine.__cause__ is own
    local = LocalError("boom")        # no rank can name it: the nearest base on every rank, its own too
    assert type(rebuilt(verdict_of(local), 0, 2, local)) is type(rebuilt(verdict_of(local), 0, 2)) is RuntimeError
    lin = rebuilt(verdict_of(np.linalg.LinAlgError("not pd")), 1, 2)
    assert isinstance(lin, np.linalg.LinAlgError) and str(lin) == "rank 1: not pd"
    uni = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")
    assert type(rebuilt(verdict_of(uni), 0, 1)) is UnicodeError       # the nearest one-argument type
    assert type(rebuilt(verdict_of(uni), 0, 1, uni)) is UnicodeError   # on its own rank too, caused by it
    try:
        np.matmul("x", np.ones((2, 2)))
    except TypeError as exc:          # numpy's private _UFuncNoLoopError: its public base everywhere
        assert type(rebuilt(verdict_of(exc), 0, 2, exc)) is type(rebuilt(verdict_of(exc), 0, 2))
    from autotune.core.workload import SpecError

    spec = SpecError(["rule 1) workers > 0: got 0"])      # rebuilt from its message alone: its own type
    assert type(rebuilt(verdict_of(spec), 0, 2)) is SpecError
    same = ValueError("bad")
    assert rebuilt(verdict_of(same), 0, 1, same) is same                # its own rank keeps it as is


# Plans on part of the communicator (forced 1 x 2, 2 x 1 and named ranks, or the selector's), and
# operands the one-process calls hand to numpy/scipy (1-D, stacked): every rank of the communicator
# raises the same error, or the root gets numpy/scipy's result.
SUBPLAN_SETUP = """
import sys, warnings
import numpy as np, scipy.linalg as sl
from mpi4py import MPI
import autotune
from autotune import tuned_cholesky, tuned_gemm, tuned_lu_factor, tuned_solve
from autotune.core.plans import Plan
autotune.set_options(db=sys.argv[1])
warnings.simplefilter("ignore")
comm = MPI.COMM_WORLD
P, rank, root = comm.size, comm.rank, comm.rank == 0
rng = np.random.default_rng(3)
g = rng.standard_normal((96, 96)); s = g @ g.T + 96 * np.eye(96)
sing = g.copy(); sing[:, 5] = 0.0
nan = g.copy(); nan[7, 3] = np.nan
rhs = rng.standard_normal((96, 2))
R = lambda x: x if root else None
sub = {"1x2": dict(p=2, r=1, c=2, b=16), "2x1": dict(p=2, r=2, c=1, b=16),
       "ends": dict(p=2, r=1, c=2, b=16, ranks=(0, P - 1))}
cases = {"chol_auto": (np.linalg.LinAlgError, lambda: tuned_cholesky(R(-s), comm=comm)),
         "lu_nan_auto": (ValueError, lambda: tuned_lu_factor(R(nan), comm=comm)),
         "solve_singular_auto": (np.linalg.LinAlgError, lambda: tuned_solve(R(sing), R(rhs), comm=comm)),
         "gemm_shape_auto": (ValueError, lambda: tuned_gemm(R(g), R(rhs.T), comm=comm)),
         "plan_unknown": (ValueError, lambda: tuned_gemm(R(g), R(g), comm=comm, config=Plan("nonsense", 1))),
         "plan_other_family": (ValueError, lambda: tuned_cholesky(R(s), comm=comm, config=Plan("summa", 2, 1, 2)))}
for name, kw in sub.items():
    cases[f"chol_{name}"] = (np.linalg.LinAlgError, lambda kw=kw: tuned_cholesky(R(-s), comm=comm,
                                                                                 config=Plan("cholesky", **kw)))
    cases[f"lu_nan_{name}"] = (ValueError, lambda kw=kw: tuned_lu_factor(R(nan), comm=comm, config=Plan("lu", **kw)))
    cases[f"gemm_shape_{name}"] = (ValueError, lambda kw=kw: tuned_gemm(R(g), R(rhs.T), comm=comm,
                                                                        config=Plan("summa", **kw)))
    if kw["r"] == 1:
        cases[f"solve_singular_{name}"] = (np.linalg.LinAlgError, lambda kw=kw: tuned_solve(
            R(sing), R(rhs), comm=comm, config=Plan("gesv", **kw)))
"""
SUBPLAN_CHECKS = """
# 1-D and stacked operands: numpy/scipy's results on the root
stack = np.stack([s, 2 * s])
v = rng.standard_normal(96)
got = [tuned_gemm(R(g), R(v), comm=comm), tuned_gemm(R(stack), R(g), comm=comm),
       tuned_cholesky(R(stack), comm=comm), tuned_solve(R(stack), R(rhs), comm=comm),
       *(tuned_lu_factor(R(v), comm=comm) or (None, None)), *(tuned_lu_factor(R(stack), comm=comm) or (None, None))]
want = [g @ v, stack @ g, sl.cholesky(stack), sl.solve(stack, rhs), *sl.lu_factor(v), *sl.lu_factor(stack)]
for x, y in zip(got, want):
    if root:
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)
    else:
        assert x is None
# still in step
f = tuned_cholesky(R(s), comm=comm, config=Plan("cholesky", 2, 1, 2, b=16, ranks=(0, P - 1)))
if root:
    np.testing.assert_allclose(f, sl.cholesky(s), rtol=1e-10, atol=1e-10)
print("OK", rank, flush=True)
"""
SUBPLAN = SUBPLAN_SETUP + RUN_CASES + SUBPLAN_CHECKS


@pytest.fixture(scope="module")
def subplan_runs(tiny_db, tmp_path_factory):
    """SUBPLAN at 3 and 4 ranks, in one launch at -n 4 (each on that many of its ranks)."""
    return run_mpi_variants([(f"np{p}", SUBPLAN, p, [str(tiny_db)]) for p in (3, 4)],
                            tmp_path_factory.mktemp("subplan"))


@pytest.mark.parametrize("nprocs", [3, 4])
def test_errors_of_plans_on_part_of_the_communicator_reach_every_rank(subplan_runs, nprocs):
    out = subplan_runs.check(f"np{nprocs}")
    assert out.stdout.count("OK") == nprocs and "NOERR" not in out.stdout, out.stdout + out.stderr
    errs = [ln.split(" ", 5) for ln in out.stdout.splitlines() if ln.startswith("ERR")]
    cases = {e[1] for e in errs}
    assert len(cases) == 17, sorted(cases)
    for case in cases:
        rows = [e for e in errs if e[1] == case]
        assert {e[2] for e in rows} == {str(r) for r in range(nprocs)}, (case, rows)
        assert all(e[3] == "True" for e in rows), (case, rows)
        assert len({(e[4], e[5]) for e in rows}) == 1, (case, rows)


def test_a_forced_plan_names_an_algorithm_of_its_family():
    from autotune.core.families import FAMILIES
    from autotune.core.plans import Plan
    from autotune.select.distributed import as_plan, predict

    assert as_plan({"algorithm": "summa", "p": 2, "r": 1, "c": 2}, "gemm").algorithm == "summa"
    assert as_plan(Plan("local", 1), "solve").algorithm == "local"
    with pytest.raises(ValueError, match=r"'nonsense' is not a distributed lu algorithm; choose from \['local',"):
        as_plan(Plan("nonsense", 1), "lu")
    with pytest.raises(ValueError, match="choose from .*'cannon'"):
        as_plan({"algorithm": "cholesky", "p": 1}, "gemm")
    for family in ("gemm", "cholesky", "lu", "solve"):   # the models' tables too (checked before sp, cp are read)
        with pytest.raises(ValueError, match=rf"'nonsense' is not a distributed {family} algorithm; choose from"):
            predict(FAMILIES[family].square(64), Plan("nonsense", 1), None, None)


def test_a_cgroup_quota_caps_a_hosts_cores():
    """A host whose cgroup gives half a core plans for one core, whatever its ranks' masks say."""
    infos = [RankCores("a", 0b0011, 0.5), RankCores("a", 0b0011, 0.5), RankCores("b", 0b1111, 2.5),
             RankCores("c", 0b0011)]
    assert [node_cores(infos, r) for r in range(4)] == [1, 1, 3, 2]
    assert mask_cores(infos) == [1, 1, 3, 2]


def test_cgroup_share_reads_the_tightest_quota(tmp_path):
    from autotune.host.budget import cgroup_share

    root = tmp_path / "cpu"
    leaf = root / "job" / "rank"
    leaf.mkdir(parents=True)
    for d, quota in ((root / "job", 50000), (leaf, 150000)):
        (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu.cfs_period_us").write_text("100000\n")
    groups = tmp_path / "cgroup"
    groups.write_text("4:cpu,cpuacct:/job/rank\n")
    mounts = tmp_path / "mountinfo"
    mounts.write_text(f"30 25 0:26 / {root} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n")
    assert cgroup_share(groups, mounts) == 0.5
    assert cgroup_share(tmp_path / "missing", mounts) is None
