"""``autotune``: inspect the database (``autotune show``) and the selector's choices (``autotune explain``)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from collections import defaultdict

import numpy as np

from autotune.db import DatabaseError, load, resolve
from autotune.db.fingerprint import machine_fingerprint, mismatches


def _series(records: np.ndarray, pattern: str = "square") -> dict[str, dict[tuple[str, int], dict]]:
    """routine -> (backend, threads) -> {size: GFLOP/s} for one pattern."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    sel = records["pattern"] == pattern.encode()
    for r, k in zip(records[sel], records["k"][sel], strict=True):
        out[r["routine"].decode()][(r["backend"].decode(), int(r["threads"]))][int(r["x"])] = 1e-9 / k
    return out


def summary(db) -> list[str]:
    """Fingerprint, backends and what was measured, as text lines."""
    lines = ["Machine fingerprint:"]
    lines += [f"  {k}: {v}" for k, v in sorted(db.fingerprint.items())]
    lines.append("Backends:")
    for name, info in sorted(db.backends.items()):
        lines.append(f"  {name}: {info.get('version', '')} {info.get('corename', '')} [{info.get('library', '')}]")
    run = db.run
    lines.append(f"Last run: profile {run.get('profile')!r}, "
                 f"{'complete' if run.get('complete') else 'INCOMPLETE (autotune-install --resume)'}")
    lines.append(f"Measured ({len(db.records)} points): routine/pattern x backend x threads, sizes")
    groups: dict = defaultdict(list)
    for r in db.records:
        key = (r["routine"].decode(), r["pattern"].decode(), r["backend"].decode(), int(r["threads"]))
        groups[key].append((int(r["x"]), float(r["param"])))
    for (rt, pat, be, t), pts in sorted(groups.items()):
        xs = [x for x, _ in pts]
        params = sorted({p for _, p in pts if p})
        extra = f", params {', '.join(f'{p:g}' for p in params)}" if params else ""
        lines.append(f"  {rt:6s}/{pat:8s} {be:16s} t={t}: {len(pts):3d} points, n {min(xs)}..{max(xs)}{extra}")
    return lines


def gflops_tables(db) -> list[str]:
    """GFLOP/s per routine (square operands): sizes down, backend/threads across."""
    lines = []
    for routine, curves in sorted(_series(db.records).items()):
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
    path = resolve(args.db)
    platforms = _comm_platforms(path)
    try:
        db = load(path, check_machine=False)
    except DatabaseError as exc:
        if not platforms:
            print(f"autotune show: {exc}", file=sys.stderr)
            return 1
        db, blas_error = None, str(exc)
    if args.json:
        out = {"fingerprint": db.fingerprint, "backends": db.backends, "run": db.run,
               "points": len(db.records)} if db is not None else {"error": blas_error}
        if platforms:
            out["comm"] = [comm_json(q) for q in platforms]
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    print(f"Database: {path}")
    if db is not None:
        diff = mismatches(db.fingerprint, machine_fingerprint())
        if diff:
            print("NOTE: measured on another machine or stack; the runtime will not use it (" + "; ".join(diff) + ")")
        print("\n".join(summary(db) + gflops_tables(db)))
    else:
        print(f"BLAS/LAPACK: {blas_error}")
    if platforms:
        print("\n" + "\n".join(comm_summary(platforms)))
    if args.plot:
        if db is not None:
            plot(db, args.plot)
            print(f"\nplot written to {args.plot}")
        if platforms:
            comm_file = _comm_plot_name(args.plot)
            plot_comm(platforms, comm_file)
            print(f"communication plot written to {comm_file}")
    return 0


# -- MPI communication parameters (autotune.db.comm) ----------------------------------------------

def _comm_platforms(path) -> list:
    """The file's communication platforms; [] when it has none or cannot be read."""
    from autotune.db.comm import read_platforms

    try:
        return sorted(read_platforms(path), key=lambda q: (q.P, q.key))
    except Exception:
        return []


def _comm_plot_name(filename: str) -> str:
    from pathlib import Path

    p = Path(filename)
    return str(p.with_name(f"{p.stem}-comm{p.suffix or '.png'}"))


def _curves(fits: np.ndarray) -> dict[tuple, np.ndarray]:
    """(primitive, p, r, c) -> its fit rows, in primitive order."""
    from autotune.db.comm import PRIMITIVES

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


def comm_summary(platforms) -> list[str]:
    """Per platform, per primitive and p (grid): regimes with ts, bandwidth 1/tw, breakpoints and
    held-out error (median/max of the relative error on the sizes left out of the check fit)."""
    from autotune.db.comm import library_id, loggp_lines

    lines = [f"MPI communication parameters ({len(platforms)} platform{'s' * (len(platforms) != 1)}):"]
    for q in platforms:
        info = q.info
        lines.append(f"  {q.key}: {library_id(info.get('library', ''))}")
        cores = "oversubscribed" if info.get("oversubscribed") else "dedicated cores"
        lines.append(f"    P={info.get('P')} ({cores}), "
                     f"{info.get('hosts', '?')} host(s), profile {info.get('profile', '?')!r}, {len(q.points)} points, "
                     f"measured {info.get('updated', '?')} in {info.get('seconds', 0):.0f} s")
        if q.loggp:
            lines += ["    " + x for x in loggp_lines(q.loggp)]
        for (prim, p, r, c), rows in _curves(q.fits).items():
            grid = f" grid {r}x{c}" if r else ""
            bps = ", ".join(_bytes(b) for b in rows["lo"][1:]) or "none"
            lines.append(f"    {prim} p={p}{grid}: {len(rows)} regime{'s' * (len(rows) != 1)}, breakpoints {bps}")
            for f in rows:
                bw = f"{1e-9 / f['tw']:8.2f} GB/s" if f["tw"] > 0 else f"{'inf':>8s} GB/s"
                err = (f"held-out err med {100 * f['err_med']:5.1f}% max {100 * f['err_max']:5.1f}% "
                       f"({f['n_heldout']} sizes){'  (> 10%)' if f['err_max'] > 0.10 else ''}"
                       if f["n_heldout"] else "held-out err -")
                lines.append(f"      [{_bytes(f['lo']):>9s}, {_bytes(f['hi']):>9s}): ts {f['ts'] * 1e6:8.3f} us, "
                             f"tw {bw}; {err}")
    return lines


def comm_json(q) -> dict:
    loggp = {k: v for k, v in q.loggp.items() if k not in ("o_s", "g_s", "sizes")} if q.loggp else None
    return {"key": q.key, "platform": q.info, "points": len(q.points), "loggp": loggp,
            "fits": [{"primitive": f["primitive"].decode(), "p": int(f["p"]), "grid": [int(f["r"]), int(f["c"])],
                      "regime": int(f["regime"]), "lo": float(f["lo"]),
                      "hi": float(f["hi"]) if np.isfinite(f["hi"]) else None,
                      "ts": float(f["ts"]), "tw": float(f["tw"]),
                      "heldout_err_median": None if np.isnan(f["err_med"]) else float(f["err_med"]),
                      "heldout_err_max": None if np.isnan(f["err_max"]) else float(f["err_max"])}
                     for f in q.fits]}


def plot_comm(platforms, filename: str) -> None:
    """Time against message size per primitive: measured medians (markers) and fitted regimes (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autotune.db.comm import PRIMITIVES

    prims = [x for x in PRIMITIVES if any((q.points["primitive"] == x.encode()).any() for q in platforms)]
    cols = min(4, max(len(prims), 1))
    rows = (len(prims) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, prim in zip(axes.flat, prims, strict=False):
        n = 0
        for qi, q in enumerate(platforms):
            for (pr, p, r, c), fits in _curves(q.fits).items():
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


def cmd_explain(args) -> int:
    """Rank the candidates for one problem, print them with the SP values used; optionally run it."""
    from autotune.config import options
    from autotune.db import load_sp
    from autotune.select import rank

    dims = tuple(args.dims)
    if args.routine == "gemm" and len(dims) == 1:
        dims = dims * 3
    if (args.routine == "gemm" and len(dims) != 3) or (args.routine == "cholesky" and len(dims) != 1):
        print("autotune explain: gemm takes N or M K N; cholesky takes N", file=sys.stderr)
        return 2
    if min(dims) < 1:
        print(f"autotune explain: sizes must be positive, got {dims}", file=sys.stderr)
        return 2
    with options(threads=args.threads, allow_strassen=args.strassen, db=args.db) as opts:
        sp = load_sp(opts.db)
        if sp.table is None:
            print(f"autotune explain: no usable database ({sp.reason}); tuned calls fall back to numpy/scipy",
                  file=sys.stderr)
            return 1
        if args.np is not None:
            return _explain_distributed(args, dims, sp, opts)
        from autotune.api import describe

        dec = rank(args.routine, dims, sp, opts.thread_budget, opts.allow_strassen, explain=True)
        print(describe(dec, top=args.top))
        if args.run:
            _run_once(args.routine, dims, dec.chosen)
    return 0


def _explain_distributed(args, dims: tuple[int, ...], sp, opts) -> int:
    """Rank distributed plans on up to ``--np`` ranks (models only: nothing is launched)."""
    from autotune.config import available_cores
    from autotune.db.comm import load_comm
    from autotune.select.distributed import describe, rank_plans

    if args.np < 1:
        print(f"autotune explain: --np must be positive, got {args.np}", file=sys.stderr)
        return 2
    cp = load_comm(opts.db, nprocs=args.np)
    dec = rank_plans(args.routine, dims, args.np, sp, cp, args.threads or available_cores(), opts.allow_strassen)
    print(f"communication parameters: {cp.platform.get('key') if cp.available else 'nominal defaults (no MPI probe)'}")
    print(describe(dec, top=args.top))
    return 0


def _run_once(routine: str, dims: tuple[int, ...], chosen) -> None:
    """Time the tuned call on random operands (median of 3) against the prediction."""
    import time

    from autotune.api import tuned_cholesky, tuned_gemm

    rng = np.random.default_rng(0)
    if routine == "gemm":
        m, k, n = dims
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        call = lambda: tuned_gemm(a, b)  # noqa: E731
    else:
        (n,) = dims
        from autotune.install_probe.operands import spd_matrix

        a = spd_matrix(rng, n, order="C")       # built without BLAS: no pool left spinning
        call = lambda: tuned_cholesky(a)  # noqa: E731
    call()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    shape = "x".join(map(str, dims))
    print(f"ran tuned_{routine} {shape} with {chosen}: {np.median(times) * 1e3:.3f} ms (median of 3)")



def cmd_refit(args) -> int:
    """Fit per-candidate corrections from the learning log into ``/learned`` of the database."""
    from autotune.learn import refit

    summary = refit(args.db)
    if "error" in summary:
        print(f"autotune refit: {summary['error']} at {summary['db']}", file=sys.stderr)
        return 1
    print(f"{summary['db']}: {summary['observations']} logged observations, {summary['series']} candidate series")
    for c in summary["corrections"]:
        form = c["ratio_model"] or "scale"
        print(f"  {c['family']:8s} {c['candidate']:42s} {c['points']:4d} points  measured/predicted "
              f"x{c['scale']:.3f}  ({form})")
    if not summary["corrections"]:
        print("  nothing to refit (too few observations per candidate): database unchanged")
    return 0


def cmd_report(args) -> int:
    """Write the HTML model report with its plots."""
    from autotune.report import write_report

    page = write_report(args.out, db=args.db, validation=args.validation)
    print(f"report written to {page}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autotune", description="autotune: auto-tuned dense linear algebra")
    sub = p.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print what the system-parameter database holds")
    show.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    show.add_argument("--plot", metavar="FILE.png",
                      help="also draw GFLOP/s against size (and MPI time against size into FILE-comm.png)")
    show.add_argument("--json", action="store_true", help="machine-readable summary")
    show.set_defaults(func=cmd_show)
    exp = sub.add_parser("explain", help="rank the candidate configurations for a problem")
    exp.add_argument("routine", choices=["gemm", "cholesky"])
    exp.add_argument("dims", type=int, nargs="+", help="gemm: N or M K N; cholesky: N")
    exp.add_argument("--threads", type=int, default=None, help="thread budget (default: all cores)")
    exp.add_argument("--strassen", action="store_true", help="allow Strassen (changes rounding error)")
    exp.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    exp.add_argument("--top", type=int, default=12, help="how many ranked candidates to print")
    exp.add_argument("--run", action="store_true", help="also run the tuned call once and time it")
    exp.add_argument("--np", type=int, default=None,
                     help="rank distributed plans for up to NP MPI ranks (cores per node: --threads)")
    exp.set_defaults(func=cmd_explain)
    ref = sub.add_parser("refit", help="fold the on-line learning log (AUTOTUNE_LEARN=1) into the database")
    ref.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    ref.set_defaults(func=cmd_refit)
    rep = sub.add_parser("report", help="write an HTML report of the models and the choices they make")
    rep.add_argument("--out", required=True, metavar="DIR", help="directory for index.html and the PNGs")
    rep.add_argument("--db", default=None, help="database path (default: $AUTOTUNE_DB or user data dir)")
    rep.add_argument("--validation", default=None, metavar="FILE.json",
                     help="bench/validate.py output (predicted vs measured per candidate)")
    rep.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:  # `autotune show | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
