"""Synthetic master/worker-of-pipelines workloads (003): check a spec, predict it, tune its grouping
and replication, run it over MPI (docs/usage.md#synthetic).

``check`` plans a spec (SpecError lists every violated rule); ``predict`` and ``tune`` price plans
with the comm probe's links from the database (nominal links, with a warning, without one);
``run`` executes a plan collectively on a communicator and returns the report on the root.
"""
from __future__ import annotations

import dataclasses

from autotune.config import get_options
from autotune.db.comm_lookup import load_comm
from autotune.db.lookup import load_sp
from autotune.distributed.pipeline import GEMM_N, PipelineError, Report, table
from autotune.distributed.pipeline import run as _run
from autotune.models.pipeline import Hop, Prediction, comm_hop
from autotune.models.pipeline import predict as _predict
from autotune.routines import flops_of
from autotune.select.pipeline import Choice, rules
from autotune.select.pipeline import tune as _tune
from autotune.workload import Plan, Spec, SpecError, describe, load_spec, plan

DEADLINE_FACTOR = 5.0      # a run may take this many times its prediction (plus a minute) before it aborts
GEMM_BACKEND = "numpy-openblas"    # the library a compute stage's gemm calls run on (numpy's matmul)


def check(source) -> Plan:
    """The plan of a spec (path, YAML text, mapping or ``Spec``); SpecError if it is invalid."""
    return plan(source if isinstance(source, Spec) else load_spec(source))


def scaled(spec: Spec, factor: float) -> Spec:
    """``spec`` with every stage's mean and spread multiplied by ``factor`` (003's cases in less time)."""
    if not factor > 0:
        raise ValueError(f"a time scale must be > 0, not {factor}")
    return dataclasses.replace(spec, workers=tuple(
        dataclasses.replace(w, stages=tuple(dataclasses.replace(s, mean=s.mean * factor, spread=s.spread * factor)
                                            for s in w.stages)) for w in spec.workers))


def links(db=None, nprocs: int | None = None) -> Hop:
    """Message costs within and between hosts from the database's comm probe."""
    return comm_hop(load_comm(db if db is not None else get_options().db, nprocs=nprocs))


def predict(spec: Spec | Plan, *, db=None, hosts: int | None = None, hop: Hop | None = None) -> Prediction:
    """Predicted run time of a spec's (or plan's) configuration, processors dealt over ``hosts``."""
    pl = spec if isinstance(spec, Plan) else plan(spec)
    return _predict(pl, hop or links(db), hosts)


def tune(spec: Spec, processors: int | None = None, *, db=None, hosts: int | None = None,
         hop: Hop | None = None) -> list[Choice]:
    """Configurations within ``processors`` (default: as many as the spec's own takes), best first."""
    budget = processors if processors is not None else plan(spec).processors
    return _tune(spec, hop or links(db), budget, hosts)


def run(spec: Spec | Plan, comm=None, *, timeout: float | None = None, root: int = 0, db=None,
        hop: Hop | None = None) -> Report | None:
    """Run the workload on ``comm`` (default COMM_WORLD; collective): the report on ``root``.
    PipelineError alike on every rank if its ranks cannot hold the plan; a rank waiting past
    ``timeout`` (default: DEADLINE_FACTOR x the prediction with ``db``'s links + 60 s) aborts the job."""
    pl = spec if isinstance(spec, Plan) else plan(spec)
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    if timeout is None:
        timeout = DEADLINE_FACTOR * _predict(pl, hop or links(db, nprocs=comm.size)).seconds + 60.0
    return _run(comm, pl, timeout, root, gemm_call(db) if pl.spec.work == "compute" else None)


def gemm_call(db=None) -> float | None:
    """Seconds of one of a compute stage's gemm calls from the probe's k (numpy's OpenBLAS, one
    thread), None where the database has not measured it (the runner times one itself)."""
    sp = load_sp(db if db is not None else get_options().db)
    if not sp.has("gemm", GEMM_BACKEND, 1):
        return None
    return float(flops_of("gemm", "square", GEMM_N)[0] * sp.k("gemm", GEMM_BACKEND, 1, GEMM_N))


__all__ = ["Choice", "PipelineError", "Plan", "Prediction", "Report", "Spec", "SpecError", "check", "describe",
           "links", "load_spec", "plan", "predict", "rules", "run", "scaled", "table", "tune"]
