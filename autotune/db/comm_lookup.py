"""The communication costs the models read (``CommParams``): each primitive's fitted (ts, tw) by
process count, size and link, interpolated between measured counts or from the (p, m) models,
with the first-touch, packing, check and calibration costs; nominal defaults
(``assumptions.py``) where the comm probe measured nothing. ``load_comm`` picks the platform
for the run's process count from what ``db.comm`` stores."""
from __future__ import annotations

import copy
import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from autotune.core.assumptions import (
    DEFAULT_COMPUTE_SKEW,
    DEFAULT_FIRST_TOUCH,
    DEFAULT_TS,
    DEFAULT_TW,
    UNMEASURED_OVERLAP,
)

from . import location
from ._warn import warn_user
from .comm import (
    COLLECTIVES,
    GRID_PRIMITIVES,
    POINT_DTYPE,
    PRIMITIVES,
    UNREADABLE,
    Platform,
    base_primitive,
    choose_platform,
    hardware,
    mpi_distributions,
    read_platforms,
)
from .comm_pmodel import models_from_rows


def default_ts_tw(primitive: str, p: int, grid: tuple[int, int] | None = None) -> tuple[float, float]:
    """Nominal (ts, tw) of a primitive on p processes: tree latency, (p-1) volume for gathers."""
    primitive = base_primitive(primitive)
    q = _members(primitive, p, grid)
    if primitive in COLLECTIVES and q <= 1:
        return 0.0, 0.0
    lg = max(1, math.ceil(math.log2(max(q, 2))))
    if primitive in ("bcast", "reduce", "bcast_row", "bcast_col"):
        return lg * DEFAULT_TS, lg * DEFAULT_TW
    if primitive == "allreduce":
        return 2 * lg * DEFAULT_TS, 2 * DEFAULT_TW
    if primitive in ("allgather", "allgatherv", "scatterv", "gatherv", "alltoallv"):
        return lg * DEFAULT_TS, (q - 1) * DEFAULT_TW
    return DEFAULT_TS, DEFAULT_TW


def _grid(primitive: str, p: int, grid) -> tuple[int, int]:
    if grid is not None:
        return int(grid[0]), int(grid[1])
    return (1, int(p)) if primitive == "bcast_row" else (int(p), 1)


def _members(primitive: str, p: int, grid) -> int:
    """Processes taking part in one call: c for a row broadcast, r for a column one, else p."""
    if primitive in GRID_PRIMITIVES:
        r, c = _grid(primitive, p, grid)
        return c if primitive == "bcast_row" else r
    return int(p)


@dataclasses.dataclass
class _Curve:
    bounds: np.ndarray   # interior breakpoints
    ts: np.ndarray
    tw: np.ndarray
    start: float = 0.0               # below this size ...
    below: _Curve | None = None      # ... this curve applies (a cold curve's warm one)

    def at(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.searchsorted(self.bounds, m, side="right")
        ts, tw = self.ts[i], self.tw[i]
        if self.below is not None:
            low = m < self.start
            bts, btw = self.below.at(m)
            ts, tw = np.where(low, bts, ts), np.where(low, btw, tw)
        return ts, tw


_ZERO = _Curve(np.zeros(0), np.zeros(1), np.zeros(1))


def _log_interp(table, xkey: str, ykey: str, x: float) -> float | None:
    """``table[ykey]`` at ``x``, log-linear in ``table[xkey]`` (end values held outside): a probe
    series stored with the platform. None if it is missing, mismatched or not finite."""
    try:
        xs, ys = np.asarray(table[xkey], float), np.asarray(table[ykey], float)
    except (TypeError, KeyError, ValueError):
        return None
    if xs.size == 0 or xs.shape != ys.shape or not np.all(xs > 0) or not np.all(np.isfinite(ys)):
        return None
    return float(np.interp(math.log(max(float(x), 1.0)), np.log(xs), ys))


def _running_median(values, width: int = 3):
    """Each value replaced by the median of the ``width`` around it (the ends kept): one noisy
    point of a probe series goes, a step of two points or more stays, so a single outlier cannot
    skew the interpolated cost of nearby sizes."""
    try:
        v = np.asarray(values, float)
    except (TypeError, ValueError):
        return values
    if v.ndim != 1 or v.size < width:
        return values
    h = width // 2
    out = v.copy()
    out[h:v.size - h] = np.median(np.lib.stride_tricks.sliding_window_view(v, width), axis=1)
    return out


def _orientation(grid) -> str | None:
    """The step-wait key of a plan grid: ``wait_1xp`` (one process row), ``wait_px1`` (one
    column), None for 2-D grids or none given."""
    if grid is None or len(grid) != 2 or min(grid) != 1 or max(grid) < 2:
        return None
    return "wait_1xp" if int(grid[0]) == 1 else "wait_px1"


def _step_wait_at(table, p: int, b: float, key: str = "wait") -> float | None:
    """The calibrated SUMMA share ``key`` of ``{"p", "b", "wait", "end"}`` at the nearest measured
    p (the larger on a tie), log-linear in b; None if missing or malformed."""
    try:
        ps = [int(x) for x in table["p"]]
        row = table[key][min(range(len(ps)), key=lambda i: (abs(ps[i] - p), -ps[i]))]
        return _log_interp({"b": table["b"], key: row}, "b", key, b)
    except (TypeError, KeyError, ValueError, IndexError):
        return None


def _models(platform: Platform | None) -> dict:
    """Primitive -> (p, m) model of ``platform`` ({} without one, or where they do not read)."""
    try:
        return models_from_rows(platform.pmodels if platform is not None else None)
    except UNREADABLE as exc:
        warn_user(f"communication platform {platform.key}: its (p, m) models are not usable "
                  f"({type(exc).__name__}: {exc}); using its measured curves only", UserWarning)
        return {}


def _nonnegative(value, default):
    """``value`` as a finite float >= 0 (a probe value stored with the platform), else ``default``."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) and value >= 0 else default


class CommParams:
    """What models consult for communication: the chosen platform's fits, or defaults."""

    def __init__(self, platform: Platform | None = None, reason: str = "", nprocs: int | None = None,
                 others: tuple[str, ...] = ()):
        self._platform = platform
        self.reason = reason
        self.others = others
        self._nprocs = nprocs
        self._speeds: dict[str, float] | None = None
        self.rank_names: tuple[str, ...] | None = None     # each rank's host, where a call gave them
        self.rank_shares: tuple[float, ...] | None = None  # and its CPU share (1: a whole core or more)
        self._warned: set[str] = set()
        self._curves: dict[tuple, _Curve] = {}
        self._choice: dict[tuple, _Curve | None] = {}
        self._index: dict[str, list[tuple[int, int, int]]] = {}
        if platform is not None:
            fits = np.sort(platform.fits, order=["primitive", "p", "r", "c", "regime"])
            for prim, p, r, c in {(x["primitive"].decode(), int(x["p"]), int(x["r"]), int(x["c"])) for x in fits}:
                sel = fits[(fits["primitive"] == prim.encode()) & (fits["p"] == p) & (fits["r"] == r)
                           & (fits["c"] == c)]
                self._curves[prim, p, r, c] = _Curve(np.asarray(sel["lo"][1:], float), np.asarray(sel["ts"], float),
                                                     np.asarray(sel["tw"], float), float(sel["m_first"][0]))
                self._index.setdefault(prim, []).append((p, r, c))
        self._models = _models(platform)

    @property
    def available(self) -> bool:
        return self._platform is not None

    @property
    def platform(self) -> dict:
        if self._platform is None:
            return {"library": None, "P": self._nprocs, "oversubscribed": None, "source": "defaults",
                    "reason": self.reason}
        info = self._platform.info
        return {"library": info.get("library"), "P": int(info.get("P", 0)),
                "oversubscribed": bool(info.get("oversubscribed")), "hosts": info.get("hosts"),
                "key": self._platform.key, "source": "database"}

    @property
    def host_speeds(self) -> dict[str, float]:
        """GFLOP/s of one-thread dgemm per host, as the comm probe measured them ({} if not), or
        the speeds a view from ``with_host_speeds`` carries."""
        if self._speeds is not None:
            return self._speeds
        speeds = self._info("host_speeds")
        return {str(h): float(v) for h, v in speeds.items()} if isinstance(speeds, dict) else {}

    def with_host_speeds(self, speeds: dict[str, float]) -> CommParams:
        """This lookup with its host speeds replaced (the speeds repeated calls measured), all else shared."""
        view = copy.copy(self)
        view._speeds = dict(speeds)
        return view

    def with_ranks(self, names: list[str], shares: list[float] | None = None, root: int = 0) -> CommParams:
        """This lookup knowing each rank's host and CPU share (cgroup quota in CPUs) in a plan's rank
        order: the communicator's from ``root`` on, then those before it."""
        order = [*range(root, len(names)), *range(root)]
        view = copy.copy(self)
        view.rank_names = tuple(names[r] for r in order)
        view.rank_shares = None if shares is None else tuple(float(shares[r]) for r in order)
        return view

    def compute_skew(self, p: int) -> float:
        """Share of a synchronised step's compute that ``p`` ranks wait for the slowest (the probe's
        mean spread of one update run on p ranks at once, log-linear between the group sizes it
        measured; nominal DEFAULT_COMPUTE_SKEW otherwise)."""
        return _nonnegative(_log_interp(self._info("compute_skew"), "p", "skew", p), DEFAULT_COMPUTE_SKEW)

    def step_wait(self, p: int, b: float, grid: tuple[int, int] | None = None) -> float:
        """Share of a SUMMA step's compute that its ``p`` ranks wait for the slowest one, at block
        ``b``: the probe's calibration runs (``install_probe.calibrate.step_waits``; nearest p,
        log-linear in b), those of the plan's own orientation for a 1 x p or p x 1 ``grid``
        (``wait_1xp``, ``wait_px1``) where measured, else of both; else ``compute_skew(p)``."""
        table, value = self._info("step_wait"), None
        key = _orientation(grid)
        if key is not None:
            value = _nonnegative(_step_wait_at(table, p, b, key), None)
        if value is None:
            value = _nonnegative(_step_wait_at(table, p, b), None)
        return self.compute_skew(p) if value is None else value

    def end_wait(self, p: int, b: float) -> float:
        """Steps' worth of its own update that SUMMA's root waits in the gather for ranks of equal
        load that finished after it, at ``p`` ranks and block ``b``: the probe's calibration runs
        (nearest p, log-linear in b); 0 when unmeasured."""
        return _nonnegative(_step_wait_at(self._info("step_wait"), p, b, "end"), 0.0)

    @property
    def loop_overhead(self) -> float:
        """Seconds one panel step of the distributed Cholesky's loop costs beyond its messages and
        BLAS calls (the probe's calibration run, ``install_probe.calibrate``); 0 when unmeasured."""
        return _nonnegative(self._info("loop_overhead"), 0.0)

    @property
    def loop_share(self) -> float | None:
        """Extra cost of an element moved inside the distributed Cholesky's loop, as a share of an
        out-of-cache pass (calibrated with ``loop_overhead``); None when unmeasured (the model's
        nominal ``movement.LOOP_SHARE``)."""
        return _nonnegative(self._info("loop_share"), None)

    @property
    def lu_loop_overhead(self) -> float:
        """``loop_overhead`` of the distributed LU's loop (its own calibration runs); the Cholesky's
        where the LU's was not measured."""
        return _nonnegative(self._info("lu_loop_overhead"), self.loop_overhead)

    @property
    def lu_loop_share(self) -> float | None:
        """``loop_share`` of the distributed LU's loop; the Cholesky's where not measured."""
        return _nonnegative(self._info("lu_loop_share"), self.loop_share)

    def call_overhead(self, algorithm: str) -> dict[str, float]:
        """Fixed seconds one distributed call of ``algorithm`` costs in its phases beyond their
        models (the probe's calibration, ``install_probe.calibrate``); {} when unmeasured."""
        value = self._info("call_overhead")
        cost = value.get(algorithm) if isinstance(value, dict) else None
        if not isinstance(cost, dict):
            return {}
        valid = {str(phase): _nonnegative(t, None) for phase, t in cost.items()}
        return {phase: t for phase, t in valid.items() if t is not None}

    def first_touch_time(self, nbytes: float) -> float:
        """Seconds that writing a new array of ``nbytes`` costs over warm memory (its page faults),
        log-linear between the sizes the probe measured on the root (nominal DEFAULT_FIRST_TOUCH
        per byte when unmeasured or unreadable)."""
        value = self._info("first_touch")
        if isinstance(value, dict):
            value = {"bytes": value.get("bytes"), "per_byte": _running_median(value.get("per_byte"))}
        return float(nbytes) * _nonnegative(_log_interp(value, "bytes", "per_byte", nbytes), DEFAULT_FIRST_TOUCH)

    def overlap(self, kind: str, nbytes):
        """(share of a message's time that hides behind compute, seconds of CPU an overlapped
        exchange of it costs) on a ``kind`` link ("host", "net") for ``nbytes`` (a number or an
        array): the probe's overlap series, log-linear between its sizes (the CPU in proportion
        beyond the largest), else ``UNMEASURED_OVERLAP``."""
        m = np.maximum(np.asarray(nbytes, float), 1.0)
        hidden, cpu = (np.full(m.shape, v) for v in UNMEASURED_OVERLAP[kind])
        table = self._info("overlap")
        table = table.get(kind) if isinstance(table, dict) else None
        try:
            xs, hs, cs = (np.asarray(table[k], float) for k in ("bytes", "hidden", "cpu"))
            if xs.size and xs.shape == hs.shape == cs.shape and np.all(xs > 0) and np.all(np.isfinite(hs + cs)):
                hidden = np.clip(np.interp(np.log(m), np.log(xs), hs), 0.0, 1.0)
                cpu = np.maximum(np.interp(np.log(m), np.log(xs), cs), 0.0) * np.maximum(m / xs.max(), 1.0)
        except (TypeError, KeyError, ValueError):
            pass
        return (float(hidden), float(cpu)) if hidden.ndim == 0 else (hidden, cpu)

    def step_overhead(self, kind: str, schedule: str) -> float:
        """Seconds a step of halo ``schedule`` costs beyond its exchange and sweeps on ``kind``
        links (the probe's tiny-tile runs), 0 where it measured none."""
        table = self._info("overlap")
        table = table.get(kind) if isinstance(table, dict) else None
        steps = table.get("step_overhead") if isinstance(table, dict) else None
        return _nonnegative(steps.get(schedule), 0.0) if isinstance(steps, dict) else 0.0

    def pack_time(self, kind: str, elements: float, run: float) -> float | None:
        """Seconds the root's block-cyclic packing (``kind`` "take") or unpacking ("put") of
        ``elements`` costs when its contiguous runs are ``run`` elements long (log-linear between
        the probe's run lengths); None if the probe did not measure it."""
        per_element = _log_interp(self._info("pack"), "runs", kind, run)
        return None if per_element is None else float(elements) * per_element

    def check_time(self, backend: str, elements: float) -> float | None:
        """Seconds of the root's finiteness check of ``elements`` no cache holds on ``backend``
        (one thread; log-linear in the matrix side between the probe's), None if not measured."""
        table = self._info("check")
        if not isinstance(table, dict) or backend not in table:
            return None
        per_element = _log_interp({"sides": table.get("sides"), "per": table[backend]}, "sides", "per",
                                  math.sqrt(max(float(elements), 1.0)))
        return None if per_element is None else float(elements) * per_element

    def fortran_copy_time(self, elements: float) -> float | None:
        """Seconds of the root's checked Fortran copy of a C-ordered matrix of ``elements`` no cache
        holds (log-linear in the side between the probe's), None if not measured."""
        table = self._info("fortran_copy")
        if not isinstance(table, dict):
            return None
        per_element = _log_interp(table, "sides", "per", math.sqrt(max(float(elements), 1.0)))
        return None if per_element is None else float(elements) * per_element

    def _info(self, name: str):
        """One value the probe stored with this platform, None without a platform or the value."""
        return self._platform.info.get(name) if self._platform is not None else None

    @property
    def loggp(self) -> dict | None:
        """LoOgGP parameters of the platform (seconds, seconds per byte), None if not measured."""
        return self._platform.loggp if self._platform is not None else None

    @property
    def prtt(self) -> np.ndarray | None:
        """The PRTT round trips LoOgGP was fitted on (PRTT_DTYPE), None if not measured."""
        return self._platform.prtt if self._platform is not None else None

    @property
    def fits(self) -> np.ndarray | None:
        """The platform's stored Hockney fits (FIT_DTYPE), None without a platform."""
        return self._platform.fits if self._platform is not None else None

    def points(self, primitive: str) -> np.ndarray:
        """The measured points of ``primitive`` (POINT_DTYPE, every p), empty without a platform."""
        if self._platform is None:
            return np.zeros(0, dtype=POINT_DTYPE)
        pts = self._platform.points
        return pts[pts["primitive"] == primitive.encode()]

    def primitives(self) -> tuple[str, ...]:
        return tuple(sorted(self._index))

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warn_user(message)

    def _curve(self, primitive: str, p: int, grid) -> _Curve | None:
        """The fitted curve to use: a measured p / grid's own; at a p not measured (the broadcast's
        members for the grid ones) the platform's (p, m) model where it has one, else the nearest
        measured p / grid; _ZERO for a trivial call; None: defaults."""
        if primitive not in PRIMITIVES:
            raise ValueError(f"unknown communication primitive {primitive!r}; known: {', '.join(PRIMITIVES)}")
        p = int(p)
        r, c = _grid(primitive, p, grid) if primitive in GRID_PRIMITIVES else (0, 0)
        key = (primitive, p, r, c)
        if key in self._choice:
            return self._choice[key]
        q = _members(primitive, p, grid)
        if base_primitive(primitive) in COLLECTIVES and q <= 1:
            choice = _ZERO
        elif self._platform is None:
            self._warn(f"communication parameters unavailable ({self.reason}); using nominal defaults "
                       f"(ts={DEFAULT_TS * 1e6:g} us, tw={DEFAULT_TW * 1e9:g} ns/B). "
                       "Run `autotune-install --mpi --np P` to measure them.")
            choice = None
        elif primitive not in self._index and base_primitive(primitive) != primitive:
            choice = self._curve(base_primitive(primitive), p, grid)      # an older probe: warm only
        elif primitive not in self._index:
            self._warn(f"no measurement of {primitive} on MPI platform {self._platform.key}; using nominal defaults")
            choice = None
        else:
            choice = self._measured_or_model(primitive, p, r, c, q)
            if base_primitive(primitive) != primitive:
                warm = self._curve(base_primitive(primitive), p, grid)
                choice = dataclasses.replace(choice, below=warm) if warm is not None else choice
        self._choice[key] = choice
        return choice

    def _measured_or_model(self, primitive: str, p: int, r: int, c: int, q: int) -> _Curve:
        """A measured primitive's curve at p (grid r x c, q members): its own where measured,
        the (p, m) model's where that p (q) was not, else the nearest measured one."""
        have = self._index[primitive]
        model = self._models.get(primitive)
        if primitive in GRID_PRIMITIVES:
            def distance(k):
                kq = k[2] if primitive == "bcast_row" else k[1]
                return (abs(kq - q), abs(k[0] - r * c), -k[0], k)
            if (r * c, r, c) in have:
                return self._curves[(primitive, r * c, r, c)]
            if model is not None and q not in {k[2] if primitive == "bcast_row" else k[1] for k in have}:
                return _Curve(*model.regimes_at(q), model.start)
            return self._curves[(primitive, *min(have, key=distance))]
        if model is not None and p not in {k[0] for k in have}:
            return _Curve(*model.regimes_at(p), model.start)
        return self._curves[(primitive, *min(have, key=lambda k: (abs(k[0] - p), -k[0])))]

    def _ts_tw_arrays(self, primitive: str, p: int, m: np.ndarray, grid) -> tuple[np.ndarray, np.ndarray]:
        curve = self._curve(primitive, p, grid)
        if curve is None:
            ts, tw = default_ts_tw(primitive, p, grid)
            return np.full(m.shape, ts), np.full(m.shape, tw)
        return curve.at(m)

    def time(self, primitive: str, p: int, nbytes, grid: tuple[int, int] | None = None) -> np.ndarray:
        """Seconds for one call moving ``nbytes`` (per message / per process block), vectorised."""
        m = np.maximum(np.asarray(nbytes, dtype=float), 0.0)
        ts, tw = self._ts_tw_arrays(primitive, p, m, grid)
        return np.asarray(ts + tw * m)

    def ts_tw(self, primitive: str, p: int, nbytes: float, grid=None) -> tuple[float, float]:
        """(ts seconds, tw seconds per byte) of the regime ``nbytes`` falls in."""
        m = np.array([max(float(nbytes), 0.0)])
        ts, tw = self._ts_tw_arrays(primitive, p, m, grid)
        return float(ts[0]), float(tw[0])


_CACHE: dict[tuple, CommParams] = {}


def load_comm(path: str | os.PathLike | None = None, nprocs: int | None = None, *,
              refresh: bool = False) -> CommParams:
    """Communication parameters for world size ``nprocs`` from the database at ``path``.

    Never raises: anything unusable gives ``available=False`` (nominal defaults, one warning on
    first use). Cached per (path, file mtime, nprocs).
    """
    try:
        p = location.resolve(path)
    except Exception as exc:   # e.g. no home directory for the default location
        return CommParams(None, f"no database location ({exc})", nprocs)
    try:
        st = Path(p).stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    key = (str(p), stamp, nprocs)
    if refresh or key not in _CACHE:
        _CACHE[key] = _load(p, nprocs, stamp is not None)
    return _CACHE[key]


def _load(path: Path, nprocs: int | None, exists: bool) -> CommParams:
    if not exists:
        return CommParams(None, f"no database at {path}", nprocs)
    refused: list[str] = []
    try:
        platforms = read_platforms(path, refused)
    except Exception as exc:
        return CommParams(None, f"{path}: unreadable ({type(exc).__name__}: {exc})", nprocs)
    if not platforms:
        return CommParams(None, "; ".join(refused) or f"no communication parameters in {path}", nprocs)
    here_dist, here_hw = mpi_distributions(), hardware()
    usable, why = [], []
    for q in platforms:
        if q.info.get("dist", {}) != here_dist:
            why.append(f"{q.key}: MPI {q.info.get('dist')} != installed {here_dist}")
        elif any(q.info.get("hardware", {}).get(k) != v for k, v in here_hw.items()):
            why.append(f"{q.key}: measured on other hardware")
        elif not len(q.fits):
            why.append(f"{q.key}: no fits")
        else:
            usable.append(q)
    chosen = choose_platform(usable, nprocs)
    if chosen is None:
        return CommParams(None, f"no communication parameters for this MPI library and machine in {path} ("
                          + "; ".join(why) + ")", nprocs)
    return CommParams(chosen, "", nprocs, tuple(q.key for q in usable if q is not chosen))


__all__ = ["CommParams", "default_ts_tw", "load_comm"]
