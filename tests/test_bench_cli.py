"""`autotune bench`: regress writes ratios only where --out says, compares against a baseline
(exit 0, 1 on a regression, 2 with one line for a missing, damaged or foreign baseline; the CI gate's
thresholds, --fail-below, Ctrl-C and JUnit: test_bench_regress.py);
validate, rescore, overhead and strassen-remodel run on the tiny database (comm-fit and mpi-repeat:
test_bench_repeatability.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import options
from autotune.cli import command as cli

BASELINES = Path(__file__).resolve().parents[1] / "bench" / "baselines"


def _regress(db: Path, *extra: str) -> int:
    # Unguarded: at 40 x 40 the guard's verdict is timing noise (one run keeps what the next demotes),
    # and these tests compare a run with its own baseline.
    with options(guard=False):
        return _regress_run(db, *extra)


def _regress_run(db: Path, *extra: str) -> int:
    return cli.main(["bench", "regress", "--db", str(db), "--sizes", "40", "96", "--threads", "1",
                     "--rounds", "9", "--seconds", "0", *extra])


@pytest.fixture(scope="module")
def saved(tiny_db, tmp_path_factory) -> tuple[Path, Path]:
    """One regress run written to --out and --save-baseline: (out, baseline)."""
    where = tmp_path_factory.mktemp("regress")
    out, base = where / "r.json", where / "base.json"
    assert _regress(tiny_db, "--out", str(out), "--save-baseline", str(base)) == 0
    return out, base


def test_regress_writes_ratios_only_where_out_says(saved):
    out, base = saved
    assert sorted(p.name for p in out.parent.iterdir()) == ["base.json", "r.json"]
    doc = json.loads(out.read_text())
    assert doc["fingerprint"]["cpu_model"] and doc == json.loads(base.read_text())
    assert {r["routine"] for r in doc["results"]} == {"gemm", "cholesky"} and len(doc["results"]) == 4
    for r in doc["results"]:
        assert r["pairs"] == 9 and r["speedup_q1"] <= r["speedup_median"] <= r["speedup_q3"]
        assert r["speedup_median"] > 0 and r["aa_median"] > 0 and r["noise"] >= 0


def test_regress_against_its_own_baseline_passes(tiny_db, saved, capsys):
    # a generous floor here and below: this shared machine's load may shift a tiny case between runs
    assert _regress(tiny_db, "--baseline", str(saved[1]), "--floor", "0.5") == 0
    assert "0 regression(s) in 4 case(s)" in capsys.readouterr().out


def test_a_baseline_much_better_than_this_run_is_a_regression(tiny_db, saved, tmp_path, capsys):
    doc = json.loads(saved[1].read_text())
    doc["results"][0]["speedup_median"] *= 100
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(doc))
    assert _regress(tiny_db, "--baseline", str(fast), "--floor", "0.5") == 1
    captured = capsys.readouterr()
    assert "1 regression(s) in 4 case(s)" in captured.out and f"FAIL {doc['results'][0]['case']}: ratio" in captured.out
    assert captured.err.strip().splitlines()[-1].startswith("autotune bench regress: error: 1 of 4 case(s) failed")


def _foreign(saved, tmp_path) -> Path:
    doc = json.loads(saved[1].read_text())
    doc["fingerprint"]["cpu_model"] = "Some Other CPU"
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("make", "says"), [
    (lambda saved, tmp: tmp / "missing.json", "no such file"),
    (lambda saved, tmp: (tmp / "garbage.json").write_bytes(b"\x00not json") and tmp / "garbage.json", "damaged"),
    (lambda saved, tmp: (tmp / "empty.json").write_text('{"results": [{"case": "x"}]}') and tmp / "empty.json",
     "damaged"),
    (_foreign, "another machine"),
])
def test_a_bad_baseline_is_one_line_and_exit_2(tiny_db, saved, tmp_path, capsys, make, says):
    path = make(saved, tmp_path)
    before = path.read_bytes() if path.exists() else None
    assert _regress(tiny_db, "--baseline", str(path), "--out", str(tmp_path / "r.json")) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], captured.err
    assert lines[0].startswith("autotune bench regress: error:")
    assert f"autotune bench regress --save-baseline {path}" in lines[0]
    assert captured.out == "" and not (tmp_path / "r.json").exists()
    assert (path.read_bytes() if path.exists() else None) == before       # nothing changed or lost


def test_a_stored_baseline_without_fingerprint_is_still_read(tiny_db, capsys):
    status = cli.main(["bench", "regress", "--db", str(tiny_db), "--sizes", "64", "--threads", "1",
                       "--routines", "gemm", "--rounds", "3", "--seconds", "0",
                       "--baseline", str(BASELINES / "regress-xeon-2c.json")])
    out = capsys.readouterr().out
    assert status in (0, 1) and "gemm 64x64x64 t=1" in out and "records no machine fingerprint" in out


def test_a_baseline_without_this_runs_cases_is_bad_input(tiny_db, saved, capsys):
    status = cli.main(["bench", "regress", "--db", str(tiny_db), "--sizes", "50", "--threads", "1",
                       "--routines", "gemm", "--rounds", "3", "--seconds", "0", "--baseline", str(saved[1])])
    assert status == 2 and "has none of this run's cases" in capsys.readouterr().err


def test_lu_and_solve_cases_in_regress_and_validate(tiny_db, tmp_path, capsys):
    """The LU family in the benchmark tool: tuned_lu_factor and tuned_solve A/B against scipy, and
    every lu / solve candidate against its prediction."""
    out = tmp_path / "r.json"
    assert cli.main(["bench", "regress", "--db", str(tiny_db), "--sizes", "64", "--threads", "1", "--routines",
                     "lu", "solve", "--rounds", "3", "--seconds", "0", "--out", str(out)]) == 0
    cases = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert set(cases) == {"lu 64 t=1", "solve 64 t=1"}
    assert cases["lu 64 t=1"]["choice"].startswith("getrf") and cases["solve 64 t=1"]["choice"].startswith("gesv")
    val = tmp_path / "v.json"
    assert cli.main(["bench", "validate", "--db", str(tiny_db), "--sizes", "64", "--threads", "1", "--routines",
                     "lu", "solve", "--seconds", "0", "--reps", "3", "--passes", "1", "--out", str(val)]) == 0
    doc = json.loads(val.read_text())
    assert [(r["routine"], r["dims"]) for r in doc["results"]] == [("lu", [64]), ("solve", [64, 16])]
    assert all(r["regret"] >= 1.0 for r in doc["results"])


def test_regress_refuses_an_output_in_a_missing_directory(tiny_db, tmp_path, capsys):
    assert _regress(tiny_db, "--out", str(tmp_path / "no" / "r.json")) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bench_validate_rescore_and_overhead(tiny_db, tmp_path, capsys):
    """validate times every candidate not skipped in both passes; rescore re-predicts without
    re-timing and changes nothing against the same database; overhead reports cached decisions."""
    out, md, png = tmp_path / "v.json", tmp_path / "v.md", tmp_path / "v.png"
    assert cli.main(["bench", "validate", "--db", str(tiny_db), "--sizes", "64", "--threads", "1", "--seconds", "0",
                     "--reps", "3", "--out", str(out), "--markdown", str(md), "--plot", str(png)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["problems"] == 2
    for r in doc["results"]:
        assert r["regret"] >= 1.0
        assert any("measured" in c for c in r["candidates"])
    assert png.stat().st_size > 0 and "regret" in md.read_text()
    assert all(c["passes"] == 2 for r in doc["results"] for c in r["candidates"] if "measured" in c)
    again = tmp_path / "s.json"
    assert cli.main(["bench", "rescore", str(out), "--db", str(tiny_db), "--out", str(again), "--retime",
                     "--pairs", "3"]) == 0
    rescored = json.loads(again.read_text())
    assert rescored["summary"]["choices_changed"] == 0
    assert rescored["summary"]["ape_median"] == doc["summary"]["ape_median"]
    capsys.readouterr()
    assert cli.main(["bench", "overhead", "--db", str(tiny_db), "--threads", "1", "--sizes", "100", "300"]) == 0
    assert "cached" in capsys.readouterr().out


def test_compare_a_database_with_itself_and_with_a_missing_one(tiny_db, tmp_path, capsys):
    assert cli.main(["bench", "compare", str(tiny_db), str(tiny_db), "--min-size", "16"]) == 0
    assert "worst relative difference 0.00%" in capsys.readouterr().out
    assert cli.main(["bench", "compare", str(tiny_db), str(tmp_path / "none.h5")]) == 2
    assert "none.h5: no such database" in capsys.readouterr().err


def test_probe_and_drift_run_once(capsys):
    assert cli.main(["bench", "probe", "--n", "64", "--rounds", "2"]) == 0
    assert cli.main(["bench", "drift", "--minutes", "0", "--n", "64", "--seconds", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "ratio median" in out and "numpy-openblas: min" in out


def test_strassen_remodel_runs_tiny_and_writes_only_where_asked(tiny_db, tmp_path, capsys):
    """Levels 0 and 1 on three grid sizes, two check sizes, one rep: the factors, the models'
    errors and each check size's picks, in the files asked for and nowhere else."""
    where = tmp_path / "res"
    where.mkdir()
    out, md = where / "s.json", where / "s.md"
    assert cli.main(["bench", "strassen-remodel", "--db", str(tiny_db), "--sizes", "128", "192", "256",
                     "--checks", "160", "224", "--levels", "0", "1", "--reps", "1",
                     "--out", str(out), "--markdown", str(md)]) == 0
    assert sorted(p.name for p in where.iterdir()) == ["s.json", "s.md"]
    doc = json.loads(out.read_text())
    assert sorted(doc["M"]) == ["0", "1"] and doc["A"]["0"] == 0.0 and len(doc["grid"]) == 6
    assert [(r["n"], r["l"]) for r in doc["check"]] == [(160, 0), (160, 1), (224, 0), (224, 1)]
    assert all(r["measured"] > 0 and r["analytical"] > 0 for r in doc["check"])
    assert [p["n"] for p in doc["summary"]["picks"]] == [160, 224]
    assert all(p["fitted_regret"] >= 1.0 for p in doc["summary"]["picks"])
    assert md.read_text() == capsys.readouterr().out and "| l | M(l) | A(l) |" in md.read_text()


@pytest.mark.parametrize(("argv", "says"), [
    (["--sizes", "128", "--checks", "160", "--levels", "0", "1"], "--sizes must give level(s) 1 two sizes"),
    (["--checks", "100", "--levels", "1"], "no --checks size has leaves of at least 64"),
    (["--levels", "-1"], "--levels must not be negative"),
    (["--out", "no/s.json"], "does not exist"),
])
def test_strassen_remodel_bad_input_is_one_line_and_exit_2(tiny_db, capsys, argv, says):
    assert cli.main(["bench", "strassen-remodel", "--db", str(tiny_db), *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune bench strassen-remodel: error:") and says in lines[0]


def test_remodel_ap_compares_both_fits_on_held_out_problems(tiny_db, tmp_path, capsys):
    """Two validated copies (over blocks, per block), one held-out LU problem timed once for both:
    each copy's choice, regret and error, in the files asked for; the database itself untouched."""
    import yaml

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"families": ["lu"], "check": {"lu": [200, 300]}, "fit": {"lu": [160, 240, 360]},
                                    "budgets": [1], "reps": 1, "seconds": 0.01, "settle": 0.0}))
    before = tiny_db.read_bytes()
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    assert cli.main(["bench", "remodel-ap", "--db", str(tiny_db), "--spec", str(spec), "--sizes", "250",
                     "--routines", "lu", "--threads", "1", "--reps", "1", "--seconds", "0.01", "--pairs", "3",
                     "--out", str(out), "--markdown", str(md)]) == 0
    assert tiny_db.read_bytes() == before
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    for name in ("over blocks", "per block"):
        assert row[name]["regret"] >= 1.0 and row[name]["ape_median"] >= 0 and name in md.read_text()
        assert doc["summary"][name]["regret_mean"] == row[name]["regret"]
    assert "mean regret" in capsys.readouterr().out


def test_remodel_ap_bad_input_is_one_line_and_exit_2(tiny_db, capsys):
    assert cli.main(["bench", "remodel-ap", "--db", str(tiny_db), "--sizes", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune bench remodel-ap: error:")
