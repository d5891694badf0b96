"""The one definition of each basic routine's flop count and of the access patterns algorithms use.

The probe measures ``k = time / flops(routine, dims)`` on the shapes a pattern generates, and
the runtime models look ``k`` up with the same (routine, pattern, size, param) key and multiply
by the same flop count, so the two can never disagree on what was measured (docs/models.md#routines,
docs/models.md#sp.k).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Dims = dict[str, int]
# Flops per cell of the 5-point stencil the probe times (5 multiplies, 4 additions).
WORD = 8             # bytes per float64 element: every byte count of a model, a message or a buffer
STENCIL_FLOPS = 9.0


@dataclass(frozen=True)
class Routine:
    """A basic routine: its BLAS level, SP name (``k3_gemm``) and flop count of its dims."""

    name: str
    level: int
    flops: Callable[..., float]

    @property
    def sp_name(self) -> str:
        return f"k{self.level}_{self.name}"


def _chol_flops(n: int) -> float:
    return n**3 / 3.0 + n**2 / 2.0 + n / 6.0


def _lu_flops(n: int, m: int | None = None) -> float:
    """LAPACK's getrf count for an m x n matrix, m >= n (square when m is None)."""
    m = n if m is None else m
    return m * n**2 - n**3 / 3.0 - n**2 / 2.0 + 5.0 * n / 6.0


ROUTINES: dict[str, Routine] = {r.name: r for r in (
    Routine("gemm", 3, lambda m, n, k: 2.0 * m * n * k),
    Routine("syrk", 3, lambda n, k: float(n) * (n + 1) * k),
    Routine("trsm", 3, lambda m, n: float(m) * n * n),          # B (m x n) times n x n triangle^-1
    Routine("gemv", 2, lambda m, n: 2.0 * m * n),
    Routine("axpy", 1, lambda n: 2.0 * n),
    Routine("add", 2, lambda m, n: float(m) * n),
    Routine("potrf", 3, _chol_flops),
    Routine("potf2", 2, _chol_flops),
    Routine("getrf", 3, _lu_flops),
    Routine("laswp", 1, lambda n, k: float(n) * k),             # k row interchanges on n columns: elements
    Routine("getrs", 3, lambda n, nrhs: 2.0 * n * n * nrhs),  # unit-lower then upper solve of nrhs columns
    # One sweep of the 5-point stencil over an m x n region: 5 multiplies and 4 adds per cell (004's
    # Tn per cell is k x STENCIL_FLOPS); other stencils scale by their own count (families.StencilProblem).
    # ``levels`` steps of it fused in one call (the wavefront kernel) do levels times the flops.
    Routine("stencil", 2, lambda m, n, levels=1: STENCIL_FLOPS * m * n * levels),
    # STREAM's copy and triad over n elements, counted in bytes moved (k: seconds per byte, the
    # inverse of the bandwidth): ``streams`` arrays of n float64 read or written.
    Routine("stream", 1, lambda n, streams: float(WORD) * n * streams),
)}


def flops(routine: str, dims: Dims) -> float:
    """Flop count of ``routine`` on ``dims`` (keyword dims, e.g. m, n, k)."""
    return ROUTINES[routine].flops(**dims)


@dataclass(frozen=True)
class Pattern:
    """How an algorithm touches a routine: maps (size x, param) to the routine's dims.

    ``x`` is the size the model looks up (matrix order, or trailing-matrix size for panels);
    ``param`` is the algorithm parameter the shape depends on (block b, process count p,
    column fraction f), or 0 where there is none.
    """

    name: str
    doc: str
    shapes: dict[str, Callable[[int, float], Dims]]
    needs_param: bool = False
    drivers: dict[str, str] = field(default_factory=dict)  # routine -> backend op timed, if not itself

    def driver(self, routine: str) -> str:
        """The backend operation the probe times for ``routine`` under this pattern."""
        return self.drivers.get(routine, routine)


def _i(v: float) -> int:
    return max(1, int(round(v)))


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    Pattern("square", "square operands of order x (vectors of length x)", {
        "gemm": lambda x, _: {"m": x, "n": x, "k": x},
        "syrk": lambda x, _: {"n": x, "k": x},
        "trsm": lambda x, _: {"m": x, "n": x},
        "gemv": lambda x, _: {"m": x, "n": x},
        "axpy": lambda x, _: {"n": x},
        "add": lambda x, _: {"m": x, "n": x},
        "potrf": lambda x, _: {"n": x},
        "potf2": lambda x, _: {"n": x},
        "getrf": lambda x, _: {"n": x},
        "getrs": lambda x, _: {"n": x, "nrhs": x},
        "laswp": lambda x, _: {"n": x, "k": x},
        "stencil": lambda x, _: {"m": x, "n": x},
        "stream": lambda x, _: {"n": x, "streams": 3},
    }),
    Pattern("rhs", "solve from an LU factor of order x for param right-hand sides", {
        "getrs": lambda x, r: {"n": x, "nrhs": _i(r)},
    }, needs_param=True),
    Pattern("panel", "blocked factorizations, block b, trailing size x: trsm x-by-b panel, "
            "syrk trailing update of rank b, gemm x-by-b times b-by-b block column update (Cholesky); "
            "getrf of an x-by-b panel, laswp of b interchanges on x columns (LU)", {
        "trsm": lambda x, b: {"m": x, "n": _i(b)},
        "syrk": lambda x, b: {"n": x, "k": _i(b)},
        "gemm": lambda x, b: {"m": x, "n": _i(b), "k": _i(b)},
        "getrf": lambda x, b: {"m": max(x, _i(b)), "n": _i(b)},
        "laswp": lambda x, b: {"n": x, "k": min(_i(b), x)},
    }, needs_param=True),
    Pattern("u12", "blocked LU's U12 solve, block b, trailing size x: the unit lower b-by-b diagonal "
            "block's inverse times the b-by-x block row (left side; the same flops as the x-by-b panel "
            "solve, a slower kernel)", {
        "trsm": lambda x, b: {"m": x, "n": _i(b)},
    }, needs_param=True),
    Pattern("stripe", "row-block striped product over p processes: (x/p) x x times x x x", {
        "gemm": lambda x, p: {"m": _i(x / p), "n": x, "k": x},
    }, needs_param=True),
    Pattern("rankb", "distributed rank-b update (SUMMA step, parallel Cholesky trailing update): "
            "x-by-b times b-by-x", {
        "gemm": lambda x, b: {"m": x, "n": x, "k": _i(b)},
    }, needs_param=True),
    Pattern("segment", "unblocked Cholesky step at column i = f*x: gemv on (x-i) x i", {
        "gemv": lambda x, f: {"m": _i(x * (1 - f)), "n": _i(x * f)},
    }, needs_param=True),
    Pattern("view", "Strassen level: x-by-x quadrant views of a 2x-by-2x matrix", {
        "add": lambda x, _: {"m": x, "n": x},
    }),
    Pattern("trail", "outer-product (axpy) Cholesky step on a trailing matrix of order x: pivot, "
            "then axpys of lengths x-1..1 into its columns, streaming the triangle (x(x-1)/2 elements)", {
        "axpy": lambda x, _: {"n": max(1, x * (x - 1) // 2)},
    }, drivers={"axpy": "axpy_trail"}),
    Pattern("interior", "a stencil sweep over the x-by-x interior block of a tile (004's interior cells)", {
        "stencil": lambda x, _: {"m": x, "n": x},
    }),
    Pattern("levels", "param stencil steps over an x-by-x block fused in one call (a row wavefront: the "
            "sub-steps one halo exchange serves, or a run of whole steps in one process)", {
        "stencil": lambda x, s: {"m": x, "n": x, "levels": _i(s)},
    }, needs_param=True),
    Pattern("rows", "a stencil sweep over param border rows of length x (contiguous: a tile's top/bottom)", {
        "stencil": lambda x, h: {"m": _i(h), "n": x},
    }, needs_param=True),
    Pattern("cols", "a stencil sweep over param border columns of height x (strided: a tile's left/right)", {
        "stencil": lambda x, h: {"m": x, "n": _i(h)},
    }, needs_param=True),
    Pattern("copy", "STREAM copy of x float64 elements (one array read, one written)", {
        "stream": lambda x, _: {"n": x, "streams": 2},
    }),
    Pattern("triad", "STREAM triad of x float64 elements (a = b + s c: two arrays read, one written)", {
        "stream": lambda x, _: {"n": x, "streams": 3},
    }),
    *(Pattern(name, f"square gemm of order x whose BLAS call transposes {what} (dispatch.gemm's Fortran-ordered "
                    "call: a C-ordered operand is the transpose of a Fortran one)", {
        "gemm": lambda x, _: {"m": x, "n": x, "k": x},
    }) for name, what in (("tn", "a"), ("nt", "b"), ("tt", "both"))),
    Pattern("upper", "potrf of order x on the upper triangle of a Fortran-ordered matrix (a C-ordered "
            "matrix's lower): LAPACK's other loop order ('square' measures the lower)", {
        "potrf": lambda x, _: {"n": x},
    }),
    Pattern("dispatch", "a whole tuned call forcing this library's candidate on C-ordered x-by-x operands "
            "(entry checks, dispatch, library call): minus the library's own time, what a tuned call adds", {
        "gemm": lambda x, _: {"m": x, "n": x, "k": x},
    }, drivers={"gemm": "gemm"}),
)}

SEGMENT_FRACTIONS = (1 / 8, 3 / 8, 5 / 8, 7 / 8)
# The BLAS transpositions of a gemm (op(a), op(b)) by the pattern its k is measured on ("nn": "square").
TRANSPOSED = {"tn": (True, False), "nt": (False, True), "tt": (True, True)}
# Right-hand sides of the solve problems the model checks, reports and benchmarks use (off the
# probe's rhs grid; the common case of a handful of columns).
CHECK_NRHS = 16
# Order at which the probe times the dispatch pattern: the smallest order a tuned call tunes
# (smaller ones go straight to numpy), where the library's own time is smallest next to dispatch.
DISPATCH_ORDER = 32


def dims_of(routine: str, pattern: str, x: int, param: float = 0.0) -> Dims:
    """Dims of ``routine`` under ``pattern`` at size ``x``; ValueError if it has no such use."""
    try:
        shape = PATTERNS[pattern].shapes[routine]
    except KeyError:
        raise ValueError(f"routine {routine!r} has no access pattern {pattern!r}") from None
    if x < 1:
        raise ValueError(f"size must be positive, got {x}")
    return shape(int(x), float(param))


def flops_of(routine: str, pattern: str, x, param: float = 0.0) -> np.ndarray:
    """Vectorised flop count over sizes ``x`` (what models multiply k by)."""
    xs = np.atleast_1d(np.asarray(x, dtype=np.int64))
    return np.array([flops(routine, dims_of(routine, pattern, int(v), param)) for v in xs])
