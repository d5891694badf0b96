"""`autotune explain` and `autotune bench mpi-validate`'s summary (the other `autotune bench` subcommands:
test_bench_cli.py; the mpi-* ones under mpiexec: test_bench_mpi.py)."""
from __future__ import annotations

import pytest

from autotune.benchmarks import mpi_validate as mv
from autotune.cli import command as cli


@pytest.mark.parametrize(("argv", "expect"), [
    (["explain", "gemm", "300", "--threads", "1", "--run"], ["chose", "ran tuned_gemm"]),
    (["explain", "cholesky", "200", "--top", "3"], ["chose", "GF/s", "more candidates"]),
    (["explain", "stencil", "300", "200", "--steps", "5", "--run"],
     ["stencil 300x200, 5 steps, thread budget", "chose sweep", "ran tuned_stencil 300x200, 5 steps"]),
    (["explain", "stencil", "1000", "1000", "--np", "2"],
     ["stencil 1000x1000, 100 steps on up to 2 ranks", "border cells CF", "nothing to hide"]),
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


def test_bench_dropin_runs_every_layout_and_writes_its_ratios(tiny_db, tmp_path, capsys):
    """The drop-in benchmark's cases and report (its figures are measured, not checked here)."""
    import json

    out = tmp_path / "dropin.json"
    assert cli.main(["bench", "dropin", "--sizes", "40", "--rounds", "1", "--seconds", "0.01", "--only", "gemm",
                     "cholesky", "lu", "solve", "loop", "gp", "--db", str(tiny_db), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    layouts = {(r["group"], r["layout"]) for r in doc["results"]}
    assert {("gemm", g) for g in ("C.C", "C.Ct", "Ct.C", "F.F", "F.C", "cols", "sub")} <= layouts
    assert {("cholesky", "F lower"), ("lu", "T"), ("solve", "C"), ("loop", "program"), ("gp", "program")} <= layouts
    assert all(r["ratio_median"] > 0 and r["aa_median"] > 0 for r in doc["results"])
    assert "case(s) at tuned/reference <= 1.05" in capsys.readouterr().out
    assert cli.main(["bench", "dropin", "--rounds", "0", "--db", str(tiny_db)]) == 2
