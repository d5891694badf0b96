"""``autotune synthetic``: check, predict, tune and run synthetic master/worker-of-pipelines
workloads (003; docs/usage.md#synthetic). A bad spec prints one line per violated rule or bound and
exits 2, as does a bad argument."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from autotune import synthetic
from autotune.cli_common import OneLineParser, positive_number
from autotune.workload import MAX_LAUNCH, SpecError

PROG = "autotune synthetic"


def _count(text: str) -> int:
    """An argument that must be an integer from 1 to MAX_LAUNCH (--processors, --hosts)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LAUNCH:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_LAUNCH}, not {text!r}")
    return value


def _unwritable(out: str) -> str | None:
    """Why ``--out`` cannot be written (checked before tuning), or None."""
    path = Path(out).expanduser()
    if path.is_dir():
        return f"--out {out}: is a directory"
    if not path.parent.is_dir():
        return f"--out {out}: no directory {path.parent}"
    if not os.access(path.parent, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        return f"--out {out}: not writable"
    return None


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
                print(f"{PROG}: error: {args.spec}: {line}", file=sys.stderr)
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
    problem = _unwritable(args.out) if args.out else None
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    spec = _spec(args)
    if isinstance(spec, int):
        return spec
    hop = synthetic.links(args.db)
    own = synthetic.plan(spec)
    budget = args.processors if args.processors is not None else own.processors
    try:
        ranked = synthetic.tune(spec, budget, hosts=args.hosts, hop=hop)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
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
            Path(args.out).expanduser().write_text(yaml.safe_dump(ranked[0].spec.to_dict(), sort_keys=False))
        except OSError as exc:
            print(f"{PROG}: error: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"best configuration written to {args.out}")
    return 0


def cmd_run(args) -> int:
    spec = _spec(args)
    if isinstance(spec, int):
        return spec
    try:
        from mpi4py import MPI
    except ImportError:
        print(f"{PROG}: error: mpi4py is missing (pip install 'autotune[mpi]')", file=sys.stderr)
        return 2
    try:
        report = synthetic.run(spec, MPI.COMM_WORLD, timeout=args.timeout, db=args.db)
    except synthetic.PipelineError as exc:
        if MPI.COMM_WORLD.rank == 0:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
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
            c.add_argument("--db", default=None, help="database with the comm probe's links")
            c.add_argument("--out", default=None, metavar="FILE.yaml", help="write the best configuration's spec")
        if name == "run":
            c.add_argument("--db", default=None, help="database with the comm probe's links (for the deadline)")
            c.add_argument("--timeout", type=positive_number, default=None,
                           help="seconds before a waiting rank aborts the job (default: 5x the prediction + 60)")
        c.set_defaults(func=func)
