"""Mapping processes to processors (001 §5.4): search the assignment tree for the number of
processes D and their processors d, with the best grid and block of each mapping.

Every node of the tree is a mapping ``d`` (processes per processor); its EET is the mapping
model's best grid and block (``models.mapping``). The methods differ in how they walk the tree:

- ``exhaustive``: every mapping up to ``max_level`` processes (for checking the others);
- ``BTM``: backtracking on the combinatorial tree, GET = EET, LET = LET_ari + LET_com, pruning a
  node's descendants when LET >= MEET (the least GET seen); LET_ari = the update's time on one
  process over the summed speeds of the processors not discarded (eq. 5.5), LET_com the least
  communication a descendant could have (its p up to ``max_level``, the best grid and links);
- ``BGRM``: BTM with GET by a greedy descent (the best child until none improves);
- ``GRM``: BGRM with LET also greedy (the children that most cut the arithmetic, communication
  held): tighter, so faster, but may prune the optimum;
- ``GCTM`` / ``GPTM``: one greedy path on the combinatorial / permutational tree to ``max_level``.

Users (each with the best grid and block for its mapping, running the homogeneous routines: equal
blocks, no HoHe layout): ``greedy`` (every processor, one process each), ``conservative`` (the
first half of the processors), ``expert`` (1, half or all processors, the fastest ones). The
methods weigh both layouts of every mapping (HeHo's equal blocks and HoHe's, ``_weighted``).

Processors of one host are interchangeable (same speed, same links), so children that differ only
by which of them gets the process are one child, and the EET is memoised per mapping up to that
symmetry (``Search.signature``). Pure computation: nothing here times or launches anything.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from autotune.core.families import FAMILIES, usable_blocks
from autotune.core.plans import Plan, grids
from autotune.db.platform import KERNELS, ClusterPlatform, measured_platform
from autotune.models import mapping as mm

METHODS = ("exhaustive", "BTM", "BGRM", "GRM", "GCTM", "GPTM")
USERS = ("greedy", "conservative", "expert")
NODE_BUDGET = 50_000
# The phase calibration's name for the mapping model's factors (``models.fitted_phases``).
MAPPING_ALGORITHM = "mapping"
# A tuned call places its processes by trying every count per host up to this many count
# vectors, and by GPTM's greedy path above it.
PLACEMENT_EXHAUSTIVE = 4096


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


@dataclass
class MappingChoice:
    """What one method or user chose and what finding it cost."""

    method: str
    d: tuple[int, ...]
    estimate: Estimate
    solve_seconds: float = 0.0      # time to solution
    depth: int = 0                  # deepest level (processes) reached
    nodes: int = 0                  # tree nodes visited
    evaluations: int = 0            # distinct mappings whose EET was computed
    complete: bool = True           # False: stopped at the node budget

    @property
    def p(self) -> int:
        return int(sum(self.d))


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
        self.speeds, self.host_of = platform.speeds, platform.host_of
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
            self._memo[key] = lib
            return lib
        est = self._best(d, *self._grid_arrays(int(d.sum())), self.b, self.k, "cyclic")
        hohe = self._weighted(d) if self.hohe else None
        if hohe is not None and hohe.seconds < est.seconds:
            est = hohe
        self._memo[key] = est
        return est

    def _library(self, d: np.ndarray) -> Estimate | None:
        """One process: the library routine, where the platform gives its k."""
        k = self.platform.k(f"lib_{self.family}", 0)
        if int(d.sum()) != 1 or k is None:
            return None
        t = mm.library_seconds(self.family, self.n, k, mm.slowdown(d, self.speeds))
        return Estimate(t, t, 0.0, 1, 1, 0, "library")

    def estimate(self, d: np.ndarray, r: int, c: int, b: int, layout: str = "cyclic") -> Estimate:
        """The model's time of one plan: mapping ``d`` on an r x c grid with block b (``layout``
        "weighted": HoHe; "library": the one-process library call)."""
        if layout == "library" or (layout == "weighted" and mm.MODELS[self.family].weighted_rows):
            return (self._weighted if layout == "weighted" else self._library)(np.asarray(d))
        k = {kern: np.array([[self.platform.k(kern, b)]]) for kern in KERNELS}
        return self._best(np.asarray(d), np.array([[float(r)]]), np.array([[float(c)]]), np.array([[float(b)]]), k,
                          layout)

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


def _root(search: Search) -> np.ndarray:
    return np.zeros(search.P, int)


def _branch(search: Search, greedy_get: bool, greedy_let: bool, budget: int) -> tuple[np.ndarray, bool]:
    """Backtracking on the combinatorial tree with LET/GET/MEET pruning (BTM, BGRM, GRM)."""
    best = {"d": None, "t": math.inf}
    meet = math.inf
    stopped = False

    def note(d: np.ndarray, t: float) -> None:
        if t < best["t"]:
            best["d"], best["t"] = d.copy(), t

    def lower(d: np.ndarray, last: int) -> float:
        if not greedy_let:
            return search.lower_bound(d, last, False)
        comm = search.eet(d).comm
        _, t = search.greedy_path(d, last, False, True, lambda x: search.eet(x).compute + comm)
        return t

    def walk(d: np.ndarray, last: int) -> None:
        nonlocal meet, stopped
        if search.nodes >= budget:
            stopped = True
            return
        t = search.visit(d).seconds
        note(d, t)
        get = t
        if greedy_get:
            gd, get = search.greedy_path(d, last, False, True)
            note(gd, get)
        meet = min(meet, get)
        if lower(d, last) >= meet:
            return
        kids = search.children(d, last, False)
        for child, j in sorted(kids, key=lambda kj: search.eet(kj[0]).seconds):
            walk(child, j)
            if stopped:
                return

    for child, j in search.children(_root(search), 0, False):
        walk(child, j)
        if stopped:
            break
    return best["d"], not stopped


def _exhaustive(search: Search) -> np.ndarray:
    """Every mapping up to ``max_level`` processes, one per class of interchangeable processors."""
    per_host = []
    for h in range(len(search.platform.hosts)):
        m = int((search.host_of == h).sum())
        per_host.append(list(itertools.combinations_with_replacement(range(search.most, -1, -1), m)))
    best, best_t = None, math.inf
    for combo in itertools.product(*per_host):
        d = np.fromiter(itertools.chain.from_iterable(combo), int, search.P)
        p = int(d.sum())
        if p == 0 or p > search.max_level:
            continue
        t = search.visit(d).seconds
        if t < best_t:
            best, best_t = d, t
    return best


def _user(search: Search, who: str) -> np.ndarray:
    """The modelled users' mappings (001 §5.4): one process per chosen processor."""
    P, half = search.P, max(1, search.P // 2)
    if who == "greedy":
        return np.ones(P, int)
    if who == "conservative":
        return (np.arange(P) < half).astype(int)
    order = np.argsort(-search.speeds, kind="stable")
    options = []
    for count in sorted({1, half, P}):
        d = np.zeros(P, int)
        d[order[:count]] = 1
        options.append(d)
    return min(options, key=lambda d: search.visit(d).seconds)


def run_method(method: str, family: str, n: int, platform: ClusterPlatform, max_level: int | None = None,
               budget: int = NODE_BUDGET, blocks: tuple[int, ...] | None = None) -> MappingChoice:
    """One method's or user's choice on a fresh search (its own memo, so its time is its own)."""
    if method not in METHODS + USERS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS + USERS)}")
    t0 = time.perf_counter()
    search = Search(family, n, platform, max_level, blocks, hohe=method not in USERS)
    complete = True
    if method == "exhaustive":
        d = _exhaustive(search)
    elif method in ("BTM", "BGRM", "GRM"):
        d, complete = _branch(search, method != "BTM", method == "GRM", budget)
    elif method in ("GCTM", "GPTM"):
        d, _ = search.greedy_path(_root(search), 0, method == "GPTM", False)
    else:
        d = _user(search, method)
    est = search.eet(d)
    return MappingChoice(method, tuple(int(x) for x in d), est, time.perf_counter() - t0, search.depth,
                         search.nodes, search.evaluations, complete)


@dataclass
class MappingStudy:
    """Every method and user on one problem and platform."""

    family: str
    n: int
    platform: ClusterPlatform
    choices: list[MappingChoice] = field(default_factory=list)

    def best(self) -> float:
        return min(c.estimate.seconds for c in self.choices)

    def of(self, method: str) -> MappingChoice | None:
        return next((c for c in self.choices if c.method == method), None)


def study(family: str, n: int, platform: ClusterPlatform, methods=METHODS + USERS, max_level: int | None = None,
          budget: int = NODE_BUDGET) -> MappingStudy:
    out = MappingStudy(family, n, platform)
    out.choices = [run_method(m, family, n, platform, max_level, budget) for m in methods]
    return out


def mapping_text(d: tuple[int, ...], platform: ClusterPlatform) -> str:
    """``d`` host by host: 'a:1111 b:2100'."""
    parts, i = [], 0
    for h in platform.hosts:
        parts.append(h.name + ":" + "".join(str(x) for x in d[i:i + h.processors]))
        i += h.processors
    return " ".join(parts)


def describe(st: MappingStudy) -> str:
    """Table like 001 tables 5.3-5.4: method, mapping, p, grid, block, predicted time, its ratio to
    the best (and to exhaustive), time to solution, depth, nodes."""
    ref = st.of("exhaustive")
    best = st.best()
    lines = [f"{st.family} n={st.n} on {st.platform.describe()}",
             f"  {'method':12s} {'p':>4s} {'grid':>7s} {'b':>4s} {'predicted s':>12s} {'/best':>6s} "
             f"{'/exh':>6s} {'t.sol s':>9s} {'depth':>5s} {'nodes':>7s}  mapping"]
    for c in st.choices:
        e = c.estimate
        exh = f"{e.seconds / ref.estimate.seconds:6.3f}" if ref is not None else "     -"
        flag = "" if c.complete else " (node budget)"
        grid = grid_label(e.layout, e.r, e.c, e.b)
        lines.append(f"  {c.method:12s} {c.p:4d} {grid:>7s} {e.b:4d} {e.seconds:12.4g} "
                     f"{e.seconds / best:6.3f} {exh} {c.solve_seconds:9.4f} {c.depth:5d} {c.nodes:7d}  "
                     f"{mapping_text(c.d, st.platform)}{flag}")
    return "\n".join(lines)


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


# ------------------------------------------------------------------ placing a tuned call's processes

@dataclass(frozen=True)
class RankHost:
    """One host of a communicator: its name, its ranks (the root first on the root's host) and
    the cores those ranks may use."""

    name: str
    ranks: tuple[int, ...]
    cores: int

    @property
    def processors(self) -> int:
        return max(min(len(self.ranks), self.cores), 1)


@dataclass(frozen=True)
class Placement:
    """The processes a tuned call runs on (count per host), its plan and the model's estimate."""

    plan: Plan
    counts: tuple[int, ...]
    estimate: Estimate
    platform: ClusterPlatform
    method: str
    family: str = ""

    def describe(self) -> str:
        e = self.estimate
        grid = grid_label(e.layout, e.r, e.c, e.b, long=True)
        where = ", ".join(f"{h.name} {k}" for h, k in zip(self.platform.hosts, self.counts, strict=True))
        x = self.platform.model_factors.get(self.family)
        fitted = f"\n  {self.family} model x{x:.3g} on distributed plans (measured/modelled, fitted here)" if x else ""
        return (f"mapping ({self.method}, 001 5.4) on {self.platform.describe()}:{fitted}\n"
                f"  processes per host: {where}; {grid}; predicted {e.seconds * 1e3:.2f} ms "
                f"(compute {e.compute * 1e3:.2f}, communication {e.comm * 1e3:.2f})\n  plan: {self.plan}")


def rank_hosts(hostnames: list[str], cores: list[int], root: int) -> list[RankHost]:
    """The communicator's hosts from each rank's host name and usable cores: the root's host first
    with the root its first rank, the others in order of their first rank."""
    order = [root] + [r for r in range(len(hostnames)) if r != root]
    ranks: dict[str, list[int]] = {}
    for r in order:
        ranks.setdefault(hostnames[r], []).append(r)
    return [RankHost(h, tuple(rs), int(cores[rs[0]])) for h, rs in ranks.items()]


def heterogeneous(hosts: list[RankHost], cp) -> bool:
    """True when the ranks span hosts whose measured speeds differ by more than the spread the
    probe measured between ranks running the same work (``cp.compute_skew``); False where a host
    was not measured."""
    speeds = cp.host_speeds
    if len(hosts) < 2 or any(h.name not in speeds for h in hosts):
        return False
    values = [speeds[h.name] for h in hosts]
    return max(values) / min(values) > 1.0 + cp.compute_skew(sum(len(h.ranks) for h in hosts))


def communicator_platform(hosts: list[RankHost], cp, sp, factors=None) -> ClusterPlatform:
    """The measured platform restricted to the communicator: each host's processors (its ranks, at
    most its cores), up to as many processes per processor as its ranks need, the SP database's k,
    and the model factors the phase calibration fitted on it (``factors``: PhaseFactors; family
    x "mapping" x "total")."""
    platform = measured_platform(cp, mm.database_k(sp), {h.name: h.processors for h in hosts},
                                 [h.name for h in hosts])
    most = max(-(-len(h.ranks) // h.processors) for h in hosts)
    return replace(platform, max_per_processor=most, model_factors=model_factors(factors))


def model_factors(factors) -> dict[str, float]:
    """Each family's fitted mapping-model factor other than 1 (``factors``: PhaseFactors or None)."""
    fitted = {f: factors.factor(f, MAPPING_ALGORITHM, "total") for f in mm.MODELS} if factors else {}
    return {f: x for f, x in fitted.items() if x != 1.0}


def plan_estimate(family: str, n: int, plan: Plan, hosts: list[RankHost], platform: ClusterPlatform) -> Estimate:
    """The mapping model's time of ``plan`` (equal blocks, or HoHe with weights) on its ranks of the
    communicator whose ``hosts`` these are (what the phase calibration compares runs with)."""
    used = set(plan.used_ranks(sum(len(h.ranks) for h in hosts)))
    counts = [len(used & set(h.ranks)) for h in hosts]
    search = Search(family, n, platform)
    return search.estimate(_mapping(counts, hosts), plan.r, plan.c, plan.b,
                           "weighted" if plan.weights is not None else "cyclic")


def _spread(count: int, processors: int) -> list[int]:
    """``count`` processes on ``processors`` interchangeable processors, as evenly as they go."""
    return [count // processors + (i < count % processors) for i in range(processors)]


def _mapping(counts, hosts: list[RankHost]) -> np.ndarray:
    return np.array([x for k, h in zip(counts, hosts, strict=True) for x in _spread(int(k), h.processors)], int)


def _counts(search: Search, d: np.ndarray, hosts: list[RankHost]) -> tuple[int, ...]:
    """Processes per host of mapping ``d``, at most the host's ranks, at least one on the root's."""
    counts = [min(int(d[search.host_of == i].sum()), len(h.ranks)) for i, h in enumerate(hosts)]
    counts[0] = max(counts[0], 1)
    return tuple(counts)


def placement(family: str, n: int, hosts: list[RankHost], platform: ClusterPlatform) -> Placement:
    """Where a tuned call of ``family`` on order ``n`` runs: the count of processes per host (the
    root's host first, never empty) with the least modelled time, and its plan (one BLAS thread
    per rank, as the mapping model has it). Every count vector when there are at most
    ``PLACEMENT_EXHAUSTIVE``, else GPTM's path; a host's processes are its first ranks."""
    search = Search(family, n, platform)
    space = math.prod(len(h.ranks) + 1 for h in hosts[1:]) * len(hosts[0].ranks)
    if space <= PLACEMENT_EXHAUSTIVE:
        method = "every count per host"
        options = itertools.product(range(1, len(hosts[0].ranks) + 1), *(range(len(h.ranks) + 1) for h in hosts[1:]))
        counts = min(options, key=lambda k: search.eet(_mapping(k, hosts)).seconds)
    else:
        method = "GPTM"
        d, _ = search.greedy_path(_root(search), 0, True, False)
        counts = _counts(search, d, hosts)
    d = _mapping(counts, hosts)
    est = search.eet(d)
    return Placement(_plan(family, est, counts, d, hosts, search), tuple(counts), est, platform, method, family)


def _plan(family: str, est: Estimate, counts, d: np.ndarray, hosts: list[RankHost], search: Search) -> Plan:
    """The plan of a mapping's estimate on the hosts' first ranks (root first)."""
    ranks = tuple(r for k, h in zip(counts, hosts, strict=True) for r in h.ranks[:k])
    fam = FAMILIES[family]
    be = fam.library
    if est.layout == "library":
        return Plan("local", 1, threads=1, backend=be)
    weights = tuple(float(w) for w in search.weights(d)) if est.layout == "weighted" else None
    rows = mm.MODELS[family].weighted_rows
    if est.layout == "weighted" and rows is not None:
        return Plan(rows[0], len(ranks), len(ranks), 1, threads=1, backend=be, weights=weights, ranks=ranks)
    return Plan(fam.mapping, len(ranks), est.r, est.c, b=est.b, threads=1, backend=be,
                weights=weights, ranks=ranks)


__all__ = ["MAPPING_ALGORITHM", "METHODS", "NODE_BUDGET", "PLACEMENT_EXHAUSTIVE", "USERS",
           "Estimate", "MappingChoice", "MappingStudy", "Placement", "RankHost", "Search", "communicator_platform",
           "describe", "grid_label", "heterogeneous", "mapping_text", "model_factors", "placement", "plan_estimate",
           "rank_hosts", "run_method", "study"]
