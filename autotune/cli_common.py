"""How the ``autotune`` commands report a failure: one line, and the exit status."""
from __future__ import annotations

import sys


def error(command: str, message: str, status: int = 1) -> int:
    """Print the one-line ``autotune COMMAND: error: ...`` message; returns the exit status
    (2: the arguments are wrong, 1: the run failed)."""
    print(f"autotune {command}: error: {message}", file=sys.stderr)
    return status
