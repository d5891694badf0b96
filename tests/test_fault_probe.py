"""The collective calls under a bad value on one rank only (tests/fault_probe.py): no case hangs and
every rank raises the same exception type and message, or every rank returns.

The issue's own cases run in full (both bad ranks); a sample of the whole catalogue runs too.
``python tests/fault_probe.py --np 2 --out DIR`` runs every case (about a thousand at P = 2)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mpi_helpers import require_mpi

sys.path.insert(0, str(Path(__file__).parent))
import fault_probe  # noqa: E402

# Each found hanging or silently wrong once: a bad argument on one rank (heat2d's alpha, advance's
# steps, phases, a flag whose truth raises, numpy's keywords), a kernel raising on one rank (with and
# without balancing), a field used after free(), complex weights.
ISSUE = ("heat2d alpha=nan", "heat2d[forced] alpha='x'", "advance[stencil] steps=-1", "advance[overlap] steps=differs",
         "advance[local] steps=1.5", "advance[stencil] kernel=raises", "advance[overlap] kernel=raises+balance",
         "apply(kernel)[forced] kernel=raises", "self=freed", "apply weights=complex",
         "tuned_gemm dtype=float32", "tuned_cholesky check_finite=ambiguous", "heat2d phases='x'",
         "apply[forced] explain=ambiguous", "distribute[forced] steps=-1")
MUST_RAISE = ("alpha=nan", "alpha='x'", "steps=-1", "steps=differs", "steps=1.5", "[stencil] kernel=raises",
              "[overlap] kernel=raises", "apply(kernel)[forced] kernel=raises", "freed", "weights=complex",
              "dtype=float32", "check_finite=ambiguous on rank 0", "phases='x'")   # check_finite: the root's


def _probe(tmp_path, wanted: list[int], nprocs: int = 2) -> list[dict]:
    require_mpi()
    records = fault_probe.drive(nprocs, tmp_path / "probe", wanted, limit=30.0, job_timeout=600.0)
    assert [r["case"] for r in records] == wanted, fault_probe.summary(records)
    return records


def test_the_issues_faults_raise_alike_on_every_rank(tmp_path):
    """Without a database (the tuned calls fall back)."""
    wanted = sorted({i for m in ISSUE for i in fault_probe.select(2, 1, m)})
    records = _probe(tmp_path, wanted)
    bad = [r for r in records if r["verdict"] not in ("ok", "alike")]
    assert not bad, fault_probe.summary(records)
    for r in records:
        if any(m in r["name"] for m in MUST_RAISE) and not r["name"].startswith("advance[local] kernel"):
            assert r["verdict"] == "alike", r
            assert len({tuple(o) for o in r["outcomes"]}) == 1, r       # one type and message on every rank
    assert any("was freed" in r["outcomes"][0][1] for r in records if "freed" in r["name"])
    assert any("must be real" in r["outcomes"][0][1] for r in records if "complex" in r["name"])


@pytest.mark.parametrize("nprocs, every", [(2, 17), (3, 41)])
def test_a_sample_of_every_call_and_argument_ends_alike(tmp_path, nprocs, every, tiny_db, monkeypatch):
    """With a measured database (the tuned plans)."""
    monkeypatch.setenv("AUTOTUNE_DB", str(tiny_db))
    records = _probe(tmp_path, fault_probe.select(nprocs, every), nprocs)
    assert all(r["verdict"] in ("ok", "alike") for r in records), fault_probe.summary(records)
