"""Synthetic master/worker-of-pipelines workloads (003): the spec, its checks and its plan.

A spec (YAML, 003 §3.2's parameters under English names) describes a master that sends each
worker ``iterations`` batches of ``initial_messages`` tasks; each worker is a pipeline of stages
with a mean time and a spread, each stage independent (IND), the head of a group of k stages
sharing one host (AGR_k) or replicated k times behind a communication manager (REP_k). ``plan``
turns a valid spec into processes, processors and the message counts a run must show
(docs/usage.md#synthetic). Every count is bounded by what the runner, the model and the tuner can
do (``LIMITS``), checked by ``spec_problems`` (``workload_read.load_spec`` for check, tune and run
alike, ``Spec.configured`` for the tuner's configurations).
"""
from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field, replace

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
SHOW = reprlib.Repr()   # values quoted in problems, cut to 40 characters
SHOW.maxstring = SHOW.maxother = 40


def limit_problem(name: str, detail: str) -> str:
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
        problems = spec_problems(spec)
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
        raise SpecError([f"rule 8 ({RULES[8]}): stage type {SHOW.repr(text)}"])
    kind, k = m.group(1), m.group(2)
    return {"kind": kind, "degree": 1 if k is None and kind == "IND" else int(k) if k is not None else 0}


# -- the rules and bounds a spec keeps ---------------------------------------------------------

def structure_problems(spec: Spec) -> list[str]:
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


def spec_problems(spec: Spec) -> list[str]:
    """Every rule and bound a built spec (read, configured or scaled) can break: its structure, then
    (only for a structurally valid spec) its limits."""
    return structure_problems(spec) or bound_problems(spec)


def bound_problems(spec: Spec) -> list[str]:
    """The limits a structurally valid spec must also keep (LIMITS): degrees first, as a plan of a
    huge degree is itself too big to make, then tasks, bytes, the ranks its plan launches and its
    stage times."""
    problems = [limit_problem("degree", f"worker {i} stage {j} is {s.type}") for i, w in enumerate(spec.workers)
                for j, s in enumerate(w.stages) if s.degree > MAX_DEGREE]
    if spec.initial_messages > MAX_INITIAL_MESSAGES:
        problems.append(limit_problem("initial_messages", f"initial_messages is {spec.initial_messages:,}"))
    if spec.tasks > MAX_TASKS:
        problems.append(limit_problem("tasks", f"{spec.iterations:,} x {spec.initial_messages:,} = {spec.tasks:,}"))
    stage_tasks = spec.tasks * sum(len(w.stages) for w in spec.workers)
    if stage_tasks > MAX_STAGE_TASKS and spec.tasks <= MAX_TASKS:
        problems.append(limit_problem("stage_tasks", f"the spec has {stage_tasks:,}"))
    if spec.task_bytes * spec.initial_messages > MAX_MESSAGE_BYTES:
        problems.append(limit_problem("bytes", f"a batch is {spec.task_bytes:,} x {spec.initial_messages:,} = "
                                        f"{spec.task_bytes * spec.initial_messages:,} bytes"))
    if not problems:
        ranks, processors, processes, level = launch_of(spec.configuration)
        if ranks > MAX_LAUNCH:
            problems.append(limit_problem("launch", f"the plan launches {ranks:,} ranks ({processors:,} processors "
                                             f"x {level} per processor, or {processes:,} processes)"))
    return problems + _time_problems(spec)


def _time_problems(spec: Spec) -> list[str]:
    """Each stage's mean + spread within MAX_STAGE_SECONDS, and its mean still > 0 (rule 6: the reader
    checks it, a stage scaled down to nothing breaks it)."""
    problems = []
    for i, w in enumerate(spec.workers):
        for j, s in enumerate(w.stages):
            if not s.mean > 0:
                problems.append(f"rule 6 ({RULES[6]}): worker {i} stage {j}'s mean is {s.mean:g}")
            elif s.mean + s.spread > MAX_STAGE_SECONDS:
                problems.append(limit_problem("seconds", f"worker {i} stage {j} has mean {s.mean:g} "
                                                         f"and spread {s.spread:g}"))
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
    ``configuration`` (one row of types per worker): what ``plan`` takes as its launch."""
    return launch_of_footprints(footprint(row) for row in configuration)


def launch_of_footprints(footprints) -> tuple[int, int, int, int]:
    """(ranks to launch, processors, processes, level) of a master and workers of these
    ``footprint``s: 003's max(processors x level, processes), arithmetic only (the tuner prices
    thousands of combinations of footprints it computed once)."""
    shapes = list(footprints)
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
class WorkloadPlan:
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


def plan(spec: Spec) -> WorkloadPlan:
    """The processes of ``spec``, one processor for the master, each IND stage, each group and each
    replica (the manager shares its first replica's), and the messages each sends and receives.

    Counts follow 003's protocol (Cuadros 8-9): the master sends one batch per worker and iteration
    and one end; every task moves one message per hop; a stage forwards the end except the last;
    a manager forwards it always (to the master too) and ends its replicas, which answer with an
    end. Those answers and a last manager's end are never waited for: the source leaves them
    unreceived (sent 525, received 520); here they are drained at shutdown, counted apart."""
    procs: list[dict] = [{"role": MASTER, "processor": 0}]
    free, heads = 1, []            # the next processor to deal, each worker's first process
    for i, w in enumerate(spec.workers):
        previous, group_end, group_cpu = 0, 0, 0
        for j, s in enumerate(w.stages):
            first, last = j == 0, j == len(w.stages) - 1
            if s.kind == "REP":
                cpus = list(range(free, free + s.degree))
                free += s.degree
                m = len(procs)
                reps = tuple(range(m + 1, m + 1 + s.degree))
                procs.append({"role": MANAGER, "processor": cpus[0], "worker": i, "stage": j, "source": previous,
                              "replicas": reps, "first": first, "last": last})
                procs += [{"role": REPLICA, "processor": c, "worker": i, "stage": j, "source": m, "target": m,
                           "first": first, "last": last} for c in cpus]
                me = m
            else:
                if j >= group_end:                   # a new processor: an IND stage or a group's head
                    group_cpu, free = free, free + 1
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
    processes = tuple(Process(index=k, **p) for k, p in enumerate(_counts(spec, procs)))
    launch, processors, _, _ = launch_of(spec.configuration)
    return WorkloadPlan(spec, processes, processors, launch, tuple(heads))


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


def describe(pl: WorkloadPlan) -> str:
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


def assign(pl: WorkloadPlan, hostnames: list[str]) -> tuple[list[int], list[str]]:
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
