"""The decision every family's one-process entry shares: the typed problem to the selector (or a
forced ``config``), the guard around the choice, the reference call (numpy/scipy's own) when there
is nothing to tune or no usable database, and the notes ``explain`` prints."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from autotune import backends
from autotune.backends import pools
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import Candidate
from autotune.db import load_sp
from autotune.db.pools import transitions_for
from autotune.feedback import guard, learn
from autotune.kernels.inputs import F64
from autotune.select import Decision, as_candidate, choose, rank
from autotune.settings import Options, get_options

T = TypeVar("T")
# Scalar types compared directly for alpha == 1 and beta == 0 (anything else is checked first).
SCALARS = (int, float, complex, np.number, np.bool_)
# MIN_TUNED_SIZE (below it the selector is skipped) and ALIGNED_OUTPUT_WORK (numpy's own
# multi-threaded call writes into an aligned output from this m*n*k up) live in assumptions.py.
# Outputs of BLOCK_CACHE_MIN bytes and more come from the reused blocks of kernels/_front.pyx
# whatever the thread count (no page faults in a loop of calls).


def lapack_float64(dtype: np.dtype) -> bool:
    """Whether scipy.linalg's LAPACK routines compute an array of ``dtype`` in float64: float64 and
    the integers wider than 16 bits (scipy promotes a real dtype with float32: bool and the smaller
    integers give float32, which the tuned float64 routines must leave to scipy)."""
    return dtype == F64 or (dtype.kind in "biu" and np.promote_types(dtype, np.float32) == F64)


def untuned_operands(*operands) -> str:
    """Why operands are outside the tuned domain (2-D float64 ndarrays): their kind, dims or dtype."""
    for x in operands:
        if not isinstance(x, np.ndarray):
            return f"an operand is a {type(x).__name__}, not an ndarray"
        if type(x) is not np.ndarray:
            return f"an operand is an ndarray subclass ({type(x).__name__})"
        if x.ndim != 2:
            return f"an operand is {x.ndim}-D ({'a stack of matrices' if x.ndim > 2 else 'not a matrix'})"
        if x.dtype != F64:
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
           state: int | None = None) -> tuple[Candidate | None, Decision | None]:
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








def guarded(dec: Decision | None, problem: Problem, opts: Options, choice: Callable[[], T],
            reference: Callable[[], T]) -> T:
    """Run the candidate (``choice()``): through the run-time guard, which may run ``reference()``
    (numpy/scipy's own call) instead, when it is the selector's choice of another than the reference."""
    work = (lambda: observe_call(dec, choice)) if dec is not None and learn.enabled() else choice
    if dec is None or _unguarded(dec, opts):
        return work()
    return guard.run(problem, dec, work, reference, opts.db)


def _unguarded(dec: Decision, opts: Options) -> bool:
    """The guard does not watch this decision: it is off, or the choice is the reference call itself
    (the reference's library at the thread count it has now: under a budget below that count, as in a
    cgroup CPU quota the library does not read, the choice is not the call the user would have run)."""
    return not opts.guard or dec.incumbent is None or (
        dec.chosen == dec.incumbent and library_threads(dec.chosen.backend) == dec.chosen.threads)


def settled(dec: Decision | None, problem: Problem, opts: Options) -> bool:
    """May the C hot path run this decision's choice unguarded? (not watched, or kept by the
    guard; a forced ``config`` is never remembered)"""
    return dec is not None and (_unguarded(dec, opts) or guard.kept(problem, dec.chosen, dec.threads))


def reference_routine(family: str) -> Candidate:
    """The family's reference routine (numpy/scipy's library call) at its library's thread count
    now: what the C hot path runs for a decision the guard demoted, or without a database."""
    algorithm, library = FAMILIES[family].incumbent
    return Candidate(algorithm, library, library_threads(library))


def library_threads(backend: str) -> int:
    """The thread count ``backend``'s library has now (TypeError for a backend without one)."""
    get = backends.get(backend).get_threads
    if get is None:
        raise TypeError(f"{backend} has no thread count")
    return get()


def scipy_call(fn: Callable[..., T], *args, **kwargs) -> T:
    """scipy's own routine ``fn(*args, **kwargs)`` under its library's lease at its count now."""
    be = backends.get("scipy-openblas")
    with pools.lease(be, library_threads("scipy-openblas")):
        return fn(*args, **kwargs)


def observe_call(dec: Decision, work):
    """Run ``work()`` timing it for on-line refinement (opt-in: ``AUTOTUNE_LEARN=1``); O(1) record."""
    t0 = time.perf_counter()
    result = work()
    learn.observe(dec, time.perf_counter() - t0, get_options().db)
    return result






















