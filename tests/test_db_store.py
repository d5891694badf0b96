"""The HDF5 store: round trip, every fallback of load_sp, atomic and locked writes, concurrency."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import h5py
import numpy as np
import pytest
from db_helpers import edited

import autotune
from autotune.db import (
    RECORD_DTYPE,
    SCHEMA_VERSION,
    Database,
    DatabaseCorrupt,
    DatabaseError,
    DatabaseMissing,
    ForeignMachine,
    SchemaMismatch,
    default_k,
    load,
    load_sp,
    save,
)
from autotune.db import store as store_mod
from autotune.db.fingerprint import machine_fingerprint

BE = "scipy-openblas"


def make_records(k: float = 1.0, n: int = 500) -> np.ndarray:
    rec = np.zeros(n, RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"], rec["dtype"] = b"gemm", BE.encode(), 1, b"float64"
    rec["pattern"], rec["param"], rec["x"] = b"square", 0.0, np.arange(1, n + 1)
    rec["flops"] = 2.0 * rec["x"].astype(float) ** 3
    rec["t_median"] = rec["t_min"] = rec["t_q1"] = rec["t_q3"] = k * rec["flops"]
    rec["reps"], rec["t_call"], rec["k"], rec["run_id"] = 3, 0.0, k, b"abcdef0123456789"
    return rec


def make_db(k: float = 1.0, n: int = 500, **kw) -> Database:
    return Database(records=make_records(k, n), run={"profile": "tiny", "run_id": "abcdef0123456789",
                                                      "complete": True}, **kw)


def tmp_leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def assert_defaults(path, exc_type, fragment: str = ""):
    """load raises ``exc_type``; load_sp falls back to defaults and warns exactly once."""
    with pytest.raises(exc_type) as info:
        load(path)
    assert isinstance(info.value, DatabaseError)
    if fragment:
        assert fragment in str(info.value)
    sp = load_sp(path)
    assert sp.source == "defaults"
    assert sp.table is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = sp.k("gemm", BE, 1, [16, 32])
        second = sp.k("gemm", BE, 1, 64)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    assert "autotune-install" in msgs[0]
    np.testing.assert_array_equal(first, [default_k("gemm", 1)] * 2)
    assert float(second) == default_k("gemm", 1)
    return info.value


# -- round trip ---------------------------------------------------------------------------------

def test_round_trip(tmp_path):
    db = make_db(k=2.5e-10, n=37)
    db.backends = {BE: {"name": BE, "library": "/x/libopenblas.so", "version": "0.3"}}
    db.run = {"profile": "tiny", "run_id": "0123456789abcdef", "complete": False, "started": 12.5}
    path = tmp_path / "sub" / "dir" / "db.h5"  # parent directories are created
    save(db, path)
    back = load(path)
    assert back.records.dtype == RECORD_DTYPE
    assert np.array_equal(back.records, db.records)
    assert back.backends == db.backends
    assert back.run == db.run
    assert back.fingerprint == db.fingerprint == machine_fingerprint()
    with h5py.File(path, "r") as f:
        assert int(f.attrs["schema_version"]) == SCHEMA_VERSION
        assert json.loads(f.attrs["fingerprint"]) == db.fingerprint
    assert tmp_leftovers(path.parent) == []
    sp = load_sp(path)
    assert sp.source == "database"
    assert sp.k("gemm", BE, 1, 10) == pytest.approx(2.5e-10)


def test_round_trip_empty_database(tmp_path):
    save(Database(), tmp_path / "empty.h5")
    back = load(tmp_path / "empty.h5")
    assert len(back.records) == 0 and back.backends == {} and back.run == {}


def test_save_replaces_previous_content(tmp_path):
    path = tmp_path / "db.h5"
    save(make_db(k=1.0, n=10), path)
    save(make_db(k=2.0, n=20), path)
    back = load(path)
    assert len(back.records) == 20 and set(back.records["k"]) == {2.0}


def test_default_path_comes_from_env(tmp_path, _private_default_db):
    assert autotune.db.default_path() == _private_default_db
    save(make_db(k=3e-10, n=5), _private_default_db)
    sp = autotune.load_sp()
    assert sp.source == "database"
    assert sp.k("gemm", BE, 1, 3) == pytest.approx(3e-10)


def test_load_sp_picks_up_rewritten_database(tmp_path, monkeypatch):
    from autotune.db import lookup

    monkeypatch.setattr(lookup, "RECHECK_SECONDS", 0.0)
    path = tmp_path / "db.h5"
    save(make_db(k=1e-10, n=5), path)
    assert load_sp(path).k("gemm", BE, 1, 3) == pytest.approx(1e-10)
    before = path.stat().st_mtime_ns
    time.sleep(0.05)
    save(make_db(k=2e-10, n=5), path)
    assert path.stat().st_mtime_ns != before
    assert load_sp(path).k("gemm", BE, 1, 3) == pytest.approx(2e-10)


# -- fallbacks ----------------------------------------------------------------------------------

def test_fallback_missing_file(tmp_path):
    assert_defaults(tmp_path / "nothing-here.h5", DatabaseMissing, "nothing-here.h5")


def test_fallback_missing_default_file():
    # $AUTOTUNE_DB points to a file that does not exist (conftest)
    sp = autotune.load_sp()
    assert sp.source == "defaults"
    with pytest.warns(RuntimeWarning, match="system parameters unavailable"):
        assert float(sp.k("syrk", BE, 2, 100)) == default_k("syrk", 2)


def test_fallback_truncated_file(tmp_path):
    path = tmp_path / "db.h5"
    save(make_db(), path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    assert path.stat().st_size == size // 2
    assert_defaults(path, DatabaseCorrupt, "unreadable")


def test_fallback_random_bytes(tmp_path):
    path = tmp_path / "db.h5"
    path.write_bytes(np.random.default_rng(1).bytes(4096))
    assert_defaults(path, DatabaseCorrupt, str(path))


def test_fallback_empty_file(tmp_path):
    path = tmp_path / "db.h5"
    path.write_bytes(b"")
    assert_defaults(path, DatabaseCorrupt)


def test_fallback_hdf5_without_dataset(tmp_path):
    path = tmp_path / "db.h5"
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["fingerprint"] = json.dumps(machine_fingerprint())
    assert_defaults(path, DatabaseCorrupt)


def test_fallback_hdf5_without_any_attribute(tmp_path):
    path = tmp_path / "db.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("k", data=make_records(n=3))
    assert_defaults(path, SchemaMismatch, "schema version -1")


def test_fallback_wrong_schema_version(tmp_path):
    path = tmp_path / "db.h5"
    save(make_db(), path)
    with edited(path, "r+") as f:
        f.attrs["schema_version"] = 0
    assert_defaults(path, SchemaMismatch, "schema version 0")


def test_fallback_wrong_schema_written_by_hand(tmp_path):
    path = tmp_path / "db.h5"
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION + 1
        f.attrs["fingerprint"] = json.dumps(machine_fingerprint())
        f.create_dataset("k", data=make_records(n=3))
    assert_defaults(path, SchemaMismatch, f"schema version {SCHEMA_VERSION + 1}")


def test_fallback_foreign_machine(tmp_path):
    path = tmp_path / "db.h5"
    save(make_db(fingerprint={**machine_fingerprint(), "cpu_model": "Imaginary CPU 9000"}), path)
    exc = assert_defaults(path, ForeignMachine, "Imaginary CPU 9000")
    assert "cpu_model" in str(exc)
    # without the machine check it is a perfectly good file
    assert load(path, check_machine=False).fingerprint["cpu_model"] == "Imaginary CPU 9000"


def test_fallback_other_numpy_version(tmp_path):
    path = tmp_path / "db.h5"
    save(make_db(fingerprint={**machine_fingerprint(), "numpy": "0.0.1"}), path)
    assert_defaults(path, ForeignMachine, "numpy")


def test_stale_backend_records_ignored_with_warning(tmp_path):
    path = tmp_path / "db.h5"
    db = make_db(k=1e-10, n=5)
    db.backends = {BE: {"package": "scipy", "package_version": "0.0.0-not-this-one"}}
    save(db, path)
    with pytest.warns(RuntimeWarning, match="changed backends"):
        sp = load_sp(path)
    assert sp.source == "database"
    with pytest.warns(RuntimeWarning, match="no measurement"):
        assert float(sp.k("gemm", BE, 1, 3)) == default_k("gemm", 1)


# -- permissions and failures during save -----------------------------------------------------

def _dir_really_writable(directory) -> bool:
    probe = directory / ".write-probe"
    try:
        probe.write_bytes(b"")
    except OSError:
        return False
    probe.unlink()
    return True


def test_read_only_directory(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    path = ro / "db.h5"
    save(make_db(k=1.0, n=8), path)
    os.chmod(ro, 0o555)
    try:
        sp = load_sp(path)
        assert sp.source == "database"
        assert sp.k("gemm", BE, 1, 4) == pytest.approx(1.0)
        if not os.access(ro, os.W_OK) and not _dir_really_writable(ro):
            # ordinary user: a clear PermissionError naming the directory, nothing left behind
            with pytest.raises(PermissionError) as info:
                save(make_db(k=2.0, n=8), path)
            assert str(ro) in str(info.value)
            assert tmp_leftovers(ro) == []
            assert set(load(path).records["k"]) == {1.0}
        else:
            # root ignores the mode bits: the write really is possible, and it is atomic and clean
            save(make_db(k=2.0, n=8), path)
            assert set(load(path).records["k"]) == {2.0}
            assert tmp_leftovers(ro) == []
            # a parent that is a regular file cannot hold a database: fails cleanly
            plain = tmp_path / "plain-file"
            plain.write_text("not a directory")
            with pytest.raises(OSError):
                save(make_db(k=3.0, n=8), plain / "db.h5")
            assert plain.read_text() == "not a directory"
            assert set(load(path).records["k"]) == {2.0}
            assert tmp_leftovers(tmp_path) == [] and tmp_leftovers(ro) == []
            # and the non-root message, with write permission denied as the OS would deny it
            real_access = os.access
            with monkeypatch.context() as m:
                m.setattr(store_mod.os, "access",
                          lambda p, mode, **kw: False if os.fspath(p) == str(ro) and mode & os.W_OK
                          else real_access(p, mode, **kw))
                with pytest.raises(PermissionError) as info:
                    save(make_db(k=4.0, n=8), path)
            assert str(ro) in str(info.value)
            assert set(load(path).records["k"]) == {2.0}
            assert tmp_leftovers(ro) == []
    finally:
        os.chmod(ro, 0o755)


@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_exception_inside_save_keeps_old_file(tmp_path, monkeypatch, error):
    path = tmp_path / "db.h5"
    save(make_db(k=1.0), path)
    before = path.read_bytes()
    real_write = store_mod._write

    def half_write(db, tmp):
        real_write(db, tmp)  # a complete new file ...
        with open(tmp, "r+b") as fh:  # ... then damaged midway and abandoned
            fh.truncate(os.path.getsize(tmp) // 2)
        raise error

    with monkeypatch.context() as m, pytest.raises(type(error)):
        m.setattr(store_mod, "_write", half_write)
        save(make_db(k=2.0), path)
    assert path.read_bytes() == before
    assert set(load(path).records["k"]) == {1.0}
    assert tmp_leftovers(tmp_path) == []
    assert store_mod._write is real_write
    # the lock was released: another process takes it without waiting, and a later save goes through
    take = subprocess.run([sys.executable, "-c", "import sys; from filelock import FileLock; "
                           "FileLock(sys.argv[1], timeout=0).acquire(); print('TAKEN')", str(path) + ".lock"],
                          capture_output=True, text=True, timeout=120)
    assert take.returncode == 0 and "TAKEN" in take.stdout, take.stderr
    save(make_db(k=2.0), path)
    assert set(load(path).records["k"]) == {2.0}
    assert tmp_leftovers(tmp_path) == []


# -- concurrency ----------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from autotune.db import RECORD_DTYPE, Database, save
    path, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        rec = np.zeros(500, RECORD_DTYPE)
        rec["routine"], rec["backend"], rec["pattern"], rec["dtype"] = b"gemm", b"be", b"square", b"float64"
        rec["threads"], rec["x"] = 1, np.arange(1, 501)
        rec["k"] = 1.0 if i % 2 == 0 else 2.0
        save(Database(records=rec, run={"i": i}), path)
    print("writer done", n, flush=True)
""")

READER = textwrap.dedent("""
    import sys, time
    from autotune.db import load
    path, n = sys.argv[1], int(sys.argv[2])
    ok = errors = loads = 0
    seen = set()
    deadline = time.monotonic() + 40
    while loads < n or (seen <= {0.5} and time.monotonic() < deadline):
        loads += 1
        try:
            db = load(path)
            k = db.records["k"]
            first = float(k[0])
            good = len(k) == 500 and bool((k == first).all()) and first in (0.5, 1.0, 2.0)
            if first != 0.5:  # a writer version: run attribute from the same file as the rows
                good = good and first == (1.0 if db.run["i"] % 2 == 0 else 2.0)
            if good:
                ok += 1
                seen.add(first)
            else:
                errors += 1
                print("inconsistent", len(k), sorted(set(k.tolist()))[:5], db.run, file=sys.stderr)
        except Exception as exc:
            errors += 1
            print("error", type(exc).__name__, exc, file=sys.stderr)
    print(ok, errors, ",".join(str(s) for s in sorted(seen)), flush=True)
""")


def test_concurrent_writer_and_readers(tmp_path):
    path = tmp_path / "shared.h5"
    rec = make_records(k=0.5, n=500)
    save(Database(records=rec, run={"i": -1}), path)
    procs = [subprocess.Popen([sys.executable, "-c", READER, str(path), "200"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "100"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        w_out, w_err = writer.communicate(timeout=60)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in [*procs, writer]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert writer.returncode == 0, w_err
    assert "writer done 100" in w_out
    for (out, err), p in zip(outs, procs, strict=True):
        assert p.returncode == 0, err
        ok, errors, seen = out.split()
        assert int(errors) == 0, err
        assert int(ok) >= 50, (out, err)
        assert {"1.0", "2.0"} & set(seen.split(",")), out  # the reader overlapped the writer
    final = load(path)
    assert final.run == {"i": 99} and set(final.records["k"]) == {2.0}
    assert tmp_leftovers(tmp_path) == []


def test_a_read_only_database_is_refused_and_a_rewrite_keeps_the_mode(tmp_path):
    """A file without write bits is never replaced (root's access checks ignore them); a writable one
    keeps its own mode when rewritten, not the default."""
    from autotune.db.store import replace_group

    path = tmp_path / "db.h5"
    save(make_db(), path)
    path.chmod(0o640)
    replace_group(path, "pools", "default", lambda g: g.create_dataset("rows", data=np.zeros(1)))
    assert path.stat().st_mode & 0o777 == 0o640
    path.chmod(0o444)
    with pytest.raises(PermissionError, match="read-only"):
        save(make_db(), path)
    with pytest.raises(PermissionError, match="read-only"):
        replace_group(path, "pools", "default", lambda g: None)
    assert path.stat().st_mode & 0o777 == 0o444 and len(load(path).records) == len(make_db().records)
