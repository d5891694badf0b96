"""Move matrices between a root and a layout, and between two layouts (mpi4py buffer API).

All three are collective over ``comm``. Pieces are packed column-major with the Numba kernels of
``autotune.kernels.pack`` into one contiguous buffer and moved with Scatterv / Gatherv /
Alltoallv: no pickling on the data path. Any dtype numpy and MPI share works.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autotune.geometry.layout import Axis, Layout
from autotune.kernels.pack import as_index, put, take_flat

from . import workspace

if TYPE_CHECKING:
    from mpi4py import MPI

# Tag of the root <-> rank column-block moves (``scatter_columns`` / ``gather_columns``).
MOVE_TAG = 24576


def _mpi_type(dtype: np.dtype):
    from mpi4py.util.dtlib import from_numpy_dtype

    return from_numpy_dtype(np.dtype(dtype))


def _counts(layout: Layout, size: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.array([int(np.prod(layout.local_shape(r))) for r in range(size)], dtype=np.int64)
    return counts, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _check_fits(layout: Layout, comm: MPI.Comm) -> None:
    if layout.size > comm.size:
        raise ValueError(f"layout on {layout.grid[0]}x{layout.grid[1]} needs {layout.size} ranks, "
                         f"communicator has {comm.size}")


def scatter(a: np.ndarray | None, layout: Layout, comm: MPI.Comm, root: int = 0, piece: str = "F") -> np.ndarray:
    """Root's ``a`` (ignored elsewhere) -> this rank's local piece of ``layout``, in ``piece``
    order (a C-ordered ``a`` cut into C-ordered pieces is packed without transposing)."""
    _check_fits(layout, comm)
    dtype = np.dtype(comm.bcast(np.asarray(a).dtype.str if comm.rank == root else None, root=root))
    counts, displs = _counts(layout, comm.size)
    mtype = _mpi_type(dtype)
    send = None
    if comm.rank == root:
        if np.shape(a) != layout.shape:
            raise ValueError(f"matrix of shape {np.shape(a)} does not match layout {layout.shape}")
        buf = np.empty(int(counts.sum()), dtype=dtype)
        src = np.asarray(a) if piece == "F" else np.asarray(a).T     # row-major = column-major of a.T
        for r in range(comm.size):
            rows, cols = layout.local_indices(r)
            rows, cols = (rows, cols) if piece == "F" else (cols, rows)
            take_flat(src, as_index(rows), as_index(cols), buf, int(displs[r]))
        send = [buf, (counts, displs), mtype]
    recv = np.empty(int(counts[comm.rank]), dtype=dtype)
    comm.Scatterv(send, [recv, mtype], root=root)
    return recv.reshape(layout.local_shape(comm.rank), order=piece)


def gather(local: np.ndarray, layout: Layout, comm: MPI.Comm, root: int = 0, order: str = "C",
           piece: str = "F") -> np.ndarray | None:
    """This rank's piece -> the whole matrix on ``root`` (None elsewhere), in ``order``; the
    pieces travel in ``piece`` order (C for a C-ordered result: no transposing copy)."""
    _check_fits(layout, comm)
    counts, displs = _counts(layout, comm.size)
    mtype = _mpi_type(local.dtype)
    flat = np.asarray(local, order=piece).reshape(-1, order=piece) if local.size else np.empty(0, local.dtype)
    if comm.rank != root:
        comm.Gatherv([flat, mtype], None, root=root)
        return None
    buf = np.empty(int(counts.sum()), dtype=local.dtype)
    comm.Gatherv([flat, mtype], [buf, (counts, displs), mtype], root=root)
    out = np.empty(layout.shape, dtype=local.dtype, order=order)
    for r in range(comm.size):
        rows, cols = layout.local_indices(r)
        got = buf[displs[r]:displs[r] + counts[r]].reshape((rows.size, cols.size), order=piece)
        if piece == "F":
            put(out, as_index(rows), as_index(cols), got)
        else:
            put(out.T, as_index(cols), as_index(rows), got.T)
    return out


def _overlap(mine: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``mine`` and in ``theirs`` of the indices both hold (both ascending)."""
    _, pm, pt = np.intersect1d(mine, theirs, assume_unique=True, return_indices=True)
    return as_index(pm), as_index(pt)


def redistribute(local: np.ndarray, src: Layout, dst: Layout, comm: MPI.Comm, agreed: bool = False) -> np.ndarray:
    """This rank's piece of ``src`` -> its piece of ``dst`` (same global matrix), via Alltoallv.
    ``agreed``: the ranks agree on any error of their local preparation before the Alltoallv, so a
    rank that fails there raises the same error on every rank instead of leaving them waiting."""
    if not agreed:
        return _moved(local, *_prepare(local, src, dst, comm), dst, comm)
    from .collective import agree

    prepared, err = None, None
    try:
        prepared = _prepare(local, src, dst, comm)
    except Exception as exc:
        err = exc
    agree(comm, err)
    return _moved(local, *prepared, dst, comm)


def _prepare(local: np.ndarray, src: Layout, dst: Layout, comm: MPI.Comm):
    """The send buffer (packed) and the receive buffer's parts of one redistribution."""
    _check_fits(src, comm)
    _check_fits(dst, comm)
    if src.shape != dst.shape:
        raise ValueError(f"cannot redistribute {src.shape} into {dst.shape}")
    me, size = comm.rank, comm.size
    my_rows, my_cols = src.local_indices(me)
    new_rows, new_cols = dst.local_indices(me)
    send_parts, recv_parts = [], []
    for other in range(size):
        o_rows, o_cols = dst.local_indices(other)
        send_parts.append((_overlap(my_rows, o_rows)[0], _overlap(my_cols, o_cols)[0]))
        s_rows, s_cols = src.local_indices(other)
        recv_parts.append((_overlap(new_rows, s_rows)[0], _overlap(new_cols, s_cols)[0]))
    keep = (send_parts[me], recv_parts[me])        # what stays on this rank is copied, not sent
    empty = np.empty(0, np.int64)
    send_parts[me] = recv_parts[me] = (empty, empty)
    scounts = np.array([r.size * c.size for r, c in send_parts], dtype=np.int64)
    rcounts = np.array([r.size * c.size for r, c in recv_parts], dtype=np.int64)
    sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(np.int64)
    rdispl = np.concatenate([[0], np.cumsum(rcounts)[:-1]]).astype(np.int64)
    sbuf = np.empty(int(scounts.sum()), dtype=local.dtype)
    for d, (r, c) in enumerate(send_parts):
        take_flat(local, r, c, sbuf, int(sdispl[d]))
    rbuf = np.empty(int(rcounts.sum()), dtype=local.dtype)
    return sbuf, (scounts, sdispl), rbuf, (rcounts, rdispl), recv_parts, keep


def _moved(local: np.ndarray, sbuf, sends, rbuf, recvs, recv_parts, keep, dst: Layout, comm: MPI.Comm) -> np.ndarray:
    (scounts, sdispl), (rcounts, rdispl) = sends, recvs
    me = comm.rank
    mtype = _mpi_type(local.dtype)
    comm.Alltoallv([sbuf, (scounts, sdispl), mtype], [rbuf, (rcounts, rdispl), mtype])
    out = dst.empty_local(me, local.dtype)
    (sr, sc), (rr, rc) = keep
    if sr.size and sc.size:
        _copy(local, sr, sc, out, rr, rc)
    for s, (r, c) in enumerate(recv_parts):
        if r.size and c.size:
            put(out, r, c, rbuf[rdispl[s]:rdispl[s] + rcounts[s]].reshape((r.size, c.size), order="F"))
    return out


def _span(idx: np.ndarray) -> slice | np.ndarray:
    """``idx`` as a slice when it is a run of consecutive indices (block layouts), else itself."""
    if idx.size and idx[-1] - idx[0] == idx.size - 1:
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _copy(src: np.ndarray, sr, sc, dst: np.ndarray, dr, dc) -> None:
    """``dst[dr, dc] = src[sr, sc]`` (index arrays; one slice copy where all four are runs)."""
    spans = [_span(x) for x in (sr, sc, dr, dc)]
    if all(isinstance(x, slice) for x in spans):
        dst[spans[2], spans[3]] = src[spans[0], spans[1]]
    else:
        put(dst, dr, dc, np.asfortranarray(src[np.ix_(sr, sc)]))


def column_blocks(cols: Axis):
    """(owner, global start, width, local start) of each block of the cyclic axis ``cols``."""
    b = cols.block
    for J in range(-(-cols.n // b)):
        j0 = J * b
        yield int(cols.block_owner(J)), j0, min(b, cols.n - j0), int(cols.local_index(j0))


def _flat(x: np.ndarray) -> np.ndarray:
    """A Fortran-contiguous array as a 1-D view (an MPI buffer without a copy)."""
    assert x.flags.f_contiguous, "block moves need contiguous blocks"
    return x.reshape(-1, order="F")


def scatter_columns(src: np.ndarray | None, rows: int, cols: Axis, comm: MPI.Comm, root: int = 0,
                    tag: int = MOVE_TAG) -> np.ndarray:
    """This rank's column-cyclic piece (``cols``: blocks over ranks 0..cols.parts-1, Fortran order,
    workspace memory) of the root's Fortran-ordered float64 rows x cols ``src``. Each column block is
    contiguous and goes out straight from ``src``, unpacked. The root posts every send first, then
    copies its own blocks while the others pull theirs (single-copy transports: the receiver
    copies). The comm probe times this very function (``colscatter_cold``)."""
    from mpi4py import MPI

    me = comm.rank
    local = workspace.empty("a", (rows, cols.count(me)), order="F")
    blocks = list(column_blocks(cols))
    if me == root:
        reqs = [comm.Isend([_flat(src[:, j0:j0 + w]), MPI.DOUBLE], q, tag)
                for q, j0, w, _ in blocks if q != me]
        for q, j0, w, l0 in blocks:
            if q == me:
                local[:, l0:l0 + w] = src[:, j0:j0 + w]
    else:
        reqs = [comm.Irecv([_flat(local[:, l0:l0 + w]), MPI.DOUBLE], root, tag)
                for q, _, w, l0 in blocks if q == me]
    MPI.Request.Waitall(reqs)
    return local


def gather_columns(local: np.ndarray, rows: int, cols: Axis, comm: MPI.Comm, root: int = 0,
                   tag: int = MOVE_TAG) -> np.ndarray | None:
    """The reverse of ``scatter_columns``: the whole Fortran-ordered rows x cols matrix (new
    memory) on the root, None elsewhere."""
    from mpi4py import MPI

    me = comm.rank
    out = np.empty((rows, cols.n), order="F") if me == root else None
    reqs = []
    for q, j0, w, l0 in column_blocks(cols):
        if me == root:
            if q == me:
                out[:, j0:j0 + w] = local[:, l0:l0 + w]
            else:
                reqs.append(comm.Irecv([_flat(out[:, j0:j0 + w]), MPI.DOUBLE], q, tag))
        elif q == me:
            reqs.append(comm.Isend([_flat(local[:, l0:l0 + w]), MPI.DOUBLE], root, tag))
    MPI.Request.Waitall(reqs)
    return out


@dataclass
class DistMatrix:
    """A matrix spread over ``comm`` by ``layout``: this rank's piece plus where the rest lives."""

    local: np.ndarray
    layout: Layout
    comm: object

    @classmethod
    def from_root(cls, a: np.ndarray | None, layout: Layout, comm: MPI.Comm, root: int = 0) -> DistMatrix:
        return cls(scatter(a, layout, comm, root), layout, comm)

    def to_root(self, root: int = 0, order: str = "C") -> np.ndarray | None:
        return gather(self.local, self.layout, self.comm, root, order)

    def redistribute(self, layout: Layout) -> DistMatrix:
        return DistMatrix(redistribute(self.local, self.layout, layout, self.comm), layout, self.comm)

    @property
    def shape(self) -> tuple[int, int]:
        return self.layout.shape

    @property
    def dtype(self) -> np.dtype:
        return self.local.dtype
