"""Operands laid out as the algorithms lay them out (docs/models.md#sp.k).

Each builder returns a ``Call``: ``run(repeat)`` performs ``repeat`` back-to-back calls of the
routine on the backend (inside the library's own loop where the backend allows, so Python
overhead is not timed), ``restore()`` (None for routines that do not overwrite their inputs)
resets what one ``run(1)`` destroyed, outside the timed region. Panels and views live inside larger Fortran matrices,
with the leading dimension the real algorithm would have.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from autotune.kernels._front import aligned_copy

import autotune
from autotune.backends import Backend
from autotune.benchmarks.calls import spd_matrix
from autotune.core.plans import Candidate
from autotune.core.routines import TRANSPOSED, dims_of


@dataclass
class Call:
    run: Callable[[int], object]
    restore: Callable[[], None] | None = None
    whole: bool = False      # timed as a whole call on purpose: never subtract the call overhead


def _op(be: Backend, routine: str, *args, **kwargs) -> Callable[[int], object]:
    """``run(repeat)`` for one routine call with fixed operands."""
    fn = getattr(be, routine)
    if be.native_repeat:
        return lambda repeat=1: fn(*args, **kwargs) if repeat == 1 else fn(*args, repeat=repeat, **kwargs)

    def run(repeat: int = 1) -> None:
        for _ in range(repeat):
            fn(*args, **kwargs)
    return run


def _mat(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """Fortran m x n matrix of uniform(-0.5, 0.5), starting on a cache line like the runtime's
    outputs (``aligned_copy``: a multi-threaded dgemm into an unaligned one runs slower)."""
    return aligned_copy(rng.random((m, n)) - 0.5, "F")


def _lower(rng: np.random.Generator, n: int) -> np.ndarray:
    """Well-conditioned lower triangle (strictly diagonally dominant)."""
    a = np.tril(_mat(rng, n, n))
    a[np.diag_indices(n)] = n + 1.0
    return aligned_copy(a, "F")


def _restoring(target: np.ndarray, run: Callable[[], object]) -> Call:
    saved = target.copy(order="F")
    return Call(run, lambda: np.copyto(target, saved))


def build(be: Backend, routine: str, pattern: str, x: int, param: float,
          rng: np.random.Generator) -> Call:
    """The timed call for (routine, pattern, x, param) on backend ``be``."""
    d = dims_of(routine, pattern, x, param)
    return _BUILDERS[(routine, pattern)](be, d, rng)


def _gemm_square(be, d, rng, alpha: float = 1.0, beta: float = 0.0):
    a, b, c = _mat(rng, d["m"], d["k"]), _mat(rng, d["k"], d["n"]), _mat(rng, d["m"], d["n"])
    return Call(_op(be, "gemm", alpha, a, b, beta, c))


def _gemm_transposed(flags: tuple[bool, bool]):
    """Square gemm whose call transposes the operands ``flags`` says (patterns tn, nt, tt)."""
    def builder(be, d, rng):
        m, k, n = d["m"], d["k"], d["n"]
        a = _mat(rng, k, m) if flags[0] else _mat(rng, m, k)
        b = _mat(rng, n, k) if flags[1] else _mat(rng, k, n)
        return Call(_op(be, "gemm", 1.0, a, b, 0.0, _mat(rng, m, n), trans_a=flags[0], trans_b=flags[1]))
    return builder


def _gemm_rankb(be, d, rng):
    # SUMMA's step: the rank's local C += its X panel (m x b) @ Y panel (b x n), beta 1. With
    # beta 0 OpenBLAS first zeroes C, a pass over it the runs never make, which would overcharge
    # SUMMA's compute.
    return _gemm_square(be, d, rng, alpha=1e-3, beta=1.0)


def _gemm_panel(be, d, rng):
    # Block-column update of blocked Cholesky: A[i+b:, i:i+b] -= A[i+b:, j:j+b] @ A[i:i+b, j:j+b]^T.
    m, b = d["m"], d["n"]
    p = _mat(rng, m + 2 * b, 2 * b)
    a, bt, c = p[2 * b:, :b], p[b:2 * b, :b], p[2 * b:, b:]
    return Call(_op(be, "gemm", -1e-3, a, bt, 1.0, c, trans_b=True))


def _syrk_square(be, d, rng):
    a, c = _mat(rng, d["n"], d["k"]), _mat(rng, d["n"], d["n"])
    return Call(_op(be, "syrk", 1.0, a, 0.0, c))


def _syrk_panel(be, d, rng):
    # Trailing update of rank b: A22 -= A21 A21^T, A21 a panel inside the matrix.
    n, b = d["n"], d["k"]
    p = _mat(rng, n + b, n + b)
    a, c = p[b:, :b], p[b:, b:]
    return Call(_op(be, "syrk", -1e-3, a, 1.0, c))


def _trsm_square(be, d, rng):
    lo, b = _lower(rng, d["n"]), _mat(rng, d["m"], d["n"])
    return _restoring(b, _op(be, "trsm", 1.0, lo, b))


def _trsm_panel(be, d, rng):
    # Panel solve: A21 <- A21 L11^-T with L11 the b x b diagonal block, A21 below it.
    m, b = d["m"], d["n"]
    p = _mat(rng, m + b, b)
    p[:b, :b] = _lower(rng, b)
    lo, panel = p[:b, :b], p[b:, :b]
    return _restoring(panel, _op(be, "trsm", 1.0, lo, panel))


def _trsm_u12(be, d, rng):
    # U12 of a blocked LU: the b x x block row right of the diagonal block, L11^-1 A12 (unit lower).
    x, b = d["m"], d["n"]
    p = _mat(rng, b, b + x)
    p[:, :b] = _lower(rng, b)
    lo, row = p[:, :b], p[:, b:]
    return _restoring(row, _op(be, "trsm", 1.0, lo, row, False, True, False, True))


def _gemv_square(be, d, rng):
    a, x, y = _mat(rng, d["m"], d["n"]), rng.random(d["n"]), rng.random(d["m"])
    return Call(_op(be, "gemv", 1.0, a, x, 0.0, y))


def _gemv_segment(be, d, rng):
    # Unblocked Cholesky at column i: A[i:, i] -= A[i:, :i] @ A[i, :i] (a strided row of A).
    m, i = d["m"], d["n"]
    p = _mat(rng, m + i, m + i)
    a, x, y = p[i:, :i], p[i, :i], p[i:, i]
    return Call(_op(be, "gemv", -1e-3, a, x, 1.0, y))


def _gemm_dispatch(be, d, rng):
    # What a user's tuned_gemm(a, b) costs when it runs this backend's gemm (C-ordered operands,
    # numpy's default): the runtime's entry and dispatch around the library call.
    a, b = (np.ascontiguousarray(_mat(rng, d["m"], d["k"])), np.ascontiguousarray(_mat(rng, d["k"], d["n"])))
    out = np.empty((d["m"], d["n"]))
    cand = Candidate("blas", be.name, be.get_threads() if be.get_threads else 1)

    def run(repeat: int = 1) -> None:
        for _ in range(repeat):
            autotune.tuned_gemm(a, b, out=out, config=cand)
    return Call(run, whole=True)


def _axpy(be, d, rng):
    x, y = rng.random(d["n"]), rng.random(d["n"])
    return Call(_op(be, "axpy", 1e-3, x, y))


def _axpy_trail(be, d, rng):
    # One step of the axpy Cholesky variant on an order-x trailing matrix, lower form (what numpy's
    # default C order with lower=False runs, as for potrf); x from the element count x(x-1)/2.
    x = int(round((1 + (1 + 8 * d["n"]) ** 0.5) / 2))
    a = spd_matrix(rng, x)
    return _restoring(a, _op(be, "axpy_trail", a, True))


def _add_square(be, d, rng):
    a, b, c = (_mat(rng, d["m"], d["n"]) for _ in range(3))
    return Call(_op(be, "add", a, b, c))


def _add_view(be, d, rng):
    # One Strassen-level addition: quadrants of a 2x-by-2x matrix into a quadrant of another.
    m, n = d["m"], d["n"]
    p, q = _mat(rng, 2 * m, 2 * n), _mat(rng, 2 * m, 2 * n)
    a, b, c = p[:m, :n], p[m:, n:], q[m:, :n]
    return Call(_op(be, "add", a, b, c))


def _chol(name):
    def builder(be, d, rng):
        a = spd_matrix(rng, d["n"])
        return _restoring(a, _op(be, name, a))
    return builder


def _potrf_upper(be, d, rng):
    # potrf on the upper triangle (a Fortran upper or C-ordered lower input of a tuned call).
    a = spd_matrix(rng, d["n"])
    return _restoring(a, _op(be, "potrf", a, False))


def _getrf(be, d, rng):
    # A general matrix: partial pivoting swaps rows as it would on a user's (an SPD one never swaps).
    a = _mat(rng, d["n"], d["n"])
    ipiv = np.zeros(d["n"], dtype=be.int_dtype)
    return _restoring(a, _op(be, "getrf", a, ipiv))


def _getrf_panel(be, d, rng):
    # The m x b panel of a blocked LU, inside a matrix one panel wider (the leading dimension the
    # trailing matrix gives it).
    m, b = d["m"], d["n"]
    a = _mat(rng, m, 2 * b)[:, :b]
    ipiv = np.zeros(b, dtype=be.int_dtype)
    return _restoring(a, _op(be, "getrf", a, ipiv))


def _laswp_panel(be, d, rng):
    # A block column's k interchanges (each row with one at or below it) on an n x n matrix's
    # columns; a permutation, so repeating it needs no restore.
    n, k = d["n"], d["k"]
    a = _mat(rng, n, n)
    ipiv = np.asarray(rng.integers(np.arange(1, k + 1), n + 1), dtype=be.int_dtype)
    return Call(_op(be, "laswp", a, ipiv))


def _getrs_rhs(be, d, rng):
    n = d["n"]
    lu = _mat(rng, n, n) / n
    lu[np.diag_indices(n)] = 1.0          # near the identity: repeated solves keep b's scale (no denormals)
    ipiv = np.asarray(rng.integers(np.arange(1, n + 1), n + 1), dtype=be.int_dtype)   # swaps below each row
    b = _mat(rng, n, d["nrhs"])
    return _restoring(b, _op(be, "getrs", lu, ipiv, b))


def _stencil(be, d, rng):
    """One sweep of the 5-point heat step over a region placed as a tile's pass lies: an interior
    block (m = n = x) with a one-cell ring around it, a strip of m border rows along a tile's top,
    or of n border columns down its left side (strided), each inside its square tile of side x."""
    m, n = d["m"], d["n"]
    side = max(m, n)
    src = rng.random((side + 2, side + 2))
    dst = np.zeros_like(src)
    w = np.array([0.6, 0.1, 0.1, 0.1, 0.1])
    return Call(_op(be, "stencil", src, dst, w, 1, 1 + m, 1, 1 + n, d.get("levels", 1)))


def _stream(be, d, rng):
    """STREAM copy (two arrays) or triad (three) over n elements."""
    arrays = [rng.random(d["n"]) for _ in range(d["streams"])]
    return Call(_op(be, "stream", *arrays))


_BUILDERS = {
    ("gemm", "square"): _gemm_square, ("gemm", "panel"): _gemm_panel,
    **{("gemm", name): _gemm_transposed(flags) for name, flags in TRANSPOSED.items()},
    ("gemm", "stripe"): _gemm_square, ("gemm", "rankb"): _gemm_rankb, ("gemm", "dispatch"): _gemm_dispatch,
    ("syrk", "square"): _syrk_square, ("syrk", "panel"): _syrk_panel,
    ("trsm", "square"): _trsm_square, ("trsm", "panel"): _trsm_panel, ("trsm", "u12"): _trsm_u12,
    ("gemv", "square"): _gemv_square, ("gemv", "segment"): _gemv_segment,
    ("axpy", "square"): _axpy, ("axpy", "trail"): _axpy_trail,
    ("add", "square"): _add_square, ("add", "view"): _add_view,
    ("potrf", "square"): _chol("potrf"), ("potrf", "upper"): _potrf_upper, ("potf2", "square"): _chol("potf2"),
    ("getrf", "square"): _getrf, ("getrf", "panel"): _getrf_panel, ("laswp", "panel"): _laswp_panel,
    ("laswp", "square"): _laswp_panel,
    ("getrs", "rhs"): _getrs_rhs, ("getrs", "square"): _getrs_rhs,
    ("stencil", "square"): _stencil, ("stencil", "interior"): _stencil,
    ("stencil", "rows"): _stencil, ("stencil", "cols"): _stencil, ("stencil", "levels"): _stencil,
    ("stream", "square"): _stream, ("stream", "copy"): _stream, ("stream", "triad"): _stream,
}
