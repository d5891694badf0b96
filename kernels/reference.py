"""Reference BLAS/LAPACK in Numba: plain cache-blocked loops standing for an unoptimised library.

Same signatures and semantics as the BLAS tables (``autotune.backends.base``). Matrices are
column-major views (Fortran arrays or their sub-views); each is handed to the compiled cores as
a flat 1-D buffer starting at its first element plus a leading dimension, so one compiled
specialisation serves every layout and inner loops run over contiguous memory.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange
from numpy.lib.stride_tricks import as_strided

_JIT = {"cache": True, "nogil": True}
NB = 64  # block size of the blocked loops
MB, KB = 256, 128  # gemm: rows of c per task, depth of a per sweep (an MB x KB block of a fits L2)
SB = 256  # syrk and right-side trsm: column blocks; off-diagonal blocks go through the blocked gemm


def _flat(a: np.ndarray) -> tuple[np.ndarray, int]:
    """(flat buffer from a[0, 0], leading dimension) of a column-major 2-D float64 view."""
    if a.ndim != 2 or a.dtype != np.float64:
        raise ValueError("expected a 2-D float64 array")
    m, n = a.shape
    s0, s1 = a.strides
    if m > 1 and s0 != 8:
        raise ValueError("operand must be column-major (Fortran-ordered or a column-major view)")
    ld = s1 // 8 if n > 1 else max(m, 1)
    if n > 1 and ld < m:
        raise ValueError("operand columns overlap")
    size = (n - 1) * ld + m if m and n else 0
    return as_strided(a, shape=(size,), strides=(8,)), ld


def _vec(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(flat buffer from x[0], increment) of a 1-D float64 view with a positive stride."""
    if x.ndim != 1 or x.dtype != np.float64:
        raise ValueError("expected a 1-D float64 array")
    n = x.shape[0]
    inc = x.strides[0] // 8 if n > 1 else 1
    if inc < 1:
        raise ValueError("vector stride must be positive")
    return as_strided(x, shape=((n - 1) * inc + 1 if n else 0,), strides=(8,)), inc


# ---------------------------------------------------------------- level 3 cores
# Inner loops run over contiguous 1-D slices (columns), which Numba vectorises.


@njit(parallel=True, **_JIT)
def _gemm_dot(alpha, a, lda, b, ldb, tb, beta, c, ldc, m, n, k):
    """c = alpha a^T op(b) + beta c (a is k x m): dot form, one column of c per task."""
    for j in prange(n):
        cj = c[j * ldc: j * ldc + m]
        bj = np.empty(k)
        for p in range(k):
            bj[p] = alpha * (b[j + p * ldb] if tb else b[p + j * ldb])
        for i in range(m):
            cj[i] = 0.0 if beta == 0.0 else beta * cj[i]
        for i in range(m):
            ai = a[i * lda: i * lda + k]
            acc = 0.0
            for p in range(k):
                acc += ai[p] * bj[p]
            cj[i] += acc


@njit(**_JIT)
def _aligned(n):
    """Uninitialised float64 work array of length n starting on a 64-byte (cache-line) boundary."""
    buf = np.empty(n + 8)
    off = (-(buf.ctypes.data >> 3)) & 7
    return buf[off: off + n]


@njit(parallel=True, **_JIT)
def _gemm_blocked(alpha, a, lda, b, ldb, tb, beta, c, ldc, m, n, k, mb):
    """c = alpha a op(b) + beta c by row blocks of ``mb`` (in parallel) x depth blocks of KB: each
    a block (mb x KB, in L2) serves every column of c; four columns of c are updated per sweep of a.

    The a block and the four columns of c are worked on in cache-line-aligned copies: vector loads
    that straddle cache lines slow this loop down, so its speed would depend on where the allocator
    happened to put the user's arrays.
    """
    nib = (m + mb - 1) // mb
    ld = (mb + 7) // 8 * 8                                  # aligned column stride of the copies
    for ib in prange(nib):
        i0, i1 = ib * mb, min(ib * mb + mb, m)
        r = i1 - i0
        for j in range(n):
            cj = c[j * ldc + i0: j * ldc + i1]
            for i in range(r):
                cj[i] = 0.0 if beta == 0.0 else beta * cj[i]
        ablk, cblk = _aligned(ld * KB), _aligned(4 * ld)
        for p0 in range(0, k, KB):
            p1 = min(p0 + KB, k)
            for p in range(p0, p1):
                ablk[(p - p0) * ld: (p - p0) * ld + r] = a[p * lda + i0: p * lda + i1]
            j = 0
            while j + 4 <= n:
                for q in range(4):
                    cblk[q * ld: q * ld + r] = c[(j + q) * ldc + i0: (j + q) * ldc + i1]
                c0, c1, c2, c3 = cblk[0: r], cblk[ld: ld + r], cblk[2 * ld: 2 * ld + r], cblk[3 * ld: 3 * ld + r]
                for p in range(p0, p1):
                    ap = ablk[(p - p0) * ld: (p - p0) * ld + r]
                    if tb:
                        s0, s1 = alpha * b[j + p * ldb], alpha * b[j + 1 + p * ldb]
                        s2, s3 = alpha * b[j + 2 + p * ldb], alpha * b[j + 3 + p * ldb]
                    else:
                        s0, s1 = alpha * b[p + j * ldb], alpha * b[p + (j + 1) * ldb]
                        s2, s3 = alpha * b[p + (j + 2) * ldb], alpha * b[p + (j + 3) * ldb]
                    for i in range(r):
                        x = ap[i]
                        c0[i] += s0 * x
                        c1[i] += s1 * x
                        c2[i] += s2 * x
                        c3[i] += s3 * x
                for q in range(4):
                    c[(j + q) * ldc + i0: (j + q) * ldc + i1] = cblk[q * ld: q * ld + r]
                j += 4
            while j < n:
                cj = c[j * ldc + i0: j * ldc + i1]
                for p in range(p0, p1):
                    ap = ablk[(p - p0) * ld: (p - p0) * ld + r]
                    s = alpha * (b[j + p * ldb] if tb else b[p + j * ldb])
                    for i in range(r):
                        cj[i] += s * ap[i]
                j += 1


@njit(parallel=True, **_JIT)
def _syrk(alpha, a, lda, ta, beta, c, ldc, n, k, lower):
    """One triangle of c = alpha op(a) op(a)^T + beta c, op(a) n x k."""
    for j in prange(n):
        i0 = j if lower else 0
        i1 = n if lower else j + 1
        cj = c[j * ldc + i0: j * ldc + i1]
        for i in range(i1 - i0):
            cj[i] = 0.0 if beta == 0.0 else beta * cj[i]
        if ta:  # c[i, j] += alpha a[:, i] . a[:, j]
            aj = a[j * lda: j * lda + k]
            for ii in range(i1 - i0):
                ai = a[(i0 + ii) * lda: (i0 + ii) * lda + k]
                acc = 0.0
                for p in range(k):
                    acc += ai[p] * aj[p]
                cj[ii] += alpha * acc
        else:
            for p in range(k):
                ap = a[p * lda + i0: p * lda + i1]
                s = alpha * a[j + p * lda]
                for ii in range(i1 - i0):
                    cj[ii] += s * ap[ii]


@njit(parallel=True, **_JIT)
def _trsm_right(alpha, t, ldt, t_trans, t_lower, unit, x, ldx, m, n):
    """x := alpha x T^-1, T = op(a) n x n triangular; row blocks of x in parallel."""
    nblk = (m + NB - 1) // NB
    for ib in prange(nblk):
        i0, i1 = ib * NB, min(ib * NB + NB, m)
        for jj in range(n):
            j = n - 1 - jj if t_lower else jj
            xj = x[j * ldx + i0: j * ldx + i1]
            for i in range(i1 - i0):
                xj[i] *= alpha
            p_lo, p_hi = (j + 1, n) if t_lower else (0, j)
            for p in range(p_lo, p_hi):
                tpj = t[j + p * ldt] if t_trans else t[p + j * ldt]
                xp = x[p * ldx + i0: p * ldx + i1]
                for i in range(i1 - i0):
                    xj[i] -= xp[i] * tpj
            if not unit:
                d = t[j + j * ldt]
                for i in range(i1 - i0):
                    xj[i] /= d


@njit(parallel=True, **_JIT)
def _trsm_left(alpha, t, ldt, t_trans, t_lower, unit, x, ldx, m, n):
    """x := alpha T^-1 x, T = op(a) m x m triangular; columns of x in parallel."""
    for j in prange(n):
        xj = x[j * ldx: j * ldx + m]
        for i in range(m):
            xj[i] *= alpha
        for ii in range(m):
            i = ii if t_lower else m - 1 - ii
            if t_trans:  # dot form: row i of T is column i of a
                ti = t[i * ldt: i * ldt + m]
                lo, hi = (0, i) if t_lower else (i + 1, m)
                acc = 0.0
                for q in range(lo, hi):
                    acc += ti[q] * xj[q]
                xj[i] -= acc
                if not unit:
                    xj[i] /= ti[i]
            else:  # axpy form: column i of T is column i of a
                if not unit:
                    xj[i] /= t[i + i * ldt]
                lo, hi = (i + 1, m) if t_lower else (0, i)
                ti, s = t[i * ldt + lo: i * ldt + hi], xj[i]
                for q in range(hi - lo):
                    xj[lo + q] -= s * ti[q]


# ---------------------------------------------------------------- level 1/2 cores


@njit(**_JIT)
def _gemv(alpha, a, lda, x, incx, beta, y, incy, m, n, trans):
    """y = alpha op(a) x + beta y."""
    ny = n if trans else m
    for i in range(ny):
        y[i * incy] = 0.0 if beta == 0.0 else beta * y[i * incy]
    if trans:
        for j in range(n):
            aj = a[j * lda: j * lda + m]
            acc = 0.0
            for i in range(m):
                acc += aj[i] * x[i * incx]
            y[j * incy] += alpha * acc
    else:
        for j in range(n):
            aj, s = a[j * lda: j * lda + m], alpha * x[j * incx]
            for i in range(m):
                y[i * incy] += s * aj[i]


@njit(**_JIT)
def _axpy(alpha, x, incx, y, incy, n):
    for i in range(n):
        y[i * incy] += alpha * x[i * incx]


@njit(parallel=True, **_JIT)
def _add(a, lda, b, ldb, beta, c, ldc, m, n):
    for j in prange(n):
        aj, bj, cj = a[j * lda: j * lda + m], b[j * ldb: j * ldb + m], c[j * ldc: j * ldc + m]
        for i in range(m):
            cj[i] = aj[i] + beta * bj[i]


# ---------------------------------------------------------------- LAPACK-like cores


@njit(**_JIT)
def _potf2(a, lda, n, off):
    """Unblocked lower Cholesky (left-looking, gemv form); info (1-based + off) or 0."""
    for j in range(n):
        d = a[j + j * lda]
        for p in range(j):
            d -= a[j + p * lda] * a[j + p * lda]
        if not d > 0.0:
            a[j + j * lda] = d
            return j + 1 + off
        d = np.sqrt(d)
        a[j + j * lda] = d
        aj = a[j * lda + j + 1: j * lda + n]
        for p in range(j):
            ap, s = a[p * lda + j + 1: p * lda + n], a[j + p * lda]
            for i in range(n - j - 1):
                aj[i] -= ap[i] * s
        for i in range(n - j - 1):
            aj[i] /= d
    return 0


@njit(**_JIT)
def _getf2(a, lda, m, n, ipiv):
    """Unblocked right-looking LU with partial pivoting; ipiv 1-based like LAPACK."""
    info = 0
    for j in range(min(m, n)):
        piv, best = j, abs(a[j + j * lda])
        for i in range(j + 1, m):
            if abs(a[i + j * lda]) > best:
                piv, best = i, abs(a[i + j * lda])
        ipiv[j] = piv + 1
        if a[piv + j * lda] == 0.0:
            if info == 0:
                info = j + 1
            continue
        if piv != j:
            for q in range(n):
                tmp = a[j + q * lda]
                a[j + q * lda] = a[piv + q * lda]
                a[piv + q * lda] = tmp
        d = a[j + j * lda]
        lj = a[j * lda + j + 1: j * lda + m]
        for i in range(m - j - 1):
            lj[i] /= d
        for q in range(j + 1, n):
            s = a[j + q * lda]
            if s != 0.0:
                aq = a[q * lda + j + 1: q * lda + m]
                for i in range(m - j - 1):
                    aq[i] -= lj[i] * s
    return info


# ---------------------------------------------------------------- public API


def _op_shape(a: np.ndarray, trans: bool) -> tuple[int, int]:
    return (a.shape[1], a.shape[0]) if trans else a.shape


def gemm(alpha, a, b, beta, c, trans_a=False, trans_b=False):
    """c = alpha op(a) op(b) + beta c."""
    (m, k), (k2, n) = _op_shape(a, trans_a), _op_shape(b, trans_b)
    if k != k2 or c.shape != (m, n):
        raise ValueError(f"gemm: shapes {a.shape}, {b.shape}, {c.shape} do not conform")
    if m and n:
        (fa, lda), (fb, ldb), (fc, ldc) = _flat(a), _flat(b), _flat(c)
        if trans_a:
            _gemm_dot(float(alpha), fa, lda, fb, ldb, bool(trans_b), float(beta), fc, ldc, m, n, k)
        else:
            mb = min(MB, max(8, -(-m // (2 * numba.get_num_threads()))))  # >= 2 row blocks per thread
            _gemm_blocked(float(alpha), fa, lda, fb, ldb, bool(trans_b), float(beta), fc, ldc, m, n, k, mb)


def syrk(alpha, a, beta, c, lower=True, trans=False):
    """One triangle of c = alpha op(a) op(a)^T + beta c."""
    n, k = _op_shape(a, trans)
    if c.shape != (n, n):
        raise ValueError(f"syrk: shapes {a.shape}, {c.shape} do not conform")
    if n > SB and not trans:                         # diagonal blocks here, the rest as gemm
        for j0 in range(0, n, SB):
            j1 = min(j0 + SB, n)
            syrk(alpha, a[j0:j1], beta, c[j0:j1, j0:j1], lower)
            rows = slice(j1, n) if lower else slice(0, j0)
            if c[rows, j0:j1].size:
                gemm(alpha, a[rows], a[j0:j1], beta, c[rows, j0:j1], trans_b=True)
    elif n:
        (fa, lda), (fc, ldc) = _flat(a), _flat(c)
        _syrk(float(alpha), fa, lda, bool(trans), float(beta), fc, ldc, n, k, bool(lower))


def trsm(alpha, a, b, right=True, lower=True, trans_a=True, unit=False):
    """b = alpha b op(a)^-1 (right) or alpha op(a)^-1 b (left), a triangular."""
    m, n = b.shape
    order = n if right else m
    if a.shape != (order, order):
        raise ValueError(f"trsm: shapes {a.shape}, {b.shape} do not conform")
    if not (m and n):
        return
    t_lower = bool(lower) != bool(trans_a)  # is op(a) lower triangular?
    if right and n > SB:
        _trsm_right_blocked(alpha, a, b, lower, trans_a, unit, t_lower)
        return
    (fa, lda), (fb, ldb) = _flat(a), _flat(b)
    core = _trsm_right if right else _trsm_left
    core(float(alpha), fa, lda, bool(trans_a), t_lower, bool(unit), fb, ldb, m, n)


def _trsm_right_blocked(alpha, a, b, lower, trans_a, unit, t_lower) -> None:
    """x op(a) = alpha b by column blocks of SB: b_J <- alpha b_J - x_P op(a)[P, J] (gemm over the
    blocks P solved before J: left of J if op(a) is upper, right of it if lower), then the
    triangular solve on the diagonal block."""
    n = b.shape[1]
    starts = list(range(0, n, SB))
    for j0 in (reversed(starts) if t_lower else starts):
        j1 = min(j0 + SB, n)
        done = slice(j1, n) if t_lower else slice(0, j0)
        beta = float(alpha)
        if b[:, done].size:
            t_pj = a[j0:j1, done] if trans_a else a[done, j0:j1]    # op(a)[done, J]
            gemm(-1.0, b[:, done], t_pj, beta, b[:, j0:j1], trans_b=bool(trans_a))
            beta = 1.0
        trsm(beta, a[j0:j1, j0:j1], b[:, j0:j1], True, lower, trans_a, unit)


def gemv(alpha, a, x, beta, y, trans=False):
    """y = alpha op(a) x + beta y."""
    m, n = a.shape
    if x.shape != ((m,) if trans else (n,)) or y.shape != ((n,) if trans else (m,)):
        raise ValueError(f"gemv: shapes {a.shape}, {x.shape}, {y.shape} do not conform")
    if y.shape[0]:
        (fa, lda), (fx, incx), (fy, incy) = _flat(a), _vec(x), _vec(y)
        _gemv(float(alpha), fa, lda, fx, incx, float(beta), fy, incy, m, n, bool(trans))


def axpy(alpha, x, y):
    """y = alpha x + y."""
    if x.shape != y.shape:
        raise ValueError(f"axpy: lengths {x.shape}, {y.shape} differ")
    if x.shape[0]:
        (fx, incx), (fy, incy) = _vec(x), _vec(y)
        _axpy(float(alpha), fx, incx, fy, incy, x.shape[0])


def add(a, b, c, beta=1.0):
    """c = a + beta b elementwise."""
    if not (a.shape == b.shape == c.shape):
        raise ValueError(f"add: shapes {a.shape}, {b.shape}, {c.shape} differ")
    m, n = c.shape
    if m and n:
        (fa, lda), (fb, ldb), (fc, ldc) = _flat(a), _flat(b), _flat(c)
        _add(fa, lda, fb, ldb, float(beta), fc, ldc, m, n)


def _square(a: np.ndarray, name: str) -> int:
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{name}: matrix is not square")
    return a.shape[0]


def potf2(a, lower=True):
    """Unblocked Cholesky in place (one triangle); LAPACK info."""
    n = _square(a, "potf2")
    if not n:
        return 0
    if not lower:
        return _upper_via_transpose(a, potf2)
    fa, lda = _flat(a)
    return int(_potf2(fa, lda, n, 0))


def potrf(a, lower=True, nb=NB):
    """Blocked right-looking Cholesky in place (potf2, trsm, syrk on blocks); LAPACK info."""
    n = _square(a, "potrf")
    if not lower:
        return _upper_via_transpose(a, potrf)
    for k0 in range(0, n, nb):
        k1 = min(k0 + nb, n)
        fa, lda = _flat(a[k0:k1, k0:k1])
        info = int(_potf2(fa, lda, k1 - k0, k0))
        if info:
            return info
        if k1 < n:
            trsm(1.0, a[k0:k1, k0:k1], a[k1:, k0:k1], right=True, lower=True, trans_a=True)
            syrk(-1.0, a[k1:, k0:k1], 1.0, a[k1:, k1:], lower=True)
    return 0


def _upper_via_transpose(a: np.ndarray, fn) -> int:
    """Upper Cholesky: U^T U = A means the lower factor of A^T, kept in a column-major copy."""
    t = np.asfortranarray(a.T)
    info = fn(t, lower=True)
    iu = np.triu_indices(a.shape[0])
    a[iu] = t.T[iu]
    return info


def getrf(a, ipiv):
    """LU with partial pivoting in place (m x n); ipiv receives 1-based pivots; LAPACK info."""
    m, n = a.shape
    if ipiv.shape[0] < min(m, n):
        raise ValueError("getrf: ipiv too short")
    if not (m and n):
        return 0
    fa, lda = _flat(a)
    piv = np.zeros(min(m, n), dtype=np.int64)
    info = int(_getf2(fa, lda, m, n, piv))
    ipiv[: min(m, n)] = piv
    return info


def getrs(lu, ipiv, b, trans=0):
    """Solve op(A) x = b in place from getrf's ``lu`` and 1-based ``ipiv`` (trans 0: A, else A^T); info."""
    n = lu.shape[0]
    if lu.shape != (n, n) or b.shape[0] != n or ipiv.shape[0] < n:
        raise ValueError("getrs: shapes do not conform")
    if not (n and b.shape[1]):
        return 0
    swaps = [(i, int(ipiv[i]) - 1) for i in range(n) if int(ipiv[i]) - 1 != i]
    if trans == 0:                                  # A = P L U: x = U^-1 L^-1 P^T b
        for i, p in swaps:
            b[[i, p]] = b[[p, i]]
        trsm(1.0, lu, b, False, True, False, True)
        trsm(1.0, lu, b, False, False, False, False)
    else:                                           # A^T = U^T L^T P^T: x = P L^-T U^-T b
        trsm(1.0, lu, b, False, False, True, False)
        trsm(1.0, lu, b, False, True, True, True)
        for i, p in reversed(swaps):
            b[[i, p]] = b[[p, i]]
    return 0


@numba.njit(cache=True)
def _swap_rows(a, ipiv, k1, k2):
    for i in range(k1, k2):
        p = ipiv[i] - 1
        if p != i:
            for j in range(a.shape[1]):
                a[i, j], a[p, j] = a[p, j], a[i, j]


def laswp(a, ipiv, k1=0, k2=-1):
    """getrf's row interchanges: for i in k1..k2-1 swap rows i and ipiv[i] - 1 (1-based pivots)."""
    hi = ipiv.shape[0] if k2 < 0 else k2
    if hi > ipiv.shape[0] or k1 < 0:
        raise ValueError("laswp: pivot range outside ipiv")
    _swap_rows(a, np.asarray(ipiv, dtype=np.int64), k1, hi)


def set_num_threads(n: int) -> None:
    numba.set_num_threads(n)


def get_num_threads() -> int:
    return numba.get_num_threads()


def warm_up() -> None:
    """Compile (or load from cache) every core once, on tiny operands."""
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.random((4, 4))) + 4 * np.eye(4, order="F")
    b, c = np.asfortranarray(rng.random((4, 4))), np.zeros((4, 4), order="F")
    x, y = rng.random(4), rng.random(4)
    gemm(1.0, a, b, 0.0, c)
    syrk(1.0, a, 0.0, c)
    trsm(1.0, a, b)
    gemv(1.0, a, x, 0.0, y)
    axpy(1.0, x, y)
    add(a, b, c)
    s = np.asfortranarray(a @ a.T)
    potf2(s.copy(order="F"))
    potrf(s.copy(order="F"))
    getrf(s.copy(order="F"), np.zeros(4, dtype=np.int64))
