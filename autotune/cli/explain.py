"""``autotune explain``: the selector's ranking for a problem (one process, distributed plans or
process mappings), optionally running the chosen call once."""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from autotune.api import (
    describe,
    problem_dims,
    tuned_lu_factor,
    tuned_lu_solve,
)
from autotune.backends import pools
from autotune.benchmarks.calls import CALLS
from autotune.cli.common import add_db_argument, error
from autotune.core.families import CHECK_STEPS, DISTRIBUTED, FAMILIES, as_problem, label
from autotune.db import load_sp, resolve
from autotune.db.comm_lookup import load_comm
from autotune.db.lookup import SystemParameters
from autotune.db.platform import PlatformError, load_platform, measured_platform
from autotune.host.budget import Budget
from autotune.host.resources import available_cores, available_memory
from autotune.models.mapping import database_k
from autotune.select import mapping as sm
from autotune.select import rank
from autotune.select.distributed import describe as describe_plans
from autotune.select.distributed import rank_plans
from autotune.settings import options


def cmd_explain(args) -> int:
    """Rank the candidates for one problem, print them with the SP values used; optionally run it."""
    problem = _explain_usage_problem(args, tuple(args.dims))
    if problem:
        return error("explain", problem, 2)
    try:
        dims = _with_steps(as_problem(args.routine, problem_dims(args.routine, tuple(args.dims))), args.steps).dims
    except ValueError as exc:       # sizes whose operands no machine holds
        return error("explain", str(exc).removeprefix("explain: "), 2)
    problem = _memory_problem(args.routine, dims) if args.run else ""
    if problem:
        return error("explain", problem, 1)
    if args.platform is not None:
        return _explain_mapping(args, dims)
    with options(threads=args.threads, allow_strassen=args.strassen, db=args.db) as opts:
        sp = load_sp(opts.db)
        if sp.table is None:
            return error("explain", f"no usable database ({sp.reason}); tuned calls fall back to numpy/scipy", 1)
        if args.np is not None:
            return _explain_distributed(args, dims, sp, opts)
        try:
            after = None if args.after is None else pools.parse(args.after)
        except ValueError as exc:
            return error("explain", f"--{exc}", 2)
        try:
            budget = Budget(args.threads, f"--threads {args.threads}") if args.threads else opts.budget
            dec = rank(as_problem(args.routine, dims), sp, budget.threads, opts.allow_strassen, explain=True,
                       after=after, memory_bytes=opts.memory_cap)
            dec.limit = budget.source
        except LookupError as exc:
            return error("explain", f"{exc} in {resolve(opts.db)}; tuned calls fall back to numpy/scipy", 1)
        print(describe(dec, top=args.top))
        if args.run:
            try:
                _run_once(args.routine, dims, dec.chosen)
            except MemoryError as exc:
                return error("explain", f"--run: out of memory for the operands ({exc})", 1)
    return 0


def _with_steps(problem, steps: int | None):
    """``problem`` with ``--steps`` in place of its default steps, where given."""
    return problem if steps is None else dataclasses.replace(problem, steps=steps)


def _explain_mapping(args, dims: tuple[int, ...]) -> int:
    """The mapping search methods and users on a platform file, or the platform the comm probe
    measured ("measured"): each one's mapping, grid, block, predicted time and time to solution."""
    mapped = [name for name, f in FAMILIES.items() if f.mapping]
    if args.routine not in mapped or len(set(dims[:3])) != 1:
        return error("explain", f"--platform: a square problem of {', '.join(mapped)}", 2)
    with options(db=args.db) as opts:
        sp = load_sp(opts.db)
        try:
            k = database_k(sp) if sp.table is not None else None
            if k is None and args.platform == "measured":
                raise PlatformError(f"--platform measured needs the BLAS database ({sp.reason})")
            platform = (measured_platform(load_comm(opts.db, nprocs=args.np), k) if args.platform == "measured"
                        else load_platform(args.platform, k))
        except PlatformError as exc:
            return error("explain", str(exc), 2)
        print(sm.describe(sm.study(args.routine, dims[0], platform)))
    return 0


def _explain_usage_problem(args, dims: tuple[int, ...]) -> str:
    """What is wrong with the explain arguments ("" if nothing)."""
    counts = FAMILIES[args.routine].short
    if len(dims) not in counts:
        return f"{args.routine} takes {' or '.join(map(str, counts))} size(s), got {len(dims)}"
    checks = [("sizes", min(dims)), ("--threads", args.threads), ("--top", args.top), ("--np", args.np)]
    for name, value in checks:
        if value is not None and value < 1:
            return f"{name} must be positive, got {dims if name == 'sizes' else value}"
    stepped = [name for name, f in FAMILIES.items() if "steps" in f.problem.dim_names]
    if args.steps is not None and (args.routine not in stepped or args.steps < 1):
        return f"--steps goes with {', '.join(stepped)} and must be positive"
    if args.np is not None and args.routine not in DISTRIBUTED:
        return f"--np: distributed plans exist for {', '.join(DISTRIBUTED)}, not {args.routine}"
    if args.run and args.np is not None:
        return "--run runs on this process only; it does not combine with --np"
    if args.min_efficiency is not None and (args.np is None or not 0.0 < args.min_efficiency <= 1.0):
        return "--min-efficiency takes a value in (0, 1] and goes with --np"
    return ""


def _memory_problem(routine: str, dims: tuple[int, ...]) -> str:
    """Why ``--run`` cannot allocate its operands ("" if it can or the free memory is unknown)."""
    need = CALLS[routine].nbytes(as_problem(routine, dims))
    free = available_memory()
    if need <= free:
        return ""
    return (f"--run: the operands of {label(routine, dims)} need {need / 2**30:,.1f} GiB, more than the "
            f"{free / 2**30:,.1f} GiB of memory available")


def _explain_distributed(args, dims: tuple[int, ...], sp: SystemParameters, opts) -> int:
    """Rank distributed plans on up to ``--np`` ranks (models only: nothing is launched)."""
    cp = load_comm(opts.db, nprocs=args.np)
    try:
        dec = rank_plans(as_problem(args.routine, dims), args.np, sp, cp, args.threads or available_cores(),
                         opts.allow_strassen, min_efficiency=args.min_efficiency, memory_bytes=opts.memory_cap)
    except LookupError as exc:
        return error("explain", f"{exc} in {resolve(opts.db)}", 1)
    print(f"communication parameters: {cp.platform.get('key') if cp.available else 'nominal defaults (no MPI probe)'}")
    print(describe_plans(dec, top=args.top))
    return 0


def _run_once(routine: str, dims: tuple[int, ...], chosen) -> None:
    """Time the tuned call on the family's operands (``calls.CALLS``, median of 3) against the prediction."""
    problem, calls = as_problem(routine, dims), CALLS[routine]
    ops = calls.operands(problem, np.random.default_rng(0))      # built without BLAS: no pool left spinning
    if routine == "lu_solve":            # the factors are the call's input, made outside the timed call
        factors = tuned_lu_factor(ops[0])
        call = lambda: tuned_lu_solve(factors, ops[1])  # noqa: E731
    else:
        call = lambda: calls.tuned(problem, *ops)  # noqa: E731
    call()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    print(f"ran tuned_{label(routine, dims)} with {chosen}: {np.median(times) * 1e3:.3f} ms (median of 3)")


HELP = "rank the candidate configurations for a problem"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("routine", choices=list(FAMILIES))
    p.add_argument("dims", type=int, nargs="+",
                   help="gemm: N or M K N; cholesky, lu: N; solve, lu_solve: N [NRHS]; stencil: ROWS COLS")
    p.add_argument("--steps", type=int, default=None, help=f"stencil: steps per call (default {CHECK_STEPS})")
    p.add_argument("--threads", type=int, default=None, help="thread budget (default: the smallest limit set here)")
    p.add_argument("--strassen", action="store_true", help="allow Strassen (changes rounding error)")
    add_db_argument(p)
    p.add_argument("--top", type=int, default=12, help="how many ranked candidates to print")
    p.add_argument("--run", action="store_true", help="also run the tuned call once and time it")
    p.add_argument("--after", default=None, metavar="LIBRARY:THREADS",
                   help="decide as right after a call on that library's pool (e.g. numpy-openblas:2; "
                        "default: after an idle spell)")
    p.add_argument("--np", type=int, default=None,
                   help="rank distributed plans for up to NP MPI ranks (cores per node: --threads)")
    p.add_argument("--min-efficiency", type=float, default=None, metavar="E",
                   help="with --np: choose the fastest plan predicted at efficiency >= E (shared clusters)")
    p.add_argument("--platform", default=None, metavar="FILE.yaml|measured",
                   help="search process-to-processor mappings on a platform file (or the platform the comm "
                        "probe measured): every method's and modelled user's choice")


run = cmd_explain
