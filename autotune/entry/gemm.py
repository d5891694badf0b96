"""The gemm family's entry: ``local`` (``a @ b`` and BLAS dgemm's alpha, beta, c, transposes and out,
with numpy's results and errors) and ``collective`` (the same over ``comm=``, the root's operands)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune import backends
from autotune.backends import pools
from autotune.core.assumptions import ALIGNED_OUTPUT_WORK, MIN_TUNED_SIZE
from autotune.core.families import GemmProblem, Problem, gemm_layout
from autotune.core.plans import Plan
from autotune.dispatch import run_gemm
from autotune.entry.decide import (
    SCALARS,
    decide,
    guarded,
    library_threads,
    not_tuned,
    observe_call,
    settled,
    untuned_operands,
)
from autotune.entry.protocol import agree_plan, observed, require_mpi4py, root_matrices, run_local
from autotune.feedback import guard, learn
from autotune.kernels import _front
from autotune.kernels.inputs import F64
from autotune.select import as_candidate
from autotune.settings import get_options

if TYPE_CHECKING:
    from mpi4py import MPI


def local(a, b, *, alpha=1.0, beta=0.0, c=None, trans_a: bool = False, trans_b: bool = False, out=None, config=None,
          explain: bool = False):
    """``alpha op(a) op(b) + beta c`` into ``out`` (or a new array): numpy's result and errors."""
    # No extra in effect. ``is True``: a comparison that is not a Python bool (an array's, whose
    # truth is ambiguous; a numpy scalar's) is not plain, so check_extras sees it (same values).
    plain = c is None and not trans_a and not trans_b and (alpha == 1.0) is True and (beta == 0.0) is True
    if config is not None:
        as_candidate(config, "gemm")        # checked whatever the operands (a small or untuned call ignores it)
    if not (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and a.dtype == F64 and b.dtype == F64):
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
           and (layout == "aat" or library_threads(cand.backend) == cand.threads))
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
            return observe_call(dec, lambda: _numpy_matmul(a, b, target, threads))
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
    return library_threads("numpy-openblas")



def _numpy_matmul(a, b, out, threads: int | None = None):
    """numpy's own product under its library's lease at ``threads`` (None: its count now)."""
    be = backends.get("numpy-openblas")
    with pools.lease(be, library_threads("numpy-openblas") if threads is None else threads):
        return np.matmul(a, b, out=out)



def _direct_target(out, a, b, shape) -> bool:
    """Can BLAS write straight into ``out``? (float64, right shape, contiguous, not aliasing a or b)."""
    return (type(out) is np.ndarray and out.dtype == F64 and out.shape == shape and out.flags.writeable
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
    return isinstance(alpha, SCALARS) and isinstance(beta, SCALARS) and alpha == 1 and beta == 0



def _keeps_float64(alpha, beta, c) -> bool:
    """Whether numpy's arithmetic keeps ``alpha op(a) op(b) + beta c`` of float64 operands float64
    (what the tuned kernels compute): no complex or longer-than-float64 scalar or ``c`` in effect
    (``alpha`` 1 and ``c`` with ``beta`` 0 are not applied, as in ``generic_gemm``)."""
    terms = [] if alpha == 1 else [alpha]
    if c is not None and beta != 0:
        terms += [beta, np.asarray(c).dtype]
    return np.result_type(F64, *terms) == F64


def collective(a, b, comm: MPI.Comm, *, root: int = 0, config=None, explain: bool = False, phases=None,
               alpha: float = 1.0, beta: float = 0.0, c=None, trans_a: bool = False, trans_b: bool = False,
               out=None, refused: Exception | None = None) -> np.ndarray | None:
    """Collective ``alpha op(a) op(b) + beta c``: the root passes the operands and gets the
    product (in ``out`` if given); others get None. ``refused``: this rank's error found before
    the call (raised on every rank)."""
    require_mpi4py()
    extras = (alpha, beta, c, trans_a, trans_b, out)
    plan, args, ops = agree_plan("gemm", lambda: _gemm_problem(_gemm_operands(a, b, *extras)), comm, root, config,
                                 explain, phases, guard=_finite_for_strassen, refused=refused)
    root = args["root"]
    if plan.algorithm == "local":
        return run_local(comm, root, plan, phases, lambda: local(
            a, b, alpha=alpha, beta=beta, c=c, trans_a=trans_a, trans_b=trans_b, out=out))
    from autotune.distributed.gemm import ALGORITHMS

    def run(ph):
        a2, b2 = ops[:2] if comm.rank == root else (None, None)
        res = ALGORITHMS[plan.algorithm](a2, b2, comm, plan, root=root, phases=ph)
        return _gemm_finish(res, *extras) if comm.rank == root else res

    return observed(comm, root, plan, phases, run)



def _finite_for_strassen(plan: Plan, ops: tuple, phases) -> Plan:
    """A Strassen gemm plan on operands that are not all finite becomes the local one: its
    additions would turn an inf into NaN where ``a @ b`` does not, so the distributed Strassen
    refuses them (the check counts as the ``distribution`` phase)."""
    from autotune.distributed.checks import all_finite
    from autotune.distributed.gemm_run import STRASSEN
    from autotune.distributed.plan import timed

    if plan.algorithm not in STRASSEN:
        return plan
    with timed(phases, "distribution"):
        finite = all(all_finite(np.asarray(x), plan.backend, max(plan.threads, 1)) for x in ops[:2])
    return plan if finite else Plan("local", 1, threads=max(plan.threads, 1))



def _gemm_problem(ops: tuple) -> tuple[tuple, Problem | None]:
    """(ops, GemmProblem or None) for the root's product operands; numpy's error for mismatched ones."""
    arrs = root_matrices(ops[:2])
    if arrs is None:
        return ops, None
    (m, k), (k2, n) = arrs[0].shape, arrs[1].shape
    if k != k2:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 (size {k2} is "
                         f"different from {k})")
    tuned = all(x.dtype == np.float64 for x in arrs) and 0 not in (m, k, n)
    return ops, GemmProblem(m, k, n) if tuned else None



def _gemm_operands(a, b, alpha, beta, c, trans_a, trans_b, out) -> tuple:
    """Root only: the one-process call's arguments with ``op(a)``, ``op(b)`` first, every extra
    checked before any rank starts (so an error is everyone's)."""
    if a is None or b is None:
        raise ValueError("the root rank must pass the matrices (other ranks pass None)")
    a, b = np.asarray(a), np.asarray(b)
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    if a.ndim == 2 and b.ndim == 2:
        shape = (a.shape[0], b.shape[1])
        check_extras(shape, alpha, beta, c)
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("return arrays must be of ArrayType")
            if out.shape != shape:
                raise ValueError(f"out has shape {out.shape}, expected {shape}")
            if not np.can_cast(np.result_type(a, b), out.dtype, "same_kind"):
                raise TypeError(f"Cannot cast the result from {np.result_type(a, b)} to {out.dtype}")
    return a, b, alpha, beta, c, False, False, out



def _gemm_finish(res: np.ndarray, alpha, beta, c, trans_a, trans_b, out) -> np.ndarray:
    """Root only: the extras a distributed run leaves to the root (checked in ``_gemm_operands``)."""
    if alpha != 1.0:
        res = res * alpha
    if c is not None and beta != 0.0:
        res = res + beta * np.asarray(c)
    return res if out is None else copy_out(res, out)
