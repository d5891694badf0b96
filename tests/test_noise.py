"""A busy probe is caught: each point's CPU share and spread, noisy points measured again and kept
flagged, the verdict the install and `autotune show` print, the noise per series. The CPU clocks are
faked, so nothing here depends on how loaded the machine running the tests is."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from autotune.install_probe import cli, runner, timing
from autotune.install_probe.operands import Call
from autotune.install_probe.profile import Timing
from autotune.install_probe.timing import Clocks, Sample, cpu_share, measure

from autotune.cli import command as autotune_cli
from autotune.core.assumptions import MAX_SPREAD, MIN_CPU_SHARE, REMEASURES
from autotune.db import RECORD_DTYPE, Database, load, save
from autotune.db import noise as noise_module
from autotune.db.noise import (
    NOISE_CPU,
    NOISE_RETRIED,
    NOISE_SPREAD,
    noise_bits,
    series_noise,
    verdict,
)

PROFILE = {"name": "noise", "backends": ["numpy-openblas"], "threads": [1, 2],
           "timing": {"min_reps": 1, "max_reps": 2, "point_budget_seconds": 0.01, "min_sample_seconds": 1e-5},
           "measure": [{"routines": ["gemm", "axpy"], "pattern": "square", "sizes": [8, 16]}]}
POINTS = 2 * 2 * 2       # threads x routines x sizes
PASSES = 2               # the default: every point this cheap is timed twice


# -- classification ------------------------------------------------------------------------------

def test_a_point_short_of_cpu_or_spread_wide_is_noisy(monkeypatch):
    assert noise_bits(0.45, 0.05) == NOISE_CPU                 # two threads sharing their cores
    assert noise_bits(0.98, 0.05) == 0
    assert noise_bits(0.0, 0.05) == 0                          # not measured: never noisy
    assert noise_bits(0.98, 1.5) == NOISE_SPREAD
    assert noise_bits(0.45, 1.5) == NOISE_CPU | NOISE_SPREAD
    with monkeypatch.context() as m:
        m.setattr(noise_module, "MAX_SPREAD", 0.25)
        assert noise_bits(0.98, 0.5) == NOISE_SPREAD
    assert noise_bits(0.98, 0.5) == (NOISE_SPREAD if 0.5 > MAX_SPREAD else 0)
    assert Sample(1.0, 1.0, 1.0, 1.0, 3, cpu_share=0.45).noise == NOISE_CPU
    assert Sample(1.0, 0.5, 0.5, 2.0, 3, cpu_share=1.0).noise == NOISE_SPREAD     # IQR 1.5 x the median
    assert Sample(1.0, 1.0, 1.0, 1.0, 3).noise == 0


@pytest.mark.parametrize("thread, ran, waited, share", [
    (1.0, 2.0, 0.0, 1.0),      # quiet: the measuring thread ran throughout, no thread waited
    (0.5, 1.0, 0.0, 0.5),      # the measuring thread lost half its wall time (another program, a hypervisor)
    (1.0, 1.0, 1.0, 0.5),      # it spun throughout, but its threads waited as long as they ran
    (1.0, 0.0, 0.0, 1.0),      # schedstat counts nothing: the thread clock alone
    (0.9, -1.0, -1.0, 0.9),    # no schedstat (not Linux): the thread clock alone
])
def test_cpu_share_is_the_lower_of_the_thread_clock_and_the_run_queue_wait(thread, ran, waited, share):
    start = Clocks(10.0, 0.0, 0.0, 0.0 if ran >= 0 else -1.0, 0.0 if ran >= 0 else -1.0)
    end = Clocks(11.0, thread, 2 * thread, ran, waited)
    assert cpu_share(start, end) == pytest.approx(share)
    assert cpu_share(start, start) == 0.0                        # nothing timed: not measured


def test_measure_reports_the_cpu_share_of_its_samples(monkeypatch):
    """The clocks advance the measuring thread's CPU at half the wall clock: the sample says 0.5 and is noisy."""
    now = [0.0]

    def clocks():
        now[0] += 1.0
        return Clocks(now[0], now[0] / 2, now[0], -1.0, -1.0)

    monkeypatch.setattr(timing, "clocks", clocks)
    sample = measure(Call(lambda repeat=1: None), Timing(min_reps=3, max_reps=3, min_sample_seconds=1e-6))
    assert sample.cpu_share == pytest.approx(0.5) and sample.noise & NOISE_CPU
    assert sample.t_wall > 0 and sample.t_cpu == pytest.approx(sample.t_wall)


def _row(median: float, noise: int) -> tuple:
    row = list(np.zeros(1, RECORD_DTYPE)[0].tolist())
    row[runner.FIELD["t_median"]], row[runner.FIELD["noise"]] = median, noise
    return tuple(row)


def test_a_point_keeps_its_quiet_measurement_else_stays_noisy():
    kept = runner.kept_row([_row(1.0, NOISE_CPU), _row(3.0, 0)])     # the noisy one was faster: dropped
    assert kept[runner.FIELD["t_median"]] == 3.0 and kept[runner.FIELD["noise"]] == NOISE_RETRIED
    kept = runner.kept_row([_row(2.0, NOISE_CPU), _row(1.0, NOISE_SPREAD)])
    assert kept[runner.FIELD["t_median"]] == 1.0 and kept[runner.FIELD["noise"]] == NOISE_SPREAD
    assert runner.kept_row([_row(2.0, 0), _row(1.0, 0)])[runner.FIELD["noise"]] == 0


# -- the probe, its verdict and show -----------------------------------------------------------------

def _install(tmp_path, monkeypatch, capsys, shares) -> tuple[list[str], list[tuple]]:
    """Run the install on PROFILE with the CPU share of each successive measurement taken from
    ``shares(key, attempt)``; its verdict lines, and the key of every measurement in order."""
    seen: list[tuple] = []
    real, real_measure_point = runner.measure, runner._Session._measure

    def measure_at(call, policy):          # the point's timing (and its routine's call-overhead timing)
        sample = real(call, policy)
        return Sample(sample.median, sample.minimum, sample.median, sample.median, sample.reps, sample.t_wall,
                      sample.t_cpu, shares(seen[-1], seen.count(seen[-1])))

    def measure_point(self, be, task):
        seen.append(task.key)
        return real_measure_point(self, be, task)

    monkeypatch.setattr(runner, "measure", measure_at)
    monkeypatch.setattr(runner._Session, "_measure", measure_point)
    monkeypatch.setattr(runner, "REMEASURE_BUDGET", 1e6)      # every round runs, however long the passes took
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PROFILE))
    assert cli.main(["--profile", str(tmp_path / "p.yaml"), "--db", str(tmp_path / "db.h5"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    return [line.removeprefix("autotune-install: ") for line in out.splitlines() if "verdict" in line
            or "the machine was busy" in line], seen


def _show_verdict(path, capsys) -> list[str]:
    assert autotune_cli.main(["show", "--db", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("Verdict: "))
    return [lines[i].replace("Verdict: ", "verdict: ", 1)] + [lines[i + 1].strip()] * lines[i + 1].startswith("  ")


def test_a_busy_probe_is_measured_again_kept_noisy_and_the_install_and_show_say_so(tmp_path, monkeypatch, capsys):
    said, seen = _install(tmp_path, monkeypatch, capsys, lambda key, attempt: 0.45)
    assert len(seen) == POINTS * (PASSES + REMEASURES)           # every point twice more after its passes
    rec = load(tmp_path / "db.h5").records
    assert len(rec) == POINTS and np.all(rec["noise"] & NOISE_CPU) and np.allclose(rec["cpu_share"], 0.45)
    assert said[0].startswith(f"verdict: busy: {POINTS} of {POINTS} points noisy in 4 series")
    assert f"got under {MIN_CPU_SHARE:.0%} of the CPU" in said[0] and "numpy-openblas 2t" in said[0]
    assert said[1].startswith("the machine was busy while measuring") and "again on a quiet machine" in said[1]
    assert f"--db {tmp_path / 'db.h5'}" in said[1]
    assert _show_verdict(tmp_path / "db.h5", capsys) == said
    noise = series_noise(load(tmp_path / "db.h5", check_machine=False).records)
    assert noise[("gemm", "numpy-openblas", 2, "square")].noisy_share == 1.0
    assert noise[("gemm", "numpy-openblas", 2, "square")].median_cpu_share == pytest.approx(0.45)


def test_a_quiet_probe_measures_nothing_again_and_says_quiet(tmp_path, monkeypatch, capsys):
    said, seen = _install(tmp_path, monkeypatch, capsys, lambda key, attempt: 0.99)
    assert len(seen) == POINTS * PASSES and said == ["verdict: quiet"]
    assert not load(tmp_path / "db.h5").records["noise"].any()
    assert _show_verdict(tmp_path / "db.h5", capsys) == said


def test_a_point_busy_for_a_moment_is_kept_from_its_quiet_measurement(tmp_path, monkeypatch, capsys):
    """Busy during both passes, quiet when measured again: quiet, the points marked as measured again."""
    said, seen = _install(tmp_path, monkeypatch, capsys, lambda key, attempt: 0.45 if attempt <= PASSES else 1.0)
    assert len(seen) == POINTS * (PASSES + 1)
    rec = load(tmp_path / "db.h5").records
    assert np.all(rec["noise"] == NOISE_RETRIED) and np.all(rec["cpu_share"] == 1.0)
    assert said == [f"verdict: quiet ({POINTS} of {POINTS} points were noisy at first and quiet when measured again)"]


def test_remeasuring_stops_at_its_budget(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "REMEASURE_BUDGET", 0.0)
    monkeypatch.setattr(timing, "cpu_share", lambda start, end: 0.45)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PROFILE))
    calls = []
    real = runner.measure
    monkeypatch.setattr(runner, "measure", lambda call, policy: (calls.append(1), real(call, policy))[1])
    assert cli.main(["--profile", str(tmp_path / "p.yaml"), "--db", str(tmp_path / "db.h5"), "--no-progress"]) == 0
    assert "verdict: busy" in capsys.readouterr().out
    assert len(calls) == POINTS * PASSES + 2 * 2                # + the call-overhead timings (routine x threads)


# -- the verdict and the noise per series, on made-up records ---------------------------------------

def _records(shares, spreads, routine="gemm", threads=1) -> np.ndarray:
    rec = np.zeros(len(shares), RECORD_DTYPE)
    rec["routine"], rec["backend"], rec["threads"], rec["dtype"] = routine, b"numpy-openblas", threads, b"float64"
    rec["pattern"], rec["x"], rec["run_id"], rec["reps"] = b"square", 16 * np.arange(1, len(shares) + 1), b"r", 5
    rec["t_median"] = rec["t_min"] = rec["flops"] = 1.0
    rec["k"] = 1e-10
    rec["t_q1"], rec["t_q3"] = 1.0 - np.asarray(spreads) / 2, 1.0 + np.asarray(spreads) / 2
    rec["cpu_share"] = shares
    rec["noise"] = [noise_bits(c, s) for c, s in zip(shares, spreads, strict=True)]
    return rec


def test_series_noise_and_a_spread_only_verdict(tmp_path):
    rec = np.concatenate([_records([1.0, 1.0, 0.99, 1.0], [0.1, 1.4, 1.6, 0.2]),
                          _records([1.0, 1.0], [0.0, 0.1], routine="potrf", threads=2)])
    noise = series_noise(rec)
    gemm = noise[("gemm", "numpy-openblas", 1, "square")]
    assert (gemm.points, gemm.checked, gemm.noisy, gemm.starved) == (4, 4, 2, 0)
    assert gemm.noisy_share == 0.5 and gemm.median_spread == pytest.approx(0.8)
    assert noise[("potrf", "numpy-openblas", 2, "square")].noisy == 0
    found = verdict(rec, {"profile": "quick"}, tmp_path / "x.h5")
    assert found.state == "noisy"
    assert found.lines[0].startswith("verdict: noisy: 2 of 6 points noisy in 1 series (gemm/square numpy-openblas 1t)")
    assert f"autotune-install --profile quick --db {tmp_path / 'x.h5'} --only gemm" in found.lines[1]


def test_a_verdict_names_the_series_with_most_noisy_points_and_counts_the_rest():
    parts = [_records([0.5] * n, [0.0] * n, routine=r) for n, r in
             [(1, "gemm"), (3, "potrf"), (2, "syrk"), (2, "trsm"), (1, "axpy"), (1, "gemv")]]
    found = verdict(np.concatenate(parts))
    assert found.state == "busy"
    assert ("in 6 series (potrf/square numpy-openblas 1t, syrk/square numpy-openblas 1t, trsm/square "
            "numpy-openblas 1t, axpy/square numpy-openblas 1t, and 2 more)") in found.lines[0]
    assert "--only" not in found.lines[1]                        # every routine is noisy: measure all again


def test_records_not_checked_are_named_beside_checked_ones(tmp_path):
    rec = np.concatenate([_records([1.0, 1.0], [0.0, 0.0]), _records([0.0], [0.0], routine="potrf")])
    assert verdict(rec).lines == ("verdict: quiet; 1 point measured before autotune checked their CPU not checked",)
    assert verdict(rec[:0]).lines == ()
    save(Database(records=rec[2:], run={"profile": "quick", "complete": True}), tmp_path / "old.h5")
    old = series_noise(load(tmp_path / "old.h5", check_machine=False).records)
    assert old[("potrf", "numpy-openblas", 1, "square")].checked == 0
    assert series_noise(rec[:0]) == {}
