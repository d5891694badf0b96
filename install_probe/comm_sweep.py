"""The comm probe's sweep over primitives, process counts, grids and sizes on the world
communicator (collective), then the fits; ``run_comm_probe`` measures, fits and stores."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autotune.db import comm as dbc
from autotune.db import resolve
from autotune.distributed.collective import first_ranks, quiet_barrier
from autotune.models import comm_fit
from autotune.models import comm_scaling as scaling

from .comm_ops import (
    SINGLE_CALL,
    Buffers,
    CacheFlush,
    ColdOp,
    buffer_bytes,
    footprint,
    link_pair,
    make_op,
    make_prtt,
    platform_info,
    time_point,
)
from .comm_overlap import overlap_series
from .comm_profile import ALL_PRIMITIVES, COLD, GROUP, LINK, PAIR, ROUND_TRIP, CommProfile

if TYPE_CHECKING:
    from mpi4py import MPI
from .comm_root import check_costs, first_touch_in_fresh_process, fortran_copy_costs, pack_costs


@dataclass
class _Run:
    world: object
    profile: CommProfile
    verbose: bool
    rows: list = field(default_factory=list)
    prtt_rows: list = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)
    reverse: bool = False
    pass_index: int = 0
    flush: CacheFlush | None = None

    def log(self, msg: str) -> None:
        if self.verbose and self.world.Get_rank() == 0:
            print(f"[comm probe {time.perf_counter() - self.t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    def curve(self, prim: str, comm: MPI.Comm, p: int, grid: tuple[int, int], bufs: Buffers, **comms) -> None:
        """Every size of one primitive on ``comm`` (its members only)."""
        pf = self.profile
        sizes = pf.sizes_for(prim)
        if prim in COLD:
            self.flush = self.flush or CacheFlush()
        for m in (sizes[::-1] if self.reverse else sizes):
            if footprint(prim, p, m) > pf.max_buffer_bytes:
                continue
            prepare = None
            if prim in COLD:
                op = None                            # free the last size's arrays first
                op = ColdOp(prim, comm, m, self.flush)
                prepare, payload, cleanup = op.renew, m, (lambda: None)
            else:
                op, payload, cleanup = make_op(prim, comm, m, bufs, **comms)
            try:
                pt = time_point(comm, op, pf.timing, batch=dbc.base_primitive(prim) not in SINGLE_CALL,
                                prepare=prepare)
            finally:
                cleanup()
            div = 2.0 if prim in ROUND_TRIP else 1.0
            self.rows.append((prim, p, grid[0], grid[1], payload, pt.median / div, pt.minimum / div,
                              pt.q1 / div, pt.q3 / div, pt.reps, pt.inner, pt.mean / div))

    def prtt(self, comm: MPI.Comm, bufs: Buffers) -> None:
        """PRTT(1,0,s), PRTT(n,0,s) and PRTT(n,d,s) with d = PRTT(1,0,s) (>= the gap) for LoOgGP."""
        pf = self.profile
        n = pf.loggp_messages
        sizes = [m for m in pf.sizes if m <= min(pf.loggp_max_bytes, bufs.n)]
        for m in (sizes[::-1] if self.reverse else sizes):
            one = time_point(comm, make_prtt(comm, m, 1, 0.0, bufs), pf.timing).median
            delay = max(one, 1e-6)
            many = time_point(comm, make_prtt(comm, m, n, 0.0, bufs), pf.timing).median
            spaced = time_point(comm, make_prtt(comm, m, n, delay, bufs), pf.timing).median
            self.prtt_rows.append((m, one, many, spaced, n, delay))

    def best_prtt(self) -> list:
        """Per size, each PRTT's fastest pass (the delay of the pass with the fastest PRTT(1,0,s))."""
        best: dict[int, list] = {}
        for m, one, many, spaced, n, delay in self.prtt_rows:
            if m not in best:
                best[m] = [m, one, many, spaced, n, delay]
            else:
                b = best[m]
                if one < b[1]:
                    b[1], b[5] = one, delay
                b[2], b[3] = min(b[2], many), min(b[3], spaced)
        return [tuple(best[m]) for m in sorted(best)]

    def buffers(self, prims, p: int) -> Buffers:
        return Buffers(buffer_bytes(self.profile, prims, p))

    def run(self) -> None:
        """``passes`` sweeps, alternately forwards and backwards: a point caught by a passing
        disturbance (another program on the machine) is timed again at another moment."""
        for i in range(self.profile.passes):
            self.reverse, self.pass_index = bool(i % 2), i
            self.sweep()

    def best_rows(self) -> list:
        """Per point, the pass with the lower median mean (``timing.lower_median``, as the BLAS
        probe keeps its points)."""
        from .timing import lower_median

        passes: dict[tuple, list] = {}
        for row in self.rows:
            passes.setdefault(row[:5], []).append(row)
        best = [lower_median(rows, key=lambda r: r[-1]) for rows in passes.values()]
        return sorted(best, key=lambda r: (ALL_PRIMITIVES.index(r[0]), r[1], r[2], r[3], r[4]))

    def sweep(self) -> None:
        P = self.world.Get_size()
        groups = [(p, None) for p in self.profile.p_values(P)] + [(r * c, (r, c)) for r, c in
                                                                   self.profile.grid_values(P)]
        for p, grid in (groups[::-1] if self.reverse else groups):
            if grid is None:
                self.group(p)
            else:
                self.grid(*grid)
        self.links()

    def links(self) -> None:
        """Each link primitive the profile asks for, on the first pair of ranks of its kind (same
        host / different hosts, by processor name) as ranks 0 and 1 of a two-rank communicator."""
        from mpi4py import MPI

        world = self.world
        hosts = world.allgather(MPI.Get_processor_name())
        for prim in (x for x in LINK if x in self.profile.primitives):
            pair = link_pair(hosts, same=prim.endswith("_host"))
            if pair is None:
                continue
            sub = world.Split(0 if world.Get_rank() in pair else MPI.UNDEFINED, pair.index(world.Get_rank())
                              if world.Get_rank() in pair else 0)
            if sub != MPI.COMM_NULL:
                self.curve(prim, sub, 2, (0, 0), self.buffers([prim], 2))
                sub.Free()
            quiet_barrier(world)      # the others wait without taking a core from the pair
            self.log(f"{prim} between ranks {pair[0]} and {pair[1]}")

    def overlaps(self) -> dict[str, dict]:
        """The overlap series (``comm_overlap``) on the first pair of each link kind whose swap the
        profile asks for; every rank gets them."""
        from mpi4py import MPI

        world, pf = self.world, self.profile
        hosts = world.allgather(MPI.Get_processor_name())
        out: dict[str, dict] = {}
        for kind in ("host", "net"):
            pair = link_pair(hosts, same=kind == "host")
            if not pf.overlap_sizes or f"swap_{kind}" not in pf.primitives or pair is None:
                continue
            me = world.Get_rank()
            sub = world.Split(0 if me in pair else MPI.UNDEFINED, pair.index(me) if me in pair else 0)
            series = None
            if sub != MPI.COMM_NULL:
                series = overlap_series(sub, pf.overlap_sizes, pf.overlap_reps)
                sub.Free()
            quiet_barrier(world)
            out[kind] = world.bcast(series, root=pair[0])
            self.log(f"overlap on a {kind} link between ranks {pair[0]} and {pair[1]}")
        return out

    def group(self, p: int) -> None:
        """The non-grid primitives on ranks 0..p-1 (pairs only at p = 2); the others wait."""
        pf = self.profile
        prims = [x for x in pf.primitives if (x in GROUP or (p == 2 and x in PAIR)) and self.pass_index < pf.rounds(x)]
        with first_ranks(self.world, p) as sub:
            if sub is None:
                return
            bufs = self.buffers(prims, p)
            for prim in prims:
                self.curve(prim, sub, p, (0, 0), bufs)
                self.log(f"{prim} p={p}")
            if p == 2 and pf.loggp:
                self.prtt(sub, bufs)
                self.log("PRTT (LoOgGP) p=2")

    def grid(self, r: int, c: int) -> None:
        """Row and column broadcasts (all rows / all columns at once) of an r x c grid on ranks 0..rc-1."""
        pf = self.profile
        p = r * c
        prims = [x for x in ("bcast_row", "bcast_col") if x in pf.primitives and (c if x == "bcast_row" else r) >= 2]
        if not prims:
            return
        with first_ranks(self.world, p) as sub:
            if sub is None:
                return
            me = sub.Get_rank()
            row = sub.Split(me // c, me % c)   # the c members of my grid row
            col = sub.Split(me % c, me // c)   # the r members of my grid column
            bufs = self.buffers(prims, p)
            for prim in prims:
                self.curve(prim, sub, p, (r, c), bufs, row=row, col=col)
                self.log(f"{prim} {r}x{c}")
            row.Free()
            col.Free()


def run_comm_probe(world, profile: CommProfile, db_path=None, *, verbose: bool = True) -> dict | None:
    """Measure, fit and store (rank 0). Collective; returns the summary on rank 0, None elsewhere."""

    t_start = time.perf_counter()
    info = platform_info(world)
    run = _Run(world, profile, verbose)
    run.log(f"{info['library']}, P={info['P']}{' (oversubscribed)' if info['oversubscribed'] else ''}, "
            f"profile {profile.name}: {len(profile.sizes)} sizes {profile.sizes[0]}..{profile.sizes[-1]} B")
    run.run()
    info["overlap"] = run.overlaps()
    from autotune.install_probe.contention import compute_skews, host_speeds

    info["compute_skew"] = compute_skews(world, reps=profile.contention.skew_reps,
                                        procs=profile.p_values(world.Get_size()))
    info["host_speeds"] = host_speeds(world)
    if world.Get_rank() == 0:
        reps = {} if profile.root_reps is None else {"reps": profile.root_reps}
        info["first_touch"] = first_touch_in_fresh_process(profile.first_touch_sizes, **reps)   # the others
        info["pack"] = pack_costs(profile.pack_order, **reps)             # wait in the fit's bcast below
        info["check"] = check_costs(profile.check_sides, **reps)
        info["fortran_copy"] = fortran_copy_costs(profile.check_sides, **reps)
    measured = time.perf_counter() - t_start
    result, error = None, ""
    if world.Get_rank() == 0:
        try:
            points = np.array(run.best_rows(), dtype=dbc.POINT_DTYPE)
            info["heldout_sizes"] = list(profile.heldout_sizes)
            info["max_regimes"] = profile.max_regimes
            fits = comm_fit.fit_points(points, profile.heldout_sizes, max_regimes=profile.max_regimes)
            prtt = np.array(run.best_prtt(), dtype=dbc.PRTT_DTYPE)
            loggp = comm_fit.fit_loggp(prtt, fits) if len(prtt) else None
            pmodels = scaling.fit_models(points, profile.heldout_sizes, max_regimes=profile.max_regimes)
            info["p_heldout"] = scaling.heldout_errors(points, profile.heldout_sizes, max_regimes=profile.max_regimes)
            info.update({"profile": profile.name, "seconds": round(time.perf_counter() - t_start, 3),
                         "measure_seconds": round(measured, 3), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "timing": vars(profile.timing)})
            path = resolve(db_path)
            key = dbc.write_platform(path, info, points, fits, prtt=prtt, loggp=loggp, pmodels=pmodels)
            result = {"path": str(path), "key": key, "info": info, "points": points, "fits": fits,
                      "prtt": prtt, "loggp": loggp, "pmodels": pmodels, "seconds": time.perf_counter() - t_start}
        except Exception as exc:  # report on every rank, exit non-zero together
            error = f"{type(exc).__name__}: {exc}"
    error = world.bcast(error, root=0)
    if error:
        raise RuntimeError(f"comm probe: could not fit/store the results: {error}")
    return result
