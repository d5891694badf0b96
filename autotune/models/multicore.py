"""Multicore models (docs/models.md#multicore): thread micro-routines, Jacobi, nested Strassen (001 §6.3-6.4).

Pure functions of the thread count(s), the problem size, the cores ``C`` and the SPs of one kernel
version (``db.threads.VersionSPs``) or of nested Strassen (``db.threads.StrassenSPs``). Every
function broadcasts over arrays of thread counts. ``P <= C`` and ``P > C`` follow the source's two
forms of each equation; the oversubscribed form multiplies the work by ``1 + P T_sw / (C T_cpu)``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from autotune.db.threads import StrassenSPs, ThreadSPs, VersionSPs, kernel_time, line_at

JACOBI_OPS = 11.0  # elementary operations per grid point of the source's R-jacobi (001 eq. 6.7)
# Addition terms of eqs. 6.9-6.12 as printed, and as counted (18 additions of (n/2^i)^2 elements per node).
STRASSEN_ADDS = {"printed": {1: (9.0 / 4.0, 0.0), 2: (9.0 / 2.0, 7.0 * 18.0)},
                 "exact": {1: (9.0 / 2.0, 0.0), 2: (9.0 / 2.0, 7.0 * 18.0 / 16.0)}}


def oversubscription(p, cores: int, ratio) -> np.ndarray:
    """Work factor of eqs. 6.4, 6.6, 6.8: 1 for ``P <= C``, else ``1 + P T_sw / (C T_cpu)``."""
    p = np.asarray(p, dtype=float)
    return np.where(p > cores, 1.0 + p * np.asarray(ratio, dtype=float) / cores, 1.0)


def kernel_seconds(sps: VersionSPs, kernel: str, n, p, cores: int) -> np.ndarray | None:
    """Seconds per element of one of ``p`` threads running the version's measured ``kernel`` on
    n x n operands, oversubscription included: measured where the table reaches ``p`` (its own
    switching cost), beyond it the largest measured count times the factor's growth from there.
    None when the kernel was not measured."""
    p = np.asarray(p, dtype=float)
    table = sps.kernels.get(kernel)
    if not table:
        return None
    top = np.minimum(p, max(table["threads"]))
    grow = oversubscription(p, cores, sps.ratio(p)) / oversubscription(top, cores, sps.ratio(top))
    return kernel_time(sps, kernel, n, top) * grow


def generate(p, n: float, sps: VersionSPs, cores: int) -> np.ndarray:
    """R-generate, eqs. 6.1-6.2: ``P`` threads with ``N`` operations each."""
    p = np.asarray(p, dtype=float)
    over = n * sps.t_work * p / cores * (1.0 + sps.ratio(p))
    return p * sps.t_gen + np.where(p > cores, over, n * sps.t_work)


def pfor(p, total: float, sps: VersionSPs, cores: int) -> np.ndarray:
    """R-pfor, eqs. 6.3-6.4: ``N_t`` operations shared by ``P`` threads."""
    p = np.asarray(p, dtype=float)
    return p * sps.t_gen + total / p * sps.t_work * oversubscription(p, cores, sps.ratio(p))


def barriers(p, n: float, sps: VersionSPs, cores: int, reps: int = 1) -> np.ndarray:
    """R-barriers, eqs. 6.5-6.6, ``reps`` rounds of ``N`` operations per thread then a barrier."""
    p = np.asarray(p, dtype=float)
    rounds = n * sps.t_work * oversubscription(p, cores, sps.ratio(p)) + p * sps.t_syn
    return p * sps.t_gen + reps * rounds


def jacobi(n: int, p, sps: VersionSPs, cores: int) -> np.ndarray:
    """R-jacobi on an n x n grid, eqs. 6.7-6.8: ``P T_gen + (11 n^2 / P) T_work`` times the factor;
    with the version's measured sweep (its memory traffic is not the micro-routines'), ``(n^2 / P)
    T_point`` per point at this size and P threads (``kernel_seconds``), start included."""
    p = np.asarray(p, dtype=float)
    point = kernel_seconds(sps, "jacobi", n, p, cores)
    if point is None:
        return p * sps.t_gen + JACOBI_OPS * n * n / p * sps.t_work * oversubscription(p, cores, sps.ratio(p))
    return n * n / p * point


def strassen_nested(n: float, p1, p2, sps: StrassenSPs, cores: int, levels: int = 2,
                    counts: str = "printed") -> np.ndarray:
    """Parallel Strassen, eqs. 6.9-6.12: ``P1`` workers over the products of the first level times
    ``P2`` threads inside each (``levels`` 1 or 2). ``T_mul``, ``T_add`` and ``T_sw/T_cpu`` are read
    from their lines at ``P = P1 P2``. ``counts``: the addition terms "printed" in the source or "exact"."""
    if levels not in (1, 2):
        raise ValueError("strassen_nested: levels must be 1 or 2")
    p1, p2 = np.broadcast_arrays(np.asarray(p1, dtype=float), np.asarray(p2, dtype=float))
    p = p1 * p2
    t_mul, t_add, r = line_at(sps.t_mul, p), line_at(sps.t_add, p), line_at(sps.sw_cpu, p)
    over = p > cores
    mul_flops = 7.0 ** levels * 2.0 * (n / 2.0 ** levels) ** 3
    mul = mul_flops * t_mul * np.where(over, (1.0 + r) / cores, 1.0 / p)
    seq, par = STRASSEN_ADDS[counts][levels]
    add = seq * n * n * t_add
    if levels == 2:
        add = add + par * n * n * t_add * np.where(over, (1.0 + r) / np.minimum(p1, cores), 1.0 / p1)
    return p * sps.t_gen + mul + add


def shared_makespan(tasks: Iterable[tuple[float, int]], workers: int, cores: int) -> float:
    """Seconds until ``workers`` threads have run ``tasks`` (seconds each alone, threads each), taken
    in order as workers free up, on ``cores`` shared equally by all running threads (processor
    sharing: with more threads than cores each runs at ``cores / threads`` of its own speed)."""
    queue, clock = list(tasks), 0.0
    active: list[list] = []                 # [seconds left alone, threads] of each running task
    while queue or active:
        while queue and len(active) < workers:
            left, threads = queue.pop(0)
            active.append([float(left), max(int(threads), 1)])
        rate = min(1.0, cores / sum(t for _, t in active))
        step = min(left for left, _ in active) / rate
        clock += step
        active = [[left - step * rate, t] for left, t in active if left - step * rate > 1e-15]
    return clock


def additions(p, calls: Iterable[tuple[float, float]], sps: VersionSPs, cores: int, t_work=None,
              kernel: str = "add") -> np.ndarray:
    """Passes of a loop-parallel addition kernel, each an R-pfor (eqs. 6.3-6.4) over its elements:
    ``calls`` are (how many calls, elements per call). Seconds per element of one thread: the
    version's measured ``kernel`` table at each call's size and P (``kernel_seconds``;
    ``"add_after_blas"``: right after a BLAS call at P threads; the start of the threads included),
    else ``P T_gen`` plus ``t_work`` (a line ``a + b P`` or a constant), else ``T_work``, per element."""
    p = np.asarray(p, dtype=float)
    if t_work is not None:
        flat = line_at(t_work, p) if isinstance(t_work, tuple) else np.full(p.shape, float(t_work))
    else:
        flat = np.full(p.shape, sps.t_work)
    flat = flat * oversubscription(p, cores, sps.ratio(p))
    total = 0.0 * p
    for count, elems in calls:
        measured = kernel_seconds(sps, kernel, np.sqrt(elems), p, cores)   # oversubscription included
        start, per = (p * sps.t_gen, flat) if measured is None else (0.0, measured)
        total = total + count * (start + elems / p * per)
    return total


def best_version(model: Callable[[np.ndarray, VersionSPs], np.ndarray], sps: ThreadSPs, threads: Iterable[int],
                 versions: Iterable[str] | None = None) -> tuple[str, int, float]:
    """(version, P, predicted seconds) minimising ``model(P, version SPs)`` over the measured versions
    (or ``versions``) and thread counts: the source's choice of compiled version and threads (001 §6.4.1).
    ValueError when no version is measured."""
    ps = np.asarray(list(threads), dtype=float)
    names = [v for v in (versions or sps.versions) if v in sps.versions]
    if not names or ps.size == 0:
        raise ValueError("best_version: no measured kernel version or no thread count")
    times = {v: np.asarray(model(ps, sps.versions[v]), dtype=float) for v in names}
    v = min(names, key=lambda name: float(times[name].min()))
    i = int(np.argmin(times[v]))
    return v, int(ps[i]), float(times[v][i])


__all__ = ["JACOBI_OPS", "STRASSEN_ADDS", "additions", "barriers", "best_version", "generate", "jacobi",
           "oversubscription", "pfor", "shared_makespan", "strassen_nested"]
