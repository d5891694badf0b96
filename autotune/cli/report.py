"""Model report: ``write_report(out_dir)`` writes ``index.html`` with PNG plots.

Sections: predicted vs measured and residuals per routine and backend (the check points the
validation step, ``autotune-install --validate``, stored in the database; optionally also an
``autotune bench validate`` JSON), which model each algorithm and candidate uses and why
(analytical, fitted ``/fitted`` entries, learned ``/learned`` corrections), maps of the chosen candidate over size x
thread budget (and x process count when MPI parameters were measured) and Akaike weights of
the fitted models. Plain HTML, no JavaScript; anything missing becomes a note, never an error.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from autotune.cli.common import add_db_argument, error
from autotune.core.families import DISTRIBUTED, FAMILIES
from autotune.core.plans import ALGORITHMS, Candidate
from autotune.db import load_sp, location
from autotune.db.comm_lookup import load_comm
from autotune.db.lookup import SystemParameters
from autotune.db.validation import read_validation
from autotune.feedback.learn import load_learned
from autotune.host.resources import available_cores
from autotune.models.fitted import load_fitted
from autotune.select.distributed import rank_plans
from autotune.select.ranking import rank

MAP_SIZES = tuple(int(round(64 * 2 ** (i / 2))) for i in range(13))     # 64 .. 4096
DIST_SIZES = (256, 512, 1024, 2048, 4096)
DIST_NPROCS = (2, 4)
# Median absolute percentage error above which an analytical model is flagged for remodelling.
APE_TOLERANCE = 10.0
# ... scored on predictions of at least this many seconds (as `autotune bench validate`'s summary).
APE_MIN_SECONDS = 1e-3
VALIDATE_HINT = "autotune-install --validate"    # the command that stores check points
_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
          "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
          "font-size:90%;text-align:left}th{background:#eee}.note{color:#666;font-style:italic}"
          "img{max-width:100%}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _esc(x) -> str:
    return html.escape(str(x))


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(name: str, alt: str) -> str:
    return f'<p><img src="{_esc(name)}" alt="{_esc(alt)}"></p>'


def _size(dims) -> float:
    return float(np.exp(np.mean(np.log(np.maximum(np.asarray(dims, dtype=float), 1.0)))))


# -- validation: predicted vs measured, residuals ---------------------------------------------------

def load_validation(path) -> list[dict]:
    """Measured candidates of a validate.py JSON as flat rows (routine, algorithm, backend, size, times)."""
    with open(path) as fh:
        data = json.load(fh)
    rows = []
    for res in data.get("results", []):
        for c in res.get("candidates", []):
            if "measured" not in c or "predicted" not in c:
                continue
            cfg = c.get("config", {})
            rows.append({"routine": res["routine"], "algorithm": cfg.get("algorithm", "?"),
                         "backend": cfg.get("backend", "?"), "threads": cfg.get("threads", res.get("threads")),
                         "size": _size(res["dims"]), "predicted": float(c["predicted"]),
                         "measured": float(c["measured"])})
    return rows


def db_validation(path: Path | None) -> tuple[list[dict], str]:
    """The validation step's check points stored in the database, as report rows (predicted: the
    model in use), and why there are none ("" if there are). Where storing them is the remedy the
    reason names VALIDATE_HINT: ``read_validation``'s reason for an absent group does, as do these."""
    if path is None:
        return [], f"no database (run `{VALIDATE_HINT}`)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = read_validation(path)
    rows = []
    for p in group.points:
        if not (np.isfinite(p["measured"]) and p["measured"] > 0 and np.isfinite(p["in_use"])):
            continue
        cand = Candidate(p["algorithm"], p["backend"], p["threads"], p["param"], p["variant"])
        rows.append({"routine": p["family"], "algorithm": p["algorithm"], "backend": p["backend"],
                     "threads": p["threads"], "candidate": str(cand), "size": float(p["n"]),
                     "predicted": p["in_use"], "analytical": p["predicted"], "measured": p["measured"],
                     "model": p["model"], "reason": p["reason"]})
    return rows, group.reason or ("" if rows else f"no measured check points in {path} (run `{VALIDATE_HINT}`)")


def _by(rows: list[dict], *keys: str) -> dict:
    out: dict = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return dict(sorted(out.items()))


def _plot_validation(rows: list[dict], out: Path) -> list[str]:
    """pred_vs_measured.png and residuals.png: one panel per routine, one colour per backend."""
    plt = _plt()
    routines = sorted({r["routine"] for r in rows})
    backends = sorted({r["backend"] for r in rows})
    colour = {b: f"C{i % 10}" for i, b in enumerate(backends)}
    names = []
    for kind in ("pred_vs_measured", "residuals"):
        fig, axes = plt.subplots(1, len(routines), figsize=(5.5 * len(routines), 4.2), squeeze=False)
        for ax, routine in zip(axes.flat, routines, strict=True):
            for (be,), pts in _by([r for r in rows if r["routine"] == routine], "backend").items():
                p = np.array([r["predicted"] for r in pts])
                m = np.array([r["measured"] for r in pts])
                if kind == "pred_vs_measured":
                    ax.loglog(m, p, "o", ms=3, alpha=0.7, color=colour[be], label=be)
                else:
                    ax.plot([r["size"] for r in pts], 100 * (p - m) / m, "o", ms=3, alpha=0.7,
                            color=colour[be], label=be)
                    ax.set_xscale("log", base=2)
            if kind == "pred_vs_measured":
                lo, hi = ax.get_xlim()
                ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
                ax.set(xlabel="measured (s)", ylabel="predicted (s)")
            else:
                ax.axhline(0, color="k", lw=0.8)
                ax.set(xlabel="size (geometric mean of dims)", ylabel="(predicted - measured) / measured, %")
            ax.set_title(routine)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        names.append(f"{kind}.png")
        fig.savefig(out / names[-1], dpi=100)
        plt.close(fig)
    return names


def _validation_section(rows: list[dict] | None, source: str, out: Path) -> str:
    parts = ["<h2>Predicted vs measured</h2>"]
    if not rows:
        return "".join(parts) + _note(f"no validation results ({source}): plots skipped")
    names = _plot_validation(rows, out)
    parts.append(f"<p>From {_esc(source)}: {len(rows)} measured candidates; predicted by the model in use.</p>")
    parts.append(_img(names[0], "predicted vs measured"))
    parts.append("<h2>Residuals</h2>" + _img(names[1], "relative error against size"))
    table = []
    for (routine, alg, be), pts in _by(rows, "routine", "algorithm", "backend").items():
        err = np.array([100 * (r["predicted"] - r["measured"]) / r["measured"] for r in pts])
        table.append([routine, alg, be, len(pts), f"{np.median(np.abs(err)):.1f}",
                      f"{np.percentile(np.abs(err), 90):.1f}", f"{np.median(err):+.1f}"])
    parts.append(_table(["routine", "algorithm", "backend", "points", "median APE %", "p90 APE %",
                         "median bias %"], table))
    return "".join(parts)


# -- which model is in use --------------------------------------------------------------------------

def _fitted(path: Path | None) -> tuple[dict, str]:
    """Entries of ``/fitted`` via autotune.models.fitted.load_fitted, and a note."""
    if path is None:
        return {}, "no database"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entries = load_fitted(path)
    except Exception as exc:
        return {}, f"analytical only (fitted models unreadable: {exc})"
    if hasattr(entries, "in_use"):          # autotune.models.fitted.FittedModels: the entries in use
        entries = {f"{e.family}/{e.algorithm} [{e.backend}, {e.threads}t] "
                   f"{'b=any' if e.over_param else f'p={e.param}'} v{e.variant}": e
                   for e in entries.in_use}
    entries = dict(entries) if isinstance(entries, dict) else {i: e for i, e in enumerate(entries or [])}
    return entries, "" if entries else "analytical only (no /fitted entries in the database)"


def _entry_text(entry) -> str:
    """A short description of a fitted entry whatever its type."""
    if isinstance(entry, dict):
        items = entry.items()
    else:
        items = [(a, getattr(entry, a)) for a in ("method", "termset", "reason", "phi_err", "sigma", "model")
                 if getattr(entry, a, None) is not None]
    text = "; ".join(f"{k}={v}" for k, v in items if not isinstance(v, np.ndarray | list) or np.size(v) < 8)
    return (text or str(entry))[:300]


def _models_section(path: Path | None, rows: list[dict] | None, fitted: dict, note: str) -> str:
    learned = load_learned(path) if path is not None else {}
    scored = [r for r in rows or [] if r["predicted"] >= APE_MIN_SECONDS]
    ape = {k: float(np.median([abs(r["predicted"] - r["measured"]) / r["measured"] * 100 for r in v]))
           for k, v in _by(scored, "routine", "algorithm").items()}
    table = []
    for alg, (family, _) in ALGORITHMS.items():
        hits = [e for k, e in fitted.items() if str(k).startswith(f"{family}/{alg} ")]
        corr = [c for c in learned.values() if c.candidate.algorithm == alg]
        err = ape.get((family, alg))
        checked = [r for r in rows or [] if "model" in r and (r["routine"], r["algorithm"]) == (family, alg)]
        if hits:
            series = len(_by(checked, "candidate"))
            model = f"fitted ({len(hits)} of {series} validated series)" if series else "fitted"
            why = "; ".join(_entry_text(e) for e in hits[:3])
        else:
            model = "analytical"
            why = _why(err) if err is not None else _checked(checked) if checked else "not validated"
        if corr:
            model += " + learned correction"
            why += "; on-line: " + ", ".join(f"{c.candidate} x{c.factor():.2f}" for c in corr[:4])
        table.append([family, alg, model, why])
    return "<h2>Models in use</h2>" + (_note(note) if note else "") + \
        _table(["routine", "algorithm", "model", "why"], table) + _candidates_section(rows or []) + \
        _learned_table(learned)


def _candidates_section(rows: list[dict]) -> str:
    """Per validated candidate: the model in use, why, and both models' errors on its check points."""
    stored = [r for r in rows if "model" in r]
    if not stored:
        return ""
    table = []
    for (routine, cand), pts in _by(stored, "routine", "candidate").items():
        err = [abs(r["predicted"] - r["measured"]) / r["measured"] * 100 for r in pts]
        ana = [abs(r["analytical"] - r["measured"]) / r["measured"] * 100 for r in pts]
        table.append([routine, cand, pts[0]["model"], len(pts), f"{np.median(err):.1f}", f"{np.median(ana):.1f}",
                      pts[0]["reason"]])
    return "<h3>Model in use per candidate (validation step)</h3>" + \
        _table(["routine", "candidate", "model in use", "check points", "APE in use %", "APE analytical %", "why"],
               table)


def _checked(points: list[dict]) -> str:
    """What the validation step found for one algorithm's check points (all predicted below 1 ms)."""
    series = _by(points, "candidate")
    err = np.median([abs(r["predicted"] - r["measured"]) / r["measured"] * 100 for r in points])
    return (f"validated: {len(series)} candidate series, analytical model kept (median APE {err:.1f}% over "
            f"{len(points)} check points below 1 ms; see the table below)")


def _why(err: float) -> str:
    ok = err <= APE_TOLERANCE
    return (f"validation median APE {err:.1f}% (predictions >= 1 ms) {'<=' if ok else '>'} {APE_TOLERANCE:g}%"
            + ("" if ok else ": candidate for remodelling"))


def _learned_table(learned: dict) -> str:
    if not learned:
        return _note("no learned corrections (/learned): run with AUTOTUNE_LEARN=1, then `autotune refit`")
    rows = [[c.family, str(c.candidate), c.npts, f"{c.scale:.3f}", f"{c.n_lo:.0f}..{c.n_hi:.0f}",
             "ratio(n) fitted" if c.terms else "scale"] for c in learned.values()]
    return "<h3>Learned corrections</h3>" + _table(["routine", "candidate", "points", "measured/predicted",
                                                    "sizes", "form"], rows)


# -- maps of the choice -----------------------------------------------------------------------------

def _label(cand) -> str:
    return f"{cand.algorithm} [{cand.backend}]"


def _annot(cand, extrapolated: bool = False) -> str:
    extra = f"\nb{cand.param}" if cand.algorithm == "blocked" else f"\nl{cand.param}" if cand.param else ""
    return f"{cand.threads}t{'*' if extrapolated else ''}{extra}"


def _map_cell(family: str, n: int, sp: SystemParameters, threads: int) -> tuple[str, str]:
    """(label, text) of the choice at order ``n``: ``*`` where its price reads an SP series beyond
    the sizes that series was measured at."""
    try:                  # the pruned ranking ``choose`` caches, with the terms explain records
        dec = rank(FAMILIES[family].square(n), sp, threads, explain=True, prune=True)
    except LookupError:
        return ("none", "")
    chosen = next(r for r in dec.ranking if r.candidate == dec.chosen)
    return (_label(dec.chosen), _annot(dec.chosen, chosen.extrapolated))


def _draw_map(grid: list[list[tuple[str, str]]], xs, ys, ylabel: str, title: str, filename: Path) -> None:
    """Categorical map: colour by label, text per cell."""
    from matplotlib.colors import ListedColormap

    plt = _plt()
    labels = sorted({lab for row in grid for lab, _ in row})
    idx = np.array([[labels.index(lab) for lab, _ in row] for row in grid])
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * len(xs), 1.4 + 0.5 * len(ys) + 0.25 * len(labels)))
    cmap = ListedColormap([f"C{i % 10}" for i in range(len(labels))])
    ax.imshow(idx, cmap=cmap, vmin=-0.5, vmax=len(labels) - 0.5, aspect="auto", origin="lower")
    for i, row in enumerate(grid):
        for j, (_, text) in enumerate(row):
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="white")
    ax.set_xticks(range(len(xs)), [str(x) for x in xs], fontsize=7)
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set(xlabel="n", ylabel=ylabel, title=title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{i % 10}") for i in range(len(labels))]
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=7)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(labels) + 2) // 3), 1, 1))
    fig.savefig(filename, dpi=100)
    plt.close(fig)


def _maps_section(sp: SystemParameters, out: Path, cores: int) -> str:
    parts = ["<h2>Chosen candidate over size x thread budget</h2>",
             f"<p>Colour: algorithm and library; text: threads (and block b / Strassen level l); "
             f"<b>*</b>: priced beyond the sizes its series were measured at (extrapolated, penalised). "
             f"Budgets 1..{cores}, Strassen not allowed.</p>"]
    budgets = list(range(1, cores + 1))
    for family in FAMILIES:
        grid = [[_map_cell(family, n, sp, t) for n in MAP_SIZES] for t in budgets]
        name = f"map_{family}.png"
        _draw_map(grid, MAP_SIZES, budgets, "thread budget", f"{family}: chosen candidate", out / name)
        parts.append(_img(name, f"{family} choice map"))
    return "".join(parts)


def _dist_section(sp: SystemParameters, path: Path, out: Path, cores: int) -> str:
    parts = ["<h2>Chosen plan over size x process count</h2>"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cps = {p: load_comm(path, nprocs=p) for p in DIST_NPROCS}
    cps = {p: cp for p, cp in cps.items() if cp.available}
    if not cps:
        return "".join(parts) + _note("no MPI communication parameters in the database "
                                      "(autotune-install --mpi --np P): map skipped")
    for family in DISTRIBUTED:
        grid = []
        for p, cp in cps.items():
            row = []
            for n in DIST_SIZES:
                try:
                    plan = rank_plans(FAMILIES[family].square(n), p, sp, cp, cores).chosen
                    row.append((plan.algorithm, f"p{plan.p} {plan.r}x{plan.c}\n{plan.threads}t"))
                except (LookupError, ValueError):
                    row.append(("none", ""))
            grid.append(row)
        name = f"map_{family}_procs.png"
        _draw_map(grid, DIST_SIZES, list(cps), "processes (at most)", f"{family}: chosen plan", out / name)
        parts.append(_img(name, f"{family} distributed choice map"))
    return "".join(parts)


# -- Akaike weights ---------------------------------------------------------------------------------

MAX_AKAIKE_SERIES = 12   # fitted entries drawn (the page stays readable however many the database holds)

def _weights(entry) -> list[tuple[str, float]]:
    """(term set, Akaike weight) pairs of a fitted entry, if it carries a model selection."""
    raw = getattr(entry, "akaike", None)
    if isinstance(raw, str) and raw not in ("", "{}"):
        return [(" + ".join(names), float(w)) for names, w in json.loads(raw).get("sets", [])]
    sel = entry.get("selection") if isinstance(entry, dict) else getattr(entry, "selection", entry)
    ranked = getattr(sel, "ranked", None)
    if ranked:
        return [(str(c.termset), float(c.weight)) for c in ranked]
    w = entry.get("weights") if isinstance(entry, dict) else getattr(entry, "weights", None)
    names = (entry.get("termsets") or entry.get("names")) if isinstance(entry, dict) else \
        (getattr(entry, "termsets", None) or getattr(entry, "names", None))
    if w is not None and names is not None and len(w) == len(names):
        return [(str(n), float(x)) for n, x in zip(names, w, strict=True)]
    return []


def _akaike_section(fitted: dict, out: Path) -> str:
    parts = ["<h2>Akaike weights</h2>"]
    series = {str(k): w[:10] for k, e in fitted.items() if (w := _weights(e))}
    series = dict(list(series.items())[:MAX_AKAIKE_SERIES])
    if not series:
        return "".join(parts) + _note("no fitted model selections in the database: nothing to weigh")
    plt = _plt()
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 1.2 + 0.28 * sum(len(w) for w in series.values())),
                             squeeze=False)
    for ax, (key, w) in zip(axes.flat, series.items(), strict=True):
        ax.barh(range(len(w)), [x for _, x in w], color="C0")
        ax.set_yticks(range(len(w)), [n for n, _ in w], fontsize=7)
        ax.invert_yaxis()
        ax.set(xlim=(0, 1), title=key, xlabel="Akaike weight")
    fig.tight_layout()
    fig.savefig(out / "akaike.png", dpi=100)
    plt.close(fig)
    return "".join(parts) + _img("akaike.png", "Akaike weights")


# -- the page ---------------------------------------------------------------------------------------

def missing_database(db) -> str:
    """Why there is nothing to report on: no database file at ``db`` ("" when there is one)."""
    path = location.resolve(db)
    return "" if path.is_file() else f"no database at {path} (run autotune-install first)"


def _database(db) -> tuple[Path | None, object, str]:
    """(path, SystemParameters or None, description)."""
    missing = missing_database(db)
    if missing:
        return None, None, missing
    path = location.resolve(db)
    sp = load_sp(path, refresh=True)
    if sp.table is None:
        return path, None, f"database {path} is not usable here ({sp.reason})"
    return path, sp, f"database {path}"


def _validation_rows(path: Path | None, validation) -> tuple[list[dict], str]:
    """Check points from the database, plus those of an ``autotune bench validate`` JSON if given,
    and where they came from (or why there are none)."""
    rows, reason = db_validation(path)
    sources = [f"the database's validation step ({len(rows)} check points)"] if rows else []
    if validation is not None:
        extra = load_validation(validation)
        rows += extra
        sources.append(str(validation) if extra else f"no measured candidates in {validation}")
    if not rows:
        return [], "; ".join([reason, *sources])
    return rows, " and ".join(sources)


def write_report(out_dir, db=None, validation=None) -> Path:
    """Write ``out_dir/index.html`` and its PNGs; returns the page's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path, sp, desc = _database(db)
    rows, source = _validation_rows(path, validation)
    fitted, note = _fitted(path)
    cores = max(1, available_cores())
    body = [f"<h1>autotune model report</h1><p>{_esc(desc)}; generated {time.strftime('%Y-%m-%d %H:%M')}, "
            f"{cores} core(s).</p>"]
    if sp is None:
        body.append(_note("no usable database: the choice maps are skipped"))
    body.append(_validation_section(rows, source, out))
    body.append(_models_section(path, rows, fitted, note))
    if sp is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            body.append(_maps_section(sp, out, cores))
            body.append(_dist_section(sp, path, out, cores))
    body.append(_akaike_section(fitted, out))
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>autotune model report</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n")
    target = out / "index.html"
    tmp = out / f".index.html.{os.getpid()}.tmp"
    tmp.write_text(page)
    os.replace(tmp, target)
    return target


HELP = "write an HTML report of the models and the choices they make"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for index.html and the PNGs (created with its parents)")
    add_db_argument(p)
    p.add_argument("--validation", default=None, metavar="FILE.json",
                   help="check points besides the database's own (`autotune bench validate --out` output)")


def run(args) -> int:
    """Write the HTML model report with its plots."""
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        return error("report", f"--out {args.out}: exists and is not a directory", 2)
    if args.validation is not None:
        try:
            load_validation(args.validation)
        except OSError as exc:
            return error("report", f"--validation {args.validation}: {exc.strerror or exc}", 2)
        except (ValueError, KeyError, TypeError) as exc:
            return error("report", f"--validation {args.validation}: not an `autotune bench validate` output "
                                    f"({exc})", 2)
    missing = missing_database(args.db)
    if missing:                     # as `autotune show` and `explain`: nothing to report on
        return error("report", missing, 1)
    try:
        page = write_report(out, db=args.db, validation=args.validation)   # creates DIR and its parents
    except OSError as exc:
        return error("report", f"cannot write the report into {args.out}: {exc}", 1)
    print(f"report written to {page}")
    return 0
