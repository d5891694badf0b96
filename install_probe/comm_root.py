"""Costs the root pays alone, measured by the comm probe: first touch of fresh memory (page
faults), packing of strided pieces, the finiteness check, the checked Fortran copy of a C-ordered
matrix."""
from __future__ import annotations

import sys
import time

import numpy as np

from autotune.geometry.layout import Axis
from autotune.models.movement import PACK_BACKEND

from .comm_ops import CacheFlush
from .comm_profile import FIRST_TOUCH_SIZES


def first_touch_costs(sizes=FIRST_TOUCH_SIZES, reps: int = 5) -> dict:
    """Seconds per byte that copying into a new array costs over copying into the same array again
    (caches flushed before each), by the array's bytes, median of ``reps``: the page faults a new
    result takes where a run writes it first. Measured by size because the allocator decides:
    glibc maps arrays above its mmap threshold (32 MiB at most) fresh each time, and hands smaller
    ones back already faulted, so the cost steps from about nothing to its full value there."""
    flush, out = CacheFlush(), {"bytes": [], "per_byte": []}
    for nbytes in sizes:
        src, extra = np.ones(nbytes // 8), []
        for _ in range(reps):
            flush()
            t0 = time.perf_counter()
            fresh = np.empty(nbytes // 8)
            np.copyto(fresh, src)
            t1 = time.perf_counter()
            flush()
            t2 = time.perf_counter()
            np.copyto(fresh, src)
            t3 = time.perf_counter()
            extra.append((t1 - t0) - (t3 - t2))
            del fresh
        out["bytes"].append(int(nbytes))
        out["per_byte"].append(max(float(np.median(extra)), 0.0) / nbytes)
    return out


def first_touch_in_fresh_process(sizes=FIRST_TOUCH_SIZES, reps: int = 5, timeout: float = 120.0) -> dict:
    """``first_touch_costs`` measured in a new Python process: which sizes come back already
    faulted depends on what the process freed before (a heap this probe has churned through
    hands even 32 MiB back warm), and a run's new result meets a heap like a fresh one's,
    in which glibc maps arrays past its threshold anew. In this process if that fails."""
    import json
    import subprocess

    from autotune.install_probe import child_env

    code = ("import json; from autotune.install_probe.comm_root import first_touch_costs as f; "
            f"print(json.dumps(f({tuple(int(x) for x in sizes)!r}, {int(reps)})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              check=True, env=child_env())
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return first_touch_costs(sizes, reps)


# Contiguous run lengths timed, plus whole columns: every block size the selector tries (64..512)
# and shorter ones. Measured, not interpolated: the cost can step between neighbouring run
# lengths, which a log-linear interpolation of a coarser set would smooth over.
PACK_RUNS = (8, 16, 32, 64, 128, 256, 512)
PACK_SPREAD = 1 << 19     # elements (4 MiB): steps of the repetitions' places and distances in memory


def pack_costs(n: int = 2048, reps: int = 7) -> dict:
    """Seconds per element of the root's block-cyclic packing (``take_padded``, distribution) and
    unpacking (``put_clipped``, collection) of an n x n column-major matrix split in two by rows,
    caches flushed first, by the length of the contiguous runs the split leaves: the block when
    the rows are split, the whole column (``n``) when not. Median of ``reps``, each at its own
    place in memory and its own distance between matrix and buffer (``PACK_SPREAD`` steps): how
    fast a copy runs depends on both, so one placement or one distance for every repetition
    would read a single, unrepresentative speed."""
    from autotune.kernels.dist_gemm import put_clipped, take_padded


    size, flush = n * n, CacheFlush()
    pool = np.ones(2 * size + 3 * reps * PACK_SPREAD)
    cols = np.arange(n, dtype=np.int64)
    out = {"runs": [], "take": [], "put": []}
    for run in (*PACK_RUNS, n):
        parts = 2 if run < n else 1
        rows = [np.ascontiguousarray(Axis(n, parts, run).indices(i), dtype=np.int64) for i in range(parts)]
        take, put = [], []
        for rep in range(reps + 1):                     # the first: compile and warm up
            at = max(rep - 1, 0) * PACK_SPREAD        # the matrix moves one step, the buffer two:
            mat = pool[at:at + size].reshape((n, n), order="F")     # their distance grows a step
            flat = pool[size + reps * PACK_SPREAD + 2 * at:][:size]
            flush()
            t0 = time.perf_counter()
            off = 0
            for r in rows:
                off = take_padded(mat, r, cols, flat, off)
            t1 = time.perf_counter()
            flush()
            t2 = time.perf_counter()
            off = 0
            for r in rows:
                put_clipped(mat, r, cols, flat[off:off + r.size * n].reshape((r.size, n), order="F"))
                off += r.size * n
            t3 = time.perf_counter()
            if rep:
                take.append((t1 - t0) / (n * n))
                put.append((t3 - t2) / (n * n))
        out["runs"].append(int(run))
        out["take"].append(float(np.median(take)))
        out["put"].append(float(np.median(put)))
    return out


def _cold_per_element(sides, reps: int, call) -> list[float]:
    """Seconds per element of ``call(a)`` on an n x n matrix of ones no cache holds, by side n:
    median of ``reps`` after a first run that loads and warms up."""
    flush, per = CacheFlush(), []
    for n in sides:
        a, times = np.ones((n, n), order="F"), []
        for _ in range(reps + 1):
            flush()
            t0 = time.perf_counter()
            call(a)
            times.append(time.perf_counter() - t0)
        per.append(float(np.median(times[1:])) / (n * n))
        del a
    return per


def check_costs(sides=(1024, 2048, 4096), reps: int = 3) -> dict:
    """Seconds per element of the root's finiteness check (``distributed.checks.all_finite``, one
    thread) of a Fortran-ordered n x n matrix no cache holds, by side n, median of ``reps``, for
    each available library with a gemv: a run checks the user's matrix before it moves it. A
    read out of memory, so a constant share of the add series' rate does not carry over between
    machines."""
    from autotune import backends
    from autotune.distributed.checks import all_finite

    out = {"sides": [int(n) for n in sides]}
    for name in backends.available():
        if name == PACK_BACKEND or not backends.get(name).supports("gemv"):   # no plan runs on it
            continue
        out[name] = _cold_per_element(sides, reps, lambda a, name=name: all_finite(a, name, 1))
    return out


def fortran_copy_costs(sides=(1024, 2048, 4096), reps: int = 3) -> dict:
    """Seconds per element of the root's checked Fortran copy of a C-ordered n x n matrix no
    cache holds (``kernels._front.fortran_copy``: a transposing copy and the finiteness check in
    one pass), by side n, median of ``reps``: what the distributed LU does to numpy's default
    layout before it moves it. The copy's memory comes from the block cache, as in a run."""
    from autotune.kernels import _front

    return {"sides": [int(n) for n in sides],
            "per": _cold_per_element(sides, reps, lambda a: _front.fortran_copy(a.T, True))}
