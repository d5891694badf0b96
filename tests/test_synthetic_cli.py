"""``autotune synthetic`` arguments and spec files: every bad one is one line on stderr and exit 2,
checked before any work (in-process: each case is milliseconds)."""
from __future__ import annotations

from importlib import resources

import pytest
import yaml

from autotune.cli import command as cli

CASE = str(resources.files("autotune.configs") / "synthetic" / "case1.yaml")


def status(argv: list[str]) -> int:
    """The exit status of ``autotune ARGV`` run in-process (argparse's errors exit)."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "warning" not in line]


@pytest.mark.parametrize("command", ["check", "tune", "run"])
@pytest.mark.parametrize("scale", ["0", "-1", "nan", "inf", "-inf", "two"])
def test_scale_must_be_finite_and_positive(capsys, command, scale):
    assert status(["synthetic", command, CASE, f"--scale={scale}"]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "--scale" in err[0] and "finite number > 0" in err[0], err


@pytest.mark.parametrize("option", ["--processors", "--hosts"])
@pytest.mark.parametrize("value", ["0", "-3", "1025", "1.5"])
def test_processors_and_hosts_must_be_positive_counts(capsys, option, value):
    assert status(["synthetic", "tune", CASE, f"{option}={value}"]) == 2
    err = errors(capsys)
    assert len(err) == 1 and option in err[0] and "from 1 to 1024" in err[0], err
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf"])
def test_run_timeout_must_be_finite_and_positive(capsys, timeout):
    assert status(["synthetic", "run", CASE, f"--timeout={timeout}"]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "--timeout" in err[0], err


@pytest.mark.parametrize("where", ["missing/x.yaml", "."])
def test_out_that_cannot_be_written_fails_before_tuning(tmp_path, capsys, where):
    out = tmp_path / where
    assert status(["synthetic", "tune", CASE, "--out", str(out)]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "--out" in err[0], err
    assert "predicted" not in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:communication parameters unavailable")
def test_tune_out_writes_a_spec_check_accepts(tmp_path, capsys):
    out = tmp_path / "best.yaml"
    assert status(["synthetic", "tune", CASE, "--processors", "8", "--db", str(tmp_path / "db"),
                   "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["workers"]
    capsys.readouterr()
    assert status(["synthetic", "check", str(out)]) == 0


@pytest.mark.parametrize("raw, words", [
    (b"name: \xff\n", "not UTF-8"), (b"a: " + b"[" * 3000 + b"]" * 3000, "nested deeper"),
    (b"iterations: 1\niterations: 2\n", "repeated"), (b"42\n", "mapping"),
    (b"task_bytes: 10\ninitial_messages: 2\niterations: 1000000000000\nreply_bytes: 1\nmean: 1\nworkers: 1\n"
     b"stages: 1\n", "iterations x initial_messages"),
    (b"task_bytes: 10\ninitial_messages: 2\niterations: 1\nreply_bytes: 1\nmean: 1\nworkers: 1000000\n", "workers <="),
    (b"task_bytes: 10\ninitial_messages: 2\niterations: 1\nreply_bytes: 1\n"
     b"workers: [{stages: [{mean: 1, type: REP_100000}]}]\n", "REP_k <=")])
@pytest.mark.parametrize("command", ["check", "tune"])
def test_a_bad_spec_is_one_line_for_check_and_tune_alike(tmp_path, capsys, raw, words, command):
    path = tmp_path / "bad.yaml"
    path.write_bytes(raw)
    assert status(["synthetic", command, str(path)]) == 2
    err = errors(capsys)
    assert len(err) == 1 and err[0].startswith(f"autotune synthetic: error: {path}: ") and words in err[0], err


def test_a_missing_spec_file_is_one_line(tmp_path, capsys):
    assert status(["synthetic", "check", str(tmp_path / "none")]) == 2
    err = errors(capsys)
    assert len(err) == 1 and "cannot read" in err[0], err
