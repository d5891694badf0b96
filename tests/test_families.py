"""Every layer's family registry covers every routine family of ``autotune.core.families`` (as
test_architecture checks the layers): adding a family is its own files plus one registration per
layer, and a registration left out fails here instead of at a user's call."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.benchmarks.calls import CALLS
from autotune.core import families
from autotune.core.families import DISTRIBUTED, FAMILIES, as_problem, family, usable_blocks
from autotune.core.plans import ALGORITHMS
from autotune.core.routines import flops
from autotune.models import mapping as mapping_models
from autotune.models.plan_models import REGISTRY as PLAN_MODELS
from autotune.select.distributed import GRID_PLANS
from autotune.select.groups import GROUPS


def test_single_process_selector_covers_every_family():
    assert set(GROUPS) == set(FAMILIES)
    for name, fam in FAMILIES.items():
        algorithm, _ = fam.incumbent
        assert ALGORITHMS[algorithm][0] == name, (name, algorithm)
    assert {f for f, _ in ALGORITHMS.values()} == set(FAMILIES)


def test_distributed_models_and_plans_cover_every_distributed_family():
    assert set(PLAN_MODELS) == set(DISTRIBUTED) == set(GRID_PLANS)
    for name in DISTRIBUTED:
        assert set(PLAN_MODELS[name].models) == set(FAMILIES[name].distributed), name
        assert set(PLAN_MODELS[name].wait_phase) <= set(FAMILIES[name].distributed), name


def test_mapping_model_covers_the_families_it_places():
    assert set(mapping_models.MODELS) == {n for n, f in FAMILIES.items() if f.mapping}
    for name, model in mapping_models.MODELS.items():
        assert FAMILIES[name].mapping in FAMILIES[name].distributed
        if model.weighted_rows is not None:
            assert model.weighted_rows[0] in FAMILIES[name].distributed


def test_execution_runs_every_distributed_algorithm():
    pytest.importorskip("mpi4py")
    from autotune.distributed import cholesky, gemm, lu, stencil

    runnable = set(gemm.ALGORITHMS) | set(cholesky.ALGORITHMS) | set(lu.ALGORITHMS) | set(stencil.ALGORITHMS)
    for name in DISTRIBUTED:
        assert set(FAMILIES[name].distributed) <= runnable, name


def test_calls_cover_every_family_and_collectives_the_distributed_ones():
    assert set(CALLS) == set(FAMILIES)
    assert {name for name, c in CALLS.items() if c.collective is not None} == set(DISTRIBUTED)
    for name, calls in CALLS.items():
        assert calls.name == name and calls.library in ("numpy", "scipy"), name
        assert set(calls.overwrites) <= set(range(calls.count)), name


def test_install_checks_and_benchmarks_cover_their_families():
    from autotune.install_probe import validate, validate_runs

    from autotune.benchmarks import mpi_speed

    assert set(validate_runs.CHECKED_ORDER) == set(validate.FAMILIES) <= set(FAMILIES)
    assert set(mpi_speed.DASK) == set(DISTRIBUTED)


def test_problems_read_sizes_as_the_api_documents():
    assert family("gemm").read((5,)).dims == (5, 5, 5)
    assert family("gemm").read((5, 6, 7)).dims == (5, 6, 7)
    assert family("solve").read((5,)).dims == (5, 1)
    assert family("lu_solve").read((5, 3)).dims == (5, 3)
    assert family("cholesky").square(64).flags == {"lower": False, "memory": "C"}
    for bad in [(5, 6), (0,), (True,), (2.5,)]:
        with pytest.raises(ValueError):
            family("gemm").read(bad)
    with pytest.raises(ValueError, match="unknown routine family 'qr'; choose from gemm"):
        family("qr")
    with pytest.raises(ValueError, match="takes dims"):
        as_problem("lu", (4, 4))


def test_flops_are_the_routines_counts():
    assert FAMILIES["gemm"].flops(as_problem("gemm", (2, 3, 4))) == flops("gemm", {"m": 2, "k": 3, "n": 4})
    assert FAMILIES["solve"].flops(as_problem("solve", (100, 7))) == pytest.approx(
        flops("getrf", {"n": 100}) + flops("getrs", {"n": 100, "nrhs": 7}))
    for name, fam in FAMILIES.items():
        small, big = fam.flops(fam.square(100)), fam.flops(fam.square(200))
        assert 3.9 < big / small <= 8.5, name     # cubic in the order; quadratic for a solve from factors


def test_blocks_are_one_set_cut_by_the_order():
    assert usable_blocks(4096) == list(families.BLOCKS)
    assert usable_blocks(100) == [32]                   # at least the smallest, at most n / 2 beyond it
    assert usable_blocks(256) == [32, 64, 128]
    for fam in FAMILIES.values():
        assert fam.blocks == (families.HALOS if fam.name == "stencil" else families.BLOCKS)
    assert as_problem("solve", (4096, 2)).order == 4096 and as_problem("gemm", (300, 40, 500)).order == 40
    assert np.all(np.diff(families.BLOCKS) > 0)
