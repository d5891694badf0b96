"""One schema version for the whole database file: written at the root, older files migrated on
read where that is a pure renaming/defaulting (nothing written), refused otherwise with the
command that rebuilds them; a refused file never breaks a tuned call."""
from __future__ import annotations

import warnings

import h5py
import numpy as np
import pytest
from db_helpers import edited
from test_comm import write_synthetic

import autotune
from autotune.db import RECORD_DTYPE, SCHEMA_VERSION, Database, SchemaMismatch, comm_lookup, load, load_sp, save
from autotune.db.fitted import FittedRecord, read_fitted, save_fitted
from autotune.db.learned import read_learned, save_learned
from autotune.db.noise import verdict
from autotune.db.store import MIGRATABLE, PER_GROUP_VERSIONS
from autotune.db.validation import read_validation, save_validation
from autotune.models.fitted_phases import PhaseFactor, load_phase_factors, save_phase_factors

BE = "scipy-openblas"
LEGACY = {"comm": "comm_schema", "fitted": "fitted_schema", "learned": "learned_schema"}


def blas_db() -> Database:
    rec = np.zeros(7, RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"], rec["dtype"] = b"gemm", BE.encode(), 1, b"float64"
    rec["pattern"], rec["x"], rec["k"], rec["run_id"] = b"square", np.arange(1, 8) * 16, 1e-10, b"r"
    rec["flops"] = 2.0 * rec["x"].astype(float) ** 3
    rec["t_median"] = rec["t_min"] = rec["flops"] * 1e-10
    return Database(records=rec, backends={BE: {"version": "x"}}, run={"profile": "t", "complete": True})


def fitted_record() -> FittedRecord:
    return FittedRecord("gemm", "blas", BE, 1, 0, 0, ((3, 0),), np.array([[1e-10]]), np.array([16.0, 128.0]),
                        "FI-LS", 1.0, 0.5, 14.0, 9.0, "analytical erred", True)


def learned_row() -> dict:
    return {"family": "gemm", "algorithm": "blas", "backend": BE, "threads": 1, "param": 0, "variant": 0,
            "npts": 3, "scale": 2.0, "sigma": 0.1, "n_lo": 64.0, "n_hi": 512.0, "terms": (), "coef": ()}


def check_point() -> dict:
    return {"family": "gemm", "algorithm": "blas", "backend": BE, "threads": 1, "param": 0, "variant": 0,
            "n": 176, "predicted": 1e-3, "measured": 1.2e-3, "in_use": 1.1e-3, "model": "fitted",
            "reason": "analytical APE 20% > tol 3%; fitted APE 5%: in use"}


@pytest.fixture
def full_db(tmp_path):
    """A database holding every group, as this autotune writes it."""
    path = tmp_path / "sp.h5"
    save(blas_db(), path)
    write_synthetic(path, 2, compute_skew=0.012, first_touch=3e-11)
    save_fitted(path, [fitted_record()])
    save_learned(path, [learned_row()])
    save_phase_factors(path, "k", [PhaseFactor("gemm", "bsr", "compute", 1.1, 2, 0.0, 10.0, 1.0)])
    save_validation(path, [check_point()], info={"spec": "tiny"})
    return path


# The /k fields schema 4 added (the timing noise); files of schema 3 and before have none of them.
NOISE_FIELDS = ("t_wall", "t_cpu", "cpu_share", "noise")


def as_written_by(path, version: int, member_version: int = 1) -> None:
    """Relabel a file as written by an autotune of root ``version``: per-group versions
    ``member_version`` where that version kept them, /k rows without the fields added since."""
    with edited(path, "r+") as f:
        f.attrs["schema_version"] = version
        for group, attr in LEGACY.items():
            for g in f[group].values():
                g.attrs[attr] = member_version
        if version < 4 and "k" in f:
            rows = f["k"][...]
            old = np.dtype([(n, RECORD_DTYPE[n]) for n in RECORD_DTYPE.names if n not in NOISE_FIELDS])
            del f["k"]
            f.create_dataset("k", data=np.array([tuple(r[n] for n in old.names) for r in rows], old), maxshape=(None,))


def readable_everything(path) -> None:
    """Every group of ``path`` reads back what ``full_db`` stored."""
    assert len(load(path, check_machine=False).records) == 7
    assert [e.key for e in read_fitted(path).entries] == [("blas", BE, 1, 0, 0)]
    assert read_learned(path)[0]["scale"] == 2.0
    assert load_phase_factors(path, "k").factor("gemm", "bsr", "compute") == pytest.approx(1.1)
    assert read_validation(path).points[0]["model"] == "fitted"
    cp = comm_lookup.load_comm(path, nprocs=2, refresh=True)
    assert cp.available, cp.reason


def test_one_version_at_the_root_and_none_per_group(full_db):
    with h5py.File(full_db, "r") as f:
        assert int(f.attrs["schema_version"]) == SCHEMA_VERSION
        for group, attr in LEGACY.items():
            assert all(attr not in g.attrs for g in f[group].values()), group
    readable_everything(full_db)


@pytest.mark.parametrize("version", sorted(MIGRATABLE))
def test_an_older_file_is_migrated_on_read_and_left_unchanged(full_db, version):
    assert SCHEMA_VERSION - 1 in MIGRATABLE
    as_written_by(full_db, version)
    before = full_db.read_bytes()
    readable_everything(full_db)
    cp = comm_lookup.load_comm(full_db, nprocs=2, refresh=True)
    assert cp.compute_skew(2) == 0.012                        # one value stored for every p
    assert cp.first_touch_time(1000.0) == pytest.approx(3e-8)   # one value stored for every size
    assert full_db.read_bytes() == before                     # reading wrote nothing


def test_a_group_the_migration_cannot_read_is_refused_the_rest_kept(full_db):
    as_written_by(full_db, min(PER_GROUP_VERSIONS))
    with edited(full_db, "r+") as f:
        for g in f["comm"].values():
            g.attrs["comm_schema"] = 0
    cp = comm_lookup.load_comm(full_db, nprocs=2, refresh=True)
    assert not cp.available and f"autotune-install --mpi --np P --db {full_db}" in cp.reason
    assert len(load(full_db, check_machine=False).records) == 7
    assert read_fitted(full_db).entries
    save_learned(full_db, [learned_row()])        # a write keeps what reads, drops what never could
    with h5py.File(full_db, "r") as f:
        assert int(f.attrs["schema_version"]) == SCHEMA_VERSION and not len(f["comm"])
    assert read_learned(full_db)[0]["npts"] == 3 and read_fitted(full_db).entries


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION + 1])
def test_an_unreadable_version_is_refused_naming_the_rebuild(full_db, version):
    as_written_by(full_db, version)
    with pytest.raises(SchemaMismatch, match=f"re-run `autotune-install --profile quick --db {full_db}`"):
        load(full_db)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_sp(full_db, refresh=True).table is None
        assert not read_fitted(full_db).entries
        assert not load_phase_factors(full_db, "k")
        assert not read_validation(full_db).points
        cp = comm_lookup.load_comm(full_db, nprocs=2, refresh=True)
    assert not cp.available and "autotune-install --mpi --np P" in cp.reason
    assert any("schema version" in str(w.message) for w in caught)
    with pytest.raises(SchemaMismatch):
        read_learned(full_db)
    before = full_db.read_bytes()
    with pytest.raises(SchemaMismatch):             # a writer neither relabels nor loses the records
        save_validation(full_db, [check_point()])
    assert full_db.read_bytes() == before


def test_records_before_the_noise_fields_read_as_not_checked_and_are_rewritten_with_them(full_db, capsys):
    """Schema 3's /k rows (no CPU share, no noise bits) read with those fields 0: not checked, never
    noisy; the verdict says it cannot tell, in show too. The next write stores them in today's layout."""
    from autotune.cli import command as cli

    as_written_by(full_db, 3)
    with h5py.File(full_db, "r") as f:
        assert "noise" not in f["k"].dtype.names
    db = load(full_db, check_machine=False)
    assert db.records.dtype == RECORD_DTYPE and len(db.records) == 7
    assert all(not db.records[n].any() for n in NOISE_FIELDS)
    np.testing.assert_array_equal(db.records["k"], blas_db().records["k"])
    found = verdict(db.records, db.run, full_db)
    assert found.state == "unknown" and "before autotune checked their CPU" in found.lines[0]
    assert cli.main(["show", "--db", str(full_db)]) == 0
    assert "Verdict: unknown" in capsys.readouterr().out
    save_validation(full_db, [check_point()])             # any group's write rewrites /k in today's layout
    with h5py.File(full_db, "r") as f:
        assert int(f.attrs["schema_version"]) == SCHEMA_VERSION and f["k"].dtype == RECORD_DTYPE
    np.testing.assert_array_equal(load(full_db, check_machine=False).records, db.records)


def test_a_refused_database_never_breaks_a_tuned_call(full_db):
    as_written_by(full_db, 1)
    a = np.random.default_rng(0).standard_normal((64, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with autotune.options(db=str(full_db)):
            np.testing.assert_allclose(autotune.tuned_gemm(a, a), a @ a)


def test_rebuilding_over_a_refused_file_drops_its_groups(full_db):
    as_written_by(full_db, 1)
    save(blas_db(), full_db)
    with h5py.File(full_db, "r") as f:
        assert int(f.attrs["schema_version"]) == SCHEMA_VERSION and set(f) == {"k"}


def test_validation_round_trip_and_absence(tmp_path, full_db):
    group = read_validation(full_db)
    assert group.info == {"spec": "tiny"} and group.reason == ""
    assert group.points == [check_point()]
    assert "no database" in read_validation(tmp_path / "none.h5").reason
    path = tmp_path / "bare.h5"
    save(blas_db(), path)
    assert "autotune-install --validate" in read_validation(path).reason
