"""Layouts own every element exactly once; scatter, gather and redistribution move them exactly."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi_helpers import run_mpi_variants

from autotune.geometry.layout import Axis, block_2d, block_cyclic, cycle, grid_weights, row_block


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 300), parts=st.integers(1, 7), block=st.one_of(st.none(), st.integers(1, 40)),
       speeds=st.one_of(st.none(), st.lists(st.floats(0.05, 8.0), min_size=7, max_size=7)))
def test_axis_partitions_the_indices(n, parts, block, speeds):
    weights = None if speeds is None else tuple(speeds[:parts])
    ax = Axis(n, parts, block, weights)
    owned = [ax.indices(p) for p in range(parts)]
    assert [len(o) for o in owned] == [ax.count(p) for p in range(parts)]
    allidx = np.concatenate(owned)
    np.testing.assert_array_equal(np.sort(allidx), np.arange(n))
    for p, idx in enumerate(owned):
        assert np.all(np.diff(idx) > 0)
        np.testing.assert_array_equal(ax.owner(idx), p)
        np.testing.assert_array_equal(ax.local_index(idx), np.arange(idx.size))
    if block is None and n and weights is None:
        sizes = [len(o) for o in owned]
        assert max(sizes) - min(sizes) <= 1
    if block is not None:      # the factorizations' view: first local index of each block and beyond
        for p, idx in enumerate(owned):
            for J in range(-(-n // block) + 2):
                assert ax.first_local(p, J) == int((idx < J * block).sum())


def test_weighted_cyclic_axis_deals_blocks_by_speed():
    """Blocks per cycle follow the speeds (the fastest gets CYCLE_RESOLUTION, reduced), spread over
    the cycle; equal speeds give ScaLAPACK's layout; grid weights are the rows' and columns' sums."""
    assert cycle((1.0, 0.5)) == (2, 1) and cycle((1.0, 0.7, 0.2)) == (4, 3, 1) and cycle((3, 3)) == (1, 1)
    ax = Axis(6000, 2, 100, (1.0, 0.5))
    np.testing.assert_array_equal(ax.pattern, [0, 1, 0])
    assert (ax.count(0), ax.count(1)) == (4000, 2000)
    np.testing.assert_array_equal(Axis(100, 3, 7, (2, 2, 2)).indices(1), Axis(100, 3, 7).indices(1))
    np.testing.assert_array_equal(Axis(40, 3, 2, (1, 0.25, 0.5)).pattern, [0, 2, 0, 1, 0, 2, 0])
    assert grid_weights(None, 1, 2) is None
    assert grid_weights((1.0, 0.5), 1, 2) == (None, (1.0, 0.5))
    assert grid_weights((1.0, 1.0, 0.5, 0.5), 2, 2) == ((2.0, 1.0), None)
    lay = block_cyclic(10, 10, 1, 2, 2, weights=grid_weights((1.0, 0.5), 1, 2))
    assert lay.local_shape(0) == (10, 6) and "weighted" in lay.describe()


def test_block_cyclic_matches_scalapack_numroc():
    # numroc(n=10, nb=3, iproc, isrcproc=0, nprocs=3): 4, 3, 3 ; (n=11): 5, 3, 3
    assert [Axis(10, 3, 3).count(p) for p in range(3)] == [4, 3, 3]
    assert [Axis(11, 3, 3).count(p) for p in range(3)] == [5, 3, 3]
    np.testing.assert_array_equal(Axis(10, 3, 3).indices(0), [0, 1, 2, 9])


def test_layout_ranks_outside_the_grid_own_nothing():
    lay = block_cyclic(10, 7, 2, 1, 3)
    assert lay.size == 2 and lay.coords(2) is None and lay.local_shape(3) == (0, 0)
    assert row_block(10, 4, 3).local_shape(0) == (4, 4)
    assert block_2d(9, 9, 2, 2).local_shape(3) == (4, 4)
    with pytest.raises(ValueError):
        Axis(5, 0)


MOVE = """
import numpy as np
from mpi4py import MPI
from autotune.distributed import DistMatrix, block_2d, block_cyclic, movement, row_block
comm = MPI.COMM_WORLD
P = comm.size
rng = np.random.default_rng(0)
shapes = [(1, 1), (7, 5), (13, 29), (64, 3), (0, 4)]
for m, n in shapes:
    for dtype in (np.float64, np.float32, np.complex128):
        a = rng.standard_normal((m, n)) + (1j * rng.standard_normal((m, n)) if dtype == np.complex128 else 0)
        a = a.astype(dtype)
        a = np.asfortranarray(a) if (m + n) % 2 else a
        layouts = [row_block(m, n, P), block_2d(m, n, 1, P), block_cyclic(m, n, P, 1, 2),
                   block_cyclic(m, n, 1, P, 3, 2)]
        if P == 4:
            layouts += [block_2d(m, n, 2, 2), block_cyclic(m, n, 2, 2, 3, 5)]
        if P >= 3:
            layouts += [block_cyclic(m, n, 2, 1, 4)]          # rank 2.. hold nothing
        dm = None
        for lay in layouts:
            d = DistMatrix.from_root(a if comm.rank == 0 else None, lay, comm)
            assert d.local.shape == lay.local_shape(comm.rank) and d.local.flags.f_contiguous
            back = d.to_root()
            if comm.rank == 0:
                np.testing.assert_array_equal(back, a)
            if dm is not None:
                moved = dm.redistribute(lay)
                np.testing.assert_array_equal(moved.local, d.local)
            dm = d
            piece = movement.scatter(a if comm.rank == 0 else None, lay, comm, piece="C")   # C-ordered pieces
            assert piece.flags.c_contiguous
            np.testing.assert_array_equal(piece, d.local)
            back = movement.gather(piece, lay, comm, piece="C")
            if comm.rank == 0:
                np.testing.assert_array_equal(back, a)
print("OK", comm.rank)
"""


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_scatter_gather_redistribute(launched, nprocs):
    out = launched.check(f"move np{nprocs}")
    assert out.stdout.count("OK") == nprocs


AGREE = """
import numpy as np
from mpi4py import MPI
from autotune.distributed.collective import agree
comm = MPI.COMM_WORLD
err = ValueError("bad shape here") if comm.rank == comm.size - 1 else None
try:
    agree(comm, err)
except ValueError as exc:
    print("RAISED", comm.rank, exc)
"""


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """MOVE at every world size and AGREE at 3, in one launch at -n 4, each on that many of its ranks."""
    return run_mpi_variants([*((f"move np{p}", MOVE, p) for p in (1, 2, 3, 4)), ("agree", AGREE, 3)],
                            tmp_path_factory.mktemp("layout"))


def test_ranks_agree_on_errors(launched):
    out = launched.check("agree")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RAISED")]
    assert len(lines) == 3 and all("rank 2: bad shape here" in ln for ln in lines)


# -- workspace: buffers reused between distributed calls --------------------------------------------

def test_workspace_reuses_grows_and_releases():
    from autotune.distributed import workspace

    workspace.release()
    a = workspace.empty("t", (3, 4), order="F")
    assert a.shape == (3, 4) and a.flags.f_contiguous and a.ctypes.data % 64 == 0
    b = workspace.empty("t", 10)                       # fits: the same memory
    assert b.ctypes.data == a.ctypes.data and b.shape == (10,)
    c = workspace.empty("t", (5, 5))                   # grows
    assert c.size == 25 and workspace.held_bytes() == 25 * 8
    d = workspace.empty("u", 0)
    assert d.shape == (0,) and workspace.held_bytes() == 26 * 8
    workspace.release()
    assert workspace.held_bytes() == 0


def test_huge_empty_is_a_float64_array_on_a_huge_page_boundary():
    from autotune.distributed import workspace

    x = workspace.huge_empty(300_001)
    assert x.dtype == np.float64 and x.shape == (300_001,) and x.flags.c_contiguous and x.flags.writeable
    assert x.ctypes.data % workspace.HUGE_PAGE == 0
    x[:] = 2.0                                   # all of it is ours
    assert x.sum() == 600_002.0
    assert workspace.huge_empty(0).shape == (1,)


def test_workspace_backs_message_sized_buffers_with_huge_pages():
    from autotune.distributed import workspace

    workspace.release()
    big = workspace.empty("big", (workspace.HUGE_MIN_BYTES // 8, 2), order="F")
    small = workspace.empty("small", workspace.HUGE_MIN_BYTES // 8 - 1)
    assert big.ctypes.data % workspace.HUGE_PAGE == 0 and big.flags.f_contiguous
    assert small.ctypes.data % 64 == 0 and small.nbytes < workspace.HUGE_MIN_BYTES
    workspace.release()


def test_probe_message_buffers_are_made_like_the_workspace():
    from autotune.install_probe.comm_ops import Buffers

    from autotune.distributed import workspace

    bufs = Buffers(3 * workspace.HUGE_PAGE + 5)
    for buf in (bufs.send, bufs.recv):
        assert buf.dtype == np.uint8 and buf.size == bufs.n and buf.ctypes.data % workspace.HUGE_PAGE == 0
        assert buf.min() == buf.max() == 1       # touched: no page faults in the timings


def test_workspace_limit_gives_fresh_memory():
    from autotune.distributed import workspace
    from autotune.settings import options

    workspace.release()
    with options(workspace_bytes=100):
        small = workspace.empty("s", 10)                # 80 bytes: kept
        big = workspace.empty("b", 10)                  # would pass 100: fresh, not kept
        assert workspace.held_bytes() == 80
        assert workspace.empty("b", 10).ctypes.data != big.ctypes.data
        assert workspace.empty("s", 10).ctypes.data == small.ctypes.data
    with pytest.raises(ValueError, match="workspace_bytes"):
        with options(workspace_bytes=-1):
            pass
    workspace.release()


def test_weighted_balanced_axis():
    """HoHe bands: sizes proportional to the weights (largest remainders), owner and local index
    consistent with each part's indices."""
    import numpy as np

    from autotune.core.plans import Plan
    from autotune.geometry.layout import Axis

    for n, w in ((10, (1, 0.45, 1)), (7, (3.0, 1.0)), (1000, (1, 0.5, 0.25, 2)), (0, (1, 2)), (3, (1, 1, 1, 5))):
        ax = Axis(n, len(w), weights=w)
        counts = [ax.count(i) for i in range(len(w))]
        assert sum(counts) == n
        assert all(abs(c - n * x / sum(w)) < 1 for c, x in zip(counts, w, strict=True))
        for part in range(len(w)):
            idx = ax.indices(part)
            assert (ax.owner(idx) == part).all() and (ax.local_index(idx) == np.arange(len(idx))).all()
    for bad in (dict(weights=(1.0,)), dict(weights=(1.0, -1.0)), dict(block=4, weights=(1.0, float("nan")))):
        with pytest.raises(ValueError):
            Axis(10, 2, **bad)
    with pytest.raises(ValueError, match="bsr, cholesky, lu, gesv, blocking, overlap, border_first only"):
        Plan("summa", 2, 1, 2, b=4, weights=(1.0, 2.0))
    assert "w=1,0.5" in str(Plan("bsr", 2, 2, 1, weights=(1, 0.5)))
