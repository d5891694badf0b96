"""Evaluate every candidate's model over the measured AP space, rank, and cache the decision."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from autotune.backends.pools import PoolState
from autotune.core.assumptions import COMPOSED_RISK, EXTRAPOLATION_PENALTY, FLOOR_SLACK, INCUMBENT_MARGIN
from autotune.core.cache import BoundedCache
from autotune.core.families import FAMILIES, Problem, label
from autotune.core.plans import Candidate
from autotune.db.pools import Transitions, transitions_for
from autotune.db.threads import ThreadSPs, load_threads
from autotune.feedback import learn
from autotune.models import cholesky as chol_models
from autotune.models import gemm as gemm_models
from autotune.models import lu as lu_models
from autotune.models import memory
from autotune.models import movement as movement_models
from autotune.models import stencil as stencil_models
from autotune.models.dispatch import dispatch as dispatch_model
from autotune.models.fitted import fitted_for, override
from autotune.models.gemm import NESTED_MAX_ASPECT, STRASSEN_ADD_BACKEND, omp_add_sps

from . import corrections
from .candidates import DRIVER_BACKENDS, MIN_STRASSEN_LEAF, NESTED_BACKEND, NESTED_LEVELS, STRASSEN_LEVELS
from .corrections import Correction
from .margin import apply_margin
from .memory import keep_fitting

# The mark of an SP term looked up beyond its series' measured sizes (explain, the report's maps).
UNMEASURED = "NOT MEASURED"

# The hand-set hedge and margin (COMPOSED_RISK, INCUMBENT_MARGIN, FLOOR_SLACK) live in
# autotune/core/assumptions.py; the thread-pool charges are measured (autotune.db.pools).

@dataclass(frozen=True)
class Ranked:
    """A candidate, the time it is ranked by, the SP terms used (``explain``), the pure model
    prediction (fitted or analytical, with dispatch) and the correction steps that led to ``seconds``."""

    candidate: Candidate
    seconds: float
    terms: tuple[str, ...] = ()
    model_seconds: float | None = None
    corrections: tuple[Correction, ...] = ()
    split: tuple[tuple[str, float], ...] = ()    # analytical time by routine call kind (``explain``)

    @property
    def predicted(self) -> float:
        return self.seconds if self.model_seconds is None else self.model_seconds

    @property
    def extrapolated(self) -> bool:
        """Some SP term of it was looked up beyond its series' measured sizes (ranked with ``explain``)."""
        return any(UNMEASURED in t for t in self.terms)


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
    after: PoolState | None = None     # the library call before this one, while its pool counts
    limit: str = ""                    # what set the thread budget (``autotune.host.budget``), for explain
    margin: float = INCUMBENT_MARGIN   # what the best alternative had to beat the reference by (select.margin)

    def _reference_line(self) -> str:
        """The reference call (numpy/scipy's own) beside the choice, and the margin between them."""
        ref = self.predicted(self.incumbent)
        line = (f"  reference: {self.incumbent} (numpy/scipy's call) {ref * 1e3:.3f} ms predicted; another "
                f"candidate replaces it only when predicted more than {self.margin:.0%} faster")
        if self.chosen != self.incumbent:
            line += f" ({self.chosen}: {ref / self.predicted(self.chosen):.2f}x)"
        return line

    def predicted(self, cand: Candidate) -> float:
        for r in self.ranking:
            if r.candidate == cand:
                return r.seconds
        raise KeyError(str(cand))

    def describe(self, top: int = 12) -> str:
        """The choice; the SP values the ``top`` candidates used, each listed once; then per candidate
        its ranked and model times, the SP values it read, and the corrections that changed it."""
        budget = f"{self.threads} ({self.limit})" if self.limit else f"{self.threads}"
        lines = [f"{label(self.family, self.dims)}, thread budget {budget}: chose {self.chosen}"]
        if self.incumbent is not None:
            lines.append(self._reference_line())
        lines.append(f"  after: {self.after.backend} {self.after.threads}t (its pool still counts)" if self.after
                     else "  after: an idle spell (no pool hot)")
        lines.append(f"  memory: {memory.local(self.dims, self.family, self.chosen).describe()}")
        lines += [f"  note: {n}" for n in self.notes]
        shown = self.ranking[:top]
        index = _sp_index(shown)
        if index:
            lines.append("  SP used:")
            lines += [f"    [{i}] {t}" for t, i in index.items()]
        lines.append(f"  ranked by: model, then {' > '.join(corrections.STEPS)} where they apply")
        best = self.ranking[0].seconds
        for i, r in enumerate(shown, 1):
            model = r.corrections[0].before if r.corrections else r.seconds
            refs = ",".join(str(index[t]) for t in dict.fromkeys(r.terms))
            lines.append(f"  {i:2d}. {str(r.candidate):42s} {r.seconds * 1e3:10.3f} ms  x{r.seconds / best:5.2f}"
                         f"  model {model * 1e3:.3f} ms" + (f"  SP [{refs}]" if refs else ""))
            if len(r.split) > 1:
                lines.append("        model by call: " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in r.split) + " ms")
            line = corrections.summary(r.corrections)
            lines += [f"        {line}"] if line else []
        if len(self.ranking) > top:
            lines.append(f"  ... {len(self.ranking) - top} more candidates")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def _sp_index(ranking: list[Ranked]) -> dict[str, int]:
    """Each distinct SP lookup of ``ranking``, numbered from 1 in order of first use."""
    index: dict[str, int] = {}
    for r in ranking:
        for t in r.terms:
            index.setdefault(t, len(index) + 1)
    return index


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
        who = f"{backend} {threads}t"
        if xs.size == 0:
            return out
        mark = self._unmeasured(xs, routine, backend, threads, pattern, dtype)
        if xs.size == 1:
            self.log.append(f"k_{where}({float(xs[0]):.0f}) {who} = {1e-9 / float(ks[0]):.2f} GF/s{mark}")
        else:
            self.log.append(f"k_{where} {who} over {xs.size} sizes {float(xs.min()):.0f}..{float(xs.max()):.0f}: "
                            f"{1e-9 / float(ks.max()):.2f}..{1e-9 / float(ks.min()):.2f} GF/s{mark}")
        return out

    def _unmeasured(self, xs: np.ndarray, *series) -> str:
        """The mark of a lookup outside its series' measured sizes (empty inside, or never measured:
        the default's own warning says that)."""
        table = self.sp.table
        if table is None or not table.has(*series):
            return ""
        lo, hi = table.measured_range(*series)
        if lo < hi and (xs.min() < lo or xs.max() > hi):
            return (f" [{UNMEASURED}: measured {lo:.0f}..{hi:.0f}; extrapolated, +{EXTRAPOLATION_PENALTY:.0%} "
                    "per octave beyond]")
        return ""


def _threads(table, routine: str, backend: str, budget: int, pattern: str = "square") -> list[int]:
    return [t for t in range(1, budget + 1) if table.has(routine, backend, t, pattern)]


def _backends(table) -> tuple[str, ...]:
    return table.backends


@dataclass(frozen=True)
class Evaluation:
    """A group of candidates evaluated by one model call: ``model(sp, params, variants, parts)``
    returns one time per (variant, AP value), variant-major (variants evaluated together share their
    common terms), and fills ``parts`` (when not None) with the time by routine call kind in the
    same layout; ``floor`` is a cheap lower bound on all of them (seconds; 0 for none), used to prune."""

    algorithm: str
    backend: str
    threads: int
    params: tuple[int, ...]
    variants: tuple[int, ...]
    model: Callable
    floor: float = 0.0

    @property
    def size(self) -> int:
        return len(self.params) * len(self.variants)



def _floor(table, flop: float, routines, backend: str, threads: int, upto: float) -> float:
    """A lower bound on a model summing ``flop`` flops over calls of ``routines`` ((routine, pattern))
    whose sizes and parameters (blocks) are all at most ``upto``."""
    return FLOOR_SLACK * flop * min(table.k_min(r, backend, threads, pat, upto=upto) for r, pat in routines)


def _layout_measured(table, backend: str, threads: int, layout: str) -> bool:
    """Is a BLAS gemm on ``backend`` priced on a series measured in this layout? ("nn": square; the
    transposed layouts: their own patterns; "aat", numpy's syrk, only numpy's own call runs.)"""
    if layout == "aat":
        return False
    return table.has("gemm", backend, threads, "square" if layout == "nn" else layout)


def _gemm_groups(problem: Problem, table, budget: int, allow_strassen: bool,
                 tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    """The gemm candidates in the problem's layout: a library never measured in it is no candidate,
    but for the reference call (numpy's own matmul), which runs whatever the layout."""
    dims = problem.dims
    m, k, n = dims
    layout, copied = problem.layout, problem.copied
    tsp = tsp or ThreadSPs()
    levels = tuple(lv for lv in STRASSEN_LEVELS if min(m, k, n) / 2**lv >= MIN_STRASSEN_LEAF)
    levels = levels if layout != "aat" else ()
    can_add = table.has("add", STRASSEN_ADD_BACKEND, 1, "view")
    can_omp = omp_add_sps(tsp) is not None
    variants = (0,) * can_add + (1,) * can_omp        # Strassen's addition kernel version (models.gemm)
    reference = FAMILIES["gemm"].incumbent
    for be in _backends(table):
        for t in _threads(table, "gemm", be, budget):
            measured = _layout_measured(table, be, t, layout)
            if measured or ("blas", be) == reference:
                priced = layout if measured or layout == "aat" else "nn"
                yield Evaluation("blas", be, t, (0,), (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t, priced=priced: [
                                     gemm_models.blas(m, k, n, be, t, sp, parts, priced, copied)])
            if allow_strassen and levels and variants:
                leaf_flops = 2.0 * m * k * n * (7 / 8) ** max(levels)
                yield Evaluation("strassen", be, t, levels, variants,
                                 lambda sp, p, v, parts=None, be=be, t=t: _strassen_variants(
                                     m, k, n, p, v, be, t, sp, tsp, parts,
                                     copied + gemm_models.transposed_copies(m, k, n, layout)),
                                 _floor(table, leaf_flops, [("gemm", "square")], be, t, max(dims)))
    if allow_strassen and tsp.strassen is not None and NESTED_BACKEND in _backends(table) \
            and max(dims) <= NESTED_MAX_ASPECT * min(dims) and layout == "nn" and not copied:
        nested = tuple(lv for lv in NESTED_LEVELS if min(m, k, n) / 2**lv >= MIN_STRASSEN_LEAF)
        blas = tsp.versions.get("blas")
        lib_max = blas.max_threads if blas is not None and blas.max_threads > 0 else budget   # P2: the library's
        for p1 in range(1, min(budget, 7) + 1) if nested else ():   # 7 top-level products
            for p2 in range(1, min(budget // p1, lib_max) + 1):
                yield Evaluation("strassen_nested", NESTED_BACKEND, p1 * p2, nested, (p1,),
                                 lambda sp, p, v, parts=None, t=p1 * p2, p1=p1: gemm_models.strassen_nested(
                                     m, k, n, p, p1, t, tsp, sp, NESTED_BACKEND, parts))


def _strassen_variants(m, k, n, levels, variants, be: str, t: int, sp, tsp: ThreadSPs, parts: dict | None,
                       copied: int = 0):
    """Times of a Strassen group, variant-major: 0 the fused additions (add/view SPs), 1 the OpenMP add;
    each plus the copy of ``copied`` elements (operands in neither order, transposed ones)."""
    out, split = [], {}
    for v in variants:
        part: dict | None = {} if parts is not None else None
        if v == 0:
            out.append(gemm_models.strassen(m, k, n, levels, be, t, sp, add_backend=STRASSEN_ADD_BACKEND, parts=part))
        else:
            out.append(gemm_models.strassen_omp(m, k, n, levels, be, t, sp, tsp, parts=part))
        for key, val in (part or {}).items():
            split.setdefault(key, []).append(np.atleast_1d(val))
    move = movement_models.copy(sp, copied) if copied else 0.0
    if parts is not None:
        parts.update({key: np.concatenate(vals) for key, vals in split.items()})
        if move:
            parts["copy"] = np.full(len(levels) * len(variants), move)
    return np.concatenate(out) + move


def _thread_sps(sp) -> ThreadSPs:
    """The thread SPs stored beside ``sp``'s database (``db.threads``); empty without a path."""
    path = getattr(sp, "path", None)
    return ThreadSPs() if path is None else load_threads(path)


def _cholesky_groups(problem: Problem, table, budget: int, allow_strassen: bool,
                     tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    """The Cholesky candidates on the problem's LAPACK triangle: on the upper, a library's potrf
    only where measured on it (the reference, scipy's potrf, always: on the lower's series where
    not), and no blocked or unblocked kernel (the probe times their steps on the lower)."""
    dims = problem.dims
    (n,) = dims
    total = float(chol_models.chol_flops(n))
    lower = problem.lapack_lower
    reference = FAMILIES["cholesky"].incumbent
    for be in _backends(table):
        for t in _threads(table, "potrf", be, budget):
            pattern = "square" if lower or not table.has("potrf", be, t, "upper") else "upper"
            if lower or pattern == "upper" or ("potrf", be) == reference:
                yield Evaluation("potrf", be, t, (0,), (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t, pat=pattern: [
                                     chol_models.potrf(n, be, t, sp, parts, pat)])
        if be not in DRIVER_BACKENDS or n < 2 or not lower:
            continue
        for t in _threads(table, "trsm", be, budget, "panel"):
            blocks = tuple(int(b) for b in table.params("trsm", be, t, "panel") if b < n)
            if blocks and table.has("syrk", be, t, "panel") and table.has("potf2", be, t):
                both = table.has("gemm", be, t, "panel") and table.has("syrk", be, t)
                calls = [("potf2", "square"), ("trsm", "panel"), ("syrk", "panel")]
                calls += [("gemm", "panel"), ("syrk", "square")] if both else []
                yield Evaluation("blocked", be, t, blocks, (0, 1) if both else (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t:
                                 chol_models.blocked_variants(n, p, v, be, t, sp, parts),
                                 _floor(table, total, calls, be, t, n))
        for t in _threads(table, "gemv", be, budget, "segment"):
            yield Evaluation("gemv", be, t, (0,), (0,),
                             lambda sp, p, v, parts=None, be=be, t=t: [chol_models.unblocked_gemv(n, be, t, sp, parts)],
                             _floor(table, total, [("gemv", "segment")], be, t, n))
        for t in _threads(table, "axpy", be, budget, "trail"):
            yield Evaluation("axpy", be, t, (0,), (0,),
                             lambda sp, p, v, parts=None, be=be, t=t: [chol_models.unblocked_axpy(n, be, t, sp)],
                             _floor(table, total, [("axpy", "trail")], be, t, n))


def _library_calls(algorithm: str, table, budget: int, routine: str, model: Callable, pattern: str = "square",
                   also: tuple[tuple[str, str], ...] = ()) -> Iterator[Evaluation]:
    """One candidate per library and thread count measured for ``routine`` (and the ``also``
    (routine, pattern) pairs): ``model(backend, threads, sp, parts)`` seconds."""
    for be in _backends(table):
        for t in _threads(table, routine, be, budget, pattern):
            if all(table.has(r, be, t, p) for r, p in also):
                yield Evaluation(algorithm, be, t, (0,), (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t: [model(be, t, sp, parts)])


def _lu_groups(problem: Problem, table, budget: int, allow_strassen: bool,
               tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    dims = problem.dims
    (n,) = dims
    yield from _library_calls("getrf", table, budget, "getrf",
                              lambda be, t, sp, parts: lu_models.getrf(n, be, t, sp, parts))
    calls = [("getrf", "panel"), ("laswp", "panel"), ("trsm", "panel"), ("gemm", "rankb")]
    for be in _backends(table):
        if be not in DRIVER_BACKENDS or n < 2:
            continue
        for t in _threads(table, "getrf", be, budget, "panel"):
            blocks = tuple(int(b) for b in table.params("getrf", be, t, "panel") if b < n)
            if blocks and all(table.has(r, be, t, p) for r, p in calls[1:]):
                yield Evaluation("getrf_blocked", be, t, blocks, (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t: [lu_models.blocked(n, p, be, t, sp, parts)],
                                 _floor(table, float(lu_models.lu_flops(n)), calls, be, t, n))


def _solve_groups(problem: Problem, table, budget: int, allow_strassen: bool,
                  tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    dims = problem.dims
    n, nrhs = dims
    return _library_calls("gesv", table, budget, "getrf",
                          lambda be, t, sp, parts: lu_models.gesv(n, nrhs, be, t, sp, parts), also=(("getrs", "rhs"),))


def _lu_solve_groups(problem: Problem, table, budget: int, allow_strassen: bool,
                     tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    dims = problem.dims
    n, nrhs = dims
    return _library_calls("getrs", table, budget, "getrs",
                          lambda be, t, sp, parts: lu_models.getrs(n, nrhs, be, t, sp, parts), "rhs")


def _stencil_groups(problem: Problem, table, budget: int, allow_strassen: bool,
                    tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    """The field swept by each stencil backend and thread count measured."""
    return _library_calls("sweep", table, budget, "stencil",
                          lambda be, t, sp, parts: stencil_models.single(problem, be, t, sp), "interior")


GROUPS = {"gemm": _gemm_groups, "cholesky": _cholesky_groups, "lu": _lu_groups, "solve": _solve_groups,
          "lu_solve": _lu_solve_groups, "stencil": _stencil_groups}


def rank(problem: Problem, sp, threads: int, allow_strassen: bool = False,
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
    groups = list(GROUPS[family](problem, sp.table, threads, allow_strassen, _thread_sps(sp)))
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
        view = _Recorder(sp) if explain else sp
        parts: dict | None = {} if explain else None
        times = np.asarray(g.model(view, np.asarray(g.params), g.variants, parts), dtype=float).ravel()
        extra = _dispatch(family, g.algorithm, g.backend, g.threads, threads, view)
        terms = tuple(view.log) if explain else ()
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


def _dispatch(family: str, algorithm: str, backend: str, threads: int, budget: int, sp) -> float:
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

    sp: object
    dims: tuple[int, ...]
    fitted: bool
    learned: dict
    risk: dict        # algorithm -> measured composed-model risk for this family
    pools: Transitions
    after: PoolState | None

    @classmethod
    def of(cls, sp, family: str, dims: tuple[int, ...], after: PoolState | None = None) -> _Evidence:
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


def choose(problem: Problem, sp, threads: int, allow_strassen: bool = False,
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
