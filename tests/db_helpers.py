"""Editing a database file in place as a test's set-up: the edit is sealed as the store's writers
seal theirs, so the file reads as intact (only an unsealed edit reads as damage)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import h5py

from autotune.db.store import seal


@contextlib.contextmanager
def edited(path, mode: str = "r+") -> Iterator[h5py.File]:
    """``h5py.File(path, mode)``, sealed again when closed."""
    with h5py.File(path, mode) as f:
        yield f
    seal(path)
