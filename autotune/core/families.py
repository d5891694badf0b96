"""The one definition of each routine family (gemm, Cholesky, LU, solve, LU solve) and its typed problem.

A ``Family`` says what every layer needs to know of a family and nothing layer-specific: how its
dimensions are read, its flops (from ``routines``), the library routine it must beat, its
distributed algorithms and its block candidates. A problem travels as a typed record
(``GemmProblem``, ``CholeskyProblem``, ...) from the API through selection and models to
execution. Each layer keeps one registry keyed by family name for what only it knows (models,
candidate groups, runners); ``tests/test_families.py`` checks that every registry covers every
family (docs/architecture.md#families).
"""
from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from autotune.core.routines import CHECK_NRHS, STENCIL_FLOPS, WORD, flops

# Blocks of the block-cyclic layouts and SUMMA panels: the panel and rank-b block parameters the
# probe profiles measure (configs/standard.yaml: 32..512), so each candidate's k is measured, not
# extrapolated; one set for the distributed selector and the mapping model alike.
BLOCKS = (32, 64, 128, 256, 512)
# A stencil plan's halo widths (multiples of the stencil's radius: one exchange per width/radius steps).
HALOS = (1, 2, 4, 8)
# The stencil kernels' backends (autotune.backends.stencil): ours first.
STENCIL_BACKENDS = ("numba-stencil", "numba-wavefront", "numpy-stencil")
# The one that fuses a run of steps in one call (probed under the ``levels`` pattern).
WAVEFRONT_BACKEND = "numba-wavefront"
# Steps of the stencil problems checks, reports and benchmarks use.
CHECK_STEPS = 100
# Bytes a problem's float64 operands may need together (16 PiB: more memory than any machine has, and
# far below what int64 indices address); larger sizes are refused, not ranked at absurd times.
MAX_PROBLEM_BYTES = 2**54


@dataclass(frozen=True)
class Problem:
    """One call's problem: its dimensions (``dims``, the selector's key) and the flags that change
    its cost (memory order, triangle, transposition)."""

    family: ClassVar[str] = ""
    dim_names: ClassVar[tuple[str, ...]] = ()

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(int(getattr(self, name)) for name in self.dim_names)

    @property
    def order(self) -> int:
        """The matrix order blocks are cut from (the smallest dimension a block divides)."""
        return min(self.dims)

    @property
    def flags(self) -> dict:
        """The fields other than the dimensions (what a model may read beyond them)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.dim_names}

    @classmethod
    def expand(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """A user's short sizes as full dims: one size is a square problem of that order."""
        return sizes * len(cls.dim_names) if len(sizes) == 1 else sizes

    @classmethod
    def square(cls, n: int) -> Problem:
        """The problem of order ``n`` that checks, reports and benchmarks use."""
        return cls(*cls.expand((int(n),)))

    @classmethod
    def size_label(cls, dims: tuple[int, ...]) -> str:
        """The selector's ``dims`` as people read them: ``4096x4096x4096``."""
        return "x".join(map(str, dims))

    @classmethod
    def operands(cls, dims: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """The shapes of the matrices a problem of ``dims`` holds: an order-n problem's n x n."""
        return tuple((d, d) for d in dims)

    @property
    def note(self) -> str:
        """What the flags change in the price, for explain (empty: nothing)."""
        return ""

    def __str__(self) -> str:
        return f"{self.family} {self.size_label(self.dims)}"


@dataclass(frozen=True)
class _RightHandSides(Problem):
    """Problems of an order-n matrix and ``nrhs`` right-hand sides: blocks cut the matrix; one size
    is one right-hand side, and checks use CHECK_NRHS (off the probe's grid)."""

    n: int
    nrhs: int = 1
    dim_names: ClassVar[tuple[str, ...]] = ("n", "nrhs")

    @property
    def order(self) -> int:
        return self.n

    @classmethod
    def expand(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        return sizes + (1,) if len(sizes) == 1 else sizes

    @classmethod
    def operands(cls, dims: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        n, nrhs = dims
        return ((n, n), (n, nrhs))

    @classmethod
    def square(cls, n: int) -> Problem:
        return cls(int(n), CHECK_NRHS)


@dataclass(frozen=True)
class GemmProblem(Problem):
    """``op(a) op(b)`` with op(a) m x k and op(b) k x n; ``layout``: the transpositions of the BLAS
    call the operands' memory orders make (``gemm_layout``), ``copied``: elements of operands that
    are neither C- nor Fortran-contiguous (each candidate copies them first)."""

    m: int
    k: int
    n: int
    layout: str = "nn"
    copied: int = 0
    family: ClassVar[str] = "gemm"
    dim_names: ClassVar[tuple[str, ...]] = ("m", "k", "n")

    @property
    def note(self) -> str:
        """The operands' layout as it is priced (explain's note), empty for C-ordered operands."""
        if self.layout == "nn" and not self.copied:
            return ""
        copied = f"; {self.copied} elements of operands in neither order copied first" if self.copied else ""
        return (f"layout: {GEMM_LAYOUTS[self.layout]}{copied}; the libraries measured in it are ranked "
                "(numpy's own call always)")

    @classmethod
    def operands(cls, dims: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        m, k, n = dims
        return ((m, k), (k, n), (m, n))


# What each gemm layout is: the transpositions of the Fortran-ordered BLAS call ``dispatch.gemm``
# makes (a C-ordered product is computed as its transpose), and "aat", ``a @ a.T`` on one buffer,
# which numpy's matmul computes with syrk (half the flops).
GEMM_LAYOUTS = {"nn": "BLAS call nn", "tn": "BLAS call tn (op(a) transposed)", "nt": "BLAS call nt (op(b) transposed)",
                "tt": "BLAS call tt (both transposed)", "aat": "a @ a.T on one buffer (numpy: syrk)"}


def gemm_layout(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False,
                out_fortran: bool = False) -> tuple[str, int]:
    """(layout, elements copied) of ``op(a) op(b)`` as ``dispatch.gemm.run_gemm`` calls BLAS on it:
    into a C-ordered result (unless ``out_fortran``) it computes the transpose, with swapped operands;
    an operand in neither order is copied to Fortran order."""
    x, y = (a.T if trans_a else a), (b.T if trans_b else b)
    if _one_buffer_transposed(x, y):
        return "aat", 0
    if not out_fortran:
        a, b, trans_a, trans_b = b, a, not trans_b, not trans_a
    (ta, ca), (tb, cb) = _fortran_flag(a, trans_a), _fortran_flag(b, trans_b)
    return ("t" if ta else "n") + ("t" if tb else "n"), ca + cb


def _fortran_flag(x: np.ndarray, trans: bool) -> tuple[bool, int]:
    """The BLAS transposition of ``x`` as a Fortran operand, and the elements copied to make it one."""
    if x.flags.f_contiguous:
        return trans, 0
    if x.flags.c_contiguous:
        return not trans, 0
    return trans, int(x.size)


def _one_buffer_transposed(x: np.ndarray, y: np.ndarray) -> bool:
    """``y`` is ``x.T`` on the same memory (numpy's matmul then calls syrk)."""
    return (x.ndim == 2 and (x.flags.c_contiguous or x.flags.f_contiguous)
            and y.shape == x.shape[::-1] and y.strides == x.strides[::-1]
            and x.__array_interface__["data"][0] == y.__array_interface__["data"][0])


@dataclass(frozen=True)
class CholeskyProblem(Problem):
    """The Cholesky factor of an n x n matrix: ``lower`` triangle, input ``memory`` order ("C"/"F")."""

    n: int
    lower: bool = False
    memory: str = "C"
    family: ClassVar[str] = "cholesky"
    dim_names: ClassVar[tuple[str, ...]] = ("n",)

    @property
    def lapack_lower(self) -> bool:
        """The triangle LAPACK factors on the Fortran-ordered buffer: a C-ordered input is the
        transpose in Fortran order, so its ``lower`` is LAPACK's upper (what the probe's "square"
        potrf series measures is the lower; "upper" measures the other, slower at one thread)."""
        return self.lower == (self.memory == "F")

    @property
    def note(self) -> str:
        """The triangle as it is priced (explain's note), empty for the probed one."""
        if self.lapack_lower:
            return ""
        return ("layout: LAPACK's upper triangle (a Fortran-ordered upper or C-ordered lower input); the "
                "libraries measured on it are ranked (scipy's own call always), the blocked and unblocked "
                "kernels only on the lower")


@dataclass(frozen=True)
class LuProblem(Problem):
    """The LU factorization with partial pivoting of an n x n matrix."""

    n: int
    family: ClassVar[str] = "lu"
    dim_names: ClassVar[tuple[str, ...]] = ("n",)


@dataclass(frozen=True)
class SolveProblem(_RightHandSides):
    """``a x = b`` for a general n x n ``a`` and ``nrhs`` right-hand sides."""

    family: ClassVar[str] = "solve"


@dataclass(frozen=True)
class LuSolveProblem(_RightHandSides):
    """The solution for ``nrhs`` right-hand sides from an order-n LU factor."""

    family: ClassVar[str] = "lu_solve"


@dataclass(frozen=True)
class StencilProblem(Problem):
    """``steps`` sweeps of a point stencil of ``radius`` over a rows x cols field whose outer
    ``radius`` rings stay fixed; ``corners``: the stencil reads diagonal neighbours (a 9-point
    box); ``cell_flops``: its flops per cell (9 for the 5-point stencil the probe times; a user
    kernel's measured equivalent); ``kernel``: a user's kernel function, swept a step a call on
    every backend (only weights are fused by the wavefront)."""

    rows: int
    cols: int
    steps: int = 1
    radius: int = 1
    corners: bool = False
    cell_flops: float = STENCIL_FLOPS
    kernel: bool = False
    family: ClassVar[str] = "stencil"
    dim_names: ClassVar[tuple[str, ...]] = ("rows", "cols", "steps")

    @property
    def order(self) -> int:
        return min(self.rows, self.cols)

    @property
    def scale(self) -> float:
        """Its cost per cell over the probed 5-point stencil's (what multiplies that k)."""
        return self.cell_flops / STENCIL_FLOPS

    @classmethod
    def expand(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """A user's (rows, cols): CHECK_STEPS steps (explain's ``--steps`` sets its own)."""
        return sizes + (CHECK_STEPS,)

    @classmethod
    def size_label(cls, dims: tuple[int, ...]) -> str:
        """``800x800, 200 steps``: the steps are a count, not a dimension of the field."""
        rows, cols, steps = dims
        return f"{rows}x{cols}, {steps} step{'s' if steps != 1 else ''}"

    @classmethod
    def operands(cls, dims: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        return ((dims[0], dims[1]),)

    @classmethod
    def square(cls, n: int) -> Problem:
        return cls(int(n), int(n), CHECK_STEPS)


@dataclass(frozen=True)
class Family:
    """What every layer knows of a routine family."""

    name: str
    problem: type[Problem]
    short: tuple[int, ...]       # how many sizes a user may give (``explain gemm 512`` or ``512 256 128``)
    incumbent: tuple[str, str]   # (algorithm, library) the tuned call must beat: the numpy/scipy call
    work: Callable[[Problem], float]            # flops, from routines
    routine: str | None          # the one library routine it calls (None: several), as ``routines`` names it
    distributed: tuple[str, ...] = ()           # its distributed algorithms (``Plan.algorithm``)
    mapping: str | None = None   # the algorithm the mapping model prices (None: no mapping search)
    blocks: tuple[int, ...] = BLOCKS
    several: tuple[str, ...] = ()   # where ``routine`` is None: the library routines it calls
    by_speed: bool = False       # its plans' models price each rank at its host's speed: the selector
    #                              adds plans whose shares follow those speeds (``Plan.weights``)

    @property
    def library_routines(self) -> tuple[str, ...]:
        """Every library routine its calls need (a backend without one cannot run the family)."""
        return self.several or ((self.routine,) if self.routine else ())

    @property
    def library(self) -> str:
        """The per-rank BLAS library of its plans: the incumbent's."""
        return self.incumbent[1]

    def of(self, dims, **flags) -> Problem:
        """The typed problem of ``dims`` (the selector's full dims) and ``flags``."""
        dims = tuple(int(d) for d in dims)
        if len(dims) != len(self.problem.dim_names):
            raise ValueError(f"{self.name} takes dims {self.problem.dim_names}, got {dims!r}")
        return self.problem(*dims, **flags)

    def read(self, sizes) -> Problem:
        """The problem a user's sizes name: ``short`` forms expanded (gemm n -> n x n x n; solve
        n -> one right-hand side); ValueError for another count or a size that is not a positive int."""
        sizes = tuple(sizes)
        if len(sizes) not in self.short:
            raise ValueError(f"{self.name} takes {' or '.join(map(str, self.short))} size(s), got {sizes!r}")
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 1 for d in sizes):
            raise ValueError(f"sizes must be positive integers, got {sizes!r}")
        dims = self.problem.expand(tuple(int(d) for d in sizes))
        need = sum(r * c for r, c in self.problem.operands(dims)) * WORD
        if need > MAX_PROBLEM_BYTES:
            raise ValueError(f"sizes {', '.join(map(str, sizes))} too large: the float64 operands would need "
                             f"{need:.3g} bytes, more than any machine holds ({MAX_PROBLEM_BYTES >> 50} PiB)")
        return self.of(dims)

    def square(self, n: int) -> Problem:
        """The problem of order ``n`` that checks, reports and benchmarks use."""
        return self.problem.square(n)

    def flops(self, problem: Problem) -> float:
        return float(self.work(problem))


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("gemm", GemmProblem, (1, 3), ("blas", "numpy-openblas"),
           lambda p: flops("gemm", {"m": p.m, "n": p.n, "k": p.k}), "gemm",
           distributed=("bsr", "cbsr", "cannon", "summa", "strassen_summa", "strassen_ms"), mapping="summa"),
    Family("cholesky", CholeskyProblem, (1,), ("potrf", "scipy-openblas"),
           lambda p: flops("potrf", {"n": p.n}), "potrf",
           distributed=("cholesky",), mapping="cholesky"),
    Family("lu", LuProblem, (1,), ("getrf", "scipy-openblas"), lambda p: flops("getrf", {"n": p.n}), "getrf",
           distributed=("lu",), mapping="lu"),
    Family("solve", SolveProblem, (1, 2), ("gesv", "scipy-openblas"),
           lambda p: flops("getrf", {"n": p.n}) + flops("getrs", {"n": p.n, "nrhs": p.nrhs}), None,
           distributed=("gesv",), several=("getrf", "getrs")),
    Family("lu_solve", LuSolveProblem, (1, 2), ("getrs", "scipy-openblas"),
           lambda p: flops("getrs", {"n": p.n, "nrhs": p.nrhs}), "getrs"),
    Family("stencil", StencilProblem, (2,), ("sweep", "numpy-stencil"),
           lambda p: p.steps * p.scale * flops("stencil", {"m": max(p.rows - 2 * p.radius, 0),
                                                           "n": max(p.cols - 2 * p.radius, 0)}),
           "stencil", distributed=("blocking", "overlap", "border_first"), blocks=HALOS, by_speed=True),
)}

# Families with distributed plans, in FAMILIES' order.
DISTRIBUTED = tuple(name for name, f in FAMILIES.items() if f.distributed)


def family(name: str) -> Family:
    """The family called ``name``; ValueError listing them otherwise."""
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown routine family {name!r}; choose from {', '.join(FAMILIES)}") from None


def label(name: str, dims) -> str:
    """``gemm 4096x4096x4096``, ``stencil 800x800, 200 steps``: a problem of family ``name`` on the
    selector's ``dims``, as explain and the decisions print it."""
    return f"{name} {family(name).problem.size_label(tuple(int(d) for d in dims))}"


def as_problem(name: str, dims, **flags) -> Problem:
    """The typed problem of family ``name`` on the selector's ``dims``."""
    return family(name).of(dims, **flags)


def usable_blocks(order: int, blocks: tuple[int, ...] = BLOCKS) -> list[int]:
    """The blocks a plan of this order may use: at most order/2 (at least the smallest)."""
    return [b for b in blocks if b <= max(order // 2, min(blocks))]


__all__ = [
    "BLOCKS",
    "CHECK_STEPS",
    "CholeskyProblem",
    "DISTRIBUTED",
    "FAMILIES",
    "Family",
    "GemmProblem",
    "HALOS",
    "LuProblem",
    "LuSolveProblem",
    "Problem",
    "STENCIL_BACKENDS",
    "WAVEFRONT_BACKEND",
    "SolveProblem",
    "StencilProblem",
    "as_problem",
    "family",
    "label",
    "usable_blocks",
]
