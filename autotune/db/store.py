"""The HDF5 system-parameter database: schema, atomic writes, lock-free reads.

This module owns the file and every group in it. Layout: root attributes ``schema_version``
(one version for the whole file: ``SCHEMA_VERSION``), ``fingerprint`` (JSON), ``digest``,
``backends`` (JSON: name -> library info), ``run`` (JSON: profile, run id, complete flag),
``updated``; dataset ``/k``: one compound row per measured point (RECORD_DTYPE). ``t_call`` is
the Python-level per-call cost that was inside the timing (0 where calls were looped natively;
timed on 1x1 operands otherwise); ``k = (t_median - t_call) / flops`` excludes it, so a
compiled driver is charged ``flops * k`` and a Python caller ``flops * k + calls * t_call``.
``t_wall``, ``t_cpu``, ``cpu_share`` and ``noise`` say whether the machine was busy while the point
was timed (``db.noise``: the share of the CPU its threads got and why it is noisy; 0: not recorded).
Writers take ``PATH.lock`` and replace the file atomically, so a reader sees either the old
or the new file, never a torn one, and never waits for the lock. Every file written is sealed
(``db.seal``): its first bytes (an HDF5 user block, which the library skips) hold the SHA-256 of the
rest, and readers parse only bytes that match it (``open_file``): the HDF5 library can crash or spin
on a damaged file, so a damaged one is refused before it is parsed. A file without a user block
(written before seals, or by hand) is read unchecked.

Groups beside ``/k`` (``KEPT_GROUPS``), each written by its own db module through
``replace_group`` (one member per platform or machine) and carried over by ``save``:
``/comm`` (``db.comm``), ``/contention`` (``db.contention``), ``/fitted`` (``db.fitted``),
``/fitted_phases`` (``db.phase_factors``), ``/learned`` (``db.learned``), ``/pools``
(``db.pools``: cross-call costs of thread pools), ``/threads`` (``db.threads``: thread system
parameters of the kernel versions) and ``/validation`` (``db.validation``). A file holding only
such groups (no ``/k``) reads as DatabaseMissing for the BLAS side.

Older files: a root version in ``MIGRATABLE`` is read as the current one after a pure renaming
or defaulting on read (nothing is written): ``/k`` rows without the fields added since get them as 0
(``as_records``); the members of a file of a version in ``PER_GROUP_VERSIONS`` must carry the
per-group version ``LEGACY_MEMBER_VERSION`` names. Any other version is refused with the command
that rebuilds it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import fingerprint as fp
from . import location
from ._warn import warn_user
from .seal import create, seal, seal_problem

SCHEMA_VERSION = 4
# Root versions read as SCHEMA_VERSION on read: 3's /k rows lack the timing-noise fields (read as 0,
# not recorded); 2 also kept a version per group (below).
MIGRATABLE = frozenset({2, 3})
PER_GROUP_VERSIONS = frozenset({2})
# In a PER_GROUP_VERSIONS file, the attribute each member of a group carried and the one value readable now.
LEGACY_MEMBER_VERSION = {"comm": ("comm_schema", 1), "fitted": ("fitted_schema", 1),
                         "learned": ("learned_schema", 1)}
REBUILD = "autotune-install --profile quick --db {path}"

RECORD_DTYPE = np.dtype([
    ("routine", "S8"), ("backend", "S24"), ("threads", "i4"), ("dtype", "S8"),
    ("pattern", "S8"), ("param", "f8"), ("x", "i8"), ("flops", "f8"),
    ("t_median", "f8"), ("t_min", "f8"), ("t_q1", "f8"), ("t_q3", "f8"), ("reps", "i4"),
    ("t_call", "f8"), ("k", "f8"), ("run_id", "S16"),
    ("ref", "f8"),   # drift reference: the backend's own reference gemm time near this point (0: none)
    # over the timed samples: wall and process CPU seconds, the share of the CPU the threads got
    # (install_probe.timing.cpu_share), the noise bits (db.noise.NOISE_*); 0: not recorded (schema 3 and before)
    ("t_wall", "f8"), ("t_cpu", "f8"), ("cpu_share", "f8"), ("noise", "i4"),
])
COMM_GROUP = "comm"   # communication parameters (autotune.db.comm); kept across BLAS saves
# Groups beside /k, carried over when the BLAS records are rewritten (see the module docstring).
KEPT_GROUPS = frozenset({COMM_GROUP, "contention", "fitted", "fitted_phases", "learned", "pools", "threads",
                         "validation"})
KEY_FIELDS = ("routine", "backend", "threads", "dtype", "pattern", "param", "x")
# Timing fields a usable record holds as finite numbers, never negative (0: not recorded).
CHECKED_FIELDS = ("t_median", "t_min")


class DatabaseError(Exception):
    """The database cannot be used; subclasses say why."""


class DatabaseMissing(DatabaseError):
    pass


class DatabaseCorrupt(DatabaseError):
    pass


class SchemaMismatch(DatabaseError):
    pass


class ForeignMachine(DatabaseError):
    pass


def file_version(f) -> int:
    """The root ``schema_version`` of an open file (-1 if absent)."""
    return int(f.attrs.get("schema_version", -1))


def schema_problem(version: int, path, rebuild: str = REBUILD) -> str | None:
    """Why a file of root ``version`` cannot be read (naming the command that rebuilds it), or None."""
    if version == SCHEMA_VERSION or version in MIGRATABLE:
        return None
    command = rebuild.format(path=path)
    if version > SCHEMA_VERSION:
        return (f"{path}: schema version {version}, written by a newer autotune (this one reads "
                f"{SCHEMA_VERSION}); upgrade autotune or re-run `{command}`")
    return f"{path}: schema version {version}, written by an older autotune; re-run `{command}`"


def member_problem(version: int, group: str, g, path, rebuild: str = REBUILD) -> str | None:
    """Why member ``g`` of ``/group`` in a file of root ``version`` cannot be read, or None: the
    root's problem, else (in a PER_GROUP_VERSIONS file) a per-group version other than the readable one."""
    problem = schema_problem(version, path, rebuild)
    if problem is not None or version not in PER_GROUP_VERSIONS or group not in LEGACY_MEMBER_VERSION:
        return problem
    attr, readable = LEGACY_MEMBER_VERSION[group]
    found = g.attrs.get(attr, -1)
    if isinstance(found, int | np.integer) and int(found) == readable:
        return None
    return (f"{path}: {g.name} has {attr} {found}, written by an older autotune; "
            f"re-run `{rebuild.format(path=path)}`")


def check_member(f, group: str, g, path, rebuild: str = REBUILD) -> None:
    """Raise SchemaMismatch unless member ``g`` of ``/group`` of the open file ``f`` reads correctly."""
    problem = member_problem(file_version(f), group, g, path, rebuild)
    if problem is not None:
        raise SchemaMismatch(problem)


def as_records(rows: np.ndarray) -> np.ndarray:
    """``/k`` rows as RECORD_DTYPE, field by name: a field an older schema lacks is 0 (not recorded).
    Rows already of RECORD_DTYPE are returned as they are, not copied: pass rows just read."""
    rows = np.asarray(rows)
    if rows.dtype == RECORD_DTYPE:
        return rows
    out = np.zeros(rows.shape, RECORD_DTYPE)
    for name in RECORD_DTYPE.names:
        if rows.dtype.names is not None and name in rows.dtype.names:
            out[name] = rows[name]
    return out


def record_key(row) -> tuple:
    """Identity of a measured point (independent of its timing values), as Python str/int/float."""
    values = (row[f].item() if hasattr(row[f], "item") else row[f] for f in KEY_FIELDS)
    return tuple(v.decode() if isinstance(v, bytes) else v for v in values)


def valid_mask(records: np.ndarray) -> np.ndarray:
    """True where a record can be read and used (``readable_rows``), its size, thread count and
    parameter are in range, its k is positive and its median and minimum times not negative. A
    NaN, zero, negative or infinite k would rank its candidates as free or unorderable; a damaged
    file's garbage must be dropped, not decoded. (A probe's zero median gives a zero k; a zero time
    beside a good k is unset.)"""
    ok = readable_rows(records) & (records["k"] > 0)
    for name in CHECKED_FIELDS:
        ok &= records[name] >= 0
    return ok & (records["x"] >= 1) & (records["threads"] >= 1) & (records["param"] >= 0)


def readable_rows(rows: np.ndarray) -> np.ndarray:
    """True where every text field of a structured row is printable ASCII (NUL padding allowed) and
    every float field finite: what any table read back from a possibly damaged file must hold."""
    ok = np.ones(len(rows), dtype=bool)
    for name in rows.dtype.names:
        column = rows[name]
        if column.dtype.kind == "f":
            ok &= np.isfinite(column)
        elif column.dtype.kind == "S":
            raw = np.ascontiguousarray(column).view(np.uint8).reshape(len(column), column.dtype.itemsize)
            ok &= ((raw == 0) | ((raw >= 32) & (raw < 127))).all(axis=1)
    return ok


@dataclass
class Database:
    """In-memory image of one database file: records plus metadata."""

    records: np.ndarray = field(default_factory=lambda: np.zeros(0, RECORD_DTYPE))
    fingerprint: dict = field(default_factory=fp.machine_fingerprint)
    backends: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)

    def merge(self, rows: np.ndarray) -> None:
        """Add rows, replacing earlier rows with the same key (the last of duplicate new rows wins)."""
        last = {record_key(r): i for i, r in enumerate(rows)}
        rows = rows[sorted(last.values())]
        new = set(last)
        keep = np.array([record_key(r) not in new for r in self.records], dtype=bool)
        self.records = np.concatenate([self.records[keep], rows.astype(RECORD_DTYPE)])

    def keys(self, run_id: str | None = None) -> set[tuple]:
        rows = self.records if run_id is None else self.records[self.records["run_id"] == run_id.encode()]
        return {record_key(r) for r in rows}


def load(path: str | os.PathLike, *, check_machine: bool = True) -> Database:
    """Read a database; raises a DatabaseError subclass if it is missing, damaged, old or foreign."""

    path = Path(path)
    if not path.is_file():
        raise DatabaseMissing(f"no database at {path}")
    try:
        with open_file(path) as f:
            if not f.keys() and not f.attrs.keys():
                raise DatabaseMissing(f"no measurements in {path}: an empty HDF5 file")
            version = int(f.attrs.get("schema_version", -1))
            if "k" not in f and KEPT_GROUPS & set(f):
                raise DatabaseMissing(f"no BLAS measurements in {path} (only communication parameters)")
            problem = schema_problem(version, path)
            if problem is not None:
                raise SchemaMismatch(problem)
            db = Database(records=as_records(f["k"][...]),
                          fingerprint=json.loads(f.attrs["fingerprint"]),
                          backends=json.loads(f.attrs.get("backends", "{}")),
                          run=json.loads(f.attrs.get("run", "{}")))
    except DatabaseError:
        raise
    except Exception as exc:  # h5py raises OSError/KeyError/ValueError for damaged files
        raise DatabaseCorrupt(f"{path}: unreadable ({type(exc).__name__}: {exc})") from exc
    if check_machine:
        diff = fp.mismatches(db.fingerprint, fp.machine_fingerprint())
        if diff:
            raise ForeignMachine(f"{path} was measured on another machine or stack: {'; '.join(diff)}")
    return db


def open_file(path: str | os.PathLike):
    """The database at ``path`` as a read-only ``h5py.File`` over bytes read once and checked against
    its seal (DatabaseCorrupt when they do not match: never handed to the HDF5 library). Raises
    OSError when it cannot be read."""
    import h5py

    data = Path(path).read_bytes()
    problem = seal_problem(data)
    if problem is not None:
        raise DatabaseCorrupt(f"{path}: unreadable, {problem}; rebuild it with `{REBUILD.format(path=path)}`")
    return h5py.File(io.BytesIO(data), "r")


@contextlib.contextmanager
def _atomic_replace(path: Path) -> Iterator[str]:
    """Under the database's lock, yield a temporary file next to ``path``; replace ``path`` with it
    (after fsync) if the block succeeds, delete it otherwise. One writer at a time, readers never
    see a half-written file."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK):
        raise PermissionError(f"cannot write the database: directory {path.parent} is not writable")
    problem = read_only(path)
    if problem:
        raise PermissionError(problem)
    with FileLock(str(path) + ".lock", timeout=60):
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            os.chmod(tmp, _mode(path))  # mkstemp makes 0600: the file's own mode, or an ordinary file's
            yield tmp
            seal(tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def save(db: Database, path: str | os.PathLike) -> None:
    """Write atomically (temporary file in the same directory, fsync, os.replace) under the lock."""
    path = Path(path)
    with _atomic_replace(path) as tmp:
        _write(db, tmp)
        _carry_over(path, tmp, KEPT_GROUPS)


def read_only(path: str | os.PathLike) -> str | None:
    """Why the database file at ``path`` must not be replaced (its owner made it read-only: no write
    bit, which root's access checks ignore), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if mode & 0o222 and os.access(path, os.W_OK):
        return None
    return f"the database {path} is read-only; make it writable (chmod u+w) or give another --db"


def _mode(path: Path) -> int:
    """The permission bits a rewritten database keeps: its own, else an ordinary new file's."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _write(db: Database, tmp: str) -> None:
    with create(tmp) as f:
        _write_root(f, db)
        f.create_dataset("k", data=db.records.astype(RECORD_DTYPE), maxshape=(None,))


# -- the groups beside /k, each written by its own db module -----------------------------------------

def _carry_over(path: Path, tmp: str, names: set[str]) -> None:
    """Copy the readable members of the groups ``names`` of the current file at ``path`` (if
    readable) into ``tmp``: a member a migration cannot read is dropped, never relabelled."""
    import h5py

    try:
        src = open_file(path)
    except Exception:  # missing or damaged: nothing to keep
        return
    with src, h5py.File(tmp, "r+", locking=False) as dst:
        if schema_problem(file_version(src), path) is None:
            for name in names:
                if name in src and name not in dst:
                    _copy_group(src, dst, name, None, path)


def _copy_group(src, dst, group: str, skip: str | None, path) -> bool:
    """Copy ``/group`` (its attributes and readable members but ``skip``) from ``src`` into ``dst``."""
    g = dst.require_group(group)
    for key, value in src[group].attrs.items():
        g.attrs[key] = value
    version = file_version(src)
    for sub in src[group]:
        if sub != skip and member_problem(version, group, src[group][sub], path) is None:
            src.copy(src[group][sub], g, sub)
    return True


def replace_group(path: str | os.PathLike, group: str, member: str, write) -> None:
    """Atomically (re)write ``/group/member`` of the database at ``path``, keeping everything else.

    ``write(h5py.Group)`` fills the new, empty member group. Everything else in the file (the BLAS
    records, root attributes, other readable members of ``group``) is copied over unchanged and
    the root stamped ``SCHEMA_VERSION`` (a MIGRATABLE file's layout is the current one). A
    missing or unreadable file is replaced by one holding only the root attributes of an empty
    database plus this group (the BLAS side then reads it as DatabaseMissing). A file of a
    version no migration reads raises SchemaMismatch naming the command that rebuilds it (its
    records are neither relabelled nor lost). Same lock and temporary-file + os.replace
    protocol as ``save``.
    """
    path = Path(path)
    with _atomic_replace(path) as tmp:
        try:
            src = open_file(path) if path.is_file() else None
        except Exception:  # damaged: start afresh (it was unusable anyway)
            src = None
        with create(tmp) as dst:
            if src is None:
                _write_root(dst, Database())
            else:
                with src:
                    _copy_file(src, dst, group, member, path)
            g = dst.require_group(group)
            write(g.create_group(member))


def _write_root(f, db: Database) -> None:
    """The root attributes of ``db`` at the current schema version."""
    f.attrs["schema_version"] = SCHEMA_VERSION
    f.attrs["fingerprint"] = json.dumps(db.fingerprint, sort_keys=True)
    f.attrs["digest"] = fp.digest(db.fingerprint)
    f.attrs["backends"] = json.dumps(db.backends, sort_keys=True)
    f.attrs["run"] = json.dumps(db.run, sort_keys=True)
    f.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _copy_file(src, dst, group: str, member: str, path) -> None:
    """Everything of ``src`` but ``/group/member`` into ``dst``, stamped SCHEMA_VERSION; raises
    SchemaMismatch for a version no migration reads."""
    problem = schema_problem(file_version(src), path)
    if problem is not None:
        raise SchemaMismatch(problem)
    for key, value in src.attrs.items():
        dst.attrs[key] = value
    dst.attrs["schema_version"] = SCHEMA_VERSION
    for name in src:
        if name in KEPT_GROUPS or name == group:
            _copy_group(src, dst, name, member if name == group else None, path)
        elif name == "k":
            dst.create_dataset("k", data=as_records(src["k"][...]), maxshape=(None,))
        else:
            src.copy(src[name], dst, name)


_MEMBER_CACHE: dict[tuple, object] = {}


def kept_with(obj, cache, read):
    """``read()`` once per ``obj`` and kept in ``cache`` (a ``weakref.WeakKeyDictionary``) as long as
    ``obj`` lives: what is stored with one ``SystemParameters`` object, which ``load_sp`` renews when
    its file changes. An ``obj`` that cannot be a weak key is read every time."""
    try:
        return cache[obj]
    except (KeyError, TypeError):
        pass
    value = read()
    try:
        cache[obj] = value
    except TypeError:
        pass
    return value


def read_member(path: str | os.PathLike | None, group: str, member: str | None, parse, empty, what: str,
                rebuild: str = REBUILD):
    """``parse(h5py.Group)`` of ``/group/member``, cached per file version; ``empty()`` when the
    file or member is absent, and (with one RuntimeWarning naming ``what``) when it is unreadable
    or of a schema no migration reads (naming ``rebuild``). Side data kept per platform
    (contention, fitted phase factors) is read this way: never raises."""

    if path is None or member is None:
        return empty()
    try:
        key = (str(path), Path(path).stat().st_mtime_ns, group, member)
    except OSError:
        return empty()
    if key not in _MEMBER_CACHE:
        try:
            with open_file(path) as f:
                found = group in f and member in f[group]
                if found:
                    check_member(f, group, f[group][member], path, rebuild)
                _MEMBER_CACHE[key] = parse(f[group][member]) if found else empty()
        except Exception as exc:   # damaged: no correction, one warning
            warn_user(f"ignoring unreadable {what} in {path}: {exc}")
            _MEMBER_CACHE[key] = empty()
    return _MEMBER_CACHE[key]


_UNUSABLE_WARNED: set[str] = set()


def read_group_member(path: str | os.PathLike | None, group: str, member: str, parse, what: str,
                      rebuild: str, consequence: str = "") -> tuple[object | None, dict, str]:
    """(``parse(/group/member)``, its ``info`` attribute, "") or (None, {}, why not): silently for
    an absent file or member, with one RuntimeWarning per cause when unreadable or refused. Never raises."""

    try:
        p = location.resolve(path)
        if not p.is_file():
            return None, {}, f"no database at {p}"
        with open_file(p) as f:
            if group not in f or member not in f[group]:
                return None, {}, f"no {what} in {p} (run `autotune-install --validate`)"
            g = f[group][member]
            check_member(f, group, g, p, rebuild)
            return parse(g), json.loads(g.attrs.get("info", "{}")), ""
    except Exception as exc:  # h5py raises OSError/KeyError/ValueError for damaged files; refused schemas too
        reason = f"{what} unusable in {path} ({type(exc).__name__}: {exc}){consequence}"
        if reason not in _UNUSABLE_WARNED:
            _UNUSABLE_WARNED.add(reason)
            warn_user(reason)
        return None, {}, reason
