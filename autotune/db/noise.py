"""Whether the machine was busy while the probe timed each point: noise bits, per-series noise, verdict.

Each ``/k`` record holds, over its timed samples, the wall and process CPU seconds (``t_wall``,
``t_cpu``), the share of the CPU its threads got (``cpu_share``: the lower of the measuring thread's
CPU time over wall time and, where Linux's schedstat is read, the threads' CPU time over CPU time
plus run-queue wait; 1 on a quiet machine at any thread count, about 0.5 for two threads sharing
their cores with two busy programs) and its noise bits (``noise``). A record of schema 3 or before
has 0 in all four: not checked, never noisy. The probe measures a noisy point again
(``install_probe.runner``) and keeps it flagged if it stays so; the install and ``autotune show``
print ``verdict``. ``noise_of`` and ``series_noise`` give the noise of each series, which ``autotune
show`` prints; they are provided for selection to price a series' uncertainty with (issue 61 item 3).
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from autotune.core.assumptions import MAX_SPREAD, MIN_CPU_SHARE

from .lookup import remeasure_command
from .store import valid_mask

NOISE_CPU = 1        # its threads got less than MIN_CPU_SHARE of the CPU: another program took cores
NOISE_SPREAD = 2     # its repeats' interquartile range exceeded MAX_SPREAD times their median
NOISE_RETRIED = 4    # noisy when first measured; the record kept is from a quiet measurement
NOISY = NOISE_CPU | NOISE_SPREAD
SERIES_LISTED = 4    # series a verdict names before "and N more"

SeriesKey = tuple[str, str, int, str]      # (routine, backend, threads, pattern)


def noise_bits(cpu_share: float, spread: float) -> int:
    """The noise bits of one measurement: NOISE_CPU below MIN_CPU_SHARE (0: not measured, never
    noisy), NOISE_SPREAD above MAX_SPREAD."""
    starved = 0 < cpu_share < MIN_CPU_SHARE
    return (NOISE_CPU if starved else 0) | (NOISE_SPREAD if spread > MAX_SPREAD else 0)


def spreads(records: np.ndarray) -> np.ndarray:
    """Each record's interquartile range over its median (0 where the median is 0)."""
    med = records["t_median"]
    return np.divide(records["t_q3"] - records["t_q1"], med, out=np.zeros(len(records)), where=med > 0)


def noisy_mask(records: np.ndarray) -> np.ndarray:
    """True where a record was kept noisy (NOISE_CPU or NOISE_SPREAD)."""
    return (records["noise"] & NOISY) != 0


@dataclass(frozen=True)
class SeriesNoise:
    """The noise of one measured series: how many of its points were checked and kept noisy (and
    of those, short of CPU), the share noisy of those checked, the median spread of all its
    points and the median CPU share of those checked (0: none checked)."""

    points: int
    checked: int
    noisy: int
    starved: int
    noisy_share: float
    median_spread: float
    median_cpu_share: float


def noise_of(rows: np.ndarray) -> SeriesNoise:
    """The ``SeriesNoise`` of one series' usable records (the caller groups and filters them)."""
    checked = rows[rows["cpu_share"] > 0]
    noisy = checked[noisy_mask(checked)]
    share = len(noisy) / len(checked) if len(checked) else 0.0
    cpu = float(np.median(checked["cpu_share"])) if len(checked) else 0.0
    return SeriesNoise(len(rows), len(checked), len(noisy), int(((noisy["noise"] & NOISE_CPU) != 0).sum()),
                       share, float(np.median(spreads(rows))), cpu)


def series_noise(records: np.ndarray) -> dict[SeriesKey, SeriesNoise]:
    """(routine, backend, threads, pattern) -> its ``noise_of``, over the usable records, by key."""
    records = records[valid_mask(records)]
    index: dict[SeriesKey, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        index[_series_key(r)].append(i)
    return {key: noise_of(records[index[key]]) for key in sorted(index)}


@dataclass(frozen=True)
class Verdict:
    """Whether the probe's points were measured on a quiet machine: ``state`` is "quiet", "busy"
    (points kept short of CPU), "noisy" (points kept with a wide spread only) or "unknown" (no
    point checked); ``lines`` says so, and what to do, in one or two lines."""

    state: str
    lines: tuple[str, ...]


def verdict(records: np.ndarray, run: dict | None = None, path: str | os.PathLike | None = None) -> Verdict:
    """The verdict on the usable ``records`` (``run``, ``path``: the run and file, for the command
    that measures the noisy points again)."""
    records = records[valid_mask(records)]
    checked = records[records["cpu_share"] > 0]
    unchecked = len(records) - len(checked)
    if not len(records):
        return Verdict("unknown", ())
    if not len(checked):
        return Verdict("unknown", ("verdict: unknown: these points were measured before autotune checked their CPU; "
                                   f"`{remeasure_command(run or {}, path, records[:0])}` measures again and checks",))
    noisy = checked[noisy_mask(checked)]
    tail = f"; {_points(unchecked)} measured before autotune checked their CPU not checked" if unchecked else ""
    if not len(noisy):
        retried = int(((checked["noise"] & NOISE_RETRIED) != 0).sum())
        again = f" ({retried} of {len(checked)} points were noisy at first and quiet when measured again)" if retried \
            else ""
        return Verdict("quiet", (f"verdict: quiet{again}{tail}",))
    command = _remeasure(records, noisy, run, path)
    head = f"{len(noisy)} of {len(checked)} points noisy in {_listed(noisy)}"
    starved = int(((noisy["noise"] & NOISE_CPU) != 0).sum())
    if starved:
        return Verdict("busy", (
            f"verdict: busy: {head}; {starved} of them got under {MIN_CPU_SHARE:.0%} of the CPU their threads "
            f"asked for{tail}",
            f"the machine was busy while measuring, so those points read slower than this machine is and tuned "
            f"calls choose from them: run `{command}` again on a quiet machine"))
    return Verdict("noisy", (
        f"verdict: noisy: {head}; their repeats spread over {MAX_SPREAD:.0%} of their median although their "
        f"threads got the CPU{tail}",
        f"their k are uncertain: `{command}` measures them again"))


def _points(n: int) -> str:
    return f"{n} point{'s' * (n != 1)}"


def _series_key(row) -> SeriesKey:
    return (row["routine"].decode(), row["backend"].decode(), int(row["threads"]), row["pattern"].decode())


def _listed(noisy: np.ndarray) -> str:
    """"N series (the SERIES_LISTED with most noisy points, and M more)"."""
    counts = Counter(_series_key(r) for r in noisy)
    order = sorted(counts, key=lambda k: (-counts[k], k))
    names = [f"{r}/{p} {b} {t}t" for r, b, t, p in order[:SERIES_LISTED]]
    more = f", and {len(order) - SERIES_LISTED} more" if len(order) > SERIES_LISTED else ""
    return f"{len(order)} series ({', '.join(names)}{more})"


def _remeasure(records: np.ndarray, noisy: np.ndarray, run: dict | None, path) -> str:
    """The install that measures the noisy points again: their routines only where they are at most
    half of those measured, else everything."""
    few = 2 * len(set(noisy["routine"])) <= len(set(records["routine"]))
    return remeasure_command(run or {}, path, noisy if few else noisy[:0])


__all__ = ["NOISE_CPU", "NOISE_RETRIED", "NOISE_SPREAD", "NOISY", "SeriesKey", "SeriesNoise", "Verdict",
           "noise_bits", "noise_of", "noisy_mask", "series_noise", "spreads", "verdict"]
