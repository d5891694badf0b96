"""The ``autotune`` commands fail with one line, ``autotune CMD: error: ...``, and exit status 2
(bad arguments) or 1 (the run failed): never a traceback."""
from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
from db_helpers import damaged_copy

import autotune
from autotune.cli import command as cli
from autotune.cli import explain as cli_explain
from autotune.db import RECORD_DTYPE, Database, save


def _fails(argv: list[str], status: int, capsys, *fragments: str) -> str:
    """Run the CLI, expect ``status`` and one error line holding every fragment; returns it."""
    assert cli.main(argv) == status
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith(f"autotune {argv[0]}: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.mark.parametrize(("option", "value"), [("--threads", "0"), ("--top", "0"), ("--np", "0"),
                                               ("--threads", "-2")])
def test_explain_rejects_non_positive_options(tiny_db, capsys, option, value):
    _fails(["explain", "gemm", "100", option, value, "--db", str(tiny_db)], 2, capsys,
           f"{option} must be positive, got {value}")


def test_explain_rejects_bad_sizes_and_run_with_np(capsys):
    _fails(["explain", "gemm", "100", "0", "5"], 2, capsys, "sizes must be positive")
    _fails(["explain", "cholesky", "10", "20"], 2, capsys, "cholesky takes 1 size(s), got 2")
    _fails(["explain", "gemm", "100", "--np", "2", "--run"], 2, capsys, "does not combine with --np")
    _fails(["explain", "stencil", "100"], 2, capsys, "stencil takes 2 size(s), got 1")
    _fails(["explain", "gemm", "100", "--steps", "3"], 2, capsys, "--steps goes with stencil")


@pytest.mark.parametrize("kind", ["new-hdf5-file", "probe-measured-nothing"])
def test_explain_on_a_database_without_measurements(tmp_path, capsys, kind):
    path = tmp_path / "sp.h5"
    if kind == "new-hdf5-file":
        h5py.File(path, "w").close()
    else:
        save(Database(run={"profile": "quick", "complete": True}), path)
    _fails(["explain", "gemm", "100", "--db", str(path)], 1, capsys, "no usable database", "no measurements in")


def test_explain_run_checks_memory_from_the_size_up_front(capsys):
    # no database needed: the operands' size is checked before anything is loaded or allocated
    err = _fails(["explain", "gemm", "10000000", "--run"], 1, capsys, "--run: the operands of gemm")
    assert "2,235,174.2 GiB" in err and "GiB of memory available" in err


def test_explain_run_memory_check_uses_the_available_memory(monkeypatch, capsys):
    monkeypatch.setattr(cli_explain, "available_memory", lambda: 1 << 30)
    _fails(["explain", "cholesky", "20000", "--run"], 1, capsys, "need 8.9 GiB, more than the 1.0 GiB")
    monkeypatch.setattr(cli_explain, "available_memory", lambda: 1 << 40)
    assert cli_explain._memory_problem("cholesky", (20000,)) == ""


def test_explain_run_out_of_memory_anyway_is_one_line(tiny_db, monkeypatch, capsys):
    def no_memory(*args):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(cli_explain, "_run_once", no_memory)
    _fails(["explain", "gemm", "300", "--run", "--db", str(tiny_db)], 1, capsys, "out of memory")


def test_explain_without_a_measured_candidate(tmp_path, capsys):
    rec = np.zeros(3, dtype=RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"], rec["dtype"] = b"axpy", b"scipy-openblas", 1, b"float64"
    rec["pattern"], rec["x"], rec["flops"] = b"square", [32, 64, 128], 1.0
    rec["k"] = rec["t_median"] = rec["t_min"] = 1e-9
    path = tmp_path / "axpy-only.h5"
    save(Database(records=rec, run={"profile": "quick", "complete": True}), path)
    _fails(["explain", "gemm", "100", "--db", str(path)], 1, capsys, "no measured candidate for gemm")


def test_show_plot_into_a_missing_directory(tiny_db, tmp_path, capsys):
    target = tmp_path / "missing" / "x.png"
    _fails(["show", "--db", str(tiny_db), "--plot", str(target)], 2, capsys, "does not exist")
    assert not target.parent.exists()


def test_report_out_creates_missing_directories(tiny_db, tmp_path, capsys):
    out = tmp_path / "missing" / "dir"
    assert cli.main(["report", "--out", str(out), "--db", str(tiny_db)]) == 0
    assert (out / "index.html").is_file() and "report written" in capsys.readouterr().out


def test_report_without_a_database_fails_as_show_does(tmp_path, capsys):
    """No database: one line and exit 1, as `autotune show` and `refit` (not "report written")."""
    missing = str(tmp_path / "none.h5")
    _fails(["show", "--db", missing], 1, capsys, "no database at")
    _fails(["report", "--out", str(tmp_path / "r"), "--db", missing], 1, capsys, f"no database at {missing}")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("dims", [["99999999999999999999"], ["27397080"], ["10", "10", "99999999999999999999"],
                                  ["99999999999999999999", "3"]])
def test_explain_rejects_sizes_no_machine_holds(capsys, dims):
    """Sizes whose float64 operands need more than 16 PiB are a bad argument, before any database is
    read: no ranking of absurd times (1e53 ms), no model looping over a billion blocks."""
    routine = "stencil" if len(dims) == 2 else "gemm"
    _fails(["explain", routine, *dims], 2, capsys, "too large", "more than any machine holds (16 PiB)")
    with pytest.raises(ValueError, match="too large"):
        autotune.explain(routine, *map(int, dims))


def test_explain_takes_the_largest_problem_that_fits(tiny_db, capsys):
    """gemm of order 27397079: three operands of 8 n^2 bytes, just within 2**54."""
    assert cli.main(["explain", "gemm", "27397079", "--db", str(tiny_db), "--top", "1"]) == 0
    assert "gemm 27397079x27397079x27397079, thread budget" in capsys.readouterr().out


def test_report_bad_out_and_validation_paths(tmp_path, capsys):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    _fails(["report", "--out", str(afile)], 2, capsys, "exists and is not a directory")
    _fails(["report", "--out", str(tmp_path / "r"), "--validation", str(tmp_path / "none.json")], 2, capsys,
           "No such file")
    _fails(["report", "--out", str(tmp_path / "r"), "--validation", str(afile)], 2, capsys,
           "not an `autotune bench validate` output")


def test_refit_without_database(tmp_path, capsys):
    _fails(["refit", "--db", str(tmp_path / "none.h5")], 1, capsys, "no database")


def test_command_line_prints_one_line_errors_and_warnings(tiny_db, tmp_path):
    """Through the real entry point: no traceback, warnings on one line each."""
    bad = damaged_copy(tiny_db, tmp_path / "sp.h5")
    run = lambda *argv: subprocess.run([sys.executable, "-m", "autotune.cli", *argv],  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    usage = run("explain", "gemm", "100", "--threads", "0")
    assert usage.returncode == 2 and usage.stderr == "autotune explain: error: --threads must be positive, got 0\n"
    warned = run("explain", "gemm", "100", "--db", str(bad), "--top", "1")
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr.startswith("autotune: warning: ignoring 2 of") and warned.stderr.count("\n") == 1
    assert "Traceback" not in usage.stderr + warned.stderr


def test_refit_on_a_damaged_database_is_an_error(tmp_path, capsys):
    """`autotune refit` on a file that is not a usable database: one line, exit 1 (not '0 observations')."""
    from autotune.cli.command import main

    bad = tmp_path / "junk.h5"
    bad.write_bytes(b"\x00not a database" * 10)
    assert main(["refit", "--db", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("autotune refit: error: unusable database") and err.count("\n") == 1
