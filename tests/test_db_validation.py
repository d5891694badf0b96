"""Records with a NaN, infinite, zero or negative k or time: dropped on load with one warning; a
database left with none is unusable (tuned calls warn once and run numpy/scipy)."""
from __future__ import annotations

import shutil
import warnings

import h5py
import numpy as np
import pytest
import scipy.linalg
from db_helpers import edited

import autotune
from autotune.cli import command as cli
from autotune.db import RECORD_DTYPE, Database, DatabaseMissing, load, load_sp, save
from autotune.db.lookup import remeasure_command
from autotune.db.store import valid_mask

BAD_K = [np.nan, 0.0, -1.0, np.inf]


def _spoil(path, k_values, routine=b"gemm", field="k") -> int:
    """Overwrite ``field`` of the first square records of ``routine`` with ``k_values``; returns how many."""
    with edited(path, "r+") as f:
        rows = f["k"][...]
        idx = np.flatnonzero((rows["routine"] == routine) & (rows["pattern"] == b"square"))[:len(k_values)]
        rows[field][idx] = k_values[:len(idx)]
        f["k"][...] = rows
    return len(idx)


def _copy(tiny_db, tmp_path, name="sp.h5"):
    path = tmp_path / name
    shutil.copy(tiny_db, path)
    return path


def _runtime_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.fixture
def spoiled(tiny_db, tmp_path):
    """The tiny database with NaN, 0, -1 and inf k on gemm and a NaN median on potrf."""
    path = _copy(tiny_db, tmp_path)
    assert _spoil(path, BAD_K) == 4
    assert _spoil(path, [np.nan], routine=b"potrf", field="t_median") == 1
    return path


def test_valid_mask_checks_k_median_and_minimum():
    rec = np.zeros(8, RECORD_DTYPE)
    rec["x"] = rec["threads"] = 1
    rec["k"] = rec["t_median"] = rec["t_min"] = 1.0
    rec["k"][:4] = BAD_K
    rec["t_min"][4], rec["t_median"][5] = -1.0, np.inf
    rec["t_min"][6] = 0.0                     # a time left unset beside a good k
    assert valid_mask(rec).tolist() == [False] * 6 + [True, True]


def test_valid_mask_drops_unreadable_text_and_out_of_range_keys():
    """A record whose text does not decode, or whose size, threads or parameter cannot be, is unusable."""
    rec = np.zeros(6, RECORD_DTYPE)
    rec["x"] = rec["threads"] = 1
    rec["k"] = rec["t_median"] = rec["t_min"] = 1.0
    rec["routine"] = b"gemm"
    rec["backend"][0] = b"\xff\xfe"
    rec["x"][1], rec["threads"][2], rec["param"][3], rec["param"][4] = 0, 0, -1.0, np.nan
    assert valid_mask(rec).tolist() == [False] * 5 + [True]


def test_bad_records_are_dropped_with_one_warning_naming_count_and_command(spoiled):
    sp, warned = _runtime_warnings(lambda: load_sp(spoiled, refresh=True))
    total = len(load(spoiled).records)
    assert len(warned) == 1, warned
    assert f"ignoring 5 of {total} measurements" in warned[0]
    assert f"autotune-install --profile PROFILE.yaml --db {spoiled} --only gemm potrf" in warned[0]
    assert sp.source == "database"
    for key in sp.table.keys():
        ks = sp.k(key[0], key[1], key[2], np.array([16.0, 100.0, 256.0]), key[3],
                  sp.table.params(*key[:4])[0] if key[3] != "square" else 0.0)
        assert np.all(np.isfinite(ks)) and np.all(ks > 0), key
    _, again = _runtime_warnings(lambda: [sp.k("gemm", "numpy-openblas", 1, 64) for _ in range(3)])
    assert again == []


def test_explain_on_bad_records_prints_no_nan(spoiled, capsys):
    with pytest.warns(RuntimeWarning, match="ignoring 5 of"):
        assert cli.main(["explain", "gemm", "200", "--db", str(spoiled), "--top", "40"]) == 0
        assert cli.main(["explain", "cholesky", "200", "--db", str(spoiled), "--top", "40"]) == 0
    out = capsys.readouterr().out
    assert "chose" in out and "nan" not in out.lower() and " inf" not in out.lower()


def test_tuned_calls_on_bad_records_give_numpys_result(spoiled):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((200, 150)), rng.standard_normal((150, 120))
    s = rng.standard_normal((160, 160))
    s = s @ s.T + 160 * np.eye(160)
    with autotune.options(db=str(spoiled)), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(autotune.tuned_gemm(a, b), a @ b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(autotune.tuned_cholesky(s), scipy.linalg.cholesky(s), rtol=1e-12, atol=1e-12)


def test_nothing_valid_means_no_usable_database(tiny_db, tmp_path, capsys):
    path = _copy(tiny_db, tmp_path)
    total = len(load(path).records)
    with edited(path, "r+") as f:
        rows = f["k"][...]
        rows["k"] = np.tile(BAD_K, total // 4 + 1)[:total]
        f["k"][...] = rows
    sp = load_sp(path, refresh=True)
    assert sp.table is None and sp.source == "defaults"
    assert f"all {total} measurements" in sp.reason and f"--db {path}" in sp.reason and "--only" not in sp.reason
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((100, 100)), rng.standard_normal((100, 100))
    with autotune.options(db=str(path)):
        results, warned = _runtime_warnings(lambda: [autotune.tuned_gemm(a, b) for _ in range(3)])
    assert len(warned) == 1 and "system parameters unavailable" in warned[0] and "all" in warned[0]
    for c in results:
        np.testing.assert_array_equal(c, np.matmul(a, b))
    assert cli.main(["explain", "gemm", "100", "--db", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autotune explain: error: no usable database") and err.count("\n") == 1


def test_database_with_no_records_is_unusable(tmp_path):
    path = tmp_path / "empty.h5"
    save(Database(), path)
    sp = load_sp(path, refresh=True)
    assert sp.table is None and "no measurements in" in sp.reason


def test_empty_hdf5_file_is_a_missing_database(tmp_path):
    path = tmp_path / "new.h5"
    h5py.File(path, "w").close()
    with pytest.raises(DatabaseMissing, match="an empty HDF5 file"):
        load(path)
    assert load_sp(path, refresh=True).table is None


def test_remeasure_command_reuses_a_builtin_profile():
    rec = np.zeros(2, RECORD_DTYPE)
    rec["routine"] = [b"potrf", b"gemm"]
    assert (remeasure_command({"profile": "quick"}, "/x/sp.h5", rec)
            == "autotune-install --profile quick --db /x/sp.h5 --only gemm potrf")
    assert remeasure_command({"profile": "mine"}, None, rec[:0]) == "autotune-install --profile PROFILE.yaml"
