"""The distributed Strassen algorithms: StPBLAS (Strassen levels over SUMMA leaves) and StMS
(master/slave level-1 products)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.core.plans import Plan
from autotune.geometry.layout import Axis
from autotune.kernels import dist_gemm as kern

from . import workspace
from .gemm_grid import _oriented, _summa_core, _SummaWork
from .gemm_run import _double, _gather_leaves, _gemm, _Run, _run, _scatter_leaves
from .plan import Phases

if TYPE_CHECKING:
    from mpi4py import MPI


def _quads(x: np.ndarray):
    h = x.shape[2] // 2
    return x[:, :, :h, :h], x[:, :, :h, h:], x[:, :, h:, :h], x[:, :, h:, h:]


def _st_rec(a, b, c, depth: int, nlev: int, ws: list, leaf, ph) -> None:
    """c = a b on (rows, cols, g, g) leaf stacks, the 3-temporary schedule of
    ``autotune.kernels.strassen`` (same additions, same order); leaves go to ``leaf``."""
    if depth >= nlev:
        leaf(a[:, :, 0, 0], b[:, :, 0, 0], c[:, :, 0, 0], 0.0)
        return
    a11, a12, a21, a22 = _quads(a)
    b11, b12, b21, b22 = _quads(b)
    c11, c12, c21, c22 = _quads(c)
    s1, t1, p1 = ws[depth]
    sub = depth + 1

    def mul(x, y, out, beta):
        if sub >= nlev:
            leaf(x[:, :, 0, 0], y[:, :, 0, 0], out[:, :, 0, 0], beta)
        elif beta == 0.0:
            _st_rec(x, y, out, sub, nlev, ws, leaf, ph)
        else:
            _st_rec(x, y, p1, sub, nlev, ws, leaf, ph)
            with ph("compute"):
                kern.acc_4(p1, out)

    with ph("compute"):
        kern.axpby_4(a11, a22, 1.0, s1)                      # 1
        kern.axpby_4(b11, b22, 1.0, t1)
    mul(s1, t1, c11, 0.0)
    with ph("compute"):
        kern.axpby_4(a21, a22, 1.0, s1)                      # 2
    mul(s1, b11, c21, 0.0)
    with ph("compute"):
        kern.axpby_4(b12, b22, -1.0, t1)                     # 3
    mul(a11, t1, c12, 0.0)
    with ph("compute"):
        kern.combine22_4(c11, c21, c12, c22)
        kern.axpby_4(b21, b11, -1.0, t1)                     # 4
    mul(a22, t1, p1, 0.0)
    with ph("compute"):
        kern.acc2_4(p1, c11, 1.0, c21, 1.0)
        kern.axpby_4(a11, a12, 1.0, s1)                      # 5
    mul(s1, b22, p1, 0.0)
    with ph("compute"):
        kern.acc2_4(p1, c11, -1.0, c12, 1.0)
        kern.axpby_4(a21, a11, -1.0, s1)                     # 6
        kern.axpby_4(b11, b12, 1.0, t1)
    mul(s1, t1, c22, 1.0)
    with ph("compute"):
        kern.axpby_4(a12, a22, -1.0, s1)                     # 7
        kern.axpby_4(b21, b22, 1.0, t1)
    mul(s1, t1, c11, 1.0)


def _strassen_summa(run: _Run) -> np.ndarray | None:
    x, y, mm, kk, nn, R, C, flip = _oriented(run)
    plan, comm = run.plan, run.comm
    levels, bs = plan.level, plan.b
    g = 2 ** levels
    ml, kl, nl = -(-mm // g), -(-kk // g), -(-nn // g)             # leaf sizes (padded)
    xr, xc, yr, yc = Axis(ml, R, bs), Axis(kl, C, bs), Axis(kl, R, bs), Axis(nl, C, bs)
    grid = run.grid(R, C)
    with run.ph("distribution"):
        xloc = _scatter_leaves(comm, x, xr, xc, g, C, "x")
        yloc = _scatter_leaves(comm, y, yr, yc, g, C, "y")
    zloc = workspace.empty("z", (xloc.shape[0], yloc.shape[1], g, g), order="F")
    ws = []
    for d in range(levels):
        h = g >> (d + 1)
        ws.append(tuple(workspace.empty(f"st{d}{nm}", (s[0], s[1], h, h), order="F")
                        for nm, s in zip("xyz", (xloc.shape, yloc.shape, zloc.shape), strict=True)))
    work = _SummaWork(zloc.shape[0], zloc.shape[1], bs)

    def leaf(xa, ya, za, beta):
        _summa_core(grid, xa, ya, za, kl, bs, run.be, beta, run.phases, work)

    _st_rec(xloc, yloc, zloc, 0, levels, ws, leaf, run.ph)
    with run.ph("collection"):
        out = _gather_leaves(comm, zloc, xr, yc, g, C, (mm, nn), "F" if flip else "C")
    return None if out is None else (out.T if flip else out)


def strassen_summa(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0,
                   phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by ``plan.level`` Strassen levels over distributed quadrants, leaves by SUMMA
    (StPBLAS, docs/models.md#distributed.strassen_summa); odd sizes zero-padded to a multiple of 2^level."""
    return _run("strassen_summa", _strassen_summa, a, b, comm, plan, root, phases)


# -- Strassen master-worker (StMS) ------------------------------------------------------------------

# Level-1 products: (A-side operand, B-side operand, contributions to C's quadrants). An operand is
# a quadrant name or (x, y, beta) for x + beta y; contributions are (quadrant, sign).
_MS_TASKS = (
    (("a11", "a22", 1.0), ("b11", "b22", 1.0), (("c11", 1.0), ("c22", 1.0))),      # M1
    (("a21", "a22", 1.0), "b11", (("c21", 1.0), ("c22", -1.0))),                    # M2
    ("a11", ("b12", "b22", -1.0), (("c12", 1.0), ("c22", 1.0))),                    # M3
    ("a22", ("b21", "b11", -1.0), (("c11", 1.0), ("c21", 1.0))),                    # M4
    (("a11", "a12", 1.0), "b22", (("c11", -1.0), ("c12", 1.0))),                    # M5
    (("a21", "a11", -1.0), ("b11", "b12", 1.0), (("c22", 1.0),)),                   # M6
    (("a12", "a22", -1.0), ("b21", "b22", 1.0), (("c11", 1.0),)),                   # M7
)


def _quadrants(x: np.ndarray, name: str) -> dict[str, np.ndarray]:
    h, w = x.shape[0] // 2, x.shape[1] // 2
    return {f"{name}11": x[:h, :w], f"{name}12": x[:h, w:2 * w],
            f"{name}21": x[h:2 * h, :w], f"{name}22": x[h:2 * h, w:2 * w]}


def _product_order(a_order: str, b_order: str) -> str:
    """Memory order of the level-1 products (and of the root's working C)."""
    return "F" if a_order == "F" and b_order == "F" else "C"


def _local_product(be, s: np.ndarray, t: np.ndarray, out: np.ndarray, levels: int) -> None:
    """out = s @ t by BLAS (levels 0) or sequential Strassen with column-major operands."""
    if levels == 0:
        _gemm(be, s, t, out)
        return
    from autotune.kernels.strassen import strassen

    if out.flags.f_contiguous and not out.flags.c_contiguous:
        strassen(np.asfortranarray(s), np.asfortranarray(t), out, levels, be.gemm)
    else:                                       # out^T = t^T s^T, all column-major
        strassen(np.ascontiguousarray(t).T, np.ascontiguousarray(s).T, out.T, levels, be.gemm)


def _strassen_ms(run: _Run) -> np.ndarray | None:
    comm, m, k, n, levels = run.comm, run.m, run.k, run.n, run.plan.level
    mo = _product_order(run.a_order, run.b_order)
    if comm.size == 1 or min(m, k, n) < 2:      # one process, or nothing to split: all on the root
        if not run.is_root:
            return None
        with run.ph("compute"):
            out = np.empty((m, n), order=mo)
            _local_product(run.be, run.a, run.b, out, levels if comm.size == 1 else 0)
        return np.ascontiguousarray(out)
    m2, k2, n2 = m // 2, k // 2, n // 2
    if run.is_root:
        return _ms_master(run, m2, k2, n2, mo)
    _ms_worker(run, m2, k2, n2, mo)
    return None


def _ms_worker(run: _Run, m2: int, k2: int, n2: int, mo: str) -> None:
    comm, workers, dbl = run.comm, run.comm.size - 1, _double()
    s = workspace.empty("ms_s", (m2, k2), order=run.a_order)
    t = workspace.empty("ms_t", (k2, n2), order=run.b_order)
    prod = workspace.empty("ms_prod", (m2, n2), order=mo)
    for task in range(7):
        if 1 + task % workers != comm.rank:
            continue
        with run.ph("distribution"):
            comm.Recv([s.reshape(-1, order=run.a_order), dbl], source=0, tag=100 + 2 * task)
            comm.Recv([t.reshape(-1, order=run.b_order), dbl], source=0, tag=101 + 2 * task)
        with run.ph("compute"):
            _local_product(run.be, s, t, prod, run.plan.level - 1)
        with run.ph("collection"):
            comm.Send([prod.reshape(-1, order=mo), dbl], dest=0, tag=task)


def _ms_master(run: _Run, m2: int, k2: int, n2: int, mo: str) -> np.ndarray:
    comm, workers, dbl = run.comm, run.comm.size - 1, _double()
    a, b, m, k, n = run.a, run.b, run.m, run.k, run.n
    cw = np.zeros((m, n), order=mo)
    views = {**_quadrants(a, "a"), **_quadrants(b, "b"), **_quadrants(cw, "c")}
    s = workspace.empty("ms_s", (m2, k2), order=run.a_order)
    t = workspace.empty("ms_t", (k2, n2), order=run.b_order)
    prod = workspace.empty("ms_prod", (m2, n2), order=mo)

    def form(spec, out):
        if isinstance(spec, str):
            np.copyto(out, views[spec])
        else:
            kern.add2(views[spec[0]], views[spec[1]], spec[2], out)

    def combine(task):
        (q1, s1), *rest = _MS_TASKS[task][2]
        if rest:
            kern.acc2(prod, views[q1], s1, views[rest[0][0]], rest[0][1])
        else:
            kern.acc(prod, views[q1], s1)

    def peel():                                 # odd inner index, last column, last row
        me, ke, ne = 2 * m2, 2 * k2, 2 * n2
        if ke < k:
            _gemm(run.be, a[:me, ke:], b[ke:, :ne], cw[:me, :ne], 1.0)
        if ne < n:
            _gemm(run.be, a, b[:, ne:], cw[:, ne:])
        if me < m:
            _gemm(run.be, a[me:, :], b[:, :ne], cw[me:, :ne])

    first_round = min(workers, 7)
    for task in range(7):
        w = 1 + task % workers
        with run.ph("distribution"):
            form(_MS_TASKS[task][0], s)
            form(_MS_TASKS[task][1], t)
        if task >= workers:                     # w's previous product first (w is then idle)
            with run.ph("collection"):
                comm.Recv([prod.reshape(-1, order=mo), dbl], source=w, tag=task - workers)
        with run.ph("distribution"):
            comm.Send([s.reshape(-1, order=run.a_order), dbl], dest=w, tag=100 + 2 * task)
            comm.Send([t.reshape(-1, order=run.b_order), dbl], dest=w, tag=101 + 2 * task)
        if task >= workers:
            with run.ph("collection"):
                combine(task - workers)
        if task == first_round - 1:
            with run.ph("compute"):
                peel()
    for task in range(max(0, 7 - workers), 7):
        with run.ph("collection"):
            comm.Recv([prod.reshape(-1, order=mo), dbl], source=1 + task % workers, tag=task)
            combine(task)
    return np.ascontiguousarray(cw)


def strassen_ms(a, b, comm: MPI.Comm, plan: Plan, *, root: int = 0, phases: Phases | None = None) -> np.ndarray | None:
    """C = A @ B by master-worker Strassen: the root farms the 7 level-1 products out to p - 1
    workers (StMS, docs/models.md#distributed.strassen_ms); odd sizes peeled on the root."""
    return _run("strassen_ms", _strassen_ms, a, b, comm, plan, root, phases)
