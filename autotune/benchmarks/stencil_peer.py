"""``autotune bench stencil``'s peer part: the heat step against Devito's, side by side.

Devito (an optional extra, ``pip install devito``: never a dependency of the package) generates
a C loop for the same update, u + alpha (N + S + W + E - 4u) in float64 with the outer ring held
(``subdomain=grid.interior``, ``space_order=1``), and runs it over MPI in each of its modes
(``configuration['mpi']``: basic, diag, full; full overlaps the halo exchange with the interior).
Both sides keep the field distributed (``autotune.stencil.distribute`` + ``advance``; Devito's
``TimeFunction`` on its ``Grid``), compile before timing (Numba's warm-up; Devito's ``Operator``
built and applied once), start from the same field and are checked against each other. Each
field side runs on one rank and on all of them (sub-communicators of one launch), interleaved
round by round: medians, spread, and ours over Devito's fastest mode.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autotune.benchmarks._common import median_spread, timed_collective
from autotune.benchmarks.calls import HEAT_ALPHA
from autotune.distributed.collective import quiet_barrier
from autotune.kernels.stencil import heat_weights
from autotune.stencil import distribute, heat2d

if TYPE_CHECKING:
    from mpi4py import MPI

MODES = ("basic", "diag", "full")


def devito_version() -> str | None:
    """Devito's version, None when it is not installed."""
    try:
        import devito
    except ImportError:
        return None
    return str(devito.__version__)


class DevitoHeat:
    """Devito's heat step on an n x n float64 field over ``comm`` in one MPI mode (collective)."""

    def __init__(self, comm: MPI.Comm, n: int, mode: str, field: np.ndarray):
        from devito import Eq, Grid, Operator, TimeFunction, configuration

        configuration["mpi"] = mode
        configuration["log-level"] = "ERROR"
        self.grid = Grid(shape=(n, n), extent=(1.0, 1.0), dtype=np.float64, comm=comm)
        x, y = self.grid.dimensions
        t = self.grid.stepping_dim
        self.u = TimeFunction(name="u", grid=self.grid, space_order=1)
        u, a = self.u, HEAT_ALPHA
        step = u[t, x, y] + a * (u[t, x + 1, y] + u[t, x - 1, y] + u[t, x, y + 1] + u[t, x, y - 1] - 4 * u[t, x, y])
        self.op = Operator([Eq(u[t + 1, x, y], step, subdomain=self.grid.interior)])
        self.field = field
        self.reset()
        self.op.apply(time_M=0)              # compiles (and loads) the generated C once
        self.reset()

    def reset(self) -> None:
        """Both time buffers hold the starting field (the held ring is read from either)."""
        self.u.data[0] = self.field
        self.u.data[1] = self.field

    def advance(self, steps: int) -> None:
        self.op.apply(time_M=steps - 1)
        self.steps = steps

    def result(self) -> np.ndarray:
        """This rank's owned part of the field after the last ``advance`` (a local array)."""
        return np.asarray(self.u.data[self.steps % 2])


def _side(comm: MPI.Comm, n: int, steps: int, rounds: int, modes) -> dict:
    """One field side on ``comm``: our chosen plan and every Devito mode, interleaved."""
    field = np.random.default_rng(n).random((n, n))
    ours = distribute(field if comm.rank == 0 else None, heat_weights(HEAT_ALPHA), comm=comm, steps=steps)
    ours.advance(1)                                           # compiled and warm
    peers = {m: DevitoHeat(comm, n, m, field) for m in modes}
    times: dict[str, list[float]] = {"autotune": [], **{m: [] for m in modes}}
    for _ in range(rounds):
        times["autotune"].append(timed_collective(comm, lambda: ours.advance(steps)))
        for m, peer in peers.items():
            peer.reset()
            times[m].append(timed_collective(comm, lambda peer=peer: peer.advance(steps)))
    plan = str(ours.plan)
    ours.free()
    return {"plan": plan, "times": {k: median_spread(v) for k, v in times.items()},
            "agrees": _agree(comm, field, steps, peers[modes[0]])}


def _agree(comm: MPI.Comm, field: np.ndarray, steps: int, peer: DevitoHeat) -> bool:
    """Devito's field after ``steps`` (its last run) sums to what ours gives, on every rank."""
    got = heat2d(field if comm.rank == 0 else None, steps, HEAT_ALPHA, comm=comm)
    total = comm.allreduce(float(peer.result().sum()))
    want = comm.bcast(float(got.sum()) if comm.rank == 0 else None, root=0)
    return bool(abs(total - want) <= 1e-9 * abs(want))


def compare(comm: MPI.Comm, fields: list[int], steps: int, rounds: int, modes=MODES) -> dict:
    """Every field side on one rank and on all ranks: the times, and ours over Devito's best mode."""
    version = devito_version()
    if version is None:
        return {"devito": None, "note": "Devito is not installed (pip install devito): no peer timed"}
    out: dict = {"devito": version, "steps": steps, "rounds": rounds, "rows": []}
    counts = sorted({1, comm.size})
    for n in fields:
        for p in counts:
            sub = comm.Split(0 if comm.rank < p else 1, comm.rank)
            row = _side(sub, n, steps, rounds, modes) if comm.rank < p else None
            sub.Free()
            quiet_barrier(comm)             # the ranks left out wait without taking a core from the timed ones
            row = comm.bcast(row, root=0)
            best = min(modes, key=lambda m: row["times"][m]["median"])
            row.update({"field": n, "P": p, "devito_best": best,
                        "ours_over_best": row["times"][best]["median"] / row["times"]["autotune"]["median"]})
            out["rows"].append(row)
            if comm.rank == 0:
                _print(row)
    out["p_scaling"] = _scaling(out["rows"], counts)
    return out


def _scaling(rows: list[dict], counts: list[int]) -> list[dict]:
    """Per field side: whether the largest P beat P = 1, on each side."""
    out = []
    for n in sorted({r["field"] for r in rows}):
        by_p = {r["P"]: r for r in rows if r["field"] == n}
        if len(by_p) < 2:
            continue
        one, many = by_p[counts[0]], by_p[counts[-1]]
        out.append({"field": n, "ours": one["times"]["autotune"]["median"] / many["times"]["autotune"]["median"],
                    "devito": (one["times"][one["devito_best"]]["median"]
                               / many["times"][many["devito_best"]]["median"])})
    return out


def _print(row: dict) -> None:
    t = row["times"]
    peers = ", ".join(f"{m} {t[m]['median']:.3f} s ({t[m]['spread']:.0%})" for m in MODES if m in t)
    print(f"peer field {row['field']} P={row['P']}: autotune {t['autotune']['median']:.3f} s "
          f"({t['autotune']['spread']:.0%}, {row['plan']}); devito {peers}; "
          f"x{row['ours_over_best']:.2f} over devito {row['devito_best']}"
          f"{'' if row['agrees'] else ' (RESULTS DIFFER)'}", flush=True)


__all__ = ["MODES", "DevitoHeat", "compare", "devito_version"]
