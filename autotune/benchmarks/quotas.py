"""Testbed CPU shares for the benchmarks that change them while they run (``balance``,
``balance-calls``): parsing ``HOST=PCT`` and ``STEP:HOST=PCT``, setting shares collectively, and
putting the testbed's own shares back afterwards."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from autotune import testbed

if TYPE_CHECKING:
    from mpi4py import MPI


def parse_share(item: str, option: str = "--quota") -> tuple[str, int | None]:
    """``HOST=PCT`` as (host, percent, or None for 'none')."""
    host, sep, pct = item.partition("=")
    try:
        if not (host and sep):
            raise ValueError
        return host, testbed.parse_cpu(pct)
    except (ValueError, testbed.ArgumentError):
        raise ValueError(f"{option} {item!r}: expected HOST=PCT") from None


def parse_quota(items: list[str]) -> list[tuple[int, str, int | None]]:
    """``STEP:HOST=PCT`` items as (step, host, percent or None for 'none'), by step."""
    out = []
    for item in items:
        step, _, share = item.partition(":")
        try:
            out.append((int(step), *parse_share(share)))
        except ValueError:
            raise ValueError(f"--quota {item!r}: expected STEP:HOST=PCT") from None
    return sorted(out)


def set_quotas(comm: MPI.Comm, quotas: dict[str, int | None]) -> None:
    """Collective: rank 0 sets each host's share, then every rank goes on together."""
    if comm.rank == 0:
        for host, pct in quotas.items():
            testbed.set_cpu(host, pct)
    comm.Barrier()


@contextmanager
def restored(comm: MPI.Comm, hosts: Iterable[str]) -> Iterator[None]:
    """Collective: the testbed's shares of ``hosts`` as they were on entry, set again on exit."""
    tb = testbed.saved() if comm.rank == 0 else None
    wanted = set(hosts)
    initial = {h.name: h.cpu for h in tb.hosts if h.name in wanted} if tb else {}
    try:
        yield
    finally:
        set_quotas(comm, initial)
