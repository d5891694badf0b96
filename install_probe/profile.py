"""Probe profiles (configs/*.yaml): what to measure, on which backends and threads, how carefully."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from autotune.backends import BACKENDS
from autotune.core.routines import PATTERNS

from .pools import SPECS as POOL_SPECS

BUILTIN = ("quick", "standard", "full")
BLAS_DEFAULT = "standard"   # autotune-install without --profile
COMM_DEFAULT = "quick"      # autotune-install --mpi without --profile: fits a few minutes at P = 4


class ProfileError(ValueError):
    """A profile is malformed; the message names the offending file and key."""


@dataclass(frozen=True)
class Timing:
    """Repetition policy: warm-up, min/max samples, the ±rel_tol stability rule, time caps, and
    how many passes re-time the points shorter than ``repass_seconds`` (each point keeps the lower
    median of its passes: the faster of two, the middle of three)."""

    min_reps: int = 3
    max_reps: int = 15
    rel_tol: float = 0.02
    min_sample_seconds: float = 2e-4
    point_budget_seconds: float = 2.0
    passes: int = 2
    repass_seconds: float = 0.1


@dataclass(frozen=True)
class Measure:
    """One block of a profile: routines x pattern x sizes x params on some backends/threads."""

    routines: tuple[str, ...]
    pattern: str
    sizes: tuple[int, ...]
    params: tuple[float, ...] = (0.0,)
    backends: tuple[str, ...] | None = None
    threads: tuple[int, ...] | None = None
    max_size: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    name: str
    backends: tuple[str, ...]
    threads: tuple[int, ...]
    timing: Timing
    measures: tuple[Measure, ...]
    source: str = ""
    time_limit_minutes: float | None = None   # the whole install, validation included; None: no limit
    pools: str | None = None                  # the thread-pool transition probe's spec (install_probe.pools)
    thread_sps: str | None = None             # the thread-SP probe's plan, quick or full (install_probe.threads)


def load_profile(name_or_path: str) -> Profile:
    """A built-in profile by name, or a YAML file by path; ProfileError on any problem."""
    data, source = read_profile_yaml(name_or_path, BUILTIN, "{}.yaml", "profile", ProfileError)
    return parse_profile(data, source)


def read_profile_yaml(name_or_path: str, builtin: tuple[str, ...], resource: str, kind: str,
                      error: type[Exception]) -> tuple[dict, str]:
    """(mapping, source) of a built-in ``kind`` (``resource.format(name)`` in autotune.configs)
    or of a YAML file; ``error`` for an unknown name, a missing file, bad YAML or a non-mapping."""
    if name_or_path in builtin:
        text = resources.files("autotune.configs").joinpath(resource.format(name_or_path)).read_text()
        source = f"built-in {kind} {name_or_path!r}"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise error(f"{kind} {name_or_path!r}: no such built-in profile ({', '.join(builtin)}) or file")
        text, source = path.read_text(), str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{source}: malformed YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{source}: expected a mapping at top level")
    return data, source


def parse_profile(data: dict, source: str = "<profile>") -> Profile:
    """Validate a profile mapping; every error names ``source`` and the key at fault."""
    unknown = set(data) - {"name", "backends", "threads", "timing", "measure", "description", "time_limit_minutes",
                           "pools", "thread_sps"}
    if unknown:
        raise ProfileError(f"{source}: unknown key(s) {sorted(unknown)}")
    backends = _backends(data.get("backends", list(BACKENDS)), f"{source}: backends")
    threads = _positive_ints(data.get("threads", [1]), f"{source}: threads")
    timing = _timing(data.get("timing", {}), f"{source}: timing")
    blocks = data.get("measure")
    if not isinstance(blocks, list) or not blocks:
        raise ProfileError(f"{source}: 'measure' must be a non-empty list")
    measures = tuple(_measure(b, f"{source}: measure[{i}]") for i, b in enumerate(blocks))
    limit = data.get("time_limit_minutes")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0):
        raise ProfileError(f"{source}: time_limit_minutes: {limit!r} must be a positive number")
    pools = data.get("pools")
    if pools is not None and pools not in POOL_SPECS:
        raise ProfileError(f"{source}: pools: {pools!r} is not one of {', '.join(POOL_SPECS)}")
    thread_sps = data.get("thread_sps")
    if thread_sps is not None and thread_sps not in ("quick", "full"):
        raise ProfileError(f"{source}: thread_sps: {thread_sps!r} is not one of quick, full")
    return Profile(str(data.get("name", Path(source).stem)), backends, threads, timing, measures, source,
                   None if limit is None else float(limit), pools, thread_sps)


def _backends(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{where}: expected a non-empty list of backend names")
    for b in value:
        if b not in BACKENDS:
            raise ProfileError(f"{where}: unknown backend {b!r} (known: {', '.join(BACKENDS)})")
    return tuple(value)


def _positive_ints(value, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{where}: expected a non-empty list of positive integers")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ProfileError(f"{where}: {v!r} is not a positive integer")
    return tuple(value)


def _timing(value, where: str) -> Timing:
    if not isinstance(value, dict):
        raise ProfileError(f"{where}: expected a mapping")
    fields = Timing.__dataclass_fields__
    for k, v in value.items():
        if k not in fields:
            raise ProfileError(f"{where}: unknown key {k!r} (known: {', '.join(fields)})")
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ProfileError(f"{where}.{k}: {v!r} must be a positive number")
    t = Timing(**{k: type(getattr(Timing, k))(v) for k, v in value.items()})
    if t.min_reps > t.max_reps:
        raise ProfileError(f"{where}: min_reps {t.min_reps} > max_reps {t.max_reps}")
    return t


def _measure(block, where: str) -> Measure:
    if not isinstance(block, dict):
        raise ProfileError(f"{where}: expected a mapping")
    allowed = {"routines", "pattern", "sizes", "params", "backends", "threads", "max_size"}
    if set(block) - allowed:
        raise ProfileError(f"{where}: unknown key(s) {sorted(set(block) - allowed)}")
    pattern = block.get("pattern", "square")
    if pattern not in PATTERNS:
        raise ProfileError(f"{where}.pattern: unknown pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    routines = block.get("routines")
    if not isinstance(routines, list) or not routines:
        raise ProfileError(f"{where}.routines: expected a non-empty list")
    for r in routines:
        if r not in PATTERNS[pattern].shapes:
            raise ProfileError(f"{where}.routines: unknown routine {r!r} for pattern {pattern!r} "
                               f"(known: {', '.join(PATTERNS[pattern].shapes)})")
    sizes = _positive_ints(block.get("sizes"), f"{where}.sizes")
    params = _params(block, pattern, where)
    max_size = block.get("max_size", {})
    if not isinstance(max_size, dict):
        raise ProfileError(f"{where}.max_size: expected a mapping backend -> size")
    for b, v in max_size.items():
        _backends([b], f"{where}.max_size")
        _positive_ints([v], f"{where}.max_size.{b}")
    return Measure(tuple(routines), pattern, sizes, params,
                   _backends(block["backends"], f"{where}.backends") if "backends" in block else None,
                   _positive_ints(block["threads"], f"{where}.threads") if "threads" in block else None,
                   dict(max_size))


def _params(block: dict, pattern: str, where: str) -> tuple[float, ...]:
    needs = PATTERNS[pattern].needs_param
    if "params" not in block:
        if needs:
            raise ProfileError(f"{where}.params: pattern {pattern!r} needs a list of parameters")
        return (0.0,)
    if not needs:
        raise ProfileError(f"{where}.params: pattern {pattern!r} takes no parameters")
    values = block["params"]
    if not isinstance(values, list) or not values:
        raise ProfileError(f"{where}.params: expected a non-empty list")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ProfileError(f"{where}.params: {v!r} must be a positive number")
    return tuple(float(v) for v in values)
