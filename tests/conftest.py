"""Shared set-up: every test gets its own default database path, never the user's real one."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from autotune.db import location

_HYPOTHESIS_DIR: str | None = None


def pytest_configure(config):
    """Keep Hypothesis' cache (.hypothesis/) out of the source tree unless the user chose a place."""
    global _HYPOTHESIS_DIR
    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        from hypothesis.configuration import set_hypothesis_home_dir

        _HYPOTHESIS_DIR = tempfile.mkdtemp(prefix="autotune-hypothesis-")
        set_hypothesis_home_dir(_HYPOTHESIS_DIR)


def pytest_unconfigure(config):
    if _HYPOTHESIS_DIR:
        shutil.rmtree(_HYPOTHESIS_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_default_db(tmp_path, monkeypatch):
    """Point $AUTOTUNE_DB at a per-test temporary file (absent unless a test writes it).

    Also run each test from its temporary directory: child Pythons started from the source tree
    would import the uninstalled ``autotune/`` folder instead of the installed package.
    """
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "default-db" / "system_parameters.h5"
    monkeypatch.setenv(location.ENV_VAR, str(path))
    return path
