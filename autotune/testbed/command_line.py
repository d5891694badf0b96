"""``autotune testbed up | down | cpu | show | mpiexec``: the arguments and the command; errors are
one line (exit 2: bad hosts asked for, 1: the run failed)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict

from .cgroups import set_cpu
from .hosts import MAX_HOSTS, ArgumentError, TestbedError, count_problem, hosts_from, parse_cpu
from .job_registry import brief
from .lifecycle import down, up
from .mpiexec import run_job
from .state import Testbed

HELP = "an emulated cluster on this machine (root): up, show, mpiexec, down"


def host_count(text: str) -> int:
    """``--hosts`` as given on a command line: an integer in 1..MAX_HOSTS (argparse's type)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an integer number of hosts, got {text!r}") from None
    if count_problem(count):
        raise argparse.ArgumentTypeError(count_problem(count))
    return count


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="testbed_command", required=True)
    u = sub.add_parser("up", help="start the emulated hosts")
    u.add_argument("--hosts", type=host_count, required=True, metavar="H",
                   help=f"how many emulated hosts (1..{MAX_HOSTS})")
    u.add_argument("--rate", nargs="+", help="link rate per host (tc syntax: 1gbit, 500mbit; the last repeats)")
    u.add_argument("--cpu", type=int, nargs="+", help="CPU share per host, percent of one core (the last repeats)")
    u.add_argument("--slots", type=int, default=1, help="MPI slots per host")
    u.add_argument("--burst", type=int, default=None, metavar="BYTES",
                   help="token-bucket burst of the shaped links (default: 1 ms of the rate, at least 32 KiB; "
                        "a few frames, e.g. 3000, make each message take its size over the rate, as on a wire)")
    u.add_argument("--replace", action="store_true",
                   help="replace a testbed that is up (stopping its jobs) rather than fail")
    sub.add_parser("down", help="remove the emulated hosts, stopping the jobs running on them")
    c = sub.add_parser("cpu", help="change a host's CPU share while jobs run: autotune testbed cpu HOST PCT")
    c.add_argument("host")
    c.add_argument("pct", help="percent of one core, or 'none' for no cap")
    sub.add_parser("show", help="print the testbed and the mpiexec options that use it")
    r = sub.add_parser("mpiexec", help="run mpiexec on the testbed: autotune testbed mpiexec NP CMD...")
    r.add_argument("np", type=int)
    r.add_argument("argv", nargs=argparse.REMAINDER)


def run(args) -> int:
    """``autotune testbed ...``; errors are one line (exit 2: bad hosts asked for, 1: the run failed)."""
    try:
        return _command(args)
    except (TestbedError, OSError, ValueError) as exc:
        print(f"autotune testbed: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return getattr(exc, "status", 1)


def _command(args) -> int:
    if args.testbed_command == "up":
        tb = up(hosts_from(args.hosts, args.rate, args.cpu, args.slots, args.burst), replace=args.replace)
        print(f"testbed up: {len(tb.hosts)} hosts " + ", ".join(
            f"{h.name} {h.ip} rate={h.rate or 'veth'} cpu={h.cpu or 100}%" for h in tb.hosts))
        return 0
    if args.testbed_command == "down":
        stopped = down()
        print("testbed down" + "".join(f"; stopped job {j['pid']} ({brief(j['argv'])})" for j in stopped))
        return 0
    if args.testbed_command == "cpu":
        pct = parse_cpu(args.pct)
        set_cpu(args.host, pct)
        print(f"testbed: {args.host} cpu={'no cap' if pct is None else f'{pct}%'}")
        return 0
    if args.testbed_command == "mpiexec":
        _check_job(args.np, args.argv)
    tb = Testbed.load()
    if args.testbed_command == "show":
        print(json.dumps(asdict(tb), indent=1))
        print("mpiexec options: " + shlex.join(tb.mpiexec_args()))
        return 0
    return run_job(tb, args.np, args.argv)


def _check_job(np_: int, argv: list[str]) -> None:
    """``testbed mpiexec NP CMD...``'s arguments, before any testbed is looked at (ArgumentError: exit 2)."""
    if np_ < 1:
        raise ArgumentError(f"mpiexec: NP must be a positive number of ranks, got {np_}")
    if not argv:
        raise ArgumentError("mpiexec: no command to run (autotune testbed mpiexec NP CMD...)")
