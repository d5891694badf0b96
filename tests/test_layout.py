"""Operand layouts in the gemm problem: the BLAS call's transpositions the dispatch makes, priced on
the series measured in that layout; a library never measured in it is no candidate, numpy's own
call always is; ``a @ a.T`` on one buffer is numpy's syrk."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from autotune.core.families import GemmProblem, gemm_layout
from autotune.core.plans import Candidate
from autotune.select import rank

BACKENDS = ["numpy-openblas", "scipy-openblas", "numba-reference"]
PROFILE = {
    "name": "layouts", "backends": BACKENDS, "threads": [1],
    "timing": {"min_reps": 1, "max_reps": 2, "rel_tol": 0.5, "min_sample_seconds": 0.0001,
               "point_budget_seconds": 0.02},
    "measure": [{"routines": ["gemm", "syrk"], "pattern": "square", "sizes": [64, 256]},
                {"routines": ["gemm"], "pattern": "tn", "sizes": [64, 256], "backends": ["scipy-openblas"]}],
}


@pytest.fixture(scope="module")
def layout_sp(tmp_path_factory):
    from autotune.install_probe.profile import parse_profile
    from autotune.install_probe.runner import run_probe

    from autotune.db import load_sp

    path = tmp_path_factory.mktemp("layouts") / "sp.h5"
    assert run_probe(parse_profile(PROFILE, "layouts"), path, progress=False).complete
    return load_sp(path)


def _operands():
    rng = np.random.default_rng(0)
    c = rng.random((6, 6))
    big = rng.random((12, 12))
    return {"C@C": (c, c), "F@F": (np.asfortranarray(c), np.asfortranarray(c)), "F@C": (np.asfortranarray(c), c),
            "C@F": (c, np.asfortranarray(c)), "C@D.T": (c, c.copy().T), "view@C": (big[::2, ::2], c),
            "C@C.T": (c, c.T), "C.T@C": (c.T, c)}


@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("out_fortran", [False, True])
def test_the_layout_is_the_call_the_dispatch_makes(monkeypatch, trans, out_fortran):
    from autotune.dispatch import gemm as dispatch

    seen = {}

    def capture(backend, threads, fn, alpha, af, bf, beta, target, ta, tb):
        seen["layout"] = ("t" if ta else "n") + ("t" if tb else "n")
        target[...] = (af.T if ta else af) @ (bf.T if tb else bf)

    monkeypatch.setattr(dispatch, "call_with_threads", capture)
    for name, (a, b) in _operands().items():
        layout, copied = gemm_layout(a, b, *trans, out_fortran)
        if layout == "aat":                  # one buffer, transposed: numpy's own call (syrk), no dispatch
            x, y = (a.T if trans[0] else a), (b.T if trans[1] else b)
            assert np.shares_memory(x, y) and y.shape == x.shape[::-1]
            continue
        out = np.empty((6, 6), order="F" if out_fortran else "C")
        dispatch.run_gemm(Candidate("blas", "numpy-openblas", 1), a, b, out, trans_a=trans[0], trans_b=trans[1])
        assert layout == seen["layout"], (name, trans, out_fortran)
        assert copied == (36 if name == "view@C" else 0)
        np.testing.assert_allclose(out, (a.T if trans[0] else a) @ (b.T if trans[1] else b))


def test_one_buffer_transposed_is_numpys_syrk():
    ops = _operands()
    assert gemm_layout(*ops["C@C.T"])[0] == gemm_layout(*ops["C.T@C"])[0] == "aat"
    assert gemm_layout(*ops["C@D.T"])[0] != "aat"               # another buffer: a gemm


def _ranked(sp, problem) -> dict[str, object]:
    dec = rank(problem, sp, 1, explain=True)
    return {r.candidate.backend: r for r in dec.ranking if r.candidate.algorithm == "blas"}, dec


def test_a_library_not_measured_in_the_layout_is_no_candidate(layout_sp):
    square, _ = _ranked(layout_sp, GemmProblem(200, 200, 200))
    assert set(square) == set(BACKENDS)
    tn, dec = _ranked(layout_sp, GemmProblem(200, 200, 200, "tn"))
    assert set(tn) == {"numpy-openblas", "scipy-openblas"}      # numpy's own call always; scipy measured in tn
    assert any("k_gemm/tn" in t for t in tn["scipy-openblas"].terms)
    assert any("layout: BLAS call tn" in n for n in dec.notes)
    nt, _ = _ranked(layout_sp, GemmProblem(200, 200, 200, "nt"))
    assert set(nt) == {"numpy-openblas"}


def test_aat_is_priced_as_syrk_and_copies_are_paid(layout_sp):
    aat, _ = _ranked(layout_sp, GemmProblem(200, 200, 200, "aat"))
    assert set(aat) == {"numpy-openblas"} and any("k_syrk" in t for t in aat["numpy-openblas"].terms)
    plain, _ = _ranked(layout_sp, GemmProblem(200, 200, 200))
    copied, _ = _ranked(layout_sp, GemmProblem(200, 200, 200, "nn", 40000))
    assert copied["scipy-openblas"].model_seconds > plain["scipy-openblas"].model_seconds


def test_the_reference_is_never_pruned_and_explain_shows_it(layout_sp):
    from autotune.select import choose

    for problem in (GemmProblem(200, 200, 200), GemmProblem(200, 200, 200, "tt"), GemmProblem(500, 90, 300)):
        dec = choose(problem, layout_sp, 1)            # prunes by lower bounds, never the reference
        assert dec.incumbent is not None, problem
        assert "reference: " in dec.describe() and f"{dec.incumbent}" in dec.describe()


# -- Cholesky: the LAPACK triangle of the buffer ---------------------------------------------------

def test_the_lapack_triangle_is_the_users_in_fortran_order_the_other_in_c_order():
    from autotune.core.families import CholeskyProblem

    assert [CholeskyProblem(8, lower, memory).lapack_lower
            for lower in (False, True) for memory in "CF"] == [True, False, False, True]
    assert CholeskyProblem(8, False, "F").note and not CholeskyProblem(8).note


def test_the_upper_triangle_ranks_only_libraries_measured_on_it_and_scipys_call(tiny_db):
    """The tiny database measures potrf's upper triangle on numpy-openblas only: on it, that
    library's potrf is priced on the upper series, scipy's (the reference) on the lower's, and no
    blocked or unblocked kernel is a candidate; on the lower every candidate is ranked."""
    from autotune.core.families import CholeskyProblem
    from autotune.db import load_sp

    sp = load_sp(tiny_db)
    upper = rank(CholeskyProblem(200, False, "F"), sp, 2, explain=True)
    algorithms = {(r.candidate.algorithm, r.candidate.backend) for r in upper.ranking}
    assert algorithms == {("potrf", "numpy-openblas"), ("potrf", "scipy-openblas")}
    terms = {r.candidate.backend: " ".join(r.terms) for r in upper.ranking}
    assert "potrf/upper" in terms["numpy-openblas"] and "potrf/upper" not in terms["scipy-openblas"]
    assert any("upper triangle" in n for n in upper.notes)
    lower = rank(CholeskyProblem(200, False, "C"), sp, 2)
    assert {r.candidate.algorithm for r in lower.ranking} > {"potrf", "blocked"}


def test_the_c_path_remembers_a_cholesky_under_its_lapack_triangle(tiny_db, monkeypatch):
    """A C-ordered upper factor (LAPACK's lower) is remembered for that triangle only: a
    Fortran-ordered one of the same order is decided afresh, and both factors are scipy's."""
    import scipy.linalg as sl

    from autotune import api, options, tuned_cholesky
    from autotune.benchmarks.calls import spd_matrix

    monkeypatch.setenv("AUTOTUNE_DB", str(tiny_db))
    api._front.forget()
    a = spd_matrix(np.random.default_rng(1), 96, "C")
    with options(guard=False):
        np.testing.assert_allclose(tuned_cholesky(a), sl.cholesky(a), rtol=1e-12, atol=1e-12)
        assert api._front.remembered_cholesky(96, True) and not api._front.remembered_cholesky(96, False)
        f = np.asfortranarray(a)
        np.testing.assert_allclose(tuned_cholesky(f), sl.cholesky(f), rtol=1e-12, atol=1e-12)
        assert api._front.remembered_cholesky(96, False)
    api._front.forget()


def test_a_at_on_one_buffer_has_a_c_path_key_of_its_own():
    """Without a database numpy's call is remembered: ``a @ a.T`` on one buffer under its own key
    (numpy's syrk), apart from ``a @ b`` of the same shapes, and each gives numpy's result."""
    from autotune.kernels import _front

    from autotune import options, tuned_gemm

    a = np.random.default_rng(3).standard_normal((80, 80))
    b = a.T.copy()
    with options(db="/nonexistent/autotune-test.h5"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # no database: numpy's call, one warning
        _front.forget()
        np.testing.assert_array_equal(tuned_gemm(a, a.T), a @ a.T)
        assert _front.remembered(a.shape + a.T.shape, True) and not _front.remembered(a.shape + b.shape)
        np.testing.assert_array_equal(tuned_gemm(a, a.T), a @ a.T)      # the C path, numpy's syrk
        np.testing.assert_array_equal(tuned_gemm(a, b), a @ b)
        assert _front.remembered(a.shape + b.shape)
    _front.forget()
