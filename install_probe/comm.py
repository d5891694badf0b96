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
Rank 0 fits and writes the database: per curve the Hockney regimes (``db.comm``), and per
primitive the (p, m) models that predict the p not measured, with their error at each measured
p left out of them (``db.comm_scaling``).
"""
from __future__ import annotations

import argparse
import math
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from autotune.install_probe import phase_calibration as phcal
from autotune.install_probe.calibrate import LOOP_CASES
from autotune.install_probe.profile import COMM_DEFAULT

from autotune.db import comm as dbc
from autotune.db import resolve
from autotune.db.comm import loggp_lines
from autotune.distributed import workspace
from autotune.distributed.collective import first_ranks, quiet_barrier
from autotune.distributed.movement import scatter_columns
from autotune.layout import Axis
from autotune.models import comm_fit
from autotune.models import comm_scaling as scaling
from autotune.models.movement import PACK_BACKEND

BUILTIN = ("quick", "standard")
ALL_PRIMITIVES = dbc.PRIMITIVES
COLD = dbc.COLD_PRIMITIVES     # a run's distribution: new arrays, caches flushed (ColdOp)
PAIR = ("pingpong", "send_vector", "send_subarray")           # ranks 0 and 1, p = 2 only
GROUP = ("bcast", "sendrecv", "allgather", "allgatherv", "reduce", "allreduce", "scatterv", "gatherv",
         "alltoallv", *COLD)                                         # on each p-rank sub-communicator
LINK = dbc.LINK_PRIMITIVES      # a ping-pong on one pair of each link type the ranks have
ROUND_TRIP = ("pingpong", "send_vector", "send_subarray", *LINK)    # one-way time = round trip / 2
# Per-process buffer bytes as a multiple of nbytes (send + receive) for the memory cap.
FOOTPRINT = {"allgather": lambda p: 1 + p, "allgatherv": lambda p: 1 + p, "scatterv": lambda p: 1 + p,
             "gatherv": lambda p: 1 + p, "alltoallv": lambda p: 2 * p}     # cold ones: their operation's
COLD_MIN_BYTES = 65536   # default cold sizes: the profile's from here (below, the warm curve applies)
VECTOR_WIDTH = 8    # doubles per row of the strided column block
VECTOR_STRIDE = 4   # the block is 1/VECTOR_STRIDE of the matrix width
DARRAY_BLOCK = 8    # block-cyclic block size (elements) of the darray piece
ALIGN_BYTES = 64    # sizes of the grids are whole cache lines
FIRST_TOUCH_SIZES = tuple(int(2 ** (22 + q / 4)) for q in range(17))   # 4 .. 64 MiB, quarter octaves


class CommProfileError(ValueError):
    pass


BATCH_OVERRUN = 10.0   # a repetition this many times longer than min_sample_seconds re-sizes its batch


@dataclass(frozen=True)
class CommTiming:
    warmup: int = 2                  # calls before anything is timed
    warmup_seconds: float = 0.002    # then more untimed calls, about this long
    rewarm: int = 2                  # untimed calls before each repetition ...
    rewarm_below_seconds: float = 1e-3   # ... of an operation shorter than this (a longer one's cold
    #                                  start, microseconds, is under its noise; on a slow link a
    #                                  16 MiB message would spend most of its point re-warming)
    min_reps: int = 3
    max_reps: int = 15
    rel_tol: float = 0.02            # the median known to +-rel_tol ...
    mean_tol: float = 0.05           # ... and the mean's standard error within mean_tol of it
    min_sample_seconds: float = 1e-4
    point_budget_seconds: float = 0.3
    max_inner: int = 1000


@dataclass(frozen=True)
class CommProfile:
    name: str
    sizes: tuple[int, ...]
    procs: str | tuple[int, ...] = "all"       # all | ends (2 and P) | sample (sample_procs) | explicit list
    grids: str = "all"                         # all (r*c <= P) | full (r*c == P) | sample (sample_grids) | none
    procs_per_octave: int = 2                  # procs: sample: process counts per octave above 4
    primitives: tuple[str, ...] = ALL_PRIMITIVES
    timing: CommTiming = field(default_factory=CommTiming)
    max_buffer_bytes: int = 256 << 20          # skip sizes whose per-process buffers exceed this
    max_regimes: int = 8
    passes: int = 2                            # sweeps over the whole plan; per point the lower median kept
    contention_passes: int | None = None        # passes of the compute contention (None: passes, at most 3)
    cold_passes: int | None = None              # passes of the cold-cache primitives (None: passes, at most passes)
    loggp: bool = True                         # also the PRTT series for LoOgGP (p = 2, sizes <= loggp_max_bytes)
    loggp_messages: int = 8
    loggp_max_bytes: int = 1 << 20
    cold_sizes: tuple[int, ...] | None = None   # sizes of the cold-cache primitives (None: sizes >= COLD_MIN_BYTES)
    heldout: bool = False                       # also time the midpoints of each grid, to check the fits on
    check_sides: tuple[int, ...] = (1024, 2048, 4096)   # the root's finiteness check (``check_costs``)
    first_touch_sizes: tuple[int, ...] = FIRST_TOUCH_SIZES   # the root's page faults (``first_touch_costs``)
    pack_order: int = 2048                      # the root's block-cyclic (un)packing (``pack_costs``)
    root_reps: int | None = None                # repetitions of those three (None: each one's default)
    step_order: int = 1536                      # SUMMA calibration runs (``calibrate.step_waits``): order ...
    step_blocks: tuple[int, ...] = (64, 128, 256, 512)    # ... and blocks
    loop_cases: tuple[tuple[int, int], ...] = LOOP_CASES   # Cholesky (order, block) runs (``calibrate.loop_costs``)
    phase_calibration: phcal.PhaseCalibration = field(default_factory=phcal.PhaseCalibration)   # plans timed last
    calibrate: bool = True     # False: links, host speeds and the root's costs only (no contention, no
    #                            calibration runs: a cluster description in minutes)
    source: str = ""

    @property
    def contention_rounds(self) -> int:
        """Passes of the compute contention: ``contention_passes``, else the probe's passes (at most 3)."""
        return self.contention_passes or min(self.passes, 3)

    def rounds(self, prim: str) -> int:
        """Passes that time ``prim``: the cold-cache primitives' ``cold_passes`` (each repetition
        flushes every cache, so they cost most per point), every other primitive's ``passes``."""
        return min(self.cold_passes or self.passes, self.passes) if prim in COLD else self.passes

    def fitted_sizes(self, prim: str) -> tuple[int, ...]:
        """The message sizes ``prim``'s fit is made from."""
        if prim not in COLD:
            return self.sizes
        if self.cold_sizes is not None:
            return self.cold_sizes
        return tuple(s for s in self.sizes if s >= COLD_MIN_BYTES)

    def heldout_for(self, prim: str) -> tuple[int, ...]:
        """Sizes ``prim`` is timed at only to check its fit: the geometric midpoint of each pair of
        neighbours in its grid, none a fitted size of any primitive; () without ``heldout``. Each is
        aligned as its grid is (to 64 B, or half the smaller neighbour below 128 B): the messages
        the runtime sends are whole blocks, and a misaligned one can be slower than its size alone
        says."""
        if not self.heldout:
            return ()
        own = self.fitted_sizes(prim)
        fitted = set(self.sizes) | set(self.fitted_sizes(COLD[0]))   # every cold primitive: one grid
        mids = set()
        for a, b in zip(own[:-1], own[1:], strict=False):
            q = min(ALIGN_BYTES, max(8, 2 ** int(math.log2(a)) // 2))
            m = _aligned(math.sqrt(a * b), q)
            mids.add(next((x for x in (m, m + q, m - q) if a < x < b and x not in fitted), m))
        return tuple(sorted(mids - fitted))

    @property
    def heldout_sizes(self) -> tuple[int, ...]:
        """Every held-out size of any primitive (what the fits leave out)."""
        return tuple(sorted({m for prim in self.primitives for m in self.heldout_for(prim)}))

    def sizes_for(self, prim: str) -> tuple[int, ...]:
        """The message sizes ``prim`` is timed at: its fitted sizes and the held-out ones between them."""
        return tuple(sorted(set(self.fitted_sizes(prim)) | set(self.heldout_for(prim))))

    def p_values(self, world: int) -> list[int]:
        """The process counts the non-grid primitives are timed at on ``world`` ranks."""
        if world < 2:
            return []
        if self.procs == "all":
            return list(range(2, world + 1))
        if self.procs == "ends":
            return sorted({2, world})
        if self.procs == "sample":
            return sample_procs(world, self.procs_per_octave)
        return sorted({p for p in self.procs if 2 <= p <= world})

    def grid_values(self, world: int) -> list[tuple[int, int]]:
        """The r x c grids the row and column broadcasts are timed on at ``world`` ranks."""
        if self.grids == "none" or "bcast_row" not in self.primitives and "bcast_col" not in self.primitives:
            return []
        if self.grids == "sample":
            out = sample_grids(self.p_values(world))
        else:
            out = [(r, c) for r in range(1, world + 1) for c in range(1, world + 1) if 2 <= r * c <= world]
        if self.grids == "full":
            out = [(r, c) for r, c in out if r * c == world]
        return sorted(out, key=lambda g: (g[0] * g[1], g))


def sample_procs(world: int, per_octave: int = 2) -> list[int]:
    """Process counts of a sampled probe at world size P: 2, 3, 4, then ``per_octave`` evenly spaced
    counts in each octave above (2: the powers of two and their midpoints 6, 12, 24, ...), and P:
    O(log P) of them, so the probe scales with P; the (p, m) models predict the others."""
    if world < 2:
        return []
    out, low = {2, 3, 4}, 4
    while low < world:
        out |= {low + i * low // max(1, per_octave) for i in range(max(1, per_octave))}
        low *= 2
    return sorted(p for p in out | {world} if 2 <= p <= world)


def sample_grids(procs) -> list[tuple[int, int]]:
    """The grids a sampled probe times the row and column broadcasts on: for each p in ``procs``,
    1 x p, p x 1 and the most square r x c (r <= c); the other grids take the (p, m) models."""
    out = set()
    for p in procs:
        r = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
        out |= {(1, p), (p, 1), (r, p // r)}
    return sorted((g for g in out if g[0] * g[1] >= 2), key=lambda g: (g[0] * g[1], g))


def _aligned(x: float, q: int) -> int:
    """``x`` rounded to a multiple of ``q`` bytes."""
    return int(round(x / q)) * q


def _sizes(spec, source: str) -> tuple[int, ...]:
    """Sizes in bytes: ``powers: [lo, hi]`` (2^lo..2^hi) with ``step``, plus ``extra``: a list of
    sizes and/or ``{from: B, to: B, per_octave: k}`` ranges (log-spaced, rounded to 64 B)."""
    if isinstance(spec, list):
        sizes = [int(s) for s in spec]
    elif isinstance(spec, dict):
        lo, hi = spec.get("powers", [3, 24])
        sizes = [2 ** e for e in range(int(lo), int(hi) + 1, int(spec.get("step", 1)))]
        extra = spec.get("extra", [])
        for item in extra if isinstance(extra, list) else [extra]:
            if isinstance(item, dict):
                a, b, k = float(item["from"]), float(item["to"]), int(item.get("per_octave", 3))
                octaves = math.log2(b / a)
                pts = [a * 2 ** (i / (k + 1)) for i in range(int(round(octaves * (k + 1))) + 1)]
                sizes += [_aligned(x, ALIGN_BYTES) for x in pts]
            else:
                sizes.append(int(item))
    else:
        raise CommProfileError(f"{source}: sizes must be a list or a mapping")
    sizes = sorted({s for s in sizes if s >= 8})
    if not sizes or any(s % 8 for s in sizes):
        raise CommProfileError(f"{source}: sizes must be multiples of 8 bytes (>= 8), got {sizes}")
    return tuple(sizes)


def parse_comm_profile(data: dict, source: str = "<comm profile>") -> CommProfile:
    allowed = {"name", "description", "sizes", "procs", "grids", "primitives", "timing", "max_buffer_bytes",
               "max_regimes", "passes", "contention_passes", "cold_passes", "loggp", "loggp_messages",
               "loggp_max_bytes", "cold_sizes", "heldout", "step_waits", "loop_costs", "check_sides",
               "first_touch_sizes", "pack_order", "root_reps", "phase_calibration", "calibrate"}
    unknown = set(data) - allowed
    if unknown:
        raise CommProfileError(f"{source}: unknown key(s) {sorted(unknown)}")
    prims = data.get("primitives", "all")
    prims = ALL_PRIMITIVES if prims == "all" else tuple(prims)
    bad = sorted(set(prims) - set(ALL_PRIMITIVES))
    if bad:
        raise CommProfileError(f"{source}: unknown primitive(s) {bad}")
    procs, per_octave = _procs(data.get("procs", "all"), source)
    grids = data.get("grids", "all")
    if grids not in ("all", "full", "sample", "none"):
        raise CommProfileError(f"{source}: grids must be all, full, sample or none")
    try:
        timing = CommTiming(**(data.get("timing") or {}))
    except TypeError as exc:
        raise CommProfileError(f"{source}: timing: {exc}") from exc
    return CommProfile(name=str(data.get("name", Path(source).stem)), sizes=_sizes(data.get("sizes", {}), source),
                       procs=procs, procs_per_octave=per_octave, grids=grids,
                       primitives=prims, timing=timing,
                       max_buffer_bytes=int(data.get("max_buffer_bytes", 256 << 20)),
                       max_regimes=int(data.get("max_regimes", 8)), passes=max(1, int(data.get("passes", 2))),
                       contention_passes=(max(1, int(data["contention_passes"])) if "contention_passes" in data
                                          else None),
                       cold_passes=max(1, int(data["cold_passes"])) if "cold_passes" in data else None,
                       loggp=bool(data.get("loggp", True)), loggp_messages=max(2, int(data.get("loggp_messages", 8))),
                       loggp_max_bytes=int(data.get("loggp_max_bytes", 1 << 20)),
                       cold_sizes=_sizes(data["cold_sizes"], source) if "cold_sizes" in data else None,
                       heldout=_heldout(data.get("heldout", "none"), source),
                       **_root_costs(data, source),
                       **_step_waits(data.get("step_waits") or {}, source),
                       **_loop_costs(data.get("loop_costs"), source),
                       **_phase_calibration(data.get("phase_calibration", {}), source),
                       calibrate=bool(data.get("calibrate", True)), source=source)


def _procs(value, source: str) -> tuple[str | tuple[int, ...], int]:
    """``procs``: all, ends, sample, ``{sample: {per_octave: k}}`` or a list of counts, as the
    CommProfile's (procs, procs_per_octave)."""
    if value in ("all", "ends", "sample"):
        return value, 2
    if isinstance(value, dict) and set(value) == {"sample"}:
        spec = value["sample"] or {}
        try:
            k = int(spec.get("per_octave", 2)) if isinstance(spec, dict) and set(spec) <= {"per_octave"} else None
        except (TypeError, ValueError):
            k = None
        if k is None or k < 1:
            raise CommProfileError(f"{source}: procs: sample takes {{per_octave: k}} with k >= 1, got {spec!r}")
        return "sample", k
    if isinstance(value, list):
        try:
            return tuple(int(p) for p in value), 2
        except (TypeError, ValueError) as exc:
            raise CommProfileError(f"{source}: procs: {exc}") from exc
    raise CommProfileError(f"{source}: procs must be all, ends, sample, {{sample: {{per_octave: k}}}} or a list")


def _root_costs(data: dict, source: str) -> dict:
    """The sizes and repetitions of the root's own costs (finiteness check, first touch, packing)
    as CommProfile fields, defaults where left out; a tiny profile keeps them short."""
    try:
        sizes = {k: tuple(int(x) for x in data[k]) for k in ("check_sides", "first_touch_sizes") if k in data}
        counts = {k: int(data[k]) for k in ("pack_order", "root_reps") if k in data}
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: root costs: {exc}") from exc
    if any(not v or min(v) < 1 for v in sizes.values()) or any(v < 1 for v in counts.values()):
        raise CommProfileError(f"{source}: check_sides, first_touch_sizes, pack_order and root_reps must be positive")
    return {**sizes, **counts}


def _step_waits(value, source: str) -> dict:
    """``step_waits: {order: N, blocks: [b, ...]}`` as CommProfile fields (defaults where left out)."""
    if not isinstance(value, dict) or set(value) - {"order", "blocks"}:
        raise CommProfileError(f"{source}: step_waits must be a mapping with order and/or blocks")
    out = {}
    try:
        if "order" in value:
            out["step_order"] = int(value["order"])
        if "blocks" in value:
            out["step_blocks"] = tuple(int(b) for b in value["blocks"])
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: step_waits: {exc}") from exc
    blocks = out.get("step_blocks", (1,))
    if out.get("step_order", 1) < 1 or not blocks or min(blocks) < 1:
        raise CommProfileError(f"{source}: step_waits: order and blocks must be positive")
    return out


def _loop_costs(value, source: str) -> dict:
    """``loop_costs: [[order, block], ...]`` as the CommProfile field (default where left out)."""
    if value is None:
        return {}
    try:
        cases = tuple((int(n), int(b)) for n, b in value)
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: loop_costs must be a list of [order, block] pairs: {exc}") from exc
    if len(cases) < 2 or min(min(c) for c in cases) < 1:
        raise CommProfileError(f"{source}: loop_costs needs at least two positive [order, block] pairs")
    return {"loop_cases": cases}


def _phase_calibration(value, source: str) -> dict:
    """``phase_calibration: {sizes: [n, ...], reps: N, families: [gemm, cholesky], max_ratio: x}``
    (defaults where left out) or ``none``, as the CommProfile field."""
    if value in ("none", None):
        return {"phase_calibration": phcal.PhaseCalibration(sizes=())}
    keys = {"sizes", "reps", "families", "max_ratio"}
    if not isinstance(value, dict) or set(value) - keys:
        raise CommProfileError(f"{source}: phase_calibration must be none or a mapping with {sorted(keys)}")
    try:
        cal = phcal.PhaseCalibration(**{k: tuple(v) if k in ("sizes", "families") else v for k, v in value.items()})
        cal = phcal.PhaseCalibration(tuple(int(n) for n in cal.sizes), int(cal.reps), tuple(map(str, cal.families)),
                                     float(cal.max_ratio))
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: phase_calibration: {exc}") from exc
    if set(cal.families) - set(phcal.FAMILIES) or min(cal.sizes, default=1) < 1 or cal.reps < 1 or cal.max_ratio < 1:
        raise CommProfileError(f"{source}: phase_calibration: families must be among {list(phcal.FAMILIES)}, "
                               "sizes and reps positive, max_ratio >= 1")
    return {"phase_calibration": cal}


def _heldout(value, source: str) -> bool:
    if value not in ("midpoints", "none"):
        raise CommProfileError(f"{source}: heldout must be midpoints or none, got {value!r}")
    return value == "midpoints"


def load_comm_profile(name_or_path: str) -> CommProfile:
    """``quick``/``standard`` (configs/comm-NAME.yaml) or a YAML file."""
    from .profile import read_profile_yaml

    data, source = read_profile_yaml(name_or_path, BUILTIN, "comm-{}.yaml", "comm profile", CommProfileError)
    return parse_comm_profile(data, source)


# -- run-time estimate (printed before a launch) ------------------------------------------------------

EST_START_SECONDS = 10.0        # mpiexec, the ranks' imports, MPI set-up, the fits and writes
EST_POINT_SECONDS = 0.012       # a point's own cost (barriers, reductions, bookkeeping), a core per rank
EST_LATENCY = 5e-6              # seconds per message ...
EST_BANDWIDTH = 3e9             # ... and bytes per second each rank moves
EST_FLUSH_BANDWIDTH = 8e9       # bytes per second of a cache flush's sweep
EST_GEMM_FLOPS = 2.5e10         # one-thread dgemm where no BLAS record gives this machine's rate
EST_REPS = 2                    # repetitions a point takes, in multiples of min_reps (capped at max_reps)
EST_RANGE = (0.75, 1.5)         # the printed range around the estimate


def estimate_seconds(profile: CommProfile, nprocs: int, cores: int, gemm_flops: float | None = None
                     ) -> tuple[float, float]:
    """(low, high) wall seconds of the whole ``--mpi`` run of ``profile`` on ``nprocs`` ranks over
    ``cores`` cores: its points, passes and fixed steps (contention, root costs, calibrations, the
    phase calibration's plans) at rough rates, slowed by ranks sharing cores. An estimate: other
    programs slow every step."""
    rate = gemm_flops or EST_GEMM_FLOPS
    total = (EST_START_SECONDS + _points_seconds(profile, nprocs, cores)
             + _compute_seconds(profile, nprocs, cores, rate) + _root_seconds(profile)
             + phcal.estimate_seconds(profile.phase_calibration, nprocs, cores, rate))
    return EST_RANGE[0] * total, EST_RANGE[1] * total


def plan_curves(profile: CommProfile, nprocs: int) -> list[tuple[str, int, tuple[int, ...]]]:
    """(primitive, p, sizes) of every curve one pass measures (as ``_Run.sweep`` walks them)."""
    out = []
    for p in profile.p_values(nprocs):
        prims = [x for x in profile.primitives if x in GROUP or (p == 2 and x in PAIR)]
        out += [(x, p, profile.sizes_for(x)) for x in prims]
    for r, c in profile.grid_values(nprocs):
        out += [(x, r * c, profile.sizes_for(x)) for x in ("bcast_row", "bcast_col")
                if x in profile.primitives and (c if x == "bcast_row" else r) >= 2]
    return [(x, p, tuple(m for m in sizes if _footprint(x, p, m) <= profile.max_buffer_bytes))
            for x, p, sizes in out]


def count_points(profile: CommProfile, nprocs: int) -> dict[str, int]:
    """What ``profile`` times on ``nprocs`` ranks: process counts, grids, curves and points
    (primitive x p x grid x size) of one pass, and the timings of all its passes."""
    curves = plan_curves(profile, nprocs)
    points = sum(len(sizes) for _, _, sizes in curves)
    return {"p": len(profile.p_values(nprocs)), "grids": len(profile.grid_values(nprocs)), "curves": len(curves),
            "points": points, "timed": sum(len(sizes) * profile.rounds(x) for x, _, sizes in curves)}


def points_seconds(profile: CommProfile, nprocs: int, cores: int) -> float:
    """Estimated wall seconds of the probe's points alone (every pass, PRTT series included)."""
    return _points_seconds(profile, nprocs, cores)


def _share(p: int, cores: int) -> float:
    """How much slower p busy ranks run on ``cores`` cores than on a core each."""
    return max(1.0, p / max(cores, 1))


def _flush_seconds() -> float:
    return 8 * last_level_cache_bytes() / EST_FLUSH_BANDWIDTH     # read and write 4x the cache


def _point_seconds(t: CommTiming, t_op: float, single: bool, per_rep: float = 0.0) -> float:
    """One point: warm-up, then repetitions until the estimate's count or the budget."""
    short = t_op < t.rewarm_below_seconds          # warmed and re-warmed in full (see time_point)
    rep = (t.rewarm if short else 0) * t_op + (t_op if single else max(t.min_sample_seconds, t_op)) + per_rep
    reps = min(t.max_reps, EST_REPS * t.min_reps)
    warm = (t.warmup if short else 1) * t_op + t.warmup_seconds
    return EST_POINT_SECONDS + warm + min(max(t.point_budget_seconds, 2 * rep), reps * rep)


def _points_seconds(profile: CommProfile, nprocs: int, cores: int) -> float:
    """Every pass's points and PRTT series."""
    t, flush, total = profile.timing, _flush_seconds(), 0.0
    for prim, p, sizes in plan_curves(profile, nprocs):
        single = dbc.base_primitive(prim) in SINGLE_CALL
        cold = flush if prim in COLD else 0.0
        for m in sizes:
            t_op = EST_LATENCY + _footprint(prim, p, m) / 2 / EST_BANDWIDTH
            total += profile.rounds(prim) * _share(p, cores) * _point_seconds(t, t_op, single, cold)
    if profile.loggp and 2 in profile.p_values(nprocs):
        n = profile.loggp_messages
        for m in (m for m in profile.sizes if m <= profile.loggp_max_bytes):
            t_op = EST_LATENCY + m / EST_BANDWIDTH
            total += profile.passes * sum(_point_seconds(t, k * t_op, False) for k in (2, n + 1, 2 * n + 1))
    return total


def _compute_seconds(profile: CommProfile, nprocs: int, cores: int, rate: float) -> float:
    """The dgemm-bound steps: contention passes, compute skews and the calibration runs."""
    from autotune.install_probe import calibrate as cal
    from autotune.install_probe import contention as con

    cases = [2.0 * n ** 3 for n in con.SIZES] + [2.0 * n * n * con.RANKB_BLOCK for n in con.RANKB_SIZES]
    procs = profile.p_values(nprocs)         # the contention, skews and step waits run on the probe's p
    shares = sum(_share(p, cores) for p in {1, *procs})
    contention = profile.contention_rounds * con.REPS * sum(cases) * shares
    skew = con.SKEW_REPS * sum(2.0 * n * n * b for n, b in con.SKEW_SHAPES) * (shares - 1)
    loop = (cal.REPS + 1) * sum(n ** 3 / 3 for n, _ in profile.loop_cases)   # two ranks: half each, plus messages
    steps = sum((cal.STEP_REPS + 1) * 2 * len(profile.step_blocks)
                * 2.0 * cal.step_n(p, profile.step_blocks, profile.step_order) ** 3 / p * _share(p, cores)
                for p in procs)
    return (contention + skew + loop + steps) / rate


def _root_seconds(profile: CommProfile) -> float:
    """Rank 0's own costs: first touch, packing and the finiteness check, each behind cache flushes."""
    flush = _flush_seconds()
    reps = profile.root_reps
    touch = (reps or 5) * sum(2 * flush + 2 * m / EST_BANDWIDTH for m in profile.first_touch_sizes)
    pack = (len(PACK_RUNS) + 1) * ((reps or 7) + 1) * (2 * flush + 16 * profile.pack_order ** 2 / EST_BANDWIDTH)
    check = 4 * ((reps or 3) + 1) * sum(flush + 8 * n * n / EST_BANDWIDTH for n in profile.check_sides)
    return touch + pack + check


# -- timing ------------------------------------------------------------------------------------

@dataclass
class Point:
    mean: float
    median: float
    minimum: float
    q1: float
    q3: float
    reps: int
    inner: int


def time_point(comm, op, timing: CommTiming, *, batch: bool = True, prepare=None) -> Point:
    """Collective timing of ``op`` over ``comm`` (every member calls this with its own ``op``);
    ``prepare()``, if given, runs untimed before each repetition, after the re-warming calls."""
    from mpi4py import MPI

    from .timing import stable

    red = np.zeros(2)
    out = np.zeros(2)

    def maxed(a: float, b: float) -> tuple[float, float]:
        red[0], red[1] = a, b
        comm.Allreduce(red, out, op=MPI.MAX)
        return float(out[0]), float(out[1])

    start = MPI.Wtime()
    op()
    first, _ = maxed(MPI.Wtime() - start, 0.0)
    for _ in range(max(1, timing.warmup) - 1 if first < timing.rewarm_below_seconds else 0):
        op()          # a long first call has warmed what more calls would (the max over ranks: all agree)
    comm.Barrier()
    t0 = MPI.Wtime()
    op()
    single, _ = maxed(MPI.Wtime() - t0, 0.0)
    for _ in range(min(timing.max_inner, int(timing.warmup_seconds / max(single, 1e-7)))):
        op()
    inner = 1
    if batch and single < timing.min_sample_seconds:
        inner = int(min(timing.max_inner, max(1, math.ceil(timing.min_sample_seconds / max(single, 1e-9)))))
    rewarm = timing.rewarm if single < timing.rewarm_below_seconds else 0   # the max over ranks: all agree
    # A long call timed alone after a Barrier, with nothing to prepare, is a repetition already.
    times: list[float] = [single] if rewarm == 0 and inner == 1 and prepare is None else []
    while True:
        for _ in range(rewarm):   # untimed: the bookkeeping below evicted MPI's state from the caches
            op()
        if prepare is not None:
            prepare()
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(inner):
            op()
        t, wall = maxed((MPI.Wtime() - t0) / inner, MPI.Wtime() - start)
        times.append(t)
        if inner > 1 and t * inner > BATCH_OVERRUN * timing.min_sample_seconds:
            # the batch was sized on one fast call; calls this slow (ranks descheduled on shared
            # cores) need fewer per repetition. t is the max over ranks: every rank agrees.
            inner = int(max(1, math.ceil(timing.min_sample_seconds / t)))
        if len(times) >= timing.min_reps and stable(times, timing.rel_tol) and _mean_known(times, timing.mean_tol):
            break
        if len(times) >= timing.max_reps or (wall > timing.point_budget_seconds and len(times) >= 2):
            break
    arr = np.asarray(times)
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Point(float(arr.mean()), float(med), float(arr.min()), float(q1), float(q3), len(times), inner)


def _mean_known(times: list[float], tol: float) -> bool:
    """The mean's standard error is within ``tol`` of it: oversubscribed ranks give two-mode
    times (the receiver running or asleep), whose median jumps between the modes from one
    size to the next while the mean, what a phase of many calls costs, settles."""
    arr = np.asarray(times)
    return float(arr.std(ddof=1)) / math.sqrt(len(arr)) <= tol * float(arr.mean())


# -- the operations -------------------------------------------------------------------------------

def _message_buffer(nbytes: int) -> np.ndarray:
    """``nbytes`` of memory made as the runs' workspace makes theirs (huge pages from
    ``workspace.HUGE_MIN_BYTES``: a transfer's time depends on the page size), touched once."""
    buf = workspace.huge_empty(-(-nbytes // 8)).view(np.uint8)[:nbytes]
    buf.fill(1)
    return buf


class Buffers:
    """Send/receive arrays sized for the largest message, touched once (no page faults timed)."""

    def __init__(self, nbytes: int):
        self.n = nbytes
        self.send = _message_buffer(nbytes)
        self.recv = _message_buffer(nbytes)


class CacheFlush:
    """Evicts this process's data from the caches: one read-modify-write sweep over four times
    the last-level cache (128 MiB if its size is unknown; twice leaves a sixth of it behind)."""

    def __init__(self, nbytes: int | None = None):
        self.buf = np.ones(max(1, (nbytes or 4 * last_level_cache_bytes()) // 8))

    def __call__(self) -> None:
        np.add(self.buf, 1.0, out=self.buf)


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """Size of the largest CPU cache (Linux sysfs), ``default`` where unknown."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=default)


def _vector_type(m: int):
    """A strided column block of a row-major matrix: rows x VECTOR_WIDTH doubles, stride 4x wider."""
    from mpi4py import MPI

    nd = max(1, m // 8)
    width = min(VECTOR_WIDTH, nd)
    rows = max(1, nd // width)
    dt = MPI.DOUBLE.Create_vector(rows, width, width * VECTOR_STRIDE).Commit()
    return dt, rows * width * VECTOR_STRIDE, rows * width


def _darray_type(m: int):
    """Rank 0's piece of a matrix distributed block-cyclically on a 2 x 2 grid (blocks of DARRAY_BLOCK)."""
    from mpi4py import MPI

    nd = max(1, m // 8)
    rows = 2 ** int(math.floor(math.log2(math.sqrt(nd))))
    cols = max(1, nd // rows)
    gsizes = [2 * rows, 2 * cols]
    dargs = [min(DARRAY_BLOCK, rows), min(DARRAY_BLOCK, cols)]
    dt = MPI.DOUBLE.Create_darray(4, 0, gsizes, [MPI.DISTRIBUTE_CYCLIC] * 2, dargs, [2, 2], MPI.ORDER_C).Commit()
    return dt, gsizes[0] * gsizes[1], dt.Get_size() // 8


def make_op(prim: str, comm, m: int, bufs: Buffers, *, row=None, col=None):
    """(op, payload bytes, cleanup) for one call of ``prim`` moving ``m`` bytes on ``comm``."""
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    B = MPI.BYTE
    s, r = bufs.send, bufs.recv
    counts = np.full(p, m, dtype=np.int64)
    displs = np.arange(p, dtype=np.int64) * m
    nothing = lambda: None  # noqa: E731
    if prim == "pingpong" or prim in LINK:
        sb, rb = [s[:m], B], [r[:m], B]
        if rank == 0:
            def op():
                comm.Send(sb, 1, 7)
                comm.Recv(rb, 1, 7)
        else:
            def op():
                comm.Recv(rb, 0, 7)
                comm.Send(sb, 0, 7)
        return op, m, nothing
    if prim in ("send_vector", "send_subarray"):
        dt, elements, payload = (_vector_type if prim == "send_vector" else _darray_type)(m)
        mat = np.ones(elements, dtype=np.float64)
        flat = np.ones(payload, dtype=np.float64)
        if rank == 0:
            def op():
                comm.Send([mat, 1, dt], 1, 8)
                comm.Recv([mat, 1, dt], 1, 8)
        else:
            def op():
                comm.Recv([flat, payload, MPI.DOUBLE], 0, 8)
                comm.Send([flat, payload, MPI.DOUBLE], 0, 8)
        return op, payload * 8, dt.Free
    if prim in ("bcast", "bcast_row", "bcast_col"):
        c = {"bcast": comm, "bcast_row": row, "bcast_col": col}[prim]
        buf = [s[:m], B]
        return (lambda: c.Bcast(buf, 0)), m, nothing
    if prim == "sendrecv":
        sb, rb = [s[:m], B], [r[:m], B]
        right, left = (rank + 1) % p, (rank - 1) % p
        return (lambda: comm.Sendrecv(sb, right, 9, rb, left, 9)), m, nothing
    if prim == "allgather":
        sb, rb = [s[:m], B], [r[:p * m], B]
        return (lambda: comm.Allgather(sb, rb)), m, nothing
    if prim == "allgatherv":
        sb, rb = [s[:m], B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Allgatherv(sb, rb)), m, nothing
    if prim in ("reduce", "allreduce"):
        nd = m // 8
        sd = s[:nd * 8].view(np.float64)
        rd = r[:nd * 8].view(np.float64)
        sb, rb = [sd, MPI.DOUBLE], [rd, MPI.DOUBLE]
        if prim == "reduce":
            return (lambda: comm.Reduce(sb, rb, MPI.SUM, 0)), nd * 8, nothing
        return (lambda: comm.Allreduce(sb, rb, MPI.SUM)), nd * 8, nothing
    if prim == "scatterv":
        sb, rb = [s[:p * m], (counts, displs), B], [r[:m], B]
        return (lambda: comm.Scatterv(sb, rb, 0)), m, nothing
    if prim == "gatherv":
        sb, rb = [s[:m], B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Gatherv(sb, rb, 0)), m, nothing
    if prim == "alltoallv":
        sb, rb = [s[:p * m], (counts, displs), B], [r[:p * m], (counts, displs), B]
        return (lambda: comm.Alltoallv(sb, rb)), m, nothing
    raise ValueError(f"unknown primitive {prim!r}")


class ColdOp:
    """One call of a cold primitive: a run's distribution of a user's matrix. Arrays of exactly
    the matrix's size, in float64, the root's own Scatterv block left in place; ``renew()`` (before
    each repetition, untimed) allocates and touches new ones, then every member's caches are
    flushed. The root's is a numpy array, as a user's matrix is: the single-copy transfer walks
    its pages, and how much of it huge pages back depends on where it falls. The other members
    receive into memory made as the runs' workspace is (``_message_buffer``). The root's array is
    not put on huge pages: the runs send from the user's matrices (or pack them first), so that
    would read low."""

    def __init__(self, prim: str, comm, m: int, flush: CacheFlush | None = None):
        if prim not in COLD:
            raise ValueError(f"unknown cold primitive {prim!r}")
        self.prim, self.comm, self.d, self.flush = prim, comm, m // 8, flush
        p = comm.Get_size()
        self.blocks = (np.full(p, self.d, dtype=np.int64), np.arange(p, dtype=np.int64) * self.d)
        self.renew()

    def renew(self) -> None:
        p, d = self.comm.Get_size(), self.d
        self.buf = None                          # the old arrays go before the new ones come
        if self.comm.Get_rank() == 0:
            self.buf = np.ones(d if self.prim == "bcast_cold" else p * d)
        elif self.prim != "colscatter_cold":   # that one receives into the runs' workspace
            self.buf = _message_buffer(8 * d).view(np.float64)
        if self.flush is not None:
            self.flush()

    def __call__(self) -> None:
        from mpi4py import MPI

        comm = self.comm
        if self.prim == "bcast_cold":
            comm.Bcast([self.buf, MPI.DOUBLE], 0)
        elif self.prim == "colscatter_cold":     # one column block of d elements per rank
            src = self.buf.reshape(1, -1) if self.buf is not None else None
            scatter_columns(src, 1, Axis(comm.Get_size() * self.d, comm.Get_size(), self.d), comm, 0)
        elif comm.Get_rank() == 0:
            comm.Scatterv([self.buf, self.blocks, MPI.DOUBLE], MPI.IN_PLACE, 0)
        else:
            comm.Scatterv(None, [self.buf, MPI.DOUBLE], 0)


def make_prtt(comm, m: int, n: int, delay: float, bufs: Buffers):
    """PRTT(n, d, s) (Kielmann et al.; Hoefler et al.'s LoOgGP): rank 0 sends n messages of s
    bytes, waiting ``delay`` seconds (busy) after each but the last; rank 1 receives them all and
    answers with one message of s bytes."""
    from mpi4py import MPI

    sb, rb = [bufs.send[:m], MPI.BYTE], [bufs.recv[:m], MPI.BYTE]
    clock = time.perf_counter
    if comm.Get_rank() == 0:
        def op():
            for i in range(n):
                comm.Send(sb, 1, 11)
                if delay and i < n - 1:
                    until = clock() + delay
                    while clock() < until:
                        pass
            comm.Recv(rb, 1, 12)
    else:
        def op():
            for _ in range(n):
                comm.Recv(rb, 0, 11)
            comm.Send(sb, 0, 12)
    return op


# Rooted, non-synchronising collectives: back-to-back calls would overlap (pipelining), so each
# repetition times a single call.
SINGLE_CALL = ("bcast", "reduce", "scatterv", "gatherv", "bcast_row", "bcast_col")   # and their cold timings


def _footprint(prim: str, p: int, m: int) -> int:
    return m * FOOTPRINT.get(dbc.base_primitive(prim), lambda _p: 2)(p)


def buffer_bytes(profile: CommProfile, prims, p: int) -> int:
    """Bytes of each of the send and receive buffers ``prims`` need on p ranks: a whole
    p-block vector for the gathers, scatters and all-to-all, one message for the others (the
    cold primitives allocate their own)."""
    need = [(p if pr in FOOTPRINT else 1) * m for pr in prims if pr not in COLD for m in profile.sizes_for(pr)
            if _footprint(pr, p, m) <= profile.max_buffer_bytes]
    if profile.loggp and p == 2:
        need += [m for m in profile.sizes if m <= profile.loggp_max_bytes]
    return max(need + [8])


# -- the run --------------------------------------------------------------------------------------

def link_pair(hosts: list[str], same: bool) -> tuple[int, int] | None:
    """The first pair of ranks (by rank) on one host (``same``) or on two different hosts."""
    for i in range(len(hosts)):
        for j in range(i + 1, len(hosts)):
            if (hosts[i] == hosts[j]) == same:
                return i, j
    return None


def platform_info(world) -> dict:
    """MPI library, world size, hosts, oversubscription (collective over ``world``)."""
    from mpi4py import MPI

    hw = dbc.hardware()
    host = MPI.Get_processor_name() or socket.gethostname()
    everyone = world.allgather((host, int(hw["physical_cores"])))
    per_host: dict[str, list[int]] = {}
    for h, cores in everyone:
        per_host.setdefault(h, []).append(cores)
    oversubscribed = any(len(cores) > cores[0] for cores in per_host.values())  # ranks on a host > its cores
    import mpi4py

    return {"library": MPI.Get_library_version().strip().splitlines()[0].strip(),
            "library_version": MPI.Get_library_version().strip(),
            "mpi_standard": "{}.{}".format(*MPI.Get_version()),
            "P": world.Get_size(), "oversubscribed": bool(oversubscribed), "hosts": len(per_host),
            "ranks_per_host": max(len(v) for v in per_host.values()),
            "physical_cores": int(hw["physical_cores"]), "hardware": hw, "dist": dbc.mpi_distributions(),
            "mpi4py": mpi4py.__version__}


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

    def curve(self, prim: str, comm, p: int, grid: tuple[int, int], bufs: Buffers, **comms) -> None:
        """Every size of one primitive on ``comm`` (its members only)."""
        pf = self.profile
        sizes = pf.sizes_for(prim)
        if prim in COLD:
            self.flush = self.flush or CacheFlush()
        for m in (sizes[::-1] if self.reverse else sizes):
            if _footprint(prim, p, m) > pf.max_buffer_bytes:
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

    def prtt(self, comm, bufs: Buffers) -> None:
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
            pair = link_pair(hosts, same=prim == "link_host")
            if pair is None:
                continue
            sub = world.Split(0 if world.Get_rank() in pair else MPI.UNDEFINED, pair.index(world.Get_rank())
                              if world.Get_rank() in pair else 0)
            if sub != MPI.COMM_NULL:
                self.curve(prim, sub, 2, (0, 0), self.buffers([prim], 2))
                sub.Free()
            quiet_barrier(world)      # the others wait without taking a core from the pair
            self.log(f"{prim} between ranks {pair[0]} and {pair[1]}")

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




def first_touch_costs(sizes=FIRST_TOUCH_SIZES, reps: int = 5) -> dict:
    """Seconds per byte that copying into a new array costs over copying into the same array again
    (caches flushed before each), by the array's bytes, median of ``reps``: the page faults a new
    result takes where a run writes it first. Measured by size because the allocator decides:
    glibc maps arrays above its mmap threshold (32 MiB at most) fresh each time, and hands smaller
    ones back already faulted, so the cost steps from about nothing to its full value there."""
    flush, out = CacheFlush(), {"bytes": [], "per_byte": []}
    for nbytes in sizes:
        src, extra = np.ones(nbytes // 8), []
        for _ in range(reps):
            flush()
            t0 = time.perf_counter()
            fresh = np.empty(nbytes // 8)
            np.copyto(fresh, src)
            t1 = time.perf_counter()
            flush()
            t2 = time.perf_counter()
            np.copyto(fresh, src)
            t3 = time.perf_counter()
            extra.append((t1 - t0) - (t3 - t2))
            del fresh
        out["bytes"].append(int(nbytes))
        out["per_byte"].append(max(float(np.median(extra)), 0.0) / nbytes)
    return out


def first_touch_in_fresh_process(sizes=FIRST_TOUCH_SIZES, reps: int = 5, timeout: float = 120.0) -> dict:
    """``first_touch_costs`` measured in a new Python process: which sizes come back already
    faulted depends on what the process freed before (a heap this probe has churned through
    hands even 32 MiB back warm), and a run's new result meets a heap like a fresh one's,
    in which glibc maps arrays past its threshold anew. In this process if that fails."""
    import json
    import subprocess

    from autotune.install_probe import child_env

    code = ("import json; from autotune.install_probe.comm import first_touch_costs as f; "
            f"print(json.dumps(f({tuple(int(x) for x in sizes)!r}, {int(reps)})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              check=True, env=child_env())
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return first_touch_costs(sizes, reps)


# Contiguous run lengths timed, plus whole columns: every block size the selector tries (64..512)
# and shorter ones. Measured, not interpolated: the cost can step between neighbouring run
# lengths, which a log-linear interpolation of a coarser set would smooth over.
PACK_RUNS = (8, 16, 32, 64, 128, 256, 512)
PACK_SPREAD = 1 << 19     # elements (4 MiB): steps of the repetitions' places and distances in memory


def pack_costs(n: int = 2048, reps: int = 7) -> dict:
    """Seconds per element of the root's block-cyclic packing (``take_padded``, distribution) and
    unpacking (``put_clipped``, collection) of an n x n column-major matrix split in two by rows,
    caches flushed first, by the length of the contiguous runs the split leaves: the block when
    the rows are split, the whole column (``n``) when not. Median of ``reps``, each at its own
    place in memory and its own distance between matrix and buffer (``PACK_SPREAD`` steps): how
    fast a copy runs depends on both, so one placement or one distance for every repetition
    would read a single, unrepresentative speed."""
    from autotune.kernels.dist_gemm import put_clipped, take_padded


    size, flush = n * n, CacheFlush()
    pool = np.ones(2 * size + 3 * reps * PACK_SPREAD)
    cols = np.arange(n, dtype=np.int64)
    out = {"runs": [], "take": [], "put": []}
    for run in (*PACK_RUNS, n):
        parts = 2 if run < n else 1
        rows = [np.ascontiguousarray(Axis(n, parts, run).indices(i), dtype=np.int64) for i in range(parts)]
        take, put = [], []
        for rep in range(reps + 1):                     # the first: compile and warm up
            at = max(rep - 1, 0) * PACK_SPREAD        # the matrix moves one step, the buffer two:
            mat = pool[at:at + size].reshape((n, n), order="F")     # their distance grows a step
            flat = pool[size + reps * PACK_SPREAD + 2 * at:][:size]
            flush()
            t0 = time.perf_counter()
            off = 0
            for r in rows:
                off = take_padded(mat, r, cols, flat, off)
            t1 = time.perf_counter()
            flush()
            t2 = time.perf_counter()
            off = 0
            for r in rows:
                put_clipped(mat, r, cols, flat[off:off + r.size * n].reshape((r.size, n), order="F"))
                off += r.size * n
            t3 = time.perf_counter()
            if rep:
                take.append((t1 - t0) / (n * n))
                put.append((t3 - t2) / (n * n))
        out["runs"].append(int(run))
        out["take"].append(float(np.median(take)))
        out["put"].append(float(np.median(put)))
    return out


def check_costs(sides=(1024, 2048, 4096), reps: int = 3) -> dict:
    """Seconds per element of the root's finiteness check (``distributed.checks.all_finite``, one
    thread) of a Fortran-ordered n x n matrix no cache holds, by side n, median of ``reps``, for
    each available library with a gemv: a run checks the user's matrix before it moves it. A
    read out of memory, so a constant share of the add series' rate does not carry over between
    machines."""
    from autotune import backends
    from autotune.distributed.checks import all_finite

    flush, out = CacheFlush(), {"sides": [int(n) for n in sides]}
    for name in backends.available():
        if name == PACK_BACKEND or not backends.get(name).supports("gemv"):   # no plan runs on it
            continue
        per = []
        for n in sides:
            a, times = np.ones((n, n), order="F"), []
            for _ in range(reps + 1):                # the first: load and warm up
                flush()
                t0 = time.perf_counter()
                all_finite(a, name, 1)
                times.append(time.perf_counter() - t0)
            per.append(float(np.median(times[1:])) / (n * n))
            del a
        out[name] = per
    return out


def run_comm_probe(world, profile: CommProfile, db_path=None, *, verbose: bool = True) -> dict | None:
    """Measure, fit and store (rank 0). Collective; returns the summary on rank 0, None elsewhere."""

    t_start = time.perf_counter()
    info = platform_info(world)
    run = _Run(world, profile, verbose)
    run.log(f"{info['library']}, P={info['P']}{' (oversubscribed)' if info['oversubscribed'] else ''}, "
            f"profile {profile.name}: {len(profile.sizes)} sizes {profile.sizes[0]}..{profile.sizes[-1]} B")
    run.run()
    from autotune.install_probe.contention import compute_skews, host_speeds

    info["compute_skew"] = compute_skews(world, procs=profile.p_values(world.Get_size()))
    info["host_speeds"] = host_speeds(world)
    if world.Get_rank() == 0:
        reps = {} if profile.root_reps is None else {"reps": profile.root_reps}
        info["first_touch"] = first_touch_in_fresh_process(profile.first_touch_sizes, **reps)   # the others
        info["pack"] = pack_costs(profile.pack_order, **reps)             # wait in the fit's bcast below
        info["check"] = check_costs(profile.check_sides, **reps)
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
    p.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or the user data dir)")
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
        before = [measure_contention(world, procs=procs)] if passes > 1 else []
        step("contention, first pass" if before else "")
        result = run_comm_probe(world, profile, args.db, verbose=not args.quiet)
        step("points, fits, root costs")
        where = world.bcast((result["path"], result["key"]) if result is not None else None, root=0)
        if not profile.calibrate:
            return _report(result, [], None)
        from autotune.install_probe.calibrate import call_overheads, loop_costs, step_waits

        rows = run_contention(world, *where, passes=passes - len(before), earlier=before, procs=procs)
        step("contention")
        calibrated = {**(loop_costs(world, where[0], cases=profile.loop_cases) or {}),
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
