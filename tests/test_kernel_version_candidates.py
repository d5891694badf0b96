"""Kernel versions as an AP (issue 34): Strassen's OpenMP additions (variant 1) and nested Strassen
(algorithm "strassen_nested") are offered only with measured thread SPs, modelled, and run correctly."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from autotune.kernels.strassen import strassen
from conftest import require_kernel_version

import autotune
from autotune import backends
from autotune.benchmarks import multicore as bench_multicore
from autotune.core.families import as_problem
from autotune.db import load_sp
from autotune.db.threads import StrassenSPs, ThreadSPs, VersionSPs, load_threads, save_threads
from autotune.models import gemm as gemm_models
from autotune.select import clear_cache, rank


@pytest.fixture
def omp():
    """The OpenMP kernel version (skipped where it is not built, a failure under CI)."""
    return require_kernel_version("omp")

# Hand-made thread SPs (plausible magnitudes; the selection tests need them stored, not accurate).
OMP = VersionSPs(t_gen=2e-6, t_work=1e-9, t_syn=1e-6, sw_cpu=0.5, sw_cpu_line=(0.5, 0.0))
NUMBA = VersionSPs(t_gen=5e-6, t_work=1e-9, t_syn=1e-6, sw_cpu=0.5, sw_cpu_line=(0.5, 0.0))
NESTED = StrassenSPs(t_gen=20e-6, t_mul=(40e-12, 1e-12), t_add=(1e-9, 0.0), sw_cpu=(0.5, 0.0))
THREADS = ThreadSPs(cores=2, versions={"omp": OMP, "numba": NUMBA}, strassen=NESTED)


@pytest.fixture(scope="module")
def threaded_db(tiny_db, tmp_path_factory):
    """A copy of the tiny probe database with thread SPs stored in it."""
    path = tmp_path_factory.mktemp("threaded") / "sp.h5"
    shutil.copy(tiny_db, path)
    save_threads(path, THREADS)
    return path


def _ranking(path, n=512, budget=2):
    clear_cache()
    return rank(as_problem("gemm", (n, n, n)), load_sp(path, refresh=True), budget, allow_strassen=True)


def _cands(dec, algorithm, variant=None):
    return [r.candidate for r in dec.ranking if r.candidate.algorithm == algorithm
            and (variant is None or r.candidate.variant == variant)]


def test_stored_thread_sps_load_back(threaded_db):
    assert load_threads(threaded_db) == ThreadSPs(2, THREADS.versions, NESTED, {})


def test_new_candidates_appear_only_with_thread_sps(tiny_db, threaded_db):
    plain, threaded = _ranking(tiny_db), _ranking(threaded_db)
    assert not _cands(plain, "strassen", 1) and not _cands(plain, "strassen_nested")
    assert _cands(plain, "strassen", 0)
    omp = _cands(threaded, "strassen", 1)
    nested = _cands(threaded, "strassen_nested")
    assert omp and {c.threads for c in omp} == {1, 2}
    assert {(c.threads, c.variant) for c in nested} == {(1, 1), (2, 1), (2, 2)}   # P1 x P2 within 2 threads
    assert {c.param for c in nested} == {1, 2}
    assert all(r.seconds > 0 and np.isfinite(r.seconds) for r in threaded.ranking)
    # without allow_strassen none of them
    clear_cache()
    strict = rank(as_problem("gemm", (512, 512, 512)), load_sp(threaded_db, refresh=True), 2)
    assert {r.candidate.algorithm for r in strict.ranking} == {"blas"}


def test_existing_choices_unchanged_without_thread_sps(tiny_db, threaded_db):
    """The variant-0 candidates keep their times whether or not thread SPs are stored."""
    for n in (200, 512, 1000):
        old = {r.candidate: r.seconds for r in _ranking(tiny_db, n).ranking}
        new = {r.candidate: r.seconds for r in _ranking(threaded_db, n).ranking}
        assert old and all(new[c] == pytest.approx(t, rel=1e-12) for c, t in old.items())


def test_nested_not_offered_for_thin_shapes(threaded_db):
    clear_cache()
    dec = rank(as_problem("gemm", (1024, 256, 1024)), load_sp(threaded_db, refresh=True), 2, allow_strassen=True)
    assert not _cands(dec, "strassen_nested")


def test_omp_strassen_model_adds_pfor_calls():
    """Variant 1's additions: 10 A/B calls and 6 C calls of R-pfor per leaf-level node."""
    class Flat:
        def k(self, *a, **kw):
            return np.full(np.shape(a[3]), 1e-10)

    n, t = 512, 2
    total = gemm_models.strassen_omp(n, n, n, [1], "numpy-openblas", t, Flat(), THREADS)
    q = (n / 2) ** 2
    call = t * OMP.t_gen + q / t * 1e-9
    leaves = 7 * 2 * (n / 2) ** 3 * 1e-10
    assert float(total[0]) == pytest.approx(leaves + 16 * call)


@pytest.mark.usefixtures("omp")
@pytest.mark.parametrize("n", [256, 131])
def test_forced_omp_strassen_matches_numpy(n, threaded_db, monkeypatch):
    rng = np.random.default_rng(n)
    a, b = rng.random((n, n)), rng.random((n, n))
    for t in (1, 2):
        c = autotune.tuned_gemm(a, b, config={"algorithm": "strassen", "backend": "numpy-openblas", "threads": t,
                                              "param": 2, "variant": 1})
        assert np.allclose(c, a @ b)


@pytest.mark.parametrize("n", [256, 131])
@pytest.mark.parametrize("p1,threads,levels", [(1, 1, 1), (2, 2, 1), (2, 2, 2), (1, 2, 2)])
def test_forced_nested_strassen_matches_numpy(n, p1, threads, levels):
    rng = np.random.default_rng(n + p1)
    a, b = rng.random((n, n)), rng.random((n, n))
    cfg = {"algorithm": "strassen_nested", "backend": "numpy-openblas", "threads": threads, "param": levels,
           "variant": p1}
    assert np.allclose(autotune.tuned_gemm(a, b, config=cfg), a @ b)
    c = np.ones((n, n))
    out = autotune.tuned_gemm(a, b, alpha=2.0, beta=0.5, c=c, trans_a=True, config=cfg)
    assert np.allclose(out, 2.0 * a.T @ b + 0.5)


def test_strassen_driver_with_an_add_kernel_matches_fused(omp):
    rng = np.random.default_rng(3)
    a, b = np.asfortranarray(rng.random((97, 130))), np.asfortranarray(rng.random((130, 75)))
    gemm = backends.get("numpy-openblas").ops["gemm"]
    fused, other = np.empty((97, 75), order="F"), np.empty((97, 75), order="F")
    strassen(a, b, fused, 3, gemm)
    strassen(a, b, other, 3, gemm, add=lambda x, y, out, beta: omp.add(x, y, out, beta, threads=2))
    assert np.allclose(fused, a @ b) and np.allclose(other, a @ b)


def test_bench_multicore_smoke(tmp_path, threaded_db, capsys):
    out = tmp_path / "mc.json"
    parser = __import__("argparse").ArgumentParser()
    bench_multicore.add_arguments(parser)
    args = parser.parse_args(["--db", str(threaded_db), "--sizes", "96", "--reps", "1", "--max-threads", "2",
                              "--out", str(out)])
    assert bench_multicore.run(args) == 0
    text = capsys.readouterr().out
    assert "median APE" in text
    res = json.loads(out.read_text())
    assert {"points", "summary"} <= set(res)
    assert res["points"] and all(p["predicted"] > 0 and p["measured"] > 0 for p in res["points"])
