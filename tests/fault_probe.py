"""Fault probe of the collective calls: for every argument of every call and method taking ``comm=``,
a bad value on one rank only (and a user kernel raising on one rank only), and what each rank did.

Each case runs on every rank; then the ranks compare outcomes. A case passes when every rank
returned, or every rank raised the same exception type with the same message; it fails when the
ranks differ, and hangs when a rank is still inside the call after ``--limit`` seconds (a watchdog
thread then ends that rank, so the job ends). The driver launches ``mpiexec`` and, after a hang
or a crash, launches again from the next case, so one run counts every case::

    python tests/fault_probe.py --np 2 --out /tmp/faults          # all cases, P = 2
    python tests/fault_probe.py --np 3 --every 4 --out /tmp/f3    # every 4th case, P = 3

It prints the counts per verdict and per call, and the failing cases; exit 1 if any failed or hung.
``tests/test_fault_probe.py`` runs a sample of the cases under pytest.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

N = 12                # the order of the matrices and fields (small: the probe is about protocol)
VERDICTS = ("ok", "alike", "differ", "hang", "crash")


@dataclass(frozen=True)
class Case:
    """One call with one argument's bad value on ``bad_rank`` only."""

    call: str
    arg: str
    label: str
    bad_rank: int
    run: Callable        # run(comm) -> anything; raises what the call raises

    @property
    def name(self) -> str:
        return f"{self.call} {self.arg}={self.label} on rank {self.bad_rank}"


# ---------------------------------------------------------------------------------- the catalogue

def _plans(P: int) -> dict:
    from autotune.core.plans import Plan

    return {"gemm": Plan("summa", P, 1, P, b=4), "cholesky": Plan("cholesky", P, 1, P, b=4),
            "lu": Plan("lu", P, 1, P, b=4), "solve": Plan("gesv", P, 1, P, b=4),
            "stencil": Plan("blocking", P, P, 1, 1, backend="numba-stencil"),
            "overlap": Plan("overlap", P, 1, P, 1, backend="numba-stencil")}


class Ambiguous:
    """A value whose truth cannot be taken (as a numpy array's), to probe flags."""

    def __bool__(self):
        raise ValueError("the truth value of this object is ambiguous")

    def __repr__(self):
        return "Ambiguous()"


def _operands():
    import numpy as np

    rng = np.random.default_rng(7)
    a = rng.random((N, N))
    return {"a": a, "b": rng.random((N, N)), "spd": a @ a.T + N * np.eye(N), "rhs": rng.random((N, 3)),
            "field": rng.random((N + 3, N + 5))}


def _bad_arrays(np, shape: tuple[int, int]) -> dict:
    """Bad operands: each a value only the bad rank passes (other ranks pass the good one or None)."""
    return {"None": None, "1-D": np.ones(shape[0]), "3-D": np.ones((2, *shape)), "wrong-shape": np.ones((5, 7)),
            "nan": np.full(shape, np.nan), "str": "x", "complex": np.ones(shape, complex),
            "object": np.full(shape, None, dtype=object)}


ROOTS = {"-1": -1, "P": "P", "1.5": 1.5, "'0'": "0", "None": None, "True": True}
FLAGS = {"ambiguous": Ambiguous(), "differs": "DIFFERS"}


def _la_entries(P: int) -> list[tuple[str, Callable, dict, dict]]:
    """(call name, fn(**kw), the good keywords on the root, the mutations {arg: {label: value}})."""
    import numpy as np

    import autotune
    from autotune.core.plans import Plan

    ops, plans = _operands(), _plans(P)
    singular = np.ones((N, N))
    configs = {"'bogus'": "bogus", "other-family": plans["stencil"], "bad-dict": {"algorithm": "nope"},
               "too-many-ranks": Plan("summa", P + 1, 1, P + 1, b=4)}
    common = {"config": configs, "explain": {"ambiguous": Ambiguous()}, "root": ROOTS}
    scal = {"'x'": "x", "nan": float("nan"), "None": None, "array": np.ones(2)}
    gemm = {"a": _bad_arrays(np, (N, N)), "b": {**_bad_arrays(np, (N, N)), "mismatch": np.ones((5, N))},
            "out": {"wrong-shape": np.empty((3, 3)), "str": "x", "int32": np.empty((N, N), np.int32)},
            "alpha": scal, "beta": {"'x'": "x", "array": np.ones(2)}, "c": {"wrong-shape": np.ones((3, 3)), "str": "x"},
            "trans_a": FLAGS, "trans_b": FLAGS, "dtype": {"float32": np.float32}, **common}
    chol = {"a": {**_bad_arrays(np, (N, N)), "not-pd": -np.eye(N), "non-square": np.ones((N, N + 1))},
            "lower": FLAGS, "overwrite_a": FLAGS, "check_finite": FLAGS, **common}
    lu = {"a": {**_bad_arrays(np, (N, N)), "singular": singular}, "overwrite_a": FLAGS, "check_finite": FLAGS,
          **common}
    solve = {"a": {**_bad_arrays(np, (N, N)), "singular": singular},
             "b": {"None": None, "wrong-rows": np.ones((N + 1, 2)), "nan": np.full((N, 2), np.nan),
                   "3-D": np.ones((2, N, 2)), "str": "x"},
             "lower": FLAGS, "overwrite_a": FLAGS, "overwrite_b": FLAGS, "check_finite": FLAGS,
             "assume_a": {"'bogus'": "bogus", "3": 3}, "transposed": FLAGS, **common}
    return [("tuned_gemm", lambda a, b, **kw: autotune.tuned_gemm(a, b, **kw), {"a": ops["a"], "b": ops["b"]}, gemm),
            ("tuned_cholesky", lambda a, **kw: autotune.tuned_cholesky(a, **kw), {"a": ops["spd"]}, chol),
            ("tuned_lu_factor", lambda a, **kw: autotune.tuned_lu_factor(a, **kw), {"a": ops["a"]}, lu),
            ("tuned_solve", lambda a, b, **kw: autotune.tuned_solve(a, b, **kw), {"a": ops["a"], "b": ops["rhs"]},
             solve)]


def _raising_kernel(rank: int):
    """A stencil kernel (Python) that raises on ``rank`` only, on its second sweep."""
    from mpi4py import MPI

    calls = [0]

    def kernel(src, dst, r0, r1, c0, c1):
        calls[0] += 1
        if MPI.COMM_WORLD.rank == rank and calls[0] > 1:
            raise ZeroDivisionError("kernel failed on purpose")
        dst[r0:r1, c0:c1] = 0.25 * (src[r0 - 1:r1 - 1, c0:c1] + src[r0 + 1:r1 + 1, c0:c1]
                                    + src[r0:r1, c0 - 1:c1 - 1] + src[r0:r1, c0 + 1:c1 + 1])
    return kernel


def _stencil_entries(P: int) -> list[tuple[str, Callable, dict, dict]]:
    import numpy as np
    from autotune.kernels.stencil import heat_weights

    from autotune import stencil
    from autotune.core.plans import Plan

    ops, plans = _operands(), _plans(P)
    field = _bad_arrays(np, ops["field"].shape)
    field.pop("object")
    field["other-shape"] = np.ones((N, N))
    steps = {"-1": -1, "1.5": 1.5, "'2'": "2", "None": None, "True": True, "differs": "DIFFERS", "1e30": 10**30}
    configs = {"'bogus'": "bogus", "gemm-plan": plans["gemm"], "too-wide-halo": Plan("blocking", P, P, 1, 9,
               backend="numba-stencil"), "too-many-ranks": Plan("blocking", P + 1, P + 1, 1, 1)}
    common = {"root": ROOTS, "check_finite": FLAGS, "config": configs, "explain": {"ambiguous": Ambiguous()},
              "phases": {"'x'": "x", "3": 3}, "balance": {"'bogus'": "bogus", "3": 3, "differs": "DIFFERS"}}
    alpha = {"nan": float("nan"), "inf": float("inf"), "'x'": "x", "None": None, "1j": 1j, "array": np.ones(2),
             "differs": "DIFFERS"}
    weights = {"None": None, "complex": heat_weights(0.1) * 1j, "2x2": np.ones((2, 2)),
               "nan": np.full((3, 3), np.nan), "'x'": "x", "differs": "DIFFERS"}
    kern = {"not-callable": 3, "raises": "RAISES", "with-weights": "WITH_WEIGHTS"}
    radius = {"0": 0, "'1'": "1", "None": None, "-1": -1}
    w = heat_weights(0.1)
    return [("heat2d", lambda u0, steps, alpha, **kw: stencil.heat2d(u0, steps, alpha, **kw),
             {"u0": ops["field"], "steps": 3, "alpha": 0.1}, {"u0": field, "steps": steps, "alpha": alpha, **common}),
            ("apply", lambda u0, steps, **kw: stencil.apply(u0, steps, **kw),
             {"u0": ops["field"], "steps": 3, "weights": w}, {"weights": weights, "steps": steps, **common}),
            ("apply(kernel)", lambda u0, steps, **kw: stencil.apply(u0, steps, **kw),
             {"u0": ops["field"], "steps": 3, "kernel": "KERNEL", "radius": 1},
             {"kernel": kern, "radius": radius, "balance": {"True": True}}),
            ("distribute", lambda u0, **kw: _distributed(stencil.distribute(u0, **kw)),
             {"u0": ops["field"], "weights": w, "steps": 3},
             {"u0": field, "weights": weights, "steps": steps, **common})]


def _synthetic_entries(P: int) -> list[tuple[str, Callable, dict, dict]]:
    """``synthetic.run``: a master and one single-stage worker of millisecond tasks."""
    from autotune import synthetic

    spec = synthetic.load_spec({"name": "probe", "task_bytes": 8, "initial_messages": 2, "iterations": 1,
                                "reply_bytes": 8, "workers": [{"stages": [{"mean": 0.002, "spread": 0.001}]}]})
    bad = {"None": None, "'x'": "x", "other-spec": synthetic.scaled(spec, 2.0), "3": 3}
    timeouts = {"-1": -1, "0": 0, "nan": float("nan"), "inf": float("inf"), "'x'": "x"}
    return [("synthetic.run", lambda spec, **kw: synthetic.run(spec, **kw), {"spec": spec, "timeout": 60.0},
             {"spec": bad, "timeout": timeouts, "root": ROOTS})]


def _distributed(field) -> None:
    """Advance and gather a distributed field, then free it (what a user does with one)."""
    with field:
        field.advance(2)
        field.gather()


def _field_cases(P: int) -> list[Case]:
    """DistributedField's methods: a bad ``steps`` on one rank, use after free, a kernel raising."""

    from autotune.kernels.stencil import heat_weights

    from autotune import stencil

    ops, plans, w = _operands(), _plans(P), heat_weights(0.1)
    out = []
    for plan_name in ("stencil", "overlap", "local"):
        def make(comm, kernel=None, balance=None, plan_name=plan_name):
            from autotune.core.plans import Plan

            plan = Plan("local", 1) if plan_name == "local" else plans[plan_name]
            u = ops["field"] if comm.rank == 0 else None
            if kernel is not None:
                return stencil.distribute(u, kernel=kernel, radius=1, comm=comm, config=plan, balance=balance)
            return stencil.distribute(u, w, comm=comm, config=plan, balance=balance)

        for bad in range(P):
            for label, value in {"-1": -1, "'x'": "x", "1.5": 1.5, "None": None, "differs": bad + 5}.items():
                def advance(comm, bad=bad, value=value, make=make):
                    with make(comm) as f:
                        f.advance(value if comm.rank == bad else 2)
                        f.gather()
                out.append(Case(f"advance[{plan_name}]", "steps", label, bad, advance))

            def freed_advance(comm, bad=bad, make=make):
                f = make(comm)
                if comm.rank == bad:
                    f.free()
                f.advance(1)
                f.free()
            out.append(Case(f"advance[{plan_name}]", "self", "freed-on-one-rank", bad, freed_advance))

            def freed_all(comm, bad=bad, make=make):
                f = make(comm)
                f.free()
                return f.gather() if comm.rank == bad else f.advance(1)
            out.append(Case(f"gather[{plan_name}]", "self", "freed-then-gather-or-advance", bad, freed_all))

            def raising(comm, bad=bad, make=make, balance=None):
                with make(comm, kernel=_raising_kernel(bad), balance=balance) as f:
                    f.advance(6)
                    f.gather()
            out.append(Case(f"advance[{plan_name}]", "kernel", "raises", bad, raising))
            out.append(Case(f"advance[{plan_name}]", "kernel", "raises+balance", bad,
                            lambda comm, r=raising: r(comm, balance=True)))
    return out


def _special(value, rank: int, good, kw: dict, P: int):
    """Placeholders resolved per rank: a value that differs from the good one, the raising kernel."""
    import numpy as np

    if isinstance(value, str) and value == "DIFFERS":
        if isinstance(good, (bool, np.bool_)) or good is None:
            return not good
        if isinstance(good, np.ndarray):
            return good * 0.5
        if isinstance(good, (int, float)):
            return good + 1
        return "other"
    if isinstance(value, str) and value == "WITH_WEIGHTS":
        kw["weights"] = np.ones((3, 3)) / 9
        return _laplace
    if isinstance(value, str) and value == "P":
        return P
    return value


def _laplace(src, dst, r0, r1, c0, c1):
    dst[r0:r1, c0:c1] = 0.25 * (src[r0 - 1:r1 - 1, c0:c1] + src[r0 + 1:r1 + 1, c0:c1]
                                + src[r0:r1, c0 - 1:c1 - 1] + src[r0:r1, c0 + 1:c1 + 1])


GOOD_DEFAULTS = {"lower": False, "overwrite_a": False, "overwrite_b": False, "check_finite": True, "trans_a": False,
                 "trans_b": False, "balance": None, "steps": 3, "alpha": 0.1}
OPERANDS = ("a", "b", "u0")


def _entry_cases(P: int) -> list[Case]:
    """Every (call, argument, bad value, bad rank) of the calls that take ``comm=``, each with the
    tuned plan (config None) and with a forced distributed plan for the family."""
    plans = _plans(P)
    family = {"tuned_gemm": "gemm", "tuned_cholesky": "cholesky", "tuned_lu_factor": "lu", "tuned_solve": "solve",
              "heat2d": "stencil", "apply": "stencil", "apply(kernel)": "overlap", "distribute": "stencil"}
    out = []
    for call, fn, good, mutations in _la_entries(P) + _stencil_entries(P) + _synthetic_entries(P):
        for forced in ((False,) if call == "synthetic.run" else (False, True)):
            for arg, values in mutations.items():
                if forced and arg == "config":
                    continue
                for label, value in values.items():
                    for bad in range(P):
                        run = _runner(fn, good, arg, value, bad, plans[family[call]] if forced else None, P)
                        out.append(Case(call + ("[forced]" if forced else ""), arg, label, bad, run))
    return out


def _runner(fn, good: dict, arg: str, value, bad: int, plan, P: int) -> Callable:
    def run(comm):
        root = 0
        kw = {k: (v if k not in OPERANDS or comm.rank == root else None) for k, v in good.items()}
        if kw.get("kernel") == "KERNEL":
            kw["kernel"] = _laplace
        if plan is not None:
            kw["config"] = plan
        if isinstance(value, str) and value == "RAISES":     # the same kernel everywhere, raising on one rank
            kw[arg] = _raising_kernel(bad)
        elif comm.rank == bad:
            kw[arg] = _special(value, comm.rank, kw.get(arg, GOOD_DEFAULTS.get(arg)), kw, P)
        elif arg == "root" or (isinstance(value, str) and value == "DIFFERS"):
            kw.setdefault(arg, GOOD_DEFAULTS.get(arg, 0 if arg == "root" else None))
        return fn(comm=comm, **kw)
    return run


def catalogue(P: int) -> list[Case]:
    """Every case of the probe for P ranks, in a fixed order."""
    return _entry_cases(P) + _field_cases(P)


# ---------------------------------------------------------------------------------- under mpiexec

class Watchdog(threading.Thread):
    """Ends this rank when one case runs longer than ``limit`` seconds, writing the hang first."""

    def __init__(self, out: Path, limit: float):
        super().__init__(daemon=True)
        self.out, self.limit, self.case, self.start_time = out, limit, None, 0.0

    def watch(self, index: int | None) -> None:
        self.case, self.start_time = index, time.monotonic()

    def run(self) -> None:
        while True:
            time.sleep(0.1)
            if self.case is not None and time.monotonic() - self.start_time > self.limit:
                with open(self.out / "hangs.jsonl", "a") as fh:
                    fh.write(json.dumps({"case": self.case, "rank": int(os.environ.get("OMPI_COMM_WORLD_RANK", -1))})
                             + "\n")
                os._exit(17)


def outcome(run: Callable, comm) -> tuple[str, str]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run(comm)
        except Exception as exc:
            return type(exc).__name__, str(exc)
    return "ok", ""


def verdict(outcomes: list[tuple[str, str]]) -> str:
    if all(o[0] == "ok" for o in outcomes):
        return "ok"
    return "alike" if len({repr(o) for o in outcomes}) == 1 else "differ"


def worker(out: Path, first: int, limit: float) -> None:
    """Under mpiexec: the selected cases (``out/wanted.json``) from ``first`` on, one record each."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cases = catalogue(comm.size)
    wanted = json.loads((out / "wanted.json").read_text())
    dog = Watchdog(out, limit)
    dog.start()
    for index in (i for i in wanted if i >= first):
        case = cases[index]
        dog.watch(index)
        got = outcome(case.run, comm)
        outcomes = comm.allgather(got)
        dog.watch(None)
        if comm.rank == 0:
            with open(out / "results.jsonl", "a") as fh:
                fh.write(json.dumps({"case": index, "name": case.name, "call": case.call, "verdict": verdict(outcomes),
                                     "outcomes": outcomes}) + "\n")


# ---------------------------------------------------------------------------------- the driver

def _mpiexec() -> list[str]:
    here = Path(sys.executable).parent / "mpiexec"
    cmd = [str(here) if here.exists() else "mpiexec", "--oversubscribe"]
    return cmd + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def select(nprocs: int, every: int = 1, match: str = "") -> list[int]:
    """The indices of every ``every``-th case whose name contains ``match``."""
    return [i for i, c in enumerate(catalogue(nprocs)) if match in c.name][::every]


def drive(nprocs: int, out: Path, wanted: list[int], limit: float = 20.0, job_timeout: float = 1800.0) -> list[dict]:
    """The record of each case in ``wanted``, launching mpiexec again after each hang or crash."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("results.jsonl", "hangs.jsonl"):
        (out / name).unlink(missing_ok=True)
    (out / "wanted.json").write_text(json.dumps(wanted))
    names = [c.name for c in catalogue(nprocs)]
    env = {**os.environ, "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    first, records, seen_hangs = 0, {}, set()
    while first <= wanted[-1]:
        cmd = _mpiexec() + ["-n", str(nprocs), sys.executable, __file__, "--worker", "--out", str(out),
                            "--first", str(first), "--limit", str(limit)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=job_timeout)
        records.update({r["case"]: r for r in _read(out / "results.jsonl")})
        hung = {h["case"] for h in _read(out / "hangs.jsonl")} - seen_hangs
        seen_hangs |= hung
        if hung:       # the lowest case a rank hung in (a rank it left behind may hang in a later one)
            stuck = min(hung)
            records = {i: r for i, r in records.items() if i <= stuck}
            records[stuck] = {"case": stuck, "name": names[stuck], "verdict": "hang", "outcomes": []}
        missing = [i for i in wanted if i >= first and i not in records]
        if not missing or (proc.returncode == 0 and not hung):
            break
        if hung:                                  # the job ended at its hang: go on after it
            first = min(hung) + 1
            continue
        records[missing[0]] = {"case": missing[0], "name": names[missing[0]], "verdict": "crash",
                               "outcomes": [proc.stderr[-2000:]]}
        first = missing[0] + 1
    return [records[i] for i in sorted(records)]


def summary(records: list[dict]) -> str:
    counts = Counter(r["verdict"] for r in records)
    calls = Counter((r["name"].split(" ")[0], r["verdict"]) for r in records)
    lines = [f"{len(records)} cases: " + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS)]
    for call in sorted({c for c, _ in calls}):
        lines.append(f"  {call:28s} " + ", ".join(f"{v} {calls[(call, v)]}" for v in VERDICTS if calls[(call, v)]))
    for r in records:
        if r["verdict"] in ("differ", "hang", "crash"):
            lines.append(f"{r['verdict'].upper()}: {r['name']}: {r['outcomes']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--every", type=int, default=1, help="run every k-th case only")
    p.add_argument("--match", default="", help="only the cases whose name contains this")
    p.add_argument("--limit", type=float, default=20.0, help="seconds before a case counts as hung")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.out, args.first, args.limit)
        return 0
    records = drive(args.np, args.out, select(args.np, args.every, args.match), args.limit)
    print(summary(records))
    return 1 if any(r["verdict"] in ("differ", "hang", "crash") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
