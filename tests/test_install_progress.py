"""autotune-install's progress: on a terminal a bar per phase (the phase, points done of planned, time
left), seen here in a pseudo-terminal, also one reporting 0 x 0 as a container's may; off a terminal
one line as each phase starts; with --no-progress neither."""
from __future__ import annotations

import fcntl
import io
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from autotune.install_probe import cli, runner

# Eight points (16 timings over two passes) and the quick thread SPs: a few seconds.
PROFILE = {
    "name": "tiny-progress",
    "backends": ["scipy-openblas", "numpy-openblas"],
    "threads": [1],
    "thread_sps": "quick",
    "timing": {"min_reps": 1, "max_reps": 2, "point_budget_seconds": 0.01, "min_sample_seconds": 1e-5},
    "measure": [{"routines": ["gemm", "axpy"], "pattern": "square", "sizes": [8, 16]}],
}
# A bar line: the phase and its points done/planned, the percentage and bar, elapsed < time left.
BAR = r"(?P<done>\d+)/(?P<total>\d+) +\d+%\|[^|]*\| (\d\d:)?\d\d:\d\d<((\d\d:)?\d\d:\d\d|\?) left"


def in_pty(cmd: list[str], cols: int, rows: int, cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run ``cmd`` with stdin, stdout and stderr a pseudo-terminal of ``cols`` x ``rows``; (exit
    status, everything it wrote there)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, start_new_session=True)
    os.close(slave)
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:              # EIO: every writer has closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), out.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("cols", "rows"), [(120, 40), (0, 0)])
def test_a_terminal_shows_a_bar_per_phase(tmp_path, cols, rows):
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(PROFILE))
    cmd = [sys.executable, "-m", "autotune.install_probe.cli", "--profile", str(prof), "--db", str(tmp_path / "db.h5")]
    code, text = in_pty(cmd, cols, rows, tmp_path)
    assert code == 0, text
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    for phase in (r"points( \(pass \d\))?", "thread SPs"):
        bars = [m for line in lines if (m := re.match(rf"{phase} {BAR}", line))]
        assert bars, f"no {phase} bar in:\n{text}"
        assert any(m["done"] == m["total"] for m in bars), f"the {phase} bar never reached its end:\n{text}"
    assert "autotune-install: complete: 8 points" in text
    assert "autotune-install: points:" not in text and "autotune-install: thread SPs:" not in text  # no lines


def _fake_phases(monkeypatch) -> None:
    """Pools and thread SPs that report three points each and store nothing."""
    def report(progress):
        for i in range(4):
            progress(i, 3, f"step {i}")

    def pools(db, names, spec, progress=None):
        report(progress)
        return {"libraries": ["numpy-openblas"], "hot_window": 0.0, "seconds": 0.0}

    def thread_sps(path, quick=False, progress=None):
        report(progress)
        return SimpleNamespace(versions={"fake": None})

    monkeypatch.setattr(cli, "probe_pools", pools)
    monkeypatch.setattr(cli, "probe_and_save", thread_sps)


@pytest.mark.parametrize("no_progress", [False, True])
def test_off_a_terminal_one_line_per_phase(tmp_path, capsys, monkeypatch, no_progress):
    """stderr a file or pipe: one line as each phase starts, with its count, no bar updates; none at
    all with --no-progress. The outcome of each phase is on stdout either way."""
    _fake_phases(monkeypatch)
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({**PROFILE, "pools": "tiny"}))
    argv = ["--profile", str(prof), "--db", str(tmp_path / "db.h5")] + ["--no-progress"] * no_progress
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    starts = [] if no_progress else ["autotune-install: points: 8 points",
                                     "autotune-install: pool transitions: 3 transitions",
                                     "autotune-install: thread SPs: 3 steps"]
    assert lines == starts and "\r" not in err, err
    assert "complete: 8 points" in out and "thread-pool transitions of" in out and "thread SPs of fake" in out


def test_the_bar_is_redrawn_while_a_point_runs(monkeypatch):
    """A long point (one call, no update) still moves the bar's clock: it is redrawn every REDRAW_SECONDS."""
    monkeypatch.setattr(runner, "REDRAW_SECONDS", 0.01)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with runner.Progress("thread SPs", "bar", "steps") as bar:
        bar(0, 2, "omp P=1")
        drawn = stream.getvalue().count("\r")
        deadline = time.monotonic() + 30
        while stream.getvalue().count("\r") < drawn + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.getvalue().count("\r") >= drawn + 3, stream.getvalue()
        bar(2, 2)
    assert re.search(rf"thread SPs {BAR}", stream.getvalue()) and "omp P=1" in stream.getvalue()


def test_a_terminal_reporting_no_size_gets_the_fallback(monkeypatch):
    """tqdm hides its bar on a terminal of 0 x 0 (it draws in one row less than the terminal has)."""
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert runner.terminal_size(sys.__stderr__) == (runner.FALLBACK_TERMINAL[0] - 1, runner.FALLBACK_TERMINAL[1])
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((132, 50)))
    assert runner.terminal_size(sys.__stderr__) == (131, 50)
