"""Machine fingerprint: what must match for measured system parameters to apply here."""
from __future__ import annotations

import hashlib
import json
import os
import platform

from autotune._version import __version__

# Keys whose change makes a database foreign (its timings describe another machine or stack).
MATCH_KEYS = ("cpu_model", "flags_digest", "logical_cpus", "physical_cores", "threads_per_core",
              "numpy", "scipy", "autotune")


def _cpuinfo() -> dict[str, str]:
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def _physical_cores(info: dict[str, str], logical: int) -> int:
    try:
        return int(info.get("cpu cores", "")) * max(1, len({
            line.split(":")[1] for line in open("/proc/cpuinfo") if line.startswith("physical id")}))
    except (ValueError, OSError):
        return logical


def machine_fingerprint() -> dict[str, object]:
    """CPU model, flags digest, core/SMT layout and the numeric stack's versions."""
    import numpy
    import scipy

    info = _cpuinfo()
    logical = os.cpu_count() or 1
    physical = _physical_cores(info, logical)
    flags = " ".join(sorted(info.get("flags", "").split()))
    return {
        "cpu_model": info.get("model name", platform.processor() or platform.machine()),
        "flags_digest": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "logical_cpus": logical,
        "physical_cores": physical,
        "threads_per_core": max(1, logical // max(physical, 1)),
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "autotune": __version__,
    }


def digest(fingerprint: dict[str, object]) -> str:
    """Stable short hash of the fields that must match (MATCH_KEYS)."""
    core = {k: fingerprint.get(k) for k in MATCH_KEYS}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:20]


def mismatches(stored: dict[str, object], current: dict[str, object]) -> list[str]:
    """Human-readable list of the fields in which two fingerprints differ."""
    return [f"{k}: {stored.get(k)!r} != {current.get(k)!r}" for k in MATCH_KEYS
            if stored.get(k) != current.get(k)]


def stale_backends(backends: dict[str, dict]) -> dict[str, str]:
    """Backends whose shipping package changed since they were measured (name -> reason).

    Cheap: compares installed distribution versions, without loading any BLAS library.
    """
    from autotune.backends.base import package_info

    out = {}
    for name, info in backends.items():
        dist, was = info.get("package"), info.get("package_version", "")
        if dist:
            now = package_info(dist)["package_version"]
            if now != was:
                out[name] = f"{dist} {was or 'absent'} -> {now or 'not installed'}"
    return out
