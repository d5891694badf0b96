"""``autotune``: inspect the database (``show``) and the selector's choices (``explain``), refit,
report, benchmark (``bench``), synthetic workloads and the emulated cluster (``testbed``). Every
command is a module with ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; a new
command is one more entry in COMMANDS."""
from __future__ import annotations

import argparse
import signal
import sys
import warnings

from autotune import benchmarks, testbed
from autotune.cli import explain, refit, report, show, synthetic

COMMANDS = {"show": show, "explain": explain, "refit": refit, "report": report, "bench": benchmarks,
            "synthetic": synthetic, "testbed": testbed}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune", description="autotune: auto-tuned dense linear algebra")
    sub = p.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        c = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(c)
        c.set_defaults(func=module.run)
    return p


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings from the command line as one line each, without the source line."""
    print(f"autotune: warning: {message}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        if hasattr(signal, "SIGPIPE"):  # `autotune show | head` ends quietly
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        warnings.showwarning = _show_warning
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
