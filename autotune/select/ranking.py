"""Rank every candidate of a problem: each group's model over the measured AP space, through the
correction stack (the measured evidence's steps), then the margin rule; ``choose`` caches the decision."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from autotune.backends.pools import PoolState
from autotune.core.assumptions import COMPOSED_RISK, FLOOR_SLACK, INCUMBENT_MARGIN
from autotune.core.cache import BoundedCache
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import Candidate
from autotune.db.lookup import SPLookup, SystemParameters
from autotune.db.pools import Transitions, transitions_for
from autotune.feedback import learn
from autotune.models import gemm as gemm_models
from autotune.models import memory
from autotune.models.dispatch import dispatch as dispatch_model
from autotune.models.fitted import fitted_for, override

from . import corrections
from .decision import Decision, Ranked
from .groups import GROUPS, Evaluation, thread_sps
from .margin import apply_margin
from .memory import keep_fitting
from .recorder import Recorder

# The hand-set hedge and margin (COMPOSED_RISK, INCUMBENT_MARGIN, FLOOR_SLACK) live in
# autotune/core/assumptions.py; the thread-pool charges are measured (autotune.db.pools).
# They, the gemm models the groups call (select.groups) and the candidate groups stay readable
# here, where they were before the ranking was split.
__all__ = ["COMPOSED_RISK", "FLOOR_SLACK", "GROUPS", "INCUMBENT_MARGIN", "STEPS", "Decision", "Ranked", "choose",
           "clear_cache", "gemm_models", "rank"]


def rank(problem: Problem, sp: SystemParameters, threads: int, allow_strassen: bool = False,
         explain: bool = False, prune: bool = False, after: PoolState | None = None,
         memory_bytes: int | None = None) -> Decision:
    """Evaluate every candidate for ``problem`` within a ``threads`` budget, as the call that
    follows ``after`` (the previous library call while its pool counts; None: an idle spell).
    Candidates predicted to allocate more than ``memory_bytes`` (None: no cap) are dropped.

    ``prune``: skip groups whose lower bound (with charges) already exceeds a ranked candidate
    (branch and bound: the choice is unchanged, the ranking shorter; ``choose`` prunes).
    """
    if sp.table is None:
        raise LookupError("no system parameters: nothing to rank")
    family, dims = problem.family, problem.dims
    ranking: list[Ranked] = []
    groups = list(GROUPS[family](problem, sp.table, threads, allow_strassen, thread_sps(sp)))
    ev = _Evidence.of(sp, family, tuple(dims), after)
    prune = prune and not ev.any       # measured corrections may undercut the analytical floors
    if prune:
        groups.sort(key=lambda g: g.floor * _charge(family, g, ev))
    best, skipped = np.inf, 0
    reference = FAMILIES[family].incumbent          # never pruned: the choice is always weighed against it
    for g in groups:
        if prune and (g.algorithm, g.backend) != reference and g.floor * _charge(family, g, ev) > best:
            skipped += g.size
            continue
        recorder = Recorder(sp) if explain else None
        view: SPLookup = sp if recorder is None else recorder
        parts: dict | None = {} if explain else None
        times = np.asarray(g.model(view, np.asarray(g.params), g.variants, parts), dtype=float).ravel()
        extra = _dispatch(family, g.algorithm, g.backend, g.threads, threads, view)
        terms = tuple(recorder.log) if recorder is not None else ()
        labels = [(v, p) for v in g.variants for p in g.params]
        splits = _splits(parts, len(labels))
        ranking += [_corrected(_Context(family, Candidate(g.algorithm, g.backend, g.threads, int(p), v), ev,
                                        float(s), extra), terms, split)
                    for (v, p), s, split in zip(labels, times, splits, strict=True)]
        best = min(best, min(r.seconds for r in ranking[-len(labels):]))
    if not ranking:
        raise LookupError(f"no measured candidate for {family} within {threads} thread(s)")
    ranking.sort(key=lambda r: r.seconds)
    ranking, dropped = keep_fitting(ranking, lambda r: memory.local(dims, family, r.candidate).root_bytes,
                                    memory_bytes, lambda r: str(r.candidate), "candidates")
    chosen, incumbent, notes, margin = apply_margin(family, ranking, sp)
    notes = ([problem.note] if problem.note else []) + notes + dropped
    if skipped:
        notes.append(f"{skipped} candidates pruned by their lower bound")
    return Decision(family, tuple(dims), threads, ranking, chosen, incumbent, notes, after, margin=margin)


def _dispatch(family: str, algorithm: str, backend: str, threads: int, budget: int, sp: SPLookup) -> float:
    """What a tuned call adds around the library's own time on this candidate's path (probe's
    ``dispatch`` pattern, where measured for the family's routine); 0 for the incumbent at the full
    budget, which the C entry hands straight to numpy/scipy (as a plain call would)."""
    fam = FAMILIES[family]
    if ((algorithm, backend) == fam.incumbent and threads == budget) or fam.routine is None:
        return 0.0
    if not sp.has(fam.routine, backend, threads, "dispatch"):
        return 0.0
    return dispatch_model(fam.routine, backend, threads, sp)


@dataclass(frozen=True)
class _Evidence:
    """What measurements add to the analytical models for one problem: fitted models in use and
    measured composed-model risks (``autotune-install --validate``), learned factors (on-line
    refinement, ``autotune refit``)."""

    sp: SystemParameters
    dims: tuple[int, ...]
    fitted: bool
    learned: dict
    risk: dict        # algorithm -> measured composed-model risk for this family
    pools: Transitions
    after: PoolState | None

    @classmethod
    def of(cls, sp: SystemParameters, family: str, dims: tuple[int, ...], after: PoolState | None = None) -> _Evidence:
        fitted = fitted_for(sp)
        path = getattr(sp, "path", None)
        risk = (getattr(fitted, "info", None) or {}).get("risk", {}).get(family, {})
        return cls(sp, dims, bool(fitted is not None and fitted.in_use),
                   learn.load_learned(path) if path is not None else {},
                   {str(k): float(v) for k, v in risk.items()}, transitions_for(sp), after)

    @property
    def any(self) -> bool:
        return self.fitted or bool(self.learned) or learn.active()


@dataclass(frozen=True)
class _Context:
    """What the correction steps know of one candidate: its analytical time, the dispatch a tuned
    call adds on its path, and the measured evidence for the problem."""

    family: str
    candidate: Candidate
    ev: _Evidence
    analytical: float
    dispatch: float

    @functools.cached_property
    def fitted(self) -> float | None:
        """The fitted model's seconds where one is in use for this candidate, else None."""
        if not self.ev.fitted:
            return None
        seconds, source = override(self.candidate, self.ev.dims, self.analytical, self.ev.sp)
        return seconds if source == "fitted" else None

    @property
    def uncharged(self) -> float:
        """The pure prediction (fitted, or analytical plus dispatch): what learning compares against."""
        return self.fitted if self.fitted is not None else self.analytical + self.dispatch


def _fitted_step(seconds: float, ctx: _Context) -> tuple[float, str]:
    """A fitted model of the validation step's measured times replaces the analytical one."""
    return (seconds, "") if ctx.fitted is None else (ctx.fitted, "fitted model (validation step)")


def _overhead_step(seconds: float, ctx: _Context) -> tuple[float, str]:
    """The probed dispatch of a tuned call on this path; a fitted model's measured times include it."""
    if ctx.fitted is not None or not ctx.dispatch:
        return seconds, ""
    return seconds + ctx.dispatch, f"+{ctx.dispatch * 1e6:.1f} us tuned-call dispatch, probed"


def _contention_step(seconds: float, ctx: _Context) -> tuple[float, str]:
    """The measured cost of following the previous call (its pool may still spin), or of waking
    this library's pool after an idle spell (docs/models.md#pools.switch)."""
    cand, after, pools = ctx.candidate, ctx.ev.after, ctx.ev.pools
    extra = pools.extra(after, cand.backend, cand.threads, seconds)
    if extra <= 0.0:
        return seconds, ""
    if after is not None:
        why = f"after {after.backend} {after.threads}t"
    else:
        why = "pool wake-up" if pools.measured(cand.backend) else "cold machine (no pool)"
        why += " after an idle spell"
    return seconds + extra, f"+{extra * 1e3:.3f} ms {why}, measured"


def _risk_step(seconds: float, ctx: _Context) -> tuple[float, str]:
    """The composed-model hedge: validation's measured risk, else the prior; none under a fitted model."""
    measured = ctx.ev.risk.get(ctx.candidate.algorithm)
    risk = 1.0 if ctx.fitted is not None else _risk(ctx.candidate.algorithm, measured)
    if risk == 1.0:
        return seconds, ""
    return seconds * risk, "composed-model risk, " + ("measured" if measured is not None else "prior")


def _calibration_step(seconds: float, ctx: _Context) -> tuple[float, str]:
    """A learned factor (on-line refinement, ``autotune refit``) replaces the guessed charges."""
    if not (ctx.ev.learned or learn.active()):
        return seconds, ""
    base = ctx.uncharged
    measured = learn.ranked_seconds(ctx.candidate, base, seconds, ctx.ev.dims, ctx.ev.learned)
    if measured == seconds:
        return seconds, ""
    return measured, f"model x{measured / base:.2f} measured factor (on-line refinement) in place of the charges"


STEPS = {"fitted": _fitted_step, "overhead": _overhead_step, "contention": _contention_step,
         "risk": _risk_step, "calibration": _calibration_step}
_STACK = corrections.stack(STEPS)


def _corrected(ctx: _Context, terms: tuple[str, ...], split: tuple[tuple[str, float], ...] = ()) -> Ranked:
    """The candidate ranked by its analytical time through the correction stack (``corrections``)."""
    seconds, done = corrections.apply(ctx.analytical, ctx, _STACK)
    return Ranked(ctx.candidate, seconds, terms, ctx.uncharged, done, split)


def _splits(parts: dict | None, count: int) -> list[tuple[tuple[str, float], ...]]:
    """Per candidate of a group, its (call kind, seconds) from the model's ``parts`` (flattened in
    the group's variant-major layout); empty where the model gave none that fit."""
    flat = {k: np.ravel(np.asarray(v, dtype=float)) for k, v in (parts or {}).items()}
    if not flat or any(a.size != count for a in flat.values()):
        return [()] * count
    return [tuple((k, float(a[i])) for k, a in flat.items() if a[i]) for i in range(count)]


def _risk(algorithm: str, measured: float | None) -> float:
    """Composed-model risk: the validation step's measurement where there is one, else the prior."""
    return COMPOSED_RISK.get(algorithm, 1.0) if measured is None else measured


def _charge(family: str, g: Evaluation, ev: _Evidence) -> float:
    """The risk step's factor on a group (its pruning bound; the pool charges only add time)."""
    return _risk(g.algorithm, ev.risk.get(g.algorithm))


_CACHE: BoundedCache[Decision] = BoundedCache()


def choose(problem: Problem, sp: SystemParameters, threads: int, allow_strassen: bool = False,
           after: PoolState | None = None, memory_bytes: int | None = None) -> Decision:
    """``rank`` with the decision cached per (problem, budget, Strassen allowed, SP source, pool
    state). The memory cap (which follows the host's available memory) ranks again, cached under
    it, only when the uncapped choice does not fit."""
    key = (problem, threads, allow_strassen, id(sp), learn.version(), after)
    dec = _CACHE.get_or_make(key, lambda: rank(problem, sp, threads, allow_strassen, prune=True, after=after))
    if memory_bytes is None or memory.local(problem.dims, problem.family, dec.chosen).root_bytes <= memory_bytes:
        return dec
    return _CACHE.get_or_make(key + (memory_bytes,), lambda: rank(problem, sp, threads, allow_strassen, prune=True,
                                                       after=after, memory_bytes=memory_bytes))


def clear_cache() -> None:
    _CACHE.clear()
