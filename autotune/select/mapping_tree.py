"""The mapping model on the assignment tree (001 §5.4): a mapping's EET (the model's best grid and
block, ``models.mapping``), memoised up to the symmetry of a host's interchangeable processors
(``Search.signature``), the lower bounds the branch-and-bound methods prune with, and the tree's
moves. The methods that walk the tree are ``select.mapping``'s. Pure computation."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.core.families import FAMILIES, usable_blocks
from autotune.core.plans import grids
from autotune.db.platform import KERNELS, ClusterPlatform
from autotune.models import mapping as mm


@dataclass(frozen=True)
class Estimate:
    """A mapping's best plan by the model: total, compute and communication seconds, grid, block."""

    seconds: float
    compute: float
    comm: float
    r: int
    c: int
    b: int
    layout: str = "cyclic"      # "cyclic": equal blocks (HeHo); "weighted": data by speed (HoHe: gemm's
    #                             rows, the factorizations' blocks per cycle); "library": the library routine



def grid_label(layout: str, r: int, c: int, b: int, long: bool = False) -> str:
    """A plan's grid as the tables show it: ``r x c`` (``w`` when its blocks follow the speeds,
    HoHe), HoHe for gemm's weighted BSR (b = 0), lib for the library call."""
    if layout == "library":
        return "the library routine" if long else "lib"
    if layout == "weighted" and not b:
        return "HoHe (rows by speed)" if long else "HoHe"
    grid = f"{r}x{c}" + ("w" if layout == "weighted" else "")
    if long:
        return f"{grid} b={b}" + (" (blocks per cycle by speed, HoHe)" if layout == "weighted" else "")
    return grid


class Search:
    """The EET of mappings of one problem on one platform, memoised, and the tree's moves."""

    def __init__(self, family: str, n: int, platform: ClusterPlatform, max_level: int | None = None,
                 blocks: tuple[int, ...] | None = None, hohe: bool = True):
        if family not in mm.MODELS:
            raise ValueError(f"unknown family {family!r}; known: {', '.join(mm.MODELS)}")
        if n < 1:
            raise ValueError(f"n must be positive, got {n}")
        self.family, self.n, self.platform, self.hohe = family, int(n), platform, hohe
        self.factor = float(platform.model_factors.get(family, 1.0))   # measured/modelled, fitted here
        self.speeds, self.host_of, self.duties = platform.speeds, platform.host_of, platform.duties
        ends = np.cumsum([h.processors for h in platform.hosts])
        self._slices = list(zip(ends - [h.processors for h in platform.hosts], ends, strict=True))
        self.P = platform.size
        self.most = platform.max_per_processor
        self.max_level = int(max_level or self.P * self.most)
        bs = usable_blocks(n, FAMILIES[family].blocks if blocks is None else blocks)
        self.b = np.array(bs, float)[None, :]
        self.k = {kern: np.array([platform.k(kern, b) for b in bs], float)[None, :] for kern in KERNELS}
        self.lead = mm.leading_seconds(family, n, float(self.k["gemm"].min()))
        self._memo: dict[tuple, Estimate] = {}
        self._grids: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._comm_floor = self._comm_floors()
        self.nodes = 0
        self.depth = 0

    # -- the model at one mapping ---------------------------------------------------------------

    def signature(self, d: np.ndarray) -> tuple:
        """``d`` up to permutations of a host's processors."""
        return tuple(tuple(sorted(d[a:b].tolist())) for a, b in self._slices)

    def _grid_arrays(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        if p not in self._grids:
            g = np.array(grids(p), float)
            self._grids[p] = g[:, :1], g[:, 1:]
        return self._grids[p]

    def _links(self, row_net, col_net) -> mm.Links:
        """Row and column (ts, tw) of each grid: the network's where it crosses hosts."""
        host = np.array([self.platform.links["host"].ts, self.platform.links["host"].tw])
        net = np.array([self.platform.links["net"].ts, self.platform.links["net"].tw])
        row = np.where(np.asarray(row_net, bool).reshape(-1, 1), net, host)
        col = np.where(np.asarray(col_net, bool).reshape(-1, 1), net, host)
        return mm.Links(row[:, :1], row[:, 1:], col[:, :1], col[:, 1:])

    def _phases(self, d: np.ndarray, r: np.ndarray, c: np.ndarray, b: np.ndarray, k: dict, weighted: bool = False):
        """(compute, communication with the root's distribution) of mapping ``d`` per grid x block,
        equal blocks or (``weighted``) blocks by the ranks' speeds."""
        hosts = mm.rank_hosts(d, self.host_of)
        flags = np.array([mm.spans(hosts, int(x), int(y)) for x, y in zip(r[:, 0], c[:, 0], strict=True)])
        f = mm.weighted_slowdown(self.weights(d), r, c) if weighted else mm.slowdown(d, self.speeds)
        compute, comm = mm.phases(self.family, self.n, r, c, b, k, f, self._links(flags[:, 0], flags[:, 1]))
        links = self.platform.links
        return compute, comm + mm.distribution(self.family, self.n, hosts, links["host"], links["net"])

    def weights(self, d: np.ndarray) -> np.ndarray:
        """Each rank's speed under mapping ``d`` (its processor's, shared by the d_i processes there)."""
        return np.repeat(self.speeds / np.maximum(d, 1), d)

    def _weighted(self, d: np.ndarray) -> Estimate | None:
        """HoHe, where the ranks' speeds differ: gemm's BSR with rows by speed on one process
        column; the factorizations' weighted block-cyclic layout on their best grid and block."""
        w = self.weights(d)
        if np.ptp(w) <= 1e-12 * w.max():
            return None
        rows = mm.MODELS[self.family].weighted_rows
        if rows is None:
            return self._best(d, *self._grid_arrays(int(d.sum())), self.b, self.k, "weighted")
        links = self.platform.links
        compute, comm = rows[1](self.n, mm.rank_hosts(d, self.host_of), w,
                                         float(self.k["gemm"].min()), links["host"], links["net"])
        return self._fitted(compute, comm, int(d.sum()), 1, 0, "weighted")

    def _best(self, d: np.ndarray, r: np.ndarray, c: np.ndarray, b: np.ndarray, k: dict, layout: str) -> Estimate:
        """The least modelled time over grids (r, c) x blocks (b, k) of mapping ``d`` in ``layout``."""
        compute, comm = self._phases(d, r, c, b, k, layout == "weighted")
        i, j = np.unravel_index(int(np.argmin(compute + comm)), compute.shape)
        return self._fitted(float(compute[i, j]), float(comm[i, j]), int(r[i, 0]), int(c[i, 0]), int(b[0, j]), layout)

    def _fitted(self, compute: float, comm: float, r: int, c: int, b: int, layout: str) -> Estimate:
        """A distributed plan's estimate, its model scaled by the platform's fitted factor."""
        compute, comm = compute * self.factor, comm * self.factor
        return Estimate(compute + comm, compute, comm, r, c, b, layout)

    def eet(self, d: np.ndarray) -> Estimate:
        """The mapping's best grid and block by the model (memoised up to symmetry)."""
        key = self.signature(d)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        lib = self._library(d)
        if lib is not None:            # one process runs the library routine, not a grid
            self._memo[key] = lib = self._throttled(lib, d)
            return lib
        est = self._best(d, *self._grid_arrays(int(d.sum())), self.b, self.k, "cyclic")
        hohe = self._weighted(d) if self.hohe else None
        if hohe is not None and hohe.seconds < est.seconds:
            est = hohe
        self._memo[key] = est = self._throttled(est, d)
        return est

    def _throttled(self, est: Estimate, d: np.ndarray) -> Estimate:
        """``est`` on ranks that run only their hosts' duty of the time (``Host.duty``): the step
        loop waits for the least of them (a throttled rank stalls the others through each period)."""
        used = np.asarray(d) > 0
        slow = 1.0 / float(self.duties[used].min()) if used.any() else 1.0
        return est if slow == 1.0 else dataclasses.replace(est, seconds=est.seconds * slow,
                                                           compute=est.compute * slow, comm=est.comm * slow)

    def _library(self, d: np.ndarray) -> Estimate | None:
        """One process: the library routine, where the platform gives its k."""
        k = self.platform.k(f"lib_{self.family}", 0)
        if int(d.sum()) != 1 or k is None:
            return None
        t = mm.library_seconds(self.family, self.n, k, mm.slowdown(d, self.speeds))
        return Estimate(t, t, 0.0, 1, 1, 0, "library")

    def estimate(self, d: np.ndarray, r: int, c: int, b: int, layout: str = "cyclic") -> Estimate | None:
        """The model's time of one plan: mapping ``d`` on an r x c grid with block b (``layout``
        "weighted": HoHe; "library": the one-process library call); None for gemm's weighted rows
        on ranks of one speed, or a library call the platform gives no k for (or on more than one
        process)."""
        d = np.asarray(d)
        if layout == "library" or (layout == "weighted" and mm.MODELS[self.family].weighted_rows):
            est = (self._weighted if layout == "weighted" else self._library)(d)
            return None if est is None else self._throttled(est, d)
        k = {kern: np.array([[self.platform.k(kern, b)]]) for kern in KERNELS}
        return self._throttled(self._best(d, np.array([[float(r)]]), np.array([[float(c)]]),
                                          np.array([[float(b)]]), k, layout), d)

    @property
    def evaluations(self) -> int:
        return len(self._memo)

    # -- bounds ---------------------------------------------------------------------------------

    def _comm_floors(self) -> np.ndarray:
        """[p, spanned]: the least communication over grids and blocks of p processes, with the best
        links (spanned: the ranks are on two hosts or more, so a row or a column crosses the network)."""
        out = np.full((self.max_level + 2, 2), np.inf)
        for p in range(1, self.max_level + 1):
            r, c = self._grid_arrays(p)
            out[p, 0] = self._comm(r, c, False, False).min()
            if p > 1:      # a row crosses only where c > 1, a column only where r > 1
                out[p, 1] = min(np.where(c > 1, self._comm(r, c, True, False), np.inf).min(),
                                np.where(r > 1, self._comm(r, c, False, True), np.inf).min())
        return np.minimum.accumulate(out[::-1], axis=0)[::-1]       # least over p' >= p

    def _comm(self, r: np.ndarray, c: np.ndarray, row_net: bool, col_net: bool) -> np.ndarray:
        """Communication of every grid x block with the given links."""
        lk = self._links([row_net] * len(r), [col_net] * len(r))
        return mm.phases(self.family, self.n, r, c, self.b, self.k, 1.0, lk)[1]

    def lower_bound(self, d: np.ndarray, last: int, permutational: bool) -> float:
        """LET = LET_ari + LET_com of the descendants of mapping ``d`` (processors before ``last``
        discarded on the combinatorial tree)."""
        avail = (d > 0) | (np.arange(self.P) >= (0 if permutational else last))
        speed = float(self.speeds[avail].sum())
        hosts = set(self.host_of[d > 0].tolist())
        p = int(d.sum())
        floor = self._comm_floor[min(p, self.max_level), int(len(hosts) > 1)]
        # the bound of the unscaled model; scaled down only by a fitted factor below 1
        return min(1.0, self.factor) * (self.lead / speed + min(self.eet(d).comm / self.factor, floor))

    # -- moves ----------------------------------------------------------------------------------

    def children(self, d: np.ndarray, last: int, permutational: bool) -> list[tuple[np.ndarray, int]]:
        """One more process on each processor (from ``last`` on the combinatorial tree), one child
        per class of interchangeable processors (same host, same processes so far)."""
        if int(d.sum()) >= self.max_level:
            return []
        seen, out = set(), []
        for j in range(0 if permutational else last, self.P):
            key = (int(self.host_of[j]), int(d[j]))
            if d[j] >= self.most or key in seen:
                continue
            seen.add(key)
            child = d.copy()
            child[j] += 1
            out.append((child, j))
        return out

    def visit(self, d: np.ndarray) -> Estimate:
        self.nodes += 1
        self.depth = max(self.depth, int(d.sum()))
        return self.eet(d)

    def greedy_path(self, d: np.ndarray, last: int, permutational: bool, until_worse: bool,
                    cost: Callable[[np.ndarray], float] | None = None) -> tuple[np.ndarray, float]:
        """Follow the best child (by ``cost``, default the EET) down the tree: to ``max_level``, or
        while it improves (``until_worse``). Returns the best mapping on the path and its cost."""
        cost = cost or (lambda x: self.visit(x).seconds)
        best_d, best = d, cost(d) if d.sum() else math.inf
        here = best
        while True:
            kids = self.children(d, last, permutational)
            if not kids:
                break
            scored = [(cost(x), i) for i, (x, _) in enumerate(kids)]
            value, i = min(scored)
            if until_worse and value >= here:
                break
            d, last = kids[i]
            here = value
            if value < best:
                best_d, best = d, value
        return best_d, best


def root(search: Search) -> np.ndarray:
    return np.zeros(search.P, int)
