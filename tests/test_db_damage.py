"""A damaged database never breaks a computation: random bytes anywhere in a real (tiny) database, or
invalid bytes in any text column, leave every tuned call with numpy/scipy's result and at most one
warning, and `autotune show` / `explain` with an answer or a one-line error, never a traceback."""
from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.linalg
from autotune.install_probe.pools import probe_pools
from autotune.install_probe.threads import probe_and_save
from db_helpers import edited

import autotune
from autotune.cli import command as cli
from autotune.db.pools import ROW_DTYPE
from autotune.db.store import RECORD_DTYPE

RNG = np.random.default_rng(46)
A = RNG.standard_normal((48, 48))
S = A @ A.T + 48 * np.eye(48)
B = RNG.standard_normal((48, 3))
COMMANDS = (["show"], ["show", "--verbose"], ["show", "--json"], ["explain", "gemm", "300"],
            ["explain", "lu", "200"], ["explain", "solve", "100", "3"])


@pytest.fixture(scope="module")
def whole_db(tiny_db, tmp_path_factory) -> Path:
    """The tiny probe's database plus what tuned calls also read: thread-pool costs and thread SPs."""
    path = tmp_path_factory.mktemp("damage") / "sp.h5"
    shutil.copy(tiny_db, path)
    probe_pools(path, ["numpy-openblas", "scipy-openblas"], "tiny")
    probe_and_save(path, quick=True)
    return path


def tuned_results_hold(path: Path) -> list[warnings.WarningMessage]:
    """Run every tuned call on the database at ``path``; assert numpy/scipy's results; its warnings."""
    with warnings.catch_warnings(record=True) as seen, autotune.options(db=str(path)):
        warnings.simplefilter("always")
        np.testing.assert_allclose(autotune.tuned_gemm(A, A), A @ A, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(autotune.tuned_cholesky(S), scipy.linalg.cholesky(S), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(autotune.tuned_lu_factor(A)[0], scipy.linalg.lu_factor(A)[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(autotune.tuned_solve(A, B), scipy.linalg.solve(A, B), rtol=1e-10)
    return list(seen)


def commands_answer(path: Path) -> None:
    """Every show/explain command on ``path`` returns 0, or 1 with one line on stderr; never raises."""
    for command in COMMANDS:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = cli.main([*command, "--db", str(path)])
        assert code in (0, 1), (command, code, err.getvalue())
        if code:
            assert len(err.getvalue().strip().splitlines()) == 1, (command, err.getvalue())


def damaged(source: Path, dest: Path, offset: int, data: bytes) -> Path:
    shutil.copy(source, dest)
    with open(dest, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    return dest


def test_one_random_byte_anywhere(whole_db, tmp_path):
    """A byte changed at 150 offsets over the whole file (each damages one object): numpy/scipy's
    results, at most one warning, each a RuntimeWarning."""
    size = whole_db.stat().st_size
    rng = np.random.default_rng(0)
    for i, offset in enumerate(np.linspace(0, size - 1, 150).astype(int) + rng.integers(0, size // 150, 150)):
        path = damaged(whole_db, tmp_path / f"b{i}.h5", int(min(offset, size - 1)), bytes([rng.integers(256)]))
        seen = tuned_results_hold(path)
        assert len(seen) <= 1, (offset, [str(w.message) for w in seen])
        assert all(issubclass(w.category, RuntimeWarning) for w in seen), [str(w.message) for w in seen]
        path.unlink()


def test_random_runs_of_bytes(whole_db, tmp_path):
    """Runs of up to 64 random bytes: numpy/scipy's results; show/explain answer without a traceback."""
    size = whole_db.stat().st_size
    rng = np.random.default_rng(1)
    for i in range(40):
        data = rng.integers(0, 256, int(rng.integers(2, 65)), dtype=np.uint8).tobytes()
        path = damaged(whole_db, tmp_path / f"r{i}.h5", int(rng.integers(0, size - len(data))), data)
        seen = tuned_results_hold(path)
        assert all(issubclass(w.category, RuntimeWarning) for w in seen), [str(w.message) for w in seen]
        if i % 4 == 0:
            commands_answer(path)
        path.unlink()


@pytest.mark.parametrize("table, dtype", [("k", RECORD_DTYPE), ("pools/default/rows", ROW_DTYPE)])
def test_invalid_bytes_in_every_text_column(whole_db, tmp_path, table, dtype):
    """A first row's text field holding bytes that decode as nothing (ff fe): that row is dropped with
    one warning, the calls give numpy/scipy's results, show and explain answer."""
    for name in (n for n in dtype.names if dtype[n].kind == "S"):
        path = tmp_path / f"{name}.h5"
        shutil.copy(whole_db, path)
        with edited(path, "r+") as f:
            row = f[table][0]
            row[name] = b"\xff\xfe"
            f[table][0] = row
        seen = tuned_results_hold(path)
        assert len(seen) == 1 and "ignoring 1 of" in str(seen[0].message), (name, [str(w.message) for w in seen])
        commands_answer(path)


def test_an_edit_that_is_not_sealed_reads_as_damage(whole_db, tmp_path):
    """Bytes changed behind the store's back (no seal) are never parsed: one warning that the file is
    damaged, numpy/scipy's results; show names it in one line."""
    path = tmp_path / "edited.h5"
    shutil.copy(whole_db, path)
    with h5py.File(path, "r+") as f:
        f["k"][0] = f["k"][1]
    seen = tuned_results_hold(path)
    assert len(seen) == 1 and "does not match its checksum" in str(seen[0].message), [str(w.message) for w in seen]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["show", "--db", str(path)]) == 1
    assert "damaged" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
