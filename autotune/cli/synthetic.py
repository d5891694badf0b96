"""``autotune synthetic``: check, predict, tune and run synthetic master/worker-of-pipelines
workloads (003; docs/usage.md#synthetic). A bad spec prints one line per violated rule or bound and
exits 2, as does a bad argument."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from autotune import synthetic
from autotune.benchmarks._common import write_atomic
from autotune.cli.common import OneLineParser, add_db_argument, error, output_problem, positive_number
from autotune.core.workload import MAX_LAUNCH, SpecError

COMMAND = "synthetic"       # every error line reads ``autotune synthetic: error: ...``


def _count(text: str) -> int:
    """An argument that must be an integer from 1 to MAX_LAUNCH (--processors, --hosts)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LAUNCH:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_LAUNCH}, not {text!r}")
    return value


def _root() -> bool:
    """Print here? (under mpiexec only rank 0 prints a spec's problems)"""
    return os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) == "0"


def _spec(args):
    """The spec (scaled), or the exit status after its problems, one line each."""
    try:
        spec = synthetic.load_spec(Path(args.spec))
        return synthetic.scaled(spec, args.scale) if args.scale != 1.0 else spec
    except SpecError as exc:
        if _root():
            for line in exc.problems:
                error(COMMAND, f"{args.spec}: {line}", 1)
        return 2


def cmd_check(args) -> int:
    spec = _spec(args)
    if isinstance(spec, int):
        return spec
    print(synthetic.describe(synthetic.plan(spec)))
    return 0


def _line(label: str, spec, seconds: float, spread: float, processors: int) -> str:
    config = " | ".join(" ".join(w) for w in spec.configuration)
    return f"{label:<9} {seconds:10.3f} s ±{spread * 100:4.1f}%  {processors:3d} processors  {config}"


def cmd_tune(args) -> int:
    problem = output_problem("--out", args.out)
    if problem:
        return error(COMMAND, problem, 2)
    spec = _spec(args)
    if isinstance(spec, int):
        return spec
    hop = synthetic.links(args.db)
    own = synthetic.plan(spec)
    budget = args.processors if args.processors is not None else own.processors
    try:
        ranked = synthetic.tune(spec, budget, hosts=args.hosts, hop=hop)
    except ValueError as exc:
        return error(COMMAND, str(exc), 2)
    base = synthetic.predict(own, hosts=args.hosts, hop=hop)
    print(f"{spec.name or args.spec}: {budget} processors, predicted run times")
    print(_line("original", spec, base.seconds, base.spread, own.processors))
    rule = synthetic.rules(spec, budget)
    rp = synthetic.predict(rule, hosts=args.hosts, hop=hop)
    print(_line("rules", rule, rp.seconds, rp.spread, synthetic.plan(rule).processors))
    for i, c in enumerate(ranked):
        print(_line(f"model #{i + 1}", c.spec, c.prediction.seconds, c.prediction.spread, c.processors))
    if args.out:
        try:
            write_atomic(args.out, yaml.safe_dump(ranked[0].spec.to_dict(), sort_keys=False).encode())
        except OSError as exc:
            return error(COMMAND, f"--out {args.out}: {exc.strerror or exc}", 2)
        print(f"best configuration written to {args.out}")
    return 0


def cmd_run(args) -> int:
    spec = _spec(args)
    if isinstance(spec, int):
        return spec
    try:
        from mpi4py import MPI
    except ImportError:
        return error(COMMAND, "mpi4py is missing (pip install 'autotune[mpi]')", 2)
    try:
        report = synthetic.run(spec, MPI.COMM_WORLD, timeout=args.timeout, db=args.db)
    except synthetic.PipelineError as exc:
        return error(COMMAND, str(exc), 2) if MPI.COMM_WORLD.rank == 0 else 2
    if report is not None:
        print(synthetic.table(report, f"{spec.name or args.spec}: {len(report.rows)} processes"))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="synthetic_command", required=True, parser_class=OneLineParser)
    for name, func, text in (("check", cmd_check, "check a spec and print its plan (processes, messages)"),
                             ("tune", cmd_tune, "rank groupings and replications by the model"),
                             ("run", cmd_run, "run the workload (under mpiexec -n LAUNCH)")):
        c = sub.add_parser(name, help=text)
        c.add_argument("spec", metavar="SPEC.yaml")
        c.add_argument("--scale", type=positive_number, default=1.0,
                       help="multiply every stage time (a finite number > 0; default 1)")
        if name == "tune":
            c.add_argument("--processors", type=_count, default=None,
                           help=f"processors to use, 1 to {MAX_LAUNCH} (default: the spec's)")
            c.add_argument("--hosts", type=_count, default=None, help="hosts the processors are dealt over "
                           f"(1 to {MAX_LAUNCH}; default: one each)")
            add_db_argument(c, "the comm probe's links")
            c.add_argument("--out", default=None, metavar="FILE.yaml", help="write the best configuration's spec")
        if name == "run":
            add_db_argument(c, "the comm probe's links (for the deadline)")
            c.add_argument("--timeout", type=positive_number, default=None,
                           help="seconds before a waiting rank aborts the job (default: 5x the prediction + 60)")
        c.set_defaults(action=func)


HELP = "synthetic master/worker-of-pipelines workloads: check, tune, run"


def run(args) -> int:
    return args.action(args)
