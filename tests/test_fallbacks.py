"""Visible fallbacks (issue 61 item 7): a call the tuned routines do not take says so under
``explain=True``, and ``config=`` on it is a ValueError saying why; the result stays numpy's/scipy's."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl

from autotune import tuned_cholesky, tuned_gemm, tuned_lu_factor, tuned_lu_solve, tuned_solve
from autotune.core.plans import Candidate

SPD = np.eye(40) * 4 + 1


@pytest.mark.parametrize(("a", "why"), [
    (np.ones((40, 40), np.float32), "dtype float32"),
    (np.ones((3, 40, 40)), "3-D (a stack of matrices)"),
    (np.ones(40), "1-D (not a matrix)"),
    (np.ones((40, 40), complex), "dtype complex128"),
])
def test_gemm_says_why_it_is_not_tuned_and_refuses_a_config(a, why, capsys):
    want = np.matmul(a, a)
    np.testing.assert_array_equal(tuned_gemm(a, a, explain=True), want)
    out = capsys.readouterr().out
    assert out.startswith("gemm: not tuned (") and why in out and out.endswith("; numpy's own call runs\n"), out
    with pytest.raises(ValueError, match=f"not tuned: .*{why.split(' (')[0]}"):
        tuned_gemm(a, a, config=Candidate("blas", "numpy-openblas", 1))


def test_a_small_product_is_explained_and_keeps_numpy(capsys):
    a = np.ones((8, 8))
    np.testing.assert_array_equal(tuned_gemm(a, a, explain=True), a @ a)
    assert "below the tuned size" in capsys.readouterr().out


def test_the_factorisations_say_why_and_refuse_a_config(capsys):
    f32, stack = SPD.astype(np.float32), np.stack([SPD, SPD])
    np.testing.assert_allclose(tuned_cholesky(f32, explain=True), sl.cholesky(f32))
    assert capsys.readouterr().out.startswith("cholesky: not tuned (dtype float32")
    with pytest.raises(ValueError, match="cholesky call is not tuned: dtype float32"):
        tuned_cholesky(f32, config=Candidate("potrf", "scipy-openblas", 1))
    tuned_lu_factor(stack[0].astype(np.float16), explain=True)
    assert capsys.readouterr().out.startswith("lu: not tuned (dtype float16")
    with pytest.raises(ValueError, match="lu call is not tuned"):
        tuned_lu_factor(f32, config=Candidate("getrf", "scipy-openblas", 1))
    with pytest.raises(ValueError, match="solve call is not tuned: dtype complex128"):
        tuned_solve(SPD.astype(complex), np.ones(40), config=Candidate("gesv", "scipy-openblas", 1))
    np.testing.assert_allclose(tuned_solve(SPD, np.ones(40), assume_a="sym", explain=True),
                               sl.solve(SPD, np.ones(40), assume_a="sym"))
    assert "assume_a='sym'" in capsys.readouterr().out
    lu = sl.lu_factor(f32)
    np.testing.assert_allclose(tuned_lu_solve(lu, np.ones(40, np.float32), explain=True),
                               sl.lu_solve(lu, np.ones(40, np.float32)))
    assert capsys.readouterr().out.startswith("lu_solve: not tuned (dtype float32")
