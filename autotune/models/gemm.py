"""GEMM family, one process: BLAS gemm per (library, threads) and sequential Strassen
(docs/models.md#gemm.blas, docs/models.md#gemm.strassen)."""
from __future__ import annotations

import numpy as np

from autotune.core.routines import flops
from autotune.db.lookup import SPLookup
from autotune.db.threads import ThreadSPs, VersionSPs, driver_extra

from . import movement, multicore

# Element passes per Strassen level of ``autotune.kernels.strassen`` (the 3-temporary schedule
# of docs/models.md#gemm.strassen, fused additions): 5 on quadrants of A (S1), 5 on quadrants of
# B (T1), and on quadrants of C 5 passes (C22 = M1 - M2 + M3; two two-target accumulations)
# plus 2 more for M6, M7 unless the level's products are leaves (then gemm accumulates them with
# beta = 1).
ADDS_A, ADDS_B, ADDS_C_LEAF, ADDS_C_INNER = 5, 5, 5, 7
# Backend whose add kernel performs Strassen's additions (the Numba fused loops): the model's
# ``add_backend`` wherever the selector or a fitted eq. 4.10 entry prices a Strassen candidate.
STRASSEN_ADD_BACKEND = "numba-reference"
# Strassen's addition kernel versions (the ``variant`` AP of a "strassen" candidate): 0 the fused
# Numba loops above, priced by the add/view SP series; 1 the OpenMP ``add`` of kernels/_omp.pyx at
# the candidate's thread count, priced by the measured thread SPs of version "omp" (R-pfor per pass).
# Calls of the OpenMP add per Strassen node on quadrants of C: C22 = M1 - M2 + M3 (2), two two-target
# accumulations (2 each), plus 2 accumulations of M6, M7 unless the node's products are leaves.
OMP_CALLS_C_LEAF, OMP_CALLS_C_INNER = 6, 8
# Nested Strassen (docs/models.md#multicore.nested-strassen): its addition terms as counted in the
# driver ("exact") rather than as printed in the source, and the aspect ratio it is offered up to.
NESTED_COUNTS = "exact"
NESTED_MAX_ASPECT = 1.5


def lookup_size(m: float, k: float, n: float) -> np.ndarray:
    """Square size whose measured k3_gemm stands for an m x k by k x n product (geometric mean)."""
    return np.cbrt(np.asarray(m, float) * np.asarray(k, float) * np.asarray(n, float))


def blas(m: int, k: int, n: int, backend: str, threads: int, sp: SPLookup, parts: dict | None = None,
         layout: str = "nn", copied: int = 0) -> float:
    """``2mkn * k3_gemm(backend, threads, size)`` on the k series of the BLAS call's ``layout`` (tn, nt
    and tt measured as their own patterns; "aat" is numpy's syrk: ``n(n+1)k * k3_syrk``), plus the
    copy of ``copied`` elements of operands in neither memory order; ``parts``, if given, receives
    the terms."""
    x = lookup_size(m, k, n)
    if layout == "aat":
        t = float(flops("syrk", {"n": m, "k": k}) * sp.k("syrk", backend, threads, x))
    else:
        pattern = "square" if layout == "nn" else layout
        t = float(flops("gemm", {"m": m, "n": n, "k": k}) * sp.k("gemm", backend, threads, x, pattern))
    move = movement.copy(sp, copied) if copied else 0.0
    if parts is not None:
        parts["gemm"] = t
        if move:
            parts["copy"] = move
    return t + move


def transposed_copies(m: int, k: int, n: int, layout: str) -> int:
    """Elements a Strassen candidate copies to undo its call's transpositions (``_around``: the
    C-ordered product's operands, op(b)^T n x k and op(a)^T k x m)."""
    return (n * k if layout[0] == "t" else 0) + (k * m if layout[1] == "t" else 0)


def strassen(m: int, k: int, n: int, levels, backend: str, threads: int, sp: SPLookup,
             add_backend: str = STRASSEN_ADD_BACKEND, add_threads: int = 1, parts: dict | None = None) -> np.ndarray:
    """Strassen with ``levels`` recursion levels (array), leaves on ``backend``'s gemm
    (docs/models.md#gemm.strassen); ``parts``, if given, receives the leaf gemms and additions."""
    leaves, adds = strassen_parts(m, k, n, levels, backend, threads, sp, add_backend, add_threads)
    if parts is not None:
        parts.update(gemm=leaves, add=adds)
    return leaves + adds


def _leaves(m: float, k: float, n: float, levels, backend: str, threads: int, sp: SPLookup) -> tuple[np.ndarray,
            np.ndarray]:
    """(levels as an int array, ``7^l 2 (m/2^l)(k/2^l)(n/2^l) k3_gemm(leaf size)`` per level)."""
    levels = np.atleast_1d(np.asarray(levels, dtype=int))
    scale = 2.0 ** levels
    lm, lk, ln = m / scale, k / scale, n / scale
    k3 = sp.k("gemm", backend, threads, lookup_size(lm, lk, ln))
    return levels, 7.0 ** levels * 2.0 * lm * lk * ln * k3


def omp_add_sps(tsp: ThreadSPs) -> tuple[VersionSPs, tuple[float, float] | None] | None:
    """(version "omp" SPs, seconds per added element of one thread as a line in P, or None) when
    the OpenMP kernel version is measured, else None. The per-element line is nested Strassen's
    ``T_add``, which the thread probe measures on the "omp" add whenever that version is measured."""
    omp = tsp.versions.get("omp")
    if omp is None:
        return None
    return omp, (tsp.strassen.t_add if tsp.strassen is not None else None)


def strassen_omp(m: int, k: int, n: int, levels, backend: str, threads: int, sp: SPLookup, tsp: ThreadSPs,
                 parts: dict | None = None) -> np.ndarray:
    """Strassen with ``levels`` levels, leaves on ``backend``'s gemm, additions by the OpenMP ``add``
    at ``threads`` threads (variant 1): the leaves as in ``strassen``; every addition call an R-pfor
    (models.multicore.additions) over its elements with version "omp"'s T_gen, per-element time and
    oversubscription. ValueError when "omp" is not measured."""
    found = omp_add_sps(tsp)
    if found is None:
        raise ValueError("strassen_omp: thread SPs of kernel version 'omp' are not measured")
    omp, per_elem = found
    levels, leaves = _leaves(m, k, n, levels, backend, threads, sp)
    lmax = int(levels.max(initial=0))
    inner_c, leaf_c = np.zeros(lmax + 1), np.zeros(lmax + 1)
    for i in range(1, lmax + 1):
        qm, qk, qn = m / 2.0 ** i, k / 2.0 ** i, n / 2.0 ** i
        a_call, b_call, c_call = (float(multicore.additions(threads, [(1, e)], omp, tsp.cores, per_elem,
                                                                  "add_after_blas"))
                                  for e in (qm * qk, qk * qn, qm * qn))
        nodes = 7.0 ** (i - 1)
        base = nodes * (ADDS_A * a_call + ADDS_B * b_call)
        leaf_c[i] = base + nodes * OMP_CALLS_C_LEAF * c_call
        inner_c[i] = base + nodes * OMP_CALLS_C_INNER * c_call
    inner = np.concatenate([[0.0], np.cumsum(inner_c[1:])])
    adds = inner[np.maximum(levels - 1, 0)] + leaf_c[levels]
    if parts is not None:
        parts.update(gemm=leaves, add=adds)
    return leaves + adds


def strassen_nested(m: int, k: int, n: int, levels, p1: int, threads: int, tsp: ThreadSPs, sp: SPLookup | None = None,
                    backend: str = "numpy-openblas", parts: dict | None = None) -> np.ndarray:
    """Nested-parallel Strassen (algorithm "strassen_nested", variant ``p1``): ``p1`` workers over the
    top level's 7 products, ``threads / p1`` BLAS threads each, ``levels`` (1 or 2) levels
    (docs/models.md#multicore.nested-strassen). Where the probe measured the driver at this
    (P1, P2, levels) and ``sp`` is given: the products (``backend``'s gemm, or one sequential
    Strassen level over it, from the SP table) shared out over the workers and cores
    (models.multicore.shared_makespan), plus the driver's measured extra per element of C.
    Otherwise eqs. 6.9-6.12 at the size ``(m k n)^(1/3)``. ValueError when no nested-Strassen SPs
    are stored."""
    if tsp.strassen is None:
        raise ValueError("strassen_nested: nested-Strassen thread SPs are not measured")
    size = float(lookup_size(m, k, n))
    p2 = max(threads // p1, 1)
    levels = np.atleast_1d(levels)
    prod, extra = np.zeros(levels.size), np.zeros(levels.size)
    hm, hk, hn = m // 2, k // 2, n // 2
    for i, lv in enumerate(levels):
        per = driver_extra(tsp.strassen, p1, p2, int(lv), size) if sp is not None else None
        if per is None or sp is None:          # no measured driver overhead (none without sp)
            prod[i] = float(multicore.strassen_nested(size, p1, p2, tsp.strassen, tsp.cores, int(lv), NESTED_COUNTS))
            continue
        one = (blas(hm, hk, hn, backend, p2, sp) if lv == 1
               else float(strassen(hm, hk, hn, [int(lv) - 1], backend, p2, sp)[0]))
        prod[i] = multicore.shared_makespan([(one, p2)] * 7, p1, tsp.cores)
        extra[i] = per * m * n
    if parts is not None:
        parts.update(gemm=prod, add=extra)
    return prod + extra


def strassen_parts(m: float, k: float, n: float, levels, backend: str, threads: int, sp: SPLookup,
                   add_backend: str = STRASSEN_ADD_BACKEND, add_threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Strassen's two cost terms (arrays over ``levels``): leaf products and additions (the terms
    docs/models.md#fitted.strassen weights by M(l) and A(l) when it remodels).

    Leaves: ``7^l 2 (m/2^l)(k/2^l)(n/2^l) k3_gemm(leaf size)``. Additions: at level i the
    passes above act on quadrants of size ``/2^i``, each costed with k2_add measured on quadrant
    views of that size (docs/models.md#gemm.strassen).
    """
    levels, leaves = _leaves(m, k, n, levels, backend, threads, sp)
    lmax = int(levels.max(initial=0))
    if lmax == 0:
        return leaves, np.zeros_like(leaves)
    i = np.arange(1, lmax + 1)
    qm, qk, qn = m / 2.0 ** i, k / 2.0 ** i, n / 2.0 ** i
    ab = ADDS_A * qm * qk + ADDS_B * qk * qn
    k2 = sp.k("add", add_backend, add_threads, np.sqrt((ab + ADDS_C_INNER * qm * qn) / 18.0), pattern="view")
    per_pass = 7.0 ** (i - 1) * k2                   # 7^(i-1) quadrant additions at level i
    inner = np.concatenate([[0.0], np.cumsum(per_pass * (ab + ADDS_C_INNER * qm * qn))])
    leaf = np.concatenate([[0.0], per_pass * (ab + ADDS_C_LEAF * qm * qn)])
    return leaves, inner[np.maximum(levels - 1, 0)] + leaf[levels]  # levels above the leaves, then theirs
