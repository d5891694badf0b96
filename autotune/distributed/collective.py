"""Control-path helpers every distributed routine uses: agree on errors, share small metadata.

Ranks must raise the same error together, never leave others waiting in a collective: each
rank checks its own inputs, then ``agree`` gathers the verdicts and every rank raises the first
problem found (one message and one exception type everywhere: ``rebuilt``). Only small Python
objects cross here. Also: which cores the ranks may run on (a rank's affinity mask is not its
node's core count).
"""
from __future__ import annotations

import array
import builtins
import importlib
import math
import os
import socket
import time
from collections.abc import Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

from autotune.host.budget import cpu_share

if TYPE_CHECKING:
    from mpi4py import MPI

Verdict = tuple[tuple[str, ...], str]     # an error as its class names (most derived first) and message


def agree(comm: MPI.Comm, error: Exception | None) -> None:
    """Raise on every rank if any rank reported an error (the lowest rank's error wins)."""
    raise_first(comm, comm.allgather(None if error is None else verdict_of(error)), error)


def agree_args(comm: MPI.Comm, error: Exception | None, args: dict, extra=None) -> list:
    """Collective: every rank's ``extra``, once all ranks passed equal ``args`` and none an error.

    Arguments every rank must pass alike are compared in the same allgather that agrees on the
    errors: ranks that differ get a ValueError everywhere, never a hang in a later collective."""
    gathered = comm.allgather((None if error is None else verdict_of(error), args, extra))
    keys = sorted({k for g in gathered for k in g[1]})
    differ = [k for k in keys if len({repr(g[1][k]) for g in gathered if k in g[1]}) > 1]
    if differ:
        passed = "; ".join(f"{k}: " + ", ".join(f"rank {r} {g[1].get(k)!r}" for r, g in enumerate(gathered))
                           for k in differ)
        raise ValueError(f"ranks passed different arguments ({passed})")
    raise_first(comm, [g[0] for g in gathered], error)
    return [g[2] for g in gathered]


def share(comm: MPI.Comm, root: int, error: Exception | None, value=None):
    """Collective: the root's ``value``, or its ``error`` raised on every rank (one bcast)."""
    verdict, value = comm.bcast((None if error is None else verdict_of(error), value) if comm.rank == root
                                else None, root=root)
    if verdict is not None:
        raise rebuilt(verdict, root, comm.size, error if comm.rank == root else None)
    return value


def settle(comm: MPI.Comm, error: Exception | None) -> None:
    """Collective after work that only some ranks did (a plan on part of the communicator, a local
    plan on the root): if any rank has an error, every rank raises the lowest rank's, with its message
    unchanged and the same type (``rebuilt``). One nonblocking allreduce of a flag, waited on with
    sleeping polls, so ranks with nothing to do take no core from those at work; the errors
    themselves cross only when there is one."""
    from mpi4py import MPI

    flag = array.array("i", [error is not None])
    quiet_wait(comm.Iallreduce(MPI.IN_PLACE, flag, op=MPI.MAX))
    if not flag[0]:
        return
    verdicts = comm.allgather(None if error is None else verdict_of(error))
    rank, verdict = next((r, v) for r, v in enumerate(verdicts) if v is not None)
    same = error is not None and (rank == comm.rank or str(error) == verdict[1])
    raise rebuilt(verdict, rank, 1, error if same else None)


def verdict_of(error: Exception) -> Verdict:
    """What crosses the wire for an error: its classes as ``module:qualname``, most derived first,
    and its message."""
    return tuple(f"{c.__module__}:{c.__qualname__}" for c in type(error).__mro__), str(error)


def rebuilt(verdict: Verdict, rank: int, size: int, own: Exception | None = None) -> Exception:
    """The error every rank raises for ``rank``'s verdict: the same message, and the same type on
    every rank, the most derived one each rank can name and build from the message alone (a
    user's exception defined at module level, numpy's LinAlgError, a builtin). The rank it came
    from raises ``own`` itself when it is of that type and message, else chains ``own`` as cause."""
    names, message = verdict
    message = f"rank {rank}: {message}" if size > 1 else message
    cls = common_type(names, message)
    if own is not None and type(own) is cls and str(own) == message:
        return own
    exc = cls(message)
    exc.__cause__ = own
    return exc


def common_type(names: Sequence[str], message: str) -> type[Exception]:
    """The first of ``names`` (``module:qualname``) that resolves to an Exception class built from
    ``message`` alone with that message; RuntimeError when none does."""
    for name in names:
        cls = _named_class(name)
        if cls is None:
            continue
        try:
            if str(cls(message)) == message:
                return cls
        except Exception:
            continue
    return RuntimeError


def _named_class(name: str) -> type[Exception] | None:
    """The Exception class ``module:qualname`` names, found as every rank of the same program finds
    it (importing its module, which the rank that raised it had imported); None if there is none."""
    module, _, qualname = name.partition(":")
    if "<locals>" in qualname:
        return None
    try:
        obj = builtins if module == "builtins" else importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None


def raise_first(comm: MPI.Comm, verdicts: Sequence[Verdict | None], own: Exception | None) -> None:
    """Raise the lowest rank's reported error on this rank (``own`` if it is this rank's)."""
    for rank, verdict in enumerate(verdicts):
        if verdict is not None:
            raise rebuilt(verdict, rank, comm.size, own if rank == comm.rank else None)


def quiet_wait(req, first: float = 2e-5, longest: float = 1e-3) -> None:
    """Wait for ``req`` sleeping between tests, the pause doubling up to ``longest``: a short wait
    ends soon after the request does, a long one costs the core almost nothing."""
    pause = first
    while not req.Test():
        time.sleep(pause)
        pause = min(longest, 2 * pause)


def quota_share(comm: MPI.Comm) -> float | None:
    """Collective: the share of a core this rank's cgroup quota gives it while the job's ranks on its
    host all run (the quota's CPUs over those ranks, at most 1), None without a quota."""
    names = comm.allgather(socket.gethostname())
    share = cpu_share()
    return None if not share else min(1.0, share / names.count(socket.gethostname()))


def quota_bound(comm: MPI.Comm) -> bool:
    """Collective: whether this rank's quota gives it less than a core (``quota_share``): time it
    spends spinning is then taken from its compute."""
    share = quota_share(comm)
    return share is not None and share < 1.0


class RankCores(NamedTuple):
    """What a rank may run on: its host, its affinity mask (bit i: core i) and the CPUs its
    cgroup's quota gives (0.0: no quota), shared by the ranks of that host's cgroup."""

    host: str
    mask: int
    share: float = 0.0

    def cores(self) -> int:
        """The cores its mask and quota allow (a quota of 0.5 CPU: one core, time-sliced)."""
        bits = max(1, self.mask.bit_count())
        return min(bits, max(1, math.ceil(self.share))) if self.share > 0 else bits


def core_info() -> RankCores:
    """This rank's host name, affinity mask and cgroup CPU quota."""
    try:
        cpus = os.sched_getaffinity(0)
    except AttributeError:  # pragma: no cover - non-Linux
        cpus = range(os.cpu_count() or 1)
    return RankCores(socket.gethostname(), sum(1 << c for c in cpus), cpu_share() or 0.0)


def node_cores(infos: Sequence[RankCores], rank: int) -> int:
    """Cores of ``rank``'s node the ranks there may use: the union of their affinity masks (one
    rank's own mask is one core when mpiexec binds it, not the node's count), within the tightest
    quota of the ranks there (a host given half a core has one core to plan for, not its mask's)."""
    here = [RankCores(*i) for i in infos if i[0] == infos[rank][0]]
    union = 0
    for info in here:
        union |= info.mask
    shares = [i.share for i in here if i.share > 0]
    return RankCores(here[0].host, union, min(shares) if shares else 0.0).cores()


def mask_cores(infos: Sequence[RankCores]) -> list[int]:
    """Each rank's own core count (its affinity mask's size, within its quota)."""
    return [RankCores(*i).cores() for i in infos]


def gather_cores(comm: MPI.Comm, root: int = 0) -> tuple[int, list[int]]:
    """Collective: the root node's usable cores and every rank's own core count."""
    infos = comm.allgather(core_info())
    return node_cores(infos, root), mask_cores(infos)


def quiet_barrier(comm: MPI.Comm, poll_seconds: float = 0.001) -> None:
    """Barrier that sleeps between polls instead of spinning: ranks waiting while another rank
    computes or times something must not take a core from it."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_seconds)


def split_first(comm: MPI.Comm, p: int):
    """The first ``p`` ranks of ``comm`` as their own communicator, None on the others (collective)."""
    from mpi4py import MPI

    sub = comm.Split(0 if comm.rank < p else MPI.UNDEFINED, comm.rank)
    return None if sub == MPI.COMM_NULL else sub


@contextmanager
def first_ranks(comm: MPI.Comm, p: int, poll_seconds: float = 0.0005):
    """``split_first`` for a block of work on the first ``p`` ranks: freed at the end, then every
    rank meets in ``quiet_barrier``, so the ranks left out wait without taking a core from it."""
    sub = split_first(comm, p)
    try:
        yield sub
    finally:
        if sub is not None:
            sub.Free()
        quiet_barrier(comm, poll_seconds)
