"""Cost of stencil sweeps: one process sweeping the field, and each schedule of a halo plan on a
process grid (004 §3.2.2, eq. 8: T = Tcomp + Tcomm + Toverlap + Tidle).

A sweep costs k x flops of its rectangle, k looked up under the pattern the pass has
(``interior`` block, border ``rows``, strided border ``cols``; ``routines.PATTERNS``) at the
rectangle's size, times the problem's cost per cell over the probed 5-point stencil's. A halo
exchange costs each message's (ts + m tw) on its link (eq. 11: the probe's ``swap_host`` within a
host, ``swap_net`` between hosts; strided column messages also pay their packing), plus a request's
start and completion (``HALO_REQUEST``). Schedules (``halo.Tile.sweep`` gives the regions):

- ``blocking``: exchange, then sweep the whole region (Tcomm + Tcomp);
- ``overlap``: start the exchange, sweep the interior, wait, sweep the border cells: the
  network messages hide behind the interior (max(Tint, Tnet)); copies between ranks of one host
  do not (004 §3.2.2: in-node messages cannot overlap, the CPU moves them);
- ``border_first``: sweep the border cells (corners, then edges), start the exchange, sweep the
  interior (004 §3.2.3); the same overlap, the border pieces as separate calls.

A halo of width h = s·R serves s steps per exchange, sub-step k sweeping (s - 1 - k)·R more
cells into the halo. On the wavefront backend the sub-steps swept whole (all s when blocking, the
s - 1 after the first when overlapped) are one fused call, priced by the ``levels`` pattern's k at
s levels; in one process it fuses ``LOCAL_LEVELS`` steps a call. The iteration takes the slowest
rank's time (its neighbours wait: Tidle). Vectorised over the plan's tiles; the overlap condition
(eq. 12) and the crossover tile it implies are functions of their own.
"""
from __future__ import annotations

import math

import numpy as np

from autotune.core.assumptions import HALO_REQUEST, LOCAL_LEVELS
from autotune.core.families import WAVEFRONT_BACKEND, StencilProblem
from autotune.core.plans import PHASES, Plan
from autotune.core.routines import STENCIL_FLOPS, WORD
from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import SPLookup
from autotune.geometry.halo import Tile, border_cells, interior_cells, tiles
from autotune.geometry.layout import grid_weights

from . import movement
from .links import Messages, fixed, hosts_of, link_time, message, rank_speeds

SCHEDULES = ("blocking", "overlap", "border_first")


def sweep(sp: SPLookup, backend: str, threads: int, shape: tuple[int, int], pattern: str, scale: float = 1.0) -> float:
    """Seconds of one sweep over an m x n rectangle accessed as ``pattern``: interior blocks are
    looked up at their square-equivalent side, row strips at their length (param: their height),
    column strips at their height (param: their width)."""
    m, n = shape
    if m <= 0 or n <= 0:
        return 0.0
    x: float
    param: float
    if pattern == "rows":
        x, param = n, m
    elif pattern == "cols":
        x, param = m, n
    else:
        x, param = math.sqrt(m * n), 0.0
    return scale * STENCIL_FLOPS * m * n * movement.k(sp, "stencil", backend, threads, x, pattern, param)


def fuses(problem: StencilProblem, backend: str) -> bool:
    """Whether ``backend`` sweeps a run of the problem's steps in one wavefront (weights only)."""
    return backend == WAVEFRONT_BACKEND and not problem.kernel


def fused(sp: SPLookup, backend: str, threads: int, shapes: list[tuple[int, int]], scale: float = 1.0,
          fuse: bool = True) -> float:
    """Seconds of a run of sweeps, step k over ``shapes[k]``: one fused call when ``fuse`` on the
    wavefront backend (k of the ``levels`` pattern at their mean block, len(shapes) levels), else
    a call each."""
    if not fuse or backend != WAVEFRONT_BACKEND or len(shapes) < 2:
        return sum(sweep(sp, backend, threads, shape, "interior", scale) for shape in shapes)
    cells = float(sum(m * n for m, n in shapes))
    if cells <= 0:
        return 0.0
    x = math.sqrt(cells / len(shapes))
    return scale * STENCIL_FLOPS * cells * movement.k(sp, "stencil", backend, threads, x, "levels", len(shapes))


def single(problem: StencilProblem, backend: str, threads: int, sp: SPLookup) -> float:
    """One process: ``steps`` sweeps of the field's interior (LOCAL_LEVELS a call on the wavefront
    backend), plus the copy of the field into the two working buffers."""
    rad = problem.radius
    shape = (problem.rows - 2 * rad, problem.cols - 2 * rad)
    fuse = fuses(problem, backend)
    levels = LOCAL_LEVELS if fuse else 1
    runs, rest = divmod(problem.steps, levels)
    return (runs * fused(sp, backend, threads, [shape] * levels, problem.scale, fuse)
            + fused(sp, backend, threads, [shape] * rest, problem.scale, fuse)
            + movement.copy(sp, 2.0 * problem.rows * problem.cols))


def exchange(tile: Tile, rank_host: np.ndarray, c: int, corners: bool, sp: SPLookup,
             cp: CommParams) -> tuple[Messages, float]:
    """One halo exchange of ``tile`` as an overlapped schedule sees it (``models.links``: each
    message's link time, split by what hides behind compute on its link kind, column messages'
    packing and unpacking and the requests' own cost shown), and the seconds of its messages to
    other hosts."""
    here = rank_host[tile.pr * c + tile.pc]
    total, net = fixed(0.0), 0.0
    for d in tile.directions(corners):
        cells = tile.send(d).cells
        neighbour = tile.neighbour(d)
        assert neighbour is not None, "directions() gives the tile's neighbours only"
        npr, npc = neighbour
        other = bool(rank_host[npr * c + npc] != here)
        t = link_time(cp, other, cells * WORD)
        total += message(cp, other, cells * WORD, t) + fixed(HALO_REQUEST)
        if d[1] != 0:
            total += fixed(2.0 * movement.copy(sp, cells))
        net += t if other else 0.0
    return total, net


def _pieces(sp: SPLookup, backend: str, threads: int, rects, rows, scale: float) -> float:
    """The border pieces, each swept on its own: row strips contiguous, column strips strided."""
    return sum(sweep(sp, backend, threads, r.shape, "rows" if row else "cols", scale)
               for r, row in zip(rects, rows, strict=True))


def iteration(problem: StencilProblem, plan: Plan, tile: Tile, rank_host: np.ndarray, sp: SPLookup,
              cp: CommParams, speed: float = 1.0) -> dict[str, float]:
    """One rank's seconds per step of ``plan.algorithm``: {"compute" (with the CPU overlapped
    messages take), "communication" (exposed, with the schedule's own cost a period:
    ``CommParams.step_overhead``), "hidden" (message time the interior covered), "interior",
    "net" (seconds of messages to other hosts)}. ``speed``: the rank's host speed over the
    probe's (its sweeps and its messages' CPU take 1/speed as long)."""
    be, t, scale = plan.backend, plan.threads, problem.scale / speed
    s = tile.substeps
    msgs, net = exchange(tile, rank_host, plan.c, problem.corners, sp, cp)
    shapes = [tile.sweep((s - 1 - k) * problem.radius).whole.shape for k in range(s)]
    first = tile.sweep((s - 1) * problem.radius)
    msgs = Messages(msgs.shown, msgs.hideable, msgs.cpu / speed) + fixed(
        cp.step_overhead("net" if net > 0 else "host", plan.algorithm) / speed)
    if plan.algorithm == "blocking":
        compute = fused(sp, be, t, shapes, scale, fuses(problem, be))
        return {"compute": compute / s, "communication": msgs.alone / s, "hidden": 0.0,
                "interior": compute / s, "net": net / s}
    later = fused(sp, be, t, shapes[1:], scale, fuses(problem, be))
    interior = sweep(sp, be, t, first.interior.shape, "interior", scale)
    border = _pieces(sp, be, t, first.border, first.rows, scale)
    exposed = msgs.exposed(interior)
    return {"compute": (interior + msgs.cpu + border + later) / s, "communication": exposed / s,
            "hidden": (msgs.alone - exposed) / s, "interior": interior / s, "net": net / s}


def plan_tiles(problem: StencilProblem, plan: Plan) -> list[Tile]:
    """The plan's tiles in rank order (halo ``plan.b``, weighted by its ranks' speeds if given)."""
    weights = grid_weights(plan.weights, plan.r, plan.c) or (None, None)
    return tiles(problem.rows, problem.cols, plan.r, plan.c, plan.b, problem.radius, weights)


def per_step(problem: StencilProblem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """The slowest rank's step (every rank waits for its neighbours each exchange): its terms, and
    "idle", what the fastest rank waits per step (a host's CPU quota: ``select.distributed``'s quota
    step)."""
    rank_host, speeds = hosts_of(plan.p, cp), rank_speeds(plan.p, cp)
    steps = [iteration(problem, plan, t, rank_host, sp, cp, float(v))
             for t, v in zip(plan_tiles(problem, plan), speeds, strict=True)]
    totals = [s["compute"] + s["communication"] for s in steps]
    worst = steps[int(np.argmax(totals))]
    return {**worst, "idle": max(totals) - min(totals), "total": max(totals)}


def _moves(problem: StencilProblem, plan: Plan, sp: SPLookup, cp: CommParams) -> tuple[float, float]:
    """(distribution, collection): the root's Scatterv / Gatherv of the tiles (packed in C order:
    a copy), the copies into and out of the halo arrays (two buffers per rank), the two exchanges
    that fill both buffers' halos once, and the page faults of what each allocates (the root's
    send or receive buffer and result, a rank's piece and its two halo buffers)."""
    tls = plan_tiles(problem, plan)
    biggest = max(t.shape[0] * t.shape[1] for t in tls)
    halo = max(t.local_shape[0] * t.local_shape[1] for t in tls)
    cells = problem.rows * problem.cols
    rank_host = hosts_of(plan.p, cp)
    prime = 2.0 * max(exchange(t, rank_host, plan.c, problem.corners, sp, cp)[0].alone for t in tls)
    fresh = cp.first_touch_time(WORD * cells)
    scatter = (float(cp.time("scatterv", plan.p, biggest * WORD)) + movement.copy(sp, 3.0 * cells) + prime
               + fresh + cp.first_touch_time(WORD * biggest) + 2.0 * cp.first_touch_time(WORD * halo))
    gather = float(cp.time("gatherv", plan.p, biggest * WORD)) + movement.copy(sp, 2.0 * cells) + 2.0 * fresh
    return scatter, gather


def model(problem: StencilProblem, plan: Plan, sp: SPLookup, cp: CommParams) -> dict[str, float]:
    """Predicted seconds per phase of ``plan`` (a schedule on its grid) for ``problem.steps`` steps."""
    step = per_step(problem, plan, sp, cp)
    dist, coll = _moves(problem, plan, sp, cp)
    phases = {"distribution": dist, "communication": problem.steps * (step["communication"] + step["idle"]),
              "compute": problem.steps * step["compute"], "collection": coll}
    phases["total"] = sum(phases[k] for k in PHASES)
    return phases


MODELS = dict.fromkeys(SCHEDULES, model)


def overlap_pays(interior: float, net: float) -> bool:
    """004 eq. 12: Tn·CI >= LMPI + m/BW + Lr: the interior sweep covers the network messages."""
    return interior >= net


def crossover(problem: StencilProblem, plan: Plan, sp: SPLookup, cp: CommParams, sides=None) -> int | None:
    """The smallest square tile side at which the interior of the plan's busiest tile covers its
    network messages (eq. 12; the field is the plan's grid of such tiles), None where no side of
    ``sides`` (default 8..8192) does. Interior work grows as n^2 and messages as n: one crossing,
    found on ``sides`` and then to the cell by bisection."""
    sides = sides if sides is not None else np.unique(np.geomspace(8, 8192, 60).astype(int))

    def pays(n: int) -> bool:
        trial = StencilProblem(int(n) * plan.r, int(n) * plan.c, 1, problem.radius, problem.corners,
                               problem.cell_flops)
        step = per_step(trial, Plan("overlap", plan.p, plan.r, plan.c, plan.b, threads=plan.threads,
                                    backend=plan.backend), sp, cp)
        return step["net"] > 0 and overlap_pays(step["interior"], step["net"])

    first = next((i for i, n in enumerate(sides) if pays(int(n))), None)
    if first is None:
        return None
    lo, hi = (int(sides[first - 1]) if first else max(int(sides[0]) - 1, 0)), int(sides[first])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pays(mid) else (mid, hi)
    return hi


def terms(problem: StencilProblem, plan: Plan, sp: SPLookup, cp: CommParams) -> list[str]:
    """explain's lines: the busiest tile's cells (004 eqs. 5-6) and its step's terms (eq. 8)."""
    step = per_step(problem, plan, sp, cp)
    busiest = max(plan_tiles(problem, plan), key=lambda t: t.shape[0] * t.shape[1] + sum(t.borders))
    (nr, nc), (p, p1) = busiest.shape, busiest.borders
    lines = [f"busiest tile {nr}x{nc}: border cells CF = {border_cells(nc, nr, p, p1)}, "
             f"interior CI = {interior_cells(nc, nr, p, p1)} (004 eqs. 5-6)",
             f"per step: compute {step['compute'] * 1e6:.1f} us (interior {step['interior'] * 1e6:.1f} us), "
             f"communication {step['communication'] * 1e6:.1f} us exposed, {step['hidden'] * 1e6:.1f} us hidden, "
             f"network {step['net'] * 1e6:.1f} us, idle {step['idle'] * 1e6:.1f} us",
             f"overlap pays (eq. 12: interior >= network): {overlap_pays(step['interior'], step['net'])}"
             if step["net"] > 0 else "no message crosses hosts: an overlap has nothing to hide (004 §3.2.2)"]
    if step["net"] > 0:
        side = crossover(problem, plan, sp, cp)
        lines.append(f"crossover: overlap pays from square tiles of {side} cells a side" if side else
                     "crossover: the interior covers the network at no tile side up to 8192")
    return lines


__all__ = ["MODELS", "SCHEDULES", "crossover", "exchange", "iteration", "model", "overlap_pays", "per_step",
           "plan_tiles", "single", "sweep", "terms"]
