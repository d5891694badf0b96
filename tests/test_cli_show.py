"""`autotune show`: text summary, GFLOP/s tables, plot, JSON, and its error paths."""
import json
import re

import numpy as np
import pytest

from autotune.cli import command as cli
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
                             0.0, k, "run", 0.0, 3 * k * fl, 3 * k * fl * t, 1.0, 0))
            rows.append(("trsm", be, t, "float64", "panel", 64.0, 256, 256 * 64.0**2, 1e-3, 1e-3, 1e-3, 1e-3,
                         3, 0.0, 1e-10, "run", 0.0, 3e-3, 3e-3 * t, 1.0, 0))
    path = tmp_path / "sp.h5"
    save(Database(records=np.array(rows, dtype=RECORD_DTYPE), backends={"numpy-openblas": {"version": "x"}},
                  run={"profile": "test", "complete": True}), path)
    return path


def test_show_leads_with_fingerprint_and_best_gflops_table(db_path, capsys):
    assert cli.main(["show", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("Machine: ") and lines[2].startswith("Stack: ") and "numpy" in lines[2]
    assert "numpy-openblas" in out and "Last run: profile 'test', complete, 16 points" in out
    # One row per routine x library, one column per thread count: k = 1e-10 s/flop at 1 thread is
    # 10 GFLOP/s, 2 threads 20 GFLOP/s; the size range follows.
    head = next(i for i, line in enumerate(lines) if line.startswith("Best GFLOP/s"))
    assert lines[head + 1].split() == ["routine", "library", "t=1", "t=2", "n", "measured"]
    assert lines[head + 2].split() == ["gemm", "numpy-openblas", "10.00", "20.00", "32..128", "(3", "sizes)"]
    assert lines[head + 3].split()[:4] == ["gemm", "scipy-openblas", "10.00", "20.00"]
    assert "panel: trsm" in out
    # the per-series listing is behind --verbose; the per-size tables stay
    assert "points, n 32..128" not in out and "\ngemm GFLOP/s" in out


def test_show_verbose_lists_every_series(db_path, capsys):
    assert cli.main(["show", "--db", str(db_path), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "gemm  /square   numpy-openblas   t=1:   3 points, n 32..128" in out
    assert "trsm  /panel" in out and "params 64" in out
    assert out.index("Best GFLOP/s") < out.index("Measured series")


def test_show_notes_invalid_records_and_prints_no_nan(db_path, capsys):
    from autotune.db import load

    db = load(db_path)
    db.records["k"][:4] = [np.nan, 0.0, -1.0, np.inf]
    save(db, db_path)
    assert cli.main(["show", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    assert "NOTE: 4 of 16 measurements have an unreadable field, a NaN" in out and "--only gemm" in out
    tables = [line for line in out.splitlines() if not line.startswith("NOTE")]
    assert not any(re.search(r"\b(nan|inf)\b|\s-\d", line.lower()) for line in tables)
    assert cli.main(["show", "--db", str(db_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["invalid_points"] == 4


def test_show_plot_writes_png(db_path, tmp_path, capsys):
    png = tmp_path / "sp.png"
    assert cli.main(["show", "--db", str(db_path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_show_json(db_path, capsys):
    assert cli.main(["show", "--db", str(db_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["points"] == 16 and data["run"]["profile"] == "test" and data["invalid_points"] == 0
    assert len(data["series"]) == 2 * 2 * 2
    gemm = next(x for x in data["series"] if x["routine"] == "gemm" and x["threads"] == 2)
    assert gemm["sizes"] == [32, 64, 128] and gemm["best_gflops"] == pytest.approx(20.0)
    trsm = next(x for x in data["series"] if x["routine"] == "trsm")
    assert trsm["pattern"] == "panel" and trsm["params"] == [64.0]


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


def test_show_plot_into_a_missing_directory_is_a_one_line_error(db_path, tmp_path, capsys):
    assert cli.main(["show", "--db", str(db_path), "--plot", str(tmp_path / "missing" / "x.png")]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("autotune show: error: --plot")
    assert "does not exist" in captured.err and captured.out == ""
    assert not (tmp_path / "missing").exists()
    assert cli.main(["show", "--db", str(db_path), "--plot", str(tmp_path / "x.nosuchformat")]) == 2
    assert "unknown image format" in capsys.readouterr().err


def test_show_comm_section_is_one_line_per_curve_and_verbose_adds_regimes(db_path, capsys):
    from test_comm import write_synthetic

    write_synthetic(db_path, 4)
    assert cli.main(["show", "--db", str(db_path)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("MPI communication parameters (1 platform)"):].splitlines()
    pingpong = [line for line in section if "pingpong p=2" in line]
    assert len(pingpong) == 1 and "2 regimes" in pingpong[0] and "12.00 GB/s" in pingpong[0]
    assert "breakpoints 4 KiB" in pingpong[0] and "held-out err med" in pingpong[0]
    assert any("bcast_row p=4 grid 1x4" in line for line in section)
    assert not any(line.lstrip().startswith("[") for line in section)
    assert cli.main(["show", "--db", str(db_path), "--verbose"]) == 0
    verbose = capsys.readouterr().out.splitlines()
    assert len(verbose) > len(out.splitlines()) and any(line.lstrip().startswith("[    4 KiB") for line in verbose)


def test_show_states_the_bandwidth_and_each_stencil_kernels_fraction_of_it(tmp_path, capsys):
    """Triad 20 GB/s at 1 thread; a 1 Gcells/s sweep streams 16 GB/s (0.80x), a fused one at
    2.5 Gcells/s 40 GB/s (2.00x: what its cache reuse buys)."""
    def row(routine, be, pattern, param, x, k):
        return (routine, be, 1, "float64", pattern, param, x, 1.0, k, k, k, k, 3, 0.0, k, "run", 0.0, k, k, 1.0, 0)

    rows = [row("stream", "numba-stencil", "triad", 0.0, 1 << 23, 1 / 20e9),
            row("stream", "numba-stencil", "triad", 0.0, 1 << 10, 1 / 90e9),
            row("stencil", "numba-stencil", "interior", 0.0, 2048, 1 / 9e9),
            row("stencil", "numba-wavefront", "levels", 8.0, 2048, 1 / 22.5e9)]
    path = tmp_path / "sp.h5"
    save(Database(records=np.array(rows, dtype=RECORD_DTYPE), backends={}, run={"profile": "t", "complete": True}),
         path)
    assert cli.main(["show", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "triad  numba-stencil t=1:   20.0 GB/s (8388608 elements, 64 MiB an array)" in out
    assert "numba-stencil t=1 (a step a call, 2048x2048): 1.00 Gcells/s = 16.0 GB/s at 16 B a cell, 0.80x" in out
    assert "numba-wavefront t=1 (8 steps a call, 2048x2048): 2.50 Gcells/s = 40.0 GB/s at 16 B a cell, 2.00x" in out
