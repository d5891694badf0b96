"""The candidates of each family, in groups evaluated by one model call (``Evaluation``): which
libraries, thread counts, algorithms and parameters the measured SP space offers for a problem,
and the model call that times them with a cheap lower bound for pruning."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from autotune.core.assumptions import FLOOR_SLACK
from autotune.core.families import (
    FAMILIES,
    CholeskyProblem,
    GemmProblem,
    LuProblem,
    LuSolveProblem,
    SolveProblem,
    StencilProblem,
)
from autotune.db.lookup import SPLookup, SPTable, SystemParameters
from autotune.db.threads import ThreadSPs, load_threads
from autotune.models import cholesky as chol_models
from autotune.models import gemm as gemm_models
from autotune.models import lu as lu_models
from autotune.models import movement as movement_models
from autotune.models import stencil as stencil_models
from autotune.models.gemm import NESTED_MAX_ASPECT, STRASSEN_ADD_BACKEND, omp_add_sps

from .candidates import DRIVER_BACKENDS, MIN_STRASSEN_LEAF, NESTED_BACKEND, NESTED_LEVELS, STRASSEN_LEVELS


def _threads(table: SPTable, routine: str, backend: str, budget: int, pattern: str = "square") -> list[int]:
    return [t for t in range(1, budget + 1) if table.has(routine, backend, t, pattern)]


def _backends(table: SPTable) -> tuple[str, ...]:
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


def _floor(table: SPTable, flop: float, routines, backend: str, threads: int, upto: float) -> float:
    """A lower bound on a model summing ``flop`` flops over calls of ``routines`` ((routine, pattern))
    whose sizes and parameters (blocks) are all at most ``upto``."""
    return FLOOR_SLACK * flop * min(table.k_min(r, backend, threads, pat, upto=upto) for r, pat in routines)


def _layout_measured(table: SPTable, backend: str, threads: int, layout: str) -> bool:
    """Is a BLAS gemm on ``backend`` priced on a series measured in this layout? ("nn": square; the
    transposed layouts: their own patterns; "aat", numpy's syrk, only numpy's own call runs.)"""
    if layout == "aat":
        return False
    return table.has("gemm", backend, threads, "square" if layout == "nn" else layout)


def _gemm_groups(problem: GemmProblem, table: SPTable, budget: int, allow_strassen: bool,
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


def _strassen_variants(m, k, n, levels, variants, be: str, t: int, sp: SPLookup, tsp: ThreadSPs,
                       parts: dict | None, copied: int = 0):
    """Times of a Strassen group, variant-major: 0 the fused additions (add/view SPs), 1 the OpenMP add;
    each plus the copy of ``copied`` elements (operands in neither order, transposed ones)."""
    out: list[np.ndarray] = []
    split: dict[str, list[np.ndarray]] = {}
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


def thread_sps(sp: SystemParameters) -> ThreadSPs:
    """The thread SPs stored beside ``sp``'s database (``db.threads``); empty without a path."""
    path = getattr(sp, "path", None)
    return ThreadSPs() if path is None else load_threads(path)


def _cholesky_groups(problem: CholeskyProblem, table: SPTable, budget: int, allow_strassen: bool,
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


def _library_calls(algorithm: str, table: SPTable, budget: int, routine: str, model: Callable, pattern: str = "square",
                   also: tuple[tuple[str, str], ...] = ()) -> Iterator[Evaluation]:
    """One candidate per library and thread count measured for ``routine`` (and the ``also``
    (routine, pattern) pairs): ``model(backend, threads, sp, parts)`` seconds."""
    for be in _backends(table):
        for t in _threads(table, routine, be, budget, pattern):
            if all(table.has(r, be, t, p) for r, p in also):
                yield Evaluation(algorithm, be, t, (0,), (0,),
                                 lambda sp, p, v, parts=None, be=be, t=t: [model(be, t, sp, parts)])


def _lu_groups(problem: LuProblem, table: SPTable, budget: int, allow_strassen: bool,
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


def _solve_groups(problem: SolveProblem, table: SPTable, budget: int, allow_strassen: bool,
                  tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    dims = problem.dims
    n, nrhs = dims
    return _library_calls("gesv", table, budget, "getrf",
                          lambda be, t, sp, parts: lu_models.gesv(n, nrhs, be, t, sp, parts), also=(("getrs", "rhs"),))


def _lu_solve_groups(problem: LuSolveProblem, table: SPTable, budget: int, allow_strassen: bool,
                     tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    dims = problem.dims
    n, nrhs = dims
    return _library_calls("getrs", table, budget, "getrs",
                          lambda be, t, sp, parts: lu_models.getrs(n, nrhs, be, t, sp, parts), "rhs")


def _stencil_groups(problem: StencilProblem, table: SPTable, budget: int, allow_strassen: bool,
                    tsp: ThreadSPs | None = None) -> Iterator[Evaluation]:
    """The field swept by each stencil backend and thread count measured."""
    return _library_calls("sweep", table, budget, "stencil",
                          lambda be, t, sp, parts: stencil_models.single(problem, be, t, sp), "interior")


# Each family's groups: ``GROUPS[family](problem, table, budget, allow_strassen, tsp)`` with the
# family's own problem type.
GROUPS: dict[str, Callable[..., Iterator[Evaluation]]] = {
    "gemm": _gemm_groups, "cholesky": _cholesky_groups, "lu": _lu_groups, "solve": _solve_groups,
    "lu_solve": _lu_solve_groups, "stencil": _stencil_groups}
