"""docs/usage.md's calls, run as written: the stencil check it points to."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import autotune.kernels.stencil  # the module the docs name (evaluated below)
import numpy as np

from autotune import stencil

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def _documented(name: str) -> str:
    """The first ``autotune.kernels.stencil.NAME(...)`` call usage.md writes out."""
    found = re.search(rf"`(autotune\.kernels\.stencil\.{name}\([^`]*\))`", USAGE.read_text())
    assert found, f"usage.md shows no call of autotune.kernels.stencil.{name}"
    return found.group(1)


def test_the_documented_stencil_check_runs_and_agrees_with_heat2d():
    """The reference usage.md gives for ``heat2d`` (its weights from ``alpha``) is the result to rounding."""
    u0 = np.random.default_rng(0).standard_normal((24, 31))
    steps, alpha = 7, 0.2
    scope = {"autotune": autotune, "u0": u0, "steps": steps, "alpha": alpha}
    scope["weights"] = eval(_documented("heat_weights"), scope)
    expected = eval(_documented("reference"), scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # no database: numpy's kernel, one warning
        got = stencil.heat2d(u0, steps, alpha)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

