"""Memory a tuned call needs: the float64 buffers it allocates beyond the caller's operands, on
the root and on the largest other rank, counted from the layouts and buffers the runs use
(docs/models.md#memory; 001 §3.3.3-3.3.6: BSR replicates B, Cannon does not, Strassen's
temporaries). Pure functions of (problem, candidate or plan); index arrays and message headers
(O(n)) are left out.

Workspace buffers (``distributed.workspace``) are counted like fresh ones: they are kept between
calls, so they are memory the plan holds while it runs whether or not an earlier call made them.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.core.assumptions import HUGE_MIN_BYTES, HUGE_PAGE
from autotune.core.plans import Candidate, Plan
from autotune.core.routines import WORD
from autotune.geometry.halo import Tile
from autotune.geometry.layout import Axis, grid_weights
from autotune.kernels.strassen_shape import strassen_workspace_elems


def ws(*elems: float) -> float:
    """Workspace buffers of these sizes as they sit in memory: from ``HUGE_MIN_BYTES`` up each
    takes whole transparent huge pages once touched (``distributed.workspace.huge_empty``)."""
    page = HUGE_PAGE / WORD
    return float(sum(-(-e // page) * page if WORD * e >= HUGE_MIN_BYTES else e for e in elems))


@dataclass(frozen=True)
class Footprint:
    """Named buffers (float64 elements) on the root and on the largest other rank."""

    root: dict[str, float]
    other: dict[str, float] = field(default_factory=dict)

    @property
    def root_bytes(self) -> float:
        return WORD * sum(self.root.values())

    @property
    def other_bytes(self) -> float:
        return WORD * sum(self.other.values())

    def host_bytes(self, ranks_on_host: int) -> float:
        """The root's host with ``ranks_on_host`` of the plan's ranks on it (the busiest host)."""
        return self.root_bytes + max(ranks_on_host - 1, 0) * self.other_bytes

    def describe(self) -> str:
        def one(parts: dict[str, float]) -> str:
            return ", ".join(f"{k} {WORD * v / 2**20:.1f} MiB" for k, v in parts.items() if v)
        text = f"root: {one(self.root) or 'nothing'}"
        return text + (f"; each other rank: {one(self.other)}" if self.other else "")


# -- one process ------------------------------------------------------------------------------------

def local(dims: tuple[int, ...], family: str, cand: Candidate) -> Footprint:
    """One process: the result (or the factor's working copy) and the algorithm's temporaries."""
    if family == "gemm":
        m, k, n = dims
        parts: dict[str, float] = {"C": m * n}
        if cand.algorithm == "strassen":
            parts["Strassen temporaries"] = strassen_workspace_elems(m, k, n, cand.param)
        elif cand.algorithm == "strassen_nested":
            # the 7 top-level products and their operands, up to P1 tasks at once, each task's
            # further levels with their own temporaries
            h = (m // 2, k // 2, n // 2)
            p1 = max(cand.variant, 1)
            parts["Strassen products"] = 7 * h[0] * h[2]
            parts["Strassen task operands"] = p1 * (h[0] * h[1] + h[1] * h[2] + strassen_workspace_elems(
                *h, max(cand.param - 1, 0)))
        return Footprint(parts)
    n = dims[0]
    if family in ("lu", "cholesky"):
        return Footprint({"factor": n * n})
    if family == "solve":
        return Footprint({"factor": n * n, "x": n * dims[1]})
    if family == "lu_solve":
        return Footprint({"x": n * dims[1]})
    if family == "stencil":
        return Footprint({"two fields": 2 * dims[0] * dims[1]})
    return Footprint({})


# -- distributed plans ------------------------------------------------------------------------------

def _bsr(dims, plan: Plan) -> Footprint:
    """The root scatters A's bands from its own memory and computes its band inside C; every
    other rank holds its band of A and C and all of B."""
    m, k, n = dims
    mi = Axis(m, plan.p, weights=plan.weights).most()
    return Footprint({"C": m * n}, {"A band": ws(mi * k), "B replica": ws(k * n), "C band": ws(mi * n)})


def _cbsr(dims, plan: Plan) -> Footprint:
    """Each rank gathers its process row's band of A and holds all of B and its block of C; the
    root gathers the C blocks into a buffer, then into C."""
    m, k, n = dims
    mi, nj = Axis(m, plan.r).count(0), Axis(n, plan.c).count(0)
    rank = {"A band": ws(mi * k) * (1 + (plan.r > 1)), "B replica": ws(k * n), "C block": ws(mi * nj)}
    root = {"A band": ws(mi * k), "C block": ws(mi * nj), "C gathered": ws(m * n), "C": m * n}
    if plan.r > 1:
        root["A packed"] = ws(m * k) - mi * k
    return Footprint(root, rank)


def _cannon(dims, plan: Plan) -> Footprint:
    """Two buffers for each operand's block (the shift's send and receive) and C's block; the root
    packs the operands (its own block stays untouched) and gathers C into a buffer, then into C."""
    m, k, n = dims
    q = plan.r
    mi, kq, nj = Axis(m, q).count(0), Axis(k, q).count(0), Axis(n, q).count(0)
    rank = {"A blocks (2)": 2 * ws(mi * kq), "B blocks (2)": 2 * ws(kq * nj), "C block": ws(mi * nj)}
    packed = max(ws(m * k) - mi * kq, ws(k * n) - kq * nj)
    return Footprint({**rank, "packed": packed, "C gathered": ws(m * n), "C": m * n}, rank)


def _summa_rank(mm: int, kk: int, nn: int, plan: Plan, g: int = 1) -> dict[str, float]:
    R, C = plan.r, plan.c
    ml, kl, nl = -(-mm // g), -(-kk // g), -(-nn // g)
    xr, xc = Axis(ml, R, plan.b).count(0), Axis(kl, C, plan.b).count(0)
    yr, yc = Axis(kl, R, plan.b).count(0), Axis(nl, C, plan.b).count(0)
    parts = {"A piece": ws(xr * xc * g * g), "B piece": ws(yr * yc * g * g), "C piece": ws(xr * yc * g * g),
             "panels": ws(plan.b * xr, plan.b * yc)}
    if g > 1:       # each Strassen level's three stacks of half as many leaves per side
        parts["Strassen temporaries"] = sum(ws(*(e * (g >> (d + 1)) ** 2 for e in (xr * xc, yr * yc, xr * yc)))
                                            for d in range(plan.level))
    return parts


def _summa(dims, plan: Plan) -> Footprint:
    """Block-cyclic pieces and two panels per rank; the root packs the operands (its own piece
    untouched) and gathers C (its own piece untouched) before copying it into C."""
    m, k, n = dims
    g = 2 ** plan.level if plan.algorithm == "strassen_summa" else 1
    rank = _summa_rank(m, k, n, plan, g)
    packed = max(ws(m * k) - rank["A piece"], ws(k * n) - rank["B piece"])
    return Footprint({**rank, "packed": packed, "C gathered": ws(m * n) - rank["C piece"], "C": m * n}, rank)


def _strassen_ms(dims, plan: Plan) -> Footprint:
    """Master/worker Strassen: the master forms each product's two operands and accumulates the
    products into C; a worker holds one task's operands, product and its Strassen temporaries."""
    m, k, n = dims
    h = (m // 2, k // 2, n // 2)
    operands = {"S": ws(h[0] * h[1]), "T": ws(h[1] * h[2]), "product": ws(h[0] * h[2])}
    rank = {**operands, "Strassen temporaries": strassen_workspace_elems(*h, max(plan.level - 1, 0))}
    return Footprint({"C": m * n, **operands}, rank)


def _factor(dims, plan: Plan) -> Footprint:
    """Block-cyclic LU / solve / Cholesky: each rank's piece and panel buffers (the LU: three
    received, two sent, on r > 1 the gathered panel and the row exchange; the Cholesky: two slots
    of its row and column pieces). The root adds the LU's checked Fortran copy (the Cholesky reads
    the user's matrix), then the larger of the scatter's packing (2-D layouts) and the result
    with, on 2-D layouts, its gather buffer (the packing is freed before the loop)."""
    n = dims[0]
    rw, cw = grid_weights(plan.weights, plan.r, plan.c) or (None, None)
    rows, cols = Axis(n, plan.r, plan.b, rw), Axis(n, plan.c, plan.b, cw)
    rank = _factor_rank(plan, n, rows, rows.most(), cols.most())      # the largest piece's rank
    root = _factor_rank(plan, n, rows, rows.count(0), cols.count(0))
    if plan.algorithm != "cholesky":
        root["checked copy"] = n * n
    two_d = plan.r > 1 and (plan.c > 1 or plan.algorithm != "cholesky")
    result = n * n * (1 + two_d)
    if plan.algorithm == "gesv":
        nrhs = dims[1]
        rank["right-hand sides"] = n * nrhs + ws(n * nrhs)        # the holder's, the ring's buffer
        root["right-hand sides"] = 2 * n * nrhs + ws(n * nrhs)    # b's copy, x, the ring's buffer
        result = 0
    root["packing or result"] = max(n * n - root["piece"] if two_d else 0, result)
    return Footprint(root, rank)


def _factor_rank(plan: Plan, n: int, rows: Axis, mloc: int, nloc: int) -> dict[str, float]:
    """A factorization's rank holding an ``mloc`` x ``nloc`` piece: the piece and its panel buffers."""
    b = min(plan.b, n)
    piece = ws(mloc * nloc) if plan.r == 1 else mloc * nloc      # 1 x c: scattered into workspace
    if plan.algorithm == "cholesky":      # two slots of its panel piece (and on 2-D grids the row and column pieces)
        pieces = (b * mloc,) if plan.r == 1 or plan.c == 1 else (b * mloc, b * nloc, b * mloc)
        return {"piece": piece, "panels": 2 * ws(*pieces) + (ws(b * b) if plan.r == 1 or plan.c == 1 else 0)}
    # three received, two slots sent (to each process row with other ranks), the U12 block
    sent = [b * rows.count(i) for i in range(plan.r) if plan.c > 1 or i > 0]
    rank: dict[str, float] = {"piece": piece, "panels": ws(*[b * mloc] * 3, *sent, *sent)}
    if plan.r > 1:      # the gathered panel and its pieces, U12 down the column, the row exchange
        rank["gathered panel, U12, row exchange"] = ws(b * n, b * mloc, b * nloc) + b * mloc + 2 * b * nloc
    return rank


def _stencil(dims, plan: Plan) -> Footprint:
    """A halo field: two buffers of the largest tile with its halos (``plan.b`` wide), its piece as
    scattered and gathered; the root adds the scatter's packing, then the gather's buffer and the
    result (radius 1: the problem's radius is not part of the plan's dims)."""
    rows, cols = dims[0], dims[1]
    tile = Tile(rows, cols, plan.r, plan.c, 0, 0, max(plan.b, 1), 1,
                grid_weights(plan.weights, plan.r, plan.c) or (None, None))
    (tr, tc), (lr, lc) = tile.shape, tile.local_shape
    rank: dict[str, float] = {"two halo buffers": 2 * lr * lc, "piece": tr * tc}
    return Footprint({**rank, "gather buffer and result": 2 * rows * cols}, rank)


PLANS: dict[str, Callable[[tuple[int, ...], Plan], Footprint]] = {
    "bsr": _bsr, "cbsr": _cbsr, "cannon": _cannon, "summa": _summa, "strassen_summa": _summa,
    "strassen_ms": _strassen_ms, "lu": _factor, "cholesky": _factor, "gesv": _factor,
    "blocking": _stencil, "overlap": _stencil, "border_first": _stencil,
}


def plan_footprint(dims: tuple[int, ...], plan: Plan) -> Footprint | None:
    """A distributed plan's footprint; None for algorithms without a memory model."""
    model = PLANS.get(plan.algorithm)
    return None if model is None else model(tuple(int(d) for d in dims), plan)


def ranks_on_busiest_host(p: int, hosts: int) -> int:
    """The plan's p ranks dealt evenly over ``hosts``: how many the fullest host holds."""
    return math.ceil(p / max(int(hosts), 1))


__all__ = ["PLANS", "WORD", "Footprint", "local", "plan_footprint", "ranks_on_busiest_host"]
