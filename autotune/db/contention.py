"""Compute contention between ranks on one node: how much slower a rank's BLAS runs while p ranks
compute at once (shared caches, memory bandwidth, clocks; time-sharing when oversubscribed).

The source thesis measured simultaneous dgemm runs for the same purpose (docs/models.md#contention).
``install_probe.contention`` times one-thread dgemm on p = 1..P concurrent ranks; the factor
``t(p, n) / t(1, n)`` scales the per-rank k of the distributed models. Stored per MPI platform in
``/contention/<platform key>`` of the database; missing data means factor 1 (never an error).
"""
from __future__ import annotations

import os

import numpy as np

from .lookup import SPLookup
from .store import read_member, replace_group

GROUP = "contention"
REBUILD = "autotune-install --mpi --np P --db {path}"


def series(pattern: str, statistic: str = "mean") -> str:
    """The stored name of one access pattern's curves for one statistic over the concurrent ranks:
    the pattern itself for their mean, ``pattern:max`` (slowest) and ``pattern:min`` (fastest)."""
    return pattern if statistic == "mean" else f"{pattern}:{statistic}"


class Contention:
    """Slowdown factors by (access pattern, concurrent ranks p, operand size n); 1 where nothing
    was measured. Patterns without their own measurement use the square products' factors."""

    def __init__(self, p=None, n=None, t=None, pattern=None):
        self._curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        if p is None or len(p) == 0:
            return
        pattern = ["square"] * len(p) if pattern is None else [str(x) for x in pattern]
        rows = list(zip(pattern, (int(v) for v in p), (float(v) for v in n), (float(v) for v in t), strict=True))
        solo = {(pat, x): y for pat, q, x, y in rows if q == 1}
        for pat, q in sorted({(pat, q) for pat, q, _, _ in rows}):
            pts = sorted((x, y / solo[pat, x]) for pp, qq, x, y in rows if (pp, qq) == (pat, q) and (pat, x) in solo)
            if pts:
                self._curves[pat, q] = (np.log([x for x, _ in pts]), np.array([f for _, f in pts]))

    @property
    def available(self) -> bool:
        return any(q > 1 for _, q in self._curves)

    def factor(self, p: int, n, pattern: str = "square", statistic: str = "mean") -> np.ndarray:
        """Slowdown of one rank's compute with ``p`` ranks busy (nearest measured p), by size ``n``:
        their mean, or the slowest's (``statistic`` "max") or fastest's ("min") where measured."""
        names = [series(pattern, statistic), pattern, series("square", statistic), "square"]
        pat = next(x for x in names if x == "square" or any(k[0] == x for k in self._curves))
        qs = [q for pp, q in self._curves if pp == pat]
        if p <= 1 or not qs:
            return np.ones(np.shape(n))
        q = min(qs, key=lambda v: (abs(v - p), -v))
        lx, f = self._curves[pat, q]
        return np.maximum(np.interp(np.log(np.maximum(np.asarray(n, float), 1.0)), lx, f), 1.0)


def save_contention(path: str | os.PathLike, key: str, p, n, t, info: dict | None = None,
                    pattern=None) -> None:
    """Write the measured (pattern, p, n, seconds) rows of one platform, keeping the rest of the file."""
    def write(g) -> None:
        g["p"], g["n"], g["t"] = np.asarray(p, int), np.asarray(n, float), np.asarray(t, float)
        g["pattern"] = np.array(["square"] * len(g["p"]) if pattern is None else list(pattern), dtype="S16")
        for k, v in (info or {}).items():
            g.attrs[k] = v
    replace_group(path, GROUP, key, write)


def load_contention(path: str | os.PathLike | None, key: str | None) -> Contention:
    """The platform's contention factors, or an empty ``Contention`` (factor 1) when absent."""
    return read_member(path, GROUP, key, _parse, Contention, "contention data", REBUILD)


def _parse(g) -> Contention:
    pattern = [x.decode() for x in g["pattern"][...]] if "pattern" in g else None
    return Contention(g["p"][...], g["n"][...], g["t"][...], pattern)


SQUARE_REF = 1024        # the square dgemm whose k converts a call's duration to an equal-work size
LONG_CALL = 1 << 30      # a size past the probe's largest: the long-call slowdown (time sharing)


class ContendedSP:
    """An SP view whose k is slowed by the contention factor of ``p`` busy ranks (models call
    ``k``), for their mean, slowest (``statistic`` "max") or fastest ("min") rank."""

    def __init__(self, sp: SPLookup, contention: Contention, p: int, statistic: str = "mean"):
        self.sp, self.contention, self.p, self.statistic = sp, contention, p, statistic

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        base = self.sp.k(routine, backend, threads, x, pattern, param, dtype)
        return base * self.contention.factor(self.p, x, pattern, self.statistic)

    def _equal_size(self, backend: str, threads: int):
        """``size(calls, shape)``: the square dgemm order whose uncontended duration is each call's
        (the contention probe's curves are by that order)."""
        k_sq = float(np.asarray(self.sp.k("gemm", backend, threads, SQUARE_REF)).reshape(-1)[0])
        return lambda calls, shape: np.cbrt(np.maximum(np.broadcast_to(calls, shape), 0.0) / (2.0 * k_sq))

    def sharing(self, backend: str, threads: int):
        """``share(seconds, calls, q) -> (busy, wall)``: BLAS work of ``seconds`` (uncontended),
        done in calls of ``calls`` seconds each, while ``q`` ranks compute at once. ``busy`` is what
        the calls measure: the square-dgemm slowdown of q concurrent ranks at the size of equal
        duration (calls shorter than the scheduler's slice run at full speed on the core they get).
        ``wall`` also waits for a core: at least the long-call slowdown of q ranks (time sharing)."""
        equal_size = self._equal_size(backend, threads)

        def share(seconds, calls, q):
            seconds = np.asarray(seconds, float)
            size = equal_size(calls, seconds.shape)
            qs = np.broadcast_to(q, seconds.shape)
            busy, wall = np.ones(seconds.shape), np.ones(seconds.shape)
            for v in np.unique(qs):
                sel = qs == v
                busy[sel] = self.contention.factor(int(v), size[sel], "square", self.statistic)
                wall[sel] = np.maximum(busy[sel], float(self.contention.factor(int(v), LONG_CALL, "square", "mean")))
            return seconds * busy, seconds * wall
        return share

    def cores(self, q: int) -> int:
        """Cores ``q`` busy ranks share: q over their measured long-call slowdown (time sharing)."""
        return max(1, min(q, round(q / float(self.contention.factor(q, LONG_CALL)))))

    def lockstep(self, backend: str, threads: int):
        """``pack(loads, calls) -> (busy, wall)``: ranks that synchronise every step, with BLAS
        work ``loads`` (uncontended seconds, one per rank) in calls of ``calls`` seconds. The
        scheduler keeps such ranks on fixed cores (largest load first, on the least loaded core), so
        a step ends when the most loaded core has run its ranks' work: ``wall``. ``busy`` (per rank)
        is what its calls measure: the slowdown of q ranks at the size of equal duration, where q
        fills every core as the rank's own core is filled."""
        equal_size = self._equal_size(backend, threads)

        def pack(loads, calls):
            loads = np.asarray(loads, float)
            size = equal_size(calls, loads.shape)
            q = int(np.count_nonzero(loads)) * threads                  # busy cores' worth of threads
            cores = max(1, self.cores(q) // threads)                   # places for whole ranks
            core_of, work = np.zeros(loads.shape, int), np.zeros(cores)
            for r in np.argsort(-loads, kind="stable"):
                core_of[r] = int(np.argmin(work))
                work[core_of[r]] += loads[r]
            sharing = np.bincount(core_of[loads > 0], minlength=cores)[core_of]
            busy = loads.copy()
            for m in np.unique(sharing):
                sel = sharing == m
                busy[sel] *= self.contention.factor(int(m) * cores * threads, size[sel], "square", self.statistic)
            alone_f = float(self.contention.factor(cores * threads, LONG_CALL))
            return busy, max(float(work.max()) * alone_f, float(busy.max(initial=0.0)))
        return pack

    def __getattr__(self, name):
        return getattr(self.sp, name)


def alone(sp: SPLookup):
    """``sp`` as one rank sees it working while the others wait (the root's moves in and out of a
    distributed call): without contention, since the waiting ranks do not slow it."""
    return sp.sp if isinstance(sp, ContendedSP) else sp


def lockstep(sp: SPLookup, backend: str, threads: int):
    """``ContendedSP.lockstep`` of ``sp``; for an uncontended ``sp`` every rank runs alone."""
    if isinstance(sp, ContendedSP):
        return sp.lockstep(backend, threads)
    return lambda loads, calls: (np.asarray(loads, float), float(np.max(loads, initial=0.0)))


def sharing(sp: SPLookup, backend: str, threads: int):
    """``ContendedSP.sharing`` of ``sp``; no slowdown at all for an uncontended ``sp``."""
    if isinstance(sp, ContendedSP):
        return sp.sharing(backend, threads)
    return lambda seconds, calls, q: (seconds, seconds)
