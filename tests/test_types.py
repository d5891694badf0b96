"""The selector, the models and the entry points type-check (mypy, configured in pyproject.toml)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKED = ("autotune/select", "autotune/models", "autotune/entry")


def test_mypy_passes_on_select_models_and_entry():
    pytest.importorskip("mypy")
    out = subprocess.run([sys.executable, "-m", "mypy", *CHECKED], capture_output=True, text=True, timeout=600,
                         cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
