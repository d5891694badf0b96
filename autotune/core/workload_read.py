"""Reading a synthetic workload spec (003 §3.2; docs/usage.md#synthetic): a YAML file, YAML text or a
mapping, read strictly (UTF-8, at most MAX_SPEC_BYTES, MAX_DEPTH levels, no repeated key) into a
``workload.Spec`` that keeps the source's rules and the bounds (``workload.LIMITS``); every
problem is one line of a ``SpecError``."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from autotune.core.workload import (
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    MAX_SPEC_BYTES,
    MAX_STAGES,
    MAX_WORKERS,
    RULES,
    SHOW,
    STAGE_KEYS,
    TOP_KEYS,
    WORK_KINDS,
    WORKER_KEYS,
    Pipeline,
    Spec,
    SpecError,
    Stage,
    limit_problem,
    parse_type,
    spec_problems,
)


def load_spec(source) -> Spec:
    """A checked ``Spec`` from a YAML file path, YAML text or a mapping; SpecError lists every
    problem (one line each, naming the rule or the bound), nothing is planned from a bad spec."""
    if isinstance(source, Mapping):
        data, name = source, ""
    else:
        path = _as_path(source)
        text, name = (_read_file(path), path.stem) if path is not None else (_sized(str(source)), "")
        data = _parse(text)
    if not isinstance(data, Mapping):
        raise SpecError(["a spec is a mapping of its parameters (task_bytes, initial_messages, ...)"])
    problems: list[str] = []
    spec = _read(data, problems, name)
    if spec is not None:
        problems += spec_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _as_path(source) -> Path | None:
    """``source`` as a file to read: a path object, or a one-line string naming a spec file."""
    if isinstance(source, os.PathLike):
        return Path(source)
    text = str(source)
    if "\n" in text or "\0" in text or len(text) >= 4096:
        return None
    path = Path(text)
    try:
        return path if path.suffix in (".yaml", ".yml", ".json") or path.exists() else None
    except (OSError, ValueError):
        return None


def _read_file(path: Path) -> str:
    """The file's text (UTF-8, at most MAX_SPEC_BYTES); SpecError with one line if it is not that."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise SpecError([f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"]) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError([limit_problem("spec", f"the file has more than {MAX_SPEC_BYTES:,} bytes")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([f"not UTF-8 text: byte {raw[exc.start]:#04x} at offset {exc.start}"]) from None


class _SpecLoader(yaml.SafeLoader):
    """yaml's safe loader that rejects a repeated key (yaml keeps the last) and nesting deeper than
    MAX_DEPTH (its composer recurses per level)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels",
                                              self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue                      # unhashable: the base class says so
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {SHOW.repr(key)} repeated, first on line {first.start_mark.line + 1}",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """yaml's error on one line: what, and where (without its quote of the text)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    what = " ".join(" ".join(str(p).split()) for p in (exc.context, exc.problem) if p)
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what


def _sized(text: str) -> str:
    """Spec text given as text (a file's is bounded as it is read): SpecError with one line if it
    is over MAX_SPEC_BYTES in UTF-8."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([limit_problem("spec", f"the spec has more than {MAX_SPEC_BYTES:,} bytes")])
    return text


def _parse(text: str):
    """The YAML document in ``text``; SpecError with one line if it is not one."""
    try:
        return yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as exc:
        raise SpecError([f"not YAML: {_yaml_problem(exc)}"]) from None
    except RecursionError:
        raise SpecError([limit_problem("spec", "it nests (or merges) too deeply")]) from None
    except (ValueError, OverflowError) as exc:     # an int of over 4,300 digits, a date like 2020-13-45
        raise SpecError([f"not YAML: a value cannot be read ({exc})"]) from None


def _number(data: Mapping, key: str, where: str, problems: list[str], integer: bool, default=None):
    """``data[key]`` as an int / finite float, or ``default``; a wrong type is a problem (None)."""
    if key not in data:
        if default is None:
            problems.append(f"{where}{key} is missing")
        return default
    value = data[key]
    ok = isinstance(value, numbers.Integral) if integer else isinstance(value, numbers.Real)
    if ok and not isinstance(value, bool) and (integer or _finite(value)):
        return int(value) if integer else float(value)
    problems.append(f"{where}{key} must be {'an integer' if integer else 'a finite number'}, not {SHOW.repr(value)}")
    return None


def _finite(value) -> bool:
    """Is a real number finite as a float (a huge int is not)?"""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _unknown(data: Mapping, allowed: set[str], where: str, problems: list[str]) -> None:
    for key in data:
        if key not in allowed:
            problems.append(f"{where}unknown parameter {SHOW.repr(key)} (known: {', '.join(sorted(allowed))})")


def _positive(value, rule: int, what: str, problems: list[str]) -> None:
    if value is not None and value <= 0:
        problems.append(f"rule {rule} ({RULES[rule]}): {what} is {value:g}")


def _read(data: Mapping, problems: list[str], name: str) -> Spec | None:
    _unknown(data, TOP_KEYS, "", problems)
    task = _number(data, "task_bytes", "", problems, True)
    initial = _number(data, "initial_messages", "", problems, True)
    iterations = _number(data, "iterations", "", problems, True)
    seed = _number(data, "seed", "", problems, True, 0)
    _positive(task, 2, "task_bytes", problems)
    _positive(initial, 3, "initial_messages", problems)
    if iterations is not None and iterations <= 0:
        problems.append(f"iterations must be > 0, not {iterations}")
    if seed is not None and seed < 0:
        problems.append(limit_problem("seed", f"seed is {seed} (numpy's generators take non-negative seeds)"))
    work = data.get("work", "wait")
    if not isinstance(work, str) or work not in WORK_KINDS:
        problems.append(f"work must be one of {', '.join(WORK_KINDS)}, not {SHOW.repr(work)}")
    label = data.get("name") or name
    if not isinstance(label, str | int | float):
        problems.append(f"name must be a string, not {SHOW.repr(label)}")
    defaults = {"stages": _number(data, "stages", "", problems, True, 0),
                "reply_bytes": _number(data, "reply_bytes", "", problems, True, 0),
                "mean": _number(data, "mean", "", problems, False, 0.0),
                "spread": _number(data, "spread", "", problems, False, 0.0)}
    listed = _listed(data.get("workers"), "workers", MAX_WORKERS, "", problems)
    if listed is None:
        return None
    _positive(listed[0], 1, "the number of workers" if isinstance(data["workers"], list) else "workers", problems)
    workers = listed[1]
    pipelines = [_worker(w, i, defaults, problems) for i, w in enumerate(workers)]
    if problems:
        return None
    return Spec(task, initial, iterations, tuple(pipelines), work, seed, str(label))


def _listed(value, what: str, most: int, where: str, problems: list[str]) -> tuple[int, list] | None:
    """How many workers / stages ``value`` (a count, or a list) gives, and them as a list (a count
    gives empty mappings, which take the defaults); None after a problem, nothing built past ``most``."""
    if isinstance(value, list):
        n = len(value)
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        n = int(value)
    else:
        problems.append(f"{where}{what} must be a count or a list of {what}, not {SHOW.repr(value)}")
        return None
    if n > most:
        problems.append(limit_problem(what, f"{where}{what} is {n:,}"))
        return None
    return n, value if isinstance(value, list) else [{}] * max(n, 0)


def _worker(data, i: int, defaults: dict, problems: list[str]) -> Pipeline | None:
    where = f"worker {i}: "
    if not isinstance(data, Mapping):
        problems.append(f"{where}must be a mapping (stages, reply_bytes, mean, spread), not {SHOW.repr(data)}")
        return None
    _unknown(data, WORKER_KEYS, where, problems)
    reply = _number(data, "reply_bytes", where, problems, True, defaults["reply_bytes"])
    _positive(reply, 5, f"worker {i}'s reply_bytes", problems)
    if reply is not None and reply > MAX_MESSAGE_BYTES:
        problems.append(limit_problem("bytes", f"worker {i}'s reply_bytes is {reply:,}"))
    own = {k: _number(data, k, where, problems, False, defaults[k]) for k in ("mean", "spread")}
    listed = _listed(data.get("stages", defaults["stages"]), "stages", MAX_STAGES, where, problems)
    if listed is None:
        return None
    _positive(listed[0], 4, f"worker {i}'s number of stages", problems)
    stages = listed[1]
    out = [_stage(s, f"worker {i} stage {j}", own, problems) for j, s in enumerate(stages)]
    return None if reply is None or None in out else Pipeline(tuple(out), reply)


def _stage(data, where: str, defaults: dict, problems: list[str]) -> Stage | None:
    if not isinstance(data, Mapping):
        problems.append(f"{where}: must be a mapping (mean, spread, type), not {SHOW.repr(data)}")
        return None
    _unknown(data, STAGE_KEYS, where + ": ", problems)
    mean = _number(data, "mean", where + ": ", problems, False, defaults["mean"])
    spread = _number(data, "spread", where + ": ", problems, False, defaults["spread"])
    _positive(mean, 6, f"{where}'s mean", problems)
    if mean is not None and spread is not None and not 0 <= spread <= max(mean, 0):
        problems.append(f"rule 7 ({RULES[7]}): {where} has spread {spread:g} and mean {mean:g}")
    try:
        kind = parse_type(data.get("type", "IND"))
    except SpecError as exc:
        problems.append(f"{exc.problems[0]} of {where}")
        return None
    return None if mean is None or spread is None else Stage(mean, spread, **kind)


