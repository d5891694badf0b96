"""The LU family's entry (``lu_factor``, ``lu_solve``, ``solve`` with scipy.linalg's contracts): the
selector's LAPACK library and thread count on real square float64 problems, scipy's own call for
everything else; ``collective_lu_factor`` and ``collective_solve`` over ``comm=``."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg

from autotune import backends
from autotune.backends import pools
from autotune.backends.pools import call_with_threads
from autotune.core.assumptions import MIN_TUNED_SIZE
from autotune.core.families import (
    CholeskyProblem,
    LuProblem,
    LuSolveProblem,
    Problem,
    SolveProblem,
)
from autotune.core.plans import Candidate
from autotune.db._warn import warn_user
from autotune.dispatch import int_dtype, lu_kernel, run_cholesky, run_getrs, run_lu
from autotune.entry.decide import (
    decide,
    guarded,
    lapack_float64,
    not_tuned,
    reference_routine,
    scipy_call,
    settled,
    untuned_operands,
)
from autotune.entry.protocol import agree_plan, observed, require_mpi4py, run_local, square_problem
from autotune.feedback import guard, learn
from autotune.kernels import _front
from autotune.kernels.inputs import F64, work_buffer
from autotune.select import as_candidate
from autotune.settings import get_options

if TYPE_CHECKING:
    from mpi4py import MPI

GENERAL = (None, "gen", "general")
POSITIVE = ("pos", "positive definite")


def _tunable(a1: np.ndarray, any_integer: bool = False) -> bool:
    """A real square matrix the probe measured the routines for: one scipy factors in float64
    (``lapack_float64``), or with ``any_integer`` any integer or bool (scipy's solve gives float64)."""
    return (a1.ndim == 2 and a1.shape[0] == a1.shape[1] and a1.shape[0] >= MIN_TUNED_SIZE
            and (lapack_float64(a1.dtype) or (any_integer and a1.dtype.kind in "biu")))


def _untuned(family: str, a1: np.ndarray, config, explain: bool, dtype_ok: bool | None = None) -> None:
    """``not_tuned`` for a matrix ``_tunable`` refused: config= raises for its kind (dims, dtype; a
    dtype is tuned when ``dtype_ok``, by default when scipy factors it in float64), explain also names
    a small order; a non-square matrix is left to scipy's own error."""
    if dtype_ok is None:
        dtype_ok = lapack_float64(a1.dtype)
    if a1.ndim != 2 or not dtype_ok:
        not_tuned(family, untuned_operands(a1), config, explain)
    elif a1.shape[0] == a1.shape[1]:
        not_tuned(family, f"order {a1.shape[0]} is below the tuned size {MIN_TUNED_SIZE}", None, explain)


def _work_copy(a, a1: np.ndarray, overwrite: bool, check_finite: bool) -> np.ndarray:
    """The Fortran-ordered float64 buffer to work in (``inputs.work_buffer``)."""
    return work_buffer(a, a1, overwrite=overwrite, check_finite=check_finite, order="F")[0]


def _factor(cand: Candidate, w: np.ndarray) -> tuple[np.ndarray, int]:
    """(1-based LAPACK pivots, info) of factoring ``w`` in place with ``cand``."""
    ipiv = np.empty(w.shape[0], dtype=int_dtype(cand))
    info = run_lu(cand, w, ipiv)
    if info < 0:
        raise ValueError(f"illegal value in {-info}th argument of internal getrf (lu_factor)")
    return ipiv, info


def lu_factor(a, *, overwrite_a: bool = False, check_finite: bool = True, config=None, explain: bool = False):
    """``(lu, piv)`` with ``scipy.linalg.lu_factor``'s contract."""
    if config is not None:
        as_candidate(config, "lu")      # checked whatever the operand (an untuned call ignores it)
    a1 = np.asarray(a)
    if not _tunable(a1):
        _untuned("lu", a1, config, explain)
        return linalg.lu_factor(a, overwrite_a=overwrite_a, check_finite=check_finite)
    opts, state = get_options(), pools.state_code()
    problem = LuProblem(a1.shape[0])
    cand, dec = decide(problem, config, explain, opts, state)
    if cand is None:
        return linalg.lu_factor(a, overwrite_a=overwrite_a, check_finite=check_finite)
    kept, be = _remembered(dec, problem, cand, opts)
    if kept is not None and _hot(a, dec, explain, overwrite_a, be):
        _front.remember_lu(a1.shape[0], lu_kernel(kept, be), *_switch(kept, be, cand), int_dtype(kept),
                           opts, pools.CODES[kept.backend], state)

    def choice():
        w = _work_copy(a, a1, overwrite_a, check_finite)
        ipiv, info = _factor(cand, w)
        if info > 0:
            warn_singular_factor(info)
        return w, (ipiv - 1).astype(np.int32)
    return guarded(dec, problem, opts, choice,
                   lambda: scipy_call(linalg.lu_factor, a, overwrite_a=overwrite_a, check_finite=check_finite))


def _remembered(dec, problem, cand: Candidate, opts) -> tuple[Candidate | None, object]:
    """What the C hot path may run for this decision, and its library: the choice once settled
    (``settled``), the reference's library routine at its own count once the guard demoted the
    choice (scipy's call without the Python path), else None (on trial, or forced)."""
    if settled(dec, problem, opts):
        return cand, backends.get(cand.backend)
    if dec is not None and opts.guard and guard.demoted(problem, cand, dec.threads):
        ref = reference_routine(problem.family)
        return ref, backends.get(ref.backend)
    return None, backends.get(cand.backend)


def _switch(kept: Candidate, be, cand: Candidate) -> tuple[object, int]:
    """(thread setter addresses, threads) the C path runs ``kept`` with: the choice's own count, or,
    for the demoted reference, none (the library's count at the call, as scipy runs it)."""
    return (be.thread_addresses, kept.threads) if kept == cand else (None, kept.threads)


def _hot(a, dec, explain: bool, overwrite: bool, be) -> bool:
    """May the C hot path (``kernels/_front.pyx``) run this choice next time? A selector's choice
    (not a forced one) for a plain ndarray, on a library whose thread count it can switch in C."""
    return (dec is not None and type(a) is np.ndarray and not explain and not overwrite and not learn.enabled()
            and (be.thread_addresses is not None or be.set_threads is None))


def _rhs(b, n: int, overwrite_b: bool, check_finite: bool) -> tuple[np.ndarray, bool] | None:
    """(Fortran float64 (n, nrhs) buffer to solve in, b was 1-D), or None when b is outside the
    tuned domain (scipy then handles it)."""
    b1 = np.asarray(b)
    if b1.ndim not in (1, 2) or b1.shape[0] != n or not (b1.dtype == F64 or b1.dtype.kind in "biu") \
            or b1.size == 0:
        return None
    one = b1.ndim == 1
    x = _work_copy(b, b1, overwrite_b, check_finite)
    return (x[:, None] if one else x), one


def _check_pivots(piv, n: int) -> None:
    """ValueError unless ``piv`` (last axis: one per row, more axes for a stack of factors) holds
    integers in [0, n), the row indices of an order-``n`` factor: LAPACK reads and writes where
    the pivots point, so scipy's own call crashes the process on others (NaN, out of range)."""
    p = np.asarray(piv)
    if p.ndim == 0 or p.shape[-1] != n:
        raise ValueError(f"piv must hold {n} pivot indices per factor, got shape {p.shape}")
    if not _integral(p):
        raise ValueError(f"piv must hold integers (row indices), got {p.dtype} values")
    if p.size and (p.min() < 0 or p.max() >= n):
        raise ValueError(f"piv holds {p.min()}..{p.max()}: pivot indices must lie in [0, {n})")


def _integral(p: np.ndarray) -> bool:
    """Integer or bool dtype, or float/object values that are all whole numbers (scipy truncates
    those to its integer type)."""
    if p.dtype.kind in "biu":
        return True
    if p.dtype.kind not in "fO":
        return False
    try:
        with np.errstate(invalid="ignore"):
            return bool(np.all(np.mod(p, 1) == 0))
    except TypeError:
        return False


def _ipiv(piv, n: int, cand: Candidate) -> np.ndarray | None:
    """scipy's 0-based pivots as LAPACK's 1-based ones in the library's integer type; None unless
    they are n valid row indices (scipy then reports whatever it reports)."""
    p = np.asarray(piv)
    if p.shape != (n,) or p.dtype.kind not in "iu" or (n and (p.min() < 0 or p.max() >= n)):
        return None
    return (p + 1).astype(int_dtype(cand))


def lu_solve(lu_and_piv, b, *, trans: int = 0, overwrite_b: bool = False, check_finite: bool = True,
             config=None, explain: bool = False):
    """The solution of ``a x = b`` (``trans`` 1, 2: ``a^T x = b``) from ``lu_factor``'s output, with
    ``scipy.linalg.lu_solve``'s contract."""
    lu, piv = lu_and_piv
    if config is not None:
        as_candidate(config, "lu_solve")
    lu1 = np.asarray(lu)
    if lu1.ndim >= 2:
        _check_pivots(piv, lu1.shape[-2])
    fallback = lambda: linalg.lu_solve((lu, piv), b, trans=trans, overwrite_b=overwrite_b,  # noqa: E731
                                       check_finite=check_finite)
    if not (_tunable(lu1) and lu1.dtype == F64 and trans in (0, 1, 2)):
        if trans in (0, 1, 2):
            _untuned("lu_solve", lu1, config, explain, dtype_ok=lu1.dtype == F64)
        return fallback()
    n = lu1.shape[0]
    b1 = np.asarray(b)
    nrhs = b1.shape[1] if b1.ndim == 2 else 1
    opts, problem = get_options(), LuSolveProblem(n, max(nrhs, 1))
    cand, dec = decide(problem, config, explain, opts)
    ipiv = None if cand is None else _ipiv(piv, n, cand)
    if ipiv is None:
        return fallback()

    def choice():
        got = _rhs(b, n, overwrite_b, check_finite)
        if got is None:
            return fallback()
        x, one = got
        lu_f = lu1 if lu1.flags.f_contiguous else _front.aligned_copy(lu1, "F")
        info = run_getrs(cand, lu_f, ipiv, x, int(trans != 0))
        if info < 0:
            raise ValueError(f"illegal value in {-info}th argument of internal gesv|posv")
        return x[:, 0] if one else x
    return guarded(dec, problem, opts, choice, lambda: scipy_call(fallback))


def _structure(a1: np.ndarray) -> str:
    """"general", or "triangular"/"symmetric" when scipy's ``assume_a=None`` would treat ``a`` so
    (cheap corner tests first; the full O(n^2) test only when they cannot tell)."""
    n = a1.shape[0]
    if a1[n - 1, 0] == 0 or a1[0, n - 1] == 0:
        if not np.tril(a1, -1).any() or not np.triu(a1, 1).any():
            return "triangular"
    if a1[0, 1] == a1[1, 0] and a1[n - 1, 0] == a1[0, n - 1] and np.array_equal(a1, a1.T):
        return "symmetric"
    return "general"


def solve(a, b, *, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          check_finite: bool = True, assume_a=None, transposed: bool = False, config=None, explain: bool = False):
    """The solution of ``a x = b`` with ``scipy.linalg.solve``'s contract: the tuned LU for a general
    matrix, the tuned Cholesky for ``assume_a="pos"``, scipy for other structures."""
    def scipy_solve():
        return linalg.solve(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                            check_finite=check_finite, assume_a=assume_a, transposed=transposed)

    if config is not None:
        as_candidate(config, "cholesky" if assume_a in POSITIVE else "solve")
    a1 = np.asarray(a)
    if not (_tunable(a1, any_integer=True) and (assume_a in GENERAL or assume_a in POSITIVE)):
        if assume_a in GENERAL or assume_a in POSITIVE:
            _untuned("solve", a1, config, explain, lapack_float64(a1.dtype) or a1.dtype.kind in "biu")
        else:
            not_tuned("solve", f"assume_a={assume_a!r} (tuned: general and positive definite)", config, explain)
        return scipy_solve()
    if assume_a is None and _structure(a1) != "general":
        return scipy_solve()
    b1 = np.asarray(b)
    if b1.ndim not in (1, 2) or b1.shape[0] != a1.shape[0]:
        return scipy_solve()
    n, nrhs = a1.shape[0], (b1.shape[1] if b1.ndim == 2 else 1)
    family = "cholesky" if assume_a in POSITIVE else "solve"
    opts, state = get_options(), pools.state_code()
    problem = CholeskyProblem(n, bool(lower), "F") if family == "cholesky" else SolveProblem(n, max(nrhs, 1))
    cand, dec = decide(problem, config, explain, opts, state)
    if cand is None:
        return scipy_solve()
    kept, be = _remembered(dec, problem, cand, opts)
    if family == "solve" and nrhs >= 1 and kept is not None and _hot(a, dec, explain, overwrite_a or overwrite_b, be):
        _front.remember_solve(n, nrhs, _SolveRunner(be), *_switch(kept, be, cand), opts, pools.CODES[kept.backend],
                              state)

    def choice():
        w = _work_copy(a, a1, overwrite_a, check_finite)
        got = _rhs(b, n, overwrite_b, check_finite)
        if got is None:
            return scipy_solve()
        x, one = got
        if family == "cholesky":
            _solve_pos(cand, w, x, lower)
        else:
            _solve_general(cand, w, x, transposed)
        return x[:, 0] if one else x
    return guarded(dec, problem, opts, choice, lambda: scipy_call(scipy_solve))


def warn_singular_factor(info: int) -> None:
    """scipy's ``lu_factor`` warning for an exactly zero pivot (LAPACK info > 0), at the user's line."""
    warn_user(f"Diagonal number {info} is exactly zero. Singular matrix.", linalg.LinAlgWarning)


def singular() -> np.linalg.LinAlgError:
    return np.linalg.LinAlgError("A singular matrix detected: slice(s) [0] are singular.")


def _ill_conditioned(rcond: float) -> None:
    if rcond < np.finfo(np.float64).eps:
        warnings.warn(f"An ill-conditioned matrix detected: slice 0 has rcond = {rcond}.", linalg.LinAlgWarning,
                      stacklevel=4)


class _SolveRunner:
    """``run(w, (x, trans)) -> info`` on one library (the C hot path's solve kernel, called with the
    library at the chosen thread count): factor ``w`` (Fortran order) in place, warn as scipy does
    when it is ill-conditioned, solve op(w) x = b in ``x``. info > 0: singular (nothing solved)."""

    def __init__(self, be):
        self.dtype = np.dtype(be.int_dtype)
        self.getrf, self.getrs = be.ops["getrf"], be.ops["getrs"]
        # The O(n^2) norm and condition estimate from scipy's LAPACK where the library has none (Numba).
        cond = be if "gecon" in be.ops else backends.get("scipy-openblas")
        self.lange, self.gecon = cond.ops["lange"], cond.ops["gecon"]

    def __call__(self, w: np.ndarray, job: tuple[np.ndarray, bool]) -> int:
        x, trans = job
        anorm = self.lange(w)
        ipiv = np.empty(w.shape[0], self.dtype)
        info = self.getrf(w, ipiv)
        if info != 0:
            return info
        _ill_conditioned(self.gecon(w, anorm))
        return self.getrs(w, ipiv, x, int(trans))


def _solve_general(cand: Candidate, w: np.ndarray, x: np.ndarray, transposed: bool) -> None:
    """Factor ``w`` and solve in ``x`` (in place) with ``cand``'s library and threads; scipy's
    singular error and ill-conditioning warning."""
    be = backends.get(cand.backend)
    info = call_with_threads(be, cand.threads, _SolveRunner(be), w, (x, bool(transposed)))
    if info > 0:
        raise singular()
    if info < 0:
        raise ValueError(f"Internal LAPACK errors: slice 0 emits lapack info={info}.")


def _solve_pos(cand: Candidate, w: np.ndarray, x: np.ndarray, lower: bool) -> None:
    """Cholesky-factor ``w`` (its ``lower`` triangle) with ``cand`` and solve in ``x``; scipy's
    singular error and ill-conditioning warning (LAPACK pocon on the factor)."""
    be = backends.get(cand.backend if "potrs" in backends.get(cand.backend).ops else "scipy-openblas")
    anorm = be.ops["lansy"](w, lower)
    info = run_cholesky(cand, w, lower)
    if info > 0:
        raise singular()
    _ill_conditioned(be.ops["pocon"](w, anorm, lower))
    be.ops["potrs"](w, x, lower)


__all__ = ["lu_factor", "lu_solve", "solve"]


def collective_lu_factor(a, comm: MPI.Comm, *, overwrite_a: bool = False, check_finite: bool = True, root: int = 0,
                         config=None, explain: bool = False, phases=None):
    """Collective ``scipy.linalg.lu_factor``: the root passes a and gets ``(lu, piv)`` (a
    ``LinAlgWarning`` for an exactly singular factor, as scipy); others get None. ``overwrite_a``
    and ``check_finite`` are the root's, as in scipy."""
    require_mpi4py()
    plan, args, _ = agree_plan("lu", lambda: square_problem(a, LuProblem, rectangular=True), comm, root, config,
                               explain, phases)
    root = args["root"]
    if plan.algorithm == "local":
        return run_local(comm, root, plan, phases,
                          lambda: lu_factor(a, overwrite_a=overwrite_a, check_finite=check_finite))
    from autotune.distributed import lu as distributed_lu

    res = observed(comm, root, plan, phases, lambda ph: distributed_lu.lu_factor(
        a if comm.rank == root else None, comm, plan, root=root, phases=ph, overwrite_a=overwrite_a,
        check_finite=check_finite))
    if res is None:
        return None
    lu, piv, info = res
    if info:
        warn_singular_factor(info)
    return lu, piv



def collective_solve(a, b, comm: MPI.Comm, *, lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True, assume_a=None, transposed: bool = False, root: int = 0,
                     config=None, explain: bool = False, phases=None):
    """Collective ``scipy.linalg.solve``: the root passes a and b and gets x; others get None. A
    singular matrix raises LinAlgError on every rank of the plan. ``overwrite_a``, ``overwrite_b``
    and ``check_finite`` are the root's, as in scipy (a distributed run never writes into ``b``)."""
    require_mpi4py()
    plan, args, ops = agree_plan("solve", lambda: _solve_operands(a, b, assume_a, transposed), comm, root, config,
                                 explain, phases)
    root = args["root"]
    if plan.algorithm == "local":
        return run_local(comm, root, plan, phases, lambda: solve(
            a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b, check_finite=check_finite,
            assume_a=assume_a, transposed=transposed))
    from autotune.distributed import lu as distributed_lu

    def run(ph):
        a2, b2 = ops[:2] if comm.rank == root else (None, None)
        rhs = None if b2 is None else (b2 if b2.ndim == 2 else b2[:, None])
        res = distributed_lu.solve(a2, rhs, comm, plan, root=root, phases=ph, overwrite_a=overwrite_a,
                                   check_finite=check_finite)
        x, info = res if res is not None else (None, 0)
        if info:
            raise singular()
        return x if x is None or b2.ndim == 2 else x[:, 0]

    return observed(comm, root, plan, phases, run)



def _solve_operands(a, b, assume_a, transposed) -> tuple[tuple, Problem | None]:
    """Root only: ``(op(a), b)`` and their SolveProblem where the distributed solve takes them (a
    general square float64 system), else None; scipy's errors for mismatched shapes."""
    if a is None or b is None:
        raise ValueError("the root rank must pass a and b (other ranks pass None)")
    a1, b1 = np.asarray(a), np.asarray(b)
    if a1.ndim != 2 or b1.ndim not in (1, 2):
        return (a1, b1), None          # stacked: scipy's own call decides
    if a1.shape[0] != a1.shape[1]:
        raise ValueError("Input a needs to be a square matrix.")
    if b1.shape[0] != a1.shape[0]:
        raise ValueError(f"Input b has to have same number of rows as input a: {b1.shape[0]} != {a1.shape[0]}")
    n, nrhs = a1.shape[0], (b1.shape[1] if b1.ndim == 2 else 1)
    tuned = (assume_a in GENERAL and a1.dtype == np.float64 and b1.dtype.kind in "biuf"
             and n > 0 and nrhs > 0)
    return ((a1.T if transposed else a1), b1), SolveProblem(n, nrhs) if tuned else None
