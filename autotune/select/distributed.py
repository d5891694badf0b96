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

from autotune.distributed.plan import PHASES, Plan
from autotune.models import movement

from .rank import choose

# Panel / block sizes considered for block-cyclic algorithms, and Strassen levels on SUMMA.
BLOCKS = (64, 128, 256, 512)
DIST_STRASSEN_LEVELS = (1, 2)
# Per-rank BLAS library of each family (the single-process incumbents).
RANK_BACKEND = {"gemm": "numpy-openblas", "cholesky": "scipy-openblas"}


@dataclass
class DistRanked:
    plan: Plan
    phases: dict[str, float]                 # the prediction in use (fitted phase factors applied)
    model: dict[str, float] | None = None    # the analytical model's phases (None: same as phases)

    @property
    def seconds(self) -> float:
        return self.phases["total"]


@dataclass
class DistDecision:
    family: str
    dims: tuple[int, ...]
    nprocs: int
    ranking: list[DistRanked]
    notes: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> Plan:
        return self.ranking[0].plan


def grids(p: int) -> list[tuple[int, int]]:
    """Every r x c with r * c = p (1 x p and p x 1 included: primes allowed)."""
    return [(r, p // r) for r in range(1, p + 1) if p % r == 0]


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
    small = min(dims)
    for p in range(2, nprocs + 1):
        for t in thread_options(p, cores, hosts, oversubscribe):
            for r, c in grids(p):
                if family == "cholesky":
                    out += [Plan("cholesky", p, r, c, b=b, threads=t, backend=be) for b in _blocks(small)]
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
    if family == "gemm":
        from autotune.models import distributed_gemm as module
    else:
        from autotune.models import distributed_cholesky as module
    return module


def predict(family: str, dims: tuple[int, ...], plan: Plan, sp, cp, fitted: bool = True, **problem) -> dict[str, float]:
    """Phase times of one plan (the model of its algorithm), per-rank k slowed by the measured
    contention of ``p x threads`` busy cores (``autotune.db.contention``), then scaled by the
    platform's fitted phase factors (``models.fitted_phases``) unless ``fitted`` is False.
    ``problem``: Cholesky's ``lower`` and input memory ``order`` (they orient its loop grid)."""
    model = _analytical(family, dims, plan, sp, cp, **problem)
    return _fitted(family, plan, model, sp, cp) if fitted else model


def _analytical(family: str, dims: tuple[int, ...], plan: Plan, sp, cp, **problem) -> dict[str, float]:
    """The model with contended k. The gemm models place their ranks on the cores themselves
    (``contention.lockstep``: the mean rank's k per core filled, the first done waiting for the
    last in the algorithm's next synchronisation). Cholesky's ranks (a ``WAIT_PHASE``) run at the
    slowest rank's k and the fastest waits out the difference in that phase, off the critical path
    (the total): where ranks outnumber the cores the scheduler gives some a core of their own and
    makes others share one. The models themselves keep the root's moves, while the others wait,
    uncontended (``contention.alone``)."""
    from autotune.db.contention import ContendedSP, load_contention

    models = _family_models(family)
    model = models.MODELS[plan.algorithm]
    kw = problem if family == "cholesky" else {}
    cont = load_contention(getattr(sp, "path", None), cp.platform.get("key"))
    if not (cont.available and plan.p > 1):
        return _with_call_overhead(model(*dims, plan, sp, cp, **kw), plan, cp)
    busy = plan.p * plan.threads
    phase = models.WAIT_PHASE.get(plan.algorithm)
    if phase is None:                    # the model places its ranks: the mean rank's k
        out = model(*dims, plan, ContendedSP(sp, cont, busy), cp, **kw)
    else:
        out = model(*dims, plan, ContendedSP(sp, cont, busy, "max"), cp, **kw)
        fast = model(*dims, plan, ContendedSP(sp, cont, busy, "min"), cp, **kw)
        out = {**out, phase: out[phase] + max(out["compute"] - fast["compute"], 0.0)}
    return _with_call_overhead(out, plan, cp)


def _with_call_overhead(phases: dict[str, float], plan: Plan, cp) -> dict[str, float]:
    """The phases plus the fixed per-call costs the comm probe measured for this algorithm
    (``cp.call_overhead``: the call's agreement, communicator split and grid, beyond its model)."""
    extra = cp.call_overhead(plan.algorithm) if hasattr(cp, "call_overhead") else {}
    if not extra:
        return phases
    out = {k: v + extra.get(k, 0.0) for k, v in phases.items()}
    out["total"] = phases["total"] + sum(extra.get(k, 0.0) for k in PHASES)
    return out


def _fitted(family: str, plan: Plan, phases: dict[str, float], sp, cp) -> dict[str, float]:
    from autotune.models.fitted_phases import load_phase_factors

    factors = load_phase_factors(getattr(sp, "path", None), cp.platform.get("key"))
    return factors.apply(family, plan.algorithm, phases, plan.p)


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
               allow_strassen: bool = False, oversubscribe: bool = False, **problem) -> DistDecision:
    """Every plan for ``dims`` on up to ``nprocs`` ranks, fastest predicted first: ranks x BLAS
    threads never exceed the cores of a host (the platform's ``hosts``), unless ``oversubscribe``.
    ``problem``: Cholesky's ``lower`` and input ``order`` (default: scipy's upper, numpy's C)."""
    if family not in RANK_BACKEND:
        raise ValueError(f"unknown family {family!r}")
    ranking = []
    if sp.table is not None:
        plan, phases = local_phases(family, dims, sp, cores, nprocs)
        ranking.append(DistRanked(plan, _fitted(family, plan, phases, sp, cp), phases))
    hosts = int(cp.platform.get("hosts", 1) or 1)
    for plan in plans(family, dims, nprocs, cores, hosts, oversubscribe):
        if "strassen" in plan.algorithm and not allow_strassen:
            continue
        model = _analytical(family, dims, plan, sp, cp, **problem)
        if all(math.isfinite(v) for v in model.values()):
            ranking.append(DistRanked(plan, _fitted(family, plan, model, sp, cp), model))
    if not ranking:
        raise LookupError(f"no plan for {family} {dims} on {nprocs} ranks")
    ranking.sort(key=lambda r: r.seconds)
    notes = []
    if not oversubscribe and not thread_options(nprocs, cores, hosts):
        notes.append(f"plans with more ranks than the {cores} cores per host left out (ranks x threads <= cores)")
    return DistDecision(family, tuple(dims), nprocs, ranking, notes)


def describe(dec: DistDecision, top: int = 12) -> str:
    """Text ranking: plan, predicted total and phases."""
    lines = [f"{dec.family} {'x'.join(map(str, dec.dims))} on up to {dec.nprocs} ranks: chose {dec.chosen}"]
    lines += [f"  note: {n}" for n in dec.notes]
    best = dec.ranking[0].seconds
    for i, r in enumerate(dec.ranking[:top], 1):
        ph = " ".join(f"{k[:5]}={r.phases.get(k, 0.0) * 1e3:.2f}" for k in PHASES)
        lines.append(f"  {i:2d}. {str(r.plan):58s} {r.seconds * 1e3:9.2f} ms x{r.seconds / best:5.2f}  ({ph} ms)")
    if len(dec.ranking) > top:
        lines.append(f"  ... {len(dec.ranking) - top} more plans")
    return "\n".join(lines)


def as_plan(config) -> Plan:
    """A ``Plan`` from a Plan or a dict of its fields (forcing a configuration)."""
    if isinstance(config, Plan):
        return config
    if isinstance(config, dict):
        return Plan(**config)
    raise TypeError(f"config must be a Plan or a dict of its fields, got {type(config).__name__}")


__all__ = ["DistDecision", "DistRanked", "as_plan", "describe", "grids", "plans", "predict", "rank_plans",
           "thread_options"]
