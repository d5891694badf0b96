"""The thread budget: the fewest threads any limit the user set allows, and which limit that is.

The limits: ``options(threads=)``, ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS``,
the thread count the program left on the libraries numpy and scipy call (threadpoolctl's
``threadpool_limits`` sets it; read through a function the backends layer installs with
``set_library_limit``), the cgroup CPU quota (v1 and v2, every level of the hierarchy) and the
affinity mask. The budget is asked on every tuned call: the variables and cgroup files are re-read
at most once a second, the library counts (a C call each) every time.
"""
from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PROC_CGROUP = "/proc/self/cgroup"       # this process's cgroup per hierarchy
MOUNTINFO = "/proc/self/mountinfo"      # where each cgroup hierarchy is mounted
REFRESH_SECONDS = 1.0                   # how long the variables and cgroup files read are trusted
NO_LIMIT = 1 << 30                       # the least count when no variable or quota is set


@dataclass(frozen=True)
class Budget:
    """A thread count and the limit it comes from (``explain`` prints both)."""

    threads: int
    source: str

    def __str__(self) -> str:
        return f"{self.threads} ({self.source})"


# The reader of the fewest threads the program left on its libraries: (count, library) or None.
LibraryLimit = Callable[[], "tuple[int, str] | None"]
_library: list[LibraryLimit | None] = [None]
# (environment limits, cgroup limits, their least), next read, the quota's CPUs (None: no quota)
_static: list = [((), (), NO_LIMIT), 0.0, None]


def set_library_limit(reader: LibraryLimit | None) -> None:
    """Install the reader of the thread count the program left on its libraries (None: none)."""
    _library[0] = reader


def thread_budget(asked: int | None, cores: int) -> Budget:
    """The smallest limit: ``asked`` (``options(threads=)``), the environment variables, ``cores``
    (the affinity mask), the cgroup quota, the libraries' count. A tie names the earlier in that
    order, so the libraries' count (by default the cores) is named only when it is below the rest."""
    env, quota, floor = static_limits()
    library = _library[0]() if _library[0] is not None else None
    least = min(cores, floor)
    if library is not None and library[0] < least:
        least = library[0]
    if asked is not None and asked <= least:
        return _options_limit(asked)
    if floor == least:
        named = [b for b in env if b.threads == least]
        if named or cores != least:
            return named[0] if named else quota[0]
    if cores == least:
        return _affinity_limit(cores)
    return _library_limit(least, library[1])


@functools.lru_cache(maxsize=64)
def _options_limit(threads: int) -> Budget:
    return Budget(threads, f"options(threads={threads})")


@functools.lru_cache(maxsize=64)
def _affinity_limit(cores: int) -> Budget:
    return Budget(cores, f"affinity mask of {cores} core{'s' if cores != 1 else ''}")


@functools.lru_cache(maxsize=64)
def _library_limit(threads: int, library: str) -> Budget:
    return Budget(threads, f"threadpoolctl limit on {library}")


def static_limits() -> tuple[tuple[Budget, ...], tuple[Budget, ...], int]:
    """The environment variables' and the cgroup quota's limits and their least count (NO_LIMIT if
    none), re-read at most once a second."""
    if time.monotonic() > _static[1]:
        env, tight = tuple(env_limits()), _tightest_quota(None, None)
        quotas = (_quota_budget(*tight),) if tight is not None else ()
        floor = min((b.threads for b in env + quotas), default=NO_LIMIT)
        _static[0], _static[1] = (env, quotas, floor), time.monotonic() + REFRESH_SECONDS
        _static[2] = None if tight is None else tight[0] / tight[1]
    return _static[0]


def cpu_share() -> float | None:
    """CPUs this process's cgroup quota gives (``cgroup_share``), read with the other limits at
    most once a second: every collective call's agreement asks."""
    static_limits()
    return _static[2]


def forget() -> None:
    """Read the variables and cgroup files again at the next budget (tests change them)."""
    _static[1] = 0.0


# ------------------------------------------------------------------------------------ environment

def env_limits(environ: Mapping[str, str] | None = None) -> list[Budget]:
    """Each thread-count variable set to a positive count (an OpenMP list's first level)."""
    environ = os.environ if environ is None else environ
    out = []
    for name in ENV_VARS:
        value = environ.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            out.append(Budget(int(value), f"{name}={int(value)}"))
    return out


# ----------------------------------------------------------------------------------------- cgroup

def cgroup_limit(proc_cgroup: str | os.PathLike | None = None, mountinfo: str | os.PathLike | None = None
                 ) -> Budget | None:
    """The tightest CPU quota over this process's cgroup and its ancestors (v1 ``cpu.cfs_quota_us``
    over ``cpu.cfs_period_us``, v2 ``cpu.max``) as ceil(quota / period) threads, at least 1, as
    the JVM counts it; None where no quota is set or the files cannot be read. The files default
    to ``PROC_CGROUP`` and ``MOUNTINFO``."""
    tight = _tightest_quota(proc_cgroup, mountinfo)
    return None if tight is None else _quota_budget(*tight)


def _quota_budget(quota: int, period: int) -> Budget:
    cpus = quota / period
    return Budget(max(1, -(-quota // period)), f"cgroup CPU quota {cpus:.3g} CPU{'s' if cpus > 1 else ''}")


def cgroup_share(proc_cgroup: str | os.PathLike | None = None, mountinfo: str | os.PathLike | None = None
                 ) -> float | None:
    """CPUs the tightest quota over this process's cgroup and its ancestors gives (0.5: half a
    core), None where no quota is set: what the processes of that cgroup share."""
    tight = _tightest_quota(proc_cgroup, mountinfo)
    return None if tight is None else tight[0] / tight[1]


def _tightest_quota(proc_cgroup, mountinfo) -> tuple[int, int] | None:
    try:
        groups = Path(PROC_CGROUP if proc_cgroup is None else proc_cgroup).read_text()
        mounts = Path(MOUNTINFO if mountinfo is None else mountinfo).read_text()
    except OSError:
        return None
    quotas = [q for leaf, top, v2 in cgroup_dirs(groups, mounts) for q in _level_quotas(leaf, top, v2)]
    return min(quotas, key=lambda qp: qp[0] / qp[1]) if quotas else None


def cgroup_dirs(groups: str, mounts: str) -> list[tuple[Path, Path, bool]]:
    """(directory of this process's cgroup, its hierarchy's mount point, is cgroup v2) for the v1
    ``cpu`` and the v2 hierarchy, from /proc/self/cgroup's and /proc/self/mountinfo's text."""
    own = {}
    for line in groups.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            hid, controllers, path = parts
            if hid == "0" and not controllers:
                own[True] = path
            elif "cpu" in controllers.split(","):
                own[False] = path
    out = []
    for root, point, v2 in _cgroup_mounts(mounts):
        path = own.get(v2)
        rel = _relative(path, root) if path is not None else None
        if rel is not None and all(v != v2 for *_, v in out):
            out.append((Path(point + rel), Path(point), v2))
    return out


def _cgroup_mounts(mounts: str) -> list[tuple[str, str, bool]]:
    """(root, mount point, is v2) of each cgroup2 mount and each v1 mount with the cpu controller."""
    out = []
    for line in mounts.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2].split(",")
        if fstype == "cgroup2" or (fstype == "cgroup" and "cpu" in options):
            out.append((_unescape(fields[3]), _unescape(fields[4]), fstype == "cgroup2"))
    return out


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _relative(path: str, root: str) -> str | None:
    """``path`` (from /proc/self/cgroup) below the mount's ``root``: "" for the root itself, None
    when the mount does not show it (a cgroup outside this namespace's view)."""
    if ".." in path.split("/"):
        return None
    if root == "/":
        return path.rstrip("/")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")):].rstrip("/")
    return None


def _level_quotas(leaf: Path, top: Path, v2: bool) -> list[tuple[int, int]]:
    """(quota, period) in microseconds set at ``leaf`` and each ancestor up to the mount point
    ``top`` (a parent's quota caps its children)."""
    out, d = [], leaf
    while True:
        qp = _quota_v2(d) if v2 else _quota_v1(d)
        if qp is not None:
            out.append(qp)
        if d == top or top not in d.parents:
            return out
        d = d.parent


def _quota_v1(d: Path) -> tuple[int, int] | None:
    try:
        quota, period = int((d / "cpu.cfs_quota_us").read_text()), int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return (quota, period) if quota > 0 and period > 0 else None


def _quota_v2(d: Path) -> tuple[int, int] | None:
    try:
        quota, period = (d / "cpu.max").read_text().split()[:2]
        qp = int(quota), int(period)
    except (OSError, ValueError):       # "max 100000" (no quota) or no such file (the root)
        return None
    return qp if qp[0] > 0 and qp[1] > 0 else None
