"""Evaluate every candidate's model over the measured AP space, rank, and cache the decision."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from autotune import learn
from autotune.models import cholesky as chol_models
from autotune.models import gemm as gemm_models
from autotune.models.fitted import override

from .candidates import DRIVER_BACKENDS, MIN_STRASSEN_LEAF, STRASSEN_LEVELS, Candidate

# Keep the library's own default (numpy's matmul / scipy's potrf at the full budget) unless an
# alternative is predicted faster by more than this fraction: model error must not cost speed.
# 10%: about the run-to-run difference of two standard probe runs (docs/models.md#selection.single).
INCUMBENT_MARGIN = 0.10
# Backend whose add kernel performs Strassen's additions (the Numba fused loops).
STRASSEN_ADD_BACKEND = "numba-reference"
_CACHE_LIMIT = 4096
# Two libraries' thread pools on the same cores fight: a pool keeps spinning after its call, so a
# multi-threaded call on a library other than the caller's default runs on a contended core.
# Set by hand (docs/models.md#selection.single); charged until the probe measures contention.
POOL_CONTENTION = 2.0
# A single-threaded call on another library than the default still loses its warm code and data
# to the default library's calls around it, so it is charged too (set by hand;
# docs/models.md#selection.single).
LIBRARY_SWITCH = 1.15
# Composed models (a sum of many separately measured calls) err more than a library routine timed
# whole. Prior factors, relative to the family's library routine, used until the validation step
# (``autotune-install --validate``) measures them (``measured_risk``); set by hand, see
# docs/models.md#selection.single (axpy is pruned anyway).
# The pure prediction is kept in ``Ranked.model_seconds``.
COMPOSED_RISK = {"blocked": 1.10, "gemv": 1.25, "axpy": 1.25, "strassen": 1.10}


@dataclass(frozen=True)
class Ranked:
    """A candidate, the time it is ranked by, the SP terms used, and the pure model prediction
    (``seconds`` may add selection charges such as thread-pool contention)."""

    candidate: Candidate
    seconds: float
    terms: tuple[str, ...] = ()
    model_seconds: float | None = None

    @property
    def predicted(self) -> float:
        return self.seconds if self.model_seconds is None else self.model_seconds


@dataclass
class Decision:
    """The ranking for one problem (best first) and the candidate chosen from it; ``str()`` is the
    human-readable explanation (``describe``)."""

    family: str
    dims: tuple[int, ...]
    threads: int
    ranking: list[Ranked]
    chosen: Candidate
    incumbent: Candidate | None = None
    notes: list[str] = field(default_factory=list)

    def predicted(self, cand: Candidate) -> float:
        for r in self.ranking:
            if r.candidate == cand:
                return r.seconds
        raise KeyError(str(cand))

    def describe(self, top: int = 12) -> str:
        """The choice, the ``top`` ranked candidates with predicted times and the SP values each used."""
        lines = [f"{self.family} {'x'.join(map(str, self.dims))}, thread budget {self.threads}: chose {self.chosen}"]
        lines += [f"  note: {n}" for n in self.notes]
        best = self.ranking[0].seconds
        for i, r in enumerate(self.ranking[:top], 1):
            lines.append(f"  {i:2d}. {str(r.candidate):42s} {r.seconds * 1e3:10.3f} ms  x{r.seconds / best:5.2f}")
            lines += [f"        {t}" for t in r.terms]
        if len(self.ranking) > top:
            lines.append(f"  ... {len(self.ranking) - top} more candidates")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


class _Recorder:
    """An SP view that remembers each lookup (for ``explain``)."""

    def __init__(self, sp):
        self.sp, self.log = sp, []

    def has(self, *key) -> bool:
        return self.sp.has(*key)

    def k(self, routine, backend, threads, x, pattern="square", param=0.0, dtype="float64"):
        out = self.sp.k(routine, backend, threads, x, pattern, param, dtype)
        xs, ks = np.atleast_1d(x), np.atleast_1d(out)
        ps = sorted({float(p) for p in np.atleast_1d(param) if p})
        where = f"{routine}/{pattern}" + (f"[{','.join(f'{p:g}' for p in ps)}]" if ps else "")
        if xs.size == 0:
            return out
        if xs.size == 1:
            self.log.append(f"k_{where}({float(xs[0]):.0f}) = {1e-9 / float(ks[0]):.2f} GF/s")
        else:
            self.log.append(f"k_{where} over {xs.size} sizes {float(xs.min()):.0f}..{float(xs.max()):.0f}: "
                            f"{1e-9 / float(ks.max()):.2f}..{1e-9 / float(ks.min()):.2f} GF/s")
        return out


def _threads(table, routine: str, backend: str, budget: int, pattern: str = "square") -> list[int]:
    return [t for t in range(1, budget + 1) if table.has(routine, backend, t, pattern)]


def _backends(table) -> tuple[str, ...]:
    return table.backends


# (algorithm, backend, threads, AP values, variants, model, floor): the model returns one time
# per (variant, AP value), variant-major (variants evaluated together share their common terms);
# floor is a cheap lower bound on all of them (seconds; 0 for none), used to prune.
Evaluation = tuple[str, str, int, tuple[int, ...], tuple[int, ...], Callable, float]
# Lower bounds are total flops times the fastest k the series ever showed, times this slack.
FLOOR_SLACK = 0.8


def _floor(table, flop: float, routines, backend: str, threads: int, upto: float) -> float:
    """A lower bound on a model summing ``flop`` flops over calls of ``routines`` ((routine, pattern))
    whose sizes and parameters (blocks) are all at most ``upto``."""
    return FLOOR_SLACK * flop * min(table.k_min(r, backend, threads, pat, upto=upto) for r, pat in routines)


def _gemm_groups(dims, table, budget: int, allow_strassen: bool) -> Iterator[Evaluation]:
    m, k, n = dims
    levels = tuple(lv for lv in STRASSEN_LEVELS if min(m, k, n) / 2**lv >= MIN_STRASSEN_LEAF)
    can_add = table.has("add", STRASSEN_ADD_BACKEND, 1, "view")
    for be in _backends(table):
        for t in _threads(table, "gemm", be, budget):
            yield "blas", be, t, (0,), (0,), lambda sp, p, v, be=be, t=t: [gemm_models.blas(m, k, n, be, t, sp)], 0.0
            if allow_strassen and levels and can_add:
                leaf_flops = 2.0 * m * k * n * (7 / 8) ** max(levels)
                yield "strassen", be, t, levels, (0,), lambda sp, p, v, be=be, t=t: gemm_models.strassen(
                    m, k, n, p, be, t, sp, add_backend=STRASSEN_ADD_BACKEND), \
                    _floor(table, leaf_flops, [("gemm", "square")], be, t, max(dims))


def _cholesky_groups(dims, table, budget: int, allow_strassen: bool) -> Iterator[Evaluation]:
    (n,) = dims
    total = float(chol_models.chol_flops(n))
    for be in _backends(table):
        for t in _threads(table, "potrf", be, budget):
            yield "potrf", be, t, (0,), (0,), lambda sp, p, v, be=be, t=t: [chol_models.potrf(n, be, t, sp)], 0.0
        if be not in DRIVER_BACKENDS or n < 2:
            continue
        for t in _threads(table, "trsm", be, budget, "panel"):
            blocks = tuple(int(b) for b in table.params("trsm", be, t, "panel") if b < n)
            if blocks and table.has("syrk", be, t, "panel") and table.has("potf2", be, t):
                both = table.has("gemm", be, t, "panel") and table.has("syrk", be, t)
                calls = [("potf2", "square"), ("trsm", "panel"), ("syrk", "panel")]
                calls += [("gemm", "panel"), ("syrk", "square")] if both else []
                yield "blocked", be, t, blocks, (0, 1) if both else (0,), \
                    lambda sp, p, v, be=be, t=t: chol_models.blocked_variants(n, p, v, be, t, sp), \
                    _floor(table, total, calls, be, t, n)
        for t in _threads(table, "gemv", be, budget, "segment"):
            yield "gemv", be, t, (0,), (0,), lambda sp, p, v, be=be, t=t: [chol_models.unblocked_gemv(n, be, t, sp)], \
                _floor(table, total, [("gemv", "segment")], be, t, n)
        for t in _threads(table, "axpy", be, budget, "trail"):
            yield "axpy", be, t, (0,), (0,), lambda sp, p, v, be=be, t=t: [chol_models.unblocked_axpy(n, be, t, sp)], \
                _floor(table, total, [("axpy", "trail")], be, t, n)


GROUPS = {"gemm": _gemm_groups, "cholesky": _cholesky_groups}
INCUMBENTS = {"gemm": ("blas", "numpy-openblas"), "cholesky": ("potrf", "scipy-openblas")}


def rank(family: str, dims: tuple[int, ...], sp, threads: int, allow_strassen: bool = False,
         explain: bool = False, prune: bool = False) -> Decision:
    """Evaluate every candidate for ``family`` on ``dims`` within a ``threads`` budget.

    ``prune``: skip groups whose lower bound (with charges) already exceeds a ranked candidate
    (branch and bound: the choice is unchanged, the ranking shorter; ``choose`` prunes).
    """
    if sp.table is None:
        raise LookupError("no system parameters: nothing to rank")
    ranking: list[Ranked] = []
    groups = list(GROUPS[family](dims, sp.table, threads, allow_strassen))
    ev = _Evidence.of(sp, family, tuple(dims))
    prune = prune and not ev.any       # measured corrections may undercut the analytical floors
    if prune:
        groups.sort(key=lambda g: g[6] * _charge(family, g[0], g[1], g[2], ev.risk.get(g[0]))[0])
    best, skipped = np.inf, 0
    for alg, be, t, params, variants, fn, floor in groups:
        if prune and floor * _charge(family, alg, be, t, ev.risk.get(alg))[0] > best:
            skipped += len(params) * len(variants)
            continue
        view = _Recorder(sp) if explain else sp
        times = np.asarray(fn(view, np.asarray(params), variants), dtype=float).ravel()
        extra = _dispatch(family, alg, be, t, threads, view)
        times = times + extra
        if explain and extra:
            view.log.append(f"+{extra * 1e6:.1f} us per tuned call on this path (probed dispatch)")
        terms = tuple(view.log) if explain else ()
        labels = [(v, p) for v in variants for p in params]
        ranking += [_charged(family, Candidate(alg, be, t, int(p), v), float(s), terms, explain, ev)
                    for (v, p), s in zip(labels, times, strict=True)]
        best = min(best, min(r.seconds for r in ranking[-len(labels):]))
    if not ranking:
        raise LookupError(f"no measured candidate for {family} within {threads} thread(s)")
    ranking.sort(key=lambda r: r.seconds)
    chosen, incumbent, notes = _apply_margin(family, ranking)
    if skipped:
        notes.append(f"{skipped} candidates pruned by their lower bound")
    return Decision(family, tuple(dims), threads, ranking, chosen, incumbent, notes)


def _dispatch(family: str, algorithm: str, backend: str, threads: int, budget: int, sp) -> float:
    """What a tuned gemm call adds around the library's own time on this candidate's path (probe's
    ``dispatch`` pattern); 0 for numpy's own call at the full budget, which the C entry hands
    straight to ``np.matmul`` (as a plain ``a @ b`` would), and where nothing was measured."""
    if family != "gemm" or ((algorithm, backend) == INCUMBENTS[family] and threads == budget):
        return 0.0
    if not sp.has("gemm", backend, threads, "dispatch"):
        return 0.0
    return gemm_models.dispatch(backend, threads, sp)


@dataclass(frozen=True)
class _Evidence:
    """What measurements add to the analytical models for one problem: fitted models in use and
    measured composed-model risks (``autotune-install --validate``), learned factors (on-line
    refinement, ``autotune refit``)."""

    sp: object
    dims: tuple[int, ...]
    fitted: bool
    learned: dict
    risk: dict        # algorithm -> measured composed-model risk for this family

    @classmethod
    def of(cls, sp, family: str, dims: tuple[int, ...]) -> _Evidence:
        fitted = getattr(sp, "fitted", None)
        path = getattr(sp, "path", None)
        risk = (getattr(fitted, "info", None) or {}).get("risk", {}).get(family, {})
        return cls(sp, dims, bool(fitted is not None and fitted.in_use),
                   learn.load_learned(path) if path is not None else {},
                   {str(k): float(v) for k, v in risk.items()})

    @property
    def any(self) -> bool:
        return self.fitted or bool(self.learned) or learn.active()


def _charged(family: str, cand: Candidate, seconds: float, terms: tuple[str, ...], explain: bool,
             ev: _Evidence) -> Ranked:
    """Rank by the model time (fitted where one is in use) times the selection charges, or times a
    measured factor where on-line refinement has one; the pure prediction stays in ``model_seconds``."""
    notes: list[str] = []
    risk = ev.risk.get(cand.algorithm)
    if ev.fitted:
        seconds, source = override(cand, ev.dims, seconds, ev.sp)
        if source == "fitted":
            notes.append("fitted model in use (validation step)")
            risk = 1.0                  # fitted to this series' measured times: no model risk left to charge
    factor, why = _charge(family, cand.algorithm, cand.backend, cand.threads, risk)
    ranked = seconds * factor
    if ev.learned or learn.active():
        measured = learn.ranked_seconds(cand, seconds, ranked, ev.dims, ev.learned)
        if measured != ranked:
            ranked, why = measured, [f"x{measured / seconds:.2f} measured factor (on-line refinement)"]
    notes += why
    if ranked == seconds and not notes:
        return Ranked(cand, seconds, terms)
    return Ranked(cand, ranked, terms + tuple(notes) if explain else (), seconds)


@functools.lru_cache(maxsize=256)
def _charge(family: str, algorithm: str, backend: str, threads: int,
            measured_risk: float | None = None) -> tuple[float, tuple[str, ...]]:
    """Selection charge factor and its reasons: library switch or pool contention off the default
    library, composed-model risk (the validation step's measurement where there is one, else the prior)."""
    factor, notes = 1.0, []
    if backend != INCUMBENTS[family][1]:
        f, why = ((POOL_CONTENTION, "thread-pool contention") if threads > 1 else (LIBRARY_SWITCH, "library switch"))
        factor *= f
        notes.append(f"x{f:g} {why} (not {INCUMBENTS[family][1]})")
    risk = COMPOSED_RISK.get(algorithm, 1.0) if measured_risk is None else measured_risk
    if risk != 1.0:
        factor *= risk
        notes.append(f"x{risk:.3g} composed-model risk" + (" (measured)" if measured_risk is not None else ""))
    return factor, tuple(notes)


def _apply_margin(family: str, ranking: list[Ranked]) -> tuple[Candidate, Candidate | None, list[str]]:
    """Best candidate, unless the library default is within INCUMBENT_MARGIN of it."""
    alg, be = INCUMBENTS[family]
    defaults = [r for r in ranking if r.candidate.algorithm == alg and r.candidate.backend == be]
    best = ranking[0]
    if not defaults:
        return best.candidate, None, []
    inc = max(defaults, key=lambda r: r.candidate.threads)   # the library's default: all budget threads
    if inc.seconds <= best.seconds * (1 + INCUMBENT_MARGIN):
        note = [] if inc is best else [
            f"kept the default {inc.candidate}: within {INCUMBENT_MARGIN:.0%} of {best.candidate}"]
        return inc.candidate, inc.candidate, note
    return best.candidate, inc.candidate, []


_CACHE: dict[tuple, Decision] = {}


def choose(family: str, dims: tuple[int, ...], sp, threads: int, allow_strassen: bool = False) -> Decision:
    """``rank`` with the decision cached per (family, dims, budget, Strassen allowed, SP source)."""
    key = (family, dims, threads, allow_strassen, id(sp), learn.version())
    dec = _CACHE.get(key)
    if dec is None:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        dec = _CACHE[key] = rank(family, dims, sp, threads, allow_strassen, prune=True)
    return dec


def clear_cache() -> None:
    _CACHE.clear()
