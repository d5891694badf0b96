"""The thread budget (issue 61 item 6): each limit the user can set (options, thread variables, the
libraries' count under threadpoolctl, the cgroup CPU quota, the affinity mask), the one named,
and the callers that share it (explain, tuned calls, the probe, MPI plans). No timing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import autotune
from autotune.backends import get, pools
from autotune.host import budget, resources
from autotune.host.budget import Budget, cgroup_limit, env_limits, thread_budget
from autotune.settings import get_options, options


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch):
    """Every test reads the variables, cgroup files and affinity afresh, and leaves none cached."""
    for name in budget.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    budget.forget()
    resources._cores[1] = 0.0
    yield
    budget.forget()
    resources._cores[1] = 0.0


def _cores() -> int:
    return len(os.sched_getaffinity(0))


# ------------------------------------------------------------------------------------ each source

def test_thread_variables_are_read_as_positive_counts_the_first_openmp_level():
    env = {"OMP_NUM_THREADS": "3,2", "OPENBLAS_NUM_THREADS": "", "MKL_NUM_THREADS": "four"}
    assert env_limits(env) == [Budget(3, "OMP_NUM_THREADS=3")]
    assert env_limits({"OMP_NUM_THREADS": "0", "MKL_NUM_THREADS": " 2 "}) == [Budget(2, "MKL_NUM_THREADS=2")]


@pytest.mark.parametrize("name", budget.ENV_VARS)
def test_each_thread_variable_caps_the_budget_and_is_named(monkeypatch, name):
    monkeypatch.setenv(name, "1")
    budget.forget()
    assert get_options().budget == Budget(1, f"{name}=1")
    assert get_options().thread_budget == 1


def test_options_threads_is_one_limit_among_the_others(monkeypatch):
    with options(threads=1):
        assert get_options().budget == Budget(1, "options(threads=1)")
    with options(threads=10 ** 4):      # more than the cores: the affinity mask caps it
        assert get_options().budget.threads == min(_cores(), pools.user_limit()[0])
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    budget.forget()
    with options(threads=1):            # a tie names the option, the user's own choice here
        assert get_options().budget.source == "options(threads=1)"


def test_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    resources._cores[1] = 0.0
    assert get_options().budget == Budget(1, "affinity mask of 1 core")


def test_the_libraries_count_is_named_only_below_the_other_limits():
    cores = _cores()
    assert thread_budget(None, cores).threads <= cores
    with threadpool_limits(cores):      # the library at the cores: the affinity mask is named
        assert get_options().budget == Budget(cores, f"affinity mask of {cores} core{'s' if cores > 1 else ''}")
    with threadpool_limits(1):
        assert get_options().budget == Budget(1, "threadpoolctl limit on numpy-openblas")


def test_a_thread_variable_ties_with_the_library_it_set_and_is_named(monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    budget.forget()
    with threadpool_limits(1):
        assert get_options().budget == Budget(1, "OPENBLAS_NUM_THREADS=1")


def test_scipys_library_counts_too():
    with threadpool_limits(1, user_api="blas"):
        get("scipy-openblas").set_threads(1)
        get("numpy-openblas").set_threads(2)
        assert pools.user_limit() == (1, "scipy-openblas")


def test_the_library_count_inside_autotunes_own_lease_is_the_one_it_restores():
    be = get("numpy-openblas")
    with threadpool_limits(3):
        with pools.lease(be, 1):
            assert be.get_threads() == 1
            assert pools.user_limit() == (3, "numpy-openblas")
        assert pools.user_limit() == (3, "numpy-openblas")


# ------------------------------------------------------------------------------------------ cgroup

def _v1(tmp_path, quotas: dict[str, tuple[int, int]], path: str = "/batch/job", root: str = "/"):
    """A fake cgroup v1 cpu hierarchy mounted at tmp_path/cpu: ``quotas`` per directory below it."""
    mount = tmp_path / "cpu"
    for rel, (quota, period) in {"": (-1, 100000), **quotas}.items():
        d = mount / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (d / "cpu.cfs_period_us").write_text(f"{period}\n")
    groups = tmp_path / "cgroup"
    groups.write_text(f"5:memory:/x\n4:cpu,cpuacct:{path}\n0::/\n")
    mounts = tmp_path / "mountinfo"
    mounts.write_text(f"31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                      f"32 31 0:29 {root} {mount} rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct\n"
                      f"35 31 0:32 / {tmp_path / 'memory'} rw - cgroup cgroup rw,memory\n")
    return groups, mounts


def _v2(tmp_path, limits: dict[str, str], path: str = "/user.slice/job"):
    """A fake cgroup v2 hierarchy at tmp_path/unified with ``cpu.max`` per directory below it."""
    mount = tmp_path / "unified"
    mount.mkdir()
    for rel, text in limits.items():
        d = mount / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(text + "\n")
    groups = tmp_path / "cgroup"
    groups.write_text(f"0::{path}\n")
    mounts = tmp_path / "mountinfo"
    mounts.write_text(f"41 31 0:38 / {mount} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    return groups, mounts


def test_cgroup_v1_quota_is_rounded_up_to_whole_threads(tmp_path):
    assert cgroup_limit(*_v1(tmp_path, {"batch/job": (150000, 100000)})) == Budget(2, "cgroup CPU quota 1.5 CPUs")


def test_cgroup_v1_one_core_quota_and_a_parents_tighter_quota(tmp_path):
    groups, mounts = _v1(tmp_path, {"batch": (50000, 100000), "batch/job": (300000, 100000)})
    assert cgroup_limit(groups, mounts) == Budget(1, "cgroup CPU quota 0.5 CPU")
    one = tmp_path / "one"
    one.mkdir()
    assert cgroup_limit(*_v1(one, {"batch/job": (100000, 100000)})) == Budget(1, "cgroup CPU quota 1 CPU")


def test_cgroup_v1_without_quota_or_files_is_no_limit(tmp_path):
    assert cgroup_limit(*_v1(tmp_path, {"batch/job": (-1, 100000)})) is None
    assert cgroup_limit(tmp_path / "absent", tmp_path / "absent") is None


def test_cgroup_v1_mounted_at_the_containers_own_group(tmp_path):
    """A container's mount shows its own group as the root: the process's path is that root."""
    groups, mounts = _v1(tmp_path, {"": (200000, 100000)}, path="/docker/abc", root="/docker/abc")
    assert cgroup_limit(groups, mounts) == Budget(2, "cgroup CPU quota 2 CPUs")
    groups.write_text("4:cpu,cpuacct:/elsewhere\n")          # a group the mount does not show
    assert cgroup_limit(groups, mounts) is None
    groups.write_text("4:cpu,cpuacct:/../outside\n")
    assert cgroup_limit(groups, mounts) is None


def test_cgroup_v2_cpu_max_at_any_level(tmp_path):
    groups, mounts = _v2(tmp_path, {"user.slice": "max 100000", "user.slice/job": "100000 100000"})
    assert cgroup_limit(groups, mounts) == Budget(1, "cgroup CPU quota 1 CPU")
    other = tmp_path / "other"
    other.mkdir()
    groups, mounts = _v2(other, {"user.slice": "250000 100000", "user.slice/job": "max 100000"})
    assert cgroup_limit(groups, mounts) == Budget(3, "cgroup CPU quota 2.5 CPUs")
    (other / "unified" / "user.slice" / "cpu.max").write_text("max 100000\n")
    assert cgroup_limit(groups, mounts) is None


def test_the_cgroup_quota_caps_the_budget_and_explain_names_it(tmp_path, monkeypatch, tiny_db):
    groups, mounts = _v1(tmp_path, {"batch/job": (100000, 100000)})
    monkeypatch.setattr(budget, "PROC_CGROUP", str(groups))
    monkeypatch.setattr(budget, "MOUNTINFO", str(mounts))
    budget.forget()
    assert get_options().budget == Budget(1, "cgroup CPU quota 1 CPU")
    dec = autotune.explain("cholesky", 256, db=tiny_db)
    assert dec.threads == 1 and dec.chosen.threads == 1
    assert str(dec).splitlines()[0].startswith("cholesky 256, thread budget 1 (cgroup CPU quota 1 CPU): chose")


def test_the_variables_and_files_are_read_again_only_after_the_refresh_period(monkeypatch):
    monkeypatch.setattr(budget, "REFRESH_SECONDS", 1e6)        # no stall of a loaded machine expires it
    before = get_options().budget
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert get_options().budget == before                       # still the reading of a moment ago
    budget.forget()
    assert get_options().budget.source == "OMP_NUM_THREADS=1"


# ------------------------------------------------------------------------------------- the callers

def test_explain_and_a_tuned_call_under_threadpool_limits_use_one_thread(tiny_db, capsys):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256))
    spd = a @ a.T + 256 * np.eye(256)
    with options(db=str(tiny_db)), threadpool_limits(1):
        dec = autotune.explain("gemm", 256)
        assert dec.threads == 1 and dec.chosen.threads == 1 and dec.limit == "threadpoolctl limit on numpy-openblas"
        capsys.readouterr()
        calls = (lambda: autotune.tuned_cholesky(spd, explain=True), lambda: autotune.tuned_gemm(a, a, explain=True),
                 lambda: autotune.tuned_lu_factor(spd, explain=True))
        for call in calls:
            call()
            first = capsys.readouterr().out.splitlines()[0]
            assert "thread budget 1 (threadpoolctl limit on numpy-openblas): chose" in first, first
            assert ", 1t]" in first, first
            assert pools.last().threads == 1          # the call ran on one thread
        np.testing.assert_allclose(autotune.tuned_gemm(a, a), a @ a, rtol=1e-12, atol=1e-10)
    assert pools.user_limit()[0] >= 1


def test_explain_with_threads_names_the_request(tiny_db):
    dec = autotune.explain("gemm", 256, threads=1, db=tiny_db)
    assert dec.limit == "threads=1 asked" and "thread budget 1 (threads=1 asked)" in str(dec)


def test_openblas_num_threads_in_a_new_process(tiny_db):
    code = textwrap.dedent("""
        import autotune
        dec = autotune.explain("lu", 256)
        print(autotune.get_options().budget, "|", str(dec).splitlines()[0])
    """)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "AUTOTUNE_DB": str(tiny_db)}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("1 (OPENBLAS_NUM_THREADS=1) | lu 256, thread budget 1 (OPENBLAS_NUM_THREADS=1)")
    assert ", 1t]" in out.stdout


def test_the_probe_measures_no_thread_count_above_the_budget(monkeypatch):
    from autotune.install_probe.plan import expand
    from autotune.install_probe.profile import parse_profile

    profile = parse_profile({"name": "t", "backends": ["numpy-openblas"], "threads": [1, 2],
                             "measure": [{"routines": ["gemm"], "pattern": "square", "sizes": [16]}]}, "t")
    backends = {"numpy-openblas": get("numpy-openblas")}
    with options(threads=1):
        assert {t.threads for t in expand(profile, backends)} == {1}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    budget.forget()
    assert {t.threads for t in expand(profile, backends)} == {1}


def test_mpi_threads_per_rank_stay_within_the_roots_budget(monkeypatch):
    from autotune.core.plans import Plan
    from autotune.entry.protocol import _fit_threads

    infos = [("a", 0b0011), ("a", 0b1100)]
    with options(threads=1):
        assert _fit_threads(Plan("summa", 2, 1, 2, b=32, threads=2), infos, 0).threads == 1
        assert _fit_threads(Plan("local", 1, threads=2), infos, 0).threads == 1
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    budget.forget()
    assert _fit_threads(Plan("summa", 2, 1, 2, b=32, threads=2), infos, 0).threads == 1


def test_the_stencils_local_run_names_the_budget(tiny_db, capsys):
    u = np.zeros((64, 64))
    u[32, 32] = 1.0
    with options(db=str(tiny_db)), threadpool_limits(1):
        autotune.stencil.heat2d(u, 3, explain=True)
    first = capsys.readouterr().out.splitlines()[0]
    assert "thread budget 1 (threadpoolctl limit on numpy-openblas): chose" in first, first
