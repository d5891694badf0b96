"""``autotune bench synthetic`` (under ``autotune testbed mpiexec R``, or plain ``mpiexec``):
synthetic master/worker-of-pipelines workloads (003), each configuration predicted and timed.

- ``--cases``: 003 §5.3's two cases (``configs/synthetic/case1.yaml``, ``case2.yaml``) scaled by
  ``--scale``, in their original configuration, the source's tuned one (``case*-tuned.yaml``) and
  the model's, with the source's tables (Cuadros 8-9) and the ratio tuned / original.
- ``--workloads N``: N generated workloads (1-3 workers of 2-3 stages, stage times and message
  sizes varied, ``--sizes``), each timed in its original configuration, 003's rules and the
  model's best three within ``--extra`` processors more than the original (at most the hosts'):
  the tuner's regret (its time over the best timed), tuner / rules where they differ, predicted
  against measured with the run's repeat spread.

Configurations of one workload run ``--reps`` times interleaved; medians and IQR / median reported.
Links come from ``--db``'s comm probe (measure it on the same testbed: ``install_probe --mpi
--profile links``).
"""
from __future__ import annotations

import argparse
import socket
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from autotune import synthetic
from autotune.benchmarks._common import mpi_world, output_problem, quartiles, report_root
from autotune.cli.common import add_db_argument
from autotune.core.workload import Pipeline, PipelineError, Spec, Stage, assign
from autotune.core.workload_read import load_spec

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "synthetic master/worker pipelines (003): the source's cases and generated workloads, original vs tuned"
SIZES = (1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", action="store_true", help="003's two cases")
    p.add_argument("--scale", type=float, default=0.01, help="the cases' stage times x this (default 0.01)")
    p.add_argument("--processors", type=int, default=8, help="the cases' processor budget (default 8, 003's)")
    p.add_argument("--workloads", type=int, default=0, help="generated workloads to time")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizes", type=int, nargs="*", default=list(SIZES), metavar="BYTES",
                   help="task sizes the generated workloads draw from")
    p.add_argument("--workload-scale", type=float, default=1.0,
                   help="the generated workloads' stage times x this (default 1: 10-120 ms)")
    p.add_argument("--extra", type=int, default=2, help="processors the tuner may add to a workload's own")
    p.add_argument("--reps", type=int, default=3)
    add_db_argument(p, "database with the comm probe's links")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")


def run(args) -> int:
    problem = output_problem("--out", args.out) or (
        "" if args.reps >= 1 and args.scale > 0 and args.workload_scale > 0 and args.workloads >= 0 and args.sizes
        and min(args.sizes) > 0 else "--reps, --scale, --workload-scale, --sizes must be positive")
    if not problem and not (args.cases or args.workloads):
        problem = "nothing to do: give --cases and/or --workloads N"
    comm, status = mpi_world("synthetic", problem)
    if comm is None:
        return status
    hop = synthetic.links(args.db, nprocs=comm.size)
    hosts = len(set(comm.allgather(socket.gethostname())))
    report: dict = {"ranks": comm.size, "hosts": hosts, "reps": args.reps}
    if args.cases:
        report["cases"] = [_case(comm, name, args, hop, hosts) for name in ("case1", "case2")]
    if args.workloads:
        specs = [synthetic.scaled(s, args.workload_scale) for s in generate(args.workloads, args.seed, args.sizes)]
        report["workloads"] = [_workload(comm, s, args, hop, hosts) for s in specs]
        report["summary"] = summary(report["workloads"])
    report_root(comm, report, args.out)
    return 0


def generate(count: int, seed: int, sizes) -> list[Spec]:
    """``count`` workloads: 1-3 workers of 2-3 stages (6 at most: 7 processors), means 10-40 ms (one
    stage in three up to 3x slower), task sizes from ``sizes``, replies of 100 B, 4-8 initial
    messages, 2 iterations."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        workers = []
        for _ in range(int(rng.integers(1, 4))):
            if sum(len(w.stages) for w in workers) > 3:
                break
            stages = []
            for _ in range(int(rng.integers(2, 4))):
                mean = float(rng.uniform(0.01, 0.04)) * (float(rng.uniform(1, 3)) if rng.random() < 1 / 3 else 1)
                stages.append(Stage(round(mean, 4), round(mean * float(rng.uniform(0, 0.2)), 4)))
            workers.append(Pipeline(tuple(stages), 100))
        out.append(Spec(int(rng.choice(sizes)), int(rng.integers(4, 9)), 2, tuple(workers), seed=i, name=f"w{i}"))
    return out


def _time(comm: MPI.Comm, candidates: dict[str, Spec], reps: int, hop) -> dict:
    """Each candidate run ``reps`` times, interleaved (the order rotating per round); on the root
    {label: {seconds: [...], sent, received}}, a candidate the ranks cannot hold marked skipped."""
    names = comm.allgather(socket.gethostname())
    plans, out = {}, {}
    for label, spec in candidates.items():
        pl = synthetic.plan(spec)
        try:
            assign(pl, names)
            plans[label] = pl
            out[label] = {"seconds": [], "sent": 0, "received": 0}
        except PipelineError as exc:
            out[label] = {"skipped": str(exc)}
    labels = list(plans)
    for r in range(reps):
        for label in labels[r % max(len(labels), 1):] + labels[:r % max(len(labels), 1)]:
            rep = synthetic.run(plans[label], comm, hop=hop)
            if rep is not None:
                out[label]["seconds"].append(rep.seconds)
                out[label].update(sent=rep.sent, received=rep.received,
                                  expected=[plans[label].sends, plans[label].receives])
                if r == 0:
                    out[label]["table"] = synthetic.table(rep).splitlines()
    return out


def _stats(seconds: list[float]) -> dict:
    if not len(seconds):
        return {}
    q1, med, q3 = quartiles(seconds)
    return {"median": med, "spread": (q3 - q1) / med if med > 0 else 0.0}


def _entry(spec: Spec, timed: dict, hop, hosts: int | None) -> dict:
    pred = synthetic.predict(spec, hop=hop, hosts=hosts)
    return {"configuration": [list(w) for w in spec.configuration], "processors": synthetic.plan(spec).processors,
            "predicted": pred.seconds, **_stats(timed.get("seconds", [])),
            **{k: v for k, v in timed.items() if k != "seconds"}, "seconds": timed.get("seconds", [])}


def _case(comm: MPI.Comm, name: str, args, hop, hosts: int) -> dict:
    base = synthetic.scaled(load_spec(str(resources.files("autotune.configs") / "synthetic" / f"{name}.yaml")),
                            args.scale)
    source = synthetic.scaled(load_spec(str(resources.files("autotune.configs") / "synthetic" /
                                            f"{name}-tuned.yaml")), args.scale)
    model = comm.bcast(synthetic.tune(base, args.processors, hop=hop, hosts=hosts)[0].spec if comm.rank == 0 else None)
    candidates = {"original": base, "source-tuned": source, "model-tuned": model}
    timed = _time(comm, candidates, args.reps, hop)
    out = {"case": name, "scale": args.scale}
    if comm.rank == 0:
        out.update({k: _entry(s, timed[k], hop, hosts) for k, s in candidates.items()})
        for k in ("source-tuned", "model-tuned"):
            if "median" in out[k] and "median" in out["original"]:
                out[f"{k}/original"] = out[k]["median"] / out["original"]["median"]
                out[f"{k}/original predicted"] = out[k]["predicted"] / out["original"]["predicted"]
    return out


def _workload(comm: MPI.Comm, spec: Spec, args, hop, hosts: int) -> dict:
    own = synthetic.plan(spec).processors
    budget = max(own, min(own + args.extra, hosts)) if hosts > 1 else own + args.extra
    candidates = None
    if comm.rank == 0:
        candidates = {"original": spec, "rules": synthetic.rules(spec, budget)}
        seen = {spec.configuration, candidates["rules"].configuration}
        for i, c in enumerate(synthetic.tune(spec, budget, hop=hop, hosts=hosts)):
            if c.spec.configuration not in seen or i == 0:
                candidates[f"model #{i + 1}"] = c.spec
                seen.add(c.spec.configuration)
            if sum(k.startswith("model") for k in candidates) == 3:
                break
    candidates = comm.bcast(candidates)
    timed = _time(comm, candidates, args.reps, hop)
    if comm.rank != 0:
        return {}
    entries = {k: _entry(s, timed[k], hop, hosts) for k, s in candidates.items()}
    medians = {k: e["median"] for k, e in entries.items() if "median" in e}
    out = {"name": spec.name, "task_bytes": spec.task_bytes, "initial_messages": spec.initial_messages,
           "workers": [[s.mean for s in w.stages] for w in spec.workers], "budget": budget, **entries}
    if "model #1" in medians:
        out["regret"] = medians["model #1"] / min(medians.values())
        if "rules" in medians and entries["rules"]["configuration"] != entries["model #1"]["configuration"]:
            out["model/rules"] = medians["model #1"] / medians["rules"]
    return out


def summary(workloads: list[dict]) -> dict:
    """Mean regret, tuner / rules where they differ, and |predicted / measured - 1| over the workloads."""
    regret = [w["regret"] for w in workloads if "regret" in w]
    vs_rules = [w["model/rules"] for w in workloads if "model/rules" in w]
    errors = [abs(e["predicted"] / e["median"] - 1) for w in workloads for e in w.values()
              if isinstance(e, dict) and e.get("median")]
    spreads = [e["spread"] for w in workloads for e in w.values() if isinstance(e, dict) and "spread" in e]
    return {"workloads": len(regret), "mean regret": float(np.mean(regret)) if regret else None,
            "max regret": float(np.max(regret)) if regret else None,
            "within 5%": sum(r <= 1.05 for r in regret),
            "model/rules where they differ": vs_rules,
            "geomean model/rules": float(np.exp(np.mean(np.log(vs_rules)))) if vs_rules else None,
            "median |predicted/measured - 1|": float(np.median(errors)) if errors else None,
            "median repeat spread": float(np.median(spreads)) if spreads else None}
