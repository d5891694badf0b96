"""Phase calibration (collective, under mpiexec): time the candidate distributed plans on a few
problems and fit this platform's per-(algorithm, phase) factors measured/analytical
(``models.fitted_phases``), stored with the platform's key.

``autotune-install --mpi`` ends with it (profile key ``phase_calibration``), and
``autotune bench mpi-validate`` times its plans with the same functions. The root ranks every plan
(oversubscribed ones too: their models are checked), keeps those predicted within ``max_ratio``
of the best, the selector's choice and each algorithm's best plan (so every algorithm gets its
factors, not only those the analytical model already favours), and every plan is forced and
timed: median of ``reps`` runs, the plans' runs interleaved round by round, each run from the same
root-held matrices to the gathered result, each phase the slowest rank's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

import re
import time
from dataclasses import asdict, dataclass

import numpy as np
from autotune.install_probe.calibrate import PLAN

from autotune.benchmarks.calls import CALLS
from autotune.core.families import FAMILIES, Problem
from autotune.core.plans import PHASES, Plan
from autotune.db import load_sp, location
from autotune.db.comm_lookup import load_comm
from autotune.db.platform import PlatformError
from autotune.db.store import DatabaseError
from autotune.distributed.collective import RankCores, core_info, quiet_barrier
from autotune.distributed.plan import Phases
from autotune.host.resources import available_cores
from autotune.models.fitted_phases import (
    PhaseFactor,
    PhaseFactors,
    fit_phase_factors,
    load_phase_factors,
    platform_factors,
    save_phase_factors,
)
from autotune.models.fitted_plans import PlanFit, Run, SeriesKey, fit_plan_models
from autotune.select.distributed import plans, rank_plans
from autotune.select.placement import (
    MAPPING_ALGORITHM,
    communicator_platform,
    plan_estimate,
    rank_hosts,
)
from autotune.settings import options

# The families whose plans the installer times (the solve's plans factor as LU's do).
CALIBRATED = ("gemm", "cholesky", "lu")


@dataclass(frozen=True)
class PhaseCalibration:
    """What the installer times: orders ``sizes`` of each family, ``reps`` runs per plan, the plans
    predicted within ``max_ratio`` of the best. No sizes: no calibration."""

    sizes: tuple[int, ...] = (1024, 2048)
    reps: int = 3
    families: tuple[str, ...] = CALIBRATED
    max_ratio: float = 3.0


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _run_once(problem: Problem, plan: Plan, args: tuple, comm: MPI.Comm) -> tuple[float, dict[str, float]]:
    """One collective run of ``plan``: root wall time and the per-phase max over ranks."""
    phases = Phases()
    comm.Barrier()
    t0 = time.perf_counter()
    CALLS[problem.family].collective(problem, *args, comm=comm, config=plan, phases=phases)
    wall = time.perf_counter() - t0
    quiet_barrier(comm)     # ranks the plan left out wait without taking a core from it (as the probe's)
    wall = comm.bcast(wall, root=0)
    mine = np.array([phases.seconds.get(p, 0.0) for p in PHASES])
    worst = np.empty_like(mine)
    comm.Allreduce(mine, worst, op=_max())
    return wall, dict(zip(PHASES, worst.tolist(), strict=True))


def measure(family: str, plan_list: list[Plan], n: int, comm: MPI.Comm, reps: int, rng) -> list[dict]:
    """Every plan's ``reps`` runs on one problem, interleaved: round k runs each plan once, in an
    order rotated by k, so a slow spell of the machine falls on every plan alike; each plan's
    first run warms up."""
    problem, calls = FAMILIES[family].square(n), CALLS[family]
    args = calls.operands(problem, rng) if comm.rank == 0 else (None,) * calls.count
    runs: list[list] = [[] for _ in plan_list]
    for plan in plan_list:
        _run_once(problem, plan, args, comm)
    for k in range(reps):
        for i in np.roll(np.arange(len(plan_list)), -k):
            runs[i].append(_run_once(problem, plan_list[i], args, comm))
    return [_summary(r) for r in runs]


def _summary(runs: list) -> dict:
    """Median wall time, its interquartile spread, and each phase's own median over the runs (one
    run's phases carry that run's noise)."""
    walls = np.array([w for w, _ in runs])
    return {"total": float(np.median(walls)), "spread": float(np.subtract(*np.percentile(walls, [75, 25])) /
                                                              np.median(walls)), "runs": walls.tolist(),
            **{p: float(np.median([ph[p] for _, ph in runs])) for p in PHASES}}


@dataclass(frozen=True)
class _Ranked:
    """One plan of the root's ranking: its prediction in use, the analytical model's phases, the
    total with the phase factors alone, and whether it is one to check (``_root_ranking``)."""

    plan: Plan
    predicted: dict
    model: dict
    factored: float
    checked: bool


def _ranked(family: str, n: int, comm: MPI.Comm, max_ratio: float, db, strassen: bool) -> tuple[list[_Ranked], Plan]:
    """Every plan of the root's ranking and the selector's choice, broadcast (its failure raised on
    every rank)."""
    ranked, error = None, ""
    infos = comm.gather(core_info(), root=0)           # each rank's host and CPU quota, as a call sees them
    if comm.rank == 0:
        try:
            ranked = _root_ranking(family, n, infos, max_ratio, db, strassen)
        except (DatabaseError, LookupError, OSError, ValueError) as exc:
            error = f"cannot rank the {family} plans at n = {n}: {type(exc).__name__}: {exc}"
    ranked, error = comm.bcast((ranked, error), root=0)
    if error:
        raise RuntimeError(error)
    return ranked


def _root_ranking(family: str, n: int, infos: list[RankCores], max_ratio: float, db, strassen: bool
                  ) -> tuple[list[_Ranked], Plan]:
    """The root's part of ``_ranked``: every plan (oversubscribed too), those to check marked: within
    ``max_ratio`` of the best predicted, each algorithm's best, and the selector's choice (ranks x
    threads <= cores), on the world's ranks (``infos``: their hosts and quotas)."""
    sp = load_sp(db)
    cp = load_comm(db, nprocs=len(infos)).with_ranks([i.host for i in infos], [i.share for i in infos])
    prob, cores, nprocs = FAMILIES[family].square(n), available_cores(), len(infos)
    dec = rank_plans(prob, nprocs, sp, cp, cores, allow_strassen=strassen, oversubscribe=True)
    choice = rank_plans(prob, nprocs, sp, cp, cores, allow_strassen=strassen).chosen
    best = dec.ranking[0].seconds
    first = {r.plan.algorithm: r for r in reversed(dec.ranking)}      # each algorithm's best plan
    factors = platform_factors(sp, cp)
    return [_Ranked(r.plan, r.phases, r.model or r.phases,
                    (r.model or r.phases)["total"] * factors.factor(family, r.plan.algorithm, "total", r.plan.p),
                    r.seconds <= max_ratio * best or r.plan == choice or first[r.plan.algorithm] is r)
            for r in dec.ranking], choice


def validate(family: str, sizes, comm: MPI.Comm, reps: int, max_ratio: float, db: str | None,
             strassen: bool = False, verbose: bool = True, whole_series: bool = False) -> list[dict]:
    """Time every plan to check on each order of ``sizes``: per problem its rows (plan, predicted
    and analytical phases, measured phases) and the selector's choice. ``whole_series``: a plan
    checked at one order is timed at every order (the runs a T(n, p) is fitted to). Collective."""
    rng = np.random.default_rng(0)
    results = []
    with options(db=db):
        ranked = {n: _ranked(family, n, comm, max_ratio, db, strassen) for n in sizes}
        series = {r.plan for rows, _ in ranked.values() for r in rows if r.checked} if whole_series else set()
        for n in sizes:
            timed_plans = [r for r in ranked[n][0] if r.checked or r.plan in series]
            timed = measure(family, [r.plan for r in timed_plans], n, comm, reps, rng)
            rows = []
            for r, measured in zip(timed_plans, timed, strict=True):
                plan = r.plan
                rows.append({"plan": str(plan), "family": family, "algorithm": plan.algorithm, "p": plan.p,
                             "r": plan.r, "c": plan.c, "b": plan.b, "series": asdict(SeriesKey.of(family, plan)),
                             "predicted": r.predicted, "model": r.model, "factored": r.factored,
                             "measured": measured})
                if comm.rank == 0 and verbose:
                    print(f"{family} n={n} {plan}: measured {measured['total'] * 1e3:.1f} ms, "
                          f"predicted {r.predicted['total'] * 1e3:.1f} ms", flush=True)
            results.append({"family": family, "n": n, "nprocs": comm.size, "rows": rows,
                            "choice": str(ranked[n][1]), "reps": reps})
    return results


def _procs(plan: str) -> int:
    """Process count from a plan's text (runs saved before rows carried it)."""
    return int(re.search(r"\bp=(\d+)", plan).group(1))


def _family_info(results: list[dict], by: str) -> dict[str, dict]:
    """Per family: the orders timed, plans x reps runs, when and by what."""
    out: dict[str, dict] = {}
    for prob in results:
        entry = out.setdefault(prob["family"], {"sizes": [], "plans": 0, "runs": 0, "by": by,
                                                "fitted": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        entry["sizes"] = sorted({*entry["sizes"], int(prob["n"])})
        entry["plans"] += len(prob["rows"])
        entry["runs"] += len(prob["rows"]) * int(prob.get("reps", 1))
    return out


def fit(results: list[dict], db: str | None, nprocs: int, by: str = "autotune bench mpi-validate",
        extra: list[dict] = ()) -> tuple[str | None, list[PhaseFactor]]:
    """Fit this platform's phase factors from the analytical phases of the runs (and the ``extra``
    rows of other models of the same runs, ``mapping_rows``) and store them, keeping the stored
    factors of families these runs did not time. Returns (platform key, factors)."""
    path = location.resolve(db)
    key = load_comm(db, nprocs=nprocs).platform.get("key")
    rows = [{**r, "predicted": r["model"], "p": r.get("p", _procs(r["plan"]))}
            for prob in results for r in prob["rows"]] + list(extra)
    families = {r["family"] for r in rows}
    old = load_phase_factors(path, key)
    kept = [f for f in old.factors if f.family not in families]
    info = {"nprocs": nprocs, "families": {**{f: i for f, i in old.family_infos().items() if f not in families},
                                           **_family_info(results, by)}}
    factors = kept + fit_phase_factors(rows)
    fits = [f for f in old.plans.fits if f.series.family not in families] + plan_fits(results, factors)
    save_phase_factors(path, key, factors, info=info, plans=fits)
    return key, factors


def plan_fits(results: list[dict], factors: list[PhaseFactor]) -> list[PlanFit]:
    """The fitted T(n, p) of each distributed plan series timed (``models.fitted_plans``), each run
    beside its phase-factor model's total. Rows saved before they carried their series are left out."""
    table = PhaseFactors(factors)
    runs = [Run(SeriesKey(**r["series"]), int(prob["n"]), int(r["p"]), float(t),
                r["model"]["total"] * table.factor(r["family"], r["algorithm"], "total", r["p"]))
            for prob in results for r in prob["rows"] if r["algorithm"] != "local" and "series" in r
            for t in r["measured"].get("runs", [r["measured"]["total"]])]
    return fit_plan_models(runs)


def factor_lines(factors: list[PhaseFactor]) -> list[str]:
    """One line per fitted factor: what it scales, by how much, from how many runs."""
    return [f"fitted {f.family} {f.algorithm} {f.phase} p={f.p or 'any'}: x{f.factor:.3f} from {f.points} runs "
            f"(APE {f.ape_before:.1f}% -> {f.ape_after:.1f}%)" for f in factors]


def total_lines(factors: list[PhaseFactor]) -> list[str]:
    """Per family, each algorithm's factor on the total time (over every p)."""
    out = []
    for family in CALIBRATED:
        tot = [f"{f.algorithm} x{f.factor:.2f}" for f in factors
               if f.family == family and f.phase == "total" and not f.p]
        if tot:
            out.append(f"  {family} total: " + ", ".join(tot))
    return out


def mapping_rows(results: list[dict], infos: list[RankCores], cores: list[int], db) -> list[dict]:
    """The mapping model's time (``select.mapping.plan_estimate``) of each timed plan it covers
    (the family's block-cyclic algorithm) beside the measured one, on the ranks' hosts and quotas
    (``infos``, as a call sees them): the rows of its factor per family (``MAPPING_ALGORITHM``).
    None where the probe measured no platform to model."""
    names = [i.host for i in infos]
    hosts = rank_hosts(names, cores, 0)
    cp = load_comm(db, nprocs=len(names)).with_ranks(names, [i.share for i in infos])
    try:
        platform = communicator_platform(hosts, cp, load_sp(db))
    except (PlatformError, LookupError):
        return []
    return [{"family": prob["family"], "algorithm": MAPPING_ALGORITHM, "p": row["p"],
             "predicted": {"total": plan_estimate(prob["family"], prob["n"], Plan(
                 row["algorithm"], row["p"], row["r"], row["c"], b=row["b"]), hosts, platform).seconds},
             "measured": {"total": row["measured"]["total"]}}
            for prob in results for row in prob["rows"]
            if row["algorithm"] == FAMILIES[prob["family"]].mapping and "r" in row]


def _models_usable(comm: MPI.Comm, db) -> bool:
    """Whether the database holds the BLAS records the distributed models need (as the probe's
    other calibrations require), agreed on every rank."""
    ok = False
    if comm.rank == 0:
        try:
            ok = bool(load_sp(db).has("gemm", PLAN.backend, PLAN.threads, "panel"))
        except (DatabaseError, LookupError, OSError, ValueError):
            ok = False
    return bool(comm.bcast(ok, root=0))


def calibrate_phases(world, db, cal: PhaseCalibration, verbose: bool = False) -> dict | None:
    """Time ``cal``'s plans on every rank of ``world``, fit and store the phase factors: on rank 0
    ``{"key", "factors", "seconds", "runs"}``, None elsewhere, without sizes, or without the BLAS
    records the models need (then nothing is run). Collective."""
    if not cal.sizes or not cal.families or not _models_usable(world, db):
        return None
    t0 = time.perf_counter()
    results = [prob for family in cal.families
               for prob in validate(family, cal.sizes, world, cal.reps, cal.max_ratio, db, verbose=verbose,
                                    whole_series=True)]
    infos, cores = world.allgather(core_info()), world.allgather(available_cores())
    if world.rank != 0:
        return None
    try:
        key, factors = fit(results, db, world.size, by="autotune-install --mpi",
                           extra=mapping_rows(results, infos, cores, db))
    except (DatabaseError, OSError, ValueError) as exc:
        raise RuntimeError(f"phase calibration: could not fit/store the factors: {exc}") from exc
    runs = sum(len(p["rows"]) for p in results) * cal.reps
    return {"key": key, "factors": factors, "runs": runs, "seconds": time.perf_counter() - t0}


def estimate_seconds(cal: PhaseCalibration, nprocs: int, cores: int, rate: float,
                     run_seconds: float = 0.01) -> float:
    """Rough wall seconds of ``cal`` on ``nprocs`` ranks: every candidate plan's ``reps + 1`` runs
    at ``rate`` flop/s per busy core (at most ``cores``), plus a fixed cost per run."""
    total = 0.0
    for family in cal.families:
        for n in cal.sizes:
            problem = FAMILIES[family].square(n)
            flops = FAMILIES[family].flops(problem)
            cands = [p for p in plans(problem, nprocs, cores, oversubscribe=True)
                     if "strassen" not in p.algorithm] + [Plan("local", 1, 1, 1, threads=cores)]
            total += sum(flops / (rate * min(p.p * p.threads, cores)) + run_seconds for p in cands)
    return (cal.reps + 1) * total


__all__ = ["PhaseCalibration", "calibrate_phases", "estimate_seconds", "factor_lines", "fit", "measure",
           "total_lines", "validate"]
