"""`autotune show`: text summary, GFLOP/s tables, plot, JSON, and its error paths."""
import json

import numpy as np
import pytest

from autotune import cli
from autotune.db import RECORD_DTYPE, Database, save


@pytest.fixture
def db_path(tmp_path):
    rows = []
    for be in ("numpy-openblas", "scipy-openblas"):
        for t in (1, 2):
            for x in (32, 64, 128):
                fl = 2.0 * x**3
                k = 1e-10 / t
                rows.append(("gemm", be, t, "float64", "square", 0.0, x, fl, k * fl, k * fl, k * fl, k * fl, 3,
                             0.0, k, "run", 0.0))
            rows.append(("trsm", be, t, "float64", "panel", 64.0, 256, 256 * 64.0**2, 1e-3, 1e-3, 1e-3, 1e-3,
                         3, 0.0, 1e-10, "run", 0.0))
    path = tmp_path / "sp.h5"
    save(Database(records=np.array(rows, dtype=RECORD_DTYPE), backends={"numpy-openblas": {"version": "x"}},
                  run={"profile": "test", "complete": True}), path)
    return path


def test_show_prints_fingerprint_measured_and_gflops(db_path, capsys):
    assert cli.main(["show", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert "cpu_model" in out and "numpy-openblas" in out
    assert "gemm  /square   numpy-openblas   t=1:   3 points, n 32..128" in out
    assert "trsm  /panel" in out and "params 64" in out
    # k = 1e-10 s/flop at 1 thread is 10 GFLOP/s, 2 threads 20 GFLOP/s.
    assert "10.00" in out and "20.00" in out


def test_show_plot_writes_png(db_path, tmp_path, capsys):
    png = tmp_path / "sp.png"
    assert cli.main(["show", "--db", str(db_path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_json(db_path, capsys):
    assert cli.main(["show", "--db", str(db_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["points"] == 16 and data["run"]["profile"] == "test"


def test_show_missing_database_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["show", "--db", str(tmp_path / "nope.h5")]) == 1
    assert "no database at" in capsys.readouterr().err


def test_show_flags_foreign_database(db_path, tmp_path, capsys):
    from autotune.db import load

    db = load(db_path)
    db.fingerprint["cpu_model"] = "Some Other CPU"
    other = tmp_path / "other.h5"
    save(db, other)
    assert cli.main(["show", "--db", str(other)]) == 0
    assert "another machine" in capsys.readouterr().out
