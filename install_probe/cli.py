"""``autotune-install``: measure this machine's system parameters into the database."""
from __future__ import annotations

import argparse
import sys

from .profile import ProfileError, load_profile
from .runner import ProbeError, run_probe


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune-install", description=__doc__)
    p.add_argument("--profile", default="standard",
                   help="quick | standard | full | PATH.yaml (default: standard)")
    p.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or the user data dir)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="measure only these routines and/or backends (e.g. --only gemm potrf mkl)")
    p.add_argument("--resume", action="store_true", help="finish an interrupted run of the same profile")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        profile = load_profile(args.profile)
        only = {t for tok in args.only for t in tok.split(",") if t} if args.only else None
        result = run_probe(profile, args.db, only=only, resume=args.resume,
                           progress=False if args.no_progress else None)
    except (ProfileError, ProbeError, PermissionError) as exc:
        print(f"autotune-install: error: {exc}", file=sys.stderr)
        return 2
    for name, why in result.skipped_backends.items():
        print(f"autotune-install: skipped backend {name}: {why}", file=sys.stderr)
    for key, why in result.failures.items():
        print(f"autotune-install: failed {key}: {why}", file=sys.stderr)
    state = "complete" if result.complete else "interrupted"
    print(f"autotune-install: {state}: {result.measured} points in {result.path} ({result.seconds:.1f} s)")
    return 0 if result.complete else 130


if __name__ == "__main__":
    sys.exit(main())
