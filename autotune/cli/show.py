"""``autotune show``: what the database holds (machine, libraries, k series, pools, threads,
communication fits and calibrations), as text, JSON or plots."""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from autotune.cli.common import add_db_argument, error
from autotune.cli.show_comm import comm_curves, comm_json, comm_platforms, comm_plot_name, comm_summary
from autotune.cli.show_stencil import memory_lines
from autotune.db import DatabaseError, load, resolve
from autotune.db.comm import PRIMITIVES
from autotune.db.fingerprint import machine_fingerprint, mismatches
from autotune.db.lookup import INVALID, remeasure_command
from autotune.db.noise import noise_of, verdict
from autotune.db.pools import COLD, Transitions, load_transitions
from autotune.db.store import valid_mask
from autotune.db.threads import ThreadSPs, load_threads


def _series(records: np.ndarray, pattern: str = "square") -> dict[str, dict[tuple[str, int], dict]]:
    """routine -> (backend, threads) -> {size: GFLOP/s} for one pattern (valid records only)."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    records = records[valid_mask(records)]
    sel = records["pattern"] == pattern.encode()
    for r, k in zip(records[sel], records["k"][sel], strict=True):
        out[r["routine"].decode()][(r["backend"].decode(), int(r["threads"]))][int(r["x"])] = 1e-9 / k
    return out


def machine_lines(fingerprint: dict) -> list[str]:
    """The machine fingerprint in two lines: hardware, then software stack (and any other keys)."""
    f = dict(fingerprint)
    hw = (f"Machine: {f.pop('cpu_model', '?')} ({f.pop('machine', '?')}, {f.pop('system', '?')}), "
          f"{f.pop('physical_cores', '?')} cores, {f.pop('logical_cpus', '?')} logical CPUs, "
          f"{f.pop('threads_per_core', '?')} thread(s)/core, flags {f.pop('flags_digest', '?')}")
    stack = [f"{name} {f.pop(name)}" for name in ("python", "numpy", "scipy", "autotune") if name in f]
    stack += [f"{k} {v}" for k, v in sorted(f.items())]
    return [hw, "Stack: " + ", ".join(stack)]


def backend_lines(backends: dict, verbose: bool = False) -> list[str]:
    """One line per measured library: version and core (plus its shared object with ``verbose``)."""
    lines = ["Libraries:" if backends else "Libraries: none recorded"]
    for name, info in sorted(backends.items()):
        version = " ".join(str(info.get("version", "")).split())
        core = info.get("corename", "")
        text = f"  {name:16s} {version}" + (f" ({core})" if core and core not in version else "")
        lines.append(text + (f" [{info.get('library', '')}]" if verbose else ""))
    return lines


def best_table(records: np.ndarray) -> list[str]:
    """Best GFLOP/s of each routine and library (square operands) per thread count, with the
    size range measured: one row per routine x library."""
    series = _series(records)
    threads = sorted({t for curves in series.values() for _, t in curves})
    if not threads:
        return ["No square-operand measurements." if len(records) else
                "No measurements: run `autotune-install` to measure this machine."]
    lines = ["Best GFLOP/s (square operands) by thread count:",
             f"  {'routine':8s}{'library':18s}" + "".join(f"{'t=' + str(t):>9s}" for t in threads) + "  n measured"]
    for routine, curves in sorted(series.items()):
        for be in sorted({b for b, _ in curves}):
            cells = "".join(f"{max(curves[(be, t)].values()):9.2f}" if (be, t) in curves else f"{'-':>9s}"
                            for t in threads)
            sizes = sorted({x for (b, _), pts in curves.items() if b == be for x in pts})
            lines.append(f"  {routine:8s}{be:18s}{cells}  {sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)")
    return lines


def other_patterns_line(records: np.ndarray) -> list[str]:
    """Which routines were measured in each non-square pattern (blocked-algorithm parts), one line."""
    groups: dict[str, set[str]] = defaultdict(set)
    for pattern, routine in zip(records["pattern"], records["routine"], strict=True):
        if pattern != b"square":
            groups[pattern.decode()].add(routine.decode())
    if not groups:
        return []
    parts = [f"{p}: {' '.join(sorted(rs))}" for p, rs in sorted(groups.items())]
    return ["", "Also measured (pattern: routines; --verbose lists every series): " + "; ".join(parts)]


def series_lines(records: np.ndarray) -> list[str]:
    """One line per series of the usable ``records``: routine/pattern, backend, threads, point count,
    sizes, params and how many points were kept noisy."""
    lines = [f"Measured series ({len(records)} points): routine/pattern x backend x threads, sizes"]
    for (rt, pat, be, t), rows in _group_rows(records).items():
        params = sorted({float(p) for p in rows["param"] if p})
        extra = f", params {', '.join(f'{p:g}' for p in params)}" if params else ""
        noisy = noise_of(rows).noisy
        extra += f", {noisy} noisy" if noisy else ""
        lines.append(f"  {rt:6s}/{pat:8s} {be:16s} t={t}: {len(rows):3d} points, "
                     f"n {rows['x'].min()}..{rows['x'].max()}{extra}")
    return lines


def invalid_note(db, path) -> list[str]:
    """A note on records the runtime ignores (``valid_mask``), if any."""
    bad = db.records[~valid_mask(db.records)]
    if not len(bad):
        return []
    return [f"NOTE: {len(bad)} of {len(db.records)} measurements have {INVALID} and are ignored; "
            f"re-measure with `{remeasure_command(db.run, path, bad)}`"]


def summary(db, path=None, verbose: bool = False) -> list[str]:
    """Fingerprint, libraries, last run and the best-GFLOP/s table (every series with ``verbose``)."""
    usable = db.records[valid_mask(db.records)]
    lines = machine_lines(db.fingerprint) + backend_lines(db.backends, verbose) + [_run_line(db)]
    lines += verdict_lines(db, path)
    lines += invalid_note(db, path)
    lines += [""] + best_table(usable)
    lines += [""] + series_lines(usable) if verbose else other_patterns_line(usable)
    return lines


def verdict_lines(db, path=None) -> list[str]:
    """The probe's verdict on its points (``db.noise.verdict``, as ``autotune-install`` ends with it)."""
    lines = verdict(db.records, db.run, path).lines
    return [line[0].upper() + line[1:] if i == 0 else f"  {line}" for i, line in enumerate(lines)]


def _run_line(db) -> str:
    """The last probe run: profile, whether it finished, points held."""
    run = db.run
    if not run:
        return f"Last run: none recorded, {len(db.records)} points"
    state = "complete" if run.get("complete") else "INCOMPLETE (autotune-install --resume)"
    return f"Last run: profile {run.get('profile')!r}, {state}, {len(db.records)} points"


def summary_json(db) -> dict:
    """Everything the text summary shows, machine-readable: every series and its best GFLOP/s."""
    ok = valid_mask(db.records)
    series = []
    for (routine, pattern, backend, threads), rows in _group_rows(db.records[ok]).items():
        gf = 1e-9 / rows["k"]
        n = noise_of(rows)
        series.append({"routine": routine, "pattern": pattern, "backend": backend, "threads": threads,
                       "points": len(rows), "sizes": sorted({int(x) for x in rows["x"]}),
                       "params": sorted({float(p) for p in rows["param"] if p}),
                       "best_gflops": float(gf.max()), "best_at": int(rows["x"][int(gf.argmax())]),
                       "noisy_points": n.noisy, "median_spread": n.median_spread,
                       "median_cpu_share": n.median_cpu_share})
    found = verdict(db.records, db.run)
    return {"fingerprint": db.fingerprint, "backends": db.backends, "run": db.run, "points": len(db.records),
            "invalid_points": int((~ok).sum()), "series": series,
            "verdict": {"state": found.state, "lines": list(found.lines)}}


def _group_rows(records: np.ndarray) -> dict[tuple, np.ndarray]:
    """(routine, pattern, backend, threads) -> its records, sorted by key."""
    keys = [(r["routine"].decode(), r["pattern"].decode(), r["backend"].decode(), int(r["threads"]))
            for r in records]
    index: dict = defaultdict(list)
    for i, key in enumerate(keys):
        index[key].append(i)
    return {key: records[index[key]] for key in sorted(index)}


def gflops_tables(records: np.ndarray) -> list[str]:
    """GFLOP/s per routine (square operands): sizes down, backend/threads across."""
    lines = []
    for routine, curves in sorted(_series(records).items()):
        cols = sorted(curves)
        sizes = sorted({x for c in curves.values() for x in c})
        lines.append(f"\n{routine} GFLOP/s")
        lines.append("      n " + "".join(f"{b[:14]+'/'+str(t):>18s}" for b, t in cols))
        for x in sizes:
            cells = "".join(f"{curves[c][x]:18.2f}" if x in curves[c] else f"{'-':>18s}" for c in cols)
            lines.append(f"{x:7d} {cells}")
    return lines


def plot(db, filename: str) -> None:
    """GFLOP/s against size, one panel per routine, one line per backend and thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(db.records)
    names = sorted({be for curves in series.values() for be, _ in curves})
    colour = {be: f"C{i}" for i, be in enumerate(names)}
    n = len(series)
    cols = min(3, max(n, 1))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (routine, curves) in zip(axes.flat, sorted(series.items()), strict=False):
        for (be, t), pts in sorted(curves.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", ms=3, color=colour[be], ls="-" if t == 1 else "--",
                    label=f"{be} t={t}")
        ax.set_xscale("log", base=2)
        ax.set_title(routine)
        ax.set_xlabel("n")
        ax.set_ylabel("GFLOP/s")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    present = sorted({key for curves in series.values() for key in curves})
    handles = [plt.Line2D([], [], color=colour[be], ls="-" if t == 1 else "--", label=f"{be} {t} thread{'s' * (t > 1)}")
               for be, t in present]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8)
    fig.suptitle(f"{db.fingerprint.get('cpu_model', '')}: measured GFLOP/s")
    fig.tight_layout(rect=(0, 0.025 * ((len(handles) + 4) // 5), 1, 1))
    fig.savefig(filename, dpi=110)
    plt.close(fig)


def cmd_show(args) -> int:
    """Print what the database holds (``--json``: machine-readable; ``--plot``: also draw it)."""
    path = resolve(args.db)
    problem = _plot_problem(args.plot) if args.plot else ""
    if problem:
        return error("show", problem, 2)
    platforms = comm_platforms(path)
    try:
        db = load(path, check_machine=False)
    except DatabaseError as exc:
        if not platforms:
            return error("show", str(exc), 1)
        db, blas_error = None, str(exc)
    if args.json:
        out = summary_json(db) if db is not None else {"error": blas_error}
        if platforms:
            out["comm"] = [comm_json(q, path) for q in platforms]
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    print(f"Database: {path}")
    if db is not None:
        diff = mismatches(db.fingerprint, machine_fingerprint())
        if diff:
            print("NOTE: measured on another machine or stack; the runtime will not use it (" + "; ".join(diff) + ")")
        print("\n".join(summary(db, path, args.verbose) + gflops_tables(db.records) + memory_lines(db.records)
                        + pool_lines(load_transitions(path)) + thread_lines(load_threads(path))))
    else:
        print(f"BLAS/LAPACK: {blas_error}")
    if platforms:
        print("\n" + "\n".join(comm_summary(platforms, args.verbose, path)))
    if args.plot:
        try:
            _write_plots(db, platforms, args.plot)
        except OSError as exc:
            return error("show", f"cannot write the plot: {exc}", 1)
    return 0


def pool_lines(tr: Transitions) -> list[str]:
    """The measured cross-call costs: per call (library, threads, size) its extra right after a call
    on each library and thread count, and after an idle spell; empty when nothing was measured."""
    if tr.empty:
        return ["", "Thread pools: not measured (autotune-install --profile quick|standard measures them)"]
    froms = sorted({k[:2] for k in tr.pairs() if k[0] != COLD})
    names = [f"{b} {t}t" for b, t in froms] + ["idle spell"]
    lines = ["", f"Thread pools: extra ms of a call right after a call on (hot window "
                 f"{tr.hot_window * 1e3:g} ms; measured {tr.info.get('updated', '?')}):",
             f"  {'call (own ms)':<36}" + "".join(f"{n:>20}" for n in names)]
    for to in sorted({k[2:] for k in tr.pairs()}):
        own = tr.curve(next(k for k in tr.pairs() if k[2:] == to))[0]
        for j, t in enumerate(own):
            cells = []
            for frm in froms + [(COLD, 0)]:
                extra = tr.curve(frm + to)[1] if frm + to in tr.pairs() else ()
                cells.append(f"{extra[j] * 1e3:+20.3f}" if j < len(extra) else f"{'-':>20}")
            lines.append(f"  {f'{to[0]} {to[1]}t gemm ({t * 1e3:.3f})':<36}" + "".join(cells))
    return lines


def thread_lines(sps: ThreadSPs) -> list[str]:
    """The thread system parameters of each kernel version (001 §6.3.1), one line each."""
    if not sps.measured:
        return ["", "Thread SPs: not measured"]
    lines = ["", f"Thread SPs per kernel version ({sps.cores} cores; T_sw/T_cpu: oversubscription ratio):"]
    for name, v in sorted(sps.versions.items()):
        lines.append(f"  {name:<6} T_gen {v.t_gen * 1e6:9.2f} us  T_work {v.t_work * 1e9:7.3f} ns  "
                     f"T_syn {v.t_syn * 1e6:9.2f} us  T_sw/T_cpu {v.sw_cpu:.3f}")
    drv = sps.strassen.driver if sps.strassen is not None else {}
    if drv:
        lines.append(f"  nested Strassen driver, ns per element of C beyond its products at n = "
                     f"{', '.join(str(n) for n in drv['sizes'])}:")
        for (p1, p2, lv), col in zip(drv["configs"], np.asarray(drv["seconds"]).T, strict=True):
            lines.append(f"    P1 {p1} x P2 {p2}, {lv} level{'s' if lv > 1 else ''}: "
                         + " ".join(f"{x * 1e9:7.2f}" for x in col))
    return lines


def _plot_problem(filename: str) -> str:
    """Why ``--plot FILE`` cannot be written ("" if it can): its directory must exist (it is not
    created: a mistyped path should not leave new directories behind) and its format be known."""
    target = Path(filename).expanduser()
    if not target.parent.is_dir():
        return f"--plot {filename}: directory {target.parent} does not exist"
    if not os.access(target.parent, os.W_OK):
        return f"--plot {filename}: directory {target.parent} is not writable"
    if target.is_dir():
        return f"--plot {filename}: is a directory, give a file name such as {target / 'sp.png'}"
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = target.suffix.lstrip(".").lower()
    if suffix and suffix not in formats:
        return f"--plot {filename}: unknown image format {suffix!r} (use one of {', '.join(sorted(formats))})"
    return ""


def _write_plots(db, platforms: list, filename: str) -> None:
    """Draw the GFLOP/s plot (if anything square was measured) and the communication plot."""
    if db is not None and _series(db.records):
        plot(db, filename)
        print(f"\nplot written to {filename}")
    if platforms:
        comm_file = comm_plot_name(filename)
        plot_comm(platforms, comm_file)
        print(f"communication plot written to {comm_file}")


# -- MPI communication parameters (autotune.db.comm) ----------------------------------------------























def plot_comm(platforms, filename: str) -> None:
    """Time against message size per primitive: measured medians (markers) and fitted regimes (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prims = [x for x in PRIMITIVES if any((q.points["primitive"] == x.encode()).any() for q in platforms)]
    cols = min(4, max(len(prims), 1))
    rows = (len(prims) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, prim in zip(axes.flat, prims, strict=False):
        n = 0
        for qi, q in enumerate(platforms):
            for (pr, p, r, c), fits in comm_curves(q.fits).items():
                if pr != prim:
                    continue
                sel = ((q.points["primitive"] == prim.encode()) & (q.points["p"] == p) & (q.points["r"] == r)
                       & (q.points["c"] == c))
                pts = np.sort(q.points[sel], order="nbytes")
                colour = f"C{n % 10}"
                n += 1
                label = f"P={q.P}{'*' if q.info.get('oversubscribed') else ''} p={p}" + (f" {r}x{c}" if r else "")
                ax.plot(pts["nbytes"], pts["t_mean"] * 1e6, "o", ms=2.5, color=colour, label=label)
                lo, hi = float(pts["nbytes"].min()), float(pts["nbytes"].max())
                for f in fits:
                    a, b = max(f["lo"], lo), min(f["hi"], hi)
                    if a <= b:
                        xs = np.geomspace(max(a, 1.0), b, 20)
                        ax.plot(xs, (f["ts"] + f["tw"] * xs) * 1e6, styles[qi % 4], color=colour, lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(prim)
        ax.set_xlabel("bytes")
        ax.set_ylabel("us")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(prims):]:
        ax.set_visible(False)
    fig.suptitle("MPI: measured time (markers) and Hockney fits per regime (lines); * oversubscribed")
    fig.tight_layout()
    fig.savefig(filename, dpi=110)
    plt.close(fig)


HELP = "print what the system-parameter database holds"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw GFLOP/s against size (and MPI time against size into FILE-comm.png)")
    p.add_argument("--json", action="store_true", help="machine-readable summary (every series)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also list every measured series, library paths and every MPI fit regime")


run = cmd_show
