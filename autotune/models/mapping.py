"""Cost of a plan on a heterogeneous cluster as a function of the mapping (001 §5.3, eqs. 5.3-5.4;
docs/models.md#mapping): ``d_i`` processes on processor i, ``p = sum d_i`` processes on an r x c
grid with block b.

SPs of a mapping: every k is the reference k (a processor of speed 1) times ``max_i d_i / s_i``
over the processors used (the slowest used processor, slowed ``d_i`` times where it runs ``d_i``
processes). Processes take ranks processor by processor (host by host, as a hostfile does) and the
grid row-major; a grid row (column) whose ranks span two hosts pays the network link's (ts, tw),
one within a host the host link's. A broadcast among q processes costs ``ceil(log2 q)`` times
(ts + m tw), m in bytes.

Per family, the phases of eqs. 5.3-5.4 (W = 8 bytes a word, f the mapping's slowdown, beta(q) =
ceil(log2 q)):

- LU: compute ``f (2n^3/(3p) k_gemm + n^2 b/(2c) k_trsm + n^2 b/(2r) k_panel)``; communication
  ``(n/b)(beta(c) ts_row + beta(r) ts_col) + W n^2/2 (beta(c) tw_row/r + beta(r) tw_col/c)`` (panel
  along rows, U12 down columns) plus, on r > 1, the pivot search (n reductions) and row swaps.
- Cholesky: ``f (n^3/(3p) k_gemm + n^2 b/(2r) k_trsm + n b^2/3 k_panel)``; the diagonal block down
  the column, the panel along rows and its transpose down columns.
- gemm (SUMMA): ``f 2n^3/p k_gemm``; ``(n/b)(beta(c) ts_row + beta(r) ts_col) + W n^2 (beta(c)
  tw_row/r + beta(r) tw_col/c)``.

Root-held data (as the tuned calls take it) adds the root's scatter and gather (``distribution``:
``MOVES`` matrices, each rank's share over the link from the root's host to its own). HoHe gemm
(``weighted_gemm``): BSR with rows proportional to the processes' speeds, one process column.
HoHe LU and Cholesky: the same phases on a weighted block-cyclic grid (``layout.grid_weights``),
whose k factor is ``weighted_slowdown``: the most loaded rank's share over its speed.

Pure arithmetic, vectorised over grids x blocks: the search methods (``select.mapping``) evaluate
it at thousands of mappings.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.core.families import FAMILIES
from autotune.core.routines import WORD
from autotune.db.lookup import SPLookup
from autotune.geometry.layout import cycle, grid_weights

from . import movement

# The routine, access pattern and library behind each kernel of the cost.
SERIES = {"gemm": ("gemm", "rankb", "numpy-openblas"), "trsm": ("trsm", "panel", "scipy-openblas"),
          "panel": ("getrf", "panel", "scipy-openblas"), "lib_gemm": ("gemm", "square", "numpy-openblas"),
          "lib_cholesky": ("potrf", "square", "scipy-openblas"), "lib_lu": ("getrf", "square", "scipy-openblas")}


def database_k(sp: SPLookup, size: float = 2048.0):
    """k(kernel, b): seconds per flop of one BLAS thread from the SP database, the series the
    distributed models use at a middle-sized operand (one k per kernel and block)."""
    cache: dict[tuple[str, int], float] = {}

    def k(kernel: str, b: int) -> float:
        if (kernel, b) not in cache:
            routine, pattern, backend = SERIES[kernel]
            cache[kernel, b] = movement.k(sp, routine, backend, 1, size, pattern, b)
        return cache[kernel, b]
    return k


def _beta(q: np.ndarray | float) -> np.ndarray:
    """Tree broadcast steps among q processes."""
    return np.ceil(np.log2(np.maximum(q, 1.0)))


@dataclass(frozen=True)
class Links:
    """(ts, tw) of each grid's rows and columns: arrays shaped (grids, 1)."""

    ts_row: np.ndarray
    tw_row: np.ndarray
    ts_col: np.ndarray
    tw_col: np.ndarray


def _lu(n, r, c, b, k, f, lk: Links):
    p = r * c
    compute = f * (2 * n**3 / (3 * p) * k["gemm"] + n * n * b / (2 * c) * k["trsm"] + n * n * b / (2 * r) * k["panel"])
    comm = (n / b) * (_beta(c) * lk.ts_row + _beta(r) * lk.ts_col) \
        + WORD * n * n / 2 * (_beta(c) * lk.tw_row / r + _beta(r) * lk.tw_col / c)
    pivots = (r > 1) * (n * (_beta(r) + 1) * lk.ts_col + WORD * n * n / c * lk.tw_col)
    return compute, comm + pivots


def _cholesky(n, r, c, b, k, f, lk: Links):
    p = r * c
    compute = f * (n**3 / (3 * p) * k["gemm"] + n * n * b / (2 * r) * k["trsm"] + n * b * b / 3 * k["panel"])
    comm = (n / b) * (_beta(c) * lk.ts_row + 2 * _beta(r) * lk.ts_col) \
        + WORD * (n * b * _beta(r) * lk.tw_col + n * n / 2 * (_beta(c) * lk.tw_row / r + _beta(r) * lk.tw_col / c))
    return compute, comm


def _gemm(n, r, c, b, k, f, lk: Links):
    compute = f * 2 * n**3 / (r * c) * k["gemm"]
    comm = (n / b) * (_beta(c) * lk.ts_row + _beta(r) * lk.ts_col) \
        + WORD * n * n * (_beta(c) * lk.tw_row / r + _beta(r) * lk.tw_col / c)
    return compute, comm


def phases(family: str, n: float, r: np.ndarray, c: np.ndarray, b: np.ndarray, k: dict[str, np.ndarray],
           f: float | np.ndarray, links: Links) -> tuple[np.ndarray, np.ndarray]:
    """(compute, communication) seconds over grids (r, c: (G, 1)) x blocks (b, k: (1, B)); ``f``: the
    mapping's k factor, one or per grid ((G, 1): ``weighted_slowdown``)."""
    return MODELS[family].phases(float(n), r, c, b, k, f, links)


def root_moves(n: float, hosts: np.ndarray, shares: np.ndarray, host, net) -> float:
    """One n x n matrix between the root (rank 0) and the others, ``shares`` of it each: over the
    network to ranks of other hosts, through shared memory to the root's own (a ts each)."""
    far = hosts != hosts[0]
    near = ~far
    near[0] = False
    return float(WORD * n * n * (shares[far].sum() * net.tw + shares[near].sum() * host.tw)
                 + far.sum() * net.ts + near.sum() * host.ts)


def distribution(family: str, n: float, hosts: np.ndarray, host, net) -> float:
    """The root's scatter of the inputs and gather of the result, equal shares (root-held data)."""
    return MODELS[family].moves * root_moves(n, hosts, np.full(len(hosts), 1.0 / len(hosts)), host, net)


def weighted_gemm(n: float, hosts: np.ndarray, weights: np.ndarray, k_gemm: float, host, net) -> tuple[float, float]:
    """(compute, communication) of HoHe gemm: BSR with each rank's rows proportional to its speed
    ``weights`` (001 §5.2), so compute is 2n^3 k over the summed speeds; B broadcast whole (beta(p)
    times over the slowest link), A's rows out and C's back."""
    p = len(hosts)
    link = net if (hosts != hosts[0]).any() else host
    shares = weights / weights.sum()
    bcast = float(_beta(np.float64(p)) * (link.ts + WORD * n * n * link.tw))
    return 2.0 * n**3 * k_gemm / float(weights.sum()), bcast + 2 * root_moves(n, hosts, shares, host, net)


def leading_seconds(family: str, n: float, k_gemm: float) -> float:
    """The update's time on one process of speed 1 (the part every mapping divides): the LET_ari
    numerator of 001 eq. 5.5 (the family's flops, ``families``, at gemm's k)."""
    fam = FAMILIES[family]
    return fam.flops(fam.square(int(n))) * k_gemm


def library_seconds(family: str, n: float, k_lib: float, f: float) -> float:
    """The one-process plan: the library routine (the family's flops) at the mapping's slowdown ``f``."""
    fam = FAMILIES[family]
    return f * fam.flops(fam.square(int(n))) * k_lib


def rank_hosts(d: np.ndarray, host_of: np.ndarray) -> np.ndarray:
    """Host of each rank: processor by processor, ``d_i`` ranks on processor i."""
    return np.repeat(host_of, d)


def spans(hosts: np.ndarray, r: int, c: int) -> tuple[bool, bool]:
    """Whether some grid row, some grid column, holds ranks of two hosts (row-major ranks)."""
    h = hosts.reshape(r, c)
    return bool((h != h[:, :1]).any()), bool((h != h[:1, :]).any())


def _shares(weights: tuple[float, ...] | None, parts: int) -> np.ndarray:
    """Each part's share of a cyclic axis' blocks (its blocks per cycle over the cycle's length)."""
    counts = np.array(cycle(weights) if weights is not None else (1,) * parts, float)
    return counts / counts.sum()


def weighted_slowdown(rank_speeds: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The k factor of each r x c grid (shape (G, 1)) with the weighted block-cyclic layout of
    ``rank_speeds`` (row-major ranks): max over ranks of p x its share of the matrix / its speed,
    which is ``slowdown`` where every rank gets an equal share."""
    out = np.empty((len(r), 1))
    for g, (rows, cols) in enumerate(zip(r[:, 0].astype(int), c[:, 0].astype(int), strict=True)):
        axes = grid_weights(rank_speeds, rows, cols)
        assert axes is not None, "weights given: both axes' weights"
        wr, wc = axes
        share = np.outer(_shares(wr, rows), _shares(wc, cols)).ravel()
        out[g, 0] = float(np.max(rows * cols * share / rank_speeds))
    return out


def slowdown(d: np.ndarray, speeds: np.ndarray) -> float:
    """The mapping's k factor: max over used processors of d_i / s_i (001 §5.3)."""
    used = d > 0
    return float(np.max(d[used] / speeds[used]))


@dataclass(frozen=True)
class MappingModel:
    """A family's mapping model: its (compute, communication) phases over grids x blocks, the
    matrices the root moves on root-held data, and, where its HoHe plan is not its own algorithm
    on a weighted block-cyclic layout, that plan's algorithm and model (gemm: BSR, rows by speed)."""

    phases: Callable
    moves: int
    weighted_rows: tuple[str, Callable] | None = None


# The families the mapping search prices (``Family.mapping``), registered once.
MODELS: dict[str, MappingModel] = {
    "gemm": MappingModel(_gemm, 3, ("bsr", weighted_gemm)),
    "cholesky": MappingModel(_cholesky, 2),
    "lu": MappingModel(_lu, 2),
}


__all__ = ["MODELS", "SERIES", "Links", "MappingModel", "database_k", "distribution", "leading_seconds",
           "library_seconds", "phases", "rank_hosts", "root_moves", "slowdown", "spans", "weighted_gemm",
           "weighted_slowdown"]
