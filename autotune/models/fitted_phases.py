"""Remodelled phases of the distributed models: measured/predicted factors per (algorithm, phase).

The analytical distributed models (``models.distributed_gemm``/``distributed_cholesky``) compose
probe-measured pieces; measured runs (the last step of ``autotune-install --mpi``) show systematic gaps per
phase — Gatherv of a whole result, packing, waits in broadcasts, per-step overheads — that one
factor per (algorithm, phase) captures (docs/models.md#fitted.phases). The factor
is the one with the lowest median APE over the fitting runs (none if no factor beats the
analytical phase), kept with the spread of measured/predicted and the phase's APE before and
after, per MPI platform (stored by ``autotune.db.phase_factors``). Missing or damaged data means
factor 1 (the analytical model), never an error.
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import SystemParameters
from autotune.db.phase_factors import GROUP, load_phase_records, save_phase_records

from .fitted_plans import PlanFit, PlanFits

# The total has its own factor: the phases are not its terms where one holds a faster rank's
# waits, off the critical path (SUMMA's broadcasts, BSR's gather); scaling them would move the
# total by waits it never had.
PHASE_NAMES = ("distribution", "communication", "compute", "collection", "total")
MIN_POINTS = 2          # a factor needs at least this many runs of its (algorithm, phase)
MIN_SECONDS = 1e-4      # phases predicted or measured below this are too small to fit


@dataclass(frozen=True)
class PhaseFactor:
    """Measured/predicted factor of one (family, algorithm, phase) at ``p`` processes (0: any p),
    with its evidence."""

    family: str
    algorithm: str
    phase: str
    factor: float
    points: int
    spread: float        # interquartile range of log(measured/predicted)
    ape_before: float    # median APE of the analytical phase on the fitting runs (%)
    ape_after: float     # median APE with the factor applied (%)
    p: int = 0


def fit_phase_factors(rows: Iterable[dict]) -> list[PhaseFactor]:
    """Factors from runs ``{"family", "algorithm", "p", "predicted": {phase: s}, "measured": {phase: s}}``
    (predicted = the analytical model): one per (family, algorithm, phase) over all p, and one per
    process count p where its runs allow (oversubscribed ranks behave unlike the others); groups
    with fewer than MIN_POINTS usable runs are skipped."""
    ratios: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        for phase in PHASE_NAMES:
            p, m = row["predicted"].get(phase, 0.0), row["measured"].get(phase, 0.0)
            if p > MIN_SECONDS and m > MIN_SECONDS:
                for procs in {0, int(row.get("p", 0))}:
                    ratios[row["family"], row["algorithm"], phase, procs].append(m / p)
    out = []
    for (family, algorithm, phase, procs), r in sorted(ratios.items()):
        if len(r) < MIN_POINTS:
            continue
        logs = np.log(r)
        factor = _best_factor(r)
        if factor == 1.0 and procs == 0:
            continue      # no factor beats the analytical phase (kept per p: it overrides the pooled one)
        q1, q3 = np.percentile(logs, [25, 75])
        out.append(PhaseFactor(family, algorithm, phase, factor, len(r), float(q3 - q1),
                               _median_ape(1.0, r), _median_ape(factor, r), procs))
    return out


def _best_factor(ratios: list[float]) -> float:
    """The factor with the lowest median APE: 1 (the analytical phase), the geometric median of
    measured/predicted, or any observed ratio (APE is relative to the measured time, so with
    widely spread ratios the geometric median can be worse than no factor at all)."""
    options = [1.0, float(np.exp(np.median(np.log(ratios)))), *map(float, ratios)]
    return min(options, key=lambda f: (_median_ape(f, ratios), abs(np.log(f))))


def _median_ape(factor: float, ratios: list[float]) -> float:
    """Median APE (%) of ``factor x analytical`` against measured = ratio x analytical."""
    return float(np.median(np.abs(factor / np.asarray(ratios) - 1.0)) * 100)


class PhaseFactors:
    """Lookup of fitted factors; 1 where none was fitted. ``info``: what they were fitted from,
    ``updated``: when they were stored; ``plans``: the fitted T(n, p) of the same runs
    (``models.fitted_plans``), which replace the factored model where they are in use."""

    def __init__(self, factors: Iterable[PhaseFactor] = (), info: dict | None = None, updated: str = "",
                 plans: Iterable[PlanFit] = ()):
        self.factors = list(factors)
        self._by_key = {(f.family, f.algorithm, f.phase, f.p): f.factor for f in self.factors}
        self.info, self.updated = dict(info or {}), updated
        self.plans = PlanFits(plans)

    def family_infos(self) -> dict[str, dict]:
        """Per family calibrated (factors or not): its runs' ``sizes``, ``runs``, ``fitted`` date."""
        shared = {"sizes": self.info.get("sizes", []), "fitted": self.updated}   # one fit's info for all
        return dict(self.info.get("families") or {f.family: shared for f in self.factors})

    def __bool__(self) -> bool:
        return bool(self._by_key) or bool(self.plans)

    def factor(self, family: str, algorithm: str, phase: str, p: int = 0) -> float:
        """The factor fitted at ``p`` processes, else over all p, else 1."""
        key = (family, algorithm, phase)
        return self._by_key.get((*key, int(p)), self._by_key.get((*key, 0), 1.0))

    def apply(self, family: str, algorithm: str, phases: dict[str, float], p: int = 0) -> dict[str, float]:
        """``phases`` (the four phases and the total) each scaled by its fitted factor."""
        if not self._by_key:
            return phases
        return {ph: phases.get(ph, 0.0) * self.factor(family, algorithm, ph, p) for ph in PHASE_NAMES}


def save_phase_factors(path: str | os.PathLike, key: str, factors: Iterable[PhaseFactor],
                       info: dict | None = None, plans: Iterable[PlanFit] = ()) -> None:
    """Write one platform's factors and plan models (stored by ``db.phase_factors``), keeping the
    rest of the database."""
    save_phase_records(path, key, (asdict(f) for f in factors), info, (f.record() for f in plans))


def load_phase_factors(path: str | os.PathLike | None, key: str | None) -> PhaseFactors:
    """The platform's fitted factors, or none (the analytical models) when absent or unreadable."""
    return load_phase_records(path, key, _build, PhaseFactors)


def platform_factors(sp: SystemParameters, cp: CommParams) -> PhaseFactors:
    """The factors stored for ``cp``'s MPI platform in the database ``sp`` was read from."""
    return load_phase_factors(getattr(sp, "path", None), cp.platform.get("key"))


def _build(rows: list[dict], meta: dict) -> PhaseFactors:
    return PhaseFactors((PhaseFactor(**r) for r in rows), meta.get("info"), meta.get("updated", ""),
                        (PlanFit.from_record(r) for r in meta.get("plans", ())))


__all__ = ["GROUP", "PHASE_NAMES", "PhaseFactor", "PhaseFactors", "fit_phase_factors", "load_phase_factors",
           "platform_factors", "save_phase_factors"]
