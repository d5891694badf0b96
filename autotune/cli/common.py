"""What every ``autotune`` command shares: its one-line failure and exit status, the ``--db`` option,
the argument types and parser, and the check of a file a command will write."""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path


def error(command: str, message: str, status: int) -> int:
    """Print the one-line ``autotune COMMAND: error: ...`` message of every command (``COMMAND`` as
    typed: ``show``, ``bench dropin``); returns the exit status (2: the arguments are wrong, 1: the
    run failed)."""
    print(f"autotune {command}: error: {message}", file=sys.stderr)
    return status


class OneLineParser(argparse.ArgumentParser):
    """A parser whose argument errors are one line (``PROG: error: ...``, no usage block), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


DB_HELP = "database path (default: $AUTOTUNE_DB or the user data dir)"


def add_db_argument(p: argparse.ArgumentParser, purpose: str = "", required: bool = False) -> None:
    """The one ``--db PATH`` option of every command (``purpose``: what the command reads there;
    ``required``: no default database)."""
    text = (f"{purpose}; " if purpose else "") + ("required" if required else DB_HELP)
    p.add_argument("--db", default=None, required=required, metavar="PATH", help=text)


def output_problem(option: str, path: str | None) -> str:
    """Why ``path`` cannot take a result file ("" if it can, or if None), checked before any work."""
    if path is None:
        return ""
    p = Path(path).expanduser()
    if p.is_dir():
        return f"{option} {path}: is a directory"
    if not p.parent.is_dir():
        return f"{option} {path}: directory {p.parent} does not exist"
    if not os.access(p.parent, os.W_OK) or p.exists() and not os.access(p, os.W_OK):
        return f"{option} {path}: not writable"
    return ""


def positive_number(text: str) -> float:
    """An argument that must be a finite number > 0 (argparse type: a scale, seconds to wait)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text!r}")
    return value


__all__ = ["DB_HELP", "OneLineParser", "add_db_argument", "error", "output_problem", "positive_number"]
