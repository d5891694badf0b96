"""Kernel versions (Numba, OpenMP), the thread-SP probe and store, the multicore models and nested Strassen."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import scipy.linalg
from autotune.install_probe.threads import cores, probe_threads
from autotune.kernels import versions
from autotune.kernels.nested_strassen import nested_strassen
from conftest import require_kernel_version

from autotune import backends
from autotune.db import store
from autotune.db.threads import (
    GROUP,
    MEMBER,
    StrassenSPs,
    ThreadSPs,
    VersionSPs,
    driver_extra,
    kernel_time,
    line_at,
    load_threads,
    save_threads,
)
from autotune.models import multicore

AVAILABLE = versions.available()


@pytest.fixture(scope="module")
def quick_sps() -> ThreadSPs:
    return probe_threads(quick=True)


def test_numba_version_always_available():
    assert "numba" in AVAILABLE
    with pytest.raises(ValueError):
        versions.load("icc")


@pytest.mark.parametrize("name", versions.VERSIONS)
@pytest.mark.parametrize("order", ["C", "F"])
def test_add_matches_numpy(name, order):
    mod = require_kernel_version(name)
    rng = np.random.default_rng(1)
    a, b = (np.array(rng.random((37, 23)), order=order) for _ in range(2))
    for threads in (1, 2, 3):
        c = np.zeros((37, 23), order=order)
        mod.add(a, b, c, -0.5, threads=threads)
        np.testing.assert_array_equal(c, a - 0.5 * b)
    view = np.zeros((40, 30), order=order)[1:38, 2:25]   # a strided sub-view as output
    mod.add(a, b, view, 2.0, threads=2)
    np.testing.assert_allclose(view, a + 2.0 * b, rtol=1e-15)


def _jacobi_ref(old: np.ndarray) -> tuple[np.ndarray, float]:
    new = old.copy()
    new[1:-1, 1:-1] = 0.25 * (old[:-2, 1:-1] + old[2:, 1:-1] + old[1:-1, :-2] + old[1:-1, 2:])
    return new, float(((new - old) ** 2).sum())


@pytest.mark.parametrize("name", versions.VERSIONS)
@pytest.mark.parametrize("order", ["C", "F"])
def test_jacobi_sweep_matches_numpy(name, order):
    mod = require_kernel_version(name)
    old = np.array(np.random.default_rng(2).random((41, 29)), order=order)
    ref, change = _jacobi_ref(old)
    for threads in (1, 2, 4):
        new = np.empty_like(old)
        got = mod.jacobi_sweep(old, new, threads)
        np.testing.assert_allclose(new, ref, rtol=1e-14, atol=1e-15)
        assert got == pytest.approx(change, rel=1e-12)


def _spd(n: int) -> np.ndarray:
    x = np.random.default_rng(3).standard_normal((n, n))
    return x @ x.T + n * np.eye(n)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("lower", [True, False])
def test_omp_potf2_axpy_matches_scipy(order, lower):
    mod = require_kernel_version("omp")
    s = _spd(70)
    ref = scipy.linalg.cholesky(s, lower=lower)
    for threads in (1, 2, 3):
        a = np.array(s, order=order)
        assert mod.potf2_axpy(a, lower, threads) == 0
        got = np.tril(a) if lower else np.triu(a)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        other = np.triu(a, 1) if lower else np.tril(a, -1)    # the other triangle is untouched
        np.testing.assert_array_equal(other, np.triu(s, 1) if lower else np.tril(s, -1))


@pytest.mark.parametrize("order", ["C", "F"])
def test_omp_potf2_axpy_reports_the_failing_pivot(order):
    mod = require_kernel_version("omp")
    s = _spd(12)
    s[4, 4] = -1.0e3            # leading minor of order 5 is not positive definite
    a = np.array(s, order=order)
    assert mod.potf2_axpy(a, True, 2) == 5
    with pytest.raises(ValueError):
        mod.potf2_axpy(np.zeros((3, 4)), True, 1)


@pytest.mark.parametrize("name", versions.VERSIONS)
def test_micro_routines_run_for_1_to_4_threads(name):
    mod = require_kernel_version(name)
    for p in range(1, 5):
        mod.generate(p, 1000)
        mod.pfor(p, 10_000)
        mod.barriers(p, 100, 3)
    with pytest.raises(ValueError):
        mod.generate(0, 10)


def test_quick_probe_fits_usable_sps(quick_sps):
    assert quick_sps.cores == cores()
    assert set(AVAILABLE) | {"blas"} == set(quick_sps.versions)
    for name, v in quick_sps.versions.items():
        assert np.isfinite(v.t_gen) and v.t_gen > 0, name
        assert np.isfinite(v.t_work) and v.t_work > 0, name
        assert 1e-12 < v.t_work < 1e-6, name     # seconds per elementary operation (a flop for "blas")
        assert v.t_syn >= 0 and v.sw_cpu >= 0, name
    s = quick_sps.strassen
    assert s is not None and s.t_gen > 0
    assert np.all(line_at(s.t_mul, [1, 2]) >= 0)
    # the run's own wall time, recorded (how long it took is the machine's load, not a property)
    assert quick_sps.info["quick"] is True and np.isfinite(quick_sps.info["seconds"]) and quick_sps.info["seconds"] > 0


def test_db_round_trip(tmp_path, quick_sps):
    path = tmp_path / "sp.h5"
    save_threads(path, quick_sps)
    got = load_threads(path)
    assert got.measured and got.cores == quick_sps.cores
    assert got.versions == quick_sps.versions
    assert got.strassen == quick_sps.strassen
    assert got.info["quick"] is True
    for name, v in quick_sps.versions.items():
        assert got.versions[name].kernels == v.kernels, name
    assert got.strassen.driver == quick_sps.strassen.driver


def test_quick_probe_measures_the_nested_driver_per_configuration(quick_sps):
    drv = quick_sps.strassen.driver
    c = quick_sps.cores
    configs = {tuple(x) for x in drv["configs"]}
    assert {(1, 1, 1), (1, 1, 2)} <= configs and all(p1 * p2 <= 2 * c and p1 <= 7 for p1, p2, _ in configs)
    secs = np.asarray(drv["seconds"])
    assert secs.shape == (len(drv["sizes"]), len(configs)) and np.all(np.isfinite(secs))
    assert np.all(np.abs(secs) < 1e-5)      # seconds per element of C: microseconds would be absurd


def test_quick_probe_measures_each_loop_kernel_per_size_and_thread_count(quick_sps):
    c = quick_sps.cores
    for name in AVAILABLE:
        tables = quick_sps.versions[name].kernels
        assert set(tables) == {"jacobi", "add", "add_after_blas"}, name
        for kernel, t in tables.items():
            secs = np.asarray(t["seconds"])
            top = c if kernel == "add_after_blas" else 2 * c          # alone: oversubscribed counts too
            assert secs.shape == (len(t["sizes"]), top) and t["threads"] == list(range(1, top + 1)), (name, kernel)
            assert np.all(np.isfinite(secs)) and np.all((secs > 1e-12) & (secs < 1e-5)), (name, kernel)


TABLE = {"sizes": [100, 1000], "threads": [1, 2], "seconds": [[1e-9, 2e-9], [4e-9, 8e-9]]}
SPT = VersionSPs(t_gen=10e-6, t_work=1e-9, sw_cpu=0.5, kernels={"jacobi": TABLE, "add": TABLE})


def test_kernel_time_interpolates_in_log_size_and_clamps():
    assert kernel_time(SPT, "jacobi", 100, 1) == pytest.approx(1e-9)
    assert kernel_time(SPT, "jacobi", np.sqrt(100 * 1000), 1) == pytest.approx(2e-9)   # geometric midpoint
    assert kernel_time(SPT, "jacobi", 50, 2) == pytest.approx(2e-9)                   # clamped below
    assert kernel_time(SPT, "jacobi", 5000, 3) == pytest.approx(8e-9)                 # clamped; P > C: P = 2's
    np.testing.assert_allclose(kernel_time(SPT, "add", [100, 1000], [1, 2]), [1e-9, 8e-9])
    assert kernel_time(SPT, "add_after_blas", 100, 1) is None


def test_jacobi_and_additions_use_the_measured_tables():
    c = 2
    assert multicore.jacobi(1000, 2, SPT, c) == pytest.approx(1e6 / 2 * 8e-9)       # start measured with it
    assert multicore.jacobi(1000, 4, SPT, c) == pytest.approx(1e6 / 4 * 8e-9 * (1 + 4 * 0.5 / c))
    got = multicore.additions(1, [(3, 100 * 100)], SPT, c, t_work=(1.0, 0.0))
    assert got == pytest.approx(3 * 1e4 * 1e-9)                             # the table wins over t_work
    flat = multicore.additions(1, [(1, 1e4)], SPT, c, t_work=5e-9, kernel="add_after_blas")
    assert flat == pytest.approx(10e-6 + 1e4 * 5e-9)                        # no table: the given time


def test_oversubscribed_kernels_use_their_own_columns_then_the_factor_beyond():
    """Measured up to 2C, a kernel's oversubscribed cost is its own (no T_sw/T_cpu factor); past
    the table the factor grows from the largest measured count."""
    wide = {"sizes": [100, 1000], "threads": [1, 2, 3, 4], "seconds": [[1e-9, 2e-9, 3e-9, 4e-9]] * 2}
    sps = VersionSPs(t_gen=10e-6, t_work=1e-9, sw_cpu=0.5, kernels={"jacobi": wide, "add": wide})
    c = 2
    assert multicore.jacobi(1000, 3, sps, c) == pytest.approx(1e6 / 3 * 3e-9)
    over = (1 + 6 * 0.5 / c) / (1 + 4 * 0.5 / c)
    assert multicore.jacobi(1000, 6, sps, c) == pytest.approx(1e6 / 6 * 4e-9 * over)
    np.testing.assert_allclose(multicore.additions(np.array([1, 3]), [(2, 1e4)], sps, c), [2e4 * 1e-9, 2e4 / 3 * 3e-9])
    assert multicore.kernel_seconds(sps, "add_after_blas", 100, 1, c) is None


def test_db_missing_loads_empty_silently(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not load_threads(tmp_path / "absent.h5").measured


@pytest.mark.parametrize("payload", ["not json", json.dumps({"cores": 2}),
                                     json.dumps({"cores": 2, "versions": {"omp": {"t_gen": "x"}}}),
                                     json.dumps({"cores": 2, "versions": {"omp": {
                                         "t_gen": 1e-6, "t_work": 1e-9, "kernels": {"add": {
                                             "sizes": [1, 2], "threads": [1], "seconds": [[-1.0], [1.0]]}}}}})])
def test_db_damaged_loads_empty_with_at_most_a_warning(tmp_path, payload):
    path = tmp_path / "sp.h5"
    store.replace_group(path, GROUP, MEMBER, lambda g: g.attrs.__setitem__("sps", payload))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = load_threads(path)
    assert not got.measured
    assert len(caught) <= 1


SP = VersionSPs(t_gen=25e-6, t_work=2e-9, t_syn=1e-6, sw_cpu=1.5, sw_cpu_line=(1.0, 0.25))


def test_pfor_decreases_with_threads_up_to_the_cores():
    sp = VersionSPs(t_gen=1e-7, t_work=1e-9, sw_cpu=0.5)
    t = multicore.pfor(np.arange(1, 9), 1e9, sp, cores=8)
    assert np.all(np.diff(t) < 0)
    assert multicore.pfor(16, 1e9, sp, cores=8) > t[-1]   # oversubscribed: slower than P = C


def test_oversubscription_factor_is_exact():
    c, nt = 4, 1e8
    for p in (5, 8, 13):
        got = multicore.pfor(p, nt, SP, c) - p * SP.t_gen
        assert got == pytest.approx(nt / p * SP.t_work * (1 + p * SP.sw_cpu / c), rel=1e-14)
        gen = multicore.generate(p, nt, SP, c) - p * SP.t_gen
        assert gen == pytest.approx(nt * SP.t_work * p / c * (1 + SP.sw_cpu), rel=1e-14)
    assert multicore.oversubscription(4, c, 7.0) == 1.0
    assert multicore.oversubscription(8, c, 0.5) == pytest.approx(2.0)


def test_barriers_and_jacobi_values():
    assert multicore.barriers(2, 1e4, SP, 4, reps=3) == pytest.approx(2 * 25e-6 + 3 * (1e4 * 2e-9 + 2 * 1e-6))
    assert multicore.jacobi(1000, 2, SP, 4) == pytest.approx(2 * 25e-6 + 11e6 / 2 * 2e-9)
    assert multicore.jacobi(1000, 8, SP, 4) == pytest.approx(8 * 25e-6 + 11e6 / 8 * 2e-9 * (1 + 8 * 1.5 / 4))
    np.testing.assert_allclose(SP.ratio([2, 4], linear=True), [1.5, 2.0])


STR = StrassenSPs(t_gen=25e-6, t_mul=(400e-12, 10e-12), t_add=(20e-9, 0.0), sw_cpu=(2.0, 0.01))


def test_nested_strassen_model_equations():
    n, c = 1000, 4
    mul, add = 400e-12 + 10e-12 * 2, 20e-9
    eq69 = 2 * 25e-6 + 7 * 2 * 500**3 / 2 * mul + 9 * n**2 / 4 * add
    assert multicore.strassen_nested(n, 2, 1, STR, c, levels=1) == pytest.approx(eq69)
    mul8, r8 = 400e-12 + 10e-12 * 8, 2.0 + 0.01 * 8
    eq612 = (8 * 25e-6 + 49 * 2 * 250**3 / c * mul8 * (1 + r8) + 7 * 18 * n**2 / 4 * add * (1 + r8)
             + 9 * n**2 / 2 * add)
    assert multicore.strassen_nested(n, 4, 2, STR, c, levels=2) == pytest.approx(eq612)
    mul4 = 400e-12 + 10e-12 * 4
    eq610 = 4 * 25e-6 + 49 * 2 * 250**3 / 4 * mul4 + 7 * 18 * n**2 / 2 * add + 9 * n**2 / 2 * add
    assert multicore.strassen_nested(n, 2, 2, STR, c, levels=2) == pytest.approx(eq610)
    exact = multicore.strassen_nested(n, 2, 2, STR, c, levels=2, counts="exact")
    assert exact < eq610                      # 7 * 18 (n/4)^2 elements instead of the printed 7 * 18 n^2
    grid = multicore.strassen_nested(n, np.array([[1], [2]]), np.array([1, 2]), STR, c, levels=1)
    assert grid.shape == (2, 2) and grid[0, 0] > grid[1, 1]


@pytest.mark.parametrize(("tasks", "workers", "cores", "want"), [
    ([(1.0, 1)] * 7, 1, 2, 7.0),
    ([(1.0, 1)] * 7, 2, 2, 4.0),          # four rounds: the seventh product runs alone
    ([(1.0, 1)] * 7, 4, 2, 3.5),          # oversubscribed: the cores share all the work
    ([(1.0, 2)] * 7, 2, 2, 7.0),          # 2 x 2 threads on 2 cores: three shared rounds, then one alone
    ([(2.0, 1), (1.0, 1)], 2, 1, 3.0),
    ([], 3, 2, 0.0),
])
def test_shared_makespan(tasks, workers, cores, want):
    assert multicore.shared_makespan(tasks, workers, cores) == pytest.approx(want)


def test_driver_extra_interpolates_in_log_size_and_clamps():
    drv = {"sizes": [100, 1000], "configs": [[1, 1, 1], [2, 1, 1]], "seconds": [[1e-9, -1e-9], [3e-9, -1e-9]]}
    s = StrassenSPs(25e-6, (1e-12, 0.0), (1e-9, 0.0), driver=drv)
    assert driver_extra(s, 1, 1, 1, 10 ** 2.5) == pytest.approx(2e-9)
    assert driver_extra(s, 1, 1, 1, 10) == pytest.approx(1e-9) and driver_extra(s, 1, 1, 1, 1e5) == pytest.approx(3e-9)
    assert driver_extra(s, 2, 1, 1, 500) == 0.0          # a negative residual is no time
    assert driver_extra(s, 1, 2, 1, 500) is None and driver_extra(STR, 1, 1, 1, 500) is None


def test_nested_model_shares_the_products_and_adds_the_driver_extra():
    from autotune.models import gemm as gemm_models

    class SP:      # 2 n^3 flops at 1 ns (1 thread) or 0.6 ns (2 threads) per flop
        def k(self, routine, backend, threads, size, pattern="square"):
            return np.full(np.shape(size), 1e-9 if threads == 1 else 0.6e-9)

    drv = {"sizes": [100, 1000], "configs": [[2, 1, 1], [1, 2, 1]], "seconds": [[5e-9, 7e-9], [5e-9, 7e-9]]}
    tsp = ThreadSPs(2, {}, StrassenSPs(25e-6, (1e-12, 0.0), (1e-9, 0.0), driver=drv))
    n, prod = 400, 2.0 * 200 ** 3
    got = gemm_models.strassen_nested(n, n, n, [1], 2, 2, tsp, SP())
    assert got[0] == pytest.approx(4 * prod * 1e-9 + 5e-9 * n * n)      # 7 products, 2 workers: 4 rounds
    got = gemm_models.strassen_nested(n, n, n, [1], 1, 2, tsp, SP())
    assert got[0] == pytest.approx(7 * prod * 0.6e-9 + 7e-9 * n * n)
    eqs = gemm_models.strassen_nested(n, n, n, [2], 2, 2, tsp, SP())    # (2, 1, 2) not measured: eqs. 6.9-6.12
    assert eqs[0] == pytest.approx(float(multicore.strassen_nested(n, 2, 1, tsp.strassen, 2, 2, "exact")))


def test_nested_strassen_model_rejects_three_levels():
    with pytest.raises(ValueError):
        multicore.strassen_nested(100, 1, 1, STR, 2, levels=3)


@pytest.mark.parametrize("n", [256, 300])
def test_nested_strassen_matches_numpy(n):
    be = backends.get("numpy-openblas")
    rng = np.random.default_rng(n)
    a, b = rng.random((n, n + 1)), rng.random((n + 1, n - 3))
    ref = a @ b
    bound = 1e-12 * n
    for p1, p2, levels in ((1, 1, 1), (2, 1, 1), (7, 2, 2), (3, 1, 3)):
        got = nested_strassen(a, b, p1, min(p2, be.max_threads), be.ops["gemm"], be.threads, levels=levels)
        assert np.abs(got - ref).max() < bound, (p1, p2, levels)
    out = np.zeros((n, n - 3), order="F")
    assert nested_strassen(a, b, 2, 1, be.ops["gemm"], c=out) is out
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    with pytest.raises(ValueError):
        nested_strassen(a, b, 2, 1, be.ops["gemm"], c=np.zeros((n, n - 3)))   # C-ordered output


def test_a_missing_build_reads_as_unavailable(monkeypatch):
    monkeypatch.setitem(versions._MODULES, "omp", "autotune.kernels._omp_not_built")
    assert versions.load("omp") is None
    assert "omp" not in versions.available()


def test_best_version_picks_the_cheapest_version_and_thread_count():
    slow_start = VersionSPs(t_gen=1e-2, t_work=1e-9, sw_cpu=0.5)
    sps = ThreadSPs(cores=4, versions={"omp": SP, "numba": slow_start})
    version, p, t = multicore.best_version(lambda ps, v: multicore.jacobi(1000, ps, v, 4), sps, range(1, 9))
    assert (version, p) == ("omp", 4)
    assert t == pytest.approx(multicore.jacobi(1000, 4, SP, 4))
    assert multicore.best_version(lambda ps, v: multicore.jacobi(1000, ps, v, 4), sps, [1, 2], ["numba"])[:2] == (
        "numba", 1)
    with pytest.raises(ValueError):
        multicore.best_version(lambda ps, v: ps, ThreadSPs(), [1])
