"""Tuned calls in one process: the candidate (forced ``config`` or the selector's choice), run
through dispatch, or numpy/scipy's own call when there is nothing to tune or no usable database."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from scipy import linalg

from autotune import backends, guard, learn
from autotune.assumptions import ALIGNED_OUTPUT_WORK, MIN_TUNED_SIZE
from autotune.backends import pools
from autotune.config import Options, get_options
from autotune.db import load_sp
from autotune.db.pools import transitions_for
from autotune.dispatch import cholesky_runner, run_cholesky, run_gemm
from autotune.families import FAMILIES, CholeskyProblem, GemmProblem, Problem, gemm_layout
from autotune.kernels import _front
from autotune.kernels._matadd import zero_triangle
from autotune.plans import Candidate
from autotune.select import Decision, as_candidate, choose, rank

_F64 = np.dtype(np.float64)
T = TypeVar("T")
# Scalar types compared directly for alpha == 1 and beta == 0 (anything else is checked first).
_SCALARS = (int, float, complex, np.number, np.bool_)
# MIN_TUNED_SIZE (below it the selector is skipped) and ALIGNED_OUTPUT_WORK (numpy's own
# multi-threaded call writes into an aligned output from this m*n*k up) live in assumptions.py.
# Outputs of BLOCK_CACHE_MIN bytes and more come from the reused blocks of kernels/_front.pyx
# whatever the thread count (no page faults in a loop of calls).


def lapack_float64(dtype: np.dtype) -> bool:
    """Whether scipy.linalg's LAPACK routines compute an array of ``dtype`` in float64: float64 and
    the integers wider than 16 bits (scipy promotes a real dtype with float32: bool and the smaller
    integers give float32, which the tuned float64 routines must leave to scipy)."""
    return dtype == _F64 or (dtype.kind in "biu" and np.promote_types(dtype, np.float32) == _F64)


def untuned_operands(*operands) -> str:
    """Why operands are outside the tuned domain (2-D float64 ndarrays): their kind, dims or dtype."""
    for x in operands:
        if not isinstance(x, np.ndarray):
            return f"an operand is a {type(x).__name__}, not an ndarray"
        if type(x) is not np.ndarray:
            return f"an operand is an ndarray subclass ({type(x).__name__})"
        if x.ndim != 2:
            return f"an operand is {x.ndim}-D ({'a stack of matrices' if x.ndim > 2 else 'not a matrix'})"
        if x.dtype != _F64:
            return f"dtype {x.dtype} (the tuned routines compute float64)"
    return "the operands are outside the tuned domain"


def not_tuned(family: str, why: str, config, explain: bool) -> None:
    """What a call the tuned routines do not take owes its user: ``config=`` raises ValueError saying
    why; ``explain`` prints why numpy/scipy's own call runs."""
    if config is not None:
        raise ValueError(f"config= applies to tuned calls only; this {family} call is not tuned: {why}")
    if explain:
        print(f"{family}: not tuned ({why}); {FAMILIES[family].library.split('-')[0]}'s own call runs")


def decide(problem: Problem, config, explain: bool, opts: Options | None = None,
           state: int | None = None) -> tuple[Candidate, Decision | None]:
    """The candidate to run under ``opts`` (None: the options in force) in pool state ``state``
    (``pools.state_code()``; None: now): forced ``config`` or the selector's choice; None when
    untuned. After a gap that may hide a call of the program's own, that call is taken to be on
    the library numpy or scipy uses for the family."""
    opts = get_options() if opts is None else opts
    if config is not None:
        return as_candidate(config, problem.family), None
    sp = load_sp(opts.db)
    if sp.table is None:
        sp.k("gemm", "numpy-openblas", 1, 1)   # warns once: no usable database
        return None, None
    transitions = transitions_for(sp)
    pools.set_hot_window(transitions.hot_window, transitions.foreign_gap)
    after = pools.from_code(pools.state_code() if state is None else state)
    if after == pools.FOREIGN:      # the family's library, if it has a pool (a stencil backend has none)
        library = FAMILIES[problem.family].library
        be = backends.get(library)
        after = pools.PoolState(library, be.get_threads(), 0.0) if be.get_threads else None
    if explain:
        budget = opts.budget
        dec = rank(problem, sp, budget.threads, opts.allow_strassen, explain=True, after=after,
                   memory_bytes=opts.memory_cap)
        dec.limit = budget.source
        print(dec)
        return dec.chosen, dec
    try:
        dec = choose(problem, sp, opts.thread_budget, opts.allow_strassen, after=after, memory_bytes=opts.memory_cap)
    except LookupError:
        return None, None
    return dec.chosen, dec


def gemm(a, b, *, alpha=1.0, beta=0.0, c=None, trans_a: bool = False, trans_b: bool = False, out=None, config=None,
         explain: bool = False):
    """``alpha op(a) op(b) + beta c`` into ``out`` (or a new array): numpy's result and errors."""
    # No extra in effect. ``is True``: a comparison that is not a Python bool (an array's, whose
    # truth is ambiguous; a numpy scalar's) is not plain, so check_extras sees it (same values).
    plain = c is None and not trans_a and not trans_b and (alpha == 1.0) is True and (beta == 0.0) is True
    if config is not None:
        as_candidate(config, "gemm")        # checked whatever the operands (a small or untuned call ignores it)
    if not (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and a.dtype == _F64 and b.dtype == _F64):
        not_tuned("gemm", untuned_operands(a, b), config, explain)
        return np.matmul(a, b, out=out) if plain else generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out)
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    k2, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != k2 or 0 in (m, n, k) or max(m, n, k) < MIN_TUNED_SIZE:
        if k == k2:
            not_tuned("gemm", f"{m}x{k}x{n} is below the tuned size {MIN_TUNED_SIZE}", None, explain)
        return np.matmul(a, b, out=out) if plain else generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out)
    if not plain:
        check_extras((m, n), alpha, beta, c)
        if not _keeps_float64(alpha, beta, c):      # complex or wider scalars or c: numpy's arithmetic
            return generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out)
    hot = plain and out is None and config is None and not explain and a.ndim == 2 and b.ndim == 2
    opts, state = get_options(), pools.state_code()
    into_out = out is not None and _direct_target(out, a, b, (m, n)) and out.flags.f_contiguous
    layout, copied = gemm_layout(a, b, trans_a, trans_b, into_out)
    problem = GemmProblem(m, k, n, layout, copied)
    cand, dec = decide(problem, config, explain, opts, state)
    if cand is None:                        # no database (or no candidate): numpy's own call, remembered in C
        if hot and not learn.enabled():
            _front.remember(a.shape + b.shape, False, opts, _numpy_threads(), state, layout == "aat")
        return _numpy_matmul(a, b, out) if plain else generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out)
    if hot and not learn.enabled() and dec is not None and opts.guard \
            and guard.demoted(problem, cand, dec.threads):       # the guard demoted it: numpy's call, in C
        _front.remember(a.shape + b.shape, False, opts, _numpy_threads(), state, layout == "aat")
    direct = out is None or _direct_target(out, a, b, (m, n))
    own = (cand.algorithm == "blas" and cand.backend == "numpy-openblas"     # numpy's own call (its syrk on aat)
           and (layout == "aat" or backends.get(cand.backend).get_threads() == cand.threads))
    def reference():
        return _numpy_matmul(a, b, out) if plain else generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out)

    if plain and (own or not direct):
        aligned = own and out is None and ((cand.threads > 1 and m * n * k >= ALIGNED_OUTPUT_WORK)
                                           or 8 * m * n >= _front.BLOCK_CACHE_MIN)
        if own and hot and not learn.enabled() and settled(dec, problem, opts):   # C keys shapes and aat
            _front.remember(a.shape + b.shape, aligned, opts, cand.threads, state, layout == "aat")
        target = _front.aligned_empty((m, n)) if aligned else out
        threads = cand.threads if own else None
        if dec is not None and learn.enabled():
            return _observed(dec, lambda: _numpy_matmul(a, b, target, threads))
        if own:          # numpy's call at the choice's count: guarded where that is not numpy's count now
            return guarded(dec, problem, opts, lambda: _numpy_matmul(a, b, target, threads), reference)
        return _numpy_matmul(a, b, target, threads)  # numpy's out rules

    def choice():
        target = out if (direct and out is not None) else _front.aligned_empty((m, n))
        if c is not None and beta != 0.0 and c is not target:
            np.copyto(target, c)
        run_gemm(cand, a, b, target, float(alpha), float(beta) if c is not None else 0.0, trans_a, trans_b)
        return target if out is None or target is out else copy_out(target, out)
    return guarded(dec, problem, opts, choice, reference)


def _numpy_threads() -> int:
    """numpy's library thread count now (what its own call runs with)."""
    return backends.get("numpy-openblas").get_threads()


def _numpy_matmul(a, b, out, threads: int | None = None):
    """numpy's own product under its library's lease at ``threads`` (None: its count now)."""
    be = backends.get("numpy-openblas")
    with pools.lease(be, be.get_threads() if threads is None else threads):
        return np.matmul(a, b, out=out)


def guarded(dec: Decision | None, problem: Problem, opts: Options, choice: Callable[[], T],
            reference: Callable[[], T]) -> T:
    """Run the candidate (``choice()``): through the run-time guard, which may run ``reference()``
    (numpy/scipy's own call) instead, when it is the selector's choice of another than the reference."""
    work = (lambda: _observed(dec, choice)) if dec is not None and learn.enabled() else choice
    if dec is None or _unguarded(dec, opts):
        return work()
    return guard.run(problem, dec, work, reference, opts.db)


def _unguarded(dec: Decision, opts: Options) -> bool:
    """The guard does not watch this decision: it is off, or the choice is the reference call itself
    (the reference's library at the thread count it has now: under a budget below that count, as in a
    cgroup CPU quota the library does not read, the choice is not the call the user would have run)."""
    return not opts.guard or dec.incumbent is None or (
        dec.chosen == dec.incumbent and backends.get(dec.chosen.backend).get_threads() == dec.chosen.threads)


def settled(dec: Decision | None, problem: Problem, opts: Options) -> bool:
    """May the C hot path run this decision's choice unguarded? (not watched, or kept by the
    guard; a forced ``config`` is never remembered)"""
    return dec is not None and (_unguarded(dec, opts) or guard.kept(problem, dec.chosen, dec.threads))


def reference_routine(family: str) -> Candidate:
    """The family's reference routine (numpy/scipy's library call) at its library's thread count
    now: what the C hot path runs for a decision the guard demoted, or without a database."""
    algorithm, library = FAMILIES[family].incumbent
    return Candidate(algorithm, library, backends.get(library).get_threads())


def scipy_call(fn: Callable[..., T], *args, **kwargs) -> T:
    """scipy's own routine ``fn(*args, **kwargs)`` under its library's lease at its count now."""
    be = backends.get("scipy-openblas")
    with pools.lease(be, be.get_threads()):
        return fn(*args, **kwargs)


def _observed(dec: Decision, work):
    """Run ``work()`` timing it for on-line refinement (opt-in: ``AUTOTUNE_LEARN=1``); O(1) record."""
    t0 = time.perf_counter()
    result = work()
    learn.observe(dec, time.perf_counter() - t0, get_options().db)
    return result


def _direct_target(out, a, b, shape) -> bool:
    """Can BLAS write straight into ``out``? (float64, right shape, contiguous, not aliasing a or b)."""
    return (type(out) is np.ndarray and out.dtype == _F64 and out.shape == shape and out.flags.writeable
            and (out.flags.c_contiguous or out.flags.f_contiguous)
            and not np.may_share_memory(out, a) and not np.may_share_memory(out, b))


def copy_out(res: np.ndarray, out):
    """numpy's rules for ``out=``: an ndarray of the result's shape, same-kind casting."""
    if not isinstance(out, np.ndarray):
        raise TypeError("return arrays must be of ArrayType")
    if out.shape != res.shape:
        raise ValueError(f"out has shape {out.shape}, expected {res.shape}")
    np.copyto(out, res, casting="same_kind")
    return out


def generic_gemm(a, b, alpha, beta, c, trans_a, trans_b, out):
    """BLAS-style extras for what is not tuned (any dtype, 2-D): numpy does the arithmetic."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("alpha/beta/c/trans_a/trans_b need 2-D operands")
    res = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
    check_extras(res.shape, alpha, beta, c)
    if alpha != 1.0:
        res = alpha * res
    if c is not None and beta != 0.0:
        res = res + beta * np.asarray(c)
    return res if out is None else copy_out(res, out)


def check_extras(shape: tuple[int, int], alpha, beta, c) -> None:
    """The BLAS-style extras, checked alike on every path (any size, dtype, tuned or not, comm=):
    ``alpha`` and ``beta`` numbers (TypeError), ``c`` of the product's ``shape`` whenever given, even
    with ``beta == 0`` where it is not read (ValueError)."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        v = np.asarray(value)
        if v.ndim or v.dtype.kind not in "biufc":
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if c is not None and np.shape(c) != tuple(shape):
        raise ValueError(f"c has shape {np.shape(c)}, expected {tuple(shape)}")


def unit_scalars(alpha, beta) -> bool:
    """``alpha == 1`` and ``beta == 0`` as scalar numbers (no extra in effect); an array or a
    non-number is False, left to ``check_extras``, instead of being truth-tested (ambiguous)."""
    return isinstance(alpha, _SCALARS) and isinstance(beta, _SCALARS) and alpha == 1 and beta == 0


def _keeps_float64(alpha, beta, c) -> bool:
    """Whether numpy's arithmetic keeps ``alpha op(a) op(b) + beta c`` of float64 operands float64
    (what the tuned kernels compute): no complex or longer-than-float64 scalar or ``c`` in effect
    (``alpha`` 1 and ``c`` with ``beta`` 0 are not applied, as in ``generic_gemm``)."""
    terms = [] if alpha == 1 else [alpha]
    if c is not None and beta != 0:
        terms += [beta, np.asarray(c).dtype]
    return np.result_type(_F64, *terms) == _F64


def cholesky(a, *, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True, config=None,
             explain: bool = False):
    """The Cholesky factor of ``a`` with scipy.linalg.cholesky's contract."""
    if config is not None:
        as_candidate(config, "cholesky")
    a1 = np.asarray(a)
    overwrite_a = overwrite_a and a1.flags.writeable   # scipy's potrf would write into a read-only array
    if a1.ndim != 2 or not lapack_float64(a1.dtype) or a1.shape[0] == 0 \
            or a1.shape[0] != a1.shape[1]:
        if a1.ndim != 2 or not lapack_float64(a1.dtype):
            not_tuned("cholesky", untuned_operands(a1), config, explain)
        return linalg.cholesky(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)
    n = a1.shape[0]
    cand = dec = None
    opts, state = get_options(), pools.state_code()
    hot = type(a) is np.ndarray and not explain
    problem = CholeskyProblem(n, bool(lower), "C" if a1.flags.c_contiguous else "F")   # the buffer's order
    if n < MIN_TUNED_SIZE and config is None:
        not_tuned("cholesky", f"order {n} is below the tuned size {MIN_TUNED_SIZE}", None, explain)
    if n >= MIN_TUNED_SIZE or config is not None:
        cand, dec = decide(problem, config, explain, opts, state)
        if dec is not None and cand is not None and settled(dec, problem, opts):
            _remember_cholesky(cand, problem, overwrite_a, hot, opts, state=state)
        elif dec is not None and opts.guard and guard.demoted(problem, cand, dec.threads):   # scipy's call, in C
            _remember_cholesky(reference_routine("cholesky"), problem, overwrite_a, hot, opts,
                               switch_threads=False, state=state)
    if cand is None:
        cand = reference_routine("cholesky")
        if n >= MIN_TUNED_SIZE:                 # no database: scipy's potrf as scipy runs it, remembered in C
            _remember_cholesky(cand, problem, overwrite_a, hot, opts, switch_threads=False, state=state)
            return _scipy_cholesky(a1, lower, overwrite_a, check_finite)
    return guarded(dec, problem, opts, lambda: _cholesky_run(cand, a, a1, lower, overwrite_a, check_finite),
                   lambda: _scipy_cholesky(a1, lower, overwrite_a, check_finite))


def _cholesky_run(cand: Candidate, a, a1: np.ndarray, lower: bool, overwrite_a: bool, check_finite: bool):
    """The Cholesky factor by ``cand``, in a buffer ``_cholesky_buffer`` gives."""
    w, clean = _cholesky_buffer(a, a1, lower, overwrite_a, check_finite)
    # A C-ordered buffer is the transpose in Fortran order: factor that with the other triangle.
    wf, lo = (w, lower) if w.flags.f_contiguous else (w.T, not lower)
    info = run_cholesky(cand, wf, lo)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    if info < 0:
        raise ValueError(f"LAPACK reported an illegal value in {-info}-th argument on entry to \"POTRF\".")
    if not clean:
        zero_triangle(wf, lo)
    return w


def _cholesky_buffer(a, a1: np.ndarray, lower: bool, overwrite_a: bool, check_finite: bool) -> tuple[np.ndarray, bool]:
    """The float64 buffer to factor in place (``a`` itself when allowed) and whether its unused
    triangle is already zero; ValueError for inf/NaN when ``check_finite``."""
    contiguous = a1.flags.f_contiguous or a1.flags.c_contiguous
    if overwrite_a and a1 is a and a1.dtype == _F64 and a1.flags.writeable and contiguous:
        w, clean = a1, False
    elif a1.dtype == _F64 and contiguous:
        w, clean = _front.prepare_cholesky(a1, lower, check_finite), True
    else:
        w, clean = _front.aligned_copy(a1, "C" if a1.flags.c_contiguous else "F"), False
    if w is None or (check_finite and not clean and not np.isfinite(w).all()):
        raise ValueError("array must not contain infs or NaNs")
    return w, clean


def _scipy_cholesky(a1, lower: bool, overwrite_a: bool, check_finite: bool):
    """scipy's own Cholesky under its library's lease at its count now."""
    return scipy_call(linalg.cholesky, a1, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)


def _remember_cholesky(cand: Candidate, problem: CholeskyProblem, overwrite_a: bool, hot: bool, opts: Options,
                       switch_threads: bool = True, state: int = 0) -> None:
    """Let the C hot path run this order's choice in pool state ``state`` under ``opts`` (switching
    the library's threads in C, unless ``switch_threads`` is False: then at whatever count the
    library has, as scipy would). The C path keys the order and the LAPACK triangle."""
    if not hot or overwrite_a or learn.enabled():
        return
    n, tri = problem.n, problem.lapack_lower
    be, lib = backends.get(cand.backend), pools.CODES[cand.backend]
    if not switch_threads:
        _front.remember_cholesky(n, cholesky_runner(cand), None, be.get_threads(), opts, lib, state, tri)
        return
    if be.thread_addresses or be.set_threads is None:
        _front.remember_cholesky(n, cholesky_runner(cand), be.thread_addresses, cand.threads, opts, lib, state, tri)
