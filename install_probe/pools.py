"""Probe the cross-call costs of thread pools (docs/models.md#pools.switch).

For every library the process has loaded (but the Numba reference, which keeps no spinning pool)
and every thread count, a square dgemm of a few sizes is timed in a loop alternating with the same
call on each library at each thread count (both pools hot, as in a program alternating the two),
and in a loop of its own (the reference); the smallest size also with a gap between the two calls
(how long a pool keeps costing: the hot window); and after an idle spell (its pool asleep).
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from autotune.kernels import _front

from autotune import backends as bk
from autotune.db import resolve
from autotune.db.pools import COLD, ROW_DTYPE, save_transitions

GEMM = Callable[[], None]
# A progress callback: (points done, points planned, the point measured now).
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PoolSpec:
    """What the pool probe measures: operand sizes, gaps (the smallest size only), repetitions, the idle spell."""

    sizes: tuple[int, ...] = (128, 512, 1024)
    gaps: tuple[float, ...] = (0.05, 0.2)
    reps: int = 7
    idle: float = 0.3
    threads: tuple[int, ...] = (1, 2)


SPECS = {"tiny": PoolSpec(sizes=(64, 128), gaps=(0.02,), reps=3, idle=0.05),   # tests: a second or two
         "quick": PoolSpec(sizes=(128, 512), gaps=(0.2,), reps=3, idle=0.15),
         "standard": PoolSpec()}
NO_POOL = ("numba-reference",)    # its threads wait on a condition: no pool spins after its calls
# An extra counts (sets the hot window) when over both of these.
MIN_EXTRA_SECONDS, MIN_EXTRA_SHARE = 2e-5, 0.05


def _gemm(be, n: int, rng) -> GEMM:
    a = _front.aligned_copy(rng.standard_normal((n, n)), "F")
    b, c = _front.aligned_copy(a, "F"), _front.aligned_empty((n, n), "F")
    op = be.ops["gemm"]
    return lambda: op(1.0, a, b, 0.0, c, False, False)


def _wait(seconds: float) -> None:
    """Sleep, then spin for the last millisecond (sleep alone overshoots short gaps)."""
    end = time.perf_counter() + seconds
    if seconds > 2e-3:
        time.sleep(seconds - 1e-3)
    while time.perf_counter() < end:
        pass


def _timed(op: GEMM) -> float:
    t0 = time.perf_counter()
    op()
    return time.perf_counter() - t0


class _Bench:
    """Operands and thread switching for the loaded libraries."""

    def __init__(self, backends: dict, spec: PoolSpec, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.backends, self.spec = backends, spec
        self.ops = {(name, n): _gemm(be, n, rng) for name, be in backends.items() for n in spec.sizes}

    def run(self, name: str, threads: int, n: int) -> float:
        self.backends[name].set_threads(threads)
        return _timed(self.ops[name, n])

    def after(self, frm: tuple[str, int], to: tuple[str, int], n: int, gap: float) -> float:
        """Median time of ``to``'s call in a loop alternating with ``frm``'s, ``gap`` after it (after
        warm-up rounds); ``frm == to`` with no gap is the loop of its own."""
        times, warm = [], 3 if gap == 0.0 else 1
        for i in range(self.spec.reps + warm):
            self.run(*frm, n)
            _wait(gap)
            t = self.run(*to, n)
            if i >= warm:
                times.append(t)
        return float(np.median(times))

    def cold(self, to: tuple[str, int], n: int) -> float:
        """Median time after an idle spell (every pool asleep)."""
        times = []
        for _ in range(self.spec.reps):
            time.sleep(self.spec.idle)
            times.append(self.run(*to, n))
        return float(np.median(times))


def _sources(ends: list[tuple[str, int]], to: tuple[str, int], n: int, spec: PoolSpec) -> list[tuple[tuple, float]]:
    """The (from, gap) transitions into ``to`` at size ``n``: gap 0 from every end; the spec's gaps
    (the hot window) from the smallest size only, between pools of several threads."""
    return [(frm, gap) for frm, gap in itertools.product(ends, (0.0,) + spec.gaps)
            if not gap or (n == min(spec.sizes) and min(frm[1], to[1]) >= 2)]


def measure(backends: dict, spec: PoolSpec, progress: Progress | None = None) -> np.ndarray:
    """Rows of ``db.pools.ROW_DTYPE``: every (from, to) transition at gap 0 for every size, at the
    spec's gaps for the smallest between multi-threaded pools, and the cold starts; ``progress``
    hears (rows done, rows planned, the row measured now) as each row starts."""
    bench = _Bench(backends, spec)
    ends = [(name, t) for name in backends for t in spec.threads if t <= backends[name].max_threads]
    plan = [(to, n, _sources(ends, to, n, spec)) for to in ends for n in spec.sizes]
    total = sum(1 + len(sources) for *_, sources in plan)
    tick = progress or (lambda done, total, what: None)
    rows = []
    try:
        for to, n, sources in plan:
            into = f"-> {to[0]}:{to[1]} n={n}"
            tick(len(rows), total, f"cold {into}")
            own = bench.after(to, to, n, 0.0)
            rows.append((COLD, 0, to[0], to[1], 0.0, n, own, bench.cold(to, n)))
            for frm, gap in sources:
                tick(len(rows), total, f"{frm[0]}:{frm[1]} {into}" + (f" gap {gap:g} s" if gap else ""))
                t = own if (frm, gap) == (to, 0.0) else bench.after(frm, to, n, gap)
                rows.append((frm[0], frm[1], to[0], to[1], gap, n, own, t))
        tick(len(rows), total, "")
    finally:
        for be in backends.values():
            be.set_threads(be.max_threads)
    return np.array(rows, ROW_DTYPE)


def hot_window(rows: np.ndarray) -> float:
    """The first measured gap from which on no transition costs more than the noise thresholds
    (the largest measured gap if it still does; 0 if none ever does)."""
    warm = rows[rows["from_backend"] != COLD.encode()]
    extra = warm["t_after"] - warm["t_alone"]
    counts = (extra > MIN_EXTRA_SECONDS) & (extra > MIN_EXTRA_SHARE * warm["t_alone"])
    gaps = np.unique(warm["gap"])
    if not counts.any():
        return 0.0
    noisy = [g for g in gaps if counts[warm["gap"] == g].any()]
    later = gaps[gaps > max(noisy)]
    return float(later[0]) if later.size else float(gaps.max())


def probe_pools(db_path, names, spec: str = "standard", progress: Progress | None = None) -> dict:
    """Measure the transitions between the loaded libraries among ``names`` and store them in the
    database; returns the stored info (spec, libraries, hot window, seconds). ``progress``: as ``measure``'s."""
    t0 = time.perf_counter()
    loaded = {}
    for name in dict.fromkeys(n for n in names if n not in NO_POOL):
        try:
            be = bk.get(name)
        except bk.BackendUnavailable:
            continue
        if be.set_threads is not None:      # skipped: a library whose thread count cannot be set
            loaded[name] = be
    rows = measure(loaded, SPECS[spec], progress)
    info = {"spec": spec, "libraries": sorted(loaded), "hot_window": hot_window(rows),
            "seconds": round(time.perf_counter() - t0, 1)}
    save_transitions(resolve(db_path), rows, info)
    return info


__all__ = ["SPECS", "PoolSpec", "hot_window", "measure", "probe_pools"]
