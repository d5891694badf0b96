"""Public entry points: ``tuned_gemm`` (drop-in for ``a @ b``), ``tuned_cholesky`` (for scipy's)
and ``explain`` (the selector's decision for a problem, without running it).

Tuned domain: 2-D float64 operands (what the probe measures). Everything else keeps numpy's or
scipy's exact behaviour by deferring to them. With no usable database both functions warn once
and run numpy/scipy. A call runs in this process (``tuned_local``) or, with ``comm=``,
collectively over MPI (``tuned_mpi``).
"""
from __future__ import annotations

import numbers
import os
from typing import TYPE_CHECKING

import numpy as np

from autotune.backends import pools
from autotune.core.families import as_problem, family
from autotune.db import load_sp
from autotune.entry import cholesky as cholesky_entry
from autotune.entry import gemm as gemm_entry
from autotune.entry import lu as lu_entry
from autotune.host.budget import Budget
from autotune.kernels import _front
from autotune.select import Decision, rank
from autotune.settings import get_options

if TYPE_CHECKING:
    from mpi4py import MPI

# How long a remembered "numpy's own call" decision is trusted before options, database and
# thread settings are looked at again (the same period as the database re-stat).
FAST_PATH_SECONDS = 1.0


class DatabaseUnavailable(LookupError):
    """No usable system-parameter database (missing, damaged, old or foreign): nothing to rank."""


def explain(routine: str, *dims: int, threads: int | None = None, allow_strassen: bool | None = None,
            db: str | os.PathLike | None = None, after: str | None = None) -> Decision:
    """The selector's decision for ``routine`` without running it: "gemm" with dims ``(n,)`` or
    ``(m, k, n)``, "cholesky" and "lu" with ``(n,)``, "solve" and "lu_solve" with ``(n,)`` or
    ``(n, nrhs)`` (one right-hand side by default). ``str()`` of it is what ``explain=True`` prints.
    ``after="LIBRARY:THREADS"`` decides as right after such a call (default: after an idle spell).

    Unset arguments come from the options in force (``autotune.options``); the thread budget is the
    one a tuned call has here and now (``Options.budget``: the smallest limit the user set, named on
    the decision's first line). Raises ValueError for bad arguments, DatabaseUnavailable (a
    LookupError) when there is no usable database, and LookupError when nothing measured fits the
    thread budget.
    """
    shape = problem_dims(routine, dims)
    opts = get_options()
    if threads is not None and (not isinstance(threads, numbers.Integral) or isinstance(threads, bool)
                                or threads < 1):
        raise ValueError(f"explain: threads must be a positive integer or None, got {threads!r}")
    sp = load_sp(opts.db if db is None else db)
    if sp.table is None:
        raise DatabaseUnavailable(f"explain: no usable database ({sp.reason}); run autotune-install to measure "
                                  "this machine (tuned calls fall back to numpy/scipy meanwhile)")
    budget = opts.budget if threads is None else Budget(int(threads), f"threads={int(threads)} asked")
    strassen = opts.allow_strassen if allow_strassen is None else bool(allow_strassen)
    after_state = None if after is None else pools.parse(after)
    dec = rank(as_problem(routine, shape), sp, budget.threads, strassen, explain=True, after=after_state,
               memory_bytes=opts.memory_cap)
    dec.limit = budget.source
    return dec


def problem_dims(routine: str, dims: tuple) -> tuple[int, ...]:
    """``explain``'s dims as the selector's: (m, k, n), (n,) or (n, nrhs); ValueError unless valid."""
    try:
        return family(routine).read(dims).dims
    except ValueError as exc:
        raise ValueError(f"explain: {exc}") from None


def describe(dec: Decision, top: int = 12) -> str:
    """Human-readable decision (``str(dec)``): choice, ranked candidates, predicted times, SP values used."""
    return dec.describe(top)


# ---------------------------------------------------------------------------------------------- gemm

def _gemm(a, b, *, alpha, beta, c, trans_a, trans_b, out, config, explain, comm: MPI.Comm | None, root,
          ufunc_kwargs=None):
    """``tuned_gemm`` past its C hot path (``kernels/_front.pyx``, which holds the public docstring)."""
    if type(out) is tuple and len(out) == 1:       # numpy's ufunc form out=(array,)
        out = out[0]
    if comm is not None:
        refused = TypeError(f"tuned_gemm: numpy keywords {sorted(ufunc_kwargs)} cannot be combined with comm") \
            if ufunc_kwargs else None
        return gemm_entry.collective(a, b, comm, root=root, config=config, explain=explain, alpha=alpha,
                                          beta=beta, c=c, trans_a=trans_a, trans_b=trans_b, out=out, refused=refused)
    if ufunc_kwargs:
        extras = {"alpha": alpha, "beta": beta, "c": c, "trans_a": trans_a, "trans_b": trans_b, "config": config,
                  "explain": explain}
        return _numpy_matmul(a, b, out, ufunc_kwargs, extras)
    return gemm_entry.local(a, b, alpha=alpha, beta=beta, c=c, trans_a=trans_a, trans_b=trans_b, out=out,
                            config=config, explain=explain)


def _numpy_matmul(a, b, out, ufunc_kwargs: dict, extras: dict):
    """numpy's own matmul for calls with its other keywords (``dtype=``, ``casting=``, ...), which
    change its arithmetic; they do not combine with the BLAS-style ``extras`` or tuning options."""
    x = extras
    if not (x["c"] is None and not x["trans_a"] and not x["trans_b"] and gemm_entry.unit_scalars(x["alpha"], x["beta"])
            and x["config"] is None and not x["explain"]):
        raise TypeError(f"tuned_gemm: numpy keywords {sorted(ufunc_kwargs)} cannot be combined with "
                        "alpha/beta/c/trans_a/trans_b/config/explain/comm")
    return np.matmul(a, b, out=out, **ufunc_kwargs)


# ------------------------------------------------------------------------------------------ cholesky

def _cholesky(a, *, lower, overwrite_a, check_finite, config, explain, comm: MPI.Comm | None, root):
    """``tuned_cholesky`` past its C hot path (``kernels/_front.pyx``, which holds the public docstring)."""
    if comm is not None:
        return cholesky_entry.collective(a, comm, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite,
                                              root=root, config=config, explain=explain)
    return cholesky_entry.local(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite, config=config,
                                explain=explain)


# ------------------------------------------------------------------------------------------------ LU

def _lu_factor(a, *, overwrite_a, check_finite, config, explain, comm: MPI.Comm | None, root):
    """``tuned_lu_factor`` past its C hot path (``kernels/_front.pyx``, which holds the public docstring)."""
    if comm is not None:
        return lu_entry.collective_lu_factor(a, comm, overwrite_a=overwrite_a, check_finite=check_finite, root=root,
                                               config=config, explain=explain)
    return lu_entry.lu_factor(a, overwrite_a=overwrite_a, check_finite=check_finite, config=config, explain=explain)


def tuned_lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False, check_finite: bool = True, *,
                   config=None, explain: bool = False):
    """``scipy.linalg.lu_solve``: the solution of ``a x = b`` (``trans`` 1 or 2: ``a^T x = b``) from
    ``tuned_lu_factor``'s (or scipy's) output.

    ``piv`` must hold integers in [0, n), one per row of ``lu``: anything else (out of range, NaN,
    fractions, another length) is a ValueError, where scipy's own call may crash the process.
    The result may live in a reused block (see ``tuned_gemm``): it does not own its memory, so
    ``x.resize`` raises ValueError; ``numpy.array(x)`` is a copy that owns its data."""
    return lu_entry.lu_solve(lu_and_piv, b, trans=trans, overwrite_b=overwrite_b, check_finite=check_finite,
                             config=config, explain=explain)


def _solve(a, b, *, lower, overwrite_a, overwrite_b, check_finite, assume_a, transposed,
           config, explain, comm: MPI.Comm | None, root):
    """``tuned_solve`` past its C hot path (``kernels/_front.pyx``, which holds the public docstring)."""
    if comm is not None:
        return lu_entry.collective_solve(a, b, comm, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                                           check_finite=check_finite, assume_a=assume_a, transposed=transposed,
                                           root=root, config=config, explain=explain)
    return lu_entry.solve(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                          check_finite=check_finite, assume_a=assume_a, transposed=transposed, config=config,
                          explain=explain)


_front.configure(get_options=get_options, slow_gemm=_gemm, slow_cholesky=_cholesky, slow_lu=_lu_factor,
                 slow_solve=_solve, matmul=np.matmul, seconds=FAST_PATH_SECONDS,
                 numpy_lib=pools.CODES["numpy-openblas"])
tuned_gemm = _front.tuned_gemm
tuned_cholesky = _front.tuned_cholesky
tuned_lu_factor = _front.tuned_lu_factor
tuned_solve = _front.tuned_solve
