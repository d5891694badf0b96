"""Synthetic workloads over MPI (003): every process's messages match the plan (the source's
tables' totals exactly), too few ranks is one error alike on every rank, and a rank killed mid-run
ends the job within a bounded time with no process left behind; compute stages spend their time in
gemm calls."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import resources

from mpi_helpers import mpi_command, mpi_env, run_mpi

CASES = resources.files("autotune.configs") / "synthetic"

COUNTS = """
import sys
from mpi4py import MPI
from autotune import synthetic
comm = MPI.COMM_WORLD
for name in sys.argv[1:]:
    spec = synthetic.scaled(synthetic.load_spec(name), 0.0003)
    pl = synthetic.plan(spec)
    rep = synthetic.run(pl, comm, timeout=60)
    if comm.rank == 0:
        assert [r.index for r in rep.rows] == list(range(len(pl.processes))), rep.rows
        for p, r in zip(pl.processes, rep.rows):
            if p.role != "replica":
                assert (r.sent, r.received, r.drained) == (p.sends, p.receives, p.drains), (name, p, r)
        assert (rep.sent, rep.received) == (pl.sends, pl.receives), name
        print("COUNTS", spec.name, rep.sent, rep.received, flush=True)
spec = synthetic.load_spec({"task_bytes": 1000, "initial_messages": 6, "iterations": 2, "reply_bytes": 10,
                            "work": "compute", "workers": [{"stages": [{"mean": 0.02, "spread": 0.005},
                                                                      {"mean": 0.03, "spread": 0.005}]}]})
rep = synthetic.run(spec, comm, timeout=120)
if comm.rank == 0:                      # compute stages: their gemm calls took (about) the drawn times
    stages = [r for r in rep.rows if r.role == "stage"]
    assert [r.units for r in stages] == [12, 12], stages
    assert all(r.seconds >= 0.5 * r.units * r.per_unit for r in stages), stages
    print("COMPUTE OK", flush=True)
"""


def test_run_counters_equal_the_plan_for_the_source_cases(tmp_path):
    """12 ranks on one host hold the tuned cases' 11 and 12 processes; then a compute workload."""
    names = [str(CASES / f"{c}.yaml") for c in ("case1", "case1-tuned", "case2", "case2-tuned")]
    out = run_mpi(COUNTS, 12, tmp_path, args=names).stdout
    assert "COMPUTE OK" in out, out
    for line in ("COUNTS case1 316 316", "COUNTS case1-tuned 525 520", "COUNTS case2 372 372",
                 "COUNTS case2-tuned 581 576"):
        assert line in out, out


def test_too_few_ranks_is_one_error_line_on_every_rank(tmp_path):
    proc = subprocess.run(mpi_command(4, [sys.executable, "-m", "autotune.cli", "synthetic", "run",
                                          str(CASES / "case1-tuned.yaml"), "--scale", "0.001"]),
                          capture_output=True, text=True, env=mpi_env(), cwd=tmp_path, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(errors) == 1 and "launch 16 ranks" in errors[0], proc.stderr


LONG = """
import os, sys
from mpi4py import MPI
from autotune import synthetic
comm = MPI.COMM_WORLD
open(os.path.join(sys.argv[1], f"rank{comm.rank}.pid"), "w").write(str(os.getpid()))
spec = synthetic.load_spec({"task_bytes": 100, "initial_messages": 4, "iterations": 400, "reply_bytes": 10,
                            "workers": [{"stages": [{"mean": 0.01}, {"mean": 0.01, "type": "REP_2"}]}]})
synthetic.run(spec, comm, timeout=float(sys.argv[2]))
print("FINISHED", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:       # a zombie is gone for our purpose
        return open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_rank_killed_mid_run_ends_the_job_without_orphans(tmp_path, victim=2):
    script = tmp_path / "long.py"
    script.write_text(LONG)
    # the run's own timeout is an hour: only the launcher ending the job on the death ends it in time
    launcher = subprocess.Popen(mpi_command(5, [sys.executable, str(script), str(tmp_path), "3600"]),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(),
                                cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while len(list(tmp_path.glob("rank*.pid"))) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in sorted(tmp_path.glob("rank*.pid"))]
        assert len(pids) == 5, "the ranks did not start"
        time.sleep(2.0)
        os.kill(int((tmp_path / f"rank{victim}.pid").read_text()), signal.SIGKILL)
        out, err = launcher.communicate(timeout=120)     # a job left running fails here (TimeoutExpired)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode != 0 and "FINISHED" not in out, (out, err)
    time.sleep(1.0)
    assert not [p for p in pids if _alive(p)], "ranks left running after the job ended"

