"""The comm probe's profiles (configs/comm-*.yaml): what it times (primitives, process counts,
grids, sizes, timing rules, root costs, calibrations), parsed and checked with one line per error."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from autotune.install_probe import phase_calibration as phcal
from autotune.install_probe.calibrate import LOOP_CASES
from autotune.install_probe.contention import ContentionPlan

from autotune.db import comm as dbc

BUILTIN = ("quick", "standard", "links")
ALL_PRIMITIVES = dbc.PRIMITIVES
COLD = dbc.COLD_PRIMITIVES     # a run's distribution: new arrays, caches flushed (ColdOp)
PAIR = ("pingpong", "send_vector", "send_subarray")           # ranks 0 and 1, p = 2 only
GROUP = ("bcast", "sendrecv", "allgather", "allgatherv", "reduce", "allreduce", "scatterv", "gatherv",
         "alltoallv", *COLD)                                         # on each p-rank sub-communicator
LINK = dbc.LINK_PRIMITIVES      # a ping-pong or a swap on one pair of each link type the ranks have
SWAP = dbc.SWAP_PRIMITIVES
ROUND_TRIP = ("pingpong", "send_vector", "send_subarray", *(x for x in LINK if x not in SWAP))  # one way: half
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


OVERLAP_SIZES = (512, 4096, 32768, 262144, 2097152)   # halo rows and columns .. a factorisation's panels
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
    contention: ContentionPlan = field(default_factory=ContentionPlan)   # its sizes and repetitions
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
    overlap_sizes: tuple[int, ...] = OVERLAP_SIZES   # the overlap series (``comm_overlap``; () for none) ...
    overlap_reps: int = 7                             # ... and its interleaved rounds per size
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
               "max_regimes", "passes", "contention_passes", "contention", "cold_passes", "loggp", "loggp_messages",
               "loggp_max_bytes", "cold_sizes", "heldout", "step_waits", "loop_costs", "check_sides",
               "first_touch_sizes", "pack_order", "root_reps", "phase_calibration", "calibrate", "overlap"}
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
                       contention=_contention(data.get("contention") or {}, source),
                       cold_passes=max(1, int(data["cold_passes"])) if "cold_passes" in data else None,
                       loggp=bool(data.get("loggp", True)), loggp_messages=max(2, int(data.get("loggp_messages", 8))),
                       loggp_max_bytes=int(data.get("loggp_max_bytes", 1 << 20)),
                       cold_sizes=_sizes(data["cold_sizes"], source) if "cold_sizes" in data else None,
                       heldout=_heldout(data.get("heldout", "none"), source),
                       **_root_costs(data, source),
                       **_step_waits(data.get("step_waits") or {}, source),
                       **_loop_costs(data.get("loop_costs"), source),
                       **_phase_calibration(data.get("phase_calibration", {}), source),
                       **_overlap(data.get("overlap", {}), source),
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


def _overlap(value, source: str) -> dict:
    """``overlap: {sizes: [m, ...], reps: N}`` or ``overlap: none`` as CommProfile fields."""
    if value == "none":
        return {"overlap_sizes": ()}
    if not isinstance(value, dict) or set(value) - {"sizes", "reps"}:
        raise CommProfileError(f"{source}: overlap must be none or a mapping with sizes and reps")
    try:
        out = {"overlap_sizes": tuple(int(m) for m in value.get("sizes", OVERLAP_SIZES)),
               "overlap_reps": int(value.get("reps", 7))}
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: overlap: {exc}") from exc
    if min(out["overlap_sizes"] + (1,)) < 1 or out["overlap_reps"] < 1:
        raise CommProfileError(f"{source}: overlap sizes and reps must be positive")
    return out


def _contention(value, source: str) -> ContentionPlan:
    """``contention: {sizes: [n, ...], rankb_sizes: [n, ...], reps: N, skew_reps: N}`` as the
    CommProfile field (defaults where left out)."""
    keys = {"sizes", "rankb_sizes", "reps", "skew_reps"}
    if not isinstance(value, dict) or set(value) - keys:
        raise CommProfileError(f"{source}: contention must be a mapping with {sorted(keys)}")
    try:
        plan = ContentionPlan(**{k: tuple(int(n) for n in v) if k.endswith("sizes") else int(v)
                                 for k, v in value.items()})
    except (TypeError, ValueError) as exc:
        raise CommProfileError(f"{source}: contention: {exc}") from exc
    if not plan.sizes or min(plan.sizes + plan.rankb_sizes) < 1 or min(plan.reps, plan.skew_reps) < 1:
        raise CommProfileError(f"{source}: contention: sizes and repetitions must be positive, sizes not empty")
    return plan


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
    """``quick``/``standard``/``links`` (configs/comm-NAME.yaml) or a YAML file."""
    from .profile import read_profile_yaml

    data, source = read_profile_yaml(name_or_path, BUILTIN, "comm-{}.yaml", "comm profile", CommProfileError)
    return parse_comm_profile(data, source)


# -- run-time estimate (printed before a launch) ------------------------------------------------------
