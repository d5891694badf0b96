"""The memory model (models/memory.py), the cap on candidates and plans (select/memory.py,
``options(memory_bytes=...)``), and its measured check (``autotune bench memory``)."""
from __future__ import annotations

import importlib
import json
import warnings

import numpy as np
import pytest
from autotune.kernels.strassen import strassen_workspace_elems
from test_bench_mpi import _bench_mpi

import autotune
from autotune.core.families import GemmProblem
from autotune.core.plans import Candidate, Plan
from autotune.db.comm_lookup import load_comm
from autotune.db.lookup import load_sp
from autotune.models import memory
from autotune.select import distributed as dist
from autotune.select.memory import keep_fitting
from autotune.settings import get_options

MIB = 2**20
rank_module = importlib.import_module("autotune.select.ranking")


def test_bsr_replicates_b_and_cannon_does_not():
    n, p = 4096, 16
    bsr = memory.plan_footprint((n, n, n), Plan("bsr", p, p, 1))
    cannon = memory.plan_footprint((n, n, n), Plan("cannon", p, 4, 4))
    assert bsr.other["B replica"] >= n * n and "B replica" not in cannon.other
    assert cannon.other_bytes < bsr.other_bytes / 3
    # 16 ranks on one host: BSR's replicas outweigh Cannon's buffers on the root
    assert cannon.host_bytes(16) < bsr.host_bytes(16)
    assert memory.ranks_on_busiest_host(16, 4) == 4 and memory.ranks_on_busiest_host(5, 2) == 3


def test_local_footprints_name_their_buffers():
    n = 1000
    blas = memory.local((n, n, n), "gemm", Candidate("blas", "numpy-openblas", 2))
    l2 = memory.local((n, n, n), "gemm", Candidate("strassen", "numpy-openblas", 2, 2))
    assert blas.root_bytes == 8 * n * n
    assert l2.root_bytes == 8 * (n * n + strassen_workspace_elems(n, n, n, 2))
    assert memory.local((n,), "lu", Candidate("getrf", "scipy-openblas", 1)).root_bytes == 8 * n * n
    assert "Strassen temporaries" in l2.describe()


def test_workspace_buffers_take_whole_huge_pages():
    page = memory.HUGE_PAGE // 8
    assert memory.ws(1) == 1 and memory.ws(page + 1) == 2 * page and memory.ws(page, page) == 2 * page


def test_keep_fitting_drops_what_does_not_fit_and_keeps_the_least_when_nothing_does():
    items = [3, 1, 2]
    assert keep_fitting(items, float, None, str) == ([3, 1, 2], [])
    kept, notes = keep_fitting(items, float, 2.5, str)
    assert kept == [1, 2] and "1 dropped" in notes[0] and "3" in notes[0]
    kept, notes = keep_fitting(items, float, 0.5, str)
    assert kept == [1] and "nothing fits" in notes[0]
    assert keep_fitting(items, lambda x: None, 0.5, str)[0] == items     # no model: kept


def test_memory_option_checked_and_zero_means_no_cap():
    with pytest.raises(ValueError, match="memory_bytes"):
        autotune.set_options(memory_bytes=-1)
    with autotune.options(memory_bytes=0):
        assert get_options().memory_cap is None
    with autotune.options(memory_bytes=5 * MIB):
        assert get_options().memory_cap == 5 * MIB
    assert get_options().memory_cap >= 256 * MIB        # the host's available memory by default


def test_cap_flips_the_strassen_level(tiny_db, monkeypatch):
    """Deeper Strassen predicted faster: uncapped the deepest level wins; a cap just below its
    footprint takes the level above it, and the decision says why."""
    def faster_deeper(m, k, n, levels, *args, **kw):
        return np.array([1e-6 / (1 + lv) for lv in np.atleast_1d(levels)])

    monkeypatch.setattr(rank_module.gemm_models, "strassen", faster_deeper)
    sp, n = load_sp(str(tiny_db)), 2048
    free = rank_module.rank(GemmProblem(n, n, n), sp, 1, allow_strassen=True)
    top = free.chosen
    assert top.algorithm == "strassen" and top.param >= 2
    cap = int(memory.local((n, n, n), "gemm", top).root_bytes) - 1
    capped = rank_module.rank(GemmProblem(n, n, n), sp, 1, allow_strassen=True, memory_bytes=cap)
    assert capped.chosen.algorithm == "strassen" and capped.chosen.param == top.param - 1
    assert any("dropped" in note and "MiB" in note for note in capped.notes)


@pytest.fixture()
def plans16(tiny_db):
    sp = load_sp(str(tiny_db))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cp = load_comm(str(tiny_db), nprocs=16)
        yield sp, cp


def test_cap_drops_bsr_before_cannon_and_flips_the_plan(plans16):
    """16 ranks on one host: a cap between Cannon's and BSR's need drops BSR and keeps Cannon;
    a cap just below the chosen plan's need changes the choice, and explain says so."""
    sp, cp = plans16
    problem = GemmProblem(2048, 2048, 2048)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        free = dist.rank_plans(problem, 16, sp, cp, cores=16)
        need = {str(r.plan): dist.host_bytes(problem, r.plan, 1) for r in free.ranking}
        bsr = next(r.plan for r in free.ranking if r.plan.algorithm == "bsr" and r.plan.p == 16)
        cannon = next(r.plan for r in free.ranking if r.plan.algorithm == "cannon" and r.plan.p == 16)
        cap = int(need[str(cannon)]) + 1
        capped = dist.rank_plans(problem, 16, sp, cp, cores=16, memory_bytes=cap)
        kept = {str(r.plan) for r in capped.ranking}
        assert str(cannon) in kept and str(bsr) not in kept
        chosen = free.chosen
        if chosen.algorithm != "local":
            flipped = dist.rank_plans(problem, 16, sp, cp, cores=16, memory_bytes=int(need[str(chosen)]) - 1)
            assert flipped.chosen != chosen
    assert any("plans" in n and "dropped" in n for n in capped.notes)
    assert "dropped" in dist.describe(capped)


def test_bench_memory_measures_within_the_prediction(tmp_path):
    """Every call's measured peak (RSS high-water) on 2 ranks at n = 1024 within 1.1x its prediction."""
    run_dir, out = tmp_path / "run", tmp_path / "mem.json"
    run_dir.mkdir()
    _bench_mpi(2, ["memory", "--n", "1024", "--out", str(out)], run_dir)
    report = json.loads(out.read_text())
    cases = {r["case"].split(" [")[0] for r in report["rows"]}
    assert {"gemm strassen l=2", "lu getrf", "bsr 2x1", "lu 2x1", "summa 1x2", "cholesky 1x2", "blocking 2x1",
            "stencil sweep"} <= cases
    assert report["max_ratio"] <= 1.1, [(r["case"], r["root_ratio"], r["other_ratio"]) for r in report["rows"]]
    assert report["min_ratio"] > 0.5
