"""What ``autotune show`` prints of the communication parameters: each platform's fits, regimes and
calibrations, as text and JSON, and where their plot goes."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from autotune.db.comm import PRIMITIVES, library_id, loggp_lines, read_platforms
from autotune.models.fitted_phases import load_phase_factors


def comm_platforms(path) -> list:
    """The file's communication platforms; [] when it has none or cannot be read."""
    try:
        return sorted(read_platforms(path), key=lambda q: (q.P, q.key))
    except Exception:
        return []



def comm_plot_name(filename: str) -> str:
    p = Path(filename)
    return str(p.with_name(f"{p.stem}-comm{p.suffix or '.png'}"))



def comm_curves(fits: np.ndarray) -> dict[tuple, np.ndarray]:
    """(primitive, p, r, c) -> its fit rows, in primitive order."""
    keys = {(f["primitive"].decode(), int(f["p"]), int(f["r"]), int(f["c"])) for f in fits}
    order = sorted(keys, key=lambda k: (PRIMITIVES.index(k[0]) if k[0] in PRIMITIVES else 99, k[1:]))
    out = {}
    for k in order:
        sel = ((fits["primitive"] == k[0].encode()) & (fits["p"] == k[1]) & (fits["r"] == k[2])
               & (fits["c"] == k[3]))
        out[k] = np.sort(fits[sel], order="regime")
    return out



def _bytes(x: float) -> str:
    if not np.isfinite(x):
        return "inf"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= size:
            return f"{x / size:.4g} {unit}"
    return f"{x:.0f} B"



def comm_summary(platforms, verbose: bool = False, path=None) -> list[str]:
    """Per platform, one line per primitive and p (grid): regimes, small-message ts, large-message
    bandwidth, worst held-out error and breakpoints; ``verbose`` adds a line per regime; then the
    phase calibration the file at ``path`` holds for it."""
    lines = [f"MPI communication parameters ({len(platforms)} platform{'s' * (len(platforms) != 1)}):"]
    for q in platforms:
        info = q.info
        lines.append(f"  {q.key}: {library_id(info.get('library', ''))}")
        cores = "oversubscribed" if info.get("oversubscribed") else "dedicated cores"
        lines.append(f"    P={info.get('P')} ({cores}), "
                     f"{info.get('hosts', '?')} host(s), profile {info.get('profile', '?')!r}, {len(q.points)} points, "
                     f"measured {info.get('updated', '?')} in {info.get('seconds', 0):.0f} s")
        speeds = info.get("host_speeds") or {}
        if speeds:
            top = max(speeds.values()) or 1.0
            lines.append("    host speeds (one-thread dgemm): " + ", ".join(
                f"{h} {v:.1f} GF/s (x{v / top:.2f})" for h, v in sorted(speeds.items())))
        if q.loggp:
            lines += ["    " + x for x in loggp_lines(q.loggp)]
        for (prim, p, r, c), rows in comm_curves(q.fits).items():
            name = f"{prim} p={p}" + (f" grid {r}x{c}" if r else "")
            lines.append(f"    {name:26s} {_curve_brief(rows)}")
            if verbose:
                lines += [f"      {_regime_line(f)}" for f in rows]
        lines += ["    " + x for x in phase_calibration_lines(path, q.key)]
    return lines



def phase_calibration_lines(path, key: str) -> list[str]:
    """The platform's phase calibration: per family its sizes, runs and date, then per algorithm
    the factors (phase x factor, at p processes where fitted per p)."""
    factors = load_phase_factors(path, key) if path is not None else None
    if factors is None or not factors.family_infos():
        return ["phase calibration: none (analytical models only; autotune-install --mpi fits it)"]
    lines = []
    for family, info in sorted(factors.family_infos().items()):
        plans = max(int(info.get("plans", 1)), 1)
        runs = f", {plans} plans x {info['runs'] // plans} runs" if "runs" in info else ""
        lines.append(f"phase calibration {family}: n = {', '.join(map(str, info.get('sizes', []))) or '?'}"
                     f"{runs}, fitted {str(info.get('fitted', '?')).replace('T', ' ')[:16]}")
        by_alg = defaultdict(list)
        for f in factors.factors:
            pooled = factors.factor(family, f.algorithm, f.phase)
            if f.family == family and (not f.p or f.factor != pooled):    # per p only where it differs
                by_alg[f.algorithm].append(f"{f.phase}{f' (p={f.p})' if f.p else ''} x{f.factor:.2f}")
        lines += [f"  {alg:15s} {', '.join(items)}" for alg, items in sorted(by_alg.items())]
        lines += [f"  T(n, p) {_plan_fit_line(f)}" for f in factors.plans.fits if f.series.family == family]
    return lines



def _plan_fit_line(f) -> str:
    """One fitted plan series: its formula, what it was fitted on, its held-out error and whether it is used."""
    use = "in use" if f.in_use else "not used"
    return (f"{str(f.series).removeprefix(f.series.family + ' ')}: {f.formula}; p = "
            f"{', '.join(map(str, f.procs))}, {f.points} runs, held-out APE {f.ape_fit:.1f}% against "
            f"{f.ape_factor:.1f}% with the factors: {use}")



def _gbs(tw: float) -> str:
    return f"{1e-9 / tw:8.2f} GB/s" if tw > 0 else f"{'inf':>8s} GB/s"



def _curve_brief(rows: np.ndarray) -> str:
    """One fitted curve in one line: ts of its first regime, bandwidth of its last, the worst
    regime's held-out error, breakpoints."""
    held = rows[rows["n_heldout"] > 0]
    worst = float(np.nanmax(held["err_max"])) if len(held) else np.nan
    err = (f"held-out err med {100 * np.nanmax(held['err_med']):5.1f}% max {100 * worst:5.1f}%"
           f"{' (> 10%)' if worst > 0.10 else ''}" if np.isfinite(worst) else "held-out err -")
    bps = ", ".join(_bytes(b) for b in rows["lo"][1:]) or "none"
    return (f"{len(rows)} regime{'s' * (len(rows) != 1)}, ts {rows[0]['ts'] * 1e6:8.3f} us, "
            f"{_gbs(rows[-1]['tw'])} (large), {err}; breakpoints {bps}")



def _regime_line(f) -> str:
    """One regime of a fitted curve: byte range, ts, bandwidth, held-out error."""
    err = (f"held-out err med {100 * f['err_med']:5.1f}% max {100 * f['err_max']:5.1f}% "
           f"({f['n_heldout']} sizes){'  (> 10%)' if f['err_max'] > 0.10 else ''}"
           if f["n_heldout"] else "held-out err -")
    return (f"[{_bytes(f['lo']):>9s}, {_bytes(f['hi']):>9s}): ts {f['ts'] * 1e6:8.3f} us, "
            f"tw {_gbs(f['tw'])}; {err}")



def comm_json(q, path=None) -> dict:
    loggp = {k: v for k, v in q.loggp.items() if k not in ("o_s", "g_s", "sizes")} if q.loggp else None
    phases = load_phase_factors(path, q.key) if path is not None else None
    calibration = ({"families": phases.family_infos(), "factors": [vars(f) for f in phases.factors]}
                   if phases is not None and phases.family_infos() else None)
    return {"key": q.key, "platform": q.info, "points": len(q.points), "loggp": loggp,
            "phase_calibration": calibration,
            "fits": [{"primitive": f["primitive"].decode(), "p": int(f["p"]), "grid": [int(f["r"]), int(f["c"])],
                      "regime": int(f["regime"]), "lo": float(f["lo"]),
                      "hi": float(f["hi"]) if np.isfinite(f["hi"]) else None,
                      "ts": float(f["ts"]), "tw": float(f["tw"]),
                      "heldout_err_median": None if np.isnan(f["err_med"]) else float(f["err_med"]),
                      "heldout_err_max": None if np.isnan(f["err_max"]) else float(f["err_max"])}
                     for f in q.fits]}


