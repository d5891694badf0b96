"""With ``comm=`` every call keeps the one-process (scipy/numpy) contract on the root: ``check_finite=False``
lets NaN through as scipy does, ``overwrite_a=False`` leaves the input untouched, a Strassen plan on
an inf operand gives ``a @ b``, and a stacked LU returns scipy's type. Forced plans reach each path:
the distributed runs (1 x P and P x 1 grids) and the local one."""
from __future__ import annotations

from mpi_helpers import run_mpi

CONTRACTS = """
import warnings
import numpy as np, scipy.linalg as sl
from mpi4py import MPI
from autotune import tuned_cholesky, tuned_gemm, tuned_lu_factor, tuned_solve

warnings.simplefilter("ignore")          # no database here: the local calls warn that they run scipy's
comm = MPI.COMM_WORLD
P, root = comm.size, comm.rank == 0
rng = np.random.default_rng(3)
n = 96
a = rng.standard_normal((n, n)) + n * np.eye(n)
b = rng.standard_normal((n, 3))
nan_a = a.copy(); nan_a[n - 1, n - 1] = np.nan
nan_b = b.copy(); nan_b[0, 0] = np.nan
s = a @ a.T
unread = s.copy(); unread[0, n - 1] = np.nan        # the triangle lower=True does not read
inf_a = a.copy(); inf_a[0, 0] = np.inf

def grids(alg, **kw):
    return [{"algorithm": alg, "p": P, "r": 1, "c": P, **kw}, {"algorithm": alg, "p": P, "r": P, "c": 1, **kw},
            {"algorithm": "local", "p": 1}]

def collective(f, *xs, **kw):
    '''f on every rank, the operands on the root only; every other rank gets None.'''
    out = f(*(x if root else None for x in xs), comm=comm, **kw)
    assert root or out is None, out
    return out

def same(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)

def untouched(x, copy):
    assert np.array_equal(x, copy, equal_nan=True), "input written with overwrite_a=False"

def raises_everywhere(f, match):
    try:
        f()
    except ValueError as exc:
        assert match in str(exc), exc
    else:
        raise AssertionError("no error")

# LU: NaN passes with check_finite=False, as scipy's; the input is never written unless allowed
want_lu, want_piv = sl.lu_factor(nan_a, check_finite=False)
for cfg in grids("lu", b=32):
    x0 = nan_a.copy()
    got = collective(tuned_lu_factor, x0, check_finite=False, config=cfg)
    if root:
        assert type(got) is tuple and np.isnan(got[0]).any()
        same(got[0], want_lu); assert np.array_equal(got[1], want_piv)
        untouched(x0, nan_a)
    f_order = np.asfortranarray(a)
    got = collective(tuned_lu_factor, f_order, overwrite_a=True, config=cfg)     # may write, same answer
    if root:
        lu, piv = sl.lu_factor(a)
        same(got[0], lu); assert np.array_equal(got[1], piv)
    x0 = a.copy(order="F")
    collective(tuned_lu_factor, x0, overwrite_a=False, config=cfg)
    if root:
        untouched(x0, a)
    raises_everywhere(lambda: collective(tuned_lu_factor, nan_a, config=cfg), "infs or NaNs")

# solve: NaN in a or b with check_finite=False gives scipy's NaN solution; a and b stay unwritten
for cfg in [{"algorithm": "gesv", "p": P, "r": 1, "c": P, "b": 32}, {"algorithm": "local", "p": 1}]:
    for aa, bb in ((nan_a, b), (a, nan_b)):
        a0, b0 = aa.copy(), bb.copy()
        got = collective(tuned_solve, a0, b0, check_finite=False, config=cfg)
        if root:
            same(got, sl.solve(aa, bb, check_finite=False)); assert np.isnan(got).any()
            untouched(a0, aa); untouched(b0, bb)
    raises_everywhere(lambda: collective(tuned_solve, nan_a, b, config=cfg), "infs or NaNs")

# Cholesky: with check_finite=False the triangle not read may hold anything, as in scipy
want = sl.cholesky(unread, lower=True, check_finite=False)
for cfg in grids("cholesky", b=16):
    x0 = unread.copy()
    got = collective(tuned_cholesky, x0, lower=True, check_finite=False, config=cfg)
    if root:
        same(got, want); untouched(x0, unread)
    x0 = s.copy()
    got = collective(tuned_cholesky, x0, overwrite_a=False, config=cfg)
    if root:
        same(got, sl.cholesky(s)); untouched(x0, s)
    raises_everywhere(lambda: collective(tuned_cholesky, unread, lower=True, config=cfg), "infs or NaNs")

# gemm: an inf operand gives a @ b on every plan, Strassen's too
for cfg in [{"algorithm": "strassen_summa", "p": P, "r": 1, "c": P, "b": 32, "level": 1},
            {"algorithm": "strassen_ms", "p": P, "r": 1, "c": P, "level": 1},
            {"algorithm": "summa", "p": P, "r": 1, "c": P, "b": 32}, {"algorithm": "local", "p": 1}]:
    got = collective(tuned_gemm, inf_a, a, config=cfg)
    if root:
        np.testing.assert_allclose(got, inf_a @ a, rtol=1e-9, atol=1e-9)

# a stack: scipy's own type and shapes on the root, whatever the forced plan
stack = rng.standard_normal((3, 40, 40))
for cfg in [None, {"algorithm": "lu", "p": P, "r": 1, "c": P, "b": 32}]:
    got = collective(tuned_lu_factor, stack, config=cfg)
    if root:
        want = sl.lu_factor(stack)
        assert type(got) is type(want) and [g.shape for g in got] == [w.shape for w in want]
        same(got[0], want[0]); assert np.array_equal(got[1], want[1])
print("OK", comm.rank, flush=True)
"""


def test_comm_calls_keep_the_one_process_contract(tmp_path):
    proc = run_mpi(CONTRACTS, 2, tmp_path)
    assert proc.stdout.count("OK") == 2, proc.stdout + proc.stderr
