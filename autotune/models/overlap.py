"""What messages cost a schedule that overlaps them with compute: the share of each message's time
that hides behind the compute and the CPU it takes from that compute, per link kind and size
(``CommParams.overlap``: the comm probe's overlap series). One mechanism for every model that
overlaps: the stencil's schedules, the LU and Cholesky look-ahead, SUMMA, pipelines, balancing."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.db.comm_lookup import CommParams


@dataclass(frozen=True)
class Messages:
    """Seconds of a set of messages as an overlapped schedule sees them."""

    shown: float = 0.0      # shows whatever the compute: the part that does not hide, CPU-side costs
    hideable: float = 0.0   # hides behind compute at least this long
    cpu: float = 0.0        # added to the compute they overlap

    def __add__(self, other: Messages) -> Messages:
        return Messages(self.shown + other.shown, self.hideable + other.hideable, self.cpu + other.cpu)

    @property
    def alone(self) -> float:
        """Their seconds when nothing overlaps them (a blocking exchange)."""
        return self.shown + self.hideable

    def exposed(self, compute: float) -> float:
        """Their seconds left to wait after ``compute`` seconds of overlapped work."""
        return self.shown + max(self.hideable - compute - self.cpu, 0.0)

    def overlapped(self, compute: float) -> float:
        """Seconds of ``compute`` overlapped with them: the compute, their CPU, what did not hide."""
        return compute + self.cpu + self.exposed(compute)


def message(cp: CommParams, net: bool, nbytes: float, seconds: float) -> Messages:
    """One message of ``nbytes`` that takes ``seconds`` alone, within a host or between hosts."""
    hidden, cpu = cp.overlap("net" if net else "host", nbytes)
    return Messages(shown=(1.0 - hidden) * seconds, hideable=hidden * seconds, cpu=cpu * seconds)


def fixed(seconds: float) -> Messages:
    """Costs of a message's CPU side that nothing hides (packing, starting requests)."""
    return Messages(shown=seconds)


__all__ = ["Messages", "fixed", "message"]
