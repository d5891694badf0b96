"""``autotune refit``: fold the on-line learning log (``AUTOTUNE_LEARN=1``) into the database's
per-candidate corrections."""
from __future__ import annotations

import argparse

from autotune.cli.common import add_db_argument, error
from autotune.feedback.learn import refit

HELP = "fold the on-line learning log (AUTOTUNE_LEARN=1) into the database"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)


def run(args) -> int:
    """Fit per-candidate corrections from the learning log into ``/learned`` of the database."""
    try:
        summary = refit(args.db)
    except OSError as exc:          # a read-only database, a full disk
        return error("refit", str(exc), 1)
    if "error" in summary:
        return error("refit", f"{summary['error']} at {summary['db']}", 1)
    print(f"{summary['db']}: {summary['observations']} logged observations, {summary['series']} candidate series")
    for c in summary["corrections"]:
        form = c["ratio_model"] or "scale"
        print(f"  {c['family']:8s} {c['candidate']:42s} {c['points']:4d} points  measured/predicted "
              f"x{c['scale']:.3f}  ({form})")
    if not summary["corrections"]:
        print("  nothing to refit (too few observations per candidate): database unchanged")
    return 0
