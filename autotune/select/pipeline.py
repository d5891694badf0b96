"""Choose which stages of a synthetic workload (003) to group and which to replicate.

``tune`` ranks configurations by the model (``models.pipeline``) within a processor budget: each
worker's groupings and replications are predicted alone on common draws, those no cheaper option
beats are combined across workers (the iteration waits for the slowest), and the best
combinations are predicted whole. ``rules`` is 003 §2.2's recipe (group consecutive fast stages,
replicate the slowest), the baseline the tuner must beat.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from autotune.models.pipeline import Hop, Prediction, makespan, predict
from autotune.workload import Pipeline, Spec, parse_type, plan

MAX_REPLICAS = 4      # replication degrees tried per stage (the search space, not a guess of cost)
SCREEN = 16           # sampled runs when screening one worker's options
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


def options(worker: Pipeline, most: int) -> list[tuple[tuple[str, ...], int]]:
    """Every grouping / replication of a worker's stages taking at most ``most`` processors, with
    the processors each takes."""
    n = len(worker.stages)

    def rest(j: int, left: int):
        if j == n:
            yield (), 0
            return
        choices = [(("IND",), 1)] + [((f"REP_{r}",), r) for r in range(2, MAX_REPLICAS + 1)]
        choices += [((f"AGR_{g}",) + ("IND",) * (g - 1), 1) for g in range(2, n - j + 1)]
        for head, cost in choices:
            if cost <= left:
                for tail, more in rest(j + len(head), left - cost):
                    yield head + tail, cost + more
    return list(rest(0, most))


def _alone(spec: Spec, w: int, types: tuple[str, ...], hop: Hop, n: int) -> np.ndarray:
    """Sampled iteration makespans (n runs) of worker ``w`` configured ``types``, on its own hosts."""
    pl = plan(replace(spec, workers=(spec.workers[w],), iterations=1).configured((types,)))
    return makespan(pl, 0, np.zeros(n), hop, pl.host_of(pl.processors), draw_worker=w)


def _front(spec: Spec, w: int, most: int, hop: Hop) -> list[tuple[tuple[str, ...], int, np.ndarray]]:
    """The worker's options no option with as few processors beats (by mean makespan)."""
    scored = sorted(((types, cost, _alone(spec, w, types, hop, SCREEN)) for types, cost in
                     options(spec.workers[w], most)), key=lambda x: (x[1], x[2].mean()))
    front, best = [], np.inf
    for types, cost, t in scored:
        if t.mean() < best * 0.995:
            front.append((types, cost, t))
            best = t.mean()
    return front


def tune(spec: Spec, hop: Hop, processors: int, hosts: int | None = None, keep: int = FINALISTS) -> list[Choice]:
    """Configurations of ``spec`` within ``processors`` processors, best predicted first (ties:
    fewer processors). ValueError if even one processor per stage group does not fit."""
    least = 1 + len(spec.workers)
    if processors < least:
        raise ValueError(f"{processors} processors cannot hold a master and {len(spec.workers)} workers "
                         f"(at least {least})")
    most = processors - least + 1
    fronts = [_front(spec, w, most, hop) for w in range(len(spec.workers))]
    combos = []
    for pick in itertools.product(*fronts):
        cost = 1 + sum(c for _, c, _ in pick)
        if cost <= processors:
            combos.append((float(np.max([t for _, _, t in pick], axis=0).mean()), cost, pick))
    combos.sort(key=lambda c: (c[0], c[1]))
    out = []
    for _, cost, pick in combos[:keep]:
        s = spec.configured(tuple(types for types, _, _ in pick))
        out.append(Choice(s, cost, predict(plan(s), hop, hosts)))
    return sorted(out, key=lambda c: (round(c.prediction.seconds, 6), c.processors))


def rules(spec: Spec, processors: int) -> Spec:
    """003 §2.2's recipe: group runs of consecutive stages each faster than half the slowest stage
    while their sum stays within it; then, while processors are left, replicate the stage slowest
    per replica (stop when a group is the slowest)."""
    slowest = max(s.mean for w in spec.workers for s in w.stages)
    types = [_grouped(w, slowest) for w in spec.workers]
    used = plan(spec.configured(tuple(tuple(row) for row in types))).processors
    reps = {(i, j): 1 for i, row in enumerate(types) for j in range(len(row)) if not _in_group(row, j)}

    def load(key) -> float:
        i, j = key
        if types[i][j].startswith("AGR"):
            return sum(s.mean for s in spec.workers[i].stages[j:j + parse_type(types[i][j])["degree"]])
        return spec.workers[i].stages[j].mean / reps[key]
    while used < processors:
        key = max(reps, key=load)
        if types[key[0]][key[1]].startswith("AGR") or reps[key] >= MAX_REPLICAS:
            break
        reps[key] += 1
        used += 1
    for (i, j), r in reps.items():
        if r > 1:
            types[i][j] = f"REP_{r}"
    return spec.configured(tuple(tuple(row) for row in types))


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


__all__ = ["Choice", "MAX_REPLICAS", "options", "rules", "tune"]
