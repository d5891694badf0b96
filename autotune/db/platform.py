"""Platform description for mapping processes to processors (001 ch. 5; DESIGN §8): hosts, their
processors and relative speeds, the (ts, tw) of each link type, and the per-flop k of the
routines the mapping models use on a processor of speed 1.

Two sources, one type: a platform file (YAML, ``load_platform``; simulated platforms this machine
cannot host, as the source's figs. 5.6-5.7) or the database (``measured_platform``: the comm
probe's host speeds and ``link_host``/``link_net`` fits, the BLAS probe's k).

Platform file::

    name: mixed-16
    hosts:                       # processor order: host by host, in this order
      - {name: fast, processors: 4, speed: 1.0, count: 2}   # count: that many identical hosts
      - {name: slow, processors: 4, speed: 0.5, count: 2}
    links:                       # seconds, seconds per byte
      host: {ts: 1.5e-6, tw: 2.0e-10}     # two processes of one host (shared memory)
      net: {ts: 2.0e-5, tw: 8.0e-9}       # two hosts (the network)
    k: {gemm: 2.0e-11, trsm: 3.0e-11, panel: 9.0e-11}   # seconds per flop at speed 1; or "database"
    #   (optional lib_gemm, lib_cholesky, lib_lu: the library routine on one process)
    max_per_processor: 2         # optional: most processes one processor runs (default 2)
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .comm_lookup import CommParams

KERNELS = ("gemm", "trsm", "panel")           # the mapping models' k (models/mapping.py)
# Optional: the library routine of each family on one process (the one-process plan; without it
# one process runs the blocked algorithm's cost).
LIBRARY_KERNELS = ("lib_gemm", "lib_cholesky", "lib_lu")
LINKS = ("host", "net")
_TOP = {"name", "hosts", "links", "k", "max_per_processor", "description"}
_HOST = {"name", "processors", "speed", "count"}
_LINK = {"ts", "tw"}


class PlatformError(ValueError):
    """A platform file or description that cannot be used (unknown key, bad value)."""


@dataclass(frozen=True)
class Host:
    name: str
    processors: int
    speed: float          # relative speed of each of its processors (1: the k's reference) while it runs
    duty: float = 1.0     # the share of the time each runs (a CFS quota over its processes; 1: none)


@dataclass(frozen=True)
class Link:
    ts: float             # seconds
    tw: float             # seconds per byte


@dataclass(frozen=True)
class ClusterPlatform:
    """Hosts with processors of given speeds, the link types between them and the kernels' k at
    speed 1 (``k(kernel, b)``: seconds per flop at block b; None for a library kernel not given).
    ``model_factors``: per family, measured/modelled time of its distributed plans on this platform
    (fitted by the comm probe's phase calibration; 1 where none was)."""

    name: str
    hosts: tuple[Host, ...]
    links: dict[str, Link]
    k: Callable[[str, int], float]
    max_per_processor: int = 2
    model_factors: Mapping[str, float] = field(default_factory=dict)

    @property
    def speeds(self) -> np.ndarray:
        """Relative speed of each processor, host by host."""
        return np.array([h.speed for h in self.hosts for _ in range(h.processors)], float)

    @property
    def duties(self) -> np.ndarray:
        """Share of the time each processor runs, host by host (``Host.duty``)."""
        return np.array([h.duty for h in self.hosts for _ in range(h.processors)], float)

    @property
    def host_of(self) -> np.ndarray:
        """Index of each processor's host."""
        return np.array([i for i, h in enumerate(self.hosts) for _ in range(h.processors)], int)

    @property
    def size(self) -> int:
        return sum(h.processors for h in self.hosts)

    def describe(self) -> str:
        speeds = sorted({h.speed for h in self.hosts}, reverse=True)
        return (f"{self.name}: {self.size} processors on {len(self.hosts)} hosts, speeds "
                + "/".join(f"{s:g}" for s in speeds)
                + "; links " + ", ".join(f"{t} ts {lk.ts * 1e6:.3g} us, {1e-9 / lk.tw if lk.tw else math.inf:.3g} GB/s"
                                         for t, lk in self.links.items()))


def _keys(data: dict, allowed: set, where: str) -> None:
    if not isinstance(data, dict):
        raise PlatformError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PlatformError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                            f"known: {', '.join(sorted(allowed))}")


def _positive(value, what: str, integer: bool = False) -> float:
    try:
        x = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise PlatformError(f"{what} must be a {'whole ' if integer else ''}number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0 or (integer and x != value):
        raise PlatformError(f"{what} must be positive{' and whole' if integer else ''}, got {value!r}")
    return x


def _hosts(items, source: str) -> tuple[Host, ...]:
    if not isinstance(items, list) or not items:
        raise PlatformError(f"{source}: 'hosts' must be a non-empty list")
    out = []
    for i, h in enumerate(items):
        where = f"{source}: hosts[{i}]"
        _keys(h, _HOST, where)
        name = str(h.get("name", f"h{i}"))
        procs = int(_positive(h.get("processors", 1), f"{where}.processors", integer=True))
        speed = _positive(h.get("speed", 1.0), f"{where}.speed")
        count = int(_positive(h.get("count", 1), f"{where}.count", integer=True))
        out += [Host(name if count == 1 else f"{name}{j}", procs, speed) for j in range(count)]
    return tuple(out)


def _links(data, source: str) -> dict[str, Link]:
    _keys(data, set(LINKS), f"{source}: links")
    out = {}
    for t in LINKS:
        if t not in data:
            raise PlatformError(f"{source}: links.{t} missing")
        _keys(data[t], _LINK, f"{source}: links.{t}")
        out[t] = Link(_positive(data[t].get("ts"), f"links.{t}.ts"), _positive(data[t].get("tw"), f"links.{t}.tw"))
    return out


def _constant_k(data, source: str) -> Callable[[str, int], float]:
    _keys(data, set(KERNELS + LIBRARY_KERNELS), f"{source}: k")
    ks = {kern: _positive(data.get(kern), f"k.{kern}") for kern in KERNELS}
    ks |= {kern: _positive(data[kern], f"k.{kern}") for kern in LIBRARY_KERNELS if kern in data}
    return lambda kernel, b: ks.get(kernel)


KFunction = Callable[[str, int], float]


def parse_platform(data: dict, source: str = "<platform>", database_k: KFunction | None = None) -> ClusterPlatform:
    """A platform from a platform file's mapping; ``k: database`` takes ``database_k``
    (``models.mapping.database_k`` of the SP database)."""
    _keys(data, _TOP, source)
    for key in ("hosts", "links", "k"):
        if key not in data:
            raise PlatformError(f"{source}: {key!r} missing")
    if data["k"] == "database":
        if database_k is None:
            raise PlatformError(f"{source}: k: database, but no BLAS database is available")
        k = database_k
    else:
        k = _constant_k(data["k"], source)
    most = int(_positive(data.get("max_per_processor", 2), "max_per_processor", integer=True))
    return ClusterPlatform(str(data.get("name", Path(source).stem)), _hosts(data["hosts"], source),
                           _links(data["links"], source), k, most)


def load_platform(path: str | Path, database_k: KFunction | None = None) -> ClusterPlatform:
    """Read and check a platform file (PlatformError naming the problem)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise PlatformError(f"cannot read platform file {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise PlatformError(f"platform file {path} is not valid YAML: {e}") from None
    return parse_platform(data if data is not None else {}, str(path), database_k)


# Simulated platforms (``simulated_platform``): processor speeds by degree of heterogeneity, hosts
# taking them in turn; a 10 Gbit/s network and this machine's order of k and shared memory.
HETEROGENEITY = {"low": (1.0, 0.8), "medium": (1.0, 0.6, 0.3), "high": (1.0, 0.5, 0.25, 0.1)}
SIMULATED_LINKS = {"host": {"ts": 1.5e-6, "tw": 2.0e-10}, "net": {"ts": 1.0e-5, "tw": 8.0e-10}}
SIMULATED_K = {"gemm": 2.5e-11, "trsm": 3.5e-11, "panel": 1.0e-10}


def simulated_platform(processors: int, degree: str, per_host: int = 4) -> dict:
    """A platform file's content: ``processors`` in hosts of ``per_host``, host i at the
    ``degree``'s speed i (mod their number)."""
    if degree not in HETEROGENEITY:
        raise PlatformError(f"unknown heterogeneity {degree!r}; known: {', '.join(HETEROGENEITY)}")
    if processors < 1 or per_host < 1 or processors % per_host:
        raise PlatformError(f"{processors} processors do not fill hosts of {per_host}")
    speeds = HETEROGENEITY[degree]
    hosts = [{"name": f"h{i}", "processors": per_host, "speed": speeds[i % len(speeds)]}
             for i in range(processors // per_host)]
    return {"name": f"sim{processors}-{degree}", "hosts": hosts, "links": SIMULATED_LINKS, "k": SIMULATED_K}


def _link(cp: CommParams, primitive: str) -> Link:
    """(ts of the smallest message, tw of the largest regime) of a measured link primitive."""
    ts, _ = cp.ts_tw(primitive, 2, 8)
    _, tw = cp.ts_tw(primitive, 2, 16 << 20)
    return Link(ts, tw)


def time_slices(names, shares, threads: int = 1, cores: float = math.inf) -> np.ndarray:
    """Per rank of hosts ``names`` with cgroup ``shares`` (CPUs, 0: none): how many times longer its
    CPU work takes than with a core per thread, time-sliced: its host's ranks x ``threads`` busy
    threads over what the host gives (its quota, within its ``cores``; else its ``cores``), at least 1."""
    on_host = {h: list(names).count(h) for h in names}
    give = [min(s, cores) if s > 0 else cores for s in shares]
    return np.array([max(1.0, on_host[h] * threads / g) for h, g in zip(names, give, strict=True)], float)


def rank_quotas(names, shares) -> tuple[np.ndarray, np.ndarray]:
    """Per rank of hosts ``names`` with cgroup ``shares`` (CPUs, 0: none): (its host's quota in
    cores, at most 1; its share of a core while all its host's ranks run, one thread each:
    1 / ``time_slices``); 1 without a quota."""
    host = np.array([min(1.0, s) if s > 0 else 1.0 for s in shares], float)
    return host, 1.0 / time_slices(names, shares)


def _quotas(cp: CommParams) -> tuple[dict[str, float], dict[str, float]]:
    """``rank_quotas`` by host name for the ranks a call gave (``CommParams.with_ranks``); {} without."""
    names, shares = getattr(cp, "rank_names", None), getattr(cp, "rank_shares", None)
    if names is None or shares is None:
        return {}, {}
    host, rank = rank_quotas(names, shares)
    return dict(zip(names, host.tolist(), strict=True)), dict(zip(names, rank.tolist(), strict=True))


def measured_platform(cp: CommParams, k: KFunction, processors: int | Mapping[str, int] = 1,
                      order: list[str] | None = None) -> ClusterPlatform:
    """The MPI platform the comm probe measured: one host per entry of its ``host_speeds`` (in
    ``order`` if given, else by name; ``processors`` each, or per host name, speeds relative to the fastest),
    ``link_host``/``link_net`` (ts, tw) and the k's of ``k``. PlatformError where the probe
    measured no hosts or links, or ``order`` names a host it did not measure."""
    speeds = cp.host_speeds
    if not speeds:
        raise PlatformError("the MPI platform has no host speeds: run the comm probe (autotune-install --mpi) "
                            "on the hosts")
    missing = sorted(set(order or ()) - set(speeds))
    if missing:
        raise PlatformError(f"the comm probe measured no host named {', '.join(missing)}: run it on these hosts")
    count = processors if isinstance(processors, Mapping) else dict.fromkeys(speeds, processors)
    quota, duty = _quotas(cp)
    full = {h: v / quota.get(h, 1.0) for h, v in speeds.items()}   # measured at the quota's rate: while running
    top = max(full.values())
    hosts = tuple(Host(h, int(count[h]), full[h] / top, duty.get(h, 1.0)) for h in (order or sorted(speeds)))
    links = {t: _link(cp, f"link_{t}") for t in LINKS if f"link_{t}" in cp.primitives()}
    if "net" not in links and len(hosts) > 1:
        raise PlatformError("the MPI platform has no link_net measurement (run the comm probe across the hosts)")
    if not links:
        raise PlatformError("the MPI platform has no link_host measurement")
    links.setdefault("host", links.get("net"))     # one rank per host: no two processes share one
    links.setdefault("net", links["host"])
    return ClusterPlatform(str(cp.platform.get("key")), hosts, links, k)


__all__ = ["HETEROGENEITY", "KERNELS", "LIBRARY_KERNELS", "LINKS", "ClusterPlatform", "Host", "Link", "PlatformError",
           "load_platform", "measured_platform", "parse_platform", "rank_quotas", "simulated_platform",
           "time_slices"]
