"""Messages between two ranks by link kind: which host each rank is on, a message's time on its link
(within a host or between hosts), and what it costs a schedule that overlaps it with compute: the
share of its time that hides behind the compute and the CPU it takes from that compute, per link
kind and size (``CommParams.overlap``: the comm probe's overlap series). One mechanism for every
model that overlaps messages with compute: the stencil's schedules, the LU look-ahead, pipelines."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.db.comm_lookup import CommParams
from autotune.db.platform import rank_quotas, time_slices

from .movement import LinkCost


def hosts_of(p: int, cp: CommParams) -> np.ndarray:
    """Each rank's host index: the call's own ranks' hosts where the lookup knows them
    (``CommParams.with_ranks``), else the platform's hosts filled in rank order (mpiexec's
    default by-slot mapping)."""
    names = getattr(cp, "rank_names", None)
    if names is not None and len(names) >= p:
        index = {h: i for i, h in enumerate(dict.fromkeys(names[:p]))}
        return np.array([index[h] for h in names[:p]])
    hosts = max(1, int(cp.platform.get("hosts", 1) or 1)) if cp is not None else 1
    per = -(-p // hosts)
    return np.arange(p) // per


def _core_shares(p: int, cp: CommParams) -> tuple[np.ndarray, np.ndarray]:
    """(each rank's host's CPU quota in cores, at most 1; each rank's share of a core while all
    its host's ranks run): ones where the call gave no quotas (``CommParams.with_ranks``)."""
    names, shares = getattr(cp, "rank_names", None), getattr(cp, "rank_shares", None)
    if names is None or shares is None or len(names) < p or len(shares) < p:
        return np.ones(p), np.ones(p)
    return rank_quotas(names[:p], shares[:p])


def rank_speeds(p: int, cp: CommParams) -> np.ndarray:
    """Each rank's speed while it runs, over rank 0's: its host's speed (the probe's or the run's,
    measured one rank at a time under the host's quota) over that quota; ones where unknown."""
    names = getattr(cp, "rank_names", None)
    if names is None or len(names) < p:
        return np.ones(p)
    speeds = cp.host_speeds
    if not speeds or any(not speeds.get(h) for h in names[:p]):
        return np.ones(p)
    full = np.array([speeds[h] for h in names[:p]]) / _core_shares(p, cp)[0]
    return full / full[0]


def slices(ranks, threads: int, cp: CommParams, cores: float = float("inf")) -> np.ndarray:
    """``db.platform.time_slices`` of the plan's ``ranks`` (indices into the call's ranks, from the
    root) running ``threads`` each on hosts of ``cores``: ones where the call gave no quotas."""
    names, shares = getattr(cp, "rank_names", None), getattr(cp, "rank_shares", None)
    ranks = list(ranks)
    if names is None or shares is None or len(names) <= max(ranks) or len(shares) <= max(ranks):
        return np.ones(len(ranks))
    on = [names[r] for r in ranks]
    return time_slices(on, [shares[r] for r in ranks], threads, cores)


def link_primitive(cp: CommParams, net: bool, one_way: bool = False) -> str:
    """The comm probe's primitive for a message between two ranks on one host or on two while its
    neighbour's travels the other way: its swap (Sendrecv) on a pair of that link kind, else its
    link ping-pong, else the plain ping-pong (a one-way time: on a loaded link it undercounts).
    ``one_way``: a message nothing travels against (a pipeline's), the link ping-pong first."""
    kind = "net" if net else "host"
    have = cp.primitives()
    order = (f"link_{kind}",) if one_way else (f"swap_{kind}", f"link_{kind}")
    return next((x for x in order if x in have), "pingpong")


def link_time(cp: CommParams, net: bool, nbytes: float) -> float:
    """One halo message of ``nbytes`` (``link_primitive``)."""
    return float(cp.time(link_primitive(cp, net), 2, nbytes))


def link_cost(cp: CommParams, nbytes: float = 1 << 20) -> LinkCost:
    """(ts, tw) within a host and between hosts for moving a field's cells in a rebalance (messages
    of about ``nbytes``), from the same primitives as ``link_time``."""
    return LinkCost(*cp.ts_tw(link_primitive(cp, False), 2, nbytes), *cp.ts_tw(link_primitive(cp, True), 2, nbytes))



@dataclass(frozen=True)
class Messages:
    """Seconds of a set of messages as an overlapped schedule sees them."""

    shown: float = 0.0      # shows whatever the compute: the part that does not hide, CPU-side costs
    hideable: float = 0.0   # hides behind compute at least this long
    cpu: float = 0.0        # what overlapping them adds to the compute (progress, the kernel's packets)

    def __add__(self, other: Messages) -> Messages:
        return Messages(self.shown + other.shown, self.hideable + other.hideable, self.cpu + other.cpu)

    @property
    def alone(self) -> float:
        """Their seconds when nothing overlaps them (a blocking exchange)."""
        return self.shown + self.hideable

    def exposed(self, compute: float) -> float:
        """Their seconds left to wait after ``compute`` seconds of overlapped work, which their CPU
        lengthens (what a shorter compute leaves uncovered, and the share that never hides)."""
        return self.shown + max(self.hideable - compute - self.cpu, 0.0)

    def overlapped(self, compute: float) -> float:
        """Seconds of ``compute`` overlapped with them: max(compute + their CPU, what can hide) and
        what cannot (with a compute twice their length, the probe's own measurement)."""
        return compute + self.cpu + self.exposed(compute)


def message(cp: CommParams, net: bool, nbytes: float, seconds: float) -> Messages:
    """One message of ``nbytes`` that takes ``seconds`` alone, within a host or between hosts."""
    hidden, cpu = cp.overlap("net" if net else "host", nbytes)
    return Messages(shown=(1.0 - hidden) * seconds, hideable=hidden * seconds, cpu=cpu)


def fixed(seconds: float) -> Messages:
    """Costs of a message's CPU side that nothing hides (packing, starting requests)."""
    return Messages(shown=seconds)


__all__ = ["Messages", "fixed", "hosts_of", "link_cost", "link_primitive", "link_time", "message", "rank_speeds",
           "slices"]
