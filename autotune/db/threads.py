"""Thread system parameters of the kernel versions (docs/models.md#multicore): ``/threads/default``.

Per kernel version (``"numba"``, ``"omp"``, ``"blas"``): ``T_gen`` (seconds to start one thread of a
parallel region), ``T_work`` (seconds per elementary operation), ``T_syn`` (seconds per thread at a
barrier) and ``T_sw/T_cpu`` (oversubscription ratio, 001 eqs. 6.2, 6.4, 6.6), constant and as a
line in P. For nested Strassen (001 eqs. 6.9-6.12): ``T_gen`` of the worker pool and ``T_mul``,
``T_add``, ``T_sw/T_cpu`` as lines ``a + b P``. ``install_probe.threads`` measures them; missing or
damaged data loads as an empty ``ThreadSPs`` (nothing measured), with at most one warning.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .location import resolve
from .store import read_member, replace_group

GROUP = "threads"
MEMBER = "default"
REBUILD = "autotune-install --db {path}"

Line = tuple[float, float]  # a + b P


def line_at(line: Line, p) -> np.ndarray:
    """Evaluate a line ``a + b P`` at thread counts ``p``, never below 0 (a fitted line may cross it)."""
    return np.maximum(line[0] + line[1] * np.asarray(p, dtype=float), 0.0)


@dataclass(frozen=True)
class VersionSPs:
    """One kernel version's thread SPs (seconds; the ratio is dimensionless)."""

    t_gen: float
    t_work: float
    t_syn: float = 0.0
    sw_cpu: float = 0.0                       # T_sw / T_cpu, constant (first approximation, 001 §6.4.1)
    sw_cpu_line: Line = (0.0, 0.0)            # T_sw / T_cpu = a + b P (001 Table 6.8)
    max_threads: int = 0                      # most threads it runs at once (0: no limit)
    # Per loop kernel ("jacobi", "add", "add_after_blas"): {"sizes": [n], "threads": [P], "seconds":
    # [[per element of one thread]]}: measured on the kernel itself, at P up to 2C where it runs
    # oversubscribed (so its own T_sw shows), else P <= C (see kernel_time).
    kernels: dict = field(default_factory=dict, compare=False, hash=False)

    def ratio(self, p, linear: bool = False) -> np.ndarray:
        """T_sw/T_cpu at thread counts ``p``: the constant, or the line when ``linear``."""
        return line_at(self.sw_cpu_line, p) if linear else np.full(np.shape(p), self.sw_cpu)


def kernel_time(sps: VersionSPs, kernel: str, n, p) -> np.ndarray | None:
    """Seconds per element of one thread of ``kernel`` on ``n x n`` operands with ``p`` threads busy:
    interpolated in log n between the probe's sizes (clamped at the ends) at the measured thread
    count nearest ``p`` from below (beyond the table: its largest count, and the caller applies
    oversubscription, ``models.multicore.kernel_seconds``); None when the kernel was not measured."""
    table = sps.kernels.get(kernel)
    if not table:
        return None
    sizes, threads = np.asarray(table["sizes"], float), np.asarray(table["threads"], float)
    secs = np.asarray(table["seconds"], float)                       # [size][thread count]
    n, p = np.broadcast_arrays(np.asarray(n, float), np.asarray(p, float))
    col = np.clip(np.searchsorted(threads, p, side="right") - 1, 0, threads.size - 1)
    lx = np.log(np.maximum(n, 1.0))
    logs = np.log(secs)
    out = [np.interp(x, np.log(sizes), logs[:, j]) for x, j in zip(lx.ravel(), col.ravel(), strict=True)]
    return np.exp(np.array(out)).reshape(n.shape)


@dataclass(frozen=True)
class StrassenSPs:
    """SPs of nested-parallel Strassen (001 eqs. 6.9-6.12): lines in the total thread count P."""

    t_gen: float                              # starting one worker of the P1 pool (seconds)
    t_mul: Line                               # seconds per gemm flop of one thread with P busy
    t_add: Line                               # seconds per addition element of one thread with P busy
    sw_cpu: Line = (0.0, 0.0)                 # T_sw / T_cpu
    # The driver's own extra beyond its products, per element of C: {"sizes": [n], "configs":
    # [[P1, P2, levels]], "seconds": [[per element, per config]]}, measured on the driver (see driver_extra).
    driver: dict = field(default_factory=dict, compare=False, hash=False)


def driver_extra(sps: StrassenSPs, p1: int, p2: int, levels: int, n) -> float | None:
    """Seconds per element of C that nested Strassen's driver spends beyond its 7 products at
    (P1, P2, levels) on n x n (operand and result additions, fresh buffers, the pool, the BLAS
    threads' spinning between calls): interpolated linearly in log n between the probe's sizes,
    clamped at the ends, never below 0; None when that configuration was not measured."""
    table = sps.driver
    configs = [tuple(c) for c in table.get("configs", ())]
    if (p1, p2, levels) not in configs:
        return None
    col = np.asarray(table["seconds"], float)[:, configs.index((p1, p2, levels))]
    x = np.log(np.maximum(float(n), 1.0))
    return max(float(np.interp(x, np.log(np.asarray(table["sizes"], float)), col)), 0.0)


@dataclass(frozen=True)
class ThreadSPs:
    """All thread SPs of one machine; empty (``measured`` False) when nothing was stored."""

    cores: int = 0
    versions: dict[str, VersionSPs] = field(default_factory=dict)
    strassen: StrassenSPs | None = None
    info: dict = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return bool(self.versions)


def _to_json(sps: ThreadSPs) -> dict:
    return {"cores": sps.cores, "versions": {k: asdict(v) for k, v in sps.versions.items()},
            "strassen": asdict(sps.strassen) if sps.strassen else None}


def _version(d: dict) -> VersionSPs:
    d = dict(d)
    d["sw_cpu_line"] = tuple(float(x) for x in d.get("sw_cpu_line", (0.0, 0.0)))
    for name, table in d.get("kernels", {}).items():
        secs = np.asarray(table["seconds"], float)
        if secs.shape != (len(table["sizes"]), len(table["threads"])) or not np.all(np.isfinite(secs) & (secs > 0)):
            raise ValueError(f"malformed kernel table {name!r}")
    return VersionSPs(**d)


def _strassen(d: dict | None) -> StrassenSPs | None:
    if d is None:
        return None
    driver = d.get("driver") or {}
    if driver:
        secs = np.asarray(driver["seconds"], float)
        if secs.shape != (len(driver["sizes"]), len(driver["configs"])) or not np.all(np.isfinite(secs)):
            raise ValueError("malformed nested-Strassen driver table")
    return StrassenSPs(float(d["t_gen"]), *(tuple(float(x) for x in d[k]) for k in ("t_mul", "t_add", "sw_cpu")),
                       driver)


def from_json(d: dict, info: dict | None = None) -> ThreadSPs:
    """Rebuild ``ThreadSPs`` from its stored JSON form; raises on malformed data."""
    versions = {str(k): _version(v) for k, v in d["versions"].items()}
    for name, v in versions.items():
        values = (v.t_gen, v.t_work, v.t_syn, v.sw_cpu, *v.sw_cpu_line)
        if not all(np.isfinite(x) for x in values):
            raise ValueError(f"non-finite thread SP for version {name!r}")
    return ThreadSPs(int(d["cores"]), versions, _strassen(d.get("strassen")), dict(info or {}))


def save_threads(path: str | os.PathLike, sps: ThreadSPs) -> None:
    """Write the machine's thread SPs to ``/threads/default``, keeping the rest of the database."""
    def write(g) -> None:
        g.attrs["sps"] = json.dumps(_to_json(sps))
        g.attrs["info"] = json.dumps(sps.info, sort_keys=True, default=str)
        g.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    replace_group(path, GROUP, MEMBER, write)


def load_threads(path: str | os.PathLike | None = None) -> ThreadSPs:
    """The stored thread SPs (default database when ``path`` is None); an empty ``ThreadSPs`` when
    absent, and when damaged with one RuntimeWarning. Cached per file version; never raises."""
    return read_member(resolve(path), GROUP, MEMBER, _parse, ThreadSPs, "thread SPs", REBUILD)


def _parse(g) -> ThreadSPs:
    return from_json(json.loads(g.attrs["sps"]), json.loads(g.attrs.get("info", "{}")))


__all__ = ["GROUP", "Line", "StrassenSPs", "ThreadSPs", "VersionSPs", "driver_extra", "kernel_time", "line_at",
           "load_threads", "save_threads"]
