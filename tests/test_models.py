"""Models account for exactly the work the kernels do, and pruning never changes a choice."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.core.families import as_problem
from autotune.db import load_sp
from autotune.models import cholesky as chol
from autotune.models import gemm
from autotune.models.dispatch import dispatch
from autotune.select import rank


class UnitK:
    """An SP source with k = 1 s/flop everywhere: a model then returns its flop count."""

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        return np.ones(np.shape(x))


class FlopK:
    """k = 1 s/flop for the BLAS/LAPACK routines, 0 for the memory pass (``add``): a Cholesky
    model then returns its flop count."""

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        return np.full(np.shape(x), 0.0 if routine == "add" else 1.0)


class MemoryK:
    """k = 1 s per element for ``add`` only: a model then returns its charged memory passes."""

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        return np.full(np.shape(x), 1.0 if routine == "add" else 0.0)


@pytest.mark.parametrize("n", [33, 100, 257, 1000, 3001])
def test_cholesky_models_count_the_cholesky_flops(n):
    blocks = np.array([b for b in (8, 32, 64, 256) if b < n] or [1])
    total = chol.chol_flops(n)
    np.testing.assert_allclose(chol.blocked_variants(n, blocks, (0, 1), "x", 1, FlopK()), total, rtol=1e-12)
    # unblocked gemv: n^3/3 - n/3 update flops (segment quadrature) plus the n^2/2 column
    # scalings costed at half a level-1 flop each; axpy: whole steps (trail pattern), whose
    # x(x-1) axpy flops over x = 2..n sum to (n^3 - n)/3 exactly
    expected = n**3 / 3.0 - n / 3.0 + n * n / 4.0
    assert chol.unblocked_gemv(n, "x", 1, UnitK()) == pytest.approx(expected, rel=1e-3)
    assert chol.unblocked_axpy(n, "x", 1, UnitK()) == pytest.approx((n**3 - n) / 3.0, rel=1e-12)


@pytest.mark.parametrize("n, b", [(1000, 64), (257, 32), (96, 32)])
def test_blocked_variant_one_streams_the_trailing_triangle_once_per_step(n, b):
    """Variant 1 pays a memory pass over the elements its syrk/gemm calls update in each step
    (block columns from their diagonal down), as the kernel loop visits them; variant 0 none."""
    elems = sum(min(b, n - jj) * (n - jj) for j in range(0, n, b) for jj in range(j + b, n, b))
    v0, v1 = chol.blocked_variants(n, np.array([b]), (0, 1), "x", 1, MemoryK())[:, 0]
    assert v0 == 0.0 and v1 == pytest.approx(chol.MEMORY_SHARE * elems, rel=1e-12)


def test_blocked_variant_one_groups_gemms_like_the_kernel_loop():
    """The by-shape gemm sum equals the per-step loop of the kernel (variant 1)."""
    n, b = 1000, 64
    rows = [n - jj - b for j in range(0, n, b) for jj in range(j + b, n, b) if n - jj - b > 0]
    loop = sum(2.0 * r * b * b for r in rows)
    steps = chol._Steps.of(n, (b,))
    assert steps.gemm_flops.sum() == pytest.approx(loop)


def test_strassen_leaves_and_additions_count():
    t = gemm.strassen(256, 256, 256, np.array([0, 1, 2]), "x", 1, UnitK())
    assert t[0] == pytest.approx(2 * 256**3)
    # leaves, then per level the fused passes: 5 on A, 5 on B, 5 (leaf level) or 7 on C quadrants
    assert t[1] == pytest.approx(7 * 2 * 128**3 + 15 * 128**2)
    assert t[2] == pytest.approx(49 * 2 * 64**3 + 17 * 128**2 + 7 * 15 * 64**2)


@pytest.mark.parametrize("family,dims", [("cholesky", (n,)) for n in (40, 150, 700, 3000)]
                         + [("gemm", (n, n, n)) for n in (64, 300, 2048)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pruning_keeps_the_choice(tiny_db, family, dims, threads):
    sp = load_sp(str(tiny_db))
    full = rank(as_problem(family, dims), sp, threads, allow_strassen=True)
    pruned = rank(as_problem(family, dims), sp, threads, allow_strassen=True, prune=True)
    assert pruned.chosen == full.chosen
    assert {r.candidate for r in pruned.ranking} <= {r.candidate for r in full.ranking}


@pytest.mark.parametrize("n", [33, 64, 100, 129])
def test_explain_ranks_every_small_cholesky(tiny_db, n):
    """Small orders leave some model terms empty (no gemm below the diagonal): still ranked."""
    dec = rank(as_problem("cholesky", (n,)), load_sp(str(tiny_db)), 2, explain=True)
    assert {r.candidate.algorithm for r in dec.ranking} >= {"potrf", "blocked"}
    assert all(np.isfinite(r.seconds) and r.seconds > 0 for r in dec.ranking)


def test_tuned_call_dispatch_is_charged_off_numpys_own_path(tiny_db):
    """Candidates the C entry cannot hand to np.matmul pay the probed dispatch cost; numpy's own
    call at the full budget does not (a plain a @ b pays the same)."""
    sp = load_sp(str(tiny_db))
    assert sp.has("gemm", "scipy-openblas", 1, "dispatch")
    extra = dispatch("gemm", "scipy-openblas", 1, sp)
    assert extra > 0
    dec = rank(as_problem("gemm", (100, 100, 100)), sp, 2)
    by = {(r.candidate.backend, r.candidate.threads): r.predicted for r in dec.ranking
          if r.candidate.algorithm == "blas"}
    bare = gemm.blas(100, 100, 100, "scipy-openblas", 1, sp)
    assert by["scipy-openblas", 1] == pytest.approx(bare + extra)
    assert by["numpy-openblas", 2] == pytest.approx(gemm.blas(100, 100, 100, "numpy-openblas", 2, sp))
    assert by["numpy-openblas", 1] > gemm.blas(100, 100, 100, "numpy-openblas", 1, sp)
