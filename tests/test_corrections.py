"""One correction stack (select/corrections.py) for both selectors, and the hand-set assumptions."""
from __future__ import annotations

import importlib
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from db_helpers import TestPlatform

from autotune.core import assumptions
from autotune.core.families import GemmProblem, as_problem
from autotune.db.lookup import load_sp
from autotune.models import cholesky as chol_models
from autotune.models import movement
from autotune.models.fitted import FittedEntry, save_fitted
from autotune.models.fitted_phases import PhaseFactor, save_phase_factors
from autotune.select import corrections, rank
from autotune.select import distributed as dist

DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"
rank_module = importlib.import_module("autotune.select.ranking")   # the package exports the function
ORDER = ("fitted", "overhead", "contention", "quota", "risk", "calibration")


@pytest.fixture
def db(tiny_db, tmp_path):
    """A private copy of the tiny probe database (tests here write to it)."""
    path = tmp_path / "sp.h5"
    shutil.copy(tiny_db, path)
    return path


def _fitted_gemm() -> FittedEntry:
    """An in-use fitted model of one-thread numpy gemm: T(n) = 1e-9 n^3 on [32, 128]."""
    return FittedEntry("gemm", "blas", "numpy-openblas", 1, 0, 0, ((3, 0), (0, 0)), np.array([[1e-9, 0.0]]),
                       np.array([32.0, 128.0]), "FI-LS", 1.0, 0.5, 40.0, -30.0, "test", True,
                       check_n=np.array([48.0, 80.0]), check_t=np.array([1e-4, 5e-4]),
                       check_analytical=np.array([2e-4, 1e-3]), fit_n=np.array([32.0, 64.0]),
                       fit_t=np.array([3e-5, 2.6e-4]))


def _in_order(steps) -> bool:
    positions = [ORDER.index(s) for s in steps]
    return positions == sorted(positions)


def test_the_steps_run_in_the_documented_order():
    assert tuple(corrections.STEPS) == ORDER
    section = DOCS.read_text().split('<a id="selection.single"></a>')[1].split("<a id=")[0]
    found = [section.index(f"`{s}`") for s in ORDER]
    assert found == sorted(found), "docs/models.md#selection.single lists the steps out of order"
    seen = []
    steps = {s: (lambda x, ctx, s=s: (seen.append(s) or x + 1.0, s)) for s in reversed(ORDER)}
    out, done = corrections.apply(0.0, None, steps)
    assert seen == list(ORDER) and out == len(ORDER)
    assert [(c.step, c.before, c.after) for c in done] == [(s, float(i), i + 1.0) for i, s in enumerate(ORDER)]
    with pytest.raises(ValueError, match="unknown correction steps"):
        corrections.apply(0.0, None, {"guess": lambda x, ctx: (x, "")})


def test_every_ranking_records_its_steps_in_order(db):
    sp = load_sp(db, refresh=True)
    for family, dims in (("gemm", (64, 64, 64)), ("cholesky", (100,))):
        dec = rank(as_problem(family, dims), sp, 2)
        for r in dec.ranking:
            assert _in_order([c.step for c in r.corrections])
            if r.corrections:
                assert r.corrections[-1].after == pytest.approx(r.seconds)


def test_a_forced_fitted_model_shows_as_the_fitted_step_in_explain(db):
    save_fitted(db, [_fitted_gemm()])
    dec = rank(as_problem("gemm", (64, 64, 64)), load_sp(db, refresh=True), 1, explain=True)
    r = next(r for r in dec.ranking if (r.candidate.backend, r.candidate.threads) == ("numpy-openblas", 1))
    assert r.corrections and r.corrections[0].step == "fitted"
    assert r.corrections[0].after == pytest.approx(1e-9 * 64 ** 3) and r.predicted == pytest.approx(1e-9 * 64 ** 3)
    text = dec.describe(top=len(dec.ranking))
    assert re.search(r"corrections: fitted [0-9.]+->[0-9.]+ ms \(fitted model", text)


def test_explain_prints_each_sp_value_once(db):
    dec = rank(as_problem("cholesky", (100,)), load_sp(db, refresh=True), 2, explain=True)
    text = dec.describe(top=len(dec.ranking))
    terms = {t for r in dec.ranking for t in r.terms}
    assert terms
    listed = [m.group(1) for m in re.finditer(r"^    \[\d+\] (.*)$", text, re.MULTILINE)]
    assert sorted(listed) == sorted(terms)                       # every value, each once
    assert sum("GF/s" in line for line in text.splitlines()) == len(terms)   # never repeated per candidate


def test_local_and_distributed_use_the_same_step_names(db):
    assert set(rank_module.STEPS) <= set(ORDER)
    assert set(dist.PLAN_STEPS) | {"calibration"} <= set(ORDER)
    path = db
    sp, cp = load_sp(path), TestPlatform(None, "test", 4)
    save_phase_factors(path, "test-P4", [PhaseFactor("gemm", "summa", "compute", 3.0, 4, 0.1, 66.0, 3.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dec = dist.rank_plans(GemmProblem(256, 256, 256), 2, sp, cp, cores=2)
    summa = [r for r in dec.ranking if r.plan.algorithm == "summa"]
    assert summa and all([c.step for c in r.corrections][-1] == "calibration" for r in summa)
    for r in dec.ranking:
        assert _in_order([c.step for c in r.corrections])
    assert "corrections: " in dist.describe(dec, top=len(dec.ranking))


def test_the_assumptions_module_lists_every_constant_with_its_meaning():
    names = ("COMPOSED_RISK", "INCUMBENT_MARGIN", "FLOOR_SLACK",
             "COPY_SHARE", "READ_SHARE", "FILL_SHARE", "LOOP_SHARE", "MEMORY_SHARE")
    assert set(names) <= set(assumptions.ASSUMPTIONS)
    for name, a in assumptions.ASSUMPTIONS.items():
        assert a.name == name and a.meaning.strip() and a.source.strip() and a.used_by.strip()
        assert getattr(assumptions, name) is a.value
    shares = [n for n in vars(movement) if n.endswith("_SHARE")]
    assert shares and all(getattr(movement, n) is assumptions.ASSUMPTIONS[n].value for n in shares)
    assert not {"POOL_CONTENTION", "LIBRARY_SWITCH"} & set(assumptions.ASSUMPTIONS)   # measured now
    for name in names[:3]:                      # the old names stay importable
        assert getattr(rank_module, name) is assumptions.ASSUMPTIONS[name].value
    assert chol_models.MEMORY_SHARE is assumptions.MEMORY_SHARE


def test_explain_splits_the_model_time_by_call_kind(db):
    sp = load_sp(db, refresh=True)
    dec = rank(as_problem("cholesky", (200,)), sp, 1, explain=True)
    blocked = [r for r in dec.ranking if r.candidate.algorithm == "blocked"]
    assert blocked and all({"potf2", "trsm", "syrk"} <= dict(r.split).keys() for r in blocked)
    for r in dec.ranking:
        if r.split:
            model = r.corrections[0].before if r.corrections else r.seconds
            assert sum(v for _, v in r.split) == pytest.approx(model, rel=1e-9)
    assert "model by call: potf2" in dec.describe(top=len(dec.ranking))
    assert not any(r.split for r in rank(as_problem("cholesky", (200,)), sp, 1).ranking)    # only when explaining
