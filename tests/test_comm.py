"""MPI communication parameters: Hockney fits with breakpoints, held-out error, storage next to the
BLAS records, lookup with nearest/defaults, the probe under mpiexec (-n 2, -n 3), the CLI."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pytest
import yaml
from db_helpers import edited
from mpi_helpers import fake_launch, mpi_command, run_checked

from autotune.core import assumptions
from autotune.db import RECORD_DTYPE, Database, DatabaseMissing, comm_lookup, load, load_sp, save
from autotune.db import comm as dbc
from autotune.db.comm_lookup import CommParams, load_comm
from autotune.models import comm_fit

STANDARD_SIZES = sorted({2 ** e for e in range(3, 25)} | {int(round(1024 * 2 ** (i / 4) / 64)) * 64 for i in range(25)})


def noisy(times, rel=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return np.asarray(times) * np.exp(rel * rng.standard_normal(len(times)))


# -- fitting ----------------------------------------------------------------------------------------

def test_breakpoint_and_ts_tw_recovered_from_noisy_data():
    m = np.array(STANDARD_SIZES, dtype=float)
    truth = [(1.5e-6, 1 / 3e9), (4.0e-6, 1 / 12e9)]     # eager below 4 KiB, rendezvous above
    t = np.where(m < 4096, truth[0][0] + m * truth[0][1], truth[1][0] + m * truth[1][1])
    fit = comm_fit.fit_hockney(m, noisy(t, 0.02))
    assert len(fit.regimes) == 2
    assert fit.breakpoints == (4096.0,)
    for reg, (ts, tw) in zip(fit.regimes, truth, strict=True):
        assert reg.ts == pytest.approx(ts, rel=0.1)
        assert reg.tw == pytest.approx(tw, rel=0.1)
    assert np.all(np.abs(fit.predict(m) / t - 1) < 0.1)


def test_three_regimes_and_one_regime_chosen_by_criterion():
    m = np.array(STANDARD_SIZES, dtype=float)
    t3 = np.select([m < 4096, m < 2 ** 20], [1.5e-6 + m / 3e9, 4e-6 + m / 15e9], 2e-5 + m / 6e9)
    fit3 = comm_fit.fit_hockney(m, noisy(t3, 0.02, seed=1))
    assert len(fit3.regimes) == 3
    assert fit3.breakpoints[0] == 4096.0
    assert 2 ** 19 < fit3.breakpoints[1] <= 2 ** 20
    one = comm_fit.fit_hockney(m, noisy(2e-6 + m / 10e9, 0.01, seed=2))
    assert len(one.regimes) == 1
    assert one.regimes[0].ts == pytest.approx(2e-6, rel=0.05)
    assert one.regimes[0].tw == pytest.approx(1e-10, rel=0.05)
    assert one.regimes[0].lo == 0 and math.isinf(one.regimes[0].hi)


def test_criterion_does_not_split_a_regime_at_noise():
    """mbic charges a searched breakpoint as three parameters: over many 2%-noise draws of one,
    two and three true regimes it finds exactly those (AICc split some draws into 4-6)."""
    m = np.array(STANDARD_SIZES, dtype=float)
    curves = {1: 2e-6 + m / 10e9, 2: np.where(m < 4096, 1.5e-6 + m / 3e9, 4e-6 + m / 12e9),
              3: np.select([m < 4096, m < 2 ** 20], [1.5e-6 + m / 3e9, 4e-6 + m / 15e9], 2e-5 + m / 6e9)}
    for k, t in curves.items():
        found = [len(comm_fit.fit_hockney(m, noisy(t, 0.02, seed=s)).regimes) for s in range(15)]
        assert found == [k] * 15, (k, found)


def test_protocol_break_at_the_power_of_two_in_the_middle_of_the_gap():
    """Between measured 384 and 1024 B a switch at 512 is as likely as at 1024: the boundary is
    the power of two nearest the middle of the gap in log size; a single one is taken as is.
    A power of two measured as the last size of its regime ends it (a limit admits L bytes)."""
    assert comm_fit.regime_boundary(384.0, 1024.0) == 512.0
    assert comm_fit.regime_boundary(256.0, 1024.0) == 257.0 and comm_fit.regime_boundary(2048.0, 2432.0) == 2049.0
    assert comm_fit.regime_boundary(3456.0, 4864.0) == 4096.0
    assert comm_fit.regime_boundary(2880.0, 4096.0) == 4096.0
    assert comm_fit.regime_boundary(4096.0 * 1.1, 4096.0 * 1.3) == pytest.approx(4096.0 * math.sqrt(1.1 * 1.3))


def test_past_the_caches_a_regime_line_may_have_a_negative_intercept():
    """Time growing faster than linearly past a cache: the last regime's local line has ts < 0
    (still positive from the size before it) and the lines meet inside the gap between them."""
    m = np.array([2.0 ** e for e in np.arange(12, 24.5, 0.5)])
    t = np.maximum(4e-6 + m / 50e9, -80e-6 + m / 25e9)      # continuous: the lines cross at 4.2e6 B
    fit = comm_fit.fit_hockney(m, t)
    last = fit.regimes[-1]
    assert last.ts < 0 and last.ts + last.tw * fit.regimes[-2].m_last > 0
    assert np.all(np.abs(fit.predict(m) / t - 1) < 0.02)
    below, above = fit.regimes[-2], fit.regimes[-1]
    assert below.m_last < last.lo < above.m_first
    assert below.ts + below.tw * last.lo == pytest.approx(above.ts + above.tw * last.lo, rel=1e-9)


def test_points_fit_their_mean_and_old_points_take_the_median(tmp_path):
    """Two-mode times (an oversubscribed receiver running or asleep): the fits use each size's
    mean; points stored before t_mean existed read it as their median."""
    m = np.array(STANDARD_SIZES, dtype=float)
    mean = 1.5e-6 + m / 3e9
    rows = np.zeros(len(m), dtype=dbc.POINT_DTYPE)
    rows["primitive"], rows["p"], rows["nbytes"], rows["t_mean"] = b"bcast", 2, m, mean
    rows["t_median"] = np.where(np.arange(len(m)) % 3 == 0, 4 * mean, mean)   # the median flips modes
    fits = comm_fit.fit_points(rows)
    assert len(fits) == 1 and fits["ts"][0] == pytest.approx(1.5e-6, rel=1e-6)
    old_dtype = np.dtype([(n, dbc.POINT_DTYPE[n]) for n in dbc.POINT_DTYPE.names if n != "t_mean"])
    old = np.zeros(3, dtype=old_dtype)
    old["t_median"] = [1.0, 2.0, 3.0]
    assert list(dbc.as_points(old)["t_mean"]) == [1.0, 2.0, 3.0]


def test_max_regimes_and_tiny_inputs():
    m = np.array(STANDARD_SIZES, dtype=float)
    t = np.where(m < 4096, 1.5e-6 + m / 3e9, 4e-6 + m / 12e9)
    assert len(comm_fit.fit_hockney(m, t, max_regimes=1).regimes) == 1
    two = comm_fit.fit_hockney([8, 64], [1e-6, 1.2e-6])
    assert len(two.regimes) == 1 and two.regimes[0].ts > 0
    single = comm_fit.fit_hockney([1024], [3e-6])
    assert single.predict(1024) == pytest.approx(3e-6)
    flat = comm_fit.fit_hockney([8, 16, 32, 64, 128], [2e-6] * 5)   # no size dependence: tw = 0, never negative
    assert flat.regimes[0].tw >= 0 and flat.predict(64) == pytest.approx(2e-6, rel=1e-6)


def test_heldout_fits_every_other_size_and_checks_the_rest():
    m = np.array([8, 16, 32, 64, 128, 256, 512, 1024, 2048], dtype=float)
    t = 1e-6 + m * 1e-10
    t_bad = t.copy()
    t_bad[3] *= 1.2                          # a held-out size (index 3) off the line by 20%
    half, hm, err = comm_fit.heldout(m, t_bad)
    assert list(hm) == [16, 64, 256, 1024]   # odd indices; the largest (2048) is always fitted
    assert err[1] == pytest.approx(0.2 / 1.2, rel=1e-6)
    assert np.delete(err, 1) == pytest.approx(0, abs=1e-9)
    m10 = np.arange(1, 11) * 64.0
    _, hm10, _ = comm_fit.heldout(m10, 1e-6 + m10 * 1e-10)
    assert 640 not in hm10 and list(hm10) == [128, 256, 384, 512]
    assert comm_fit.heldout(m[:3], t[:3])[0] is None


def test_fit_curve_groups_heldout_error_by_regime():
    m = np.array(STANDARD_SIZES, dtype=float)
    t = noisy(np.where(m < 4096, 1.5e-6 + m / 3e9, 4e-6 + m / 12e9), 0.02, seed=3)
    cf = comm_fit.fit_curve(m, t)
    assert len(cf.err_med) == len(cf.fit.regimes) == 2
    assert sum(cf.n_heldout) == len(m) // 2 - (1 if len(m) % 2 == 0 else 0)
    assert max(cf.err_max) < 0.10 and all(e <= x for e, x in zip(cf.err_med, cf.err_max, strict=True))


def test_fit_curve_leaves_the_heldout_sizes_out_and_checks_the_fit_on_them():
    """Probed held-out sizes: the stored fit never sees them, and its error there is what is
    reported; a disturbed held-out size moves the error, not the fit."""
    m = np.array(STANDARD_SIZES, dtype=float)
    mids = np.sqrt(m[:-1] * m[1:]).round()
    sizes = np.concatenate([m, mids])
    law = np.where(sizes < 4096, 1.5e-6 + sizes / 3e9, 4e-6 + sizes / 12e9)
    t = law.copy()
    t[len(m) + 20] *= 1.3                                   # one held-out size 30% slow
    cf = comm_fit.fit_curve(sizes, t, mids)
    assert cf.heldout_fit is None and sum(r.npts for r in cf.fit.regimes) == len(m)
    assert sum(cf.n_heldout) == len(mids)
    assert cf.fit.predict(sizes) == pytest.approx(law, rel=1e-6)
    assert max(x for x in cf.err_max if x == x) == pytest.approx(0.3 / 1.3, rel=1e-3)
    fallback = comm_fit.fit_curve(m, law[:len(m)], mids)         # none of them measured: every other size
    assert fallback.heldout_fit is not None and sum(fallback.n_heldout) == len(m) // 2 - 1


def test_loggp_from_prtt_recovers_o_O_g_G():
    s = np.array([8, 64, 512, 2048, 4096, 16384, 65536, 262144], dtype=float)
    n, o, o_per_b, g, g_per_b = 8, 0.8e-6, 0.05e-9, 0.5e-6, 0.1e-9
    o2, o2_per_b, g2, g2_per_b = 3e-6, 0.08e-9, 3.5e-6, 0.09e-9   # another regime from 4 KiB on
    big = s >= 4096
    o_s = np.where(big, o2 + o2_per_b * (s - 1), o + o_per_b * (s - 1))
    g_s = np.where(big, g2 + g2_per_b * (s - 1), g + g_per_b * (s - 1))
    prtt1 = 2 * (1.2e-6 + s * 1e-10)
    delay = prtt1.copy()
    rows = np.zeros(len(s), dbc.PRTT_DTYPE)
    rows["nbytes"], rows["prtt1"], rows["n"], rows["delay"] = s, prtt1, n, delay
    rows["prttn"] = prtt1 + (n - 1) * g_s
    rows["prttnd"] = prtt1 + (n - 1) * (delay + o_s)
    fits = np.zeros(2, dbc.FIT_DTYPE)
    fits["primitive"], fits["p"], fits["regime"], fits["lo"] = b"pingpong", 2, [0, 1], [0, 4096]
    lg = comm_fit.fit_loggp(rows, fits)
    assert lg["L"] == pytest.approx(prtt1[0] / 2) and lg["n"] == n
    assert [r["lo"] for r in lg["regimes"]] == [0, 4096]
    for r, want in zip(lg["regimes"], [(o, o_per_b, g, g_per_b), (o2, o2_per_b, g2, g2_per_b)], strict=True):
        assert (r["o"], r["O"], r["g"], r["G"]) == pytest.approx(want, rel=1e-6)
    assert "LoOgGP" in dbc.loggp_lines(lg)[0]


# -- storage and lookup (synthetic platforms) ---------------------------------------------------------

def curve_points(prim, p, r=0, c=0, scale=1.0, sizes=STANDARD_SIZES):
    m = np.array(sizes, dtype=float)
    t = scale * np.where(m < 4096, 1.5e-6 + m / 3e9, 4e-6 + m / 12e9)
    rows = [(prim, p, r, c, int(x), y, y, y, y, 5, 1, y) for x, y in zip(m, t, strict=True)]
    return rows


def write_fitted(path, info: dict, points):
    """Store ``points`` with their fits, as the probe does (it fits, the store stores)."""
    return dbc.write_platform(path, info, points, comm_fit.fit_points(points, info.get("heldout_sizes", ())))


def platform_info(P, oversubscribed=False, **extra):
    info = {"library": "Open MPI v9.9.9, package: test", "P": P, "oversubscribed": oversubscribed, "hosts": 1,
            "dist": dbc.mpi_distributions(), "hardware": dbc.hardware(), "profile": "synthetic",
            "updated": "2026-01-01T00:00:00", "seconds": 1.0}
    info.update(extra)
    return info


def write_synthetic(path, P, prims=dbc.PRIMITIVES, scale=1.0, **extra):
    rows = []
    for prim in prims:
        if prim in dbc.GRID_PRIMITIVES:
            for r, c in [(1, 2), (2, 1), (2, 2), (1, 4), (4, 1)]:
                if r * c <= P and (c if prim == "bcast_row" else r) >= 2:
                    rows += curve_points(prim, r * c, r, c, scale * (r * c) / 2)
        elif prim in dbc.PAIR_PRIMITIVES:
            rows += curve_points(prim, 2, scale=scale)
        else:
            for p in range(2, P + 1):
                rows += curve_points(prim, p, scale=scale * p / 2)
    return write_fitted(path, platform_info(P, **extra), np.array(rows, dtype=dbc.POINT_DTYPE))


def as_schema_2(path) -> None:
    """Mark a file as written by the schema-2 code (root version 2, ``comm_schema`` 1 per platform)."""
    with edited(path, "r+") as f:
        f.attrs["schema_version"] = 2
        for g in f["comm"].values():
            g.attrs["comm_schema"] = 1


def blas_db() -> Database:
    rec = np.zeros(7, RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"], rec["dtype"] = b"gemm", b"scipy-openblas", 1, b"float64"
    rec["pattern"], rec["x"], rec["k"], rec["run_id"] = b"square", np.arange(1, 8) * 16, 1e-10, b"r"
    return Database(records=rec, backends={"scipy-openblas": {"version": "x"}}, run={"profile": "t", "complete": True})


@pytest.fixture
def comm_db(tmp_path):
    path = tmp_path / "sp.h5"
    write_synthetic(path, 4)
    return path


def test_lookup_measured_sizes_regimes_and_vectorised(comm_db):
    cp = load_comm(comm_db, nprocs=4)
    assert cp.available and cp.platform["P"] == 4 and cp.platform["oversubscribed"] is False
    assert set(cp.primitives()) == set(dbc.PRIMITIVES)
    m = np.array([8, 1024, 4096, 65536, 1 << 20])
    want = np.where(m < 4096, 1.5e-6 + m / 3e9, 4e-6 + m / 12e9)
    got = cp.time("pingpong", 2, m)
    assert got.shape == m.shape
    np.testing.assert_allclose(got, want, rtol=1e-3)
    assert cp.time("pingpong", 2, m.reshape(5, 1)).shape == (5, 1)
    assert np.ndim(cp.time("pingpong", 2, 100)) == 0
    ts, tw = cp.ts_tw("pingpong", 2, 1000)
    assert ts == pytest.approx(1.5e-6, rel=1e-3) and tw == pytest.approx(1 / 3e9, rel=1e-3)
    ts, tw = cp.ts_tw("pingpong", 2, 4096)                 # the switch itself: rendezvous
    assert ts == pytest.approx(4e-6, rel=1e-3) and tw == pytest.approx(1 / 12e9, rel=1e-3)
    # outside the measured range: the nearest regime's line
    assert cp.time("pingpong", 2, 1 << 30) == pytest.approx(4e-6 + 2 ** 30 / 12e9, rel=1e-3)
    assert cp.time("pingpong", 2, 1) == pytest.approx(1.5e-6 + 1 / 3e9, rel=1e-3)


def test_lookup_nearest_p_and_grids(comm_db):
    cp = load_comm(comm_db, nprocs=4)
    at = 65536.0
    base = 4e-6 + at / 12e9
    assert cp.time("bcast", 3, at) == pytest.approx(1.5 * base, rel=1e-3)      # measured p
    assert cp.time("bcast", 8, at) == pytest.approx(2.0 * base, rel=1e-3)      # beyond: nearest (4)
    assert cp.time("allgather", 1, at) == 0.0                                   # one process: free
    assert cp.time("pingpong", 4, at) == pytest.approx(base, rel=1e-3)         # pairs: p = 2 only
    assert cp.time("bcast_row", 4, at, grid=(2, 2)) == pytest.approx(2 * base, rel=1e-3)
    assert cp.time("bcast_row", 4, at, grid=(1, 4)) == pytest.approx(2 * base, rel=1e-3)
    assert cp.time("bcast_col", 2, at, grid=(2, 1)) == pytest.approx(base, rel=1e-3)
    assert cp.time("bcast_col", 4, at, grid=(1, 4)) == 0.0                      # a column of one
    assert cp.time("bcast_row", 6, at, grid=(3, 2)) == pytest.approx(2 * base, rel=1e-3)   # nearest: 2x2 rows
    assert cp.time("bcast_row", 4, at) == pytest.approx(2 * base, rel=1e-3)    # no grid: 1 x p
    with pytest.raises(ValueError, match="unknown communication primitive"):
        cp.time("bogus", 2, 8)


def test_platform_choice_by_world_size(tmp_path):
    path = tmp_path / "sp.h5"
    write_synthetic(path, 2, scale=1.0)
    write_synthetic(path, 4, scale=2.0, oversubscribed=True)
    write_synthetic(path, 3, scale=3.0, oversubscribed=True)
    assert {q.P for q in dbc.read_platforms(path)} == {2, 3, 4}
    assert load_comm(path, nprocs=2).platform["P"] == 2
    assert load_comm(path, nprocs=3).platform["P"] == 3
    assert load_comm(path, nprocs=1).platform["P"] == 2       # nearest larger
    assert load_comm(path, nprocs=16).platform["P"] == 4      # else the largest
    assert load_comm(path, nprocs=4).platform["oversubscribed"] is True
    assert load_comm(path).platform["P"] == 2                 # not under mpiexec: largest dedicated
    # rewriting one platform keeps the others
    write_synthetic(path, 3, scale=5.0, oversubscribed=True)
    assert sorted(q.P for q in dbc.read_platforms(path)) == [2, 3, 4]
    assert load_comm(path, nprocs=3).time("pingpong", 2, 8) == pytest.approx(5 * (1.5e-6 + 8 / 3e9), rel=1e-3)


def test_other_mpi_library_or_machine_is_not_used(tmp_path):
    path = tmp_path / "sp.h5"
    write_synthetic(path, 2, dist={"mpich": "0.1"})
    write_synthetic(path, 3, hardware={"cpu_model": "elsewhere", "logical_cpus": 1, "physical_cores": 1})
    cp = load_comm(path, nprocs=2)
    assert not cp.available
    assert "mpich" in cp.reason and "other hardware" in cp.reason


def assert_defaults_with_one_warning(cp: CommParams):
    assert not cp.available and cp.platform["source"] == "defaults"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = cp.time("pingpong", 2, [8, 1 << 20])
        b = cp.ts_tw("bcast", 4, 1000)
        c = cp.time("allreduce", 8, 4096)
        d = cp.time("bcast_row", 4, 4096, grid=(2, 2))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    assert "autotune-install --mpi" in msgs[0]
    ts, tw = assumptions.DEFAULT_TS, assumptions.DEFAULT_TW
    np.testing.assert_allclose(a, [ts + 8 * tw, ts + 2 ** 20 * tw])
    assert b == comm_lookup.default_ts_tw("bcast", 4)
    assert float(c) > 0 and float(d) > 0


def test_missing_database_falls_back_with_one_warning(tmp_path):
    assert_defaults_with_one_warning(load_comm(tmp_path / "nothing.h5", nprocs=2))


def test_default_location_missing_falls_back():
    cp = load_comm(nprocs=4)                    # $AUTOTUNE_DB points at an absent file (conftest)
    assert "no database" in cp.reason
    assert_defaults_with_one_warning(cp)


@pytest.mark.parametrize("damage", ["random", "truncated", "empty", "directory", "bad_group"])
def test_damaged_database_falls_back_with_one_warning(tmp_path, damage):
    path = tmp_path / "sp.h5"
    if damage == "random":
        path.write_bytes(np.random.default_rng(0).bytes(4096))
    elif damage == "truncated":
        write_synthetic(path, 2)
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            fh.truncate(size // 2)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "directory":
        path.mkdir()
    else:
        write_synthetic(path, 2)
        with edited(path, "r+") as f:
            key = next(iter(f["comm"]))
            del f["comm"][key]["fits"]
    cp = load_comm(path, nprocs=2)
    assert_defaults_with_one_warning(cp)


def test_blas_only_database_has_no_comm_data(tmp_path):
    path = tmp_path / "sp.h5"
    save(blas_db(), path)
    cp = load_comm(path, nprocs=2)
    assert "no communication parameters" in cp.reason
    assert_defaults_with_one_warning(cp)


def test_comm_and_blas_records_share_the_file(tmp_path):
    path = tmp_path / "sp.h5"
    # comm first: the file reads as "no BLAS measurements" for the BLAS side
    write_synthetic(path, 2)
    with pytest.raises(DatabaseMissing, match="only communication"):
        load(path)
    assert load_sp(path).table is None
    # a BLAS save keeps the comm group; the comm data keeps loading
    db = blas_db()
    save(db, path)
    back = load(path)
    assert np.array_equal(back.records, db.records) and back.run == db.run
    assert load_comm(path, nprocs=2).available
    # a comm write keeps the BLAS records and attributes byte for byte
    with h5py.File(path, "r") as f:
        before = (f["k"][...].tobytes(), dict(f.attrs))
    write_synthetic(path, 3, oversubscribed=True)
    with h5py.File(path, "r") as f:
        assert f["k"][...].tobytes() == before[0]
        assert {k: v for k, v in f.attrs.items()} == before[1]
    assert sorted(q.P for q in dbc.read_platforms(path)) == [2, 3]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]   # no temporary files left


def test_comm_write_replaces_a_damaged_file(tmp_path):
    path = tmp_path / "sp.h5"
    path.write_bytes(b"not hdf5 at all")
    write_synthetic(path, 2)
    assert load_comm(path, nprocs=2).available


def test_import_does_not_load_mpi4py():
    code = ("import autotune, autotune.db.comm_lookup, sys\n"
            "cp = autotune.db.comm_lookup.load_comm(nprocs=2)\n"
            "cp.platform\n"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'\n"
            "import autotune.install_probe.comm, autotune.install_probe.cli\n"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported by the probe module'\n")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- profiles ------------------------------------------------------------------------------------------

def test_builtin_profiles_and_errors(tmp_path):
    from autotune.install_probe.comm_profile import BUILTIN, CommProfileError, load_comm_profile, parse_comm_profile
    from autotune.install_probe.profile import read_profile_yaml

    quick, std = load_comm_profile("quick"), load_comm_profile("standard")
    data, _ = read_profile_yaml("standard", BUILTIN, "comm-{}.yaml", "comm profile", CommProfileError)
    held_std = parse_comm_profile({**data, "heldout": "midpoints"})      # standard with midpoints held out
    assert std.sizes[0] == 8 and std.sizes[-1] == 16 << 20
    assert sum(1024 < s < 65536 for s in std.sizes) > sum(1024 < s < 65536 for s in (2 ** e for e in range(25)))
    assert len(quick.sizes) < len(std.sizes)
    assert quick.p_values(4) == [2, 4] and std.p_values(4) == [2, 3, 4]
    assert std.grid_values(4) == [(1, 2), (2, 1), (1, 3), (3, 1), (1, 4), (2, 2), (4, 1)]
    assert quick.grid_values(4) == [(1, 4), (2, 2), (4, 1)]
    assert not std.heldout and not std.heldout_sizes and not quick.heldout and not quick.heldout_sizes
    std = held_std
    assert std.heldout
    held = set(std.heldout_sizes)
    assert not held & (set(std.sizes) | set(std.fitted_sizes("bcast_cold")))
    assert set(std.sizes_for("bcast")) == set(std.sizes) | set(std.heldout_for("bcast"))
    gaps = np.searchsorted(std.sizes, std.heldout_for("bcast"))     # one per gap (none fits between 8 and 16)
    assert 24 in held and list(gaps) == list(range(2, len(std.sizes)))
    assert set(std.heldout_for("bcast_cold")) <= held and min(std.heldout_for("bcast_cold")) > 65536
    # aligned as the fitted grid is: whole cache lines from 128 B, half the smaller neighbour below
    assert all(m % 64 == 0 for m in held if m >= 128) and {24, 48, 96} <= held
    for prim in ("bcast", "bcast_cold"):     # one strictly inside each gap, even where the middle is fitted
        own, mids = std.fitted_sizes(prim), std.heldout_for(prim)
        assert all(any(a < m < b for m in mids) for a, b in zip(own[1:-1], own[2:], strict=False))
    with pytest.raises(CommProfileError, match="heldout must be"):
        parse_comm_profile({"sizes": [8], "heldout": "every-other"})
    with pytest.raises(CommProfileError, match="unknown key"):
        parse_comm_profile({"sizes": [8], "bogus": 1})
    with pytest.raises(CommProfileError, match="multiples of 8"):
        parse_comm_profile({"sizes": [12]})
    with pytest.raises(CommProfileError, match="unknown primitive"):
        parse_comm_profile({"sizes": [8], "primitives": ["telepathy"]})
    with pytest.raises(CommProfileError, match="no such"):
        load_comm_profile(str(tmp_path / "absent.yaml"))


def test_each_point_keeps_the_lower_median_of_its_passes():
    from autotune.install_probe.comm_sweep import _Run

    def row(prim, m, mean):
        return (prim, 2, 0, 0, m, mean, mean, mean, mean, 5, 1, mean)

    run = _Run(world=None, profile=None, verbose=False)
    run.rows = [row("bcast", 64, 3.0), row("bcast", 64, 1.0), row("bcast", 64, 9.0),   # middle of three
                row("pingpong", 8, 4.0), row("pingpong", 8, 2.0),                       # faster of two
                row("pingpong", 16, 5.0), row("pingpong", 16, 1.0), row("pingpong", 16, 2.0),
                row("pingpong", 16, 7.0)]                                               # second of four
    best = {(r[0], r[4]): r[-1] for r in run.best_rows()}
    assert best == {("bcast", 64): 3.0, ("pingpong", 8): 2.0, ("pingpong", 16): 2.0}
    assert [r[0] for r in run.best_rows()] == ["pingpong", "pingpong", "bcast"]    # primitives' order


# -- the real probe under mpiexec -------------------------------------------------------------------------

TINY = {
    "name": "tiny-test",
    "sizes": [8, 64, 512, 2048, 4096, 8192, 32768, 131072],
    "cold_sizes": [65536, 131072, 262144],
    "procs": "all",
    "grids": "all",
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "rewarm": 1, "min_reps": 2, "max_reps": 3, "rel_tol": 0.5,
               "min_sample_seconds": 1e-5, "point_budget_seconds": 0.01},
    "passes": 1,
    "check_sides": [128, 256],
    "first_touch_sizes": [1 << 22, 1 << 23], "pack_order": 256, "root_reps": 1,   # 4-8 s of root costs, not 40
    "calibrate": False,     # no contention nor calibration runs: their own tests' business (8 s a probe)
    "overlap": {"sizes": [4096, 262144], "reps": 2},
}
MPI_TIMEOUT = 120   # a whole tiny probe: 22 s at P = 2 on 2 cores (session 29; 58 s before the root costs were cut)


def expected_curves(P: int) -> set[tuple]:
    """(primitive, p, r, c) the tiny profile measures at world size P."""
    out = {(x, 2, 0, 0) for x in (*dbc.PAIR_PRIMITIVES, "link_host", "swap_host")}   # one host: no network link
    out |= {(x, p, 0, 0) for x in dbc.PRIMITIVES
            if x not in dbc.PAIR_PRIMITIVES + dbc.GRID_PRIMITIVES + dbc.LINK_PRIMITIVES for p in range(2, P + 1)}
    for r in range(1, P + 1):
        for c in range(1, P + 1):
            if 2 <= r * c <= P:
                if c >= 2:
                    out.add(("bcast_row", r * c, r, c))
                if r >= 2:
                    out.add(("bcast_col", r * c, r, c))
    return out




@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """BLAS records, then the probe at -n 2 (module) and -n 3 (autotune-install --mpi under mpiexec)."""
    d = tmp_path_factory.mktemp("comm")
    path, prof = d / "sp.h5", d / "tiny.yaml"
    prof.write_text(yaml.safe_dump(TINY))
    save(blas_db(), path)
    with h5py.File(path, "r") as f:
        blas = (f["k"][...].tobytes(), dict(f.attrs))
    out2 = run_checked(mpi_command(2, [sys.executable, "-m", "autotune.install_probe.comm", "--db", str(path),
                               "--profile", str(prof)]), d)
    out3 = run_checked(mpi_command(3, [sys.executable, "-m", "autotune.install_probe.cli", "--mpi", "--db", str(path),
                               "--profile", str(prof)]), d)
    return path, blas, out2, out3


def test_probe_writes_every_primitive_for_each_world_size(probed):
    path, _, out2, out3 = probed
    assert "complete" in out2.stdout and "P=2" in out2.stdout
    assert "P=3 oversubscribed" in out3.stdout          # 3 ranks on this 2-core machine
    platforms = {q.P: q for q in dbc.read_platforms(path)}
    assert set(platforms) == {2, 3}
    for P, q in platforms.items():
        curves = {(r["primitive"].decode(), int(r["p"]), int(r["r"]), int(r["c"])) for r in q.points}
        assert curves == expected_curves(P)
        assert {(f["primitive"].decode(), int(f["p"]), int(f["r"]), int(f["c"])) for f in q.fits} == curves
        assert (q.points["t_median"] > 0).all() and (q.points["t_q3"] >= q.points["t_q1"]).all()
        assert (q.points["t_min"] <= q.points["t_median"]).all()
        assert q.info["P"] == P and q.info["hosts"] == 1 and "Open MPI" in q.info["library"]
        over = q.info["overlap"]
        assert set(over) == {"host"} and over["host"]["bytes"] == [4096, 262144]   # one host: no network link
        assert all(0.0 <= h <= 1.0 for h in over["host"]["hidden"]) and min(over["host"]["exchange"]) > 0
        assert q.info["dist"] == dbc.mpi_distributions()
        assert "loop_overhead" not in q.info     # no BLAS panel series here: the calibration is skipped
        assert (q.fits["ts"] >= 0).all() and (q.fits["tw"] >= 0).all()
        assert q.loggp["L"] > 0 and q.loggp["regimes"] and len(q.prtt) == len(TINY["sizes"])
        assert all(r[k] >= 0 for r in q.loggp["regimes"] for k in ("o", "O", "g", "G"))
    # derived datatypes: the payload actually sent (the vector of 8-double rows, the darray piece)
    pts = platforms[2].points
    assert set(pts[pts["primitive"] == b"send_vector"]["nbytes"]) == set(TINY["sizes"])


def test_probed_database_loads_and_keeps_blas_records(probed):
    path, blas, _, _ = probed
    with h5py.File(path, "r") as f:
        assert f["k"][...].tobytes() == blas[0]
        assert dict(f.attrs) == blas[1]
    assert len(load(path).records) == 7
    for nprocs, P in ((2, 2), (3, 3), (4, 3), (None, 2)):
        cp = load_comm(path, nprocs=nprocs)
        assert cp.available and cp.platform["P"] == P
        assert set(cp.primitives()) == set(dbc.PRIMITIVES) - {"link_net", "swap_net"}   # one host: no network link
        for prim in dbc.PRIMITIVES:
            grid = (1, 2) if prim == "bcast_row" else (2, 1) if prim == "bcast_col" else None
            t = cp.time(prim, 2, [8, 4096, 1 << 20], grid=grid)
            assert np.all(np.isfinite(t)) and np.all(t > 0)
        assert cp.time("bcast_col", 3, 4096, grid=(3, 1)) > 0


def test_show_lists_comm_fits_and_plots(probed, tmp_path, capsys):
    from autotune.cli import command as cli

    path = probed[0]
    png = tmp_path / "sp.png"
    assert cli.main(["show", "--db", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "MPI communication parameters (2 platforms)" in out
    assert "pingpong p=2" in out and "bcast_row p=3 grid 1x3" in out and "GB/s" in out
    assert "held-out err med" in out and "breakpoints" in out and "LoOgGP" in out
    assert (tmp_path / "sp-comm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["show", "--db", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["points"] == 7 and {c["platform"]["P"] for c in data["comm"]} == {2, 3}


def test_cli_launch_imports_the_installed_package_from_any_directory(monkeypatch, tmp_path):
    """The launched ranks run ``-m`` with PYTHONSAFEPATH: started from a source checkout, its
    autotune/ (no compiled kernels there) must not shadow the installed package."""

    from autotune.install_probe import cli

    seen = fake_launch(monkeypatch, cli)
    assert cli.launch_comm_probe(2, "quick", tmp_path / "x.h5", quiet=True) == 0
    assert seen["env"]["PYTHONSAFEPATH"] == "1" and "autotune.install_probe.comm" in seen["cmd"]


def test_cli_launches_mpiexec_itself(tmp_path):
    path, prof = tmp_path / "cli.h5", tmp_path / "tiny.yaml"
    prof.write_text(yaml.safe_dump(dict(TINY, procs=[2], grids="none", heldout="midpoints")))
    proc = run_checked([sys.executable, "-m", "autotune.install_probe.cli", "--mpi", "--np", "2",
                        "--profile", str(prof), "--db", str(path), "--no-progress", "--timeout", "50"], tmp_path)
    assert "MPI probe on 2 processes complete" in proc.stdout
    cp = load_comm(path, nprocs=2)
    assert cp.available and cp.platform["P"] == 2 and cp.loggp is not None
    assert "bcast_row" not in cp.primitives() and "pingpong" in cp.primitives()
    info = cp._platform.info                     # the root's own costs and the ranks' compute spread
    skews = info["compute_skew"]
    assert skews["p"] == list(range(2, info["P"] + 1)) and all(0 <= v < 1 for v in skews["skew"])
    assert len(info["first_touch"]["bytes"]) == len(info["first_touch"]["per_byte"])
    check = info["check"]                            # the root's finiteness check, cold, per library
    # measured seconds per element: positive and finite (a loaded host stretches them: no upper bound)
    assert check["sides"] == [128, 256] and all(0 < v < math.inf for v in check["numpy-openblas"])
    copy = info["fortran_copy"]                      # the root's checked transposing copy, cold
    assert copy["sides"] == [128, 256] and all(0 < v < math.inf for v in copy["per"])
    held = set(info["heldout_sizes"])                # timed, left out of the fits, checked on
    assert held and not held & set(TINY["sizes"]) and 24 in held
    fits, pts = cp._platform.fits, cp._platform.points
    bcast = fits[fits["primitive"] == b"bcast"]
    extra = set(pts[pts["primitive"] == b"bcast"]["nbytes"]) - set(TINY["sizes"])
    assert extra <= held and len(extra) >= len(TINY["sizes"]) - 2      # 65536, a cold size, is not held out
    assert bcast["npts"].sum() == len(TINY["sizes"]) and bcast["n_heldout"].sum() == len(extra)


def test_cli_rejects_bad_mpi_arguments(tmp_path, capsys):
    from autotune.install_probe import cli

    assert cli.main(["--mpi", "--np", "2", "--profile", "full"]) == 2
    assert "no such built-in profile" in capsys.readouterr().err
    assert cli.main(["--mpi", "--np", "1", "--profile", "quick"]) == 2
    assert cli.main(["--mpi", "--resume"]) == 2


def test_primitive_names_fit_the_stored_field():
    """Every primitive's name fits the points' and fits' fixed-width field: a longer one is cut on
    storage and its curve is never found again."""
    width = min(dbc.POINT_DTYPE["primitive"].itemsize, dbc.FIT_DTYPE["primitive"].itemsize)
    assert all(len(x) <= width for x in dbc.PRIMITIVES)
    assert dbc.base_primitive("colscatter_cold") == "scatterv"


def test_first_touch_series_loses_a_lone_outlier_and_keeps_steps(tmp_path):
    """The page-fault series is read through a running median of three: one noisy size goes, the
    step where glibc starts mapping arrays fresh (two or more sizes) stays."""
    path = tmp_path / "ft.h5"
    sizes = [1 << 22, 1 << 23, 1 << 24, 1 << 25, 1 << 26, 1 << 27]
    write_synthetic(path, 2, first_touch={"bytes": sizes, "per_byte": [0.0, 9e-11, 0.0, 0.0, 1e-10, 1e-10]})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.first_touch_time(1 << 23) == 0.0
    assert cp.first_touch_time(1 << 26) == pytest.approx(1e-10 * (1 << 26))
    assert cp.first_touch_time(1 << 27) == pytest.approx(1e-10 * (1 << 27))


def test_overlap_series_gives_the_hidden_share_and_cpu_by_link_and_size(tmp_path):
    """The probe's overlap series per link kind: the hidden share and the CPU an overlapped exchange
    costs, log-linear between its sizes (held below, the CPU in proportion above); a kind or platform
    without one, or a damaged one, gives the stand-in (copies within a host do not hide, network
    messages do, free)."""
    path = tmp_path / "ov.h5"
    net = {"bytes": [4096, 262144], "hidden": [0.2, 0.8], "cpu": [1e-6, 2e-5], "exchange": [1e-5, 1e-4]}
    write_synthetic(path, 2, overlap={"net": net})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.overlap("net", 32768) == pytest.approx((0.5, 1.05e-5))
    assert cp.overlap("net", 1024) == pytest.approx((0.2, 1e-6))
    assert cp.overlap("net", 1 << 30) == pytest.approx((0.8, 2e-5 * 4096))
    assert cp.overlap("host", 4096) == assumptions.UNMEASURED_OVERLAP["host"]
    for i, bad in enumerate((None, "x", {"net": {"bytes": [1, 2], "hidden": [0.5]}},
                             {"net": {**net, "hidden": [float("nan"), 1.0]}})):
        old = tmp_path / f"old{i}.h5"
        write_synthetic(old, 2, **({} if bad is None else {"overlap": bad}))
        hidden, _ = comm_lookup.load_comm(old, nprocs=2).overlap("net", 4096)
        assert hidden == assumptions.UNMEASURED_OVERLAP["net"][0], bad


def test_checked_fortran_copy_uses_the_probed_timing(tmp_path):
    """The LU root's checked transposing copy costs the probe's timing of it by matrix side when
    the platform has one, else a plain copy (older probes)."""
    from autotune.models import movement

    save(blas_db(), tmp_path / "sp.h5")
    sp = load_sp(tmp_path / "sp.h5")
    path = tmp_path / "fc.h5"
    write_synthetic(path, 2, fortran_copy={"sides": [1024, 4096], "per": [2e-9, 8e-9]})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.fortran_copy_time(2048.0 ** 2) == pytest.approx(5e-9 * 2048 ** 2)
    assert movement.checked_copy(sp, cp, 2048.0 ** 2) == pytest.approx(5e-9 * 2048 ** 2)
    assert movement.checked_copy(sp, object(), 1e6) == movement.copy(sp, 1e6)


def test_finiteness_check_uses_the_probed_cold_timing(tmp_path):
    """The root's check costs the probe's out-of-cache timing of it, by matrix side and library,
    when the platform has one; else the add series' share (older probes)."""
    from autotune.models import movement

    save(blas_db(), tmp_path / "sp.h5")
    sp = load_sp(tmp_path / "sp.h5")
    path = tmp_path / "ck.h5"
    write_synthetic(path, 2, check={"sides": [1024, 4096], "scipy-openblas": [1e-9, 4e-9]})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.check_time("scipy-openblas", 2048.0 ** 2) == pytest.approx(2.5e-9 * 2048 ** 2)
    assert cp.check_time("mkl", 1e6) is None
    assert movement.finite_check(sp, 2048, 2048, "scipy-openblas", 1, cp) == pytest.approx(2.5e-9 * 2048 ** 2)
    plain = movement.finite_check(sp, 2048, 2048, "scipy-openblas", 1)
    assert movement.finite_check(sp, 2048, 2048, "mkl", 1, cp) == pytest.approx(
        movement.finite_check(sp, 2048, 2048, "mkl", 1))
    assert plain != pytest.approx(2.5e-9 * 2048 ** 2)


def test_first_touch_cost_comes_with_the_platform_by_size(tmp_path):
    """The probe stores the root's page-fault cost per byte of a new array by its size: the model
    interpolates log-linearly and holds the end values outside; an older single value applies to
    every size; a platform without one, or none, gives the nominal value."""
    path = tmp_path / "ft.h5"
    write_synthetic(path, 2, first_touch={"bytes": [1 << 22, 1 << 24, 1 << 26], "per_byte": [0.0, 0.0, 4e-11]})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.first_touch_time(1 << 20) == 0.0 and cp.first_touch_time(1 << 24) == 0.0
    assert cp.first_touch_time(1 << 25) == pytest.approx(2e-11 * (1 << 25))
    assert cp.first_touch_time(1 << 28) == pytest.approx(4e-11 * (1 << 28))
    single = tmp_path / "single.h5"
    write_synthetic(single, 2, first_touch=3e-11)
    as_schema_2(single)                  # schema 2 stored one value for every size: migrated on read
    assert comm_lookup.load_comm(single, nprocs=2).first_touch_time(1000.0) == pytest.approx(3e-8)
    nominal = 1000.0 * assumptions.DEFAULT_FIRST_TOUCH
    bads = (None, "x", {"bytes": [1, 2]}, {"bytes": [1, 2], "per_byte": [1.0, float("nan")]})
    for i, bad in enumerate(bads):
        old = tmp_path / f"old{i}.h5"
        write_synthetic(old, 2, **({} if bad is None else {"first_touch": bad}))
        assert comm_lookup.load_comm(old, nprocs=2).first_touch_time(1000.0) == pytest.approx(nominal), bad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cp = comm_lookup.load_comm(tmp_path / "missing.h5", nprocs=2)
        assert cp.first_touch_time(1000.0) == pytest.approx(nominal)


def test_first_touch_probe_measures_by_size_and_a_positive_cost_past_the_mmap_threshold():
    from autotune.install_probe.comm_root import first_touch_costs, first_touch_in_fresh_process

    for out in (first_touch_costs((1 << 22, 64 << 20), reps=3),     # 64 MiB > glibc's largest mmap threshold
                first_touch_in_fresh_process((1 << 22, 64 << 20), reps=3)):
        assert out["bytes"] == [1 << 22, 64 << 20] and min(out["per_byte"]) >= 0
        assert 0 < out["per_byte"][1] < 1e-8          # faster than 100 MB/s, slower than free


class _TwoRanks:
    """Rank 0 of a pretend pair whose partner always reports twice rank 0's time (no MPI in-process)."""

    rank = 0

    def Barrier(self):
        pass

    def allgather(self, t):
        return [t, 2 * t]


def test_compute_skew_is_the_mean_relative_spread_and_comes_with_the_platform(tmp_path):
    from autotune.install_probe.contention import compute_skew

    assert compute_skew(_TwoRanks(), shapes=((64, 8),), reps=3) == pytest.approx(2 / 3)   # (2t - t) / 1.5t
    path, old, single = tmp_path / "skew.h5", tmp_path / "old.h5", tmp_path / "single.h5"
    write_synthetic(path, 4, compute_skew={"p": [2, 3, 4], "skew": [0.012, 0.1, 0.24]})
    write_synthetic(single, 2, compute_skew=0.012)
    as_schema_2(single)                                     # schema 2 stored one value for every p
    write_synthetic(old, 2)
    cp = comm_lookup.load_comm(path, nprocs=4)
    assert (cp.compute_skew(2), cp.compute_skew(3), cp.compute_skew(4)) == (0.012, 0.1, 0.24)
    assert comm_lookup.load_comm(single, nprocs=2).compute_skew(2) == 0.012
    assert comm_lookup.load_comm(old, nprocs=2).compute_skew(2) == assumptions.DEFAULT_COMPUTE_SKEW
    for i, bad in enumerate(("x", -1.0, float("nan"), {"p": [2], "skew": ["x"]})):
        write_synthetic(tmp_path / f"bad{i}.h5", 2, compute_skew=bad)
        assert load_comm(tmp_path / f"bad{i}.h5", nprocs=2).compute_skew(2) == assumptions.DEFAULT_COMPUTE_SKEW


class _Group:
    """A group communicator that reports fixed per-rank times (its slowdown is known exactly)."""

    def __init__(self, times):
        self.times = times

    def Barrier(self):
        pass

    def allgather(self, _):
        return self.times


class _World:
    rank, size = 0, 2

    def Ibarrier(self):
        return type("Done", (), {"Test": lambda self: True})()



def test_step_wait_reads_the_calibration_by_nearest_p_and_log_block_else_the_probe_skew(tmp_path):
    """The stored SUMMA calibration, {"p", "b", "wait"}: the nearest measured p (the larger on a
    tie), log-linear in b with the ends held; without it, or malformed, ``compute_skew(p)``."""
    path, bare = tmp_path / "cal.h5", tmp_path / "bare.h5"
    table = {"p": [2, 4], "b": [64, 256], "wait": [[0.04, 0.02], [0.6, 0.2]]}
    write_synthetic(path, 4, compute_skew={"p": [2, 3, 4], "skew": [0.012, 0.1, 0.24]}, step_wait=table)
    cp = comm_lookup.load_comm(path, nprocs=4)
    assert cp.step_wait(2, 64) == pytest.approx(0.04) and cp.step_wait(2, 128) == pytest.approx(0.03)
    assert cp.step_wait(2, 32) == pytest.approx(0.04) and cp.step_wait(2, 1024) == pytest.approx(0.02)
    assert cp.step_wait(3, 256) == pytest.approx(0.2) and cp.step_wait(4, 64) == pytest.approx(0.6)
    assert cp.end_wait(4, 64) == 0.0                       # an older calibration: no root's wait
    write_synthetic(path, 4, step_wait={**table, "end": [[0.1, 0.0], [1.5, 0.5]]})
    cp = comm_lookup.load_comm(path, nprocs=4)
    assert cp.end_wait(2, 128) == pytest.approx(0.05) and cp.end_wait(3, 64) == pytest.approx(1.5)
    for bad in ({"p": [2], "b": [64], "wait": [[-1.0]]}, {"p": [2], "b": [64, 128], "wait": [[0.1]]}, "x",
                {"p": [2], "wait": [[0.1]]}):
        write_synthetic(bare, 4, compute_skew={"p": [2, 3, 4], "skew": [0.012, 0.1, 0.24]}, step_wait=bad)
        cp = comm_lookup.load_comm(bare, nprocs=4)
        assert (cp.step_wait(2, 64), cp.step_wait(3, 64)) == (0.012, 0.1)


def test_step_wait_of_a_one_row_or_one_column_grid_is_its_own_orientations(tmp_path):
    """1 x p and p x 1 plans read their own orientation's calibration (``wait_1xp``, ``wait_px1``);
    2-D grids, no grid, and probes without them read the mean (``wait``)."""
    table = {"p": [2], "b": [64, 256], "wait": [[0.02, 0.01]], "end": [[0.0, 0.0]],
             "wait_1xp": [[0.0, 0.0]], "wait_px1": [[0.04, 0.02]]}
    path = tmp_path / "sw.h5"
    write_synthetic(path, 2, step_wait=table)
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.step_wait(2, 64, (1, 2)) == 0.0 and cp.step_wait(2, 64, (2, 1)) == pytest.approx(0.04)
    assert cp.step_wait(2, 256, (2, 1)) == pytest.approx(0.02) and cp.step_wait(2, 64) == pytest.approx(0.02)
    assert cp.step_wait(4, 64, (2, 2)) == pytest.approx(0.02)
    old = tmp_path / "old.h5"
    write_synthetic(old, 2, step_wait={k: table[k] for k in ("p", "b", "wait", "end")})
    assert comm_lookup.load_comm(old, nprocs=2).step_wait(2, 64, (2, 1)) == pytest.approx(0.02)


def test_profile_step_waits_take_an_order_and_blocks_and_reject_bad_values():
    from autotune.install_probe.comm_profile import CommProfileError, load_comm_profile, parse_comm_profile

    base = {"name": "t", "sizes": [8, 64]}
    prof = parse_comm_profile({**base, "step_waits": {"order": 256, "blocks": [32, 64]}})
    assert (prof.step_order, prof.step_blocks) == (256, (32, 64))
    assert parse_comm_profile(base).step_blocks == (64, 128, 256, 512)
    assert load_comm_profile("quick").step_blocks == (32, 64)
    for bad in ({"order": 0}, {"blocks": []}, {"blocks": ["x"]}, {"size": 3}, [1]):
        with pytest.raises(CommProfileError, match="step_waits"):
            parse_comm_profile({**base, "step_waits": bad})


def test_profile_contention_takes_sizes_and_reps_and_the_estimate_follows():
    from autotune.install_probe import comm_estimate
    from autotune.install_probe.comm_profile import CommProfileError, parse_comm_profile
    from autotune.install_probe.contention import RANKB_SIZES, SIZES, ContentionPlan

    base = {"name": "t", "sizes": [8, 64], "procs": [2], "grids": "none"}
    small = parse_comm_profile({**base, "contention": {"sizes": [256], "rankb_sizes": [512], "reps": 2,
                                                       "skew_reps": 3}})
    assert small.contention == ContentionPlan((256,), (512,), 2, 3)
    assert parse_comm_profile(base).contention == ContentionPlan(SIZES, RANKB_SIZES)
    full = parse_comm_profile(base)
    assert comm_estimate._compute_seconds(small, 2, 2, 1e10) < comm_estimate._compute_seconds(full, 2, 2, 1e10)
    for bad in ({"sizes": []}, {"reps": 0}, {"sizes": ["x"]}, {"block": 3}, [1]):
        with pytest.raises(CommProfileError, match="contention"):
            parse_comm_profile({**base, "contention": bad})


def test_profile_root_costs_take_sizes_and_reps_and_reject_bad_values():
    from autotune.install_probe.comm_profile import FIRST_TOUCH_SIZES, CommProfileError, parse_comm_profile

    base = {"name": "t", "sizes": [8, 64]}
    prof = parse_comm_profile({**base, "check_sides": [128], "first_touch_sizes": [4096, 8192], "pack_order": 256,
                               "root_reps": 2})
    assert (prof.check_sides, prof.first_touch_sizes, prof.pack_order, prof.root_reps) == ((128,), (4096, 8192), 256, 2)
    prof = parse_comm_profile(base)
    assert (prof.first_touch_sizes, prof.pack_order, prof.root_reps) == (FIRST_TOUCH_SIZES, 2048, None)
    for bad in ({"pack_order": 0}, {"root_reps": "x"}, {"first_touch_sizes": []}, {"check_sides": [0]},
                {"first_touch_sizes": 5}):
        with pytest.raises(CommProfileError, match="root costs|positive"):
            parse_comm_profile({**base, **bad})


def test_profile_loop_costs_take_order_block_pairs_and_reject_bad_values():
    from autotune.install_probe.calibrate import LOOP_CASES
    from autotune.install_probe.comm_profile import CommProfileError, load_comm_profile, parse_comm_profile

    base = {"name": "t", "sizes": [8, 64]}
    assert parse_comm_profile({**base, "loop_costs": [[256, 32], [512, 64]]}).loop_cases == ((256, 32), (512, 64))
    assert parse_comm_profile(base).loop_cases == LOOP_CASES
    assert load_comm_profile("quick").loop_cases == ((256, 32), (512, 32), (512, 64))
    for bad in ([[256, 32]], [[256, 0], [512, 64]], [["x", 1], [2, 3]], [[1, 2, 3]], 5):
        with pytest.raises(CommProfileError, match="loop_costs"):
            parse_comm_profile({**base, "loop_costs": bad})


def test_contention_is_the_ranks_mean_slowest_and_fastest_over_the_solo_time_of_the_same_round():
    """The interleaved contention rounds: each group size's time is the solo time times the
    median ratio of its ranks' mean (and slowest, fastest) to the solo run of the same round."""
    from autotune.install_probe.contention import _interleaved

    groups = {1: _Group([0.010]), 2: _Group([0.010, 0.030])}
    out = _interleaved(_World(), groups, 8, 8, reps=3)
    assert out[1] == pytest.approx({"mean": 0.010, "max": 0.010, "min": 0.010})
    assert out[2] == pytest.approx({"mean": 0.020, "max": 0.030, "min": 0.010})


def test_contention_passes_combine_by_the_lower_median_of_solo_times_and_slowdowns():
    """A pass in a slow state (the pair 1.3x its solo time) is outvoted by two normal ones; each
    slowdown is over its own pass's solo time; empty passes (other ranks) are skipped."""
    from autotune.install_probe.contention import combine_passes

    def one(solo: float, pair: float) -> list:
        return [(1, 512, "square", solo), (2, 512, "square", pair)]

    out = dict(((p, n, name), t) for p, n, name, t in combine_passes([one(1.0, 1.3), [], one(1.1, 1.1),
                                                                         one(0.9, 0.95)]))
    assert out[1, 512, "square"] == pytest.approx(1.0)
    assert out[2, 512, "square"] == pytest.approx(0.95 / 0.9)       # slowdowns 1.3, 1.0, 1.056
    assert combine_passes([[], []]) == []


def test_contention_factors_by_statistic_fall_back_to_the_mean_then_the_square_products():
    from autotune.db.contention import Contention, series

    rows = [(1, 256, "square", 1.0), (2, 256, "square", 1.5), (1, 256, series("square", "max"), 1.0),
            (2, 256, series("square", "max"), 2.0), (1, 256, "rankb", 1.0), (2, 256, "rankb", 1.2)]
    p, n, pattern, t = zip(*rows, strict=True)
    c = Contention(p, n, t, pattern)
    assert c.factor(2, 256) == pytest.approx(1.5) and c.factor(2, 256, statistic="max") == pytest.approx(2.0)
    assert c.factor(2, 256, statistic="min") == pytest.approx(1.5)             # unmeasured: the mean
    assert c.factor(2, 256, "rankb", "max") == pytest.approx(1.2)              # the pattern's own mean first
    assert c.factor(2, 256, "view", "max") == pytest.approx(2.0)               # no such pattern: square's
    assert series("rankb") == "rankb" and series("rankb", "min") == "rankb:min"


# -- cold-cache curves (distribution) ---------------------------------------------------------------

def test_cold_curve_applies_from_its_first_size_warm_below_and_when_missing(tmp_path):
    """A cold curve is measured from 64 KiB up: below, and on a database without it, the warm
    curve of the same operation answers (no warning: that operation is measured)."""
    path = tmp_path / "sp.h5"
    cold_sizes = [65536, 131072, 262144, 524288, 1 << 20, 1 << 21]
    rows = curve_points("scatterv", 2) + curve_points("scatterv_cold", 2, scale=3.0, sizes=cold_sizes)
    write_fitted(path, platform_info(2), np.array(rows, dtype=dbc.POINT_DTYPE))
    cp = load_comm(path, nprocs=2)
    small, big = np.array([1024.0, 8192.0]), np.array([65536.0, 1 << 21, 1 << 24])
    np.testing.assert_allclose(cp.time("scatterv_cold", 2, small), cp.time("scatterv", 2, small))
    np.testing.assert_allclose(cp.time("scatterv_cold", 2, big), 3.0 * cp.time("scatterv", 2, big), rtol=1e-3)
    path2 = tmp_path / "warm.h5"
    write_synthetic(path2, 2, prims=[x for x in dbc.PRIMITIVES if not x.endswith("_cold")])
    warm_only = load_comm(path2, nprocs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(warm_only.time("bcast_cold", 2, big), warm_only.time("bcast", 2, big))
    assert dbc.base_primitive("bcast_cold") == "bcast" and dbc.base_primitive("bcast") == "bcast"
    assert comm_lookup.default_ts_tw("scatterv_cold", 4) == comm_lookup.default_ts_tw("scatterv", 4)


def test_profile_cold_sizes_and_buffers():
    from autotune.install_probe import comm_ops, comm_profile

    prof = comm_profile.parse_comm_profile({"sizes": {"powers": [3, 20]}}, "t")
    assert prof.sizes_for("bcast_cold") == tuple(s for s in prof.sizes if s >= comm_profile.COLD_MIN_BYTES)
    assert prof.sizes_for("bcast") == prof.sizes
    prof = comm_profile.parse_comm_profile({"sizes": [8, 64], "cold_sizes": {"powers": [16, 26]}}, "t")
    assert prof.sizes_for("scatterv_cold") == tuple(2 ** e for e in range(16, 27))
    # every send/receive buffer holds a whole p-block vector (the cold ones allocate their own)
    prof = comm_profile.parse_comm_profile({"sizes": [8, 1 << 20], "loggp": False}, "t")
    assert comm_ops.buffer_bytes(prof, ["scatterv", "bcast"], 4) == 4 << 20
    assert comm_ops.buffer_bytes(prof, ["bcast", "scatterv_cold"], 4) == 1 << 20
    with pytest.raises(comm_profile.CommProfileError):
        comm_profile.parse_comm_profile({"sizes": [8], "cold_sizes": [12]}, "t")


def test_profile_cold_passes_time_the_cold_primitives_in_fewer_passes():
    from autotune.install_probe import comm_estimate, comm_profile

    base = {"sizes": [8, 1 << 17], "cold_sizes": [1 << 16, 1 << 17], "procs": [2], "grids": "none", "passes": 2,
            "loggp": False}
    parse = comm_profile.parse_comm_profile
    two, one = parse(base, "t"), parse({**base, "cold_passes": 1}, "t")
    assert (two.rounds("bcast_cold"), one.rounds("bcast_cold"), one.rounds("bcast")) == (2, 1, 2)
    assert comm_profile.parse_comm_profile({**base, "cold_passes": 5}, "t").rounds("scatterv_cold") == 2   # never more
    counts = {name: comm_estimate.count_points(prof, 2) for name, prof in (("two", two), ("one", one))}
    assert counts["two"]["points"] == counts["one"]["points"]
    cold = sum(len(s) for x, _, s in comm_estimate.plan_curves(one, 2) if x in comm_profile.COLD)
    assert counts["two"]["timed"] - counts["one"]["timed"] == cold > 0
    assert comm_estimate.points_seconds(one, 2, 2) < comm_estimate.points_seconds(two, 2, 2)


def test_cache_flush_sweeps_four_times_the_last_level_cache():
    from autotune.install_probe.comm_ops import CacheFlush, last_level_cache_bytes

    llc = last_level_cache_bytes()
    assert llc >= 1 << 20
    assert CacheFlush().buf.nbytes == 4 * llc
    flush = CacheFlush(1 << 20)                                 # what a sweep does, on a small buffer
    before = flush.buf.copy()
    flush()
    np.testing.assert_array_equal(flush.buf, before + 1.0)     # every line read and written


def test_pack_time_interpolates_the_probes_costs_by_run_length(tmp_path):
    path = tmp_path / "sp.h5"
    write_synthetic(path, 2, pack={"runs": [8, 512, 2048], "take": [4e-9, 1e-9, 1e-9], "put": [6e-9, 2e-9, 1e-9]})
    cp = comm_lookup.load_comm(path, nprocs=2)
    assert cp.pack_time("take", 100, 8) == pytest.approx(4e-7)
    assert cp.pack_time("take", 100, 64) == pytest.approx(100 * 2.5e-9)      # halfway in log run
    assert cp.pack_time("put", 100, 1 << 20) == pytest.approx(1e-7)         # past the last: clamped
    assert cp.pack_time("put", 100, 1) == pytest.approx(6e-7)
    for bad in (None, {"runs": [8], "take": ["x"]}, {"runs": [8, 16], "take": [1e-9]}, {"take": [1e-9]}):
        other = tmp_path / f"bad{len(str(bad))}.h5"
        write_synthetic(other, 2, **({} if bad is None else {"pack": bad}))
        assert comm_lookup.load_comm(other, nprocs=2).pack_time("take", 100, 8) is None


def test_pack_costs_probe_measures_every_run_length():
    from autotune.install_probe.comm_root import PACK_RUNS, pack_costs

    out = pack_costs(n=256, reps=1)
    assert out["runs"] == [*PACK_RUNS, 256]
    for kind in ("take", "put"):
        assert len(out[kind]) == len(out["runs"]) and all(0 < t < math.inf for t in out[kind])   # s per element


class _OneRank:
    """A communicator of one rank for the timing loop: Allreduce copies, Barrier returns."""

    def Allreduce(self, send, recv, op=None):
        recv[:] = send

    def Barrier(self):
        pass


@pytest.mark.parametrize(("seconds", "calls_per_rep"), [(2e-5, 3), (2e-3, 1)])
def test_only_short_operations_are_warmed_and_rewarmed_in_full(seconds, calls_per_rep, monkeypatch):
    """warmup=3, rewarm=2: a short call is warmed three times, then takes two untimed calls before
    each timed one; one longer than rewarm_below_seconds (1 ms) is warmed once, never re-warmed, and
    its call timed alone is its first repetition: a slow link's large message is not sent over and over.
    The call advances a fake MPI clock by its cost, so the machine's load moves nothing."""
    from autotune.install_probe.comm_ops import time_point
    from autotune.install_probe.comm_profile import CommTiming
    from mpi4py import MPI

    calls, clock = [], [0.0]
    monkeypatch.setattr(MPI, "Wtime", lambda: clock[0])

    def op():
        calls.append(1)
        clock[0] += seconds

    timing = CommTiming(warmup=3, warmup_seconds=0.0, rewarm=2, min_reps=4, max_reps=4, rel_tol=1.0, mean_tol=1.0,
                        min_sample_seconds=0.0, point_budget_seconds=10.0)
    pt = time_point(_OneRank(), op, timing, batch=False)
    short = calls_per_rep > 1
    warm = 3 if short else 1                     # a long first call is warm-up enough ...
    timed = 4 if short else 3                    # ... and its single timed call the first repetition
    assert pt.reps == 4 and len(calls) == warm + 1 + timed * calls_per_rep
