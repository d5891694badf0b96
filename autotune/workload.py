"""Synthetic master/worker-of-pipelines workloads (003): the spec, its checks and its plan.

A spec (YAML, 003 §3.2's parameters under English names) describes a master that sends each
worker ``iterations`` batches of ``initial_messages`` tasks; each worker is a pipeline of stages
with a mean time and a spread, each stage independent (IND), the head of a group of k stages
sharing one host (AGR_k) or replicated k times behind a communication manager (REP_k). ``plan``
turns a valid spec into processes, processors and the message counts a run must show
(docs/usage.md#synthetic). Every count is bounded by what the runner, the model and the tuner can
do (``LIMITS``), checked by ``load_spec`` for check, tune and run alike.
"""
from __future__ import annotations

import math
import numbers
import os
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

WORK_KINDS = ("wait", "compute")
TOP_KEYS = {"name", "task_bytes", "initial_messages", "iterations", "workers", "stages", "reply_bytes",
            "mean", "spread", "work", "seed"}
WORKER_KEYS = {"stages", "reply_bytes", "mean", "spread"}
STAGE_KEYS = {"mean", "spread", "type"}
_TYPE = re.compile(r"^(IND|AGR|REP)(?:_(-?\d{1,18}))?$")

# The source's ten checks (003 §4.2, Cuadro 6), numbered as there; every violation names its rule.
RULES = {
    1: "workers > 0",
    2: "task_bytes > 0",
    3: "initial_messages > 0",
    4: "every worker has stages > 0",
    5: "every worker's reply_bytes > 0",
    6: "every stage's mean > 0",
    7: "every stage's 0 <= spread <= mean",
    8: "every stage type is IND, AGR_k or REP_k",
    9: "a group or replication degree k >= 2",
    10: "a group fits the worker's stages and no stage is in two",
}

# What the runner, the model and the tuner can do; ``load_spec`` checks these for check, tune and run alike.
MAX_SPEC_BYTES = 1 << 16       # a spec at every bound below written out in full is a few KB
MAX_DEPTH = 16                 # a spec nests 5 levels; yaml's composer recurses once per level
MAX_WORKERS = 8                # the tuner screens every worker's options, up to 3 s each
MAX_STAGES = 8                 # per worker: the tuner's options grow about 4^stages (select.pipeline.MAX_OPTIONS)
MAX_DEGREE = 64                # k of AGR_k / REP_k: a REP_k takes k processors, an AGR_k k ranks per processor
MAX_LAUNCH = 1024              # ranks a run launches (plan.launch): one MPI rank, its buffers and its poll loop each
MAX_INITIAL_MESSAGES = 1000    # tasks per batch: the model steps through a batch task by task at a replicated stage
MAX_TASKS = 50_000             # iterations x initial_messages (per worker): the model keeps 64 draws of each (25 MB)
MAX_STAGE_TASKS = 400_000      # tasks x stages over the workers: the model's steps and the run's task messages
MAX_MESSAGE_BYTES = 1 << 24    # a batch (task_bytes x initial_messages) or a reply: one MPI message, 3 buffers per rank
MAX_STAGE_SECONDS = 1e6        # a stage's mean + spread: the runner sleeps it (time.sleep's range; 11.6 days)

LIMITS = {
    "spec": f"a spec file <= {MAX_SPEC_BYTES:,} bytes and <= {MAX_DEPTH} levels deep",
    "workers": f"workers <= {MAX_WORKERS}",
    "stages": f"stages per worker <= {MAX_STAGES}",
    "degree": f"k of AGR_k and REP_k <= {MAX_DEGREE}",
    "launch": f"ranks to launch <= {MAX_LAUNCH:,}",
    "initial_messages": f"initial_messages <= {MAX_INITIAL_MESSAGES:,}",
    "tasks": f"iterations x initial_messages <= {MAX_TASKS:,}",
    "stage_tasks": f"tasks x stages summed over the workers <= {MAX_STAGE_TASKS:,}",
    "bytes": f"a batch (task_bytes x initial_messages) and reply_bytes <= {MAX_MESSAGE_BYTES:,}",
    "seconds": f"a stage's mean + spread <= {MAX_STAGE_SECONDS:g} s",
    "seed": "seed >= 0",
}
_show = reprlib.Repr()
_show.maxstring = _show.maxother = 40


def _limit(name: str, detail: str) -> str:
    """One problem line naming the bound it breaks."""
    return f"limit ({LIMITS[name]}): {detail}"


class PipelineError(ValueError):
    """The plan cannot run on these ranks (raised alike on every rank)."""


class SpecError(ValueError):
    """A spec that cannot be planned: one line per problem, each naming its rule (one message:
    one problem, as the other ranks of a collective run rebuild it)."""

    def __init__(self, problems: list[str] | str):
        self.problems = _one_per_rule([problems] if isinstance(problems, str) else problems)
        super().__init__("; ".join(self.problems))


def _one_per_rule(problems: list[str]) -> list[str]:
    """One line per violated rule (its first case, and how many more), other problems as they are."""
    out, more, where = [], {}, {}
    for line in problems:
        rule = line.split(")", 1)[0] if line.startswith(("rule ", "limit ")) else None
        if rule is None or rule not in where:
            if rule is not None:
                where[rule] = len(out)
            out.append(line)
        else:
            more[rule] = more.get(rule, 0) + 1
    for rule, k in more.items():
        out[where[rule]] += f" (and {k} more)"
    return out


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its time is drawn uniformly from mean ± spread seconds (003's
    ftiempomedio ± fvarianza); ``kind`` IND, AGR (heads ``degree`` stages on one host) or REP."""

    mean: float
    spread: float = 0.0
    kind: str = "IND"
    degree: int = 1

    @property
    def type(self) -> str:
        return "IND" if self.kind == "IND" else f"{self.kind}_{self.degree}"


@dataclass(frozen=True)
class Pipeline:
    """One worker: its stages in order and the size of the reply its last stage sends per task."""

    stages: tuple[Stage, ...]
    reply_bytes: int


@dataclass(frozen=True)
class Spec:
    """A whole workload (003 §3.2): the configuration is the stages' types."""

    task_bytes: int
    initial_messages: int
    iterations: int
    workers: tuple[Pipeline, ...]
    work: str = "wait"
    seed: int = 0
    name: str = ""

    @property
    def tasks(self) -> int:
        """Tasks each worker processes in the run."""
        return self.iterations * self.initial_messages

    @property
    def configuration(self) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(s.type for s in w.stages) for w in self.workers)

    def configured(self, types) -> Spec:
        """This workload with each worker's stage types replaced by ``types`` (checked)."""
        workers = []
        for w, row in zip(self.workers, types, strict=True):
            stages = tuple(replace(s, **parse_type(t)) for s, t in zip(w.stages, row, strict=True))
            workers.append(replace(w, stages=stages))
        spec = replace(self, workers=tuple(workers))
        problems = _structure(spec) or _bounds(spec)
        if problems:
            raise SpecError(problems)
        return spec

    def to_dict(self) -> dict:
        """The spec as ``load_spec`` reads it."""
        return {"name": self.name, "task_bytes": self.task_bytes, "initial_messages": self.initial_messages,
                "iterations": self.iterations, "work": self.work, "seed": self.seed,
                "workers": [{"reply_bytes": w.reply_bytes,
                             "stages": [{"mean": s.mean, "spread": s.spread, "type": s.type} for s in w.stages]}
                            for w in self.workers]}


def parse_type(text) -> dict:
    """``kind`` and ``degree`` of a stage type ("IND", "AGR_k", "REP_k"); SpecError (rule 8) if none."""
    m = _TYPE.match(text.strip().upper()) if isinstance(text, str) else None
    if m is None:
        raise SpecError([f"rule 8 ({RULES[8]}): stage type {_show.repr(text)}"])
    kind, k = m.group(1), m.group(2)
    return {"kind": kind, "degree": 1 if k is None and kind == "IND" else int(k) if k is not None else 0}


# -- reading and checking -----------------------------------------------------------------------------

def load_spec(source) -> Spec:
    """A checked ``Spec`` from a YAML file path, YAML text or a mapping; SpecError lists every
    problem (one line each, naming the rule or the bound), nothing is planned from a bad spec."""
    if isinstance(source, Mapping):
        data, name = source, ""
    else:
        path = _as_path(source)
        text, name = (_read_file(path), path.stem) if path is not None else (str(source), "")
        data = _parse(text)
    if not isinstance(data, Mapping):
        raise SpecError(["a spec is a mapping of its parameters (task_bytes, initial_messages, ...)"])
    problems: list[str] = []
    spec = _read(data, problems, name)
    if spec is not None:
        problems += _structure(spec) or _bounds(spec)
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
        raise SpecError([_limit("spec", f"the file has more than {MAX_SPEC_BYTES:,} bytes")])
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
                        None, None, f"key {_show.repr(key)} repeated, first on line {first.start_mark.line + 1}",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """yaml's error on one line: what, and where (without its quote of the text)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    what = " ".join(" ".join(str(p).split()) for p in (exc.context, exc.problem) if p)
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what


def _parse(text: str):
    """The YAML document in ``text``; SpecError with one line if it is not one."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise SpecError([_limit("spec", f"the spec has more than {MAX_SPEC_BYTES:,} bytes")])
    try:
        return yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as exc:
        raise SpecError([f"not YAML: {_yaml_problem(exc)}"]) from None
    except RecursionError:
        raise SpecError([_limit("spec", "it nests (or merges) too deeply")]) from None
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
    problems.append(f"{where}{key} must be {'an integer' if integer else 'a finite number'}, not {_show.repr(value)}")
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
            problems.append(f"{where}unknown parameter {_show.repr(key)} (known: {', '.join(sorted(allowed))})")


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
        problems.append(_limit("seed", f"seed is {seed} (numpy's generators take non-negative seeds)"))
    work = data.get("work", "wait")
    if not isinstance(work, str) or work not in WORK_KINDS:
        problems.append(f"work must be one of {', '.join(WORK_KINDS)}, not {_show.repr(work)}")
    label = data.get("name") or name
    if not isinstance(label, str | int | float):
        problems.append(f"name must be a string, not {_show.repr(label)}")
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
        problems.append(f"{where}{what} must be a count or a list of {what}, not {_show.repr(value)}")
        return None
    if n > most:
        problems.append(_limit(what, f"{where}{what} is {n:,}"))
        return None
    return n, value if isinstance(value, list) else [{}] * max(n, 0)


def _worker(data, i: int, defaults: dict, problems: list[str]) -> Pipeline | None:
    where = f"worker {i}: "
    if not isinstance(data, Mapping):
        problems.append(f"{where}must be a mapping (stages, reply_bytes, mean, spread), not {_show.repr(data)}")
        return None
    _unknown(data, WORKER_KEYS, where, problems)
    reply = _number(data, "reply_bytes", where, problems, True, defaults["reply_bytes"])
    _positive(reply, 5, f"worker {i}'s reply_bytes", problems)
    if reply is not None and reply > MAX_MESSAGE_BYTES:
        problems.append(_limit("bytes", f"worker {i}'s reply_bytes is {reply:,}"))
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
        problems.append(f"{where}: must be a mapping (mean, spread, type), not {_show.repr(data)}")
        return None
    _unknown(data, STAGE_KEYS, where + ": ", problems)
    mean = _number(data, "mean", where + ": ", problems, False, defaults["mean"])
    spread = _number(data, "spread", where + ": ", problems, False, defaults["spread"])
    _positive(mean, 6, f"{where}'s mean", problems)
    if mean is not None and spread is not None and not 0 <= spread <= max(mean, 0):
        problems.append(f"rule 7 ({RULES[7]}): {where} has spread {spread:g} and mean {mean:g}")
    elif mean is not None and spread is not None and mean + spread > MAX_STAGE_SECONDS:
        problems.append(_limit("seconds", f"{where} has mean {mean:g} and spread {spread:g}"))
    try:
        kind = parse_type(data.get("type", "IND"))
    except SpecError as exc:
        problems.append(f"{exc.problems[0]} of {where}")
        return None
    return None if mean is None or spread is None else Stage(mean, spread, **kind)


def _structure(spec: Spec) -> list[str]:
    """Rules 9 and 10: degrees, groups inside their worker, no stage in two groups."""
    problems = []
    for i, w in enumerate(spec.workers):
        covered = 0
        for j, s in enumerate(w.stages):
            where = f"worker {i} stage {j} ({s.type})"
            if s.kind != "IND" and s.degree < 2:
                problems.append(f"rule 9 ({RULES[9]}): {where}")
            if j < covered and s.kind != "IND":
                problems.append(f"rule 10 ({RULES[10]}): {where} is inside the group before it")
            if s.kind == "AGR" and s.degree >= 2:
                if j + s.degree > len(w.stages):
                    problems.append(f"rule 10 ({RULES[10]}): {where} needs {s.degree} stages, "
                                    f"the worker has {len(w.stages) - j} from there")
                covered = max(covered, j + s.degree)
    return problems


def _bounds(spec: Spec) -> list[str]:
    """The limits a structurally valid spec must also keep (LIMITS): degrees first, as a plan of a
    huge degree is itself too big to make, then tasks, bytes and the ranks its plan launches."""
    problems = [_limit("degree", f"worker {i} stage {j} is {s.type}") for i, w in enumerate(spec.workers)
                for j, s in enumerate(w.stages) if s.degree > MAX_DEGREE]
    if spec.initial_messages > MAX_INITIAL_MESSAGES:
        problems.append(_limit("initial_messages", f"initial_messages is {spec.initial_messages:,}"))
    if spec.tasks > MAX_TASKS:
        problems.append(_limit("tasks", f"{spec.iterations:,} x {spec.initial_messages:,} = {spec.tasks:,}"))
    stage_tasks = spec.tasks * sum(len(w.stages) for w in spec.workers)
    if stage_tasks > MAX_STAGE_TASKS and spec.tasks <= MAX_TASKS:
        problems.append(_limit("stage_tasks", f"the spec has {stage_tasks:,}"))
    if spec.task_bytes * spec.initial_messages > MAX_MESSAGE_BYTES:
        problems.append(_limit("bytes", f"a batch is {spec.task_bytes:,} x {spec.initial_messages:,} = "
                                        f"{spec.task_bytes * spec.initial_messages:,} bytes"))
    if not problems:
        ranks, processors, processes, level = launch_of(spec.configuration)
        if ranks > MAX_LAUNCH:
            problems.append(_limit("launch", f"the plan launches {ranks:,} ranks ({processors:,} processors "
                                             f"x {level} per processor, or {processes:,} processes)"))
    return problems


def footprint(types) -> tuple[int, int, int]:
    """(processors, processes, most processes on one processor) of one worker whose stages have
    ``types`` ("IND", "AGR_k", "REP_k"; a valid configuration), as ``plan`` deals them."""
    processors = processes = covered = 0
    level = 1
    for j, t in enumerate(types):
        p = parse_type(t)
        processes += p["degree"] + 1 if p["kind"] == "REP" else 1
        if j >= covered:
            processors += p["degree"] if p["kind"] == "REP" else 1
            covered = j + (p["degree"] if p["kind"] == "AGR" else 1)
        level = max(level, 2 if p["kind"] == "REP" else p["degree"])
    return processors, processes, level


def launch_of(configuration) -> tuple[int, int, int, int]:
    """(ranks to launch, processors, processes, level) of a master and workers configured
    ``configuration`` (one row of types per worker): ``Plan.launch`` without making the plan."""
    shapes = [footprint(row) for row in configuration]
    processors = 1 + sum(s[0] for s in shapes)
    processes = 1 + sum(s[1] for s in shapes)
    level = max([s[2] for s in shapes] + [1])
    return max(processors * level, processes), processors, processes, level


# -- the plan ---------------------------------------------------------------------------------------

MASTER, STAGE, MANAGER, REPLICA = "master", "stage", "manager", "replica"


@dataclass(frozen=True)
class Process:
    """One process of a plan: its role, where it runs and whom it talks to (plan indices), and the
    messages it sends, receives and drains (ends nobody waits for; see ``plan``)."""

    index: int
    role: str
    processor: int
    worker: int = -1
    stage: int = -1
    source: int = -1
    target: int = -1
    replicas: tuple[int, ...] = ()
    first: bool = False
    last: bool = False
    sends: int = 0
    receives: int = 0
    drains: int = 0


@dataclass(frozen=True)
class Plan:
    """Processes, processors and the message counts of a spec (003 §4.2's Gaspar)."""

    spec: Spec
    processes: tuple[Process, ...]
    processors: int
    launch: int                     # ranks to launch: 003's max(processors x level, processes)
    heads: tuple[int, ...] = field(default=())   # each worker's first process

    @property
    def sends(self) -> int:
        return sum(p.sends for p in self.processes)

    @property
    def receives(self) -> int:
        return sum(p.receives for p in self.processes)

    @property
    def level(self) -> int:
        """Most processes on one processor."""
        counts: dict[int, int] = {}
        for p in self.processes:
            counts[p.processor] = counts.get(p.processor, 0) + 1
        return max(counts.values())

    def host_of(self, hosts: int) -> tuple[int, ...]:
        """Each process's host when the processors are dealt round-robin over ``hosts`` hosts."""
        return tuple(p.processor % max(hosts, 1) for p in self.processes)


def plan(spec: Spec) -> Plan:
    """The processes of ``spec``, one processor for the master, each IND stage, each group and each
    replica (the manager shares its first replica's), and the messages each sends and receives.

    Counts follow 003's protocol (Cuadros 8-9): the master sends one batch per worker and iteration
    and one end; every task moves one message per hop; a stage forwards the end except the last;
    a manager forwards it always (to the master too) and ends its replicas, which answer with an
    end. Those answers and a last manager's end are never waited for: the source leaves them
    unreceived (sent 525, received 520); here they are drained at shutdown, counted apart."""
    procs: list[dict] = [{"role": MASTER, "processor": 0}]
    processors = 1
    heads = []
    for i, w in enumerate(spec.workers):
        previous, group_end, group_cpu = 0, 0, 0
        for j, s in enumerate(w.stages):
            first, last = j == 0, j == len(w.stages) - 1
            if s.kind == "REP":
                cpus = list(range(processors, processors + s.degree))
                processors += s.degree
                m = len(procs)
                reps = tuple(range(m + 1, m + 1 + s.degree))
                procs.append({"role": MANAGER, "processor": cpus[0], "worker": i, "stage": j, "source": previous,
                              "replicas": reps, "first": first, "last": last})
                procs += [{"role": REPLICA, "processor": c, "worker": i, "stage": j, "source": m, "target": m,
                           "first": first, "last": last} for c in cpus]
                me = m
            else:
                if j >= group_end:                   # a new processor: an IND stage or a group's head
                    group_cpu, processors = processors, processors + 1
                    group_end = j + (s.degree if s.kind == "AGR" else 1)
                me = len(procs)
                procs.append({"role": STAGE, "processor": group_cpu, "worker": i, "stage": j, "source": previous,
                              "first": first, "last": last})
            if previous:
                procs[previous]["target"] = me
            else:
                heads.append(me)
            previous = me
        procs[previous]["target"] = 0
    counted = _counts(spec, procs)
    level = max(2 if any(p["role"] == MANAGER for p in procs) else 1,
                max((s.degree for w in spec.workers for s in w.stages if s.kind == "AGR"), default=1))
    processes = tuple(Process(index=k, **p) for k, p in enumerate(counted))
    return Plan(spec, processes, processors, max(processors * level, len(processes)), tuple(heads))


def _counts(spec: Spec, procs: list[dict]) -> list[dict]:
    """Each process's expected sends / receives / drains (replicas' shares split evenly: their
    sum is exact, the split depends on which replica is free)."""
    W, B, T = len(spec.workers), spec.iterations, spec.tasks
    last_managers = sum(1 for q in procs if q["role"] == MANAGER and q.get("last"))
    out = []
    for index, p in enumerate(procs):
        p = dict(p)
        role = p["role"]
        arrivals = B if p.get("first") else T
        if role == MASTER:
            p.update(sends=W * (B + 1), receives=W * T, drains=last_managers)
        elif role == STAGE:
            p.update(sends=T + (0 if p["last"] else 1), receives=arrivals + 1)
        elif role == MANAGER:
            r = len(p["replicas"])
            p.update(sends=T + r + T + 1, receives=arrivals + 1 + T, drains=r)
        else:                                # the manager's k-th of r replicas
            r, k = len(procs[p["source"]]["replicas"]), index - p["source"] - 1
            share = T // r + (1 if k < T % r else 0)
            p.update(sends=share + 1, receives=share + 1)
        out.append(p)
    return out


def describe(pl: Plan) -> str:
    """The plan as a table (003 §3.2's Gaspar output): one process per line and the totals."""
    lines = [f"workload {pl.spec.name or '(unnamed)'}: {len(pl.spec.workers)} workers, "
             f"configuration {' | '.join(' '.join(w) for w in pl.spec.configuration)}",
             f"processors {pl.processors}, processes {len(pl.processes)}, launch {pl.launch} ranks "
             f"({pl.level} per processor at most)",
             f"{'proc':>4} {'role':<8} {'worker':>6} {'stage':>5} {'cpu':>4} {'from':>5} {'to':>4} "
             f"{'sent':>5} {'recv':>5} {'drain':>5}"]
    for p in pl.processes:
        lines.append(f"{p.index:>4} {p.role:<8} {p.worker:>6} {p.stage:>5} {p.processor:>4} {p.source:>5} "
                     f"{p.target:>4} {p.sends:>5} {p.receives:>5} {p.drains:>5}")
    lines.append(f"messages: {pl.sends} sent, {pl.receives} received, "
                 f"{sum(p.drains for p in pl.processes)} ends drained at shutdown")
    return "\n".join(lines)


def assign(pl: Plan, hostnames: list[str]) -> tuple[list[int], list[str]]:
    """Rank of each plan process and the hosts in rank order of appearance; PipelineError if a host
    has fewer ranks than processes the plan deals to it."""
    hosts = list(dict.fromkeys(hostnames))
    free = {h: [r for r, n in enumerate(hostnames) if n == h] for h in hosts}
    dealt = [hosts[i] for i in pl.host_of(len(hosts))]
    ranks = []
    for h in dealt:
        if not free[h]:
            need, have = dealt.count(h), hostnames.count(h)
            raise PipelineError(f"host {h} has {have} ranks and the plan puts {need} processes on it; "
                                f"launch {pl.launch} ranks over {pl.processors} hosts (mpiexec -n {pl.launch})")
        ranks.append(free[h].pop(0))
    return ranks, hosts
