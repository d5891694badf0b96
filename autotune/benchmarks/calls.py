"""How each routine family is called: its random well-posed operands, its tuned call, the
numpy/scipy call it stands in for and, for families with distributed plans, its collective call.

One record per family (``CALLS``), so checks, benchmarks and calibrations build operands and
call a family without naming it. Every call takes the typed problem first: its flags (Cholesky's
``lower``) are the call's, and its sizes the operands'. Operands are built without BLAS calls, so
no library's thread pool is left spinning before a timed call (docs/architecture.md#families).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sl

from autotune.api import tuned_cholesky, tuned_gemm, tuned_lu_factor, tuned_lu_solve, tuned_solve
from autotune.core.families import FAMILIES, Problem
from autotune.entry.cholesky import collective as distributed_cholesky
from autotune.entry.gemm import collective as distributed_gemm
from autotune.entry.lu import collective_lu_factor as distributed_lu_factor
from autotune.entry.lu import collective_solve as distributed_solve
from autotune.kernels._front import aligned_copy
from autotune.kernels.stencil import heat_weights, reference
from autotune.stencil import heat2d


def spd_matrix(rng: np.random.Generator, n: int, order: str = "F") -> np.ndarray:
    """Symmetric positive definite n x n matrix (strictly diagonally dominant), built without BLAS.

    ``g @ g.T`` would wake numpy's OpenBLAS thread pool, which then keeps spinning on the cores
    the next timed call needs and slows it.
    """
    a = aligned_copy(rng.random((n, n)) - 0.5, "F")
    a = a + a.T
    a[np.diag_indices(n)] = n + 1.0
    return aligned_copy(a, order)


def _normal(rng: np.random.Generator, shape: tuple[int, int], order: str) -> np.ndarray:
    """A standard normal matrix in memory ``order`` ("C" or "F"): general, well-posed almost surely."""
    x = rng.standard_normal(shape)
    return np.asfortranarray(x) if order == "F" else x


@dataclass(frozen=True)
class FamilyCalls:
    """A family's operands and calls. ``operands(problem, rng, order)`` draws the root's operands
    (general matrices in memory ``order``; a Cholesky problem carries its own), ``tuned``,
    ``reference`` and ``collective`` take ``(problem, *operands, **kw)`` (``collective`` also
    ``comm=``; other ranks pass ``count`` Nones), ``in_place(problem, *operands)`` the keywords
    that let the tuned call work in the operands at ``overwrites`` (restored between timed runs)
    or a preallocated output, so only the algorithm is timed. ``nbytes(problem)``: the memory a
    call's operands, temporaries and result take (what ``autotune explain --run`` must allocate)."""

    name: str
    operands: Callable[..., tuple]
    tuned: Callable[..., object]
    reference: Callable[..., object]
    in_place: Callable[..., dict]
    overwrites: tuple[int, ...] = ()
    collective: Callable[..., object] | None = None
    count: int = 1                     # operands a call takes
    nbytes: Callable[[Problem], int] = lambda p: 0

    @property
    def library(self) -> str:
        """The reference call's library as reports name it ("numpy" or "scipy"): the incumbent's."""
        return FAMILIES[self.name].library.split("-")[0]


# The heat step's alpha in checks and benchmarks (stable: at most 1/4).
HEAT_ALPHA = 0.1


def _keeps_operands(problem, *operands) -> dict:
    return {}


def _overwrites_a(problem, *operands) -> dict:
    return {"overwrite_a": True, "check_finite": False}


CALLS: dict[str, FamilyCalls] = {c.name: c for c in (
    FamilyCalls(
        "gemm",
        lambda p, rng, order="C": (_normal(rng, (p.m, p.k), order), _normal(rng, (p.k, p.n), order)),
        lambda p, a, b, **kw: tuned_gemm(a, b, **kw),
        lambda p, a, b: np.matmul(a, b),
        lambda p, a, b: {"out": np.empty((p.m, p.n))},
        collective=lambda p, a, b, comm, **kw: distributed_gemm(a, b, comm, **kw), count=2,
        nbytes=lambda p: 8 * (p.m * p.k + p.k * p.n + p.m * p.n)),
    FamilyCalls(
        "cholesky",
        lambda p, rng, order="C": (spd_matrix(rng, p.n, order=p.memory),),
        lambda p, a, **kw: tuned_cholesky(a, lower=p.lower, **kw),
        lambda p, a: sl.cholesky(a, lower=p.lower),
        _overwrites_a, overwrites=(0,),
        collective=lambda p, a, comm, **kw: distributed_cholesky(a, comm, lower=p.lower, **kw),
        nbytes=lambda p: 8 * 3 * p.n ** 2),      # the SPD operand is built from two n x n temporaries
    FamilyCalls(
        "lu",
        lambda p, rng, order="C": (_normal(rng, (p.n, p.n), order),),
        lambda p, a, **kw: tuned_lu_factor(a, **kw),
        lambda p, a: sl.lu_factor(a),
        _overwrites_a, overwrites=(0,),
        collective=lambda p, a, comm, **kw: distributed_lu_factor(a, comm, **kw),
        nbytes=lambda p: 8 * 2 * p.n ** 2),
    FamilyCalls(
        "solve",
        lambda p, rng, order="C": (_normal(rng, (p.n, p.n), order), _normal(rng, (p.n, p.nrhs), order)),
        lambda p, a, b, **kw: tuned_solve(a, b, **kw),
        lambda p, a, b: sl.solve(a, b),
        # a general matrix: scipy's default assume_a may look for structure first
        lambda p, a, b: {"overwrite_a": True, "overwrite_b": True, "check_finite": False, "assume_a": "gen"},
        overwrites=(0, 1),
        collective=lambda p, a, b, comm, **kw: distributed_solve(a, b, comm, **kw), count=2,
        nbytes=lambda p: 8 * (2 * p.n ** 2 + 2 * p.n * p.nrhs)),
    FamilyCalls(
        "lu_solve",
        lambda p, rng, order="C": (_normal(rng, (p.n, p.n), order), _normal(rng, (p.n, p.nrhs), order)),
        lambda p, a, b, **kw: tuned_lu_solve(tuned_lu_factor(a), b, **kw),   # keywords: the solve's
        lambda p, a, b: sl.lu_solve(sl.lu_factor(a), b),
        lambda p, a, b: {"overwrite_b": True, "check_finite": False},
        overwrites=(1,), count=2, nbytes=lambda p: 8 * (2 * p.n ** 2 + 2 * p.n * p.nrhs)),
    FamilyCalls(
        "stencil",
        lambda p, rng, order="C": (np.asarray(rng.random((p.rows, p.cols)), order=order),),
        lambda p, u, **kw: heat2d(u, p.steps, HEAT_ALPHA, **kw),
        lambda p, u: reference(u, p.steps, heat_weights(HEAT_ALPHA)),
        _keeps_operands,
        collective=lambda p, u, comm, **kw: heat2d(u, p.steps, HEAT_ALPHA, comm=comm, **kw),
        nbytes=lambda p: 8 * 3 * p.rows * p.cols),
)}


def square(name: str, n: int, **fields) -> Problem:
    """``FAMILIES[name].square(n)`` with those of ``fields`` its problem has (a benchmark's
    ``lower=True`` or ``nrhs=16`` where they apply; the others ignored)."""
    problem = FAMILIES[name].square(n)
    own = {f.name for f in dataclasses.fields(problem)}
    return dataclasses.replace(problem, **{k: v for k, v in fields.items() if k in own})


def agrees(got, want, rtol: float = 1e-8) -> bool:
    """A result matches the reference's: integer parts (pivots) exactly, floating ones to ``rtol``
    (absolute: ``rtol`` of the largest entry); tuples part by part."""
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(
            agrees(g, w, rtol) for g, w in zip(got, want, strict=True))
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if not np.issubdtype(want.dtype, np.inexact):
        return bool(np.array_equal(got, want))
    scale = float(np.abs(want).max()) if want.size else 0.0
    return bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale))


__all__ = ["CALLS", "FamilyCalls", "agrees", "spd_matrix", "square"]
