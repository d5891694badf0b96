"""The benchmark harnesses run end to end (speed itself is checked by running them, not here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import cli

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench(script: str, db: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOTUNE_DB": str(db)}
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=240, env=env)


def test_regress_smoke_and_compare(tiny_db, tmp_path):
    out = tmp_path / "r.json"
    proc = _bench("regress.py", tiny_db, "--smoke", "--threads", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert {r["routine"] for r in doc["results"]} == {"gemm", "cholesky"}
    assert all(r["speedup_median"] > 0 and r["pairs"] == 2 for r in doc["results"])
    # a baseline twice as fast as anything measurable is flagged; the run itself is not
    for r in doc["results"]:
        r["speedup_median"] *= 100
    (tmp_path / "fast.json").write_text(json.dumps(doc))
    proc = _bench("regress.py", tiny_db, "--smoke", "--threads", "1", "--compare", str(tmp_path / "fast.json"))
    assert proc.returncode == 1 and "REGRESSION" in proc.stdout


def test_validate_smoke(tiny_db, tmp_path):
    out, md, png = tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.png"
    proc = _bench("validate.py", tiny_db, "--smoke", "--threads", "1", "--out", str(out), "--markdown", str(md),
                  "--plot", str(png))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["summary"]["problems"] == 2
    for r in doc["results"]:
        assert r["regret"] >= 1.0
        assert any("measured" in c for c in r["candidates"])
    assert png.stat().st_size > 0 and "regret" in md.read_text()
    # both passes timed every candidate not skipped; rescore.py re-predicts without re-timing
    assert all(c["passes"] == 2 for r in doc["results"] for c in r["candidates"] if "measured" in c)
    proc = _bench("rescore.py", tiny_db, str(out), "--db", str(tiny_db), "--out", str(tmp_path / "s.json"),
                  "--retime", "--pairs", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((tmp_path / "s.json").read_text())
    assert again["summary"]["choices_changed"] == 0
    assert again["summary"]["ape_median"] == doc["summary"]["ape_median"]


def test_decision_overhead_runs(tiny_db):
    proc = _bench("decision_overhead.py", tiny_db, "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cached" in proc.stdout


@pytest.mark.parametrize(("argv", "expect"), [
    (["explain", "gemm", "300", "--threads", "1", "--run"], ["chose", "ran tuned_gemm"]),
    (["explain", "cholesky", "200", "--top", "3"], ["chose", "GF/s", "more candidates"]),
])
def test_cli_explain(tiny_db, capsys, argv, expect):
    assert cli.main([*argv, "--db", str(tiny_db)]) == 0
    text = capsys.readouterr().out
    assert all(e in text for e in expect), text


def test_cli_explain_errors(tmp_path, capsys):
    assert cli.main(["explain", "gemm", "10", "20", "--db", str(tmp_path / "none.h5")]) == 2
    assert cli.main(["explain", "gemm", "10", "--db", str(tmp_path / "none.h5")]) == 1
    assert "no usable database" in capsys.readouterr().err


def test_mpi_validate_summary_reports_fitted_and_analytical_errors():
    """The distributed validation reports the median APE of the prediction it used (with fitted
    phase factors) and of the analytical models alone, and the selection deviation table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mpi_validate", BENCH / "mpi_validate.py")
    mv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mv)
    phases = ("distribution", "communication", "compute", "collection")

    def row(plan, measured, predicted, model):
        out = {k: dict(zip((*phases, "total"), v, strict=True)) for k, v in
               (("measured", measured), ("predicted", predicted), ("model", model))}
        return {"plan": plan, **out}

    rows = [row("a", [2e-3] * 4 + [8e-3], [2.2e-3] * 4 + [8.8e-3], [3e-3] * 4 + [12e-3]),
            row("b", [2e-3] * 4 + [9e-3], [2e-3] * 4 + [9e-3], [2e-3] * 4 + [9e-3])]
    summary = mv.summarise([{"n": 64, "nprocs": 2, "rows": rows, "choice": "b"}])
    assert summary["ape_median"]["total"] == pytest.approx(5.0)
    assert summary["ape_median_analytical"]["total"] == pytest.approx(25.0)
    assert summary["selection"][0]["best"] == "a" and summary["selection"][0]["deviation_pct"] == pytest.approx(12.5)
    assert summary["within_10pct"] == 0.0
    assert "analytical alone" in mv.markdown([{"n": 64, "nprocs": 2, "rows": rows}], summary)
