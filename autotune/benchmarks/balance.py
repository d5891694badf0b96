"""``autotune bench balance`` (under ``autotune testbed mpiexec P``, or ``mpiexec -n P``): a stencil
field balancing itself while the hosts' CPU shares change (002), side by side with static splits.

Each round runs every configuration on the same field for ``--steps`` steps (interleaved, rounds
rotated), recording per chunk of ``--chunk`` steps the root's wall time, each rank's compute time
and the row shares:

- ``equal``: equal rows, never moved;
- ``probe``: rows by each host's sweep speed measured alone before the runs (as the install-time
  host speeds: stale once a quota changes);
- ``oracle``: for each quota phase, the row split that ran fastest in place (on two ranks: rank
  0's share 0.40, 0.45, .., 0.85, ``--calibrate`` steps each; on more, rows by each rank's
  measured rate), switched the moment a quota changes: the statically balanced rate for the
  current quotas;
- ``SMA/LWMA/EMA x fixed/growing``: ``balance=`` policies (window ``--window``); ``ema-iteration``
  weighs whole-step times (002 §4.3.5's failure).

``--quota STEP:HOST=PCT`` changes a testbed host's CPU share at that step of every run (step 0:
the share each run starts with; rank 0 changes it, and restores the testbed's shares at the end).
Reported: each configuration's median time and spread, speed-up over ``equal``, final shares
against the measured speed ratio, compute imbalance (max/mean) over the last half, the moves made,
and after each quota change the windows until the chunk rate is within 15% of ``oracle``'s.
``--plot`` draws shares and imbalance over the steps.
"""
from __future__ import annotations

import argparse
import socket
import time
from typing import TYPE_CHECKING

import numpy as np

from autotune import testbed
from autotune.benchmarks._common import mpi_world, output_problem, quartiles, report_root
from autotune.benchmarks.calls import HEAT_ALPHA
from autotune.benchmarks.quotas import parse_quota, restored, set_quotas
from autotune.cli.common import add_db_argument, error
from autotune.core.plans import Plan
from autotune.distributed.balance import busy, step_overhead
from autotune.distributed.plan import Mark, Phases
from autotune.feedback.balance import AVERAGES, INTERVALS, Policy, shares
from autotune.geometry.halo import Rect
from autotune.kernels.stencil import Sweeper, heat_weights
from autotune.settings import options
from autotune.stencil import distribute

if TYPE_CHECKING:
    from mpi4py import MPI

HELP = "a stencil balancing itself while CPU shares change, against static splits (under testbed mpiexec)"
STATIC = ("equal", "probe", "oracle")
ADAPTIVE = tuple(f"{a}-{i}" for a in AVERAGES for i in INTERVALS) + ("ema-iteration",)
RECOVERED = 0.85          # a chunk's rate over oracle's that counts as recovered
ORACLE_SPLITS = tuple(np.round(np.arange(0.40, 0.86, 0.05), 2))   # rank 0's row shares the oracle tries


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--field", type=int, default=1536, help="field side")
    p.add_argument("--steps", type=int, default=600, help="steps per run")
    p.add_argument("--chunk", type=int, default=10, help="steps per recorded sample")
    p.add_argument("--window", type=int, default=10, help="moving-average window of the adaptive runs")
    p.add_argument("--schedule", default="overlap", choices=["blocking", "overlap"])
    p.add_argument("--quota", nargs="*", default=[], metavar="STEP:HOST=PCT",
                   help="testbed CPU share changes during each run (e.g. 0:h1=50 300:h1=30)")
    p.add_argument("--configs", nargs="+", default=list(STATIC + ADAPTIVE), type=_config, metavar="CONFIG",
                   help=f"of {', '.join(STATIC + ADAPTIVE)}, or split:W0,W1,... (rows fixed in proportion to the "
                        "weights)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians over them)")
    p.add_argument("--calibrate", type=int, default=30, help="steps per split of the in-place speed measurement")
    add_db_argument(p, "database path (link costs of the gate)")
    p.add_argument("--out", metavar="FILE.json", help="write the results here (the root)")
    p.add_argument("--plot", metavar="FILE.png", help="draw shares and imbalance over the steps here")


def _config(text: str) -> str:
    if text in STATIC + ADAPTIVE or _split(text) is not None:
        return text
    raise argparse.ArgumentTypeError(f"unknown configuration {text!r}")


def _split(name: str) -> tuple[float, ...] | None:
    """The weights of a ``split:W0,W1,...`` configuration (None for another name)."""
    if not name.startswith("split:"):
        return None
    try:
        w = tuple(float(x) for x in name[6:].split(","))
    except ValueError:
        return None
    return w if w and all(x > 0 for x in w) else None


def run(args) -> int:
    """Time collectively; the root prints the report (and writes --out, --plot)."""
    try:
        events = parse_quota(args.quota)
    except ValueError as exc:
        return error("bench balance", str(exc), 2)
    problem = output_problem("--out", args.out) or output_problem("--plot", args.plot) or (
        "" if args.field >= 16 and args.steps >= 1 and args.chunk >= 1 and args.rounds >= 1 and args.window >= 1
        else "--field (>= 16), --steps, --chunk, --window, --rounds must be positive")
    comm, status = mpi_world("balance", problem)
    if comm is None:
        return status
    if events and testbed.saved() is None:          # every rank reads the same state file
        return error("bench balance", "--quota needs a testbed (autotune testbed up)", 2)
    with options(db=args.db):
        report = compare(comm, args, events)
    report_root(comm, report, args.out)
    if comm.rank == 0 and args.plot:
        plot(report, args.plot)
    return 0


# ------------------------------------------------------------------------------ quotas and speeds

def _phases(events) -> list[dict[str, int | None]]:
    """The quota of every changed host in each phase: before any event, after each step's events."""
    state: dict[str, int | None] = {}
    out = []
    for step in sorted({e[0] for e in events} | {0}):
        state = {**state, **{h: p for s, h, p in events if s == step}}
        out.append(dict(state))
    return out


def measure_speeds(comm: MPI.Comm, rows: int, cols: int, seconds: float = 0.4) -> np.ndarray:
    """Each rank's cells per second sweeping a ``rows`` x ``cols`` tile, all ranks at once."""
    u = np.random.default_rng(comm.rank).random((rows + 2, cols + 2))
    v = u.copy()
    sweep = Sweeper(heat_weights(HEAT_ALPHA), None, "numba-stencil", 1)
    rect = Rect(1, rows + 1, 1, cols + 1)
    sweep(u, v, rect)
    comm.Barrier()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sweep(u, v, rect)
        n += 1
    return np.array(comm.allgather(n * rows * cols / (time.perf_counter() - t0)))


# ------------------------------------------------------------------------------ one run

def _policy(name: str, window: int) -> Policy | None:
    if name in STATIC or name.startswith("split:"):
        return None
    if name == "ema-iteration":
        return Policy("ema", window, "growing", timing="iteration")
    average, interval = name.split("-")
    return Policy(average, window, interval)


def loads(spent: list[Mark], steps: int, cells: np.ndarray) -> np.ndarray:
    """Each rank's seconds per step as the balancer weighs them (sweeps at its CPU share plus the
    halo work every rank does, ``step_overhead``) from every rank's clocks over ``steps`` steps."""
    sweep = np.array([busy(m, "compute") for m in spent]) / steps
    other = np.array([(m.cpu - m.phase_cpu) / steps for m in spent])
    share = np.array([m.share for m in spent])
    return sweep + step_overhead(other, share)


def insitu_speeds(comm: MPI.Comm, u, args) -> np.ndarray:
    """Each rank's speed in place (cells per second): on two ranks, the row split of
    ``ORACLE_SPLITS`` (rank 0's share) whose ``--calibrate`` steps ran fastest, as speeds in that
    ratio; on more, each rank's measured rate over ``--calibrate`` steps on equal rows."""
    P, n = comm.size, args.field
    ph = Phases()
    plan = Plan(args.schedule, P, P, 1, 1, backend="numba-stencil", threads=1)
    field = distribute(u, heat_weights(HEAT_ALPHA), comm=comm, config=plan, phases=ph)
    field.advance(10)
    if P == 2:
        best, fastest = 0.5, np.inf
        for x in ORACLE_SPLITS:
            field.field.relayout(shares(n, [x, 1 - x], 1), [n])
            field.advance(2)
            comm.Barrier()
            t0 = time.perf_counter()
            field.advance(args.calibrate)
            comm.Barrier()
            t = comm.bcast(time.perf_counter() - t0, root=0)   # one time on every rank: all choose alike
            if t < fastest:
                best, fastest = x, t
        field.free()
        return np.array([best, 1 - best]) * n / fastest * args.calibrate
    before = ph.mark("compute")
    field.advance(args.calibrate)
    spent = comm.allgather(ph.mark("compute") - before)
    rows = field.field.shares()[0]
    field.free()
    return rows * n / loads(spent, args.calibrate, rows * n)


def one_run(comm: MPI.Comm, u, name: str, args, events, speeds: list[np.ndarray], insitu: list[np.ndarray]) -> dict:
    """One configuration's run: wall time, and per chunk the root's seconds, every rank's compute
    seconds and the row shares."""
    P, n = comm.size, args.field
    phases_q = _phases(events)
    set_quotas(comm, phases_q[0])
    weights = tuple(float(x) for x in speeds[0]) if name == "probe" else None
    plan = Plan(args.schedule, P, P, 1, 1, backend="numba-stencil", threads=1, weights=weights)
    ph = Phases()
    field = distribute(u, heat_weights(HEAT_ALPHA), comm=comm, config=plan, balance=_policy(name, args.window),
                       steps=args.steps, phases=ph)
    hf = field.field
    if name == "oracle" or _split(name):
        hf.relayout(shares(n, insitu[0] if name == "oracle" else _split(name), 1), [n])
    chunk_wall, chunk_compute, chunk_marks, chunk_rows, ends = [], [], [], [], []
    change_steps = sorted({e[0] for e in events if e[0] > 0})
    comm.Barrier()
    t0 = time.perf_counter()
    done = 0
    while done < args.steps:
        if done in change_steps:
            k = change_steps.index(done) + 1
            set_quotas(comm, phases_q[k])
            if name == "oracle":
                hf.relayout(shares(n, insitu[k], 1), [n])
        k_steps = min(args.chunk, args.steps - done, *(s - done for s in change_steps if s > done))
        before = ph.mark("compute")
        field.advance(k_steps)
        spent = ph.mark("compute") - before
        chunk_wall.append(spent.wall / k_steps)
        chunk_compute.append(spent.phase / k_steps)
        chunk_marks.append((spent, k_steps, int(hf.cells)))
        chunk_rows.append(int(hf.shares()[0][0]))
        done += k_steps
        ends.append(done)
    comm.Barrier()
    total = time.perf_counter() - t0
    moves = field.rebalancer.moves if field.rebalancer is not None else 0
    decisions = [] if field.rebalancer is None else [
        {"step": e.step, "rates": e.rates, "rows": e.rows, "reason": e.reason} for e in field.rebalancer.events]
    final = hf.shares()[0].tolist()
    field.free()
    computes = comm.gather(chunk_compute, root=0)
    marks = comm.gather(chunk_marks, root=0)
    busies = None if marks is None else [
        loads([m[i][0] for m in marks], marks[0][i][1], np.array([m[i][2] for m in marks])).tolist()
        for i in range(len(chunk_marks))]
    return {"seconds": total, "moves": moves, "final_rows": final, "wall": chunk_wall,
            "compute": None if computes is None else np.array(computes).T.tolist(),
            "busy": busies, "rows0": chunk_rows,
            "steps_at": ends, "decisions": decisions}


# ------------------------------------------------------------------------------ comparison

def compare(comm: MPI.Comm, args, events) -> dict:
    P, n = comm.size, args.field
    hosts = comm.allgather(socket.gethostname())
    u = np.random.default_rng(7).random((n, n)) if comm.rank == 0 else None
    speeds, insitu = [], []
    runs: dict[str, list[dict]] = {c: [] for c in args.configs}
    with restored(comm, {e[1] for e in events}):
        for quotas in _phases(events):
            set_quotas(comm, quotas)
            speeds.append(measure_speeds(comm, n // P, n))
            insitu.append(insitu_speeds(comm, u, args))
        for r in range(args.rounds):
            order = args.configs[r % len(args.configs):] + args.configs[:r % len(args.configs)]
            for name in order:
                runs[name].append(one_run(comm, u, name, args, events, speeds, insitu))
    if comm.rank != 0:
        return {}
    return summarise(args, hosts, events, speeds, insitu, runs)


def summarise(args, hosts, events, speeds, insitu, runs) -> dict:
    out: dict = {"P": len(hosts), "hosts": hosts, "field": args.field, "steps": args.steps,
                 "window": args.window, "schedule": args.schedule, "quota": args.quota,
                 "speeds": [s.tolist() for s in speeds],
                 "speed_ratio": [float(s[0] / s[-1]) for s in speeds],
                 "insitu": [s.tolist() for s in insitu], "insitu_ratio": [float(s[0] / s[-1]) for s in insitu]}
    equal = _median([r["seconds"] for r in runs.get("equal", [])])
    oracle = runs.get("oracle", [])
    per: dict = {}
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        q1, med, q3 = quartiles(secs)
        imbalance = {k: float(np.median([np.median(_imbalance(r[k])[len(r[k]) // 2:]) for r in rs]))
                     for k in ("busy", "compute")}
        rows0 = np.array([r["final_rows"][0] / args.field for r in rs])
        final_ratio = float(np.median(rows0 / (1 - rows0)))
        per[name] = {"median_s": med, "spread": (q3 - q1) / med if med else 0.0, "runs": secs,
                     "speedup_vs_equal": equal / med if equal else None, "moves": [r["moves"] for r in rs],
                     "final_rows": [r["final_rows"] for r in rs], "final_share_ratio": final_ratio,
                     "share_vs_speed": final_ratio / out["insitu_ratio"][-1] - 1,
                     "imbalance_last_half": imbalance["busy"], "compute_wall_imbalance": imbalance["compute"],
                     "recovery_windows": _recovery(rs, oracle, events, args) if oracle else None}
    out["configs"] = per
    out["series"] = {name: {"steps": rs[-1]["steps_at"], "rows0": rs[-1]["rows0"], "wall": rs[-1]["wall"],
                            "imbalance": _imbalance(rs[-1]["busy"]).tolist(), "decisions": rs[-1]["decisions"]}
                     for name, rs in runs.items()}
    return out


def _imbalance(per_chunk) -> np.ndarray:
    """max/mean over the ranks of each chunk's seconds."""
    a = np.array(per_chunk)
    return a.max(axis=1) / np.maximum(a.mean(axis=1), 1e-12)


def _median(xs) -> float | None:
    return float(np.median(xs)) if len(xs) else None


def _recovery(rs: list[dict], oracle: list[dict], events, args) -> list[float | None]:
    """After each quota change: windows until a chunk's rate is within 15% of oracle's median rate
    over the same phase (None: never in that phase), median over the rounds."""
    changes = sorted({e[0] for e in events if e[0] > 0})
    bounds = changes + [args.steps]
    out = []
    for a, b in zip(changes, bounds[1:], strict=False):
        ref = np.median([np.median([w for s, w in zip(r["steps_at"], r["wall"], strict=True) if a < s <= b])
                         for r in oracle])
        per_round = []
        for r in rs:
            pairs = zip(r["steps_at"], r["wall"], strict=True)
            hit = next((s for s, w in pairs if a < s <= b and ref / w >= RECOVERED), None)
            per_round.append(np.nan if hit is None else (hit - a) / args.window)
        med = float(np.nanmedian(per_round)) if not np.all(np.isnan(per_round)) else None
        out.append(med)
    return out


def plot(report: dict, path: str) -> None:
    """Shares of rank 0 and compute imbalance over the steps, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for name, s in report["series"].items():
        ax1.plot(s["steps"], np.array(s["rows0"]) / report["field"], label=name)
        ax2.plot(s["steps"], s["imbalance"], label=name)
    ax1.set_ylabel("rows of rank 0 (share)")
    ax2.set_ylabel("busy max/mean")
    ax2.set_xlabel("step")
    ax1.legend(fontsize=7, ncol=3)
    ax1.set_title(f"{report['field']}^2 field, P={report['P']}, quota {' '.join(report['quota']) or 'unchanged'}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
