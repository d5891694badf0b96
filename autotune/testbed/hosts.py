"""The emulated hosts asked for: names, addresses, link rates, CPU shares and MPI slots, and their
checks (``hosts_from``, ``check_hosts``, ``parse_cpu``); the errors the testbed raises."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

PREFIX = "at-"              # of every namespace, link and cgroup the testbed makes
SUBNET = "10.77.0"
MAX_HOSTS = 200
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")


class TestbedError(RuntimeError):
    """The testbed cannot be built or used here (not root, no namespaces, one is up, none is)."""

    status = 1      # the CLI's exit status: the run failed


class ArgumentError(TestbedError):
    """The hosts asked for are wrong (count, rate, CPU share, slots)."""

    status = 2


@dataclass
class Host:
    name: str
    ip: str
    rate: str | None = None       # tc rate of its link, e.g. "1gbit" (None: the veth's own speed)
    cpu: int | None = None        # percent of one core (None: no cap)
    slots: int = 1
    burst: int | None = None      # bytes the link may send at once above its rate (None: 1 ms of it, >= 32 KiB)

    @property
    def ns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        return f"{PREFIX}{self.name}"


def count_problem(count: int) -> str:
    """Why ``count`` hosts cannot be asked for ("" if they can)."""
    return "" if 1 <= count <= MAX_HOSTS else f"between 1 and {MAX_HOSTS} hosts, got {count}"


def check_hosts(hosts: list[Host]) -> None:
    """ArgumentError unless ``hosts`` can be built: their count, rates, CPU shares, bursts and slots."""
    if count_problem(len(hosts)):
        raise ArgumentError(count_problem(len(hosts)))
    for h in hosts:
        if h.rate is not None and not _RATE.match(h.rate):
            raise ArgumentError(f"{h.name}: rate {h.rate!r} is not like 1gbit, 500mbit")
        if h.cpu is not None and not 1 <= h.cpu <= 100 * (os.cpu_count() or 1):
            raise ArgumentError(f"{h.name}: cpu share {h.cpu}% outside 1..{100 * (os.cpu_count() or 1)}")
        if h.burst is not None and h.burst < 1600:
            raise ArgumentError(f"{h.name}: burst {h.burst} B is below one frame (1600 B)")
        if h.slots < 1:
            raise ArgumentError(f"{h.name}: slots must be >= 1")


def hosts_from(count: int, rates: list[str] | None = None, cpus: list[int] | None = None,
               slots: int = 1, burst: int | None = None) -> list[Host]:
    """``count`` hosts h0.., the i-th with ``rates[i]`` / ``cpus[i]`` (the last value repeats);
    ArgumentError for a count outside 1..MAX_HOSTS."""
    if count_problem(count):
        raise ArgumentError(count_problem(count))

    def pick(values, i):
        return None if not values else values[min(i, len(values) - 1)]

    return [Host(f"h{i}", f"{SUBNET}.{i + 1}", pick(rates, i), pick(cpus, i), slots, burst) for i in range(count)]


def parse_cpu(text: str) -> int | None:
    """A CPU share as given on a command line: an integer percent, or ``none`` (no cap)."""
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ArgumentError(f"cpu share must be an integer percent or 'none', got {text!r}") from None
