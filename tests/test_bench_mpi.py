"""`autotune bench mpi-speed / mpi-validate / mpi-rescore`: the MPI benchmarks run under mpiexec on
tiny sizes and write only where --out/--markdown say; without mpi4py, one line naming the extra."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import mpi_command, run_checked

from autotune.cli import command as cli


def _bench_mpi(np_: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``mpiexec -n np_ autotune bench ARGV`` (the console script next to this Python), with a timeout."""
    exe = Path(sys.executable).with_name("autotune")
    launcher = [str(exe)] if exe.exists() else [sys.executable, "-m", "autotune.cli"]
    return run_checked(mpi_command(np_, [*launcher, "bench", *argv]), cwd)


@pytest.fixture
def no_mpi4py(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mpi4py" else real(name, *a))


@pytest.mark.parametrize("command", [["mpi-speed", "--n", "64"], ["mpi-validate", "--smoke"]])
def test_mpi_bench_without_mpi4py_is_one_line(no_mpi4py, command, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main(["bench", *command, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'pip install "autotune[mpi]"' in err[0] and err[0].startswith(
        f"autotune bench {command[0]}: error:"), err
    assert not out.exists()


@pytest.mark.filterwarnings("ignore:communication parameters unavailable")
def test_mpi_validate_smoke_then_rescore_and_fit_from(tiny_db, tmp_path, capsys):
    """mpi-validate times the plans of one tiny problem on 2 ranks and writes JSON and Markdown;
    mpi-rescore re-predicts them without re-timing; --fit-from stores factors without mpiexec."""
    db, run_dir = tmp_path / "sp.h5", tmp_path / "run"
    shutil.copy(tiny_db, db)
    run_dir.mkdir()
    out, md = tmp_path / "v.json", tmp_path / "v.md"
    proc = _bench_mpi(2, ["mpi-validate", "--smoke", "--db", str(db), "--out", str(out), "--markdown", str(md)],
                      run_dir)
    assert "ape_median" in proc.stdout
    assert not list(run_dir.iterdir())                      # results only where --out/--markdown say
    doc = json.loads(out.read_text())
    assert doc["results"][0]["nprocs"] == 2 and doc["results"][0]["rows"]
    assert "Distributed validation, P = 2" in md.read_text()
    again = tmp_path / "s.json"
    assert cli.main(["bench", "mpi-rescore", str(out), "--db", str(db), "--np", "2", "--family", "gemm",
                     "--out", str(again)]) == 0
    said = capsys.readouterr().out
    assert "total" in said and "with the phase factors alone" in said
    rescored = json.loads(again.read_text())
    assert rescored["summary"]["selection"] and rescored["summary"]["mean_regret"] >= 1.0
    rows = rescored["results"][0]["rows"]
    assert rescored["results"][0]["choice"] == min(rows, key=lambda r: r["predicted"]["total"])["plan"]
    assert all("factored" in r for r in rows if not r["plan"].startswith("local"))
    assert cli.main(["bench", "mpi-validate", "--fit-from", str(out), "--db", str(db)]) == 0
    assert "phase factors of platform" in capsys.readouterr().out
    assert cli.main(["bench", "mpi-rescore", str(tmp_path / "none.json"), "--db", str(db), "--np", "2",
                     "--family", "gemm"]) == 2
    assert "not an `autotune bench mpi-validate --out` file" in capsys.readouterr().err


def test_mpi_speed_tiny(tiny_db, tmp_path):
    """mpi-speed on 2 ranks, one block of one round, without dask: the root reports and writes --out."""
    run_dir, out = tmp_path / "run", tmp_path / "speed.json"
    run_dir.mkdir()
    proc = _bench_mpi(2, ["mpi-speed", "--family", "cholesky", "--n", "64", "--rounds", "1", "--blocks", "1",
                          "--chunks", "--db", str(tiny_db), "--out", str(out)], run_dir)
    report = json.loads(out.read_text())
    assert report["P"] == 2 and report["n"] == 64 and set(report["median_s"]) == {"autotune", "scipy"}
    assert report["speedup_vs_scipy"] > 0 and "speedup_vs_scipy" in proc.stdout
    assert not list(run_dir.iterdir())


def test_stencil_bench_tiny(tiny_db, tmp_path):
    """bench stencil on 2 ranks: the schedule sweep and the plan comparison report predicted and
    measured figures, every run checked against numpy, and write only --out."""
    run_dir, out = tmp_path / "run", tmp_path / "stencil.json"
    run_dir.mkdir()
    _bench_mpi(2, ["stencil", "--sides", "16", "32", "--rounds", "1", "--field", "64", "--steps", "3", "--top", "2",
                   "--sweep-seconds", "0.01", "--peer-fields", "24", "--peer-steps", "3",
                   "--db", str(tiny_db), "--out", str(out)], run_dir)
    report = json.loads(out.read_text())
    sweep, plans, peer = report["sweep"], report["plans"], report["peer"]
    if peer["devito"] is None:                  # the devito extra is not installed: said, not timed
        assert "not installed" in peer["note"]
    else:                                       # one rank and two, both sides agreeing
        assert [(r["field"], r["P"]) for r in peer["rows"]] == [(24, 1), (24, 2)]
        assert all(r["agrees"] and r["ours_over_best"] > 0 for r in peer["rows"])
    assert [row["side"] for row in sweep["rows"]] == [16, 32]
    for row in sweep["rows"]:
        assert set(row["measured"]) == set(row["predicted"]) == {"blocking", "overlap", "border_first"}
        assert row["measured"]["overlap"]["median"] > 0 and row["predicted"]["overlap"] > 0
    assert plans["chosen_over_best"] >= 1.0 and plans["chosen_vs_handwritten"] > 0
    assert {"mpi4py by hand", "numpy one process", "T_seq (numba, 1 core)"} == set(plans["baselines"])
    assert not list(run_dir.iterdir())


def test_balance_bench_tiny(tmp_path, capsys):
    """bench balance on 2 ranks without a testbed: every configuration runs and reports its time,
    moves and imbalance; only --out and --plot are written; a bad --quota is one line, exit 2."""
    run_dir, out, plot = tmp_path / "run", tmp_path / "balance.json", tmp_path / "balance.png"
    run_dir.mkdir()
    _bench_mpi(2, ["balance", "--field", "64", "--steps", "40", "--chunk", "5", "--window", "3", "--rounds", "1",
                   "--calibrate", "3", "--configs", "equal", "oracle", "split:2,1", "ema-growing", "ema-iteration",
                   "--out", str(out), "--plot", str(plot)], run_dir)
    report = json.loads(out.read_text())
    configs = report["configs"]
    assert set(configs) == {"equal", "oracle", "split:2,1", "ema-growing", "ema-iteration"}
    assert configs["split:2,1"]["final_share_ratio"] == pytest.approx(2.0, rel=0.05)
    assert all(c["median_s"] > 0 and c["imbalance_last_half"] >= 1.0 for c in configs.values())
    assert plot.stat().st_size > 0 and not list(run_dir.iterdir())
    assert cli.main(["bench", "balance", "--quota", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "STEP:HOST=PCT" in err[0], err


def test_balance_calls_bench_tiny(tmp_path):
    """bench balance-calls on 2 ranks without a testbed: both configurations factor the matrix
    (checked against scipy inside) and report their calls; only --out is written."""
    run_dir, out = tmp_path / "run", tmp_path / "calls.json"
    run_dir.mkdir()
    _bench_mpi(2, ["balance-calls", "--family", "lu", "--n", "96", "--block", "16", "--calls", "4", "--rounds", "1",
                   "--out", str(out)], run_dir)
    report = json.loads(out.read_text())
    assert len(report["probe"]["seconds"][0]) == len(report["adaptive"]["seconds"][0]) == 4
    assert report["probe_over_adaptive"] > 0 and len(report["adaptive"]["weights"][0]) == 5
    assert not list(run_dir.iterdir())


def test_synthetic_bench_tiny(tmp_path, capsys):
    """bench synthetic on 8 ranks of one host: a generated workload timed in every configuration
    with its regret and exact message totals, the prediction beside each time; only --out is
    written; nothing to do is one line, exit 2 (the cases' totals: test_synthetic_mpi)."""
    run_dir, out = tmp_path / "run", tmp_path / "syn.json"
    run_dir.mkdir()
    _bench_mpi(8, ["synthetic", "--workloads", "1", "--seed", "11", "--workload-scale", "0.05", "--sizes", "1024",
                   "--reps", "1", "--out", str(out)], run_dir)     # seed 11: one worker of two stages
    report = json.loads(out.read_text())
    (w,) = report["workloads"]
    timed = {k: e for k, e in w.items() if isinstance(e, dict) and "median" in e}
    assert {"original", "rules", "model #1"} <= set(timed) and w["regret"] >= 1.0
    assert all(e["predicted"] > 0 and e["sent"] == e["expected"][0] and e["received"] == e["expected"][1]
               for e in timed.values())
    assert report["summary"]["workloads"] == 1 and not list(run_dir.iterdir())
    assert cli.main(["bench", "synthetic"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing to do" in err[0], err
