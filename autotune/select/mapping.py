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
symmetry (``Search.signature``; the model on the tree is ``select.mapping_tree``'s). Placing a tuned
call's processes is ``select.placement``'s, its names importable here too. Pure computation: nothing
here times or launches anything.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from autotune.db.platform import ClusterPlatform

from .mapping_tree import Estimate, Search, grid_label, root
from .placement import (
    MAPPING_ALGORITHM,
    PLACEMENT_EXHAUSTIVE,
    Placement,
    RankHost,
    communicator_platform,
    heterogeneous,
    model_factors,
    placement,
    plan_estimate,
    rank_hosts,
)

METHODS = ("exhaustive", "BTM", "BGRM", "GRM", "GCTM", "GPTM")
USERS = ("greedy", "conservative", "expert")
NODE_BUDGET = 50_000


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


def _branch(search: Search, greedy_get: bool, greedy_let: bool, budget: int) -> tuple[np.ndarray, bool]:
    """Backtracking on the combinatorial tree with LET/GET/MEET pruning (BTM, BGRM, GRM)."""
    best_d: np.ndarray | None = None
    best_t = meet = math.inf
    stopped = False

    def note(d: np.ndarray, t: float) -> None:
        nonlocal best_d, best_t
        if t < best_t:
            best_d, best_t = d.copy(), t

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

    for child, j in search.children(root(search), 0, False):
        walk(child, j)
        if stopped:
            break
    assert best_d is not None, "the search visited no mapping"
    return best_d, not stopped


def _exhaustive(search: Search) -> np.ndarray:
    """Every mapping up to ``max_level`` processes, one per class of interchangeable processors."""
    per_host = []
    for h in range(len(search.platform.hosts)):
        m = int((search.host_of == h).sum())
        per_host.append(list(itertools.combinations_with_replacement(range(search.most, -1, -1), m)))
    best: np.ndarray | None = None
    best_t = math.inf
    for combo in itertools.product(*per_host):
        d = np.fromiter(itertools.chain.from_iterable(combo), int, search.P)
        p = int(d.sum())
        if p == 0 or p > search.max_level:
            continue
        t = search.visit(d).seconds
        if t < best_t:
            best, best_t = d, t
    assert best is not None, "no mapping within max_level"
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
        d, _ = search.greedy_path(root(search), 0, method == "GPTM", False)
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


__all__ = ["MAPPING_ALGORITHM", "METHODS", "NODE_BUDGET", "PLACEMENT_EXHAUSTIVE", "USERS",
           "Estimate", "MappingChoice", "MappingStudy", "Placement", "RankHost", "Search", "communicator_platform",
           "describe", "grid_label", "heterogeneous", "mapping_text", "model_factors", "placement", "plan_estimate",
           "rank_hosts", "run_method", "study"]
