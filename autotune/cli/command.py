"""``autotune``: inspect the database (``autotune show``) and the selector's choices (``autotune explain``),
refit, report, benchmark, and the emulated cluster (``testbed``)."""
from __future__ import annotations

import argparse
import signal
import sys
import warnings
from pathlib import Path

from autotune import testbed
from autotune.benchmarks import add_parser as add_bench_parser
from autotune.cli import synthetic as cli_synthetic
from autotune.cli.common import error
from autotune.cli.explain import cmd_explain
from autotune.cli.report import load_validation, missing_database, write_report
from autotune.cli.show import cmd_show
from autotune.core.families import CHECK_STEPS, FAMILIES
from autotune.feedback.learn import refit


def cmd_refit(args) -> int:
    """Fit per-candidate corrections from the learning log into ``/learned`` of the database."""
    try:
        summary = refit(args.db)
    except OSError as exc:          # a read-only database, a full disk
        return error("refit", str(exc))
    if "error" in summary:
        return error("refit", f"{summary['error']} at {summary['db']}")
    print(f"{summary['db']}: {summary['observations']} logged observations, {summary['series']} candidate series")
    for c in summary["corrections"]:
        form = c["ratio_model"] or "scale"
        print(f"  {c['family']:8s} {c['candidate']:42s} {c['points']:4d} points  measured/predicted "
              f"x{c['scale']:.3f}  ({form})")
    if not summary["corrections"]:
        print("  nothing to refit (too few observations per candidate): database unchanged")
    return 0


def cmd_report(args) -> int:
    """Write the HTML model report with its plots."""
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        return error("report", f"--out {args.out}: exists and is not a directory", 2)
    if args.validation is not None:
        try:
            load_validation(args.validation)
        except OSError as exc:
            return error("report", f"--validation {args.validation}: {exc.strerror or exc}", 2)
        except (ValueError, KeyError, TypeError) as exc:
            return error("report", f"--validation {args.validation}: not an `autotune bench validate` output "
                                    f"({exc})", 2)
    missing = missing_database(args.db)
    if missing:                     # as `autotune show` and `explain`: nothing to report on
        return error("report", missing)
    try:
        page = write_report(out, db=args.db, validation=args.validation)   # creates DIR and its parents
    except OSError as exc:
        return error("report", f"cannot write the report into {args.out}: {exc}")
    print(f"report written to {page}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune", description="autotune: auto-tuned dense linear algebra")
    sub = p.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print what the system-parameter database holds")
    show.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    show.add_argument("--plot", metavar="FILE.png",
                      help="also draw GFLOP/s against size (and MPI time against size into FILE-comm.png)")
    show.add_argument("--json", action="store_true", help="machine-readable summary (every series)")
    show.add_argument("-v", "--verbose", action="store_true",
                      help="also list every measured series, library paths and every MPI fit regime")
    show.set_defaults(func=cmd_show)
    exp = sub.add_parser("explain", help="rank the candidate configurations for a problem")
    exp.add_argument("routine", choices=list(FAMILIES))
    exp.add_argument("dims", type=int, nargs="+",
                     help="gemm: N or M K N; cholesky, lu: N; solve, lu_solve: N [NRHS]; stencil: ROWS COLS")
    exp.add_argument("--steps", type=int, default=None,
                     help=f"stencil: steps per call (default {CHECK_STEPS})")
    exp.add_argument("--threads", type=int, default=None, help="thread budget (default: the smallest limit set here)")
    exp.add_argument("--strassen", action="store_true", help="allow Strassen (changes rounding error)")
    exp.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    exp.add_argument("--top", type=int, default=12, help="how many ranked candidates to print")
    exp.add_argument("--run", action="store_true", help="also run the tuned call once and time it")
    exp.add_argument("--after", default=None, metavar="LIBRARY:THREADS",
                     help="decide as right after a call on that library's pool (e.g. numpy-openblas:2; "
                          "default: after an idle spell)")
    exp.add_argument("--np", type=int, default=None,
                     help="rank distributed plans for up to NP MPI ranks (cores per node: --threads)")
    exp.add_argument("--min-efficiency", type=float, default=None, metavar="E",
                     help="with --np: choose the fastest plan predicted at efficiency >= E (shared clusters)")
    exp.add_argument("--platform", default=None, metavar="FILE.yaml|measured",
                     help="search process-to-processor mappings on a platform file (or the platform the comm "
                          "probe measured): every method's and modelled user's choice")
    exp.set_defaults(func=cmd_explain)
    ref = sub.add_parser("refit", help="fold the on-line learning log (AUTOTUNE_LEARN=1) into the database")
    ref.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    ref.set_defaults(func=cmd_refit)
    rep = sub.add_parser("report", help="write an HTML report of the models and the choices they make")
    rep.add_argument("--out", required=True, metavar="DIR",
                     help="directory for index.html and the PNGs (created with its parents)")
    rep.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    rep.add_argument("--validation", default=None, metavar="FILE.json",
                     help="check points besides the database's own (`autotune bench validate --out` output)")
    rep.set_defaults(func=cmd_report)
    add_bench_parser(sub)
    syn = sub.add_parser("synthetic", help="synthetic master/worker-of-pipelines workloads: check, tune, run",
                         description=cli_synthetic.__doc__)
    cli_synthetic.add_arguments(syn)
    bed = sub.add_parser("testbed", help="an emulated cluster on this machine (root): up, show, mpiexec, down",
                         description=testbed.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    testbed.add_arguments(bed)
    bed.set_defaults(func=testbed.run)
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
