"""Control-path helpers every distributed routine uses: agree on errors, share small metadata.

Ranks must raise the same error together, never leave others waiting in a collective: each
rank checks its own inputs, then ``agree`` gathers the verdicts and every rank raises the first
problem found (same type and message everywhere). Only small Python objects cross here.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

_ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "LinAlgError": None}


def agree(comm, error: Exception | None) -> None:
    """Raise on every rank if any rank reported an error (the lowest rank's error wins)."""
    verdicts = comm.allgather(None if error is None else (type(error).__name__, str(error)))
    for rank, verdict in enumerate(verdicts):
        if verdict is not None:
            name, message = verdict
            raise _error_type(name)(f"rank {rank}: {message}" if comm.size > 1 else message)


def _error_type(name: str) -> type[Exception]:
    if name == "LinAlgError":
        import numpy as np

        return np.linalg.LinAlgError
    return _ERRORS.get(name) or ValueError


def run_checked(comm, fn, *args, **kwargs):
    """``fn(*args)`` on every rank; an exception on any rank is raised on all (via ``agree``)."""
    try:
        out, err = fn(*args, **kwargs), None
    except (ValueError, TypeError) as exc:
        out, err = None, exc
    except Exception as exc:   # LinAlgError and the like keep their type through _error_type
        out, err = None, exc
    agree(comm, err)
    return out


def quiet_barrier(comm, poll_seconds: float = 0.001) -> None:
    """Barrier that sleeps between polls instead of spinning: ranks waiting while another rank
    computes or times something must not take a core from it."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_seconds)


def split_first(comm, p: int):
    """The first ``p`` ranks of ``comm`` as their own communicator, None on the others (collective)."""
    from mpi4py import MPI

    sub = comm.Split(0 if comm.rank < p else MPI.UNDEFINED, comm.rank)
    return None if sub == MPI.COMM_NULL else sub


@contextmanager
def first_ranks(comm, p: int, poll_seconds: float = 0.0005):
    """``split_first`` for a block of work on the first ``p`` ranks: freed at the end, then every
    rank meets in ``quiet_barrier``, so the ranks left out wait without taking a core from it."""
    sub = split_first(comm, p)
    try:
        yield sub
    finally:
        if sub is not None:
            sub.Free()
        quiet_barrier(comm, poll_seconds)
