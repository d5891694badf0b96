"""Model report: HTML page and PNGs from the tiny database (with the validation step's check
points stored in it) and a synthetic validation JSON."""
from __future__ import annotations

import html
import json

from autotune.cli.command import main
from autotune.cli.report import write_report


def _validation(path):
    def cand(alg, be, pred, meas):
        return {"candidate": f"{alg} [{be}, 1t]", "config": {"algorithm": alg, "backend": be, "threads": 1,
                                                             "param": 0, "variant": 0},
                "predicted": pred, "ranked_by": pred, "measured": meas}

    results = [{"routine": "gemm", "dims": [n, n, n], "threads": 1, "chosen": "x", "best": "x", "regret": 1.0,
                "candidates": [cand("blas", "numpy-openblas", 1e-9 * n**3, 1.1e-9 * n**3),
                               cand("blas", "scipy-openblas", 1e-9 * n**3, 0.9e-9 * n**3),
                               {**cand("blas", "blis", 1.0, 1.0), "skipped": True}]}
               for n in (64, 128)]
    results.append({"routine": "cholesky", "dims": [128], "threads": 1, "chosen": "x", "best": "x", "regret": 1.0,
                    "candidates": [cand("potrf", "scipy-openblas", 1e-4, 1.3e-4)]})
    path.write_text(json.dumps({"summary": {}, "results": results}))
    return path


def test_report_on_tiny_db(tiny_db, tmp_path):
    out = tmp_path / "report"
    page = write_report(out, db=tiny_db, validation=_validation(tmp_path / "v.json"))
    text = page.read_text()
    assert page == out / "index.html"
    for png in ("pred_vs_measured.png", "residuals.png", "map_gemm.png", "map_cholesky.png"):
        assert (out / png).stat().st_size > 1000
        assert png in text
    assert "Models in use" in text and "analytical" in text
    assert "no MPI communication parameters" in text
    assert "Akaike weights" in text and "<script" not in text


def test_report_without_validation(tiny_db, tmp_path):
    text = write_report(tmp_path / "r", db=tiny_db).read_text()
    assert "no validation results" in text and "autotune-install --validate" in text
    assert not (tmp_path / "r" / "pred_vs_measured.png").exists()


def test_report_hints_the_validation_step_once(tiny_db, tmp_path):
    """Without check points the page says once which command stores them."""
    text = html.unescape(write_report(tmp_path / "r", db=tiny_db).read_text())
    assert text.count("run `autotune-install --validate") == 1, text


def test_report_without_db(tmp_path, capsys):
    """No database: one line and exit 1 (as `autotune show`), no page written."""
    missing = tmp_path / "missing.h5"
    assert main(["report", "--out", str(tmp_path / "r"), "--db", str(missing)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"autotune report: error: no database at {missing} (run autotune-install first)\n"
    assert not (tmp_path / "r").exists()


def test_library_report_without_db_is_a_note(tmp_path):
    """``write_report`` itself (no CLI) still notes a missing database on the page."""
    text = write_report(tmp_path / "r", db=tmp_path / "missing.h5").read_text()
    assert "no database at" in text and "choice maps are skipped" in text


def test_report_with_fitted_entries(tiny_db, tmp_path):
    """Fitted models in use (stored by the validation step) show up with their reason."""
    import shutil

    import numpy as np

    from autotune.models.fitted import FittedEntry, save_fitted

    db = tmp_path / "db.h5"
    shutil.copy(tiny_db, db)
    entry = FittedEntry("cholesky", "blocked", "scipy-openblas", 1, 32, 0, ((3, 0), (0, 0)),
                        np.array([[1e-10, 1e-6]]), np.array([64.0, 2048.0]), "FI-LS", 1.0, 0.5, 14.0, 9.0,
                        "analytical erred 14% > 3%", True)
    save_fitted(db, [entry])
    text = write_report(tmp_path / "r", db=db).read_text()
    assert "fitted" in text and "analytical erred 14%" in text


TINY_VALIDATE = {"name": "tiny", "check": {"gemm": [48, 80], "cholesky": [48, 80]},
                 "fit": {"gemm": [32, 40, 56, 72, 96, 112], "cholesky": [32, 40, 56, 72, 96, 112]},
                 "budgets": [1], "reps": 2, "seconds": 0.01, "settle": 0.0, "min_seconds": 0.0}


def test_report_needs_nothing_but_the_database(tiny_db, tmp_path, capsys):
    """A tiny probe, then a tiny validation into the database: `autotune report` draws predicted vs
    measured for every routine and names the model in use and why, from the database alone."""
    import shutil

    from autotune.install_probe.validate import validate

    db = tmp_path / "db.h5"
    shutil.copy(tiny_db, db)
    report = validate(db, TINY_VALIDATE, progress=False)
    assert report.points and {p["family"] for p in report.points} == {"gemm", "cholesky"}
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--db", str(db)]) == 0
    text = (out / "index.html").read_text()
    for png in ("pred_vs_measured.png", "residuals.png"):
        assert (out / png).stat().st_size > 1000 and png in text
    assert "the database&#x27;s validation step" in text
    for fam, alg in {(p["family"], p["algorithm"]) for p in report.points}:
        assert f"<td>{fam}</td><td>{alg}</td><td>analytical</td><td>not validated</td>" not in text
    assert "Model in use per candidate" in text
    models = {p["model"] for p in report.points}
    assert models <= {"analytical", "fitted"} and all(m in text for m in models)
    assert all(p["reason"] and html.escape(p["reason"][:40]) in text for p in report.points)
    assert "report written" in capsys.readouterr().out


def test_a_standard_install_ends_with_the_validation_unless_opted_out(monkeypatch, tmp_path, capsys):
    """`standard` validates (its short install spec) after a complete probe; `--no-validate` and
    `quick` do not; an interrupted validation keeps the measurements and says --resume finishes it."""
    from types import SimpleNamespace

    from autotune.install_probe import cli
    from autotune.install_probe import validate as val

    monkeypatch.setattr(cli, "run_probe", lambda *a, **kw: SimpleNamespace(
        complete=True, measured=3, failures={}, skipped_backends={}, path=tmp_path / "db.h5", seconds=1.0,
        pending=kw["after"], verdict=()))
    monkeypatch.setitem(cli.PHASES, "pools", lambda *a: (0.0, 0))        # measured in their own tests
    monkeypatch.setitem(cli.PHASES, "threads", lambda *a: (0.0, 0))
    monkeypatch.setattr(cli, "finish_phase", lambda *a: None)
    specs = []
    monkeypatch.setattr(val, "validate", lambda db, spec, **kw: specs.append(spec) or SimpleNamespace(text=str))
    db = ["--db", str(tmp_path / "db.h5"), "--no-progress"]
    assert cli.main(["--profile", "standard", *db]) == 0 and specs == ["install"]
    assert val.load_spec("install").check["gemm"] == (200, 700, 1500)
    assert cli.main(["--profile", "standard", "--no-validate", *db]) == 0 and specs == ["install"]
    assert cli.main(["--profile", "quick", *db]) == 0 and specs == ["install"]

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(val, "validate", interrupted)
    assert cli.main(["--profile", "standard", *db]) == 130
    assert "interrupted during the validation" in capsys.readouterr().err


def test_choice_map_marks_a_choice_priced_beyond_its_measured_sizes(tiny_db):
    """The tiny database measures every Cholesky series up to 256: at 4096 any choice is
    extrapolated (``*``); gemm at 128 lies inside its measured libraries' series and is not. (gemm
    at 4096 may choose the Numba kernel, measured at one size only: a constant, never marked.)"""
    from autotune.cli.report import _map_cell
    from autotune.db import load_sp

    sp = load_sp(tiny_db)
    assert all("*" in _map_cell("cholesky", 4096, sp, t)[1] for t in (1, 2))
    assert "*" not in _map_cell("gemm", 128, sp, 1)[1]
