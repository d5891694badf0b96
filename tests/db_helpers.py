"""Editing a database file in place as a test's set-up: the edit is sealed as the store's writers
seal theirs, so the file reads as intact (only an unsealed edit reads as damage)."""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

import h5py
import numpy as np

from autotune.db.comm_lookup import CommParams
from autotune.db.lookup import load_sp
from autotune.db.store import seal


@contextlib.contextmanager
def edited(path, mode: str = "r+") -> Iterator[h5py.File]:
    """``h5py.File(path, mode)``, sealed again when closed."""
    with h5py.File(path, mode) as f:
        yield f
    seal(path)


def damaged_copy(db, path):
    """A copy of the database ``db`` at ``path`` whose first two k are NaN and negative (sealed:
    the file reads as intact, its records as invalid)."""
    shutil.copy(db, path)
    with edited(path, "r+") as f:
        rows = f["k"][...]
        rows["k"][:2] = [np.nan, -1.0]
        f["k"][...] = rows
    return path


class TestPlatform(CommParams):
    """Comm parameters of a made-up P = 4 platform (key ``test-P4``), for stored per-platform data."""

    __test__ = False

    @property
    def platform(self) -> dict:
        return {"key": "test-P4", "P": 4, "source": "test"}


def platform_db(db, tmp_path):
    """(path, sp, cp) of a copy of the database ``db`` with the ``TestPlatform``."""
    path = tmp_path / "db.h5"
    shutil.copy(db, path)
    return path, load_sp(path), TestPlatform(None, "test", 4)
