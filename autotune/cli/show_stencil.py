"""``autotune show``'s memory part: the STREAM bandwidth the probe measured and each stencil
kernel's rate as a fraction of it (a sweep streams 16 bytes a cell a step: one read, one write)."""
from __future__ import annotations

import numpy as np

from autotune.core.routines import STENCIL_FLOPS, WORD
from autotune.db.store import valid_mask

CELL_BYTES = 2 * WORD       # what a step of a sweep reads and writes per cell when nothing stays cached


def _largest(records: np.ndarray, routine: str, pattern: str) -> dict[tuple[str, int, float], tuple[int, float]]:
    """(backend, threads, param) -> (largest size measured, its k)."""
    sel = records[(records["routine"] == routine.encode()) & (records["pattern"] == pattern.encode())]
    out: dict = {}
    for r in sel:
        key = (r["backend"].decode(), int(r["threads"]), float(r["param"]))
        if key not in out or int(r["x"]) > out[key][0]:
            out[key] = (int(r["x"]), float(r["k"]))
    return out


def bandwidth(records: np.ndarray) -> dict[int, float]:
    """threads -> bytes per second of the triad at its largest size (beyond the caches)."""
    return {t: 1.0 / k for (_, t, _), (_, k) in _largest(records, "stream", "triad").items()}


def memory_lines(records: np.ndarray) -> list[str]:
    """The bandwidth lines and the stencil kernels against them (nothing when neither was measured)."""
    records = records[valid_mask(records)]
    lines = []
    for pattern in ("copy", "triad"):
        for (be, t, _), (x, k) in sorted(_largest(records, "stream", pattern).items()):
            mib = x * WORD / 2**20
            lines.append(f"  {pattern:<6} {be} t={t}: {1e-9 / k:6.1f} GB/s ({x} elements, {mib:.0f} MiB an array)")
    triad = bandwidth(records)
    for pattern in ("interior", "levels"):
        for (be, t, param), (x, k) in sorted(_largest(records, "stencil", pattern).items()):
            cells = 1.0 / (k * STENCIL_FLOPS)
            what = f"{int(param)} steps a call" if pattern == "levels" else "a step a call"
            share = f", {cells * CELL_BYTES / triad[t]:.2f}x the triad" if t in triad else ""
            lines.append(f"  stencil {be} t={t} ({what}, {x}x{x}): {cells * 1e-9:.2f} Gcells/s"
                         f" = {cells * CELL_BYTES * 1e-9:.1f} GB/s at {CELL_BYTES} B a cell{share}")
    if not lines:
        return []
    return ["", "Memory bandwidth (STREAM) and the stencil kernels at their largest measured block"
                " (beyond 1.0x the triad: the wavefront keeps the rows in flight in cache):"] + lines


__all__ = ["CELL_BYTES", "bandwidth", "memory_lines"]
