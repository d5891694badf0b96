"""What `autotune explain` shows agrees with itself: a stencil's steps are named as steps, not as a
third dimension, and no predicted phase of a plan exceeds the plan's total."""
from __future__ import annotations

import warnings

import pytest
from db_helpers import platform_db

from autotune.cli import command as cli
from autotune.core.families import FAMILIES, StencilProblem, label
from autotune.core.plans import PHASES, Plan
from autotune.models.fitted_phases import PhaseFactor, save_phase_factors
from autotune.select.distributed import predict, rank_plans


def test_a_stencil_label_names_its_steps():
    assert label("stencil", (800, 800, 200)) == "stencil 800x800, 200 steps"
    assert label("stencil", (8, 9, 1)) == "stencil 8x9, 1 step"
    assert str(StencilProblem(800, 600, 200)) == "stencil 800x600, 200 steps"
    assert label("gemm", (4, 5, 6)) == "gemm 4x5x6" == str(FAMILIES["gemm"].of((4, 5, 6)))


@pytest.mark.filterwarnings("ignore:communication parameters unavailable:RuntimeWarning")
def test_explain_of_stencil_plans_and_its_run_name_the_steps(tiny_db, capsys):
    assert cli.main(["explain", "stencil", "1000", "1000", "--np", "2", "--db", str(tiny_db), "--top", "1"]) == 0
    assert "stencil 1000x1000, 100 steps on up to 2 ranks: chose" in capsys.readouterr().out
    assert cli.main(["explain", "stencil", "300", "200", "--steps", "5", "--run", "--db", str(tiny_db)]) == 0
    assert "ran tuned_stencil 300x200, 5 steps with" in capsys.readouterr().out


def test_no_calibrated_phase_exceeds_the_total(tiny_db, tmp_path):
    """A compute factor fitted apart from the total's (here none: x1) scales compute past the total;
    the phase is held at the total, which, ranking the plan, stays as fitted."""
    path, sp, cp = platform_db(tiny_db, tmp_path)
    problem, plan = FAMILIES["gemm"].square(512), Plan("summa", 2, 1, 2, b=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        before = predict(problem, plan, sp, cp)
        save_phase_factors(path, "test-P4", [PhaseFactor("gemm", "summa", "compute", 10.0, 4, 0.1, 66.0, 3.0)])
        after = predict(problem, plan, sp, cp)
        dec = rank_plans(problem, 2, sp, cp, cores=2)
    assert 10.0 * before["compute"] > before["total"]                 # the case: compute x10 passes the total
    assert after["compute"] == after["total"] == pytest.approx(before["total"])
    for r in dec.ranking:
        assert all(r.phases[ph] <= r.seconds for ph in PHASES), r.plan
    summa = next(r for r in dec.ranking if r.plan == plan)
    assert "compute held at the total" in summa.corrections[-1].note
