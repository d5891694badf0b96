"""`autotune bench comm-fit` and `autotune bench mpi-repeat`: the best-line floor, the neighbour test
and the round-to-round differences they report are what they say; results only where --out says,
bad input one line and exit 2."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from autotune.benchmarks import comm_fit as crep
from autotune.benchmarks import mpi_repeat as mrep
from autotune.cli import command as cli
from autotune.db import comm as dbc
from autotune.models import comm_fit


def test_best_line_is_exact_on_a_line_and_no_line_on_a_grid_beats_it():
    m = np.array([1e3, 4e3, 1.6e4, 6.4e4])
    assert crep.best_line_max_error(m, 2e-6 + 1e-10 * m) < 1e-9
    t = 2e-6 + 1e-10 * m
    t[1] *= 1.3
    best = crep.best_line_max_error(m, t)
    assert 0.05 < best < 0.3
    grid = itertools.product(np.linspace(0, 4e-6, 81), np.linspace(0, 2e-10, 81))
    brute = min(np.max(np.abs(ts + tw * m - t) / t) for ts, tw in grid)
    assert best <= brute + 1e-9 and brute - best < 0.05


def test_off_neighbours_flags_a_spike_but_not_a_smooth_point_or_an_end():
    m_fit = np.array([1.0, 2.0, 4.0, 8.0])
    t_fit = 1.0 + m_fit
    m = np.array([0.5, 1.4, 2.8, 5.6])
    t = 1.0 + m
    t[2] *= 1.3
    t[0] *= 2.0                        # outside the measured range: no neighbour below
    assert crep.off_neighbours(m_fit, t_fit, m, t, 0.1).tolist() == [False, False, True, False]


def _platform(path, spike: float, scale: float = 1.0):
    fitted = [2 ** e for e in range(10, 21)]
    held = [int(np.sqrt(a * b)) // 64 * 64 for a, b in itertools.pairwise(fitted)]
    rows = []
    for m in sorted(fitted + held):
        t = scale * (5e-6 + 1e-10 * m) * (spike if m == held[4] else 1.0)
        rows.append(("bcast", 2, 0, 0, m, t, t, t, t, 5, 1, t))
    info = {"library": "Open MPI v9.9.9, package: test", "P": 2, "oversubscribed": False, "hosts": 1,
            "dist": dbc.mpi_distributions(), "hardware": dbc.hardware(), "profile": "synthetic",
            "updated": "2026-01-01T00:00:00", "seconds": 1.0, "heldout_sizes": held}
    points = np.array(rows, dtype=dbc.POINT_DTYPE)
    dbc.write_platform(path, info, points, comm_fit.fit_points(points, held))
    return dbc.read_platforms(path)[0]


def test_regime_report_blames_the_data_for_a_spike_and_retest_sees_a_uniform_slowdown(tmp_path):
    noisy = _platform(tmp_path / "a.h5", spike=1.3)
    lines, counts = crep.regime_report(noisy, 0.1)
    assert counts["warm"][:3] == [1, 0, 1] and len(lines) == 1 and "1 of them off their neighbours" in lines[0]
    assert counts["warm"][4] == 1                 # one spike: the regime's median error stays small
    assert "held-out points within 10%: 90.0% of 10" in crep.summary_line("own", counts, 0.1)
    assert "1/1 with median error within 10%" in crep.summary_line("own", counts, 0.1)
    clean = _platform(tmp_path / "b.h5", spike=1.0, scale=1.25)
    assert crep.regime_report(clean, 0.1)[1]["warm"][:3] == [1, 1, 0]
    ratios = crep.retest(clean, _platform(tmp_path / "c.h5", spike=1.0))
    assert ratios and all("median 1.25" in line for line in ratios)


def _round(phases_by_plan: dict) -> dict:
    rows = [{"plan": plan, "measured": ph} for plan, ph in phases_by_plan.items()]
    return {"results": [{"n": 1024, "rows": rows}]}


def test_round_differences_and_floor(tmp_path, capsys):
    a = _round({"summa b=64": {"communication": 0.010, "total": 0.1}, "bsr": {"communication": 0.0005}})
    b = _round({"summa b=64": {"communication": 0.008, "total": 0.1}, "bsr": {"communication": 0.002}})
    rounds = [mrep.measured(a), mrep.measured(b)]
    assert mrep.differences(rounds, "communication") == pytest.approx([0.2])   # bsr: under 1 ms once
    assert mrep.differences(rounds, "total") == pytest.approx([0.0])
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    assert cli.main(["bench", "mpi-repeat", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "| communication | 1 | 20.0% | 100% | 10.0% |" in out


def _one_line_error(capsys, command: str, says: str) -> None:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune bench {command}: error:") and says in lines[0], lines


def test_comm_fit_reports_each_platform_and_writes_only_where_out_says(tmp_path, capsys):
    _platform(tmp_path / "a.h5", spike=1.3)
    out = tmp_path / "res" / "fit.json"
    out.parent.mkdir()
    assert cli.main(["bench", "comm-fit", str(tmp_path / "a.h5"), "--out", str(out)]) == 0
    text = capsys.readouterr().out.strip().splitlines()
    assert text[0].startswith("== ") and "1 of them off their neighbours" in text[1]
    own = next(x for x in text if x.endswith("(own fits)"))
    assert "warm: 0/1 regimes pass, 1 of the 1 failing" in own
    assert text[-1].endswith("no p to leave out)")          # one process count: no (p, m) held-out error
    assert sorted(p.name for p in out.parent.iterdir()) == ["fit.json"]
    doc = json.loads(out.read_text())
    (plat,) = doc["platforms"]
    assert doc["tol"] == 0.1 and doc["other"] is None and "retest" not in plat
    warm = plat["counts"]["warm"]
    assert (warm["regimes"], warm["passing"], warm["failing_only_off_neighbours"], warm["median_within_tol"]) == \
        (1, 0, 1, 1) and len(warm["heldout_errors"]) == 10


def test_comm_fit_against_a_second_probe(tmp_path, capsys):
    _platform(tmp_path / "a.h5", spike=1.0, scale=1.25)
    _platform(tmp_path / "b.h5", spike=1.0)
    out = tmp_path / "fit.json"
    assert cli.main(["bench", "comm-fit", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"-- against {tmp_path / 'b.h5'}" in text and "A/B median 1.25" in text
    (plat,) = json.loads(out.read_text())["platforms"]
    assert plat["retest"] and all("median 1.25" in line for line in plat["retest"])
    assert plat["other_counts"]["warm"]["regimes"] == 1 and "the other probe's fits" in plat["other_summary"]


@pytest.mark.parametrize(("argv", "says"), [
    (["missing.h5"], "missing.h5: no such database"),
    (["a.h5", "missing.h5"], "missing.h5: no such database"),
    (["empty.h5"], "no communication data"),
    (["a.h5", "--tol", "0"], "--tol must be positive"),
    (["a.h5", "--out", "nowhere/fit.json"], "does not exist"),
])
def test_comm_fit_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    _platform(tmp_path / "a.h5", spike=1.0)
    h5py = pytest.importorskip("h5py")
    h5py.File(tmp_path / "empty.h5", "w").close()
    assert cli.main(["bench", "comm-fit", *[str(tmp_path / a) if a.endswith(".h5") else a for a in argv]]) == 2
    _one_line_error(capsys, "comm-fit", says)
    assert not (tmp_path / "nowhere").exists()


def test_mpi_repeat_median_d_on_a_hand_made_example(tmp_path, capsys):
    """Three rounds of two plans: communication d per pair is 0.2, 0.5, 0.375 (summa) and 0, 0.5, 0.5
    (bsr): median 0.4375, mean 0.3458 (floor 17.3%), 5 of 6 over 10%."""
    rounds = [{"summa b=64": {"communication": 0.010}, "bsr": {"communication": 0.004}},
              {"summa b=64": {"communication": 0.008}, "bsr": {"communication": 0.004}},
              {"summa b=64": {"communication": 0.005}, "bsr": {"communication": 0.002}}]
    paths = []
    for i, doc in enumerate(rounds):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(_round(doc)))
    out = tmp_path / "repeat.json"
    assert cli.main(["bench", "mpi-repeat", *map(str, paths), "--out", str(out)]) == 0
    assert "| communication | 6 | 43.8% | 83% | 17.3% |" in capsys.readouterr().out
    comm = json.loads(out.read_text())["phases"]["communication"]
    assert comm["pairs"] == 6 and comm["median_d"] == pytest.approx(0.4375)
    assert comm["over_10pct"] == pytest.approx(5 / 6) and comm["floor"] == pytest.approx((0.2 + 0.5 + 0.375 + 1.0) / 12)


@pytest.mark.parametrize(("files", "says"), [
    ({"a.json": None}, "need at least two rounds"),
    ({"a.json": None, "missing.json": "absent"}, "missing.json: No such file"),
    ({"a.json": None, "bad.json": "{not json"}, "bad.json: not an `autotune bench mpi-validate --out` file"),
    ({"a.json": None, "other.json": '{"results": [{"n": 1}]}'}, "other.json: not an"),
])
def test_mpi_repeat_bad_input_is_one_line_and_exit_2(tmp_path, capsys, files, says):
    for name, text in files.items():
        if text != "absent":
            (tmp_path / name).write_text(text or json.dumps(_round({"bsr": {"total": 0.1}})))
    assert cli.main(["bench", "mpi-repeat", *(str(tmp_path / name) for name in files)]) == 2
    _one_line_error(capsys, "mpi-repeat", says)
