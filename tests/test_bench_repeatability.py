"""The repeatability tools in bench/: the best-line floor, the neighbour test and the round-to-round
differences they report are what they say."""
from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.db import comm as dbc

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


crep = _module("comm_repeatability")
mrep = _module("mpi_repeatability")


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
    dbc.write_platform(path, info, np.array(rows, dtype=dbc.POINT_DTYPE))
    return dbc.read_platforms(path)[0]


def test_regime_report_blames_the_data_for_a_spike_and_retest_sees_a_uniform_slowdown(tmp_path):
    noisy = _platform(tmp_path / "a.h5", spike=1.3)
    lines, counts = crep.regime_report(noisy, 0.1)
    assert counts["warm"][:3] == [1, 0, 1] and len(lines) == 1 and "1 of them off their neighbours" in lines[0]
    assert counts["warm"][4] == 1                 # one spike: the regime's median error stays small
    assert "held-out points within 10%: 90.0% of 10" in crep._summary("own", counts, 0.1)
    assert "1/1 with median error within 10%" in crep._summary("own", counts, 0.1)
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
    assert mrep.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "| communication | 1 | 20.0% | 100% | 10.0% |" in out
