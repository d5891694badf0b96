"""``autotune bench comm-fit DB [OTHER_DB]``: is a (ts, tw) fit's held-out miss the fit's fault or
the data's? How repeatable is the communication probe?

The held-out sizes are the midpoints the probe timed (``heldout: midpoints``), else every other
size of each curve, as ``comm.heldout`` checks a probe without them. A regime passes when every
held-out size in it is within ``--tol`` (the acceptance bound, read
strictly); the summary also counts regimes whose median held-out error is within it.
For each regime whose held-out max error exceeds ``--tol``:

- ``off neighbours``: held-out misses that are also more than ``--tol`` off the log-log
  interpolation between their two measured neighbours. No smooth curve through the measured sizes
  predicts them: they are the measurement's noise, not the fit's error;
- ``best line``: the smallest max error any single (ts, tw) line reaches on the regime's held-out
  points (a linear programme on those points themselves, so a floor for any line fitted on others).

The (p, m) models (``autotune.models.comm_scaling``): their held-out error at each measured process
count left out in turn (but the two smallest), refitted from the stored points, median and max
per primitive.

With ``OTHER_DB``, a second probe of the same platform (same code, another moment): per
primitive and size band, the median ratio of the two probes' times and its spread, and how many
warm regimes the other probe's fits pass. Nothing is re-timed; results only where ``--out`` says.

    autotune bench comm-fit RESULTS/p2.h5 [RESULTS/p2-again.h5] [--out RESULTS/comm-fit.json]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.optimize import linprog

from autotune.benchmarks._common import output_problem, write_json
from autotune.cli.common import error
from autotune.db import comm as dbc
from autotune.models import comm_fit, comm_train
from autotune.models import comm_scaling as scaling
from autotune.models.comm_train import BANDS

HELP = "held-out check of a comm probe's (ts, tw) fits, and two probes' repeatability"
# The per-kind counts regime_report gathers, in order.
COUNTS = ("regimes", "passing", "failing_only_off_neighbours", "heldout_errors", "median_within_tol")


def best_line_max_error(nbytes, times) -> float:
    """min over ts, tw >= 0 of max |ts + tw m - t| / t: the best any one line does on these points."""
    m, t = np.asarray(nbytes, float), np.asarray(times, float)
    if len(t) <= 2:
        return 0.0
    scale = m.max() or 1.0
    rows = np.column_stack([1.0 / t, m / scale / t, -np.ones_like(t)])
    res = linprog([0.0, 0.0, 1.0], A_ub=np.vstack([rows, -rows * [1, 1, -1]]),
                  b_ub=np.r_[np.ones_like(t), -np.ones_like(t)], bounds=[(0, None)] * 3, method="highs")
    return float(res.x[2]) if res.success else float("nan")


def off_neighbours(m_fit, t_fit, nbytes, times, tol: float) -> np.ndarray:
    """Per point: more than ``tol`` off the log-log line between its two measured neighbours
    (False where it has no neighbour on one side)."""
    order = np.argsort(m_fit)
    lm, lt = np.log(np.asarray(m_fit, float)[order]), np.log(np.asarray(t_fit, float)[order])
    x, t = np.log(np.asarray(nbytes, float)), np.asarray(times, float)
    inside = (x > lm[0]) & (x < lm[-1])
    guess = np.exp(np.interp(x, lm, lt))
    return inside & (np.abs(guess - t) / t > tol)


def every_other(n: int) -> np.ndarray:
    """The sizes ``comm.heldout`` holds out of a curve of ``n`` (ascending): the second, fourth, ...
    but never the last (a probe without midpoints is checked so)."""
    out = np.zeros(n, dtype=bool)
    out[1::2] = True
    out[-1:] = False
    return out if n >= 4 else np.zeros(n, dtype=bool)


def regime_report(platform: dbc.Platform, tol: float, fits_from: dbc.Platform | None = None) -> tuple[list[str], dict]:
    """Lines on every failing regime, and counts per kind (warm / cold), in the order of COUNTS.

    Counted: regimes, passing (every held-out point within ``tol``), failing only by points off
    their neighbours, the held-out points' relative errors (a list), regimes whose median held-out
    error is within ``tol``. ``fits_from``: judge with that platform's fits instead.
    """
    held = np.asarray(platform.info.get("heldout_sizes", []), float)
    lines, counts = [], {"warm": [0, 0, 0, [], 0], "cold": [0, 0, 0, [], 0]}
    other = dict(comm_fit.curves(fits_from.points)) if fits_from is not None else None
    for key, q in comm_fit.curves(platform.points):
        m, t = q["nbytes"].astype(float), q["t_mean"]
        mine = held if len(held) else m[every_other(len(m))]
        is_held = np.isin(m, mine)
        if is_held.sum() == 0 or (~is_held).sum() < 2:
            continue
        src = q if other is None else other.get(key)
        if src is None:
            continue
        keep = ~np.isin(src["nbytes"].astype(float), mine)
        fit = comm_fit.fit_hockney(src["nbytes"][keep].astype(float), src["t_mean"][keep])
        lines += _curve_report(key, fit, m, t, is_held, tol, counts["cold" if key[0].endswith("_cold") else "warm"])
    return lines, counts


def _curve_report(key: tuple, fit: comm_fit.HockneyFit, m: np.ndarray, t: np.ndarray, is_held: np.ndarray,
                  tol: float, counts: list) -> list[str]:
    """Count one curve's regimes into ``counts`` (one kind's list); a line per failing regime."""
    err = comm_fit.relative_errors(fit, m[is_held], t[is_held])
    noisy = off_neighbours(m[~is_held], t[~is_held], m[is_held], t[is_held], tol)
    where = fit.index(m[is_held])
    counts[3].extend(err)
    lines = []
    for i, reg in enumerate(fit.regimes):
        mine = where == i
        if not mine.any():
            continue
        miss = mine & (err > tol)
        counts[0] += 1
        counts[1] += not miss.any()
        counts[4] += bool(np.median(err[mine]) <= tol)
        if not miss.any():
            continue
        counts[2] += bool(np.all(noisy[miss]))
        lines.append(f"{key[0]:13s} p={key[1]} grid={key[2]}x{key[3]} [{reg.lo:.0f}, {reg.hi:.0f}) B: "
                     f"{miss.sum()} of {mine.sum()} held-out > {tol:.0%} (max {err[mine].max():.0%}), "
                     f"{np.sum(noisy[miss])} of them off their neighbours; best line "
                     f"{best_line_max_error(m[is_held][mine], t[is_held][mine]):.0%}")
    return lines


def retest(a: dbc.Platform, b: dbc.Platform) -> list[str]:
    """Median ratio and 10-90% range of two probes' times, per primitive and size band."""
    times = {(*key, int(r["nbytes"])): float(r["t_mean"]) for key, q in comm_fit.curves(a.points) for r in q}
    groups: dict = {}
    for key, q in comm_fit.curves(b.points):
        for r in q:
            mine = times.get((*key, int(r["nbytes"])))
            band = next(name for lo, hi, name in BANDS if lo <= r["nbytes"] < hi)
            if mine is not None:
                groups.setdefault((key[0], key[1], band), []).append(mine / float(r["t_mean"]))
    out = []
    for (prim, p, band), ratios in sorted(groups.items()):
        x = np.array(ratios)
        lo, hi = np.percentile(x, [10, 90])
        out.append(f"{prim:13s} p={p} {band:10s} A/B median {np.median(x):.2f} [10-90%: {lo:.2f}-{hi:.2f}], "
                   f"{np.mean(np.abs(x - 1) > 0.1):.0%} of {len(x)} sizes differ > 10%")
    return out


def summary_line(name: str, counts: dict, tol: float) -> str:
    """Regimes passing per kind, and the held-out points: share within ``tol``, median error."""
    err = np.concatenate([np.asarray(c[3], float) for c in counts.values()])
    regimes = "; ".join(f"{kind}: {c[1]}/{c[0]} regimes pass, {c[2]} of the {c[0] - c[1]} failing only at "
                        f"points off their neighbours, {c[4]}/{c[0]} with median error within {tol:.0%}"
                        for kind, c in counts.items() if c[0])
    points = (f"; held-out points within {tol:.0%}: {np.mean(err <= tol):.1%} of {len(err)}, "
              f"median error {np.median(err):.2%}") if len(err) else ""
    return f"{regimes}{points} ({name})"


def _as_json(counts: dict) -> dict:
    """The counts per kind keyed by COUNTS' names, errors as floats."""
    return {kind: dict(zip(COUNTS, (*c[:3], [float(e) for e in c[3]], c[4]), strict=True))
            for kind, c in counts.items()}


def p_heldout(platform: dbc.Platform) -> dict:
    """The (p, m) models' held-out error at each measured p left out (``comm_scaling.heldout_errors``),
    from the stored points, as the probe computed it."""
    return scaling.heldout_errors(platform.points, platform.info.get("heldout_sizes", []),
                                  max_regimes=int(platform.info.get("max_regimes", 8)))


def check(platform: dbc.Platform, other: dbc.Platform | None, tol: float) -> dict:
    """One platform's report: failing regimes, counts, summary, the (p, m) models' held-out error
    at the p left out; with ``other``, the retest too."""
    lines, counts = regime_report(platform, tol)
    held = p_heldout(platform)
    doc = {"key": platform.key, "failing": lines, "counts": _as_json(counts),
           "summary": summary_line("own fits", counts, tol), "p_heldout": held,
           "p_heldout_lines": scaling.heldout_lines(held, scaling.measured_p(platform.points))}
    doc["loggp"], doc["loggp_lines"] = loggp_report(platform)
    if other is not None:
        theirs = regime_report(platform, tol, fits_from=other)[1]
        doc.update(retest=retest(platform, other), other_counts=_as_json(theirs),
                   other_summary=summary_line("the other probe's fits on this probe's held-out points", theirs, tol))
    return doc


def loggp_report(platform: dbc.Platform) -> tuple[dict | None, list[str]]:
    """LoOgGP against Hockney on the PRTT runs, per message band (``comm_train.compare``), and the
    model each band's trains are priced by."""
    if platform.prtt is None or len(platform.prtt) < 4 or not platform.loggp:
        return None, ["LoOgGP: no PRTT runs in this probe"]
    pp = platform.points[platform.points["primitive"] == b"pingpong"]
    cmp = comm_train.compare(platform.prtt, (pp["nbytes"], pp["t_mean"]), platform.fits)
    lines = ["LoOgGP vs Hockney, median held-out error on the PRTT runs (one round trip | a train of "
             f"{int(platform.prtt['n'][0])}), fitted on every other size:"]
    for i, (_, _, name) in enumerate(BANDS):
        if not cmp["sizes"][i]:
            continue
        lg, hk = cmp["loggp_train"][i], cmp["hockney_train"][i]
        lines.append(f"  {name:11s} {cmp['sizes'][i]:2d} sizes: one {cmp['loggp_one'][i]:6.1%} | "
                     f"{cmp['hockney_one'][i]:6.1%}   train {lg:6.1%} | {hk:6.1%}   trains priced by "
                     f"{'LoOgGP' if lg < hk else 'Hockney'}")
    return cmp, lines


def _read(path: str) -> dict[str, dbc.Platform]:
    """Platform key -> platform of one database (OSError if missing or unreadable, ValueError if
    it holds no communication data)."""
    if not Path(path).expanduser().is_file():
        raise OSError("no such database")
    platforms = {pl.key: pl for pl in dbc.read_platforms(path)}
    if not platforms:
        raise ValueError("no communication data (run `autotune-install --mpi --db` on it first)")
    return platforms


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("db", metavar="DB", help="database holding a communication probe")
    p.add_argument("other", nargs="?", metavar="OTHER_DB", help="a second probe of the same platform")
    p.add_argument("--tol", type=float, default=0.1, help="acceptance bound on a held-out relative error")
    p.add_argument("--out", metavar="FILE.json", help="write every platform's report here")


def run(args) -> int:
    """Print each platform's failing regimes and summary (and the retest with OTHER_DB); write --out."""
    problem = output_problem("--out", args.out) or ("" if args.tol > 0 else "--tol must be positive")
    if problem:
        return error("bench comm-fit", problem, 2)
    loaded = []
    for path in filter(None, (args.db, args.other)):
        try:
            loaded.append(_read(path))
        except (OSError, ValueError) as exc:
            return error("bench comm-fit", f"{path}: {exc}", 2)
    mine, others = loaded[0], (loaded[1] if args.other else {})
    reports = [check(pl, others.get(key), args.tol) for key, pl in mine.items()]
    for doc in reports:
        print(f"== {doc['key']}")
        print("\n".join([*doc["failing"], doc["summary"], *doc["loggp_lines"], *doc["p_heldout_lines"]]))
        if "retest" in doc:
            print(f"-- against {args.other} (A = {args.db}, B = the other)")
            print("\n".join([*doc["retest"], doc["other_summary"]]))
    if args.out:
        write_json(args.out, {"db": args.db, "other": args.other, "tol": args.tol, "platforms": reports})
    return 0
