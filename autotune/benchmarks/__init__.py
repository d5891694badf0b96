"""``autotune bench``: the benchmarks, one subcommand each (speed and model checks outside the
unit tests). Each module exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``;
a new benchmark is one more module in COMMANDS. ``mpi-speed``, ``mpi-validate``, ``scalapack``,
``mapping-testbed``, ``placement``, ``stencil``, ``balance``, ``balance-calls``, ``synthetic`` and
``memory`` run under ``mpiexec -n P`` (mpi4py
imported inside ``run``; without it one line naming the ``mpi`` extra, exit 2); the other ``mpi-*``
ones and ``comm-fit`` read saved results and re-time nothing, ``comm-plan`` only plans."""
from __future__ import annotations

import argparse

from autotune.benchmarks import (
    balance,
    balance_calls,
    comm_fit,
    comm_plan,
    compare,
    composed,
    drift,
    dropin,
    mapping,
    mapping_testbed,
    memory,
    mpi_repeat,
    mpi_rescore,
    mpi_speed,
    mpi_validate,
    multicore,
    overhead,
    placement,
    probe,
    regress,
    remodel_ap,
    rescore,
    scalapack,
    stencil,
    strassen_remodel,
    synthetic,
    validate,
)

COMMANDS = {"regress": regress, "validate": validate, "rescore": rescore, "overhead": overhead,
            "compare": compare, "drift": drift, "dropin": dropin, "probe": probe, "mpi-speed": mpi_speed,
            "mpi-validate": mpi_validate, "mpi-rescore": mpi_rescore, "mpi-repeat": mpi_repeat,
            "comm-fit": comm_fit, "comm-plan": comm_plan, "strassen-remodel": strassen_remodel,
            "remodel-ap": remodel_ap,
            "composed": composed, "multicore": multicore, "scalapack": scalapack, "mapping": mapping,
            "mapping-testbed": mapping_testbed, "placement": placement, "stencil": stencil,
            "balance": balance, "balance-calls": balance_calls, "synthetic": synthetic, "memory": memory}


HELP = "benchmarks: tuned vs numpy/scipy, model validation, overhead, ..."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmarks as subcommands of ``autotune bench``."""
    commands = p.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for name, module in COMMANDS.items():
        c = commands.add_parser(name, help=module.HELP, description=module.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(c)
        c.set_defaults(bench=module.run)


def run(args) -> int:
    return args.bench(args)
