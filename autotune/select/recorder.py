"""``explain``'s view of the system parameters: it answers as the database does and remembers each
lookup, marking those beyond their series' measured sizes."""
from __future__ import annotations

import numpy as np

from autotune.core.assumptions import EXTRAPOLATION_PENALTY
from autotune.db.lookup import SPLookup, SPTable

# The mark of an SP term looked up beyond its series' measured sizes (explain, the report's maps).
UNMEASURED = "NOT MEASURED"


class Recorder:
    """An SP view that remembers each lookup (for ``explain``)."""

    def __init__(self, sp: SPLookup):
        self.sp = sp
        self.log: list[str] = []

    @property
    def table(self) -> SPTable | None:
        return self.sp.table

    def has(self, *key) -> bool:
        return self.sp.has(*key)

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        out = self.sp.k(routine, backend, threads, x, pattern, param, dtype)
        xs, ks = np.atleast_1d(x), np.atleast_1d(out)
        ps = sorted({float(p) for p in np.atleast_1d(param) if p})
        where = f"{routine}/{pattern}" + (f"[{','.join(f'{p:g}' for p in ps)}]" if ps else "")
        who = f"{backend} {threads}t"
        if xs.size == 0:
            return out
        mark = self._unmeasured(xs, routine, backend, threads, pattern, dtype)
        if xs.size == 1:
            self.log.append(f"k_{where}({float(xs[0]):.0f}) {who} = {1e-9 / float(ks[0]):.2f} GF/s{mark}")
        else:
            self.log.append(f"k_{where} {who} over {xs.size} sizes {float(xs.min()):.0f}..{float(xs.max()):.0f}: "
                            f"{1e-9 / float(ks.max()):.2f}..{1e-9 / float(ks.min()):.2f} GF/s{mark}")
        return out

    def _unmeasured(self, xs: np.ndarray, *series) -> str:
        """The mark of a lookup outside its series' measured sizes (empty inside, or never measured:
        the default's own warning says that)."""
        table = self.sp.table
        if table is None or not table.has(*series):
            return ""
        lo, hi = table.measured_range(*series)
        if lo < hi and (xs.min() < lo or xs.max() > hi):
            return (f" [{UNMEASURED}: measured {lo:.0f}..{hi:.0f}; extrapolated, +{EXTRAPOLATION_PENALTY:.0%} "
                    "per octave beyond]")
        return ""
