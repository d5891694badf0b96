"""The run-time guard (issue 61 item 4): a choice and the reference run in turn on trial; a choice
not faster is demoted, a faster one kept; its clock is a fake here, so no test depends on the
machine being quiet."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from autotune import options, tuned_cholesky, tuned_gemm
from autotune.core.assumptions import GUARD_ROUNDS
from autotune.core.families import FAMILIES, CholeskyProblem, GemmProblem
from autotune.core.plans import Candidate
from autotune.db import location
from autotune.entry import cholesky as cholesky_entry
from autotune.entry import decide as decide_entry
from autotune.entry import gemm as gemm_entry
from autotune.entry import lu as lu_entry
from autotune.feedback import guard, learn
from autotune.select.decision import Decision, Ranked

CHOSEN = Candidate("blas", "numba-reference", 2)
REFERENCE = Candidate("blas", "numpy-openblas", 2)


class FakeClock:
    """A clock the timed work advances by what it says it took."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(guard, "clock", fake)
    return fake


def decision(problem, chosen=CHOSEN, incumbent=REFERENCE) -> Decision:
    ranking = [Ranked(chosen, 1e-3), Ranked(incumbent, 2e-3)]
    return Decision(problem.family, problem.dims, 2, ranking, chosen, incumbent)


def calls(problem, clock, choice_seconds, reference_seconds, count):
    """Run ``count`` guarded calls; which ran, in order."""
    ran = []
    dec = decision(problem)

    def choice():
        clock.spend(choice_seconds)
        ran.append("choice")
        return "c"

    def reference():
        clock.spend(reference_seconds)
        ran.append("reference")
        return "r"
    for _ in range(count):
        assert guard.run(problem, dec, choice, reference) == ("c" if ran[-1] == "choice" else "r")
    return ran


def test_a_slower_choice_is_demoted_after_its_trial(clock):
    problem = GemmProblem(1500, 1500, 1500, "nt")
    ran = calls(problem, clock, 0.3, 0.1, 2 * GUARD_ROUNDS + 3)
    assert ran == ["choice", "reference"] * GUARD_ROUNDS + ["reference"] * 3
    trial = guard.verdict(problem, CHOSEN, 2)
    assert trial.verdict == guard.REFERENCE and trial.ratio == pytest.approx(3.0)
    assert not guard.kept(problem, CHOSEN, 2)


def test_a_faster_choice_is_kept_and_a_tie_goes_to_the_reference(clock):
    fast = GemmProblem(1500, 1500, 1500)
    assert calls(fast, clock, 0.1, 0.2, 2 * GUARD_ROUNDS + 2)[-2:] == ["choice", "choice"]
    assert guard.kept(fast, CHOSEN, 2)
    tie = GemmProblem(3000, 3000, 3000)
    assert calls(tie, clock, 0.2, 0.2, 2 * GUARD_ROUNDS + 1)[-1] == "reference"


def test_a_small_call_is_tried_for_guard_seconds_and_at_most_guard_max_rounds(clock):
    """A 0.1 ms call is tried until each side ran GUARD_SECONDS (20 calls each), a 1 ns one for
    GUARD_MAX_ROUNDS calls each: two samples of a small call are scheduler noise."""
    from autotune.core.assumptions import GUARD_MAX_ROUNDS, GUARD_SECONDS

    small = GemmProblem(100, 100, 100)
    each = round(GUARD_SECONDS / 1e-4)
    ran = calls(small, clock, 2e-4, 1e-4, 2 * each + 2)
    assert ran[:2 * each] == ["choice", "reference"] * each and ran[-2:] == ["reference", "reference"]
    assert guard.demoted(small, CHOSEN, 2)
    tiny = GemmProblem(40, 40, 40)
    ran = calls(tiny, clock, 1e-9, 2e-9, 2 * GUARD_MAX_ROUNDS + 1)
    assert ran.count("reference") == GUARD_MAX_ROUNDS and guard.kept(tiny, CHOSEN, 2)


def test_the_best_time_counts_so_a_first_slow_call_does_not_demote(clock):
    problem = CholeskyProblem(800)
    dec, times = decision(problem, Candidate("potrf", "numpy-openblas", 2), Candidate("potrf", "scipy-openblas", 2)), \
        iter([5.0, 1.0, 0.5, 1.0])
    for _ in range(2 * GUARD_ROUNDS):
        guard.run(problem, dec, lambda: clock.spend(next(times)), lambda: clock.spend(next(times)))
    assert guard.kept(problem, dec.chosen, 2)


def test_keys_share_a_size_class_and_split_on_layout_and_budget():
    a, b = GemmProblem(1000, 1000, 1000), GemmProblem(1100, 1100, 1100, copied=5)
    assert guard.key(a, CHOSEN, 2) != guard.key(b, CHOSEN, 2)                     # copied or not
    assert guard.key(b, CHOSEN, 2) == guard.key(GemmProblem(1100, 1090, 1100, copied=9), CHOSEN, 2)
    assert guard.key(a, CHOSEN, 2) == guard.key(GemmProblem(1080, 1000, 1000), CHOSEN, 2)
    assert guard.key(a, CHOSEN, 2) != guard.key(GemmProblem(2000, 1000, 1000), CHOSEN, 2)
    assert guard.key(a, CHOSEN, 2) != guard.key(GemmProblem(1000, 1000, 1000, "tn"), CHOSEN, 2)
    assert guard.key(a, CHOSEN, 2) != guard.key(a, CHOSEN, 1)


def test_a_verdict_is_logged_for_refit_even_with_learning_off(clock, monkeypatch):
    learn.reset()
    monkeypatch.setattr(learn, "enabled", lambda: False)
    problem = GemmProblem(700, 700, 700)
    calls(problem, clock, 0.3, 0.1, 2 * GUARD_ROUNDS)
    logged = [e for e in learn.observations() if e[3] == problem.dims]
    assert [(e[4], e[5], e[6]) for e in logged] == [(CHOSEN, 1e-3, pytest.approx(0.3)),
                                                    (REFERENCE, 2e-3, pytest.approx(0.1))]
    assert learn.stats(CHOSEN) is None             # logged, trust untouched with learning off
    assert {e[7] for e in logged} == {str(location.resolve(None))}     # the database in force, resolved now
    learn.reset()


def test_a_raising_call_is_not_counted(clock):
    problem = GemmProblem(900, 900, 900)
    dec = decision(problem)

    def boom():
        raise np.linalg.LinAlgError("singular")
    with pytest.raises(np.linalg.LinAlgError):
        guard.run(problem, dec, boom, lambda: None)
    assert guard.verdict(problem, CHOSEN, 2).choice == []


def _forced(monkeypatch, chosen):
    """Make the selector choose ``chosen`` over the reference for every problem."""
    def decide(problem, config, explain, opts=None, state=None):
        inc = Candidate(*FAMILIES[problem.family].incumbent, 2)
        return chosen, Decision(problem.family, problem.dims, 2, [Ranked(chosen, 1e-3), Ranked(inc, 2e-3)],
                                chosen, inc)
    monkeypatch.setattr(gemm_entry, "decide", decide)
    monkeypatch.setattr(cholesky_entry, "decide", decide)
    monkeypatch.setattr(lu_entry, "decide", decide)


def test_tuned_gemm_runs_numpy_once_demoted_and_every_call_is_right(clock, monkeypatch):
    _forced(monkeypatch, CHOSEN)
    ran = []
    real_run = gemm_entry.run_gemm
    real_matmul = gemm_entry._numpy_matmul

    def slow_choice(*args):
        clock.spend(1.0)
        ran.append("choice")
        return real_run(*args)

    def reference(*args, **kw):
        clock.spend(0.1)
        ran.append("reference")
        return real_matmul(*args, **kw)
    monkeypatch.setattr(gemm_entry, "run_gemm", slow_choice)
    monkeypatch.setattr(gemm_entry, "_numpy_matmul", reference)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((96, 80)), np.asfortranarray(rng.standard_normal((80, 64)))
    for _ in range(2 * GUARD_ROUNDS + 2):
        np.testing.assert_allclose(tuned_gemm(a, b), a @ b, rtol=1e-12, atol=1e-12)
    assert ran[-2:] == ["reference", "reference"] and ran.count("choice") == GUARD_ROUNDS
    ran.clear()
    with options(guard=False):
        for _ in range(3):
            np.testing.assert_allclose(tuned_gemm(a, b), a @ b, rtol=1e-12, atol=1e-12)
    assert ran == ["choice"] * 3
    with pytest.raises(ValueError, match="guard"):
        with options(guard="yes"):
            pass


def test_cholesky_is_not_remembered_in_c_until_the_guard_keeps_it(clock, monkeypatch):
    chosen = Candidate("potrf", "numpy-openblas", 2)
    _forced(monkeypatch, chosen)
    remembered = []
    monkeypatch.setattr(cholesky_entry, "_remember_cholesky", lambda cand, *a, **k: remembered.append(cand))
    real = cholesky_entry.run_cholesky

    def fast(*args):
        clock.spend(0.01)
        return real(*args)
    monkeypatch.setattr(cholesky_entry, "run_cholesky", fast)
    monkeypatch.setattr(cholesky_entry, "_scipy_cholesky", lambda *a: (clock.spend(1.0), np.linalg.cholesky(a[0]).T)[1])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((120, 120))
    s = x @ x.T + 120 * np.eye(120)
    for _ in range(2 * GUARD_ROUNDS):
        np.testing.assert_allclose(tuned_cholesky(s), np.linalg.cholesky(s).T, rtol=1e-10, atol=1e-10)
    assert remembered == []
    tuned_cholesky(s)
    assert remembered == [chosen]


# -- the reference wins ties (item 3) ------------------------------------------------------------

def test_an_alternative_must_beat_the_reference_by_its_series_uncertainty(monkeypatch):
    from autotune.core.assumptions import INCUMBENT_MARGIN, NOISY_MARGIN
    from autotune.db.noise import SeriesNoise
    rank_module = importlib.import_module("autotune.select.margin")

    ref = Candidate("potrf", "scipy-openblas", 2)
    alt = Candidate("potrf", "numpy-openblas", 2)
    ranking = [Ranked(alt, 1.0), Ranked(ref, 1.5)]            # 50% ahead in the model
    quiet = SeriesNoise(10, 10, 0, 0, 0.0, 0.02, 1.0)
    busy = SeriesNoise(10, 10, 6, 6, 0.6, 0.30, 0.5)
    for noise, winner in ((quiet, alt), (busy, ref)):
        monkeypatch.setattr(rank_module, "_series_noise", lambda sp, n=noise: {("potrf", "numpy-openblas", 2,
                                                                                 "square"): n})
        chosen, incumbent, notes, margin = rank_module.apply_margin("cholesky", ranking, object())
        assert (chosen, incumbent) == (winner, ref)
        assert margin == pytest.approx(INCUMBENT_MARGIN + noise.median_spread + NOISY_MARGIN * noise.noisy_share)
    assert "within its margin" in notes[0] and "noisy share 60%" in notes[0]
    monkeypatch.setattr(rank_module, "_series_noise", lambda sp: {})
    tie = [Ranked(alt, 1.0), Ranked(ref, 1.05)]
    assert rank_module.apply_margin("cholesky", tie, object())[0] == ref      # within the stated 10%


def test_a_demoted_lu_is_remembered_in_c_as_scipys_routine(clock, monkeypatch):
    """Once the guard demotes an LU choice, the C hot path runs scipy's getrf at its library's
    count (the Python path's own overhead made a demoted n = 100 call twice scipy's)."""
    from autotune.kernels import _front

    from autotune import tuned_lu_factor

    chosen = Candidate("getrf", "numpy-openblas", 2)
    _forced(monkeypatch, chosen)
    real_factor, real_scipy = lu_entry._factor, lu_entry.scipy_call
    monkeypatch.setattr(lu_entry, "_factor", lambda *a: (clock.spend(1.0), real_factor(*a))[1])
    monkeypatch.setattr(lu_entry, "scipy_call", lambda *a, **k: (clock.spend(0.01), real_scipy(*a, **k))[1])
    _front.forget()
    a = np.random.default_rng(2).standard_normal((120, 120))
    want = lu_entry.linalg.lu_factor(a)
    for _ in range(2 * GUARD_ROUNDS):
        assert not _front.remembered_lu(120)
        got = tuned_lu_factor(a)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert guard.demoted(lu_entry.LuProblem(120), chosen, 2)
    tuned_lu_factor(a)
    assert _front.remembered_lu(120)
    got = tuned_lu_factor(a)                 # the C path: scipy's routine, the same factor
    np.testing.assert_array_equal(got[1], want[1])
    _front.forget()


def test_the_reference_candidate_is_watched_where_its_library_runs_another_count(monkeypatch):
    """numpy's own gemm at 1 thread is not the call the user would have run while numpy's library
    has 2 (a budget the library does not read, as a cgroup quota): the guard watches it."""
    from autotune import backends
    from autotune.settings import get_options

    one = Candidate("blas", "numpy-openblas", 1)
    dec = Decision("gemm", (600, 600, 600), 1, [Ranked(one, 1e-3)], one, one)
    be = backends.get("numpy-openblas")
    monkeypatch.setattr(be, "get_threads", lambda: 2)
    assert not decide_entry._unguarded(dec, get_options())
    monkeypatch.setattr(be, "get_threads", lambda: 1)
    assert decide_entry._unguarded(dec, get_options())
