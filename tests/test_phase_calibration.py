"""Phase calibration in the installer: the profile key, its time estimate, what `autotune show` and
`autotune explain --np` say about it, and a tiny `autotune-install --mpi --np 2` that stores it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from autotune.install_probe import phase_calibration as phcal
from autotune.install_probe.comm_estimate import estimate_seconds
from autotune.install_probe.comm_profile import CommProfileError, load_comm_profile, parse_comm_profile
from mpi_helpers import mpi_env

from autotune.cli import command as cli
from autotune.cli import show_comm
from autotune.core.families import GemmProblem
from autotune.core.plans import Plan
from autotune.db import load_sp
from autotune.db.comm_lookup import load_comm
from autotune.distributed.collective import RankCores
from autotune.models.fitted_phases import (
    PhaseFactor,
    PhaseFactors,
    fit_phase_factors,
    load_phase_factors,
    save_phase_factors,
)
from autotune.select import mapping as sm
from autotune.select.distributed import Calibration, DistDecision, DistRanked, calibration_line

# The comm probe at its smallest (as tests/test_comm.py's), every calibration on tiny problems.
TINY = {
    "name": "tiny-phases", "sizes": [8, 512, 4096, 32768, 131072], "procs": [2], "grids": "full",
    "timing": {"warmup": 1, "warmup_seconds": 0.0, "rewarm": 1, "min_reps": 2, "max_reps": 3, "rel_tol": 0.5,
               "min_sample_seconds": 1e-5, "point_budget_seconds": 0.01},
    "passes": 1, "loggp": False, "check_sides": [128], "first_touch_sizes": [1 << 22], "pack_order": 256,
    "root_reps": 1, "step_waits": {"order": 128, "blocks": [16, 32]}, "loop_costs": [[128, 16], [256, 32]],
    "phase_calibration": {"sizes": [128, 160, 192], "reps": 2, "families": ["gemm", "cholesky"]},
    "contention": {"sizes": [256, 512], "rankb_sizes": [512], "reps": 2, "skew_reps": 5},
}
TIMEOUT = 300


def test_profile_key_defaults_none_and_bad_values():
    base = {"sizes": [8, 64]}
    assert parse_comm_profile(base).phase_calibration == phcal.PhaseCalibration()
    assert parse_comm_profile({**base, "phase_calibration": "none"}).phase_calibration.sizes == ()
    cal = parse_comm_profile({**base, "phase_calibration": {"sizes": [256], "reps": 2, "families": ["gemm"]}})
    assert cal.phase_calibration == phcal.PhaseCalibration((256,), 2, ("gemm",), 3.0)
    for bad in ({"sizes": [0]}, {"families": ["qr"]}, {"reps": 0}, {"size": [1]}, [256], {"max_ratio": 0.5}):
        with pytest.raises(CommProfileError):
            parse_comm_profile({**base, "phase_calibration": bad})
    quick = load_comm_profile("quick").phase_calibration
    assert quick.sizes and max(quick.sizes) <= 2048 and quick.reps <= 2


def test_estimate_counts_the_phase_calibration():
    quick = load_comm_profile("quick")
    off = replace(quick, phase_calibration=phcal.PhaseCalibration(sizes=()))
    for nprocs in (2, 4):
        extra = phcal.estimate_seconds(quick.phase_calibration, nprocs, 2, 2.5e10)
        assert extra > 1.0
        assert estimate_seconds(quick, nprocs, 2)[1] > estimate_seconds(off, nprocs, 2)[1]


def _decision(calibration) -> DistDecision:
    plan = Plan("summa", 2, 1, 2, b=64)
    phases = dict.fromkeys(("distribution", "communication", "compute", "collection", "total"), 1e-3)
    return DistDecision(GemmProblem(512, 512, 512), 2, [DistRanked(plan, phases)], calibration=calibration)


def test_calibration_line_names_the_platform_runs_and_the_chosen_plans_factors():
    assert calibration_line(_decision(None)) == "calibration: none (analytical models only)"
    factors = PhaseFactors([PhaseFactor("gemm", "summa", "total", 1.25, 4, 0.1, 20.0, 3.0)])
    line = calibration_line(_decision(Calibration("lib-P2", "2026-01-02T03:04:05+0000", 12, (128, 192), factors)))
    assert line.startswith("calibration: phase factors of platform lib-P2 (fitted 2026-01-02 03:04, 12 runs")
    assert "summa factors total x1.25" in line
    other = PhaseFactors([PhaseFactor("gemm", "bsr", "total", 1.25, 4, 0.1, 20.0, 3.0)])
    assert "no factor for summa" in calibration_line(_decision(Calibration("k", "d", None, (), other)))


def test_show_lists_stored_calibrations_and_legacy_ones(tmp_path):
    path = tmp_path / "db.h5"
    save_phase_factors(path, "k", [PhaseFactor("gemm", "bsr", "collection", 2.0, 3, 0.1, 50.0, 5.0)],
                       info={"sizes": [1536, 2560], "nprocs": 2})  # as `autotune bench mpi-validate` stores
    lines = show_comm.phase_calibration_lines(path, "k")
    assert "n = 1536, 2560" in lines[0] and "bsr" in lines[1] and "collection x2.00" in lines[1]
    assert "none" in show_comm.phase_calibration_lines(path, "other")[0]


@pytest.fixture(scope="module")
def installed(tiny_db, tmp_path_factory):
    """The BLAS tiny probe's database, then `autotune-install --mpi --np 2` on the tiny profile."""
    pytest.importorskip("mpi4py")
    d = tmp_path_factory.mktemp("phases")
    path, prof = d / "sp.h5", d / "tiny.yaml"
    shutil.copy(tiny_db, path)
    prof.write_text(yaml.safe_dump(TINY))
    cmd = [sys.executable, "-m", "autotune.install_probe.cli", "--mpi", "--np", "2", "--profile", str(prof),
           "--db", str(path), "--no-progress", "--timeout", str(TIMEOUT - 30)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=mpi_env(), cwd=d)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {TIMEOUT} s: {cmd}\n{exc.stdout}\n{exc.stderr}")
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}"
    return path, proc


def test_installer_ends_with_the_phase_calibration(installed, capsys):
    path, proc = installed
    key = load_comm(path, nprocs=2).platform["key"]
    stored = load_phase_factors(path, key)
    infos = stored.family_infos()
    assert set(infos) == {"gemm", "cholesky"}, proc.stdout
    _mapping_rows_price_the_timed_plans(path, load_comm(path, nprocs=2).host_speeds)
    for info in infos.values():
        assert info["sizes"] == [128, 160, 192] and info["runs"] >= 2 and info["by"] == "autotune-install --mpi"
    # each plan series timed at every order, each fitted as a T(n, p) (in n alone: one process count)
    assert stored.plans.fits and all(f.sizes == (128, 160, 192) and f.procs == (2,) for f in stored.plans.fits)
    assert "phase calibration:" in proc.stdout and f"from {sum(i['runs'] for i in infos.values())} runs" in proc.stdout
    assert cli.main(["explain", "gemm", "512", "--np", "2", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"calibration: phase factors of platform {key} (fitted " in out and "runs at n = 128, 160, 192" in out
    assert cli.main(["show", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "phase calibration gemm: n = 128, 160, 192" in out and "phase calibration cholesky" in out
    assert "  T(n, p) " in out and "held-out APE" in out


def _mapping_rows_price_the_timed_plans(path, speeds) -> None:
    """The mapping model's rows: its time of each timed plan of a family's block-cyclic algorithm on
    the communicator's hosts beside the measured time; the fitted factor is measured/modelled, and
    the tuned placement's platform carries it."""
    host = next(iter(speeds))
    timed = [{"algorithm": "cholesky", "p": 2, "r": r, "c": c, "b": 32, "measured": {"total": 0.05}}
             for r, c in ((1, 2), (2, 1))] + [{"algorithm": "local", "p": 1, "measured": {"total": 0.01}}]
    rows = phcal.mapping_rows([{"family": "cholesky", "n": 512, "rows": timed}], [RankCores(host, 1)] * 2, [1, 1], path)
    assert len(rows) == 2 and all(r["algorithm"] == sm.MAPPING_ALGORITHM for r in rows)
    assert all(0 < r["predicted"]["total"] < 0.05 for r in rows)
    halved = phcal.mapping_rows([{"family": "cholesky", "n": 512, "rows": timed}], [RankCores(host, 1, 1.0)] * 2,
                                [1, 1], path)                   # two ranks in a host's one CPU: each runs half the time
    assert [r["predicted"]["total"] for r in halved] == pytest.approx([2 * r["predicted"]["total"] for r in rows])
    (pooled,) = [f for f in fit_phase_factors(rows) if f.p == 0]
    assert pooled.factor > 1 and pooled.family == "cholesky"
    hosts = sm.rank_hosts([host, host], [1, 1], 0)
    platform = sm.communicator_platform(hosts, load_comm(path, nprocs=2), load_sp(path), PhaseFactors([pooled]))
    assert platform.model_factors == {"cholesky": pooled.factor}
    plan = Plan("cholesky", 2, 1, 2, b=32)
    assert sm.plan_estimate("cholesky", 512, plan, hosts, platform).seconds == pytest.approx(
        pooled.factor * sm.plan_estimate("cholesky", 512, plan, hosts, replace(platform, model_factors={})).seconds)
    assert phcal.mapping_rows([], [RankCores("elsewhere", 1)], [1], path) == []      # a host the probe did not measure
