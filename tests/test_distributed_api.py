"""tuned_gemm / tuned_cholesky with ``comm=``: chosen or forced plans, BLAS extras, agreed errors."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml
from mpi_helpers import mpi_command, mpi_env, run_mpi_variants

COMM_TINY = {
    "name": "tiny-api-test", "sizes": [8, 512, 4096, 32768, 262144], "procs": "all", "grids": "all",
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "rewarm": 1, "min_reps": 2, "max_reps": 3, "rel_tol": 0.5,
               "min_sample_seconds": 1e-5, "point_budget_seconds": 0.01},
    "passes": 1, "check_sides": [128, 256], "first_touch_sizes": [1 << 22, 1 << 23], "pack_order": 256, "root_reps": 1,
    "step_waits": {"order": 256, "blocks": [32, 64]}, "loop_costs": [[256, 32], [512, 32]],   # calibrations: short
    "phase_calibration": {"sizes": [128, 192], "reps": 1},
    "contention": {"sizes": [256, 512], "rankb_sizes": [512], "reps": 2, "skew_reps": 5},
}


@pytest.fixture(scope="module")
def mpi_db(tiny_db, tmp_path_factory):
    """The tiny BLAS database plus a tiny communication probe at P = 2."""
    d = tmp_path_factory.mktemp("distapi")
    path, prof = d / "sp.h5", d / "comm.yaml"
    shutil.copy(tiny_db, path)
    prof.write_text(yaml.safe_dump(COMM_TINY))
    cmd = mpi_command(2, [sys.executable, "-m", "autotune.install_probe.comm", "--db", str(path),
                          "--profile", str(prof)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=mpi_env(), cwd=d)
    assert proc.returncode == 0, proc.stderr
    return path


API = """
import numpy as np, scipy.linalg as sl, sys
from mpi4py import MPI
import autotune
from autotune import tuned_cholesky, tuned_gemm
from autotune.core.plans import Plan
autotune.set_options(db=sys.argv[1])
comm = MPI.COMM_WORLD
P, root = comm.size, comm.rank == 0
rng = np.random.default_rng(1)
a = rng.standard_normal((97, 61)); b = rng.standard_normal((61, 45))
g = rng.standard_normal((83, 83)); s = g @ g.T + 83 * np.eye(83)
# chosen by the selector
c = tuned_gemm(a if root else None, b if root else None, comm=comm)
f = tuned_cholesky(s if root else None, lower=True, comm=comm)
if root:
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f, sl.cholesky(s, lower=True), rtol=1e-10, atol=1e-10)
else:
    assert c is None and f is None
# forced plans; BLAS extras applied on the root
for plan in [Plan("summa", P, P, 1, b=16), Plan("bsr", P, P, 1), Plan("cbsr", P, 1, P), Plan("local", 1)]:
    c = tuned_gemm(a.T.copy() if root else None, b if root else None, trans_a=True, alpha=2.0, comm=comm,
                   config=plan)
    if root:
        np.testing.assert_allclose(c, 2 * a @ b, rtol=1e-12, atol=1e-12)
f = tuned_cholesky(s if root else None, comm=comm, config={"algorithm": "cholesky", "p": P, "r": 1, "c": P, "b": 16})
if root:
    np.testing.assert_allclose(f, sl.cholesky(s), rtol=1e-10, atol=1e-10)
# a local plan reports its phases as the distributed ones do (the root's check and call; nothing elsewhere)
from autotune.entry.cholesky import collective as distributed_cholesky
from autotune.entry.gemm import collective as distributed_gemm
from autotune.distributed.plan import Phases
ph = Phases()
f = distributed_cholesky(s if root else None, comm, config=Plan("local", 1), phases=ph)
assert (set(ph.seconds) == {"distribution", "compute"}) if root else not ph.seconds, ph.seconds
ph = Phases()
c = distributed_gemm(a if root else None, b if root else None, comm, config=Plan("local", 1), phases=ph)
assert (set(ph.seconds) == {"compute"}) if root else not ph.seconds, ph.seconds
# the same error on every rank, no hang (NaN: checked before the local path, and by the distributed run)
nan = s.copy()
nan[2, 3] = np.nan
bad = [lambda: tuned_gemm(a if root else None, a if root else None, comm=comm),
       lambda: tuned_gemm(None, None, comm=comm),
       lambda: tuned_cholesky(a if root else None, comm=comm),
       lambda: tuned_cholesky(-s if root else None, comm=comm,
                              config={"algorithm": "cholesky", "p": P, "r": P, "c": 1, "b": 8}),
       lambda: tuned_cholesky(nan if root else None, comm=comm, config=Plan("local", 1)),
       lambda: tuned_cholesky(nan if root else None, comm=comm,
                              config={"algorithm": "cholesky", "p": P, "r": 1, "c": P, "b": 16})]
for i, call in enumerate(bad):
    try:
        call()
    except (ValueError, np.linalg.LinAlgError) as exc:
        print("ERR", i, comm.rank, type(exc).__name__, str(exc), flush=True)
    else:
        print("NOERR", i, comm.rank, flush=True)
print("OK", comm.rank, flush=True)
"""


@pytest.fixture(scope="module")
def api_runs(mpi_db, tmp_path_factory):
    """API at 2 and 3 ranks, in one launch at -n 3 (each on that many of its ranks)."""
    return run_mpi_variants([(f"np{p}", API, p, [str(mpi_db)]) for p in (2, 3)], tmp_path_factory.mktemp("api"))


@pytest.mark.parametrize("nprocs", [2, 3])
def test_collective_api(api_runs, nprocs):
    out = api_runs.check(f"np{nprocs}")
    assert out.stdout.count("OK") == nprocs, out.stdout + out.stderr
    assert "NOERR" not in out.stdout
    errs = [ln.split(" ", 3) for ln in out.stdout.splitlines() if ln.startswith("ERR")]
    for i in range(6):
        msgs = {(e[3]) for e in errs if e[1] == str(i)}
        ranks = {e[2] for e in errs if e[1] == str(i)}
        assert ranks == {str(r) for r in range(nprocs)} and len(msgs) == 1, (i, errs)


def test_explain_np_ranks_plans(mpi_db, capsys):
    from autotune.cli.command import main

    assert main(["explain", "gemm", "300", "--np", "2", "--db", str(mpi_db), "--top", "40"]) == 0
    text = capsys.readouterr().out
    assert "Open_MPI" in text and "p=2" in text
    for alg in ("bsr", "cbsr", "summa", "local"):
        assert f"{alg} p=" in text
    assert main(["explain", "cholesky", "300", "--np", "2", "--db", str(mpi_db)]) == 0
    assert "cholesky p=2" in capsys.readouterr().out
