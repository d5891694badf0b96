"""`autotune bench regress` as a CI gate: a stated, bounded threshold per case, `--fail-below`, exactly
`--rounds`, partial results on Ctrl-C (exit 130), JSON with machine, database and time, and a
JUnit XML report. Tiny gemm cases without a database (the tuned calls fall back); where a verdict
must not depend on this machine's load, the rounds' timer is replaced."""
from __future__ import annotations

import itertools
import json
import math
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autotune.benchmarks import regress
from autotune.cli import command as cli

BASELINES = Path(__file__).resolve().parents[1] / "bench" / "baselines"
GATE = "autotune bench regress:"


def _cli(*extra: str, sizes: tuple[str, ...] = ("16",)) -> int:
    return cli.main(["bench", "regress", "--sizes", *sizes, "--threads", "1", "--routines", "gemm", *extra])


def _fake_timer(monkeypatch, tuned: float = 1.0, reference: tuple[float, ...] = (1.0,), stop_at: int | None = None):
    """Replace the rounds' timer: every tuned call takes ``tuned`` seconds, the reference calls cycle
    through ``reference``; the ``stop_at``-th timed call (from 0) raises KeyboardInterrupt."""
    count, ref = itertools.count(), itertools.cycle(reference)

    def timed(fn) -> float:
        i = next(count)
        if i == stop_at:
            raise KeyboardInterrupt
        return tuned if i % 3 == 1 else next(ref)

    monkeypatch.setattr(regress, "timed", timed)


def _gate_lines(err: str) -> list[str]:
    """The command's own stderr lines (the fallback warning of the tuned calls left out)."""
    return [ln for ln in err.splitlines() if ln.startswith(GATE)]


def _doctor(path: Path, factor: float, out: Path, noise: float | None = None, first_only: bool = False) -> Path:
    """A copy of baseline ``path`` with its speed-ups times ``factor`` (and its recorded noise set)."""
    doc = json.loads(path.read_text())
    for r in doc["results"][:1] if first_only else doc["results"]:
        for key in [k for k in r if k.startswith("speedup_")]:
            r[key] *= factor
        if noise is not None:
            r["noise"] = noise
    out.write_text(json.dumps(doc))
    return out


@pytest.fixture
def saved(tmp_path) -> Path:
    """A real three-round baseline of gemm 16 on this machine."""
    base = tmp_path / "base.json"
    assert _cli("--rounds", "3", "--save-baseline", str(base)) == 0
    return base


# The threshold rule, on made-up results.

@pytest.mark.parametrize(("run_noise", "base_noise", "expect"), [
    (0.0, 0.0, 0.10), (0.03, 0.04, 0.10), (0.08, 0.07, 0.15), (0.5, 0.0, 0.25), (0.01, 12.0, 0.25),
    (math.inf, 0.0, 0.25), (math.nan, 0.0, 0.25),
])
def test_the_threshold_is_the_noise_between_the_fixed_minimum_and_the_cap(run_noise, base_noise, expect):
    assert regress.threshold({"noise": run_noise}, {"noise": base_noise}, regress.Rule()) == pytest.approx(expect)


def test_a_threshold_above_the_cap_is_the_fixed_one_the_user_gave():
    assert regress.threshold({"noise": 0.9}, {"noise": 0.9}, regress.Rule(threshold=0.4)) == pytest.approx(0.4)
    assert regress.threshold({"noise": 0.9}, {"noise": 0.9}, regress.Rule(0.05, 0.0)) == pytest.approx(0.05)


def test_a_baseline_without_noise_field_counts_half_its_relative_iqr():
    base = {"speedup_median": 2.0, "speedup_q1": 1.6, "speedup_q3": 2.4}
    assert regress.baseline_spread(base) == pytest.approx(0.2)
    assert regress.threshold({"noise": 0.02}, base, regress.Rule()) == pytest.approx(0.22)


def test_judge_fails_a_tripled_baseline_even_when_both_sides_claim_noise():
    r = {"speedup_median": 1.0, "noise": 0.6}
    reasons = regress.judge(r, {"speedup_median": 3.0, "speedup_q1": 2.5, "speedup_q3": 3.5, "noise": 4.0},
                            regress.Rule(fail_below=0.95))
    assert r["threshold"] == pytest.approx(0.25) and r["regression"] and not r["below"]
    assert r["status"] == "failed" and reasons == ["ratio 1.000 vs baseline 3.000 (-66.7%, threshold -25.0%)"]


def test_judge_fail_below_and_an_interrupted_case():
    r = {"speedup_median": 0.5, "noise": 0.0}
    assert regress.judge(r, None, regress.Rule(fail_below=0.95)) == ["ratio 0.500 below --fail-below 0.95"]
    assert "change" not in r and r["below"] and r["status"] == "failed"
    cut = {"speedup_median": 0.5, "noise": 0.0, "interrupted": True}
    assert regress.judge(cut, None, regress.Rule(fail_below=0.95)) == [] and cut["status"] == "interrupted"


# Against a doctored baseline, end to end.

def test_a_doctored_baseline_fails_with_one_line_and_exit_1(saved, tmp_path, capsys):
    """Speed-ups 10x this run's, and a recorded noise of 500% that would otherwise excuse them."""
    doctored = _doctor(saved, 10.0, tmp_path / "doctored.json", noise=5.0)
    capsys.readouterr()
    assert _cli("--rounds", "3", "--baseline", str(doctored)) == 1
    captured = capsys.readouterr()
    (reason,) = _gate_lines(captured.err)
    assert reason.startswith("autotune bench regress: error: 1 of 1 case(s) failed (1 regression(s)")
    assert "first gemm 16x16x16 t=1: ratio" in reason and "threshold -25.0%" in reason
    assert "threshold per case: max(10.0%, min(25.0%, run noise + baseline spread))" in captured.out
    assert "FAIL gemm 16x16x16 t=1: ratio" in captured.out


def test_a_noisy_run_cannot_wave_a_tripled_baseline_through(monkeypatch, tmp_path, capsys):
    """A/A ratios of 0.04 and 25 (half-IQR about 100% of their median) and a baseline whose speed-ups were tripled."""
    _fake_timer(monkeypatch, tuned=1.0, reference=(0.2, 5.0))
    base = tmp_path / "base.json"
    assert _cli("--rounds", "8", "--save-baseline", str(base)) == 0
    assert json.loads(base.read_text())["results"][0]["noise"] > 0.9
    tripled = _doctor(base, 3.0, tmp_path / "tripled.json")
    capsys.readouterr()
    assert _cli("--rounds", "8", "--baseline", str(tripled)) == 1
    captured = capsys.readouterr()
    assert "-66.7% (threshold -25.0%) REGRESSION" in captured.out
    assert len(_gate_lines(captured.err)) == 1


def test_its_own_baseline_passes(monkeypatch, tmp_path, capsys):
    _fake_timer(monkeypatch, tuned=1.0, reference=(1.0, 1.1))
    base = tmp_path / "base.json"
    assert _cli("--rounds", "4", "--save-baseline", str(base)) == 0
    assert _cli("--rounds", "4", "--baseline", str(base)) == 0
    captured = capsys.readouterr()
    assert "0 regression(s) in 1 case(s) compared with" in captured.out and not _gate_lines(captured.err)


# --fail-below.

def test_fail_below_fails_where_the_tuned_call_is_slower(monkeypatch, tmp_path, capsys):
    _fake_timer(monkeypatch, tuned=2.0, reference=(1.0,))
    assert _cli("--rounds", "3", "--fail-below", "0.95", "--out", str(tmp_path / "r.json")) == 1
    captured = capsys.readouterr()
    assert "FAIL gemm 16x16x16 t=1: ratio 0.500 below --fail-below 0.95" in captured.out
    assert "| BELOW --fail-below 0.95" in captured.out
    (reason,) = _gate_lines(captured.err)
    assert "1 of 1 case(s) below --fail-below 0.95" in reason
    (r,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert r["below"] and r["fail_below"] == 0.95 and r["status"] == "failed"


def test_fail_below_passes_where_the_tuned_call_keeps_up(monkeypatch, capsys):
    _fake_timer(monkeypatch, tuned=1.0, reference=(1.0,))
    assert _cli("--rounds", "3", "--fail-below", "0.95") == 0
    assert "0 of 1 case(s) below --fail-below 0.95" in capsys.readouterr().out


def test_fail_below_out_of_reach_fails_a_real_run(capsys):
    assert _cli("--rounds", "3", "--fail-below", "1e6") == 1
    assert len(_gate_lines(capsys.readouterr().err)) == 1


# --rounds, --seconds and bad arguments.

def test_rounds_runs_exactly_the_rounds_asked_for(tmp_path):
    out = tmp_path / "r.json"
    assert _cli("--rounds", "5", "--out", str(out), sizes=("16", "24")) == 0
    assert [r["pairs"] for r in json.loads(out.read_text())["results"]] == [5, 5]


def test_seconds_alone_fills_time_from_the_minimum(tmp_path):
    out = tmp_path / "r.json"
    assert _cli("--seconds", "0", "--out", str(out)) == 0
    assert json.loads(out.read_text())["results"][0]["pairs"] == regress.MIN_ROUNDS


@pytest.mark.parametrize(("argv", "says"), [
    (["--rounds", "3", "--seconds", "1"], "give one of them"),
    (["--threshold", "1.5"], "relative drops"),
    (["--max-threshold", "-0.1"], "relative drops"),
    (["--fail-below", "0"], "positive ratio"),
    (["--fail-below", "nan"], "positive ratio"),
    (["--junit", "no/such/dir/r.xml"], "--junit no/such/dir/r.xml: directory"),
])
def test_bad_gate_arguments_are_one_line_and_exit_2(capsys, argv, says):
    assert _cli(*argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune bench regress: error:") and says in lines[0]
    assert captured.out == ""


def test_a_baseline_recording_an_impossible_noise_is_damaged(saved, tmp_path, capsys):
    bad = _doctor(saved, 1.0, tmp_path / "bad.json", noise=-1.0)
    assert _cli("--rounds", "3", "--baseline", str(bad)) == 2
    assert "damaged" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.name for p in BASELINES.glob("*.json")))
def test_the_curated_baselines_still_load(name):
    doc = json.loads((BASELINES / name).read_text())
    results, _ = regress.load_baseline(str(BASELINES / name), doc.get("fingerprint") or {})
    assert len(results) == len(doc["results"])


# Ctrl-C.

def _interrupted(*argv: str) -> int:
    try:
        return _cli(*argv, sizes=("16", "24", "32"))
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped as a traceback")


def test_ctrl_c_mid_case_writes_partial_results_and_exits_130(monkeypatch, tmp_path, capsys):
    """Four rounds (12 timed calls) per case, stopped in the third case's second round."""
    _fake_timer(monkeypatch, stop_at=2 * 12 + 4)
    out, xml = tmp_path / "r.json", tmp_path / "r.xml"
    assert _interrupted("--rounds", "4", "--fail-below", "0.95", "--out", str(out), "--junit", str(xml)) == 130
    (reason,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert reason == f"{GATE} error: interrupted after 2 of 3 case(s); partial results in {out}, {xml}"
    doc = json.loads(out.read_text())
    assert doc["status"] == "interrupted" and doc["interrupted"] and doc["summary"]["complete"] == 2
    assert [(r["pairs"], r["status"]) for r in doc["results"]] == [(4, "passed"), (4, "passed"), (1, "interrupted")]
    suite = ET.parse(xml).getroot().find("testsuite")
    assert [suite.get(k) for k in ("tests", "errors", "skipped", "failures")] == ["4", "1", "1", "0"]
    assert suite.find("testcase[@name='run']/error").get("message") == "interrupted after 2 of 3 case(s)"


def test_ctrl_c_between_cases_keeps_the_cases_done_and_the_old_baseline(monkeypatch, tmp_path, capsys):
    """Stopped at the first timed call of the second case; the baseline to save is left as it was."""
    _fake_timer(monkeypatch, stop_at=12)
    out, base = tmp_path / "r.json", tmp_path / "base.json"
    base.write_text("{}")
    assert _interrupted("--rounds", "4", "--out", str(out), "--save-baseline", str(base)) == 130
    assert [r["case"] for r in json.loads(out.read_text())["results"]] == ["gemm 16x16x16 t=1"]
    assert f"interrupted after 1 of 3 case(s); partial results in {out}" in capsys.readouterr().err
    assert base.read_text() == "{}"


# Machine-readable output.

def test_json_names_machine_database_time_options_and_thresholds(saved, tmp_path, _private_default_db):
    out = tmp_path / "r.json"
    assert _cli("--rounds", "3", "--baseline", str(saved), "--threshold", "0.5", "--out", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["hostname"] and doc["cpu"] == doc["fingerprint"]["cpu_model"] and doc["fingerprint"]["numpy"]
    assert doc["database"] == {"path": str(_private_default_db), "status": "fallback",
                               "reason": f"no database at {_private_default_db}"}
    stamp = datetime.fromisoformat(doc["timestamp"])
    assert stamp.utcoffset() == timedelta(0) and abs(datetime.now(stamp.tzinfo) - stamp) < timedelta(minutes=5)
    assert doc["options"]["rounds"] == 3 and doc["options"]["baseline"] == str(saved)
    assert doc["rule"] == {"threshold": 0.5, "max_threshold": 0.25, "fail_below": None,
                           "formula": "max(threshold, min(max_threshold, run noise + baseline spread))"}
    assert doc["status"] == "passed" and doc["summary"]["compared"] == 1
    (r,) = doc["results"]
    assert r["threshold"] == 0.5 and r["status"] == "passed" and r["failures"] == []


def test_junit_is_well_formed_with_one_testcase_per_case(monkeypatch, tmp_path, capsys):
    _fake_timer(monkeypatch, tuned=0.002, reference=(0.002,))
    base, xml = tmp_path / "base.json", tmp_path / "report.xml"
    assert _cli("--rounds", "3", "--save-baseline", str(base), sizes=("16", "24")) == 0
    doctored = _doctor(base, 10.0, tmp_path / "doctored.json", first_only=True)
    assert _cli("--rounds", "3", "--baseline", str(doctored), "--junit", str(xml), sizes=("16", "24")) == 1
    root = ET.fromstring(xml.read_bytes())
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("2", "1")
    (suite,) = root.findall("testsuite")
    assert [suite.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["2", "1", "0", "0"]
    datetime.fromisoformat(suite.get("timestamp"))
    float(suite.get("time"))
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["baseline"] == str(doctored) and props["threshold"] == "0.1" and props["database_status"] == "fallback"
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("autotune.bench.regress.gemm", "gemm 16x16x16 t=1"), ("autotune.bench.regress.gemm", "gemm 24x24x24 t=1")]
    assert all(float(c.get("time")) == pytest.approx(0.002) for c in cases)
    (failure,) = cases[0].findall("failure")
    assert failure.get("type") == "regression"
    assert failure.get("message") == "gemm 16x16x16 t=1: ratio 1.000 vs baseline 10.000 (-90.0%, threshold -10.0%)"
    assert cases[1].find("failure") is None and "threshold -10.0%" in cases[1].find("system-out").text
