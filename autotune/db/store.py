"""The HDF5 system-parameter database: schema, atomic writes, lock-free reads.

Layout (schema 1): root attributes ``schema_version``, ``fingerprint`` (JSON), ``digest``,
``backends`` (JSON: name -> library info), ``run`` (JSON: profile, run id, complete flag),
``updated``; dataset ``/k``: one compound row per measured point (RECORD_DTYPE). ``t_call`` is
the Python-level per-call cost that was inside the timing (0 where calls were looped natively;
timed on 1x1 operands otherwise); ``k = (t_median - t_call) / flops`` excludes it, so a
compiled driver is charged ``flops * k`` and a Python caller ``flops * k + calls * t_call``.
Writers take ``PATH.lock`` and replace the file atomically, so a reader sees either the old
or the new file, never a torn one, and never waits for the lock.

Communication parameters (``autotune.db.comm``) live in the same file under the group
``/comm`` (one subgroup per MPI platform, with its own ``comm_schema`` attribute): ``save``
carries that group over unchanged, and ``replace_group`` rewrites one group while carrying
everything else over, so neither kind of writer deletes the other's records. A file holding
only ``/comm`` (no ``/k``) reads as DatabaseMissing for the BLAS side.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import fingerprint as fp

SCHEMA_VERSION = 2  # 2: per-point drift reference ("ref")

RECORD_DTYPE = np.dtype([
    ("routine", "S8"), ("backend", "S24"), ("threads", "i4"), ("dtype", "S8"),
    ("pattern", "S8"), ("param", "f8"), ("x", "i8"), ("flops", "f8"),
    ("t_median", "f8"), ("t_min", "f8"), ("t_q1", "f8"), ("t_q3", "f8"), ("reps", "i4"),
    ("t_call", "f8"), ("k", "f8"), ("run_id", "S16"),
    ("ref", "f8"),   # drift reference: the backend's own reference gemm time near this point (0: none)
])
COMM_GROUP = "comm"   # communication parameters (autotune.db.comm); kept across BLAS saves
# Groups other parts write into the same file, carried over when the BLAS records are rewritten:
# communication parameters, fitted models (autotune.models.fitted), learned corrections (autotune.learn).
KEPT_GROUPS = frozenset({COMM_GROUP, "contention", "fitted", "fitted_phases", "learned"})
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


def record_key(row) -> tuple:
    """Identity of a measured point (independent of its timing values), as Python str/int/float."""
    values = (row[f].item() if hasattr(row[f], "item") else row[f] for f in KEY_FIELDS)
    return tuple(v.decode() if isinstance(v, bytes) else v for v in values)


def valid_mask(records: np.ndarray) -> np.ndarray:
    """True where a record's k is finite and positive and its median and minimum times finite and
    not negative: a NaN, zero, negative or infinite k would rank its candidates as free or
    unorderable. (A probe's zero median gives a zero k; a zero time beside a good k is unset.)"""
    ok = np.isfinite(records["k"]) & (records["k"] > 0)
    for name in CHECKED_FIELDS:
        ok &= np.isfinite(records[name]) & (records[name] >= 0)
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
    import h5py

    path = Path(path)
    if not path.is_file():
        raise DatabaseMissing(f"no database at {path}")
    try:
        with h5py.File(path, "r", locking=False) as f:
            if not f.keys() and not f.attrs.keys():
                raise DatabaseMissing(f"no measurements in {path}: an empty HDF5 file")
            version = int(f.attrs.get("schema_version", -1))
            if "k" not in f and KEPT_GROUPS & set(f):
                raise DatabaseMissing(f"no BLAS measurements in {path} (only communication parameters)")
            if version != SCHEMA_VERSION:
                raise SchemaMismatch(f"{path}: schema version {version}, this autotune reads {SCHEMA_VERSION}")
            db = Database(records=np.asarray(f["k"][...]).astype(RECORD_DTYPE),
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


@contextlib.contextmanager
def _atomic_replace(path: Path) -> Iterator[str]:
    """Under the database's lock, yield a temporary file next to ``path``; replace ``path`` with it
    (after fsync) if the block succeeds, delete it otherwise. One writer at a time, readers never
    see a half-written file."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(path.parent, os.W_OK):
        raise PermissionError(f"cannot write the database: directory {path.parent} is not writable")
    with FileLock(str(path) + ".lock", timeout=60):
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a database is an ordinary file
            yield tmp
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(db: Database, tmp: str) -> None:
    import h5py

    with h5py.File(tmp, "w", locking=False) as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["fingerprint"] = json.dumps(db.fingerprint, sort_keys=True)
        f.attrs["digest"] = fp.digest(db.fingerprint)
        f.attrs["backends"] = json.dumps(db.backends, sort_keys=True)
        f.attrs["run"] = json.dumps(db.run, sort_keys=True)
        f.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        f.create_dataset("k", data=db.records.astype(RECORD_DTYPE), maxshape=(None,))


# -- groups written by other parts (communication parameters) -------------------------------------

def _carry_over(path: Path, tmp: str, names: set[str]) -> None:
    """Copy the groups ``names`` of the current file at ``path`` (if readable) into ``tmp``."""
    import h5py

    try:
        src = h5py.File(path, "r", locking=False)
    except Exception:  # missing or damaged: nothing to keep
        return
    with src, h5py.File(tmp, "r+", locking=False) as dst:
        copied = False
        for name in names:
            if name in src and name not in dst:
                src.copy(src[name], dst, name)
                copied = True
    if copied:
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())


def replace_group(path: str | os.PathLike, group: str, member: str, write) -> None:
    """Atomically (re)write ``/group/member`` of the database at ``path``, keeping everything else.

    ``write(h5py.Group)`` fills the new, empty member group. Everything else in the file (the BLAS
    records, root attributes, other members of ``group``) is copied over unchanged. A missing or
    unreadable file is replaced by one holding only the root attributes of an empty database plus
    this group (the BLAS side then reads it as DatabaseMissing). Same lock and temporary-file +
    os.replace protocol as ``save``.
    """
    import h5py

    path = Path(path)
    with _atomic_replace(path) as tmp:
        try:
            src = h5py.File(path, "r", locking=False) if path.is_file() else None
        except Exception:  # damaged: start afresh (it was unusable anyway)
            src = None
        with h5py.File(tmp, "w", locking=False) as dst:
            if src is None:
                db = Database()
                dst.attrs["schema_version"] = SCHEMA_VERSION
                dst.attrs["fingerprint"] = json.dumps(db.fingerprint, sort_keys=True)
                dst.attrs["digest"] = fp.digest(db.fingerprint)
                dst.attrs["backends"] = json.dumps({})
                dst.attrs["run"] = json.dumps({})
                dst.attrs["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            else:
                with src:
                    for key, value in src.attrs.items():
                        dst.attrs[key] = value
                    for name in src:
                        if name != group:
                            src.copy(src[name], dst, name)
                        else:
                            g = dst.create_group(group)
                            for key, value in src[group].attrs.items():
                                g.attrs[key] = value
                            for sub in src[group]:
                                if sub != member:
                                    src.copy(src[group][sub], g, sub)
            g = dst.require_group(group)
            write(g.create_group(member))


_MEMBER_CACHE: dict[tuple, object] = {}


def read_member(path: str | os.PathLike | None, group: str, member: str | None, parse, empty, what: str):
    """``parse(h5py.Group)`` of ``/group/member``, cached per file version; ``empty()`` when the
    file or member is absent, and (with one RuntimeWarning naming ``what``) when it is unreadable.
    Side data kept per platform (contention, fitted phase factors) is read this way: never raises."""
    import h5py

    if path is None or member is None:
        return empty()
    try:
        key = (str(path), Path(path).stat().st_mtime_ns, group, member)
    except OSError:
        return empty()
    if key not in _MEMBER_CACHE:
        try:
            with h5py.File(path, "r", locking=False) as f:
                found = group in f and member in f[group]
                _MEMBER_CACHE[key] = parse(f[group][member]) if found else empty()
        except Exception as exc:   # damaged: no correction, one warning
            warnings.warn(f"ignoring unreadable {what} in {path}: {exc}", RuntimeWarning, stacklevel=3)
            _MEMBER_CACHE[key] = empty()
    return _MEMBER_CACHE[key]
