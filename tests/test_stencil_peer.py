"""The Devito peer's bookkeeping (the timing itself runs in tests/test_bench_mpi.py when Devito is
installed)."""
import pytest

from autotune.benchmarks import stencil_peer


def _row(field, p, ours, best):
    return {"field": field, "P": p, "devito_best": "basic",
            "times": {"autotune": {"median": ours}, "basic": {"median": best}}}


def test_scaling_compares_each_sides_one_rank_run_with_its_all_ranks_run():
    rows = [_row(512, 1, 1.0, 1.2), _row(512, 2, 0.5, 0.8), _row(1024, 1, 4.0, 4.0)]
    want = {"field": 512, "ours": pytest.approx(2.0), "devito": pytest.approx(1.5)}
    assert stencil_peer._scaling(rows, [1, 2]) == [want]


def test_without_devito_the_peer_is_said_and_not_timed(monkeypatch):
    monkeypatch.setattr(stencil_peer, "devito_version", lambda: None)
    out = stencil_peer.compare(None, [64], 3, 1)
    assert out["devito"] is None and "pip install devito" in out["note"]
