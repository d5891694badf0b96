"""Synthetic master/worker-of-pipelines workloads (003): the spec, its checks and its plan.

A spec (YAML, 003 §3.2's parameters under English names) describes a master that sends each
worker ``iterations`` batches of ``initial_messages`` tasks; each worker is a pipeline of stages
with a mean time and a spread, each stage independent (IND), the head of a group of k stages
sharing one host (AGR_k) or replicated k times behind a communication manager (REP_k). ``plan``
turns a valid spec into processes, processors and the message counts a run must show
(docs/usage.md#synthetic).
"""
from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

WORK_KINDS = ("wait", "compute")
TOP_KEYS = {"name", "task_bytes", "initial_messages", "iterations", "workers", "stages", "reply_bytes",
            "mean", "spread", "work", "seed"}
WORKER_KEYS = {"stages", "reply_bytes", "mean", "spread"}
STAGE_KEYS = {"mean", "spread", "type"}
_TYPE = re.compile(r"^(IND|AGR|REP)(?:_(-?\d+))?$")

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


class PipelineError(ValueError):
    """The plan cannot run on these ranks (raised alike on every rank)."""


class SpecError(ValueError):
    """A spec that cannot be planned: one line per problem, each naming its rule."""

    def __init__(self, problems: list[str]):
        self.problems = _one_per_rule(problems)
        super().__init__("; ".join(self.problems))


def _one_per_rule(problems: list[str]) -> list[str]:
    """One line per violated rule (its first case, and how many more), other problems as they are."""
    out, more, where = [], {}, {}
    for line in problems:
        rule = line.split(")", 1)[0] if line.startswith("rule ") else None
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
        problems = _structure(spec)
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
    m = _TYPE.match(str(text).strip().upper()) if isinstance(text, str) else None
    if m is None:
        raise SpecError([f"rule 8 ({RULES[8]}): stage type {text!r}"])
    kind, k = m.group(1), m.group(2)
    return {"kind": kind, "degree": 1 if k is None and kind == "IND" else int(k) if k is not None else 0}


# -- reading and checking -----------------------------------------------------------------------------

def load_spec(source) -> Spec:
    """A checked ``Spec`` from a YAML file path, YAML text or a mapping; SpecError lists every
    problem (one line each, naming the rule), nothing is planned from a bad spec."""
    name = ""
    if isinstance(source, Mapping):
        data = source
    else:
        text = str(source)
        path = Path(text) if "\n" not in text and len(text) < 4096 else None
        if path is not None and path.suffix in (".yaml", ".yml", ".json") or path is not None and path.exists():
            try:
                text = path.read_text()
            except OSError as exc:
                raise SpecError([f"cannot read {path}: {exc.strerror or exc}"]) from None
            name = path.stem
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError([f"not YAML: {' '.join(str(exc).split())}"]) from None
    if not isinstance(data, Mapping):
        raise SpecError(["a spec is a mapping of its parameters (task_bytes, initial_messages, ...)"])
    problems: list[str] = []
    spec = _read(data, problems, name)
    if spec is not None:
        problems += _structure(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _number(data: Mapping, key: str, where: str, problems: list[str], integer: bool, default=None):
    """``data[key]`` as an int / finite float, or ``default``; a wrong type is a problem (None)."""
    if key not in data:
        if default is None:
            problems.append(f"{where}{key} is missing")
        return default
    value = data[key]
    ok = isinstance(value, numbers.Integral) if integer else isinstance(value, numbers.Real)
    if isinstance(value, bool) or not ok or not math.isfinite(float(value)):
        problems.append(f"{where}{key} must be {'an integer' if integer else 'a finite number'}, not {value!r}")
        return None
    return int(value) if integer else float(value)


def _unknown(data: Mapping, allowed: set[str], where: str, problems: list[str]) -> None:
    for key in data:
        if key not in allowed:
            problems.append(f"{where}unknown parameter {key!r} (known: {', '.join(sorted(allowed))})")


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
    work = data.get("work", "wait")
    if work not in WORK_KINDS:
        problems.append(f"work must be one of {', '.join(WORK_KINDS)}, not {work!r}")
    defaults = {"stages": _number(data, "stages", "", problems, True, 0),
                "reply_bytes": _number(data, "reply_bytes", "", problems, True, 0),
                "mean": _number(data, "mean", "", problems, False, 0.0),
                "spread": _number(data, "spread", "", problems, False, 0.0)}
    workers = data.get("workers")
    if isinstance(workers, numbers.Integral) and not isinstance(workers, bool):
        _positive(workers, 1, "workers", problems)
        workers = [{}] * max(int(workers), 0)
    elif isinstance(workers, list):
        _positive(len(workers), 1, "the number of workers", problems)
    else:
        problems.append(f"workers must be a count or a list of workers, not {workers!r}")
        return None
    pipelines = [_worker(w, i, defaults, problems) for i, w in enumerate(workers)]
    if problems:
        return None
    return Spec(task, initial, iterations, tuple(pipelines), work, seed, str(data.get("name") or name))


def _worker(data, i: int, defaults: dict, problems: list[str]) -> Pipeline | None:
    where = f"worker {i}: "
    if not isinstance(data, Mapping):
        problems.append(f"{where}must be a mapping (stages, reply_bytes, mean, spread), not {data!r}")
        return None
    _unknown(data, WORKER_KEYS, where, problems)
    reply = _number(data, "reply_bytes", where, problems, True, defaults["reply_bytes"])
    _positive(reply, 5, f"worker {i}'s reply_bytes", problems)
    own = {k: _number(data, k, where, problems, False, defaults[k]) for k in ("mean", "spread")}
    stages = data.get("stages", defaults["stages"])
    if isinstance(stages, numbers.Integral) and not isinstance(stages, bool):
        stages = [{}] * max(int(stages), 0)
    elif not isinstance(stages, list):
        problems.append(f"{where}stages must be a count or a list of stages, not {stages!r}")
        return None
    _positive(len(stages), 4, f"worker {i}'s number of stages", problems)
    out = [_stage(s, f"worker {i} stage {j}", own, problems) for j, s in enumerate(stages)]
    return None if reply is None or None in out else Pipeline(tuple(out), reply)


def _stage(data, where: str, defaults: dict, problems: list[str]) -> Stage | None:
    if not isinstance(data, Mapping):
        problems.append(f"{where}: must be a mapping (mean, spread, type), not {data!r}")
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
    out = []
    for p in procs:
        p = dict(p)
        role = p["role"]
        arrivals = B if p.get("first") else T
        if role == MASTER:
            p.update(sends=W * (B + 1), receives=W * T,
                     drains=sum(1 for q in procs if q["role"] == MANAGER and q.get("last")))
        elif role == STAGE:
            p.update(sends=T + (0 if p["last"] else 1), receives=arrivals + 1)
        elif role == MANAGER:
            r = len(p["replicas"])
            p.update(sends=T + r + T + 1, receives=arrivals + 1 + T, drains=r)
        else:
            r = sum(1 for q in procs if q["role"] == REPLICA and q.get("source") == p["source"])
            k = sum(1 for q in procs[:len(out)] if q["role"] == REPLICA and q.get("source") == p["source"])
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
