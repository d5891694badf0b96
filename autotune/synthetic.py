"""Synthetic master/worker-of-pipelines workloads (003): check a spec, predict it, tune its grouping
and replication, run it over MPI (docs/usage.md#synthetic).

``check`` plans a spec (SpecError lists every violated rule); ``predict`` and ``tune`` price plans
with the comm probe's links from the database (nominal links, with a warning, without one);
``run`` executes a plan collectively on a communicator and returns the report on the root
(``autotune.distributed``, like mpi4py, is imported on first use).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import TYPE_CHECKING

from autotune.core.workload import PipelineError, Spec, SpecError, WorkloadPlan, describe, plan, spec_problems
from autotune.core.workload_read import load_spec
from autotune.db.comm_lookup import load_comm
from autotune.db.lookup import load_sp
from autotune.entry.protocol import call_args
from autotune.models.pipeline import Hop, Prediction, comm_hop
from autotune.models.pipeline import predict as _predict
from autotune.select.pipeline import Choice, rules
from autotune.select.pipeline import tune as _tune
from autotune.settings import get_options

if TYPE_CHECKING:
    from mpi4py import MPI

DEADLINE_FACTOR = 5.0      # a run may take this many times its prediction (plus a minute) before it aborts
GEMM_BACKEND = "numpy-openblas"    # the library a compute stage's gemm calls run on (numpy's matmul)
GEMM_ORDER = 128                   # their order (distributed.pipeline.GEMM_N), where k is looked up


def check(source) -> WorkloadPlan:
    """The plan of a spec (path, YAML text, mapping or ``Spec``); SpecError if it is invalid."""
    return plan(source if isinstance(source, Spec) else load_spec(source))


def scaled(spec: Spec, factor: float) -> Spec:
    """``spec`` with every stage's mean and spread multiplied by ``factor`` (003's cases in less time),
    checked again (a scaled stage must keep the bounds); ValueError unless ``factor`` is finite and > 0."""
    if not (isinstance(factor, numbers.Real) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"a time scale must be a finite number > 0, not {factor}")
    factor = float(factor)          # a numpy scalar would leave numpy floats in the spec's YAML
    out = dataclasses.replace(spec, workers=tuple(
        dataclasses.replace(w, stages=tuple(dataclasses.replace(s, mean=s.mean * factor, spread=s.spread * factor)
                                            for s in w.stages)) for w in spec.workers))
    problems = spec_problems(out)
    if problems:
        raise SpecError(problems)
    return out


def links(db=None, nprocs: int | None = None) -> Hop:
    """Message costs within and between hosts from the database's comm probe."""
    return comm_hop(load_comm(db if db is not None else get_options().db, nprocs=nprocs))


def predict(spec: Spec | WorkloadPlan, *, db=None, hosts: int | None = None, hop: Hop | None = None) -> Prediction:
    """Predicted run time of a spec's (or plan's) configuration, processors dealt over ``hosts``."""
    pl = spec if isinstance(spec, WorkloadPlan) else plan(spec)
    return _predict(pl, hop or links(db), hosts)


def tune(spec: Spec, processors: int | None = None, *, db=None, hosts: int | None = None,
         hop: Hop | None = None) -> list[Choice]:
    """Configurations within ``processors`` (default: as many as the spec's own takes), best first."""
    budget = processors if processors is not None else plan(spec).processors
    return _tune(spec, hop or links(db), budget, hosts)


def run(spec, comm: MPI.Comm | None = None, *, timeout: float | None = None, root: int = 0, db=None,
        hop: Hop | None = None):
    """Run the workload (a ``Plan``, or a spec as ``check`` takes it) on ``comm`` (default
    COMM_WORLD; collective): its ``Report`` on ``root``, None elsewhere. Every rank checks its spec,
    ``timeout`` and ``root`` and the ranks agree on them (a bad or different one raises the same
    error on every rank); PipelineError alike on every rank if its ranks cannot hold the plan; a
    rank waiting past ``timeout`` (default: DEADLINE_FACTOR x the prediction with ``db``'s links
    + 60 s) aborts the job."""
    from autotune.distributed.collective import agree_args
    from autotune.distributed.pipeline import run as run_plan
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    args, err = call_args(comm, root, "synthetic")
    pl = None
    try:
        pl = spec if isinstance(spec, WorkloadPlan) else plan(spec) if isinstance(spec, Spec) else check(spec)
        timeout = _seconds(timeout)
        args["spec"] = pl.spec.to_dict()
    except Exception as exc:
        err = err or exc
    agree_args(comm, err, args)
    if timeout is None:
        timeout = DEADLINE_FACTOR * _predict(pl, hop or links(db, nprocs=comm.size)).seconds + 60.0
    return run_plan(comm, pl, timeout, args["root"], gemm_k(db) if pl.spec.work == "compute" else None)


def _seconds(timeout) -> float | None:
    """``timeout`` as seconds: None, or a finite real number above 0 (ValueError otherwise)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not (
            math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive finite number of seconds or None, got {timeout!r}")
    return float(timeout)


def table(report, title: str = "") -> str:
    """A run's report as 003's Cuadros 8-9 (``distributed.pipeline.table``)."""
    from autotune.distributed.pipeline import table as as_table
    return as_table(report, title)


def gemm_k(db=None) -> float | None:
    """Seconds per flop of a compute stage's gemm calls (numpy's OpenBLAS, one thread) from the
    probe, None where the database has not measured it (the runner times a call itself)."""
    sp = load_sp(db if db is not None else get_options().db)
    if not sp.has("gemm", GEMM_BACKEND, 1):
        return None
    return float(sp.k("gemm", GEMM_BACKEND, 1, GEMM_ORDER))


Plan = WorkloadPlan     # the public name of a checked workload (autotune.synthetic.Plan)

__all__ = ["Choice", "PipelineError", "Plan", "Prediction", "Spec", "SpecError", "WorkloadPlan", "check", "describe",
           "gemm_k",
           "links", "load_spec", "plan", "predict", "rules", "run", "scaled", "table", "tune"]
