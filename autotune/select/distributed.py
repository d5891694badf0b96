"""Distributed selection: algorithm x processes x grid x block x level x threads per rank.

Enumerates ``Plan``s for a problem on up to ``nprocs`` ranks, predicts each with its phase model
(``autotune.models.distributed_gemm`` / ``distributed_cholesky``) from the BLAS SP and the
communication parameters of the platform, and ranks them. One process (``local``) is always a
candidate: the single-process selector's best with all the node's cores. Pure computation: no
MPI here, so ``autotune explain gemm 4096 --np 4`` ranks plans without launching anything.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from autotune.core.families import (
    DISTRIBUTED,
    FAMILIES,
    STENCIL_BACKENDS,
    Problem,
    StencilProblem,
    family,
    usable_blocks,
)
from autotune.core.plans import PHASES, WEIGHTED, Plan, grids
from autotune.db.comm_lookup import CommParams
from autotune.db.contention import ContendedSP, Contention, load_contention
from autotune.db.lookup import SPLookup, SystemParameters
from autotune.geometry.halo import fits
from autotune.models.fitted_phases import PHASE_NAMES, PhaseFactors, load_phase_factors, platform_factors
from autotune.models.links import rank_speeds, slices
from autotune.models.memory import plan_footprint, ranks_on_busiest_host
from autotune.models.plan_models import REGISTRY as PLAN_MODELS

from . import corrections
from .corrections import Correction
from .memory import keep_fitting
from .ranking import choose

# Strassen levels on SUMMA.
DIST_STRASSEN_LEVELS = (1, 2)


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
    problem: Problem
    nprocs: int
    ranking: list[DistRanked]
    notes: list[str] = field(default_factory=list)
    calibration: Calibration | None = None     # None: the analytical models only
    # the family model's own account of the chosen plan, computed when shown
    terms: Callable[[], list[str]] = field(default=lambda: [])

    @property
    def chosen(self) -> Plan:
        return self.ranking[0].plan

    @property
    def family(self) -> str:
        return self.problem.family

    @property
    def dims(self) -> tuple[int, ...]:
        return self.problem.dims

    def __str__(self) -> str:
        return describe(self)


def thread_options(p: int, cores: int, hosts: int = 1, oversubscribe: bool = False) -> list[int]:
    """BLAS threads per rank with (ranks per host) x threads <= cores of a host, the p ranks
    spread evenly over ``hosts``; none when the ranks alone outnumber the cores, unless
    ``oversubscribe`` (then 1: the validation times such plans too, to check their models)."""
    per_host = -(-p // max(1, hosts))
    if per_host > cores:
        return [1] if oversubscribe else []
    return list(range(1, cores // per_host + 1))


def plans(problem: Problem, nprocs: int, cores: int, hosts: int = 1, oversubscribe: bool = False) -> list[Plan]:
    """All distributed plans for ``problem`` using 2..nprocs ranks (``thread_options``)."""
    fam = family(problem.family)
    enumerate_grid = GRID_PLANS[fam.name]
    blocks = usable_blocks(problem.order, fam.blocks)
    out: list[Plan] = []
    for p in range(2, nprocs + 1):
        for t in thread_options(p, cores, hosts, oversubscribe):
            for r, c in grids(p):
                out += enumerate_grid(problem, Plan(fam.distributed[0], p, r, c, threads=t, backend=fam.library),
                                      blocks)
    return out


def _factor_plans(problem: Problem, base: Plan, blocks: list[int]) -> list[Plan]:
    """Block-cyclic factorizations: every block on every grid."""
    return [replace(base, b=b) for b in blocks]


def _solve_plans(problem: Problem, base: Plan, blocks: list[int]) -> list[Plan]:
    """The solve's back substitution's ring runs on 1 x c grids."""
    return [replace(base, b=b) for b in blocks] if base.r == 1 else []


def _gemm_plans(problem: Problem, base: Plan, blocks: list[int]) -> list[Plan]:
    """SUMMA and Strassen-SUMMA at every block; CBSR off one process column (there it runs BSR's
    scatter, product and gather), BSR on one, Cannon on square grids, Strassen master/slave on p x 1."""
    p, r, c = base.p, base.r, base.c
    out = [replace(base, algorithm="cbsr")] if c > 1 else []
    out += [replace(base, algorithm="summa", b=b) for b in blocks]
    out += [replace(base, algorithm="strassen_summa", b=b, level=lv)
            for lv in DIST_STRASSEN_LEVELS if problem.order >> lv >= 64
            for b in usable_blocks(problem.order >> lv, family(problem.family).blocks)]
    if c == 1:
        out.append(replace(base, algorithm="bsr"))
    if r == c:
        out.append(replace(base, algorithm="cannon"))
    if (r, c) == (p, 1):
        out.append(replace(base, algorithm="strassen_ms", level=1))
    return out


def _stencil_plans(problem: StencilProblem, base: Plan, halos: list[int]) -> list[Plan]:
    """Every schedule and kernel backend at every halo width that is a multiple of the stencil's
    radius and fits the tiles (004's border-first order at one step per exchange only)."""
    out = []
    for h in halos:
        if h % problem.radius or fits(problem.rows, problem.cols, base.r, base.c, h):
            continue
        for backend in STENCIL_BACKENDS:
            if backend != "numba-stencil" and base.threads > 1:
                continue
            out += [replace(base, algorithm=a, b=h, backend=backend) for a in family(problem.family).distributed
                    if a != "border_first" or h == problem.radius]
    return out


def by_speed(problem: Problem, candidates: list[Plan], cp: CommParams) -> list[Plan]:
    """The plans again with each rank's share following its host's speed (``Plan.weights``), for
    a family whose models price those speeds, where the ranks' speeds differ by more than the
    spread of ranks running the same work (``cp.compute_skew``, as ``placement.heterogeneous``)."""
    if not family(problem.family).by_speed:
        return []
    out = []
    for plan in candidates:
        speeds = rank_speeds(plan.p, cp)
        if plan.algorithm in WEIGHTED and plan.weights is None and speeds.max() > speeds.min() * (
                1.0 + cp.compute_skew(plan.p)):
            out.append(replace(plan, weights=tuple(float(v) for v in speeds)))
    return out


# How each family's plans are laid on one grid: (problem, the grid's plan, usable blocks) -> plans.
GRID_PLANS: dict[str, Callable[..., list[Plan]]] = {
    "gemm": _gemm_plans, "cholesky": _factor_plans, "lu": _factor_plans, "solve": _solve_plans,
    "stencil": _stencil_plans}


@dataclass(frozen=True)
class _PlanContext:
    """What the correction steps know of one plan: the problem, the SP and comm parameters, the
    platform's measured contention and phase factors."""

    problem: Problem
    plan: Plan
    sp: SystemParameters
    cp: CommParams
    contention: Contention      # factor 1 where not measured
    factors: PhaseFactors
    cores: float = math.inf     # a host's cores (the root's node's): the threads a quota-free host runs at once

    @classmethod
    def of(cls, problem: Problem, plan: Plan, sp: SystemParameters, cp: CommParams,
           contention: Contention | None = None, factors: PhaseFactors | None = None,
           cores: float = math.inf) -> _PlanContext:
        path, key = getattr(sp, "path", None), cp.platform.get("key")
        return cls(problem, plan, sp, cp,
                   load_contention(path, key) if contention is None else contention,
                   load_phase_factors(path, key) if factors is None else factors, cores)

    @property
    def family(self) -> str:
        return self.problem.family

    @property
    def contended(self) -> bool:
        return bool(self.contention.available and self.plan.p > 1)


def predict(problem: Problem, plan: Plan, sp: SystemParameters, cp: CommParams, fitted: bool = True,
            cores: float = math.inf) -> dict[str, float]:
    """Phase times of one plan through the correction stack: the model of its algorithm, the
    per-call overhead, per-rank k slowed by the measured contention of ``p x threads`` busy cores
    (``autotune.db.contention``), time-sliced beyond the hosts' CPU quotas (hosts of ``cores``),
    then the platform's fitted phase factors (``models.fitted_phases``) unless ``fitted`` is False.
    ValueError for a plan whose algorithm has no model in the family (one process included)."""
    check_algorithm(plan.algorithm, problem.family, family(problem.family).distributed)
    model, calibrated, _ = _stack(_PlanContext.of(problem, plan, sp, cp, cores=cores))
    return calibrated if fitted else model


def _stack(ctx: _PlanContext) -> tuple[dict[str, float], dict[str, float], tuple[Correction, ...]]:
    """(phases before calibration, phases after, the corrections applied) of ``ctx``'s plan."""
    base = _model(ctx, ctx.sp)
    model, done = corrections.apply(base, ctx, _PLAN_STACK, _total)
    calibrated, cal = corrections.apply(model, ctx, _CALIBRATION, _total)
    return model, calibrated, done + cal


def _total(phases: dict[str, float]) -> float:
    return phases["total"]


def _model(ctx: _PlanContext, sp: SPLookup) -> dict[str, float]:
    """The analytical model of the plan's algorithm on the SP view ``sp``."""
    return PLAN_MODELS[ctx.family].phases(ctx.problem, ctx.plan, sp, ctx.cp)


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
    phase = PLAN_MODELS[ctx.family].wait_phase.get(ctx.plan.algorithm)
    if phase is None:
        out = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy))
        note = f"k of {busy} busy cores (mean rank)"
    else:
        out = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy, "max"))
        fast = _model(ctx, ContendedSP(ctx.sp, ctx.contention, busy, "min"))
        out = {**out, phase: out[phase] + max(out["compute"] - fast["compute"], 0.0)}
        note = f"slowest rank's k of {busy} busy cores, the fastest waiting in {phase}"
    return _with_call_overhead(out, ctx.plan, ctx.cp), note


def _quota_step(phases: dict[str, float], ctx: _PlanContext) -> tuple[dict[str, float], str]:
    """CPU work beyond what a host's quota gives runs time-sliced (``models.links.slices``): the
    step loop (compute, communication) at the slowest rank's slice, since a throttled rank stalls
    the others through each CFS period, and the root's moves (distribution, collection) at its own."""
    cut = slices(range(ctx.plan.p), max(ctx.plan.threads, 1), ctx.cp, ctx.cores)
    worst, root = float(cut.max()), float(cut[0])
    if worst <= 1.0:
        return phases, ""
    scale = {"compute": worst, "communication": worst, "distribution": root, "collection": root}
    out = {k: v * scale.get(k, 1.0) for k, v in phases.items()}
    before = sum(phases.get(k, 0.0) for k in PHASES)
    out["total"] = phases["total"] * (sum(out.get(k, 0.0) for k in PHASES) / before if before > 0 else worst)
    return out, f"time-sliced x{worst:.2f} (ranks x threads over the hosts' CPU quotas)"


def _calibration_step(phases: dict[str, float], ctx: _PlanContext) -> tuple[dict[str, float], str]:
    """The platform's fitted T(n, p) of the plan's series where one is in use (square problems: it
    was fitted on them), its phases scaled to its total (``models.fitted_plans``); else the fitted
    phase factors (``models.fitted_phases``) on every phase and the total."""
    fitted = _plan_fit(ctx.factors, ctx.problem, ctx.plan)
    if fitted is not None:
        t, fit = fitted
        scale = t / phases["total"] if phases["total"] > 0 else 1.0
        return {ph: phases.get(ph, 0.0) * scale for ph in PHASE_NAMES}, _fit_note(fit)
    out, held = _within_total(ctx.factors.apply(ctx.family, ctx.plan.algorithm, phases, ctx.plan.p))
    applied = [f"{ph} x{f:.2f}" for ph in PHASE_NAMES
               if (f := ctx.factors.factor(ctx.family, ctx.plan.algorithm, ph, ctx.plan.p)) != 1.0]
    note = "phase factors " + ", ".join(applied) if applied else ""
    return out, note + (f"; {', '.join(held)} held at the total" if held else "")


def _within_total(phases: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """``phases`` with no phase above the total, and the phases that were: each phase is part of the
    run the total times, but its own factor and the total's, fitted apart, can scale it past the
    total (outside the fitted orders, mostly). The total, which ranks the plan, is kept."""
    total = phases["total"]
    held = [ph for ph in PHASES if phases.get(ph, 0.0) > total]
    return ({ph: min(v, total) if ph in held else v for ph, v in phases.items()} if held else phases), held


def _plan_fit(factors: PhaseFactors, problem: Problem, plan: Plan):
    """(seconds, model) of the plan series' fitted T(n, p) in use at ``problem`` (square problems
    only: it was fitted on them), else None."""
    dims = problem.dims
    return factors.plans.seconds(problem.family, plan, dims[0]) if len(set(dims)) == 1 else None


def _fit_note(fit) -> str:
    """What a fitted T(n, p) is and how well it predicted its held-out runs."""
    return (f"fitted T(n, p) = {fit.formula} (held-out APE {fit.ape_fit:.1f}%, phase factors "
            f"{fit.ape_factor:.1f}%)")


PLAN_STEPS = {"overhead": _overhead_step, "contention": _contention_step, "quota": _quota_step}
_PLAN_STACK = corrections.stack(PLAN_STEPS)
_LOCAL_STACK = corrections.stack({"quota": _quota_step})
_CALIBRATION = corrections.stack({"calibration": _calibration_step})


def _with_call_overhead(phases: dict[str, float], plan: Plan, cp: CommParams) -> dict[str, float]:
    """The phases plus the fixed per-call costs the comm probe measured for this algorithm
    (``cp.call_overhead``: the call's agreement, communicator split and grid, beyond its model)."""
    extra = cp.call_overhead(plan.algorithm) if hasattr(cp, "call_overhead") else {}
    if not extra:
        return phases
    out = {k: v + extra.get(k, 0.0) for k, v in phases.items()}
    out["total"] = phases["total"] + sum(extra.get(k, 0.0) for k in PHASES)
    return out


def _calibration(family: str, sp: SystemParameters, cp: CommParams) -> Calibration | None:
    """The platform's phase calibration of ``family``, None where it has none."""
    key = cp.platform.get("key")
    factors = platform_factors(sp, cp)
    info = factors.family_infos().get(family)
    if info is None:
        return None
    runs = info.get("runs")
    return Calibration(str(key), str(info.get("fitted") or factors.updated), None if runs is None else int(runs),
                       tuple(int(n) for n in info.get("sizes", ())), factors)


def local_phases(problem: Problem, sp: SystemParameters, cores: int, nprocs: int = 1,
                 memory_bytes: int | None = None) -> tuple[Plan, dict[str, float]]:
    """The one-process candidate: the single-process selector's choice on the cores the other
    ``nprocs - 1`` ranks leave free (an idle MPI rank still polls, so it occupies a core), with
    what the family's one-process run over MPI adds (``models.plan_models``)."""
    dec = choose(problem, sp, max(1, cores - (nprocs - 1)), memory_bytes=memory_bytes)
    best = next(r for r in dec.ranking if r.candidate == dec.chosen)
    plan = Plan("local", 1, 1, 1, threads=dec.chosen.threads, backend=dec.chosen.backend)
    return plan, PLAN_MODELS[problem.family].local_phases(problem, plan, sp, best.predicted)


def rank_plans(problem: Problem, nprocs: int, sp: SystemParameters, cp: CommParams, cores: int,
               allow_strassen: bool = False, oversubscribe: bool = False, min_efficiency: float | None = None,
               memory_bytes: int | None = None) -> DistDecision:
    """Every plan for ``dims`` on up to ``nprocs`` ranks, fastest predicted first: ranks x BLAS
    threads never exceed the cores of a host (the platform's ``hosts``), unless ``oversubscribe``.
    With ``min_efficiency`` the plans predicted below it come after those above (the chosen plan
    is the fastest efficient one; 004's shared-cluster rule). Plans predicted to need more than
    ``memory_bytes`` on a host (``models.memory``; None: no cap) are dropped."""
    fam = problem.family
    if fam not in DISTRIBUTED:
        raise ValueError(f"no distributed plans for {fam!r}; families with them: {', '.join(DISTRIBUTED)}")
    ranking = []
    path, key = getattr(sp, "path", None), cp.platform.get("key")
    cont, factors = load_contention(path, key), load_phase_factors(path, key)
    if sp.table is not None:
        plan, phases = local_phases(problem, sp, cores, nprocs, memory_bytes)
        ctx = _PlanContext.of(problem, plan, sp, cp, cont, factors, cores)
        phases, sliced = corrections.apply(phases, ctx, _LOCAL_STACK, _total)
        calibrated, done = corrections.apply(phases, ctx, _CALIBRATION, _total)
        ranking.append(DistRanked(plan, calibrated, phases, sliced + done))
    hosts = int(cp.platform.get("hosts", 1) or 1)
    candidates = plans(problem, nprocs, cores, hosts, oversubscribe)
    for plan in candidates + by_speed(problem, candidates, cp):
        if "strassen" in plan.algorithm and not allow_strassen:
            continue
        model, calibrated, done = _stack(_PlanContext.of(problem, plan, sp, cp, cont, factors, cores))
        if all(math.isfinite(v) for v in model.values()):
            ranking.append(DistRanked(plan, calibrated, model, done))
    if not ranking:
        raise LookupError(f"no plan for {problem} on {nprocs} ranks")
    _set_efficiency(ranking, problem, sp)
    ranking.sort(key=lambda r: r.seconds)
    ranking, notes = keep_fitting(ranking, lambda r: host_bytes(problem, r.plan, hosts), memory_bytes,
                                  lambda r: str(r.plan), "plans")
    if min_efficiency is not None:
        low = [r for r in ranking if r.efficiency is not None and r.efficiency < min_efficiency]
        if low and len(low) < len(ranking):
            ranking.sort(key=lambda r: (r.efficiency is not None and r.efficiency < min_efficiency, r.seconds))
            notes.append(f"{len(low)} plans predicted below efficiency {min_efficiency:g} ranked after the others")
    if not oversubscribe and not thread_options(nprocs, cores, hosts):
        notes.append(f"plans with more ranks than the {cores} cores per host left out (ranks x threads <= cores)")
    chosen = ranking[0].plan

    def terms() -> list[str]:
        return [] if chosen.algorithm == "local" else PLAN_MODELS[fam].explain(problem, chosen, sp, cp)
    return DistDecision(problem, nprocs, ranking, notes, _calibration(fam, sp, cp), terms)


def host_bytes(problem: Problem, plan: Plan, hosts: int) -> float | None:
    """Bytes ``plan`` is predicted to allocate on its busiest host (None: no memory model; the
    one-process plan's candidate was already chosen within the cap)."""
    fp = None if plan.algorithm == "local" else plan_footprint(problem.dims, plan)
    return None if fp is None else fp.host_bytes(ranks_on_busiest_host(plan.p, hosts))


def _set_efficiency(ranking: list[DistRanked], problem: Problem, sp: SystemParameters) -> None:
    """Each plan's predicted efficiency against the single-process best on one core (T_seq)."""
    if sp.table is None:
        return
    try:
        dec = choose(problem, sp, 1)
    except LookupError:
        return
    t_seq = next(r.predicted for r in dec.ranking if r.candidate == dec.chosen)
    for r in ranking:
        used = max(r.plan.p * r.plan.threads, 1)
        r.efficiency = t_seq / (used * r.seconds) if r.seconds > 0 else None


def describe(dec: DistDecision, top: int = 12) -> str:
    """Text ranking: plan, predicted total and phases."""
    lines = [f"{dec.problem} on up to {dec.nprocs} ranks: chose {dec.chosen}",
             calibration_line(dec)]
    lines += [f"  {t}" for t in dec.terms()]
    fp = None if dec.chosen.algorithm == "local" else plan_footprint(dec.dims, dec.chosen)
    lines += [f"  memory: {fp.describe()}"] if fp is not None else []
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
    """Which phase calibration the ranking used, and what it applied to the chosen plan: its
    series' fitted T(n, p) where one is in use, else its factors."""
    cal = dec.calibration
    if cal is None:
        return "calibration: none (analytical models only)"
    runs = "" if cal.runs is None else f", {cal.runs} runs"
    sizes = f" at n = {', '.join(map(str, cal.sizes))}" if cal.sizes else ""
    plan = dec.chosen
    applied = [f"{ph} x{f:.2f}" for ph in PHASE_NAMES
               if (f := cal.factors.factor(dec.family, plan.algorithm, ph, plan.p)) != 1.0]
    fitted = _plan_fit(cal.factors, dec.problem, plan)
    used = (_fit_note(fitted[1]) if fitted else f"{plan.algorithm} factors " + ", ".join(applied) if applied
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
        check_algorithm(config.algorithm, family, ("local", *FAMILIES[family].distributed))
    return config


def check_algorithm(algorithm: str, family: str, known: tuple[str, ...]) -> None:
    """ValueError naming the family's ``known`` algorithms unless ``algorithm`` is one of them
    (not the bare KeyError of a table lookup)."""
    if algorithm not in known:
        raise ValueError(f"algorithm {algorithm!r} is not a distributed {family} algorithm; "
                         f"choose from {list(known)}")


__all__ = ["GRID_PLANS", "DistDecision", "DistRanked", "as_plan", "check_algorithm", "describe", "grids", "plans",
           "predict", "rank_plans", "thread_options"]
