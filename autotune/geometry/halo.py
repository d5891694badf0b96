"""Where a stencil's tiles, halos, messages and update regions lie: index arithmetic, no MPI.

A field of n0 x n1 cells is cut into the balanced blocks of an r x c process grid
(``layout.block_2d``). Each tile is stored with a halo of ``h`` cells on every side (local array
(tr + 2h) x (tc + 2h), the tile at [h, h + tr) x [h, h + tc)). A stencil of radius R updates the
cells of the global interior (the outer R rings of the field stay fixed: Dirichlet edges); with
h = s·R a halo exchange serves s steps, the tile's update region growing by (s - 1 - k)·R cells into
the halo at sub-step k (ghost-zone expansion). The same regions are run by ``distributed.stencil``
and counted by ``models.stencil``; 004 §3.2.1 eqs. 5-6 count border and interior cells.
"""
from __future__ import annotations

from dataclasses import dataclass

from autotune.geometry.layout import Axis

# Neighbour directions (row step, column step): the four edges, then the four corners.
EDGES = ((-1, 0), (1, 0), (0, -1), (0, 1))
CORNERS = ((-1, -1), (-1, 1), (1, -1), (1, 1))


def border_cells(nx, ny, p, p1):
    """004 eq. 5: cells a neighbour waits for on a tile of NX x NY with p borders along X (rows of
    NX cells) and p1 along Y (columns of NY cells): CF = p·NX + p1·NY - p·p1 (vectorised)."""
    return p * nx + p1 * ny - p * p1


def interior_cells(nx, ny, p, p1):
    """004 eq. 6: CI = NX·NY - CF."""
    return nx * ny - border_cells(nx, ny, p, p1)


@dataclass(frozen=True)
class Rect:
    """Rows [r0, r1) x columns [c0, c1) of a tile's local array."""

    r0: int
    r1: int
    c0: int
    c1: int

    @property
    def shape(self) -> tuple[int, int]:
        return max(self.r1 - self.r0, 0), max(self.c1 - self.c0, 0)

    @property
    def cells(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def empty(self) -> bool:
        return self.cells == 0

    def clip(self, other: Rect) -> Rect:
        return Rect(max(self.r0, other.r0), min(self.r1, other.r1), max(self.c0, other.c0), min(self.c1, other.c1))


@dataclass(frozen=True)
class Sweep:
    """One sub-step's update regions: ``whole`` (what a blocking schedule sweeps in one call), its
    ``interior`` (reads no halo cell) and ``border`` (the rest, in 004 §3.2.3's priority order:
    corners, then edges; ``rows`` says which border pieces are row strips, the others columns)."""

    whole: Rect
    interior: Rect
    border: tuple[Rect, ...]
    rows: tuple[bool, ...]


@dataclass(frozen=True)
class Tile:
    """Process (pr, pc) of an r x c grid over an n0 x n1 field, halo ``h``, stencil radius ``radius``."""

    n0: int
    n1: int
    r: int
    c: int
    pr: int
    pc: int
    h: int = 1
    radius: int = 1
    weights: tuple[tuple[float, ...] | None, tuple[float, ...] | None] = (None, None)

    @property
    def rows(self) -> tuple[int, int]:
        """Global rows [g0, g1) of the tile."""
        return Axis(self.n0, self.r, weights=self.weights[0]).span(self.pr)

    @property
    def cols(self) -> tuple[int, int]:
        return Axis(self.n1, self.c, weights=self.weights[1]).span(self.pc)

    @property
    def shape(self) -> tuple[int, int]:
        (g0, g1), (k0, k1) = self.rows, self.cols
        return g1 - g0, k1 - k0

    @property
    def local_shape(self) -> tuple[int, int]:
        tr, tc = self.shape
        return tr + 2 * self.h, tc + 2 * self.h

    @property
    def tile(self) -> Rect:
        tr, tc = self.shape
        return Rect(self.h, self.h + tr, self.h, self.h + tc)

    def neighbour(self, d: tuple[int, int]) -> tuple[int, int] | None:
        pr, pc = self.pr + d[0], self.pc + d[1]
        return (pr, pc) if 0 <= pr < self.r and 0 <= pc < self.c else None

    @property
    def substeps(self) -> int:
        """Steps one halo exchange serves: h / R."""
        return max(self.h // self.radius, 1)

    def directions(self, corners: bool) -> tuple[tuple[int, int], ...]:
        """The directions this tile exchanges with: its edges' neighbours, and its corners' when
        the stencil reads diagonal cells (``corners``) or a multi-step halo does."""
        dirs = EDGES + (CORNERS if corners or self.substeps > 1 else ())
        return tuple(d for d in dirs if self.neighbour(d) is not None)

    def send(self, d: tuple[int, int]) -> Rect:
        """The h-wide strip of the tile its neighbour in direction ``d`` keeps in its halo."""
        return Rect(*self._band(d[0], self.shape[0], inner=True), *self._band(d[1], self.shape[1], inner=True))

    def recv(self, d: tuple[int, int]) -> Rect:
        """The halo strip the neighbour in direction ``d`` fills."""
        return Rect(*self._band(d[0], self.shape[0], inner=False), *self._band(d[1], self.shape[1], inner=False))

    def _band(self, step: int, n: int, inner: bool) -> tuple[int, int]:
        h = self.h
        if step == 0:
            return h, h + n
        if step < 0:
            return (h, 2 * h) if inner else (0, h)
        return (n, n + h) if inner else (n + h, n + 2 * h)

    def _global_interior(self) -> Rect:
        """The cells a step updates (the field's interior), in local coordinates."""
        (g0, _), (k0, _) = self.rows, self.cols
        rad, h = self.radius, self.h
        return Rect(rad - g0 + h, self.n0 - rad - g0 + h, rad - k0 + h, self.n1 - rad - k0 + h)

    def sweep(self, grow: int = 0) -> Sweep:
        """The regions of a sub-step whose update region reaches ``grow`` cells into the halo on
        the sides with a neighbour (0 on the last sub-step of a halo's period)."""
        t, rad = self.tile, self.radius
        up, down, left, right = (self.neighbour(d) is not None for d in EDGES)
        whole = Rect(t.r0 - grow * up, t.r1 + grow * down, t.c0 - grow * left, t.c1 + grow * right)
        whole = whole.clip(self._global_interior())
        inner = Rect(t.r0 + rad * up, t.r1 - rad * down, t.c0 + rad * left, t.c1 - rad * right).clip(whole)
        if inner.empty:
            return Sweep(whole, inner, (whole,) if not whole.empty else (), (True,) if not whole.empty else ())
        w, i = whole, inner
        corners = (Rect(w.r0, i.r0, w.c0, i.c0), Rect(w.r0, i.r0, i.c1, w.c1),
                   Rect(i.r1, w.r1, w.c0, i.c0), Rect(i.r1, w.r1, i.c1, w.c1))
        edges = (Rect(w.r0, i.r0, i.c0, i.c1), Rect(i.r1, w.r1, i.c0, i.c1),
                 Rect(i.r0, i.r1, w.c0, i.c0), Rect(i.r0, i.r1, i.c1, w.c1))
        pieces = [(p, True) for p in corners + edges[:2]] + [(p, False) for p in edges[2:]]
        pieces = [(p, row) for p, row in pieces if not p.empty]
        return Sweep(whole, inner, tuple(p for p, _ in pieces), tuple(row for _, row in pieces))

    @property
    def borders(self) -> tuple[int, int]:
        """(p, p1) of 004 eq. 5: border rows (of NX = tile width cells) and columns this tile has,
        R per neighbouring edge."""
        up, down, left, right = (self.neighbour(d) is not None for d in EDGES)
        return self.radius * (up + down), self.radius * (left + right)


def tiles(n0: int, n1: int, r: int, c: int, h: int = 1, radius: int = 1, weights=(None, None)) -> list[Tile]:
    """Every tile of the grid, in rank order (rank = pr·c + pc)."""
    return [Tile(n0, n1, r, c, pr, pc, h, radius, weights) for pr in range(r) for pc in range(c)]


def fits(n0: int, n1: int, r: int, c: int, h: int) -> str | None:
    """Why an r x c grid with halo ``h`` does not fit an n0 x n1 field (None: it fits): every tile
    must hold the h cells its neighbours keep in their halos."""
    if r < 1 or c < 1:
        return f"grid {r}x{c}: both sides must be at least 1"
    small = [(n, parts) for n, parts in ((n0, r), (n1, c)) if parts > 1 and n // parts < h]
    if small:
        n, parts = small[0]
        return (f"a {r}x{c} grid with halo {h} does not fit a {n0}x{n1} field: {n} cells over {parts} "
                f"processes leave tiles thinner than the halo")
    return None


__all__ = ["CORNERS", "EDGES", "Rect", "Sweep", "Tile", "border_cells", "fits", "interior_cells", "tiles"]
