"""Thread-SP probe (docs/models.md#multicore): the micro-routines of 001 §6.3.1 per kernel version.

For each kernel version and P = 1..2C (C = the CPUs this process may run on), R-generate and
R-pfor are timed at two work sizes and R-barriers at one; a weighted least-squares fit of the
``P <= C`` points gives ``T_gen`` and ``T_work`` (eqs. 6.1, 6.3; one intercept per routine takes
up the Python call), then ``T_syn`` (eq. 6.5); the ``P > C`` points give ``T_sw/T_cpu`` through
eqs. 6.2 and 6.4, as a constant and as a line in P. The "blas" version (numpy's OpenBLAS gemm)
has no micro-routines: its ``T_gen`` and ``T_work`` come from gemm at two sizes, P = 1..C. For
nested Strassen (eqs. 6.9-6.12), ``T_mul`` (gemm) and ``T_add`` (the fused addition) are fitted as
lines in P, ``T_gen`` is the cost of one task of the worker pool, and the driver's own cost beyond
its products is measured per element of C at each P1 x P2 and level (``probe_driver``).
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from autotune.kernels import nested_strassen
from autotune.kernels import versions as kernel_versions
from autotune.kernels.strassen import strassen as sequential_strassen
from autotune.kernels.versions import load

from autotune import backends
from autotune.db.threads import StrassenSPs, ThreadSPs, VersionSPs, save_threads
from autotune.models import multicore
from autotune.select.candidates import NESTED_BACKEND

FLOOR = 1e-12  # smallest T_gen / T_work reported (a fit at or below zero means "not resolved")
# A progress callback: (steps done, steps planned, the step measured now).
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ThreadPlan:
    """Work sizes (elementary operations) and repetitions of one probe flavour."""

    gen_sizes: tuple[int, int]
    barrier_ops: int
    barrier_rounds: int
    reps: int
    gemm_sizes: tuple[int, int]
    add_size: int
    kernel_sizes: tuple[int, ...]          # n of the loop kernels' own tables (n x n operands)
    nested_sizes: tuple[int, ...]          # n of nested Strassen's driver table


QUICK = ThreadPlan((20_000, 200_000), 2_000, 5, 3, (16, 192), 256, (96, 256), (128, 192))
FULL = ThreadPlan((50_000, 500_000), 5_000, 10, 7, (16, 384), 512, (256, 512, 1024, 1536, 2560, 3584),
                  (512, 1024, 1536))
DRIVER_REPS = 3   # timed driver calls per point (median): its largest points take a quarter second
WAKE_GEMM = 128   # order of the BLAS gemm that precedes each timed addition in "add_after_blas"


def cores() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def best_time(fn: Callable, *args, reps: int) -> float:
    """Fastest of ``reps`` timed calls after one warm-up call (seconds)."""
    fn(*args)
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def _relative_lstsq(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Least squares on relative errors (each row divided by its time)."""
    w = 1.0 / np.maximum(t, 1e-9)
    return np.linalg.lstsq(x * w[:, None], t * w, rcond=None)[0]


def _ratio_points(rows: list[tuple], t_gen: float, t_work: float, c: int, icpt: dict) -> tuple[np.ndarray, ...]:
    """(P, T_sw/T_cpu) from the P > C rows by eq. 6.2 (generate) or eq. 6.4 (pfor)."""
    ps, rs = [], []
    for routine, p, work, t in rows:
        left = t - icpt[routine] - p * t_gen
        if routine == "generate":
            rs.append(left / (work * t_work * p / c) - 1.0)
        else:
            rs.append((left / (work / p * t_work) - 1.0) * c / p)
        ps.append(p)
    return np.array(ps, float), np.array(rs, float)


def fit_version(rows: list[tuple], barrier_rows: list[tuple], c: int, max_threads: int = 0) -> VersionSPs:
    """Fit one version's SPs from rows (routine, P, work, seconds): ``work`` is N for generate and
    N_t for pfor; ``barrier_rows`` are (P, N, rounds, seconds)."""
    low = [r for r in rows if r[1] <= c]
    x = np.array([[r[0] == "generate", r[0] == "pfor", r[1], r[2] if r[0] == "generate" else r[2] / r[1]]
                  for r in low], float)
    c_gen, c_pfor, t_gen, t_work = _relative_lstsq(x, np.array([r[3] for r in low]))
    t_gen, t_work = max(t_gen, FLOOR), max(t_work, FLOOR)
    icpt = {"generate": c_gen, "pfor": c_pfor}
    syn = [(p * k, t - c_gen - p * t_gen - k * n * t_work) for p, n, k, t in barrier_rows if p <= c]
    t_syn = max(sum(a * b for a, b in syn) / sum(a * a for a, _ in syn), 0.0) if syn else 0.0
    high = [r for r in rows if r[1] > c and r[2] == max(q[2] for q in rows if q[0] == r[0])]
    ps, rs = _ratio_points(high, t_gen, t_work, c, icpt)
    ratio = max(float(np.mean(rs)), 0.0) if rs.size else 0.0
    line = (ratio, 0.0)
    if np.unique(ps).size >= 2:
        b, a = np.polyfit(ps, rs, 1)
        line = (float(a), float(b))
    return VersionSPs(float(t_gen), float(t_work), float(t_syn), ratio, line, max_threads)


class _Steps:
    """Counts a probe's steps for a progress callback, told as each step starts."""

    def __init__(self, total: int, progress: Progress | None = None):
        self.total, self.done, self.progress = total, -1, progress

    def __call__(self, what: str) -> None:
        """Step ``what`` starts (the one before it is done)."""
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, what)

    def end(self) -> None:
        if self.progress is not None:
            self.progress(self.total, self.total, "")


def _quiet(what: str) -> None:
    """A step nobody follows."""


def measure_version(module, c: int, plan: ThreadPlan, step: Callable[[str], None] = _quiet) -> tuple[list, list]:
    """Time generate and pfor (two sizes) and barriers (one) at P = 1..2C with one version's module
    (one ``step`` per P)."""
    rows, barrier_rows = [], []
    for p in range(1, 2 * c + 1):
        step(f"P={p}")
        for n in plan.gen_sizes:
            rows.append(("generate", p, n, best_time(module.generate, p, n, reps=plan.reps)))
            rows.append(("pfor", p, c * n, best_time(module.pfor, p, c * n, reps=plan.reps)))
        t = best_time(module.barriers, p, plan.barrier_ops, plan.barrier_rounds, reps=plan.reps)
        barrier_rows.append((p, plan.barrier_ops, plan.barrier_rounds, t))
    return rows, barrier_rows


def _pool_limit(module) -> int:
    return int(module.pool_size()) if hasattr(module, "pool_size") else 0


def _gemm_times(be, n: int, p: int, reps: int) -> float:
    a, b, out = (np.asfortranarray(np.random.default_rng(0).random((n, n))) for _ in range(3))
    with be.threads(p):
        return best_time(be.ops["gemm"], 1.0, a, b, 0.0, out, False, False, reps=reps)


def probe_blas(c: int, plan: ThreadPlan) -> tuple[VersionSPs, tuple[float, float]]:
    """The BLAS-threaded version (numpy's OpenBLAS gemm, pfor-shaped: flops / P per thread) and the
    line of T_mul(P) = t P / flops at the larger size."""
    be = backends.get("numpy-openblas")
    ps = range(1, min(c, be.max_threads) + 1)
    small, big = plan.gemm_sizes
    rows = [(p, n, _gemm_times(be, n, p, plan.reps)) for p in ps for n in (small, big)]
    x = np.array([[1.0, p, 2.0 * n**3 / p] for p, n, _ in rows])
    _, t_gen, t_work = _relative_lstsq(x, np.array([t for *_, t in rows]))
    per_flop = [(p, t * p / (2.0 * n**3)) for p, n, t in rows if n == big]
    return VersionSPs(max(float(t_gen), FLOOR), max(float(t_work), FLOOR), 0.0, 0.0, (0.0, 0.0),
                      be.max_threads), _line(per_flop)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of a + b P through the points (a constant for one point)."""
    ps, ys = np.array([p for p, _ in points], float), np.array([y for _, y in points], float)
    if np.unique(ps).size < 2:
        return float(ys.mean()), 0.0
    b, a = np.polyfit(ps, ys, 1)
    return float(a), float(b)


def probe_add(module, c: int, plan: ThreadPlan) -> tuple[float, float]:
    """T_add(P) = t P / elements of the version's fused addition on an n x n matrix, P = 1..2C, as a line."""
    n = plan.add_size
    a, b, out = (np.asfortranarray(np.random.default_rng(1).random((n, n))) for _ in range(3))
    pts = [(p, best_time(module.add, a, b, out, 1.0, p, reps=plan.reps) * p / (n * n)) for p in range(1, 2 * c + 1)]
    return _line(pts)


def median_time(fn: Callable, *args, reps: int, before: Callable | None = None) -> float:
    """Median of ``reps`` timed calls after one warm-up, each right after ``before()`` if given."""
    fn(*args)
    out = []
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _add_operands(n: int) -> tuple[np.ndarray, ...]:
    """The addition's two n x n inputs and its output, Fortran-ordered (the same at every call)."""
    return tuple(np.asfortranarray(np.random.default_rng(4 + j).random((n, n))) for j in range(3))


def probe_kernels(module, c: int, plan: ThreadPlan, step: Callable[[str], None] = _quiet) -> dict:
    """Seconds per element of one thread of the version's Jacobi sweep and addition at each of the
    plan's sizes, alone at P = 1..2C (oversubscribed too: each kernel's own switching cost) and
    (the addition) right after a BLAS gemm at P = 1..C threads, as Strassen's additions run (the
    start of the threads included): the tables ``models.multicore.kernel_seconds`` reads. One
    ``step`` per size alone and per size after the gemm."""
    be = backends.get(NESTED_BACKEND)
    w = np.asfortranarray(np.random.default_rng(2).random((WAKE_GEMM, WAKE_GEMM)))
    alone, after = list(range(1, 2 * c + 1)), list(range(1, c + 1))
    threads = {"jacobi": alone, "add": alone, "add_after_blas": after}
    tables = {k: np.zeros((len(plan.kernel_sizes), len(ps))) for k, ps in threads.items()}
    for i, n in enumerate(plan.kernel_sizes):      # alone: no BLAS pool spinning beside them
        step(f"kernels n={n}")
        old, new = np.random.default_rng(3).random((n, n)), np.empty((n, n))
        a, b, out = _add_operands(n)
        for j, p in enumerate(alone):
            tables["jacobi"][i, j] = median_time(module.jacobi_sweep, old, new, p, reps=plan.reps) * p / (n * n)
            tables["add"][i, j] = median_time(module.add, a, b, out, 1.0, p, reps=plan.reps) * p / (n * n)
    for i, n in enumerate(plan.kernel_sizes):
        step(f"add after gemm n={n}")
        a, b, out = _add_operands(n)
        for j, p in enumerate(after):
            with be.threads(p):
                wake = functools.partial(be.ops["gemm"], 1.0, w, w, 0.0, w.copy(order="F"), False, False)
                t = median_time(module.add, a, b, out, 1.0, p, reps=plan.reps, before=wake)
            tables["add_after_blas"][i, j] = t * p / (n * n)
    return {k: {"sizes": list(plan.kernel_sizes), "threads": threads[k], "seconds": v.tolist()}
            for k, v in tables.items()}


def _product(be, h: int, p2: int, levels: int, reps: int) -> float:
    """Median seconds of one top-level product of nested Strassen on h x h operands at P2 threads:
    the gemm, or ``levels - 1`` sequential Strassen levels over it (what each task multiplies)."""
    s, t, out = (np.asfortranarray(np.random.default_rng(5 + j).random((h, h))) for j in range(3))
    gemm = be.ops["gemm"]
    with be.threads(p2):
        if levels == 1:
            return median_time(gemm, 1.0, s, t, 0.0, out, reps=reps)
        return median_time(sequential_strassen, s, t, out, levels - 1, gemm, reps=reps)


def probe_driver(c: int, plan: ThreadPlan, step: Callable[[str], None] = _quiet) -> dict:
    """Nested Strassen's driver at each of the plan's sizes, levels 1 and 2, and P1 x P2 <= 2C (P1 <= 7,
    P2 within the library's threads): its median time less its 7 products shared out over P1
    workers and C cores (models.multicore.shared_makespan), per element of C. This is what the
    products leave out: additions into fresh buffers, the pool, BLAS threads spinning between calls.
    One ``step`` per size."""
    be = backends.get(NESTED_BACKEND)
    configs = [(p1, p2, lv) for lv in (1, 2) for p1 in range(1, min(7, 2 * c) + 1)
               for p2 in range(1, min(2 * c // p1, be.max_threads) + 1)]
    reps = min(plan.reps, DRIVER_REPS)
    secs = np.zeros((len(plan.nested_sizes), len(configs)))
    for i, n in enumerate(plan.nested_sizes):
        step(f"nested Strassen n={n}")
        a, b = (np.asfortranarray(np.random.default_rng(j).random((n, n))) for j in (1, 2))
        out = np.empty((n, n), order="F")
        prods = {(p2, lv): _product(be, n // 2, p2, lv, reps) for _, p2, lv in configs}
        for j, (p1, p2, lv) in enumerate(configs):
            t = median_time(nested_strassen.nested_strassen, a, b, p1, p2, be.ops["gemm"], be.threads, lv, out,
                            reps=reps)
            secs[i, j] = (t - multicore.shared_makespan([(prods[p2, lv], p2)] * 7, p1, c)) / (n * n)
    return {"sizes": list(plan.nested_sizes), "configs": [list(x) for x in configs], "seconds": secs.tolist()}


def probe_pool(c: int, plan: ThreadPlan) -> float:
    """Seconds per task of the nested-Strassen worker pool (slope of P no-op tasks, warm pool)."""
    pts = []
    for p in range(1, 2 * c + 1):
        pool = nested_strassen.pool(p)
        pts.append((p, best_time(lambda q=pool, k=p: list(q.map(int, range(k))), reps=plan.reps)))
    a, b = _line(pts)
    return max(b, FLOOR)


def probe_threads(versions: list[str] | None = None, quick: bool = False,
                  progress: Progress | None = None) -> ThreadSPs:
    """Measure and fit the thread SPs of the kernel versions (all available ones by default) and of
    nested Strassen; ``quick`` for a few-second run (tests). ``progress`` hears (steps done,
    planned, the step now) as each step starts."""
    t0 = time.perf_counter()
    plan = QUICK if quick else FULL
    c = cores()
    names = [v for v in (versions or kernel_versions.available()) if v != "blas" and load(v) is not None]
    blas = versions is None or "blas" in versions
    step = _Steps(_step_count(len(names), c, plan, blas), progress)
    found, points = {}, {}
    for name in names:
        module = load(name)
        named = functools.partial(_named_step, step, name)
        rows, barrier_rows = measure_version(module, c, plan, named)
        fitted = fit_version(rows, barrier_rows, c, _pool_limit(module))
        found[name] = replace(fitted, kernels=probe_kernels(module, c, plan, named))
        points[name] = {"rows": rows, "barriers": barrier_rows}
    strassen = None
    if blas:
        step("blas gemm")
        found["blas"], t_mul = probe_blas(c, plan)
        add_version = "omp" if "omp" in found else next(iter(names), None)
        if add_version is not None:
            step("nested Strassen pool and additions")
            pool, add = probe_pool(c, plan), probe_add(load(add_version), c, plan)
            strassen = StrassenSPs(pool, t_mul, add, found[add_version].sw_cpu_line, probe_driver(c, plan, step))
    step.end()
    info = {"quick": quick, "seconds": time.perf_counter() - t0, "cores": c, "points": points}
    return ThreadSPs(c, found, strassen, info)


def _named_step(step: Callable[[str], None], name: str, what: str) -> None:
    step(f"{name} {what}")


def _step_count(versions: int, c: int, plan: ThreadPlan, blas: bool) -> int:
    """The steps ``probe_threads`` reports: per version one per P and two per kernel size; the BLAS
    gemm; nested Strassen's pool and additions, and one per driver size."""
    strassen = 1 + len(plan.nested_sizes) if blas and versions else 0
    return versions * (2 * c + 2 * len(plan.kernel_sizes)) + blas + strassen


def probe_and_save(path: str | os.PathLike, versions: list[str] | None = None, quick: bool = False,
                   progress: Progress | None = None) -> ThreadSPs:
    """``probe_threads`` then store the result in ``/threads/default`` of the database at ``path``."""
    sps = probe_threads(versions, quick, progress)
    save_threads(path, sps)
    return sps


__all__ = ["FULL", "QUICK", "ThreadPlan", "best_time", "cores", "fit_version", "probe_and_save", "probe_threads"]
