"""Distributed selection: algorithm x processes x grid x block x level x threads per rank.

Enumerates ``Plan``s for a problem on up to ``nprocs`` ranks, predicts each with its phase model
(``autotune.models.distributed_gemm`` / ``distributed_cholesky``) from the BLAS SP and the
communication parameters of the platform, and ranks them. One process (``local``) is always a
candidate: the single-process selector's best with all the node's cores. Pure computation: no
MPI here, so ``autotune explain gemm 4096 --np 4`` ranks plans without launching anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotune.db.contention import ContendedSP, load_contention
from autotune.models import distributed_cholesky, distributed_gemm, distributed_lu, movement
from autotune.models.fitted_phases import PHASE_NAMES, PhaseFactors, load_phase_factors, platform_factors
from autotune.plans import PHASES, Plan, grids

from . import corrections
from .corrections import Correction
from .rank import choose

# Panel / block sizes considered for block-cyclic algorithms, and Strassen levels on SUMMA.
BLOCKS = (64, 128, 256, 512)
DIST_STRASSEN_LEVELS = (1, 2)
# Per-rank BLAS library of each family (the single-process incumbents).
RANK_BACKEND = {"gemm": "numpy-openblas", "cholesky": "scipy-openblas", "lu": "scipy-openblas",
                "solve": "scipy-openblas"}
# Each family's phase models (``MODELS`` by algorithm, ``WAIT_PHASE``).
FAMILY_MODELS = {"gemm": distributed_gemm, "cholesky": distributed_cholesky, "lu": distributed_lu,
                 "solve": distributed_lu}
# The plans' algorithms of each family (besides "local", one process): what a forced config may name.
PLAN_ALGORITHMS = {"gemm": tuple(distributed_gemm.MODELS), "cholesky": tuple(distributed_cholesky.MODELS),
                   "lu": ("lu",), "solve": ("gesv",)}


@dataclass
class DistRanked:
    """A plan, its predicted phases, the model's phases before calibration, and the correction
    steps (``select.corrections``) between the analytical model and ``phases``."""

    plan: Plan
    phases: dict[str, float]                 # the prediction in use (fitted phase factors applied)
    model: dict[str, float] | None = None    # the phases before calibration (None: same as phases)
    corrections: tuple[Correction, ...] = ()
    efficiency: float | None = None          # T_seq / (cores used x predicted time); None: no T_seq

    @property
    def seconds(self) -> float:
        return self.phases["total"]


@dataclass(frozen=True)
class Calibration:
    """The platform's phase factors a ranking applied, fitted for its family from ``runs`` timed
    runs at orders ``sizes`` (``fitted``: when; ``runs`` None where not stored)."""

    platform: str
    fitted: str
    runs: int | None
    sizes: tuple[int, ...]
    factors: PhaseFactors


@dataclass
class DistDecision:
    family: str
    dims: tuple[int, ...]
    nprocs: int
    ranking: list[DistRanked]
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None     # None: the analytical models only

    @property
    def chosen(self) -> Plan:
        return self.ranking[0].plan


def thread_options(p: int, cores: int, hosts: int = 1, oversubscribe: bool = False) -> list[int]:
    """BLAS threads per rank with (ranks per host) x threads <= cores of a host, the p ranks
    spread evenly over ``hosts``; none when the ranks alone outnumber the cores, unless
    ``oversubscribe`` (then 1: the validation times such plans too, to check their models)."""
    per_host = -(-p // max(1, hosts))
    if per_host > cores:
        return [1] if oversubscribe else []
    return list(range(1, cores // per_host + 1))


def plans(family: str, dims: tuple[int, ...], nprocs: int, cores: int, hosts: int = 1,
          oversubscribe: bool = False) -> list[Plan]:
    """All distributed plans for ``family`` on ``dims`` using 2..nprocs ranks (``thread_options``)."""
    out: list[Plan] = []
    be = RANK_BACKEND[family]
    small = dims[0] if family == "solve" else min(dims)      # (n, nrhs): blocks of the matrix
    for p in range(2, nprocs + 1):
        for t in thread_options(p, cores, hosts, oversubscribe):
            for r, c in grids(p):
                if family in ("cholesky", "lu"):
                    out += [Plan(family, p, r, c, b=b, threads=t, backend=be) for b in _blocks(small)]
                    continue
                if family == "solve":     # the back substitution's ring runs on 1 x c grids
                    out += [Plan("gesv", p, r, c, b=b, threads=t, backend=be) for b in _blocks(small) if r == 1]
                    continue
                if c > 1:     # on one process column CBSR runs BSR's scatter, product and gather
                    out.append(Plan("cbsr", p, r, c, threads=t, backend=be))
                out += [Plan("summa", p, r, c, b=b, threads=t, backend=be) for b in _blocks(small)]
                out += [Plan("strassen_summa", p, r, c, b=b, level=lv, threads=t, backend=be)
                        for lv in DIST_STRASSEN_LEVELS if small >> lv >= 64
                        for b in _blocks(small >> lv)]
                if c == 1:
                    out.append(Plan("bsr", p, r, c, threads=t, backend=be))
                if r == c:
                    out.append(Plan("cannon", p, r, c, threads=t, backend=be))
            if family == "gemm":
                out.append(Plan("strassen_ms", p, p, 1, level=1, threads=t, backend=be))
    return out


def _blocks(n: int) -> list[int]:
    return [b for b in BLOCKS if b <= max(n // 2, BLOCKS[0])]


def _family_models(family: str):
    """The family's model module: ``MODELS`` by algorithm and their ``WAIT_PHASE``."""
    return FAMILY_MODELS[family]


@dataclass(frozen=True)
class _PlanContext:
    """What the correction steps know of one plan: the problem, the SP and comm parameters, the
    platform's measured contention and phase factors."""

    family: str
    dims: tuple[int, ...]
    plan: Plan
    sp: object
    cp: object
    problem: dict
    contention: object          # autotune.db.contention.Contention (factor 1 where not measured)
    factors: PhaseFactors

    @classmethod
    def of(cls, family: str, dims: tuple[int, ...], plan: Plan, sp, cp, problem: dict,
           contention=None, factors: PhaseFactors | None = None) -> _PlanContext:
        path, key = getattr(sp, "path", None), cp.platform.get("key")
        return cls(family, tuple(dims), plan, sp, cp, problem,
                   load_contention(path, key) if contention is None else contention,
                   load_phase_factors(path, key) if factors is None else factors)

    @property
    def contended(self) -> bool:
        return bool(self.contention.available and self.plan.p > 1)


def predict(family: str, dims: tuple[int, ...], plan: Plan, sp, cp, fitted: bool = True, **problem) -> dict[str, float]:
    """Phase times of one plan through the correction stack: the model of its algorithm, the
    per-call overhead, per-rank k slowed by the measured contention of ``p x threads`` busy cores
    (``autotune.db.contention``), then the platform's fitted phase factors (``models.fitted_phases``)
    unless ``fitted`` is False. ``problem``: Cholesky's ``lower`` and input memory ``order``.
    ValueError for a plan whose algorithm has no model in the family (one process included)."""
    check_algorithm(plan.algorithm, family, PLAN_ALGORITHMS[family])
    model, calibrated, _ = _stack(_PlanContext.of(family, dims, plan, sp, cp, problem))
    return calibrated if fitted else model


def _stack(ctx: _PlanContext) -> tuple[dict[str, float], dict[str, float], tuple[Correction, ...]]:
    """(phases before calibration, phases after, the corrections applied) of ``ctx``'s plan."""
    base = _model(ctx, ctx.sp)
    model, done = corrections.apply(base, ctx, _PLAN_STACK, _total)
    calibrated, cal = corrections.apply(model, ctx, _CALIBRATION, _total)
    return model, calibrated, done + cal


def _total(phases: dict[str, float]) -> float:
    return phases["total"]


def _model(ctx: _PlanContext, sp) -> dict[str, float]:
    """The analytical model of the plan's algorithm on the SP view ``sp``."""
    model = _family_models(ctx.family).MODELS[ctx.plan.algorithm]
    kw = ctx.problem if ctx.family == "cholesky" else {}
    return model(*ctx.dims, ctx.plan, sp, ctx.cp, **kw)


def _overhead_step(phases: dict[str, float], ctx: _PlanContext) -> tuple[dict[str, float], str]:
    """The fixed per-call costs the comm probe measured for the algorithm (agreement, split, grid)."""
    out = _with_call_overhead(phases, ctx.plan, ctx.cp)
    return out, "" if out is phases else "per-call overhead (comm probe)"


def _contention_step(phases: dict[str, float], ctx: _PlanContext) -> tuple[dict[str, float], str]:
    """The model re-run with the k of ``p x threads`` busy cores (measured contention), the per-call
    overhead kept. The gemm models place their ranks on the cores themselves (``contention.lockstep``:
    the mean rank's k per core filled). Cholesky's ranks (a ``WAIT_PHASE``) run at the slowest rank's
    k and the fastest waits out the difference in that phase, off the critical path. The models keep
    the root's moves, while the others wait, uncontended (``contention.alone``)."""
    if not ctx.contended:
        return phases, ""
    busy = ctx.plan.p * ctx.plan.threads
    phase = _family_models(ctx.family).WAIT_PHASE.get(ctx.plan.algorithm)
    if phase is None:
        out = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy))
        note = f"k of {busy} busy cores (mean rank)"
    else:
        out = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy, "max"))
        fast = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy, "min"))
        out = {**out, phase: out[phase] + max(out["compute"] - fast["compute"], 0.0)}
        note = f"slowest rank's k of {busy} busy cores, the fastest waiting in {phase}"
    return _with_call_overhead(out, ctx.plan, ctx.cp), note


def _calibration_step(phases: dict[str, float], ctx: _PlanContext) -> tuple[dict[str, float], str]:
    """The platform's fitted phase factors (``models.fitted_phases``) on every phase and the total."""
    out = ctx.factors.apply(ctx.family, ctx.plan.algorithm, phases, ctx.plan.p)
    applied = [f"{ph} x{f:.2f}" for ph in PHASE_NAMES
               if (f := ctx.factors.factor(ctx.family, ctx.plan.algorithm, ph, ctx.plan.p)) != 1.0]
    return out, "phase factors " + ", ".join(applied) if applied else ""


PLAN_STEPS = {"overhead": _overhead_step, "contention": _contention_step}
_PLAN_STACK = corrections.stack(PLAN_STEPS)
_CALIBRATION = corrections.stack({"calibration": _calibration_step})


def _with_call_overhead(phases: dict[str, float], plan: Plan, cp) -> dict[str, float]:
    """The phases plus the fixed per-call costs the comm probe measured for this algorithm
    (``cp.call_overhead``: the call's agreement, communicator split and grid, beyond its model)."""
    extra = cp.call_overhead(plan.algorithm) if hasattr(cp, "call_overhead") else {}
    if not extra:
        return phases
    out = {k: v + extra.get(k, 0.0) for k, v in phases.items()}
    out["total"] = phases["total"] + sum(extra.get(k, 0.0) for k in PHASES)
    return out


def _calibration(family: str, sp, cp) -> Calibration | None:
    """The platform's phase calibration of ``family``, None where it has none."""
    key = cp.platform.get("key")
    factors = platform_factors(sp, cp)
    info = factors.family_infos().get(family)
    if info is None:
        return None
    runs = info.get("runs")
    return Calibration(str(key), str(info.get("fitted") or factors.updated), None if runs is None else int(runs),
                       tuple(int(n) for n in info.get("sizes", ())), factors)


def local_phases(family: str, dims: tuple[int, ...], sp, cores: int, nprocs: int = 1) -> tuple[Plan, dict[str, float]]:
    """The one-process candidate: the single-process selector's choice on the cores the other
    ``nprocs - 1`` ranks leave free (an idle MPI rank still polls, so it occupies a core)."""
    dec = choose(family, dims, sp, max(1, cores - (nprocs - 1)))
    best = next(r for r in dec.ranking if r.candidate == dec.chosen)
    plan = Plan("local", 1, 1, 1, threads=dec.chosen.threads, backend=dec.chosen.backend)
    phases = dict.fromkeys(PHASES, 0.0)
    phases["compute"] = best.predicted
    if family == "cholesky":     # as run: the root's finiteness check, then the call's working copy
        (n,) = dims
        phases["distribution"] = movement.finite_check(sp, n, n, plan.backend, plan.threads)
        phases["compute"] += movement.copy(sp, n * n)
    phases["total"] = phases["compute"] + phases["distribution"]
    return plan, phases


def rank_plans(family: str, dims: tuple[int, ...], nprocs: int, sp, cp, cores: int,
               allow_strassen: bool = False, oversubscribe: bool = False, min_efficiency: float | None = None,
               **problem) -> DistDecision:
    """Every plan for ``dims`` on up to ``nprocs`` ranks, fastest predicted first: ranks x BLAS
    threads never exceed the cores of a host (the platform's ``hosts``), unless ``oversubscribe``.
    With ``min_efficiency`` the plans predicted below it come after those above (the chosen plan
    is the fastest efficient one; 004's shared-cluster rule). ``problem``: Cholesky's ``lower``
    and input ``order`` (default: scipy's upper, numpy's C)."""
    if family not in RANK_BACKEND:
        raise ValueError(f"unknown family {family!r}")
    ranking = []
    path, key = getattr(sp, "path", None), cp.platform.get("key")
    cont, factors = load_contention(path, key), load_phase_factors(path, key)
    if sp.table is not None:
        plan, phases = local_phases(family, dims, sp, cores, nprocs)
        ctx = _PlanContext.of(family, dims, plan, sp, cp, problem, cont, factors)
        calibrated, done = corrections.apply(phases, ctx, _CALIBRATION, _total)
        ranking.append(DistRanked(plan, calibrated, phases, done))
    hosts = int(cp.platform.get("hosts", 1) or 1)
    for plan in plans(family, dims, nprocs, cores, hosts, oversubscribe):
        if "strassen" in plan.algorithm and not allow_strassen:
            continue
        model, calibrated, done = _stack(_PlanContext.of(family, dims, plan, sp, cp, problem, cont, factors))
        if all(math.isfinite(v) for v in model.values()):
            ranking.append(DistRanked(plan, calibrated, model, done))
    if not ranking:
        raise LookupError(f"no plan for {family} {dims} on {nprocs} ranks")
    _set_efficiency(ranking, family, dims, sp)
    ranking.sort(key=lambda r: r.seconds)
    notes = []
    if min_efficiency is not None:
        low = [r for r in ranking if r.efficiency is not None and r.efficiency < min_efficiency]
        if low and len(low) < len(ranking):
            ranking.sort(key=lambda r: (r.efficiency is not None and r.efficiency < min_efficiency, r.seconds))
            notes.append(f"{len(low)} plans predicted below efficiency {min_efficiency:g} ranked after the others")
    if not oversubscribe and not thread_options(nprocs, cores, hosts):
        notes.append(f"plans with more ranks than the {cores} cores per host left out (ranks x threads <= cores)")
    return DistDecision(family, tuple(dims), nprocs, ranking, notes, _calibration(family, sp, cp))


def _set_efficiency(ranking: list[DistRanked], family: str, dims: tuple[int, ...], sp) -> None:
    """Each plan's predicted efficiency against the single-process best on one core (T_seq)."""
    if sp.table is None:
        return
    try:
        dec = choose(family, dims, sp, 1)
    except LookupError:
        return
    t_seq = next(r.predicted for r in dec.ranking if r.candidate == dec.chosen)
    for r in ranking:
        used = max(r.plan.p * r.plan.threads, 1)
        r.efficiency = t_seq / (used * r.seconds) if r.seconds > 0 else None


def describe(dec: DistDecision, top: int = 12) -> str:
    """Text ranking: plan, predicted total and phases."""
    lines = [f"{dec.family} {'x'.join(map(str, dec.dims))} on up to {dec.nprocs} ranks: chose {dec.chosen}",
             calibration_line(dec)]
    lines += [f"  note: {n}" for n in dec.notes]
    best = dec.ranking[0].seconds
    for i, r in enumerate(dec.ranking[:top], 1):
        ph = " ".join(f"{k[:5]}={r.phases.get(k, 0.0) * 1e3:.2f}" for k in PHASES)
        eff = "" if r.efficiency is None else f" eff {r.efficiency:4.2f}"
        lines.append(f"  {i:2d}. {str(r.plan):58s} {r.seconds * 1e3:9.2f} ms x{r.seconds / best:5.2f}{eff}  ({ph} ms)")
        line = corrections.summary(r.corrections)
        lines += [f"        {line}"] if line else []
    if len(dec.ranking) > top:
        lines.append(f"  ... {len(dec.ranking) - top} more plans")
    return "\n".join(lines)


def calibration_line(dec: DistDecision) -> str:
    """Which phase calibration the ranking used, and the factors it applied to the chosen plan."""
    cal = dec.calibration
    if cal is None:
        return "calibration: none (analytical models only)"
    runs = "" if cal.runs is None else f", {cal.runs} runs"
    sizes = f" at n = {', '.join(map(str, cal.sizes))}" if cal.sizes else ""
    plan = dec.chosen
    applied = [f"{ph} x{f:.2f}" for ph in PHASE_NAMES
               if (f := cal.factors.factor(dec.family, plan.algorithm, ph, plan.p)) != 1.0]
    used = (f"{plan.algorithm} factors " + ", ".join(applied) if applied
            else f"no factor for {plan.algorithm} (analytical)")
    return (f"calibration: phase factors of platform {cal.platform} (fitted {cal.fitted.replace('T', ' ')[:16]}"
            f"{runs}{sizes}); chosen plan: {used}")


def as_plan(config, family: str | None = None) -> Plan:
    """A ``Plan`` from a Plan or a dict of its fields (forcing a configuration); with ``family``, a
    ValueError listing the family's algorithms unless the plan runs one of them."""
    if isinstance(config, dict):
        config = Plan(**config)
    if not isinstance(config, Plan):
        raise TypeError(f"config must be a Plan or a dict of its fields, got {type(config).__name__}")
    if family is not None:
        check_algorithm(config.algorithm, family, ("local", *PLAN_ALGORITHMS[family]))
    return config


def check_algorithm(algorithm: str, family: str, known: tuple[str, ...]) -> None:
    """ValueError naming the family's ``known`` algorithms unless ``algorithm`` is one of them
    (not the bare KeyError of a table lookup)."""
    if algorithm not in known:
        raise ValueError(f"algorithm {algorithm!r} is not a distributed {family} algorithm; "
                         f"choose from {list(known)}")


__all__ = ["PLAN_ALGORITHMS", "DistDecision", "DistRanked", "as_plan", "check_algorithm", "describe", "grids", "plans",
           "predict", "rank_plans", "thread_options"]
