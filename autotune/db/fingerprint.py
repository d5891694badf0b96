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


def _cpuinfo_text() -> str:
    """/proc/cpuinfo read once and closed ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return fh.read()
    except OSError:
        return ""


def _cpuinfo(text: str) -> dict[str, str]:
    """The first value of each key of /proc/cpuinfo's text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def _physical_cores(text: str, info: dict[str, str], logical: int) -> int:
    """Cores per package times packages (the distinct ``physical id`` lines); ``logical`` if unknown."""
    packages = {line.split(":")[1] for line in text.splitlines() if line.startswith("physical id")}
    try:
        return int(info.get("cpu cores", "")) * max(1, len(packages))
    except ValueError:
        return logical


def cpu() -> dict[str, object]:
    """The CPU model, its logical CPUs, physical cores and flags digest, from one read of /proc/cpuinfo."""
    text = _cpuinfo_text()
    info = _cpuinfo(text)
    logical = os.cpu_count() or 1
    flags = " ".join(sorted(info.get("flags", "").split()))
    return {"cpu_model": info.get("model name", platform.processor() or platform.machine()),
            "flags_digest": hashlib.sha256(flags.encode()).hexdigest()[:16],
            "logical_cpus": logical, "physical_cores": _physical_cores(text, info, logical)}


def machine_fingerprint() -> dict[str, object]:
    """CPU model, flags digest, core/SMT layout and the numeric stack's versions."""
    import numpy
    import scipy

    hw = cpu()
    return {
        **hw,
        "threads_per_core": max(1, hw["logical_cpus"] // max(hw["physical_cores"], 1)),
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
