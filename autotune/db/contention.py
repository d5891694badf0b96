"""Compute contention between ranks on one node: how much slower a rank's BLAS runs while p ranks
compute at once (shared caches, memory bandwidth, clocks; time-sharing when oversubscribed).

The thesis measured dgemm with several simultaneous executions for exactly this (001 §4.3.2).
``install_probe.contention`` times one-thread dgemm on p = 1..P concurrent ranks; the factor
``t(p, n) / t(1, n)`` scales the per-rank k of the distributed models. Stored per MPI platform in
``/contention/<platform key>`` of the database; missing data means factor 1 (never an error).
"""
from __future__ import annotations

import os

import numpy as np

GROUP = "contention"


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
    from .store import replace_group

    def write(g) -> None:
        g["p"], g["n"], g["t"] = np.asarray(p, int), np.asarray(n, float), np.asarray(t, float)
        g["pattern"] = np.array(["square"] * len(g["p"]) if pattern is None else list(pattern), dtype="S16")
        for k, v in (info or {}).items():
            g.attrs[k] = v
    replace_group(path, GROUP, key, write)


def load_contention(path: str | os.PathLike | None, key: str | None) -> Contention:
    """The platform's contention factors, or an empty ``Contention`` (factor 1) when absent."""
    from .store import read_member

    return read_member(path, GROUP, key, _parse, Contention, "contention data")


def _parse(g) -> Contention:
    pattern = [x.decode() for x in g["pattern"][...]] if "pattern" in g else None
    return Contention(g["p"][...], g["n"][...], g["t"][...], pattern)


class ContendedSP:
    """An SP view whose k is slowed by the contention factor of ``p`` busy ranks (models call
    ``k``), for their mean, slowest (``statistic`` "max") or fastest ("min") rank."""

    def __init__(self, sp, contention: Contention, p: int, statistic: str = "mean"):
        self.sp, self.contention, self.p, self.statistic = sp, contention, p, statistic

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        base = self.sp.k(routine, backend, threads, x, pattern, param, dtype)
        return base * self.contention.factor(self.p, x, pattern, self.statistic)

    def __getattr__(self, name):
        return getattr(self.sp, name)
