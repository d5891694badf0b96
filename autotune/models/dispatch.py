"""What a tuned call adds around the library's own routine (entry checks, dispatch, thread switch)."""
from __future__ import annotations

from autotune.core.routines import DISPATCH_ORDER, dims_of, flops
from autotune.db.lookup import SPLookup


def dispatch(routine: str, backend: str, threads: int, sp: SPLookup) -> float:
    """Seconds a tuned call adds to the library's own ``routine`` when it runs this backend: the
    probe's whole-call timing (pattern ``dispatch``) minus the library's own time at the same
    order; never negative."""
    fl = flops(routine, dims_of(routine, "dispatch", DISPATCH_ORDER))
    whole = sp.k(routine, backend, threads, DISPATCH_ORDER, "dispatch")
    own = sp.k(routine, backend, threads, DISPATCH_ORDER)
    return max(0.0, float(fl * (whole - own)))
