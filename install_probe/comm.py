"""MPI communication probe: time every primitive the models use, fit Hockney regimes, store them.

Run collectively (every rank runs this module)::

    mpiexec -n P python -m autotune.install_probe.comm [--db PATH] [--profile quick|standard|FILE.yaml]

For the profile's process counts p (``procs``: every p = 2..P, 2 and P, or a sample: 2, 3, 4,
the powers of two and their midpoints, and P; sub-communicators of COMM_WORLD made by Split; the
ranks outside a group wait, sleeping, on a non-blocking barrier) it measures, with mpi4py's
buffer API on numpy arrays:
ping-pong Send/Recv (ranks 0 and 1, one-way = round trip / 2), Bcast, Sendrecv ring shift,
Allgather, Allgatherv, Reduce, Allreduce, Scatterv, Gatherv, Alltoallv (root 0, equal counts),
row and column broadcasts in the profile's r x c grids (``grids``: every r*c <= P, those of
r*c = P, or for each sampled p 1 x p, p x 1 and the most square), and ping-pong sends of derived
datatypes (a strided column block, Create_vector; a block-cyclic local piece, Create_darray);
at p = 2 also the parameterised round trips PRTT(1,0,s), PRTT(n,0,s), PRTT(n,d,s) for LoOgGP.
``scatterv_cold`` and ``bcast_cold`` are Scatterv and Bcast with every member's caches flushed
before each repetition (``cold_sizes``): a distributed run's first phase moves the user's matrix
and buffers no cache holds any more, much slower than the warm repeated calls;
``colscatter_cold`` is the 1-D runs' own scatter (``distributed.movement.scatter_columns``),
the root copying its piece while the others pull theirs, cold the same way.
Groups of the profile's p ranks time the same rank-b update at once: its mean spread between ranks (``compute_skew``);
the compute contention and the SUMMA step waits run at those p too.
Rank 0 also measures its own data-movement costs, stored with the platform: the page faults of a
new result by its size (``first_touch_costs``), block-cyclic packing/unpacking by run length (``pack_costs``)
and the finiteness check of a matrix no cache holds (``check_costs``).
After the contention probe, ``install_probe.calibrate`` measures what runs of the distributed routines
cost beyond their models (``loop_overhead``, ``call_overhead``, stored with the platform); last,
``install_probe.phase_calibration`` times the candidate plans on the profile's ``phase_calibration``
problems and stores the platform's phase factors (``models.fitted_phases``).
``nbytes`` is the message (ping-pong, sends, bcast, sendrecv), the vector (reduce, allreduce) or
each process's block (allgather(v), scatterv, gatherv, and each pair of alltoallv).

Timing per point: warm-up (one call where that call took ``rewarm_below_seconds`` or more, else
``warmup``), one call timed alone (a long one is the first repetition), then repetitions, each
preceded by ``rewarm`` untimed calls where one call is shorter than ``rewarm_below_seconds``
(the bookkeeping between repetitions evicts MPI's state from the caches: without them a single
small bcast reads slow) and a Barrier; a repetition times
``inner`` back-to-back calls (enough to last ``min_sample_seconds``; 1 for large messages) and
its time is the maximum over the ranks (collective completion), all ranks getting the same
value by an Allreduce(MAX) outside the timed region, so they also agree on when to stop: once
the median is stable within +-rel_tol (install_probe.timing.stable) and the mean's standard
error is within mean_tol, at max_reps, or when the point's budget is used. Mean, median, min
and quartiles are kept; the fits use the mean (a phase of many calls costs their mean). Rooted
collectives (bcast, reduce, scatterv, gatherv, grid broadcasts) time one call per repetition:
back-to-back calls would overlap. The whole plan is swept ``passes`` times (alternately
backwards) and each point keeps the lower median of its passes (by mean), so one caught by
another program's burst, or by a slow state of the machine lasting a few points, is timed
again at other moments and outvoted.
Messages leave from and arrive in buffers made as the runs' workspace makes its own
(``workspace.huge_empty``: 2 MiB pages): the shared-memory transport's single copy walks both
processes' pages, much faster on huge pages than on 4 KiB ones, so a numpy buffer's time
would depend on where its 2 MiB boundaries fell.
Rank 0 fits and writes the database: per curve the Hockney regimes (``models.comm_fit``), and
per primitive the (p, m) models that predict the p not measured, with their error at each
measured p left out of them (``models.comm_scaling``); ``db.comm`` stores them. The modules:
``comm_profile`` (what to time), ``comm_estimate`` (how long), ``comm_ops`` (one point, the
operations), ``comm_sweep`` (the sweep, fit and store), ``comm_root`` (the root's own costs).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from autotune.install_probe import phase_calibration as phcal
from autotune.install_probe.profile import COMM_DEFAULT

from autotune.cli.common import add_db_argument
from autotune.db import comm as dbc
from autotune.db.comm import loggp_lines
from autotune.models import comm_scaling as scaling

from .comm_profile import CommProfileError, load_comm_profile
from .comm_sweep import run_comm_probe


def summary_lines(fits: np.ndarray) -> list[str]:
    """One line per regime: primitive, p/grid, range, ts, bandwidth 1/tw, held-out error."""
    lines = []
    for f in fits:
        grid = f" {f['r']}x{f['c']}" if f["r"] else ""
        hi = "inf" if not math.isfinite(f["hi"]) else f"{f['hi']:.0f}"
        bw = (1e-9 / f["tw"]) if f["tw"] > 0 else math.inf
        err = (f"held-out err med {100 * f['err_med']:5.1f}% max {100 * f['err_max']:5.1f}% ({f['n_heldout']})"
               if f["n_heldout"] else "held-out err -")
        flag = "  > 10%" if f["n_heldout"] and f["err_max"] > 0.10 else ""
        lines.append(f"{f['primitive'].decode():14s} p={f['p']}{grid:5s} regime {f['regime'] + 1}/{f['n_regimes']} "
                     f"[{f['lo']:.0f}, {hi}) B: ts {f['ts'] * 1e6:8.2f} us, {bw:7.2f} GB/s; {err}{flag}")
    return lines


def _phase_lines(phases: dict | None) -> list[str]:
    """What the phase calibration stored (or why nothing)."""
    if phases is None:
        return ["phase calibration: none (no sizes in the profile, or no BLAS records for the models)"]
    return [f"phase calibration: {len(phases['factors'])} factors from {phases['runs']} runs "
            f"in {phases['seconds']:.1f} s (`autotune show` lists them)", *phcal.total_lines(phases["factors"])]


def _phase_logger(world, quiet: bool):
    """A function logging each finished phase of the run with its seconds (rank 0, unless quiet)."""
    last = [time.perf_counter()]

    def step(what: str) -> None:
        now = time.perf_counter()
        if what and not quiet and world.Get_rank() == 0:
            print(f"[comm probe] {what}: {now - last[0]:.1f} s", file=sys.stderr, flush=True)
        last[0] = now
    return step


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autotune.install_probe.comm", description=__doc__.split("\n")[0])
    add_db_argument(p)
    p.add_argument("--profile", default=COMM_DEFAULT, help=f"quick | standard | PATH.yaml (default: {COMM_DEFAULT})")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        profile = load_comm_profile(args.profile)
    except CommProfileError as exc:
        print(f"autotune-install --mpi: error: {exc}", file=sys.stderr)
        return 2
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        if world.Get_rank() == 0:
            print("autotune-install --mpi: error: run under mpiexec with at least 2 processes "
                  "(or use autotune-install --mpi --np P)", file=sys.stderr)
        return 2
    try:
        from autotune.install_probe.contention import measure_contention, run_contention

        # Contention in up to 3 passes as the profile's (or its contention_passes), the first
        # minutes before the others; none without calibration.
        passes = profile.contention_rounds if profile.calibrate else 0
        step = _phase_logger(world, args.quiet)
        procs = profile.p_values(world.Get_size())         # the probe's sample of p, for every phase
        before = [measure_contention(world, profile.contention, procs=procs)] if passes > 1 else []
        step("contention, first pass" if before else "")
        result = run_comm_probe(world, profile, args.db, verbose=not args.quiet)
        step("points, fits, root costs")
        where = world.bcast((result["path"], result["key"]) if result is not None else None, root=0)
        if not profile.calibrate:
            return _report(result, [], None)
        from autotune.install_probe.calibrate import call_overheads, loop_costs, step_waits

        rows = run_contention(world, *where, profile.contention, passes=passes - len(before), earlier=before,
                              procs=procs)
        step("contention")
        calibrated = {**(loop_costs(world, where[0], cases=profile.loop_cases) or {}),
                      **(loop_costs(world, where[0], cases=profile.loop_cases, family="lu") or {}),
                      "call_overhead": call_overheads(world, where[0]),
                      "step_wait": step_waits(world, where[0], blocks=profile.step_blocks, target=profile.step_order,
                                              procs=procs)}
        calibrated = {k: v for k, v in calibrated.items() if v is not None}
        if calibrated:                              # rank 0, with the database's BLAS records
            result["info"].update(calibrated)
            dbc.write_platform(result["path"], result["info"], result["points"], result["fits"],
                               prtt=result["prtt"], loggp=result["loggp"], pmodels=result["pmodels"])
        step("calibrations (loop, call overheads, step waits)")
        phases = phcal.calibrate_phases(world, where[0], profile.phase_calibration, verbose=not args.quiet)
        step("phase calibration")
    except (RuntimeError, PermissionError) as exc:
        if world.Get_rank() == 0:
            print(f"autotune-install --mpi: error: {exc}", file=sys.stderr)
        return 1
    return _report(result, rows, phases)


def _report(result: dict | None, rows: list, phases) -> int:
    """The root's summary of the probe (``result`` None elsewhere)."""
    if result is not None:
        info = result["info"]
        print("\n".join(summary_lines(result["fits"])))
        if result["loggp"]:
            print("\n".join(loggp_lines(result["loggp"])))
        print("\n".join(scaling.model_lines(result["pmodels"])))
        print("\n".join(scaling.heldout_lines(info["p_heldout"], scaling.measured_p(result["points"]))))
        solo = {n: t for p, n, t in rows if p == 1}
        contention = "; ".join(f"p={p} n={n}: x{t / solo[n]:.2f}" for p, n, t in rows if p > 1 and n in (512, 2048))
        print("compute contention (one-thread dgemm, p concurrent ranks / alone): "
              + (contention if rows else "not measured (calibrate: false)"))
        if "loop_overhead" in info:
            print(f"distributed Cholesky loop: {info['loop_overhead'] * 1e6:.1f} us per panel, "
                  f"{info.get('loop_share', float('nan')):.2f} of an out-of-cache pass per element moved")
        if "lu_loop_overhead" in info:
            print(f"distributed LU loop: {info['lu_loop_overhead'] * 1e6:.1f} us per panel, "
                  f"{info.get('lu_loop_share', float('nan')):.2f} of an out-of-cache pass per element moved")
        if "step_wait" in info:
            sw = info["step_wait"]
            for key, what, scale, unit in (("wait", "step wait (share of a step's compute)", 100, "%"),
                                           ("wait_1xp", "step wait, 1 x p grids", 100, "%"),
                                           ("wait_px1", "step wait, p x 1 grids", 100, "%"),
                                           ("end", "root's wait in the gather (steps of its update)", 1, "")):
                print(f"SUMMA {what}: " + "; ".join(
                    f"p={p} " + ", ".join(f"b={b} {scale * w:.2f}{unit}" for b, w in zip(sw["b"], row, strict=True))
                    for p, row in zip(sw["p"], sw.get(key, []), strict=False)))
        for alg, cost in info.get("call_overhead", {}).items():
            print(f"{alg} call overhead: " + ", ".join(f"{ph} {t * 1e6:.0f} us" for ph, t in cost.items()))
        print("\n".join(_phase_lines(phases)))
        print(f"autotune-install --mpi: complete: {len(result['points'])} points, {len(result['fits'])} regimes "
              f"for {info['library']} P={info['P']}{' oversubscribed' if info['oversubscribed'] else ''} "
              f"in {result['path']} [{result['key']}] ({result['seconds']:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
