"""Choose which stages of a synthetic workload (003) to group and which to replicate.

``tune`` ranks configurations by the model (``models.pipeline``) within a processor budget: each
worker's groupings and replications are predicted alone on common draws (at most MAX_OPTIONS of
them, on at most SCREEN_TASKS tasks), those no cheaper option beats are combined across workers
(the iteration waits for the slowest), and the best combinations within MAX_LAUNCH ranks are
predicted whole. ``rules`` is 003 §2.2's recipe (group consecutive fast stages,
replicate the slowest), the baseline the tuner must beat.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from autotune.core.workload import (
    MAX_LAUNCH,
    Pipeline,
    Spec,
    footprint,
    launch_of,
    launch_of_footprints,
    parse_type,
    plan,
)
from autotune.models.pipeline import Hop, Prediction, makespan, predict

MAX_REPLICAS = 4      # replication degrees tried per stage (the search space, not a guess of cost)
SCREEN = 16           # sampled runs when screening one worker's options
SCREEN_TASKS = 64     # tasks of a batch a screening runs: a pipeline's pace shows within a few dozen
MAX_OPTIONS = 1000    # options screened per worker (up to 3 ms each); more shrink the degrees tried
MAX_COMBINATIONS = 20_000   # workers' fronts combined exhaustively up to this many, else by their slowest
FINALISTS = 6         # combinations predicted whole


@dataclass(frozen=True)
class Choice:
    """A configuration, the processors it takes and its predicted run."""

    spec: Spec
    processors: int
    prediction: Prediction

    @property
    def configuration(self) -> tuple[tuple[str, ...], ...]:
        return self.spec.configuration


def options(worker: Pipeline, most: int, replicas: int = MAX_REPLICAS,
            group: int | None = None) -> list[tuple[tuple[str, ...], int]]:
    """Every grouping / replication of a worker's stages taking at most ``most`` processors, with
    the processors each takes (replication degrees up to ``replicas``, groups up to ``group`` stages)."""
    return list(iter_options(len(worker.stages), most, replicas, group))


def iter_options(n: int, most: int, replicas: int = MAX_REPLICAS, group: int | None = None):
    """``options`` of a worker of ``n`` stages, one at a time (counting a few stops early)."""
    group = n if group is None else group

    def rest(j: int, left: int):
        if j == n:
            yield (), 0
            return
        choices: list[tuple[tuple[str, ...], int]] = [(("IND",), 1)]
        choices += [((f"REP_{r}",), r) for r in range(2, replicas + 1)]
        choices += [((f"AGR_{g}",) + ("IND",) * (g - 1), 1) for g in range(2, min(group, n - j) + 1)]
        for head, cost in choices:
            if cost <= left:
                for tail, more in rest(j + len(head), left - cost):
                    yield head + tail, cost + more
    return rest(0, most)


def count_options(n: int, most: int, replicas: int = MAX_REPLICAS, group: int | None = None,
                  stop: int | None = None) -> int:
    """How many ``options`` a worker of ``n`` stages has, counting at most ``stop`` of them."""
    return sum(1 for _ in itertools.islice(iter_options(n, most, replicas, group), stop))


def search_space(n: int, most: int) -> tuple[int, int]:
    """The (replication degree, group size) a worker of ``n`` stages is searched up to: every
    option while they number at most MAX_OPTIONS; else the largest degree, then group size, that
    keeps both replication and grouping (they grow about degree^n), else one of them."""
    pairs = sorted(((r, g) for r in range(MAX_REPLICAS, 0, -1) for g in range(max(n, 1), 0, -1)),
                   key=lambda rg: (-(min(rg[0], 2) + min(rg[1], 2)), -rg[0], -rg[1]))
    return next((rg for rg in pairs if count_options(n, most, *rg, stop=MAX_OPTIONS + 1) <= MAX_OPTIONS),
                (1, 1))


Footprint = tuple[int, int, int]
"""A worker's (processors, processes, most processes on one processor): ``workload.footprint``."""


def _candidates(worker: Pipeline, most: int) -> list[tuple[tuple[str, ...], Footprint]]:
    """The options screened for a worker, with their footprints: those of its search space, its own
    configuration and its stages in one group (the cheapest, so the least budget always has a
    configuration), each within ``most`` processors and MAX_LAUNCH ranks even alone."""
    n = len(worker.stages)
    listed = [types for types, _ in options(worker, most, *search_space(n, most))]
    listed += [tuple(s.type for s in worker.stages), (f"AGR_{n}",) + ("IND",) * (n - 1) if n > 1 else ("IND",)]
    shaped = [(types, footprint(types)) for types in dict.fromkeys(listed)]
    return [(types, fp) for types, fp in shaped if fp[0] <= most and launch_of_footprints([fp])[0] <= MAX_LAUNCH]


def _alone(spec: Spec, w: int, types: tuple[str, ...], hop: Hop, n: int) -> np.ndarray:
    """Sampled iteration makespans (n runs) of worker ``w`` configured ``types``, on its own hosts,
    on a batch of at most SCREEN_TASKS tasks."""
    one = replace(spec, workers=(spec.workers[w],), iterations=1,
                  initial_messages=min(spec.initial_messages, SCREEN_TASKS))
    pl = plan(one.configured((types,)))
    return makespan(pl, 0, np.zeros(n), hop, pl.host_of(pl.processors), draw_worker=w)


class Option(NamedTuple):
    """One worker's screened configuration; ``_combinations`` reads only its processors ([1]) and
    times ([2])."""

    types: tuple[str, ...]
    processors: int
    times: np.ndarray           # sampled iteration makespans of the worker alone
    footprint: Footprint


def _front(spec: Spec, w: int, most: int, hop: Hop) -> list[Option]:
    """The worker's options no option with as few processors beats (by mean makespan), cheapest first."""
    scored = sorted((Option(types, fp[0], _alone(spec, w, types, hop, SCREEN), fp) for types, fp in
                     _candidates(spec.workers[w], most)), key=lambda o: (o.processors, o.times.mean()))
    front, best = [], np.inf
    for option in scored:
        if option.times.mean() < best * 0.995:
            front.append(option)
            best = option.times.mean()
    return front


def _combinations(fronts: list[list[Option]], processors: int):
    """Combinations of one option per worker to rank: all of them while few, else for each
    option's makespan the cheapest options of every worker within it (the slowest sets the pace)."""
    if math.prod(len(f) for f in fronts) <= MAX_COMBINATIONS:
        yield from itertools.product(*fronts)
        return
    for bound in sorted({float(o[2].mean()) for f in fronts for o in f}):
        found = [next((o for o in f if o[2].mean() <= bound), None) for f in fronts]
        pick = [o for o in found if o is not None]
        if len(pick) == len(found) and 1 + sum(o[1] for o in pick) <= processors:
            yield tuple(pick)


def tune(spec: Spec, hop: Hop, processors: int, hosts: int | None = None, keep: int = FINALISTS) -> list[Choice]:
    """Configurations of ``spec`` within ``processors`` processors and MAX_LAUNCH ranks, best
    predicted first (ties: fewer processors). ValueError if even one processor per worker does not fit."""
    least = 1 + len(spec.workers)
    if processors < least:
        raise ValueError(f"{processors} processors cannot hold a master and {len(spec.workers)} workers "
                         f"(at least {least})")
    most = processors - least + 1
    fronts = [_front(spec, w, most, hop) for w in range(len(spec.workers))]
    combos = []
    for pick in _combinations(fronts, processors):
        ranks, cost, _, _ = launch_of_footprints(o.footprint for o in pick)
        if cost <= processors and ranks <= MAX_LAUNCH:
            combos.append((float(np.max([o.times for o in pick], axis=0).mean()), cost, pick))
    if not combos:
        raise ValueError(f"no configuration within {processors} processors launches at most {MAX_LAUNCH} ranks")
    combos.sort(key=lambda c: (c[0], c[1]))
    out = []
    for _, cost, pick in combos[:keep]:
        s = spec.configured(tuple(o.types for o in pick))
        out.append(Choice(s, cost, predict(plan(s), hop, hosts)))
    return sorted(out, key=lambda c: (round(c.prediction.seconds, 6), c.processors))


def rules(spec: Spec, processors: int) -> Spec:
    """003 §2.2's recipe: group runs of consecutive stages each faster than half the slowest stage
    while their sum stays within it; then, while processors are left (and the plan stays within
    MAX_LAUNCH ranks), replicate the stage slowest per replica (stop when a group is the slowest)."""
    slowest = max(s.mean for w in spec.workers for s in w.stages)
    types = [_grouped(w, slowest) for w in spec.workers]
    used = plan(spec.configured(tuple(tuple(row) for row in types))).processors
    reps = {(i, j): 1 for i, row in enumerate(types) for j in range(len(row)) if not _in_group(row, j)}

    def load(key) -> float:
        i, j = key
        if types[i][j].startswith("AGR"):
            return sum(s.mean for s in spec.workers[i].stages[j:j + parse_type(types[i][j])["degree"]])
        return spec.workers[i].stages[j].mean / reps[key]

    def configuration() -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(f"REP_{reps[i, j]}" if reps.get((i, j), 1) > 1 else t for j, t in enumerate(row))
                     for i, row in enumerate(types))
    while used < processors:
        key = max(reps, key=load)
        if types[key[0]][key[1]].startswith("AGR") or reps[key] >= MAX_REPLICAS:
            break
        reps[key] += 1
        if launch_of(configuration())[0] > MAX_LAUNCH:
            reps[key] -= 1
            break
        used += 1
    return spec.configured(configuration())


def _grouped(w: Pipeline, slowest: float) -> list[str]:
    """One worker's stage types after grouping its runs of fast consecutive stages."""
    row, j = [], 0
    while j < len(w.stages):
        g, total = 0, 0.0
        while j + g < len(w.stages) and w.stages[j + g].mean < slowest / 2 and total + w.stages[j + g].mean <= slowest:
            total += w.stages[j + g].mean
            g += 1
        row += [f"AGR_{g}"] + ["IND"] * (g - 1) if g >= 2 else ["IND"]
        j += max(g, 1) if g >= 2 else 1
    return row


def _in_group(row: list[str], j: int) -> bool:
    """Is stage j inside (not the head of) a group?"""
    for h in range(j):
        if row[h].startswith("AGR") and h + parse_type(row[h])["degree"] > j:
            return True
    return False


__all__ = ["Choice", "MAX_OPTIONS", "MAX_REPLICAS", "count_options", "iter_options", "options", "rules",
           "search_space", "tune"]
