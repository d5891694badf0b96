"""The install probe: plan -> measurements -> database, filters, profile errors, Ctrl-C and resume."""
from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from autotune.install_probe import ProbeError, ProfileError, cli, load_profile, run_probe
from autotune.install_probe import runner as runner_mod
from autotune.install_probe.operands import Call
from autotune.install_probe.profile import Timing, parse_profile
from autotune.install_probe.timing import measure

from autotune.core.routines import flops_of
from autotune.db import load

BACKENDS = ["scipy-openblas", "numpy-openblas"]
TINY_TIMING = {"min_reps": 1, "max_reps": 2, "point_budget_seconds": 0.01, "min_sample_seconds": 1e-5}
TINY = {
    "name": "tiny",
    "backends": BACKENDS,
    "threads": [1],
    "timing": TINY_TIMING,
    "measure": [
        {"routines": ["gemm", "gemv", "axpy"], "pattern": "square", "sizes": [8, 16, 32]},
        {"routines": ["gemm", "trsm", "syrk"], "pattern": "panel", "sizes": [16, 32], "params": [4, 8]},
        {"routines": ["gemv"], "pattern": "segment", "sizes": [16, 32], "params": [0.25, 0.75]},
    ],
}


def tiny(**changes) -> dict:
    data = copy.deepcopy(TINY)
    data.update(changes)
    return data


def planned(data: dict, only: set[str] | None = None) -> set[tuple]:
    """The points a profile asks for, spelled out by hand: (routine, backend, threads, dtype,
    pattern, param, x)."""
    only = only or set()
    want_r = {o for o in only if o in {"gemm", "syrk", "trsm", "gemv", "axpy", "add", "potrf", "potf2",
                                       "getrf"}}
    want_b = only - want_r
    keys = set()
    for m in data["measure"]:
        for b in m.get("backends", data["backends"]):
            for t in m.get("threads", data["threads"]):
                for r in m["routines"]:
                    for x in m["sizes"]:
                        for p in m.get("params", [0.0]):
                            if (not want_r or r in want_r) and (not want_b or b in want_b):
                                keys.add((r, b, t, "float64", m.get("pattern", "square"), float(p), x))
    return keys


def db_keys(records) -> list[tuple]:
    """Keys of the rows as str/int/float tuples (a list: duplicates stay visible)."""
    return [(r["routine"].decode(), r["backend"].decode(), int(r["threads"]), r["dtype"].decode(),
             r["pattern"].decode(), float(r["param"]), int(r["x"])) for r in records]


def by_key(records) -> dict[tuple, np.void]:
    return dict(zip(db_keys(records), records, strict=True))


def write_yaml(path, data) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One complete run of the tiny profile, shared by the read-only checks."""
    path = tmp_path_factory.mktemp("probe") / "db.h5"
    result = run_probe(parse_profile(tiny(), "tiny.yaml"), path, progress=False)
    return result, load(path)


# -- a complete run ---------------------------------------------------------------------------------

def test_run_writes_planned_points(tiny_run):
    result, db = tiny_run
    keys = db_keys(db.records)
    assert len(keys) == len(set(keys)), "duplicate rows"
    assert set(keys) == planned(TINY)
    assert len(keys) == 3 * 2 * 3 + 3 * 2 * 2 * 2 + 1 * 2 * 2 * 2
    assert result.complete and result.failures == {} and result.skipped_backends == {}
    assert result.measured == len(keys)
    assert db.run["complete"] is True and db.run["profile"] == "tiny"
    assert set(db.records["run_id"]) == {db.run["run_id"].encode()}
    assert set(BACKENDS) <= set(db.backends)
    # the panel and segment blocks carry their params, square ones param 0
    params = {(k[4], k[5]) for k in keys}
    assert params == {("square", 0.0), ("panel", 4.0), ("panel", 8.0), ("segment", 0.25), ("segment", 0.75)}


def test_run_values_are_sane(tiny_run):
    _, db = tiny_run
    r = db.records
    for name in ("k", "t_median", "t_min", "t_q1", "t_q3", "flops"):
        assert np.all(np.isfinite(r[name])), name
        assert np.all(r[name] > 0), name
    assert np.all(r["t_call"] >= 0)
    assert np.all(r["t_min"] <= r["t_q1"])
    assert np.all(r["t_q1"] <= r["t_median"])
    assert np.all(r["t_median"] <= r["t_q3"])
    assert np.all((r["reps"] >= 1) & (r["reps"] <= TINY_TIMING["max_reps"]))
    for row in r:
        routine, pattern = row["routine"].decode(), row["pattern"].decode()
        fl = flops_of(routine, pattern, int(row["x"]), float(row["param"]))[0]
        assert row["flops"] == pytest.approx(fl)
        # k excludes the per-call overhead but never drops below half the raw time per flop
        raw = row["t_median"] / row["flops"]
        assert 0.5 * raw * (1 - 1e-12) <= row["k"] <= raw * (1 + 1e-12)
        assert row["k"] == pytest.approx(max(row["t_median"] - row["t_call"], 0.5 * row["t_median"]) / fl)


def test_second_run_replaces_points(tmp_path):
    path = tmp_path / "db.h5"
    small = tiny(measure=[{"routines": ["axpy"], "pattern": "square", "sizes": [8, 16]}])
    first = run_probe(parse_profile(small, "small"), path, progress=False)
    run1 = load(path).run["run_id"]
    second = run_probe(parse_profile(small, "small"), path, progress=False)
    db = load(path)
    assert first.complete and second.complete
    assert db.run["run_id"] != run1
    keys = db_keys(db.records)
    assert len(keys) == len(set(keys)) == 4
    assert set(db.records["run_id"]) == {db.run["run_id"].encode()}


# -- --only ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("only", [["gemm"], ["scipy-openblas"], ["gemm,numpy-openblas"], ["gemv", "axpy"]])
def test_only_filters_via_cli(tmp_path, capsys, only):
    prof = write_yaml(tmp_path / "tiny.yaml", tiny())
    path = tmp_path / "db.h5"
    code = cli.main(["--profile", prof, "--db", str(path), "--no-progress", "--only", *only])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "complete" in out
    tokens = {t for tok in only for t in tok.split(",")}
    keys = db_keys(load(path).records)
    assert len(keys) == len(set(keys))
    assert set(keys) == planned(TINY, tokens)
    assert keys  # the filter left something


def test_only_routine_via_api(tmp_path):
    path = tmp_path / "db.h5"
    result = run_probe(parse_profile(tiny(), "tiny"), path, only={"trsm"}, progress=False)
    db = load(path)
    assert {k[0] for k in db_keys(db.records)} == {"trsm"}
    assert set(db_keys(db.records)) == planned(TINY, {"trsm"})
    assert result.measured == len(db.records) == 2 * 2 * 2


def test_unknown_only_token(tmp_path, capsys):
    prof = write_yaml(tmp_path / "tiny.yaml", tiny())
    path = tmp_path / "db.h5"
    code = cli.main(["--profile", prof, "--db", str(path), "--no-progress", "--only", "gemm", "frobnicate"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error:" in err and "frobnicate" in err
    assert not path.exists()
    with pytest.raises(ProbeError, match="frobnicate"):
        run_probe(parse_profile(tiny(), "tiny"), path, only={"frobnicate"}, progress=False)


# -- profile errors -------------------------------------------------------------------------------

def _set(path, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return data
    return change


PROFILE_ERRORS = {
    "unknown routine": (_set(["measure", 0, "routines"], ["gemm", "frobnicate"]),
                        ["measure[0].routines", "'frobnicate'"]),
    "unknown backend": (_set(["backends"], ["scipy-openblas", "nope-blas"]), ["backends", "'nope-blas'"]),
    "unknown block backend": (_set(["measure", 2, "backends"], ["nope-blas"]),
                              ["measure[2].backends", "'nope-blas'"]),
    "unknown pattern": (_set(["measure", 1, "pattern"], "zigzag"), ["measure[1].pattern", "'zigzag'"]),
    "routine not in pattern": (_set(["measure", 2, "routines"], ["axpy"]), ["measure[2].routines", "'axpy'"]),
    "zero size": (_set(["measure", 0, "sizes"], [8, 0]), ["measure[0].sizes", "0 is not a positive"]),
    "negative size": (_set(["measure", 1, "sizes"], [-16]), ["measure[1].sizes", "-16"]),
    "string size": (_set(["measure", 0, "sizes"], ["big"]), ["measure[0].sizes", "'big'"]),
    "params on square": (_set(["measure", 0, "params"], [4, 8]),
                         ["measure[0].params", "takes no parameters"]),
    "params missing on panel": (lambda d: (d["measure"][1].pop("params"), d)[1],
                                ["measure[1].params", "needs"]),
    "non-positive param": (_set(["measure", 2, "params"], [0.5, 0]), ["measure[2].params", "0"]),
    "zero threads": (_set(["threads"], [0]), ["threads", "0"]),
    "unknown top key": (_set(["sizes"], [1]), ["unknown key", "'sizes'"]),
    "unknown block key": (_set(["measure", 0, "size"], [8]), ["measure[0]", "'size'"]),
    "unknown timing key": (_set(["timing", "reps"], 3), ["timing", "'reps'"]),
    "negative timing": (_set(["timing", "point_budget_seconds"], -1.0), ["timing.point_budget_seconds"]),
    "min above max reps": (_set(["timing", "min_reps"], 5), ["timing", "min_reps 5 > max_reps 2"]),
    "empty measure": (_set(["measure"], []), ["'measure'"]),
}


@pytest.mark.parametrize("case", sorted(PROFILE_ERRORS))
def test_profile_errors_name_the_key(tmp_path, capsys, case):
    change, fragments = PROFILE_ERRORS[case]
    data = change(tiny())
    with pytest.raises(ProfileError) as info:
        parse_profile(data, "my-profile.yaml")
    msg = str(info.value)
    assert msg.startswith("my-profile.yaml: "), msg
    for frag in fragments:
        assert frag in msg, (frag, msg)
    # the same from a file, through load_profile and the CLI
    prof = write_yaml(tmp_path / "bad.yaml", data)
    with pytest.raises(ProfileError) as info:
        load_profile(prof)
    assert prof in str(info.value)
    for frag in fragments:
        assert frag in str(info.value)
    db = tmp_path / "db.h5"
    code = cli.main(["--profile", prof, "--db", str(db), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error:" in err and fragments[0] in err
    assert not db.exists()


@pytest.mark.parametrize("case", ["malformed", "missing", "not a mapping"])
def test_profile_file_errors(tmp_path, capsys, case):
    path = tmp_path / "profile.yaml"
    if case == "malformed":
        path.write_text("name: broken\nmeasure: [ {routines: [gemm], sizes: [8\n")
        fragment = "malformed YAML"
    elif case == "not a mapping":
        path.write_text("- gemm\n- syrk\n")
        fragment = "expected a mapping"
    else:
        fragment = "no such built-in profile"
    with pytest.raises(ProfileError) as info:
        load_profile(str(path))
    assert str(path) in str(info.value) and fragment in str(info.value)
    code = cli.main(["--profile", str(path), "--db", str(tmp_path / "db.h5"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err and str(path) in err


def test_builtin_profiles_parse():
    for name in ("quick", "standard", "full"):
        prof = load_profile(name)
        assert prof.name == name and prof.measures


def test_standard_profiles_measure_every_block_the_distributed_selector_tries():
    """The distributed models look k up at the plan's block (Cholesky's ``panel`` calls, SUMMA's
    ``rankb`` updates); a block beyond the measured params is clamped to the largest one, which
    read trsm 40% slow at b = 512 (session 23)."""
    from autotune.core.families import BLOCKS

    for name in ("standard", "full"):
        measured = {}
        for m in load_profile(name).measures:
            if m.pattern in ("panel", "rankb"):
                for routine in m.routines:
                    measured.setdefault((routine, m.pattern), set()).update(m.params)
        assert {("trsm", "panel"), ("syrk", "panel"), ("gemm", "panel"), ("gemm", "rankb")} <= set(measured)
        for key, params in measured.items():
            assert set(BLOCKS) <= params, (name, key)


# -- interruption and resume ------------------------------------------------------------------------

def _interrupt_on_call(monkeypatch, n: int) -> list:
    real = runner_mod.measure
    calls = []

    def measure(call, policy):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(call, policy)

    monkeypatch.setattr(runner_mod, "measure", measure)
    return calls


def test_interrupt_then_resume(tmp_path, monkeypatch):
    path = tmp_path / "db.h5"
    profile = parse_profile(tiny(), "tiny")
    plan = planned(TINY)
    with monkeypatch.context() as m:
        calls = _interrupt_on_call(m, 14)
        result = run_probe(profile, path, progress=False)
    assert len(calls) == 14
    assert result.complete is False
    db = load(path)
    assert db.run["complete"] is False and db.run["profile"] == "tiny"
    before = by_key(db.records)
    assert 0 < len(before) < len(plan)
    assert len(before) == len(db.records) == result.measured
    assert set(before) < plan
    run_id = db.run["run_id"]

    # resume with the real measure; record which points get built (size-1 builds time call overhead)
    real_build = runner_mod.build
    built = []

    def spy_build(be, routine, pattern, x, param, rng):
        if x != 1:
            built.append((routine, be.name, 1, "float64", pattern, float(param), int(x)))
        return real_build(be, routine, pattern, x, param, rng)

    with monkeypatch.context() as m:
        m.setattr(runner_mod, "build", spy_build)
        resumed = run_probe(profile, path, resume=True, progress=False)
    assert resumed.complete is True
    db = load(path)
    assert db.run["complete"] is True and db.run["run_id"] == run_id
    keys = db_keys(db.records)
    assert len(keys) == len(set(keys)), "duplicate rows after resume"
    assert set(keys) == plan
    assert resumed.measured == len(plan)
    assert set(db.records["run_id"]) == {run_id.encode()}
    # the points measured before the interruption are kept unchanged ...
    after = by_key(db.records)
    changed = [k for k, row in before.items() if after[k]["t_median"] != row["t_median"]]
    assert changed == [], (f"--resume overwrote {len(changed)} of the {len(before)} points measured "
                           "before the interruption (it re-measured them)")
    # ... because only the missing points are measured again (the cheap ones twice: second pass)
    assert set(built) == plan - set(before), (
        f"--resume re-measured {len(set(built) & set(before))} of the {len(before)} points "
        "already in the database")


def test_resume_without_database(tmp_path, capsys):
    path = tmp_path / "db.h5"
    with pytest.raises(ProbeError, match="no database"):
        run_probe(parse_profile(tiny(), "tiny"), path, resume=True, progress=False)
    assert not path.exists()
    prof = write_yaml(tmp_path / "tiny.yaml", tiny())
    assert cli.main(["--profile", prof, "--db", str(path), "--resume", "--no-progress"]) == 2
    assert "error:" in capsys.readouterr().err


def test_resume_after_complete_run(tmp_path, capsys):
    path = tmp_path / "db.h5"
    small = tiny(measure=[{"routines": ["axpy"], "pattern": "square", "sizes": [8]}])
    assert run_probe(parse_profile(small, "small"), path, progress=False).complete
    before = path.read_bytes()
    with pytest.raises(ProbeError, match="no interrupted run"):
        run_probe(parse_profile(small, "small"), path, resume=True, progress=False)
    assert path.read_bytes() == before
    prof = write_yaml(tmp_path / "small.yaml", small)
    assert cli.main(["--profile", prof, "--db", str(path), "--resume", "--no-progress"]) == 2
    assert "error:" in capsys.readouterr().err


def test_resume_other_profile_refused(tmp_path, monkeypatch):
    path = tmp_path / "db.h5"
    with monkeypatch.context() as m:
        _interrupt_on_call(m, 3)
        assert not run_probe(parse_profile(tiny(), "tiny"), path, progress=False).complete
    other = tiny(name="other")
    with pytest.raises(ProbeError, match="'other'"):
        run_probe(parse_profile(other, "other"), path, resume=True, progress=False)


# -- the real CLI, interrupted by SIGINT -------------------------------------------------------------

SLOW_TINY = {
    "name": "slow-tiny",
    "backends": BACKENDS,
    "threads": [1],
    # never "stable" (rel_tol tiny), long samples of mid-size gemm: about 14 s of work in total
    "timing": {"min_reps": 3, "max_reps": 3, "rel_tol": 1e-9, "min_sample_seconds": 0.1,
               "point_budget_seconds": 0.5},
    "measure": [{"routines": ["gemm"], "pattern": "square", "sizes": [96, 160, 224, 288]}],
}


def _cli(*args, **kw):
    # SIGINT must reach Python's default handler even if this test runs in a background job
    return subprocess.Popen([sys.executable, "-m", "autotune.install_probe.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def _finish(proc, timeout=60):
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _records_in(path) -> int:
    """Points in the checkpointed database (readers never fail while the probe writes)."""
    try:
        return len(load(path).records)
    except Exception:
        return 0


def test_cli_sigint_then_resume(tmp_path):
    prof = write_yaml(tmp_path / "slow.yaml", SLOW_TINY)
    path = tmp_path / "db.h5"
    proc = _cli("--profile", prof, "--db", str(path), "--no-progress")
    try:
        deadline = time.monotonic() + 120        # a poll: only a busy host's slow start waits this long
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.exists(), "the probe never wrote its first checkpoint"
        while proc.poll() is None and time.monotonic() < deadline and not _records_in(path):
            time.sleep(0.1)                  # a loaded machine may take a while for the first point
        assert proc.poll() is None, "the probe finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in out and "--resume" in err
    db = load(path)
    plan = planned(SLOW_TINY)
    assert db.run["complete"] is False
    # some points kept (all of them when the stop fell in a later pass: 8 of 8 once in a loaded run)
    assert 0 < len(db.records) <= len(plan)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]

    proc = _cli("--profile", prof, "--db", str(path), "--no-progress", "--resume")
    out, err = _finish(proc)
    assert proc.returncode == 0, (out, err)
    assert "complete" in out
    db = load(path)
    keys = db_keys(db.records)
    assert db.run["complete"] is True
    assert len(keys) == len(set(keys)) and set(keys) == plan
    assert np.all(np.isfinite(db.records["k"])) and np.all(db.records["k"] > 0)
    assert math.isfinite(float(db.records["t_median"].sum()))


# -- timing ------------------------------------------------------------------------------------------

def test_measure_samples_last_min_sample_seconds(monkeypatch):
    """measure(): "fast out-of-place calls are batched so each sample lasts at least
    min_sample_seconds". A cold first call (10x slower than the steady state, as real BLAS calls
    are: caches, thread start-up) must not shrink the batches. The calls advance a fake clock by
    their cost, so the machine's load moves nothing."""
    from types import SimpleNamespace

    from autotune.install_probe import timing as timing_mod

    clock = [0.0]
    monkeypatch.setattr(timing_mod, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    durations = []
    state = {"first": True}

    def run(repeat=1):
        if state["first"]:
            state["first"] = False
            clock[0] += 1e-3  # cold warm-up call
        else:
            clock[0] += 1e-4 * repeat  # steady state: 0.1 ms per call
            durations.append(1e-4 * repeat)

    policy = Timing(min_reps=3, max_reps=3, rel_tol=1e-9, min_sample_seconds=0.02, point_budget_seconds=1.0)
    sample = measure(Call(run), policy)
    assert sample.reps == 3 and len(durations) >= 3  # calibration batches may precede the samples
    assert sample.median == pytest.approx(1e-4)
    short = [d for d in durations[-3:] if d < policy.min_sample_seconds]
    assert short == [], (f"samples of {[f'{d * 1e3:.2f} ms' for d in durations]} are shorter than "
                         f"min_sample_seconds = {policy.min_sample_seconds * 1e3:.0f} ms: the batch size is "
                         "derived from the cold warm-up call alone")


def test_passes_keep_each_points_lower_median_pass(tmp_path, monkeypatch):
    """timing.passes re-times the points shorter than repass_seconds, alternately in reverse order,
    and keeps each point's lower-median pass (the fastest of two); longer points are measured once."""
    from autotune.install_probe.timing import Sample

    order, clock = [], iter([3.0, 1.0, 2.0, 5.0, 9.0, 4.0, 8.0, 6.0, 7.0] + [1.0] * 100)

    def fake_measure(call, policy):
        t = next(clock) * 1e-3
        order.append(call.size)
        return Sample(t, t, t, t, 1)

    def fake_build(be, routine, pattern, x, param, rng):
        call = Call(lambda repeat=1: None)
        call.size = x
        return call

    monkeypatch.setattr(runner_mod, "measure", fake_measure)
    monkeypatch.setattr(runner_mod, "build", fake_build)
    monkeypatch.setattr(runner_mod, "call_overhead", lambda *a: 0.0)
    data = tiny(backends=["scipy-openblas"],
                measure=[{"routines": ["axpy"], "pattern": "square", "sizes": [8, 16, 32]}],
                timing={**TINY_TIMING, "passes": 3, "repass_seconds": 0.004})
    run_probe(parse_profile(data, "passes"), tmp_path / "db.h5", progress=False)
    # pass 1 ascending: 3, 1, 2 ms; pass 2 reversed: 32 -> 5, 16 -> 9, 8 -> 4; pass 3 ascending: 8, 16, 32
    assert order == [8, 16, 32, 32, 16, 8, 8, 16, 32]
    rec = load(tmp_path / "db.h5").records
    got = {int(r["x"]): float(r["t_median"]) for r in rec}
    assert got == pytest.approx({8: 4e-3, 16: 6e-3, 32: 5e-3})      # medians of (3,4,8), (1,9,6), (2,5,7)
    # two passes keep the faster
    order.clear()
    clock = iter([3.0, 1.0, 2.0, 5.0, 0.5, 4.0])
    data["timing"]["passes"] = 2
    run_probe(parse_profile(data, "passes"), tmp_path / "db1.h5", progress=False)
    got = {int(r["x"]): float(r["t_median"]) for r in load(tmp_path / "db1.h5").records}
    assert got == pytest.approx({8: 3e-3, 16: 0.5e-3, 32: 2e-3})
    # with a repass threshold below every point, one pass only
    order.clear()
    clock = iter([3.0, 1.0, 2.0] * 10)
    data["timing"]["repass_seconds"] = 1e-4
    run_probe(parse_profile(data, "passes"), tmp_path / "db2.h5", progress=False)
    assert order == [8, 16, 32]


@pytest.mark.parametrize("order", ["C", "F"])
def test_spd_matrix_is_symmetric_positive_definite(order):
    """The BLAS-free SPD operand (validation, benchmarks) factors, is symmetric and has the asked layout."""
    from autotune.install_probe.operands import spd_matrix

    a = spd_matrix(np.random.default_rng(3), 57, order=order)
    assert a.shape == (57, 57) and a.flags[f"{order}_CONTIGUOUS"] and a.ctypes.data % 64 == 0
    np.testing.assert_array_equal(a, a.T)
    assert np.linalg.eigvalsh(a).min() > 1.0
