"""``autotune bench comm-plan [--np P ...] [--profile NAME|FILE.yaml] [--cores N]``: how many
points the communication probe would time at world sizes P, its sampled process counts and grids
(the profile's) against the full sweep of every p = 2..P and every r x c grid, and the estimated
time of those points and of the whole ``--mpi`` run (``install_probe.comm_estimate.estimate_seconds``'s
rates; a core per rank unless ``--cores``). Nothing is timed: the plan and the estimate only.

    autotune bench comm-plan --np 4 64 256 1024 [--profile standard] [--out RESULTS/comm-plan.json]
"""
from __future__ import annotations

import argparse
import dataclasses

from autotune.benchmarks._common import output_problem, write_json
from autotune.cli.common import error

HELP = "points (primitive x p x grid x size) and probe time of a comm profile at large P, sampled vs full sweep"


def plan_row(profile, nprocs: int, cores: int | None = None) -> dict:
    """One world size: process counts, grids, points per pass and estimated seconds of the points,
    for ``profile`` and for the same profile sweeping every p and grid."""
    from autotune.install_probe.comm_estimate import count_points, estimate_seconds, points_seconds

    full = dataclasses.replace(profile, procs="all", grids="all")
    use = cores or nprocs
    out = {"P": nprocs, "cores": use}
    for name, prof in (("sampled", profile), ("full", full)):
        out[name] = {**count_points(prof, nprocs), "seconds": points_seconds(prof, nprocs, use),
                     "run_seconds": list(estimate_seconds(prof, nprocs, use))}
    return out


def table_lines(rows: list[dict], profile: str) -> list[str]:
    """The rows as a table: points per pass and estimated seconds (all passes), sampled and full."""
    lines = [f"comm profile {profile!r}: points (primitive x p x grid x size) per pass; est. time of the points "
             "(all passes) and of the whole --mpi run (low estimate: contention, calibrations, phase calibration too)",
             f"{'P':>6} {'cores':>6} | {'p':>4} {'grids':>6} {'points':>9} {'time':>9} {'run':>9} | "
             f"{'p':>5} {'grids':>7} {'points':>9} {'time':>9} {'run':>9} | {'ratio':>6}",
             f"{'':>13} | {'sampled':^41} | {'full sweep':^43} | {'points':>6}"]
    for r in rows:
        s, f = r["sampled"], r["full"]
        lines.append(f"{r['P']:>6} {r['cores']:>6} | {s['p']:>4} {s['grids']:>6} {s['points']:>9} "
                     f"{_duration(s['seconds']):>9} {_duration(s['run_seconds'][0]):>9} | {f['p']:>5} "
                     f"{f['grids']:>7} {f['points']:>9} {_duration(f['seconds']):>9} "
                     f"{_duration(f['run_seconds'][0]):>9} | {f['points'] / max(s['points'], 1):>5.0f}x")
    return lines


def _duration(seconds: float) -> str:
    """Seconds as s, min, h or days, whichever reads best."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--np", type=int, nargs="+", default=[4, 64, 256, 1024], metavar="P",
                   help="world sizes (default: 4 64 256 1024)")
    p.add_argument("--profile", default="standard", help="comm profile: quick | standard | FILE.yaml")
    p.add_argument("--cores", type=int, default=None, help="cores the ranks share (default: one per rank)")
    p.add_argument("--out", metavar="FILE.json", help="also write the table here")


def run(args) -> int:
    """Print the table (and write --out)."""
    from autotune.install_probe.comm_profile import CommProfileError, load_comm_profile

    problem = output_problem("--out", args.out)
    if not problem and (min(args.np) < 2 or (args.cores is not None and args.cores < 1)):
        problem = "--np needs world sizes >= 2 and --cores a positive count"
    if problem:
        return error("bench comm-plan", problem, 2)
    try:
        profile = load_comm_profile(args.profile)
    except CommProfileError as exc:
        return error("bench comm-plan", str(exc), 2)
    rows = [plan_row(profile, n, args.cores) for n in args.np]
    print("\n".join(table_lines(rows, profile.name)))
    if args.out:
        write_json(args.out, {"profile": profile.name, "rows": rows})
    return 0
