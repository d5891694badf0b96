"""Validation step of ``autotune-install``: check every candidate's model on check points, remodel if needed.

For each family and check size (off the probe grid) the selector's candidates are timed with a
forced ``config=`` (median of a few runs, thread pools settled between libraries, as
``autotune bench validate`` does) and compared with their analytical prediction. A candidate series (same
algorithm, backend, threads, parameter, variant) whose median absolute percentage error (APE)
exceeds ``tol``, or that the analytical model mis-ranks against another candidate of the same
problem, is remodelled from separate fitting sizes (``install_probe.remodel_series``: a
polynomial in ``n``, and for a blocked series one in ``n`` and the block) and the fit is put in
use where its check-point APE is lower. Every fitted entry is stored (``autotune.models.fitted``)
with both models' errors and the reason, and every check point (``autotune.db.validation``:
sizes, measured, predicted, the model in use and why) for ``autotune report``.
"""
from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from autotune.core.families import FAMILIES as FAMILY_DEFS
from autotune.core.families import as_problem
from autotune.core.plans import Candidate
from autotune.db import load_sp, resolve
from autotune.db.fitted import save_fitted
from autotune.db.lookup import SystemParameters
from autotune.db.validation import save_validation
from autotune.models.fit_terms import METHODS
from autotune.models.fitted import FittedEntry
from autotune.select import clear_cache, rank
from autotune.select.ranking import COMPOSED_RISK

from .remodel_series import remodel_all
from .validate_runs import candidate_runner, time_point

# The families validated (an LU solve's series are the solve's getrs, checked there).
FAMILIES = ("gemm", "cholesky", "lu", "solve")


@dataclass(frozen=True)
class Spec:
    """What the validation measures: check and fitting sizes (disjoint), thread budgets, timing and tolerances."""

    name: str
    check: dict[str, tuple[int, ...]]
    fit: dict[str, tuple[int, ...]]
    budgets: tuple[int, ...] = (1, 2)
    reps: int = 3                 # timed runs per point (after one warm-up), fewer if over ``seconds``
    seconds: float = 0.5          # time budget per point once 2 runs are in
    passes: int = 1               # sweeps over each batch of points (alternately reversed); the fastest is kept
    max_ratio: float = 3.0        # skip candidates predicted slower than this x the best of their budget
    settle: float = 0.3           # pause when switching library or thread count with a pool involved
    margin: float = 0.05          # measured gap beyond which a reversed predicted order is a mis-ranking
    min_seconds: float = 0.01     # the summary APE counts check points predicted at least this long
    strassen: bool = False
    families: tuple[str, ...] = FAMILIES
    methods: tuple[str, ...] = METHODS
    over_blocks: bool = True      # a blocked series gets one T(n, b) (False: a T(n) per block, as before)


SPECS = {
    "quick": Spec("quick", check={"gemm": (176, 352, 608), "cholesky": (176, 352, 608), "lu": (176, 352, 608),
                                  "solve": (176, 352, 608)},
                  fit={"gemm": (128, 224, 288, 416, 512, 704), "cholesky": (128, 224, 288, 416, 512, 704),
                       "lu": (128, 224, 288, 416, 512, 704)},
                  reps=3, seconds=0.2),
    "standard": Spec("standard", check={"gemm": (200, 700, 1500, 2500), "cholesky": (200, 700, 1500, 3000),
                                        "lu": (200, 700, 1500, 2500), "solve": (200, 700, 1500, 2500)},
                     fit={"gemm": (160, 320, 500, 900, 1200, 1800, 2200),
                          "cholesky": (160, 320, 500, 900, 1200, 2000, 2500, 3200),
                          "lu": (160, 320, 500, 900, 1200, 1800, 2200)},
                     reps=3, seconds=0.5, strassen=True, passes=2),
}
SPECS["full"] = replace(SPECS["standard"], name="full", reps=5, seconds=1.0)
# The step ending a standard install: standard's candidates on fewer, smaller sizes in one sweep,
# about half a minute of check points and at most a minute more of fitting sizes (every series
# refitted) on two cores, estimated from the selector's predictions.
SPECS["install"] = replace(SPECS["standard"], name="install",
                           check={"gemm": (200, 700, 1500), "cholesky": (200, 700, 1500), "lu": (200, 700, 1500),
                                  "solve": (200, 700, 1500)},
                           fit={"gemm": (160, 320, 500, 900, 1200, 1800), "cholesky": (160, 320, 500, 900, 1200, 1800),
                                "lu": (160, 320, 500, 900, 1200, 1800)},
                           seconds=0.3, passes=1)


def load_spec(name_or_spec) -> Spec:
    """A Spec from itself, a built-in name, a mapping (over quick's values), or a YAML file.

    A YAML file may hold the spec's keys at top level or under ``validate:``; a probe profile
    without them (any other file) validates with the quick spec.
    """
    if isinstance(name_or_spec, Spec):
        return name_or_spec
    if isinstance(name_or_spec, dict):
        return _from_mapping(name_or_spec)
    if name_or_spec in SPECS:
        return SPECS[name_or_spec]
    path = Path(name_or_spec)
    if not path.is_file():
        raise ValueError(f"validation spec {name_or_spec!r}: not one of {', '.join(SPECS)} nor a file")
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    if isinstance(data, dict) and isinstance(data.get("validate"), dict):
        return _from_mapping(data["validate"])
    if isinstance(data, dict) and "check" in data:
        return _from_mapping(data)
    return SPECS["quick"]


def _from_mapping(data: dict) -> Spec:
    """Spec fields from a mapping (lists become tuples), quick's values for the rest; ValueError on unknown keys."""
    known = {f.name for f in fields(Spec)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"validation spec: unknown key(s) {sorted(unknown)} (known: {', '.join(sorted(known))})")
    kw = {k: ({f: tuple(int(x) for x in v) for f, v in val.items()} if k in ("check", "fit")
              else tuple(val) if isinstance(val, list) else val) for k, val in data.items()}
    spec = replace(SPECS["quick"], **{"name": "custom", **kw})
    for fam in spec.families:
        overlap = set(spec.check.get(fam, ())) & set(spec.fit.get(fam, ()))
        if overlap:
            raise ValueError(f"validation spec: {fam} check and fitting sizes overlap at {sorted(overlap)}")
    return spec


# ----------------------------------------------------------------------------- timing

def _dims(family: str, n) -> tuple[int, ...]:
    """The square problem of order n (a solve: CHECK_NRHS right-hand sides; its series are checked,
    not refitted: a fitted polynomial in n would not know nrhs)."""
    return FAMILY_DEFS[family].square(int(n)).dims


class Timer:
    """Times (family, n, candidate) points, settling thread pools when the library or threads change;
    ``progress`` hears (points timed, points planned, the point timed now) as each starts."""

    def __init__(self, spec: Spec, seed: int = 0, deadline: float = math.inf, progress=None):
        self.spec, self.rng, self.cache = spec, np.random.default_rng(seed), {}
        self.last: tuple[str, int] | None = None
        self.runs, self.seconds, self.skipped = 0, 0.0, 0
        self.planned = 0
        self.progress = progress
        self.deadline = deadline            # perf_counter() after which no new point is timed

    @property
    def expired(self) -> bool:
        return time.perf_counter() >= self.deadline

    def __call__(self, family: str, n: int, cand: Candidate) -> float:
        """The point's time: measured now if it never was (NaN past the deadline), else the fastest so far."""
        key = (family, int(n), cand)
        if key not in self.cache:
            if self.expired:
                return math.nan
            self.planned += 1
            self.cache[key] = self._measure(family, n, cand)
        return self.cache[key]

    def _measure(self, family: str, n: int, cand: Candidate) -> float:
        if self.progress is not None:
            self.progress(self.runs, self.planned, f"{family} n={n} {cand.algorithm} {cand.backend} t={cand.threads}")
        group = (cand.backend, cand.threads)
        if self.last is not None and group != self.last and max(cand.threads, self.last[1]) > 1:
            time.sleep(self.spec.settle)      # the previous library's pool spins for a while
        self.last = group
        t0 = time.perf_counter()
        run = candidate_runner(family, _dims(family, n), cand, self.rng)
        t = time_point(run, self.spec.reps, self.spec.seconds)
        self.runs, self.seconds = self.runs + 1, self.seconds + time.perf_counter() - t0
        return t

    def many(self, points: list[tuple[str, int, Candidate]]) -> dict:
        """Time points (NaN for those left when the deadline passes) grouped by (threads, backend) so
        that pools settle as rarely as possible, in
        ``spec.passes`` sweeps (alternately reversed), keeping each point's fastest: a machine
        can run slow for minutes at a time, and a series timed in such a spell would look like a
        model error that the fitted models then learn."""
        order = sorted(dict.fromkeys((f, int(n), c) for f, n, c in points),
                       key=lambda p: (p[2].threads, p[2].backend, p[0], p[1], p[2]))
        runs, planned = self.runs, sum(key not in self.cache for key in order) + (self.spec.passes - 1) * len(order)
        self.planned += planned
        for i in range(self.spec.passes):
            for key in order if i % 2 == 0 else order[::-1]:
                if (i == 0 and key in self.cache) or self.expired:
                    continue
                t = self._measure(*key)
                self.cache[key] = min(self.cache.get(key, math.inf), t)
        self.planned -= planned - (self.runs - runs)        # those the deadline left untimed
        self.skipped += sum(key not in self.cache for key in order)
        return {p: self.cache.get((p[0], int(p[1]), p[2]), math.nan) for p in points}


# ----------------------------------------------------------------------------- check points

@dataclass
class Point:
    """One candidate at one check size: analytical prediction and measured time."""

    family: str
    n: int
    cand: Candidate
    predicted: float
    measured: float = math.nan


def _candidates(family: str, n: int, sp: SystemParameters, spec: Spec) -> list[tuple[Candidate, float]]:
    """Candidates the selector ranks at size n, with predictions, minus those > max_ratio x the best of a budget."""
    dims = _dims(family, n)
    ranking = rank(as_problem(family, dims), sp, max(spec.budgets), allow_strassen=spec.strassen).ranking
    keep: dict[Candidate, float] = {}
    for budget in spec.budgets:
        within = [r for r in ranking if r.candidate.threads <= budget]
        if within:
            best = min(r.predicted for r in within)
            keep.update({r.candidate: r.predicted for r in within if r.predicted <= spec.max_ratio * best})
    return sorted(keep.items(), key=lambda kv: kv[1])


def _misranked(points: list[Point], spec: Spec) -> dict[Candidate, str]:
    """Candidates in a pair whose predicted order is the reverse of a measured gap > margin, per problem."""
    out: dict[Candidate, str] = {}
    for budget in spec.budgets:
        within = [p for p in points if p.cand.threads <= budget]
        for i, a in enumerate(within):
            for b in within[i + 1:]:
                if a.predicted < b.predicted and b.measured * (1 + spec.margin) < a.measured:
                    why = f"analytical mis-ranks {a.cand} vs {b.cand} at n={a.n} (budget {budget})"
                    out.setdefault(a.cand, why)
                    out.setdefault(b.cand, why)
                elif b.predicted < a.predicted and a.measured * (1 + spec.margin) < b.measured:
                    why = f"analytical mis-ranks {b.cand} vs {a.cand} at n={a.n} (budget {budget})"
                    out.setdefault(a.cand, why)
                    out.setdefault(b.cand, why)
    return out


# ----------------------------------------------------------------------------- report

@dataclass
class Report:
    """Per candidate series: errors of both models and the one in use; overall APE of the models in use."""

    db: str
    spec: str
    tol: float
    min_seconds: float = 0.01
    rows: list[dict] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)   # every check point, as db.validation stores it
    entries: list[FittedEntry] = field(default_factory=list)
    ape_in_use: float | None = None        # median APE over check points predicted >= spec.min_seconds
    risk: dict = field(default_factory=dict)   # family -> algorithm -> measured composed-model risk
    points_scored: int = 0
    runs: int = 0
    seconds: float = 0.0
    skipped: int = 0                        # points left untimed when the time budget ran out

    @property
    def ok(self) -> bool:
        """The acceptance criterion: median APE of the models in use within ``tol``."""
        return self.ape_in_use is None or self.ape_in_use <= self.tol

    def summary(self) -> dict:
        """Plain-data summary (stored with the entries)."""
        fitted = sum(e.in_use for e in self.entries)
        return {"spec": self.spec, "tol": self.tol, "series": len(self.rows), "fitted_in_use": fitted,
                "fitted_stored": len(self.entries), "ape_in_use": self.ape_in_use,
                "points_scored": self.points_scored, "runs": self.runs, "seconds": round(self.seconds, 2),
                "skipped": self.skipped, "risk": self.risk}

    def text(self) -> str:
        """Human-readable table: one line per series, then the overall figure."""
        lines = [f"{'routine':<10} {'candidate':<44} {'APE analytical':>14} {'APE fitted':>10}  in use"]
        for r in self.rows:
            fitted = "-" if r["fitted_ape"] is None else f"{r['fitted_ape']:.1f}%"
            lines.append(f"{r['family']:<10} {r['candidate']:<44} {r['analytical_ape']:>13.1f}% {fitted:>10}  "
                         f"{r['in_use']}")
        overall = (f"no check point predicted >= {self.min_seconds * 1e3:g} ms" if self.ape_in_use is None else
                   f"median APE of the models in use {self.ape_in_use:.1f}% over {self.points_scored} check points "
                   f"predicted >= {self.min_seconds * 1e3:g} ms")
        risks = ", ".join(f"{fam} {alg} x{r:.3f}" for fam, algs in sorted(self.risk.items())
                          for alg, r in sorted(algs.items()))
        lines.append(f"measured composed-model risk (vs the library routine): {risks or 'none measured'}")
        lines.append(f"{overall} (tol {self.tol:g}%); {sum(e.in_use for e in self.entries)} fitted models in use; "
                     f"{self.runs} points timed in {self.seconds:.1f} s"
                     + (f"; time budget reached, {self.skipped} points left untimed" if self.skipped else ""))
        return "\n".join(lines)


def _summarise(report: Report, series: dict, entries: dict, spec: Spec, sp: SystemParameters,
               flagged: dict | None = None) -> None:
    """Fill the report's rows and check points, and the overall APE of the model in use on check
    points predicted >= min_seconds."""
    apes = []
    for cand, pts in sorted(series.items(), key=lambda kv: (kv[1][0].family, str(kv[0]))):
        n = np.array([p.n for p in pts], float)
        t = np.array([p.measured for p in pts])
        pred = np.array([p.predicted for p in pts])
        e = entries.get(cand)
        use = np.array([e.predict_dims(_dims(pts[0].family, x), sp) for x in n]) if e is not None and e.in_use \
            else pred
        apes += [abs(u - m) / m * 100 for u, m in zip(use, t, strict=True) if u >= spec.min_seconds]
        model = "fitted" if e is not None and e.in_use else "analytical"
        why = _model_reason(e, (flagged or {}).get(cand), float(np.median(np.abs(pred - t) / t) * 100), report.tol)
        report.points += [{**_key_fields(cand), "family": p.family, "n": p.n, "predicted": p.predicted,
                           "measured": p.measured, "in_use": float(u), "model": model, "reason": why}
                          for p, u in zip(pts, use, strict=True)]
        report.rows.append({"family": pts[0].family, "candidate": str(cand), "config": cand.as_dict(),
                            "analytical_ape": float(np.median(np.abs(pred - t) / t) * 100),
                            "fitted_ape": None if e is None else e.fitted_ape,
                            "in_use": "fitted" if e is not None and e.in_use else "analytical",
                            "reason": "" if e is None else e.reason})
    report.points_scored = len(apes)
    report.ape_in_use = float(np.median(apes)) if apes else None


def _key_fields(cand: Candidate) -> dict:
    """The candidate's fields as db.validation stores them."""
    return {"algorithm": cand.algorithm, "backend": cand.backend, "threads": cand.threads, "param": cand.param,
            "variant": cand.variant}


def _model_reason(entry: FittedEntry | None, flagged: str | None, ape: float, tol: float) -> str:
    """Why a series runs on the model it does: the fitted entry's verdict, else the analytical check."""
    if entry is not None:
        return entry.reason
    if flagged is not None:
        return f"{flagged}; no fitted model (too few fitting sizes or none fits)"
    return f"analytical APE {ape:.1f}% within tol {tol:g}%, ranking confirmed"


# ----------------------------------------------------------------------------- the step

def validate(db_path=None, profile_name_or_spec="quick", *, tol: float = 3.0, progress=True,
             sp: SystemParameters=None, save: bool = True, budget_seconds: float | None = None) -> Report:
    """Time the selector's candidates on check points, remodel the series the analytical model gets wrong, store.

    ``sp`` replaces the system parameters read from ``db_path`` (tests pass a deliberately wrong
    one); entries are written to ``/fitted/default`` of ``db_path`` unless ``save=False``. Past
    ``budget_seconds`` no new point is timed: the step scores and stores what it has (check points
    come first), so an install keeps its time limit. ``progress``: True for the installer's
    display (``runner.progress_mode``), False for none, or a ``runner.Progress`` to report to.
    """
    from .runner import Progress, progress_mode

    if progress is True:
        with Progress("validation", progress_mode()) as bar:
            return _validate(db_path, profile_name_or_spec, tol, bar, sp, save, budget_seconds)
    return _validate(db_path, profile_name_or_spec, tol, progress or None, sp, save, budget_seconds)


def _validate(db_path, profile_name_or_spec, tol: float, progress, sp: SystemParameters, save: bool,
              budget_seconds: float | None) -> Report:
    """``validate`` with its progress display (None: none)."""
    spec = load_spec(profile_name_or_spec)
    path = resolve(db_path)
    sp = load_sp(path, refresh=True) if sp is None else sp
    if sp.table is None:
        raise LookupError(f"no usable system parameters in {path} ({getattr(sp, 'reason', '')}): run the probe first")
    t0 = time.perf_counter()
    timer = Timer(spec, deadline=t0 + budget_seconds if budget_seconds is not None else math.inf, progress=progress)
    say = getattr(progress, "note", None) or (lambda msg: None)
    problems = _check(spec, sp, timer, say)
    series: dict[Candidate, list[Point]] = defaultdict(list)
    for pts in problems.values():
        for p in pts:
            series[p.cand].append(p)
    flagged = _flag(problems, series, spec, tol)
    entries = remodel_all(series, flagged, spec, tol, timer, sp)
    report = Report(str(path), spec.name, tol, spec.min_seconds, entries=list(entries.values()),
                    risk=measured_risk(problems))
    _summarise(report, series, entries, spec, sp, flagged)
    report.runs, report.seconds, report.skipped = timer.runs, time.perf_counter() - t0, timer.skipped
    if progress is not None:
        progress(timer.runs, timer.planned)
    if save:
        save_fitted(path, report.entries, info=report.summary())
        save_validation(path, report.points, info=report.summary())
    clear_cache()                               # decisions taken before were ranked without these models
    return report


def _check(spec: Spec, sp: SystemParameters, timer: Timer, say) -> dict[tuple[str, int], list[Point]]:
    """Every (family, check size) problem's candidates, predicted and measured."""
    problems: dict[tuple[str, int], list[Point]] = {}
    for fam in spec.families:
        for n in spec.check.get(fam, ()):
            try:
                problems[fam, n] = [Point(fam, n, c, pred) for c, pred in _candidates(fam, n, sp, spec)]
            except LookupError as exc:          # nothing measured for this family
                say(f"skipping {fam} n={n}: {exc}")
    todo = [(p.family, p.n, p.cand) for pts in problems.values() for p in pts]
    measured = timer.many(todo)
    for key, pts in list(problems.items()):
        for p in pts:
            p.measured = measured[(p.family, p.n, p.cand)]
        problems[key] = [p for p in pts if math.isfinite(p.measured)]
    return {key: pts for key, pts in problems.items() if pts}


def _flag(problems: dict, series: dict, spec: Spec, tol: float) -> dict[Candidate, str]:
    """Series to remodel and why: analytical APE above ``tol``, or a mis-ranking."""
    flagged: dict[Candidate, str] = {}
    for cand, pts in series.items():
        ape = float(np.median([abs(p.predicted - p.measured) / p.measured * 100 for p in pts]))
        if ape > tol:
            flagged[cand] = f"analytical APE {ape:.1f}% > tol {tol:g}%"
    for pts in problems.values():
        for cand, why in _misranked(pts, spec).items():
            flagged.setdefault(cand, why)
    return flagged


# Check points counted for the composed-model risk: predicted at least this long (timer noise below).
RISK_MIN_SECONDS = 1e-3


def measured_risk(problems: dict[tuple[str, int], list[Point]]) -> dict[str, dict[str, float]]:
    """Per family, how much more optimistic each composed algorithm's model is than the library
    routine's (the selector's incumbent algorithm): the ratio of their median measured/predicted
    over the check points, at least 1. The selector charges it in place of its prior."""
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for pts in problems.values():
        for p in pts:
            if p.predicted >= RISK_MIN_SECONDS and p.measured > 0:
                ratios[p.family, p.cand.algorithm].append(p.measured / p.predicted)
    out: dict[str, dict[str, float]] = {}
    for (fam, alg), r in sorted(ratios.items()):
        base = ratios.get((fam, FAMILY_DEFS[fam].incumbent[0]), [])
        if alg in COMPOSED_RISK and len(r) >= 2 and len(base) >= 2:
            out.setdefault(fam, {})[alg] = round(max(1.0, float(np.median(r) / np.median(base))), 4)
    return out


__all__ = ["SPECS", "Point", "Report", "Spec", "Timer", "load_spec", "measured_risk", "validate"]
