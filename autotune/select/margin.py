"""The final choice rule: the reference call (the family's library default) is kept unless another
candidate is predicted faster by more than its margin, INCUMBENT_MARGIN plus its series' measured
uncertainty (DESIGN §10)."""
from __future__ import annotations

import weakref

from autotune.core.assumptions import INCUMBENT_MARGIN, NOISY_MARGIN
from autotune.core.families import FAMILIES
from autotune.core.plans import Candidate
from autotune.db.lookup import SystemParameters
from autotune.db.noise import series_noise


def apply_margin(family: str, ranking: list, sp: SystemParameters) -> tuple[Candidate, Candidate | None, list[str],
                 float]:
    """The fastest of ``ranking`` (``rank.Ranked`` entries, fastest first) predicted ahead of the
    library default (the reference) by more than its ``candidate_margin``, else the default; with
    the notes and the margin of the best alternative."""
    alg, be = FAMILIES[family].incumbent
    defaults = [r for r in ranking if r.candidate.algorithm == alg and r.candidate.backend == be]
    best = ranking[0]
    if not defaults:
        return best.candidate, None, [], INCUMBENT_MARGIN
    inc = max(defaults, key=lambda r: r.candidate.threads)   # the library's default: all budget threads
    noise = _series_noise(sp)
    first = None
    for r in ranking:
        if r is inc or r.seconds * (1 + INCUMBENT_MARGIN) >= inc.seconds:
            break
        margin, why = candidate_margin(family, r.candidate, noise)
        first = first or (margin, why, r)
        if r.seconds * (1 + margin) < inc.seconds:
            return r.candidate, inc.candidate, [], margin
    if first is None:
        note = [] if inc is best else [f"kept the default {inc.candidate}: within {INCUMBENT_MARGIN:.0%} of "
                                       f"{best.candidate}"]
        return inc.candidate, inc.candidate, note, INCUMBENT_MARGIN
    margin, why, r = first
    return inc.candidate, inc.candidate, [f"kept the default {inc.candidate}: {r.candidate} is predicted "
                                          f"{inc.seconds / r.seconds - 1:.0%} faster, within its margin "
                                          f"{margin:.0%} ({why})"], margin


def candidate_margin(family: str, cand: Candidate, noise: dict) -> tuple[float, str]:
    """What ``cand`` must be predicted faster than the reference by: INCUMBENT_MARGIN plus its
    series' measured uncertainty (the median repeat spread of its family routine's square series,
    and NOISY_MARGIN times its share of points the probe kept noisy); why, in words."""
    fam = FAMILIES[family]
    routine = fam.routine or fam.several[0]
    n = noise.get((routine, cand.backend, cand.threads, "square"))
    if n is None:
        return INCUMBENT_MARGIN, f"the stated default {INCUMBENT_MARGIN:.0%}"
    extra = n.median_spread + NOISY_MARGIN * n.noisy_share
    return INCUMBENT_MARGIN + extra, (f"{INCUMBENT_MARGIN:.0%} + its {routine} series' repeat spread "
                                      f"{n.median_spread:.0%} and noisy share {n.noisy_share:.0%}")


_NOISE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _series_noise(sp: SystemParameters) -> dict:
    """``db.noise.series_noise`` of the database behind ``sp``, once per SystemParameters."""
    db = getattr(sp, "db", None)
    if db is None:
        return {}
    if sp not in _NOISE:
        _NOISE[sp] = series_noise(db.records)
    return _NOISE[sp]


__all__ = ["apply_margin", "candidate_margin"]
