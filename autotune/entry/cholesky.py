"""The Cholesky family's entry: ``local`` (scipy.linalg.cholesky's contract: the library and thread
count chosen for real float64 problems, scipy's own call otherwise) and ``collective`` (over ``comm=``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy import linalg

from autotune import backends
from autotune.backends import pools
from autotune.core.assumptions import MIN_TUNED_SIZE
from autotune.core.families import CholeskyProblem
from autotune.core.plans import Candidate
from autotune.dispatch import cholesky_runner, run_cholesky
from autotune.entry.decide import (
    decide,
    guarded,
    lapack_float64,
    library_threads,
    not_tuned,
    reference_routine,
    scipy_call,
    settled,
    untuned_operands,
)
from autotune.entry.protocol import agree_plan, checked_finite, observed, require_mpi4py, run_local, square_problem
from autotune.feedback import guard, learn
from autotune.kernels import _front
from autotune.kernels._matadd import zero_triangle
from autotune.kernels.inputs import work_buffer
from autotune.models.distributed_cholesky import memory_order
from autotune.select import as_candidate
from autotune.settings import Options, get_options

if TYPE_CHECKING:
    from mpi4py import MPI


def local(a, *, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True, config=None,
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
        elif dec is not None and cand is not None and opts.guard \
                and guard.demoted(problem, cand, dec.threads):       # the guard demoted it: scipy's call, in C
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
    triangle is already zero (``inputs.work_buffer`` with the kernel's own copy)."""
    return work_buffer(a, a1, overwrite=overwrite_a, check_finite=check_finite, order="A",
                       prepare=lambda x, check: _front.prepare_cholesky(x, lower, check))


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
        _front.remember_cholesky(n, cholesky_runner(cand), None, library_threads(cand.backend), opts, lib, state, tri)
        return
    if be.thread_addresses or be.set_threads is None:
        _front.remember_cholesky(n, cholesky_runner(cand), be.thread_addresses, cand.threads, opts, lib, state, tri)


def collective(a, comm: MPI.Comm, *, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True,
               root: int = 0, config=None, explain: bool = False, phases=None) -> np.ndarray | None:
    """Collective ``scipy.linalg.cholesky``: the root passes a and gets the factor; others get None.
    Every rank must pass the same ``lower`` and ``root`` (else ValueError on every rank);
    ``overwrite_a`` and ``check_finite`` are the root's, as in scipy (a distributed run never
    writes into ``a``)."""
    require_mpi4py()
    def problem():
        return square_problem(a, lambda n: CholeskyProblem(n, bool(lower), memory_order(a)))

    def guard(plan, ops, ph):
        return checked_finite(plan, ops, ph) if check_finite else plan

    plan, args, _ = agree_plan("cholesky", problem, comm, root, config, explain, phases, guard=guard, lower=lower)
    root, lower = args["root"], args["lower"]
    if plan.algorithm == "local":
        return run_local(comm, root, plan, phases,   # checked in root_plan where 2-D, else by scipy
                          lambda: local(a, lower=lower, overwrite_a=overwrite_a,
                                                       check_finite=check_finite and np.ndim(a) != 2))
    from autotune.distributed.cholesky import ALGORITHMS

    return observed(comm, root, plan, phases, lambda ph: ALGORITHMS[plan.algorithm](
        a if comm.rank == root else None, comm, plan, lower=lower, root=root, phases=ph, check_finite=check_finite))
