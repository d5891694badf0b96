"""Placing a tuned call's processes (001 §5.4 on a communicator): the communicator's hosts and
the measured platform restricted to them, whether their speeds differ, and the count of processes
per host with the least modelled time (``placement``) with its plan."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from autotune.core.families import FAMILIES
from autotune.core.plans import Plan
from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import SPLookup
from autotune.db.platform import ClusterPlatform, measured_platform
from autotune.models import mapping as mm

from .mapping_tree import Estimate, Search, grid_label, root

# The phase calibration's name for the mapping model's factors (``models.fitted_phases``).
MAPPING_ALGORITHM = "mapping"
# A tuned call places its processes by trying every count per host up to this many count
# vectors, and by GPTM's greedy path above it.
PLACEMENT_EXHAUSTIVE = 4096


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


def heterogeneous(hosts: list[RankHost], cp: CommParams) -> bool:
    """True when the ranks span hosts whose measured speeds differ by more than the spread the
    probe measured between ranks running the same work (``cp.compute_skew``); False where a host
    was not measured."""
    speeds = cp.host_speeds
    if len(hosts) < 2 or any(h.name not in speeds for h in hosts):
        return False
    values = [speeds[h.name] for h in hosts]
    return max(values) / min(values) > 1.0 + cp.compute_skew(sum(len(h.ranks) for h in hosts))


def communicator_platform(hosts: list[RankHost], cp: CommParams, sp: SPLookup, factors=None) -> ClusterPlatform:
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


def plan_estimate(family: str, n: int, plan: Plan, hosts: list[RankHost],
                  platform: ClusterPlatform) -> Estimate | None:
    """The mapping model's time of ``plan`` (equal blocks, or HoHe with weights) on its ranks of the
    communicator whose ``hosts`` these are (what the phase calibration compares runs with); None
    where the model has none (``Search.estimate``)."""
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
        d, _ = search.greedy_path(root(search), 0, True, False)
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
    assert fam.mapping is not None, f"{family} has no mapping model"     # Search refused it
    return Plan(fam.mapping, len(ranks), est.r, est.c, b=est.b, threads=1, backend=be,
                weights=weights, ranks=ranks)
