"""The stencil family over MPI: every grid of P = 1..4 ranks, every schedule and halo width, odd
sizes, radius 1 and 2, the user-kernel hook and the field kept distributed between calls all equal
the single-process numpy program; the tuned plan; bad input raises alike on every rank."""
from __future__ import annotations

import pytest
from mpi_helpers import run_mpi_variants

EQUAL = """
import numpy as np
from mpi4py import MPI
from numba import njit
from autotune import stencil
from autotune.kernels.stencil import heat_weights, reference
from autotune.core.plans import Plan, grids

@njit(cache=True)
def laplace(src, dst, r0, r1, c0, c1):
    for i in range(r0, r1):
        for j in range(c0, c1):
            dst[i, j] = 0.25 * (src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1])

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
rng = np.random.default_rng(3)
u = rng.random((23, 31))
cases = [(heat_weights(0.2), None, 1), (rng.random((3, 3)) / 9, None, 1), (rng.random((5, 5)) / 25, None, 2),
         (None, laplace, 1)]
lap = np.array([[0, 0.25, 0], [0.25, 0, 0.25], [0, 0.25, 0]])
checked = 0
for weights, kernel, rad in cases:
    ref = {s: reference(u, s, lap if kernel is not None else weights) for s in (0, 1, 3, 5)}
    for p in range(2, P + 1):
        for r, c in grids(p):
            for alg in ("blocking", "overlap", "border_first"):
                for h in ((rad, 2 * rad) if alg != "border_first" else (rad,)):
                    for steps in ((1, 3) if h == rad else (3, 5)):
                        # a deep halo's sub-steps: one call each, or fused in one wavefront
                        backend = "numba-wavefront" if h != rad and steps == 5 else "numba-stencil"
                        plan = Plan(alg, p, r, c, h, backend=backend)
                        out = stencil.apply(u if me == 0 else None, steps, weights, kernel=kernel,
                                            radius=rad if kernel is not None else None, comm=comm, config=plan)
                        if me == 0:
                            np.testing.assert_allclose(out, ref[steps], rtol=1e-12, atol=1e-14, err_msg=str(plan))
                            checked += 1
                        else:
                            assert out is None
# the numpy kernel backend on a plan, a one-process plan, and a root other than 0
speeds = tuple(1.0 + i for i in range(P))      # tiles cut by the ranks' speeds (HoHe)
for plan, root in ((Plan("overlap", P, 1, P, 1, backend="numpy-stencil"), 0), (Plan("local", 1), P - 1),
                   (Plan("blocking", P, P, 1, 2, backend="numba-stencil"), P - 1),
                   (Plan("overlap", P, P, 1, 1, backend="numba-stencil", weights=speeds), 0)):
    out = stencil.heat2d(u if me == root else None, 5, 0.2, comm=comm, config=plan, root=root)
    if me == root:
        np.testing.assert_allclose(out, reference(u, 5, heat_weights(0.2)), rtol=1e-12)
# kept distributed between calls, gathered on request
for plan in (Plan("overlap", P, P, 1, 1, backend="numba-stencil"), Plan("local", 1)):
    with stencil.distribute(u if me == 0 else None, heat_weights(0.2), comm=comm, config=plan) as field:
        field.advance(2)
        first = field.gather()
        field.advance(3)
        last = field.gather()
    if me == 0:
        np.testing.assert_allclose(first, reference(u, 2, heat_weights(0.2)), rtol=1e-12)
        np.testing.assert_allclose(last, reference(u, 5, heat_weights(0.2)), rtol=1e-12)
if me == 0:
    print("CHECKED", checked)
print("OK", me)
"""


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_every_grid_schedule_and_halo_equals_numpy(launched, nprocs):
    proc = launched.check(f"equal np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr


TUNED = """
import numpy as np
from mpi4py import MPI
from autotune import stencil
from autotune.kernels.stencil import heat_weights, reference
from autotune.entry.stencil import StencilArgs, agreed_plan

comm = MPI.COMM_WORLD
me = comm.rank
u = np.random.default_rng(4).random((301, 257))
out = stencil.heat2d(u if me == 0 else None, 20, 0.1, comm=comm, explain=me == 0)
if me == 0:
    np.testing.assert_allclose(out, reference(u, 20, heat_weights(0.1)), rtol=1e-12)
planned = agreed_plan(u if me == 0 else None, 1000, StencilArgs(heat_weights(0.1)), comm, 0, True, None, False).plan
with stencil.distribute(u if me == 0 else None, heat_weights(0.1), comm=comm, steps=1000) as field:
    assert field.plan == planned, (field.plan, planned)     # planned for the steps it is kept for
    field.advance(10)
    got = field.gather()
if me == 0:
    np.testing.assert_allclose(got, reference(u, 10, heat_weights(0.1)), rtol=1e-12)
print("OK", me)
"""


@pytest.mark.parametrize("nprocs", [2])
def test_tuned_plan_equals_numpy(launched, nprocs):
    proc = launched.check(f"tuned np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr
    assert "chose" in proc.stdout and "efficiency" in proc.stdout and "s measured on" in proc.stdout



ERRORS = """
import numpy as np
from mpi4py import MPI
from autotune import stencil
from autotune.core.plans import Plan

comm = MPI.COMM_WORLD
P, me = comm.size, comm.rank
good = np.ones((9, 9))
cases = [
    (lambda: stencil.heat2d(np.ones(9) if me == 0 else None, 2, 0.1, comm=comm), "must be 2-D"),
    (lambda: stencil.heat2d(np.full((9, 9), np.nan) if me == 0 else None, 2, 0.1, comm=comm), "infs or NaNs"),
    (lambda: stencil.heat2d(good if me == 0 else None, -1, 0.1, comm=comm), "non-negative"),
    (lambda: stencil.heat2d(good if me == 0 else None, 3 if me else 2, 0.1, comm=comm), "different arguments"),
    (lambda: stencil.heat2d(good if me == 0 else np.ones((9, 8)), 2, 0.1, comm=comm), "different arguments"),
    (lambda: stencil.heat2d(good if me == 0 else None, 2, 0.1, comm=comm,
                            config=Plan("blocking", P, P, 1, 4, backend="numba-stencil")), "does not fit"),
    (lambda: stencil.heat2d(good if me == 0 else None, 2, 0.1, comm=comm,
                            config=Plan("border_first", P, 1, P, 2, backend="numba-stencil")), "border_first"),
    (lambda: stencil.heat2d(good if me == 0 else None, 2, 0.1, comm=comm, root=P), "root"),
]
for call, match in cases:
    try:
        call()
    except ValueError as exc:
        assert match in str(exc), (match, str(exc))
    else:
        raise AssertionError(match)
# still in step: a good call after the errors
out = stencil.heat2d(good if me == 0 else None, 2, 0.1, comm=comm)
assert (out is not None) == (me == 0)
print("OK", me)
"""


@pytest.fixture(scope="module")
def launched(tiny_db, tmp_path_factory):
    """EQUAL at 1, 2 and 4 ranks, TUNED (reading the tiny database) at 2 and ERRORS at 3, in one
    launch at -n 4, each on that many of its ranks."""
    return run_mpi_variants([*((f"equal np{p}", EQUAL, p) for p in (1, 2, 4)),
                             ("tuned np2", TUNED, 2, [], {"AUTOTUNE_DB": str(tiny_db)}), ("errors np3", ERRORS, 3)],
                            tmp_path_factory.mktemp("stencil"))


@pytest.mark.parametrize("nprocs", [3])
def test_bad_input_raises_alike_on_every_rank(launched, nprocs):
    proc = launched.check(f"errors np{nprocs}")
    assert proc.stdout.count("OK") == nprocs, proc.stdout + proc.stderr
