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


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``bench`` and its subcommands on the ``autotune`` parser's subparsers."""
    bench = sub.add_parser("bench", help="benchmarks: tuned vs numpy/scipy, model validation, overhead, ...")
    commands = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for name, module in COMMANDS.items():
        p = commands.add_parser(name, help=module.HELP, description=module.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
