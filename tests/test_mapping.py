"""Mapping processes to processors: platform files, the mapping model, the search methods."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune.core.families import as_problem
from autotune.core.plans import Plan
from autotune.core.routines import flops
from autotune.db.platform import PlatformError, load_platform, parse_platform, simulated_platform
from autotune.models import mapping as mm
from autotune.select import mapping as sm

LINKS = {"host": {"ts": 1.5e-6, "tw": 2e-10}, "net": {"ts": 2e-5, "tw": 8e-9}}
K = {"gemm": 2.5e-11, "trsm": 3.5e-11, "panel": 1e-10}


def _platform(hosts, links=LINKS, most=2):
    return parse_platform({"name": "t", "hosts": hosts, "links": links, "k": K, "max_per_processor": most})


SMALL = [{"name": "a", "processors": 2, "speed": 1.0}, {"name": "b", "processors": 1, "speed": 0.5},
         {"name": "c", "processors": 1, "speed": 0.25}]


@pytest.mark.parametrize("change, match", [
    ({"colour": 1}, "unknown key"),
    ({"hosts": [{"name": "a", "processors": 1, "speed": -1.0}]}, "speed must be positive"),
    ({"hosts": [{"name": "a", "processors": 1.5}]}, "processors must be"),
    ({"hosts": [{"name": "a", "cores": 2}]}, "unknown key"),
    ({"links": {"host": LINKS["host"]}}, "links.net missing"),
    ({"links": {**LINKS, "net": {"ts": 1e-5, "tw": 0}}}, "tw must be positive"),
    ({"k": {"gemm": 1e-11}}, "k.trsm must be"),
    ({"hosts": []}, "non-empty"),
    ({"max_per_processor": 0}, "must be positive"),
])
def test_platform_file_errors(change, match):
    data = {"hosts": SMALL, "links": LINKS, "k": K, **change}
    with pytest.raises(PlatformError, match=match):
        parse_platform(data)


def test_platform_file_round_trip(tmp_path):
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "hosts": [{"name": "f", "processors": 2, "speed": 1.0, "count": 2}],
                                    "links": LINKS, "k": K}))
    pl = load_platform(path)
    assert pl.size == 4 and [h.name for h in pl.hosts] == ["f0", "f1"]
    assert pl.host_of.tolist() == [0, 0, 1, 1] and pl.k("gemm", 64) == K["gemm"]
    with pytest.raises(PlatformError, match="not valid YAML"):
        (tmp_path / "bad.yaml").write_text("hosts: [")
        load_platform(tmp_path / "bad.yaml")
    with pytest.raises(PlatformError, match="cannot read"):
        load_platform(tmp_path / "missing.yaml")


def test_simulated_platforms():
    pl = parse_platform(simulated_platform(16, "high"))
    assert pl.size == 16 and len(pl.hosts) == 4
    assert sorted({h.speed for h in pl.hosts}) == [0.1, 0.25, 0.5, 1.0]
    with pytest.raises(PlatformError):
        simulated_platform(10, "low")


def test_slowdown_and_spans():
    speeds = np.array([1.0, 1.0, 0.5])
    assert mm.slowdown(np.array([2, 0, 1]), speeds) == 2.0
    assert mm.slowdown(np.array([1, 1, 0]), speeds) == 1.0
    assert mm.slowdown(np.array([1, 0, 1]), speeds) == 2.0
    hosts = mm.rank_hosts(np.array([2, 2]), np.array([0, 1]))       # ranks 0,1 on host 0; 2,3 on host 1
    assert mm.spans(hosts, 2, 2) == (False, True)
    assert mm.spans(hosts, 1, 4) == (True, False)
    assert mm.spans(hosts, 4, 1) == (False, True)


def test_network_cost_follows_links():
    """The same grid is dearer when its rows cross the network; a slower processor slows compute."""
    pl = _platform([{"name": "a", "processors": 2, "speed": 1.0}, {"name": "b", "processors": 2, "speed": 1.0}])
    s = sm.Search("lu", 4096, pl)
    one_host, two_hosts = s.eet(np.array([1, 1, 0, 0])), s.eet(np.array([1, 0, 1, 0]))
    assert two_hosts.comm > 5 * one_host.comm and two_hosts.compute == pytest.approx(one_host.compute)
    slow = _platform([{"name": "a", "processors": 2, "speed": 1.0}, {"name": "b", "processors": 2, "speed": 0.5}])
    s2 = sm.Search("lu", 4096, slow)
    e = two_hosts
    assert s2.estimate(np.array([1, 0, 1, 0]), e.r, e.c, e.b).compute == pytest.approx(2 * e.compute)


@pytest.mark.parametrize("family", ["lu", "cholesky"])
def test_weighted_block_cyclic_follows_the_speeds(family):
    """HoHe for the factorizations: blocks per cycle by speed take the slowdown from max d/s (HeHo,
    equal blocks) to the most loaded rank's share over its speed; the search picks it where speeds
    differ and builds a plan whose weights are the ranks' speeds."""
    r, c = np.array([[1.0], [2.0]]), np.array([[2.0], [1.0]])
    np.testing.assert_allclose(mm.weighted_slowdown(np.array([1.0, 0.5]), r, c), [[4 / 3], [4 / 3]])
    np.testing.assert_allclose(mm.weighted_slowdown(np.array([1.0, 1.0]), r, c), [[1.0], [1.0]])
    slow = _platform([{"name": "a", "processors": 1, "speed": 1.0}, {"name": "b", "processors": 1, "speed": 0.5}])
    s = sm.Search(family, 4096, slow)
    d = np.array([1, 1])
    best = s.eet(d)
    assert best.layout == "weighted" and "w" in sm.grid_label(best.layout, best.r, best.c, best.b)
    cyclic = s.estimate(d, best.r, best.c, best.b)
    assert best.compute == pytest.approx(cyclic.compute * (4 / 3) / 2)
    assert s.estimate(d, best.r, best.c, best.b, "weighted") == best
    even = sm.Search(family, 4096, _platform([{"name": "a", "processors": 2, "speed": 1.0}]))
    assert even.eet(np.array([1, 1])).layout == "cyclic"
    hosts = [sm.RankHost("a", (0,), 1), sm.RankHost("b", (1,), 1)]
    close = _platform([{"name": "a", "processors": 1, "speed": 1.0}, {"name": "b", "processors": 1, "speed": 0.75}],
                      links={"host": LINKS["host"], "net": LINKS["host"]})
    placed = sm.placement(family, 20000, hosts, close)
    assert placed.plan.weights == (1.0, 0.75) and placed.plan.algorithm == family and placed.plan.b
    assert "blocks per cycle by speed" in placed.describe()


def _brute_force(search: sm.Search) -> float:
    """The least EET over every mapping, processor by processor (no symmetry)."""
    best = np.inf
    for d in itertools.product(range(search.most + 1), repeat=search.P):
        d = np.array(d)
        if 0 < d.sum() <= search.max_level:
            best = min(best, search.eet(d).seconds)
    return best


@pytest.mark.parametrize("family, n", [("lu", 2000), ("lu", 20000), ("cholesky", 8000), ("gemm", 6000)])
def test_exhaustive_and_btm_find_the_optimum(family, n):
    pl = _platform(SMALL)
    truth = _brute_force(sm.Search(family, n, pl))
    for method in ("exhaustive", "BTM", "BGRM"):
        choice = sm.run_method(method, family, n, pl)
        assert choice.complete
        assert choice.estimate.seconds == pytest.approx(truth, rel=1e-12), method


def test_lower_bound_is_below_every_descendant():
    pl = _platform(SMALL)
    s = sm.Search("lu", 8000, pl)
    for d0 in ([1, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0]):
        d0 = np.array(d0)
        last = int(np.flatnonzero(d0).max())
        bound = s.lower_bound(d0, last, False)
        for extra in itertools.product(range(3), repeat=pl.size - last):
            d = d0.copy()
            d[last:] += np.array(extra)
            if d.max() <= s.most and d.sum() <= s.max_level:
                assert bound <= s.eet(d).seconds * (1 + 1e-12)


def test_heuristics_and_users():
    pl = parse_platform(simulated_platform(16, "high"))
    st = sm.study("lu", 20000, pl, ("GCTM", "GPTM", "GRM", "greedy", "conservative", "expert"))
    gu, cu = st.of("greedy"), st.of("conservative")
    assert gu.d == (1,) * 16 and cu.d == (1,) * 8 + (0,) * 8
    assert st.of("expert").estimate.seconds <= gu.estimate.seconds
    # on this platform (slow processors, a 10 Gbit network) the greedy user's mapping is far from the best
    assert st.of("GPTM").estimate.seconds < 0.8 * gu.estimate.seconds
    for c in st.choices:
        assert 1 <= c.p <= 32 and max(c.d) <= pl.max_per_processor
        assert c.estimate.r * c.estimate.c == c.p
    assert "GPTM" in sm.describe(st)


def test_unknown_method_and_family():
    pl = _platform(SMALL)
    with pytest.raises(ValueError, match="unknown method"):
        sm.run_method("BFS", "lu", 100, pl)
    with pytest.raises(ValueError, match="unknown family"):
        sm.Search("qr", 100, pl)


def test_example_platform_and_explain(tmp_path, capsys):
    from pathlib import Path

    from autotune.cli import command as cli

    example = Path(__file__).resolve().parents[1] / "configs" / "platforms" / "example-16.yaml"
    assert load_platform(example).size == 16
    small = tmp_path / "small.yaml"
    import yaml

    small.write_text(yaml.safe_dump({"hosts": SMALL, "links": LINKS, "k": K}))
    assert cli.main(["explain", "lu", "3000", "--platform", str(small)]) == 0
    out = capsys.readouterr().out
    assert "exhaustive" in out and "GPTM" in out and "greedy" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"hosts": [{"name": "a", "speed": -2}], "links": LINKS, "k": K}))
    assert cli.main(["explain", "lu", "3000", "--platform", str(bad)]) == 2
    assert "speed must be positive" in capsys.readouterr().err


def test_one_process_runs_the_library_routine_where_its_k_is_given():
    pl = parse_platform({"hosts": SMALL, "links": LINKS, "k": {**K, "lib_lu": 1.5e-11}})
    s = sm.Search("lu", 2000, pl)
    alone = s.eet(np.array([1, 0, 0, 0]))
    lu_flops = flops("getrf", {"m": 2000, "n": 2000})
    assert alone.layout == "library" and alone.seconds == pytest.approx(lu_flops * 1.5e-11)
    assert s.eet(np.array([0, 0, 1, 0])).seconds == pytest.approx(2 * alone.seconds)     # speed 0.5
    assert sm.Search("lu", 2000, _platform(SMALL)).eet(np.array([1, 0, 0, 0])).layout == "cyclic"


RANKS = """
import numpy as np, scipy.linalg as sl
from mpi4py import MPI
from autotune.core.plans import Plan
from autotune.core.routines import flops
from autotune.entry.cholesky import collective as distributed_cholesky
from autotune.entry.gemm import collective as distributed_gemm
from autotune.entry.lu import collective_lu_factor as distributed_lu_factor

comm = MPI.COMM_WORLD
rng = np.random.default_rng(3)
a = rng.standard_normal((37, 37)); b = rng.standard_normal((37, 37)); s = a @ a.T + 37 * np.eye(37)
bad = []
for root, ranks in ((0, (0, 2)), (2, (2, 0)), (1, (1, 2, 0))):
    p = len(ranks)
    mine = lambda x: x if comm.rank == root else None
    runs = {"lu": distributed_lu_factor(mine(a), comm, root=root, config=Plan("lu", p, 1, p, b=8, ranks=ranks)),
            "cholesky": distributed_cholesky(mine(s), comm, lower=True, root=root,
                                             config=Plan("cholesky", p, p, 1, b=8, ranks=ranks)),
            "summa": distributed_gemm(mine(a), mine(b), comm, root=root,
                                      config=Plan("summa", p, 1, p, b=8, ranks=ranks)),
            "hohe": distributed_gemm(mine(a), mine(b), comm, root=root,
                                     config=Plan("bsr", p, p, 1, weights=tuple(range(1, p + 1)), ranks=ranks))}
    if comm.rank != root:
        bad += [k for k, v in runs.items() if v is not None]
        continue
    lu, piv = runs["lu"]
    wlu, wpiv = sl.lu_factor(a)
    bad += [] if np.array_equal(piv, wpiv) and np.allclose(lu, wlu) else [f"lu {ranks}"]
    bad += [] if np.allclose(runs["cholesky"], sl.cholesky(s, lower=True)) else [f"cholesky {ranks}"]
    bad += [f"{k} {ranks}" for k in ("summa", "hohe") if not np.allclose(runs[k], a @ b)]
for ranks, says in (((0, 5), "needs 6 ranks, communicator has 3"), ((1, 0), "must be the root")):
    try:
        distributed_lu_factor(a if comm.rank == 0 else None, comm, config=Plan("lu", 2, 1, 2, b=8, ranks=ranks))
        bad.append(f"no error for ranks {ranks}")
    except ValueError as exc:
        bad += [] if says in str(exc) else [f"wrong error {exc}"]
print("BAD" if bad else "OK", comm.rank, bad, flush=True)
"""


def test_plans_run_on_the_ranks_a_mapping_names(tmp_path):
    """A plan with ``ranks`` runs on those ranks in that order (root first) and gives scipy's
    results; ranks beyond the communicator or not led by the root: one error on every rank."""
    from mpi_helpers import run_mpi

    out = run_mpi(RANKS, 3, tmp_path).stdout
    assert out.count("OK") == 3 and "BAD" not in out, out
    with pytest.raises(ValueError, match="distinct"):
        Plan("lu", 2, 1, 2, b=8, ranks=(0, 0))


# ---------------------------------------------------------------- placing a tuned call's processes

class FakeComm:
    """What the placement reads of a CommParams: host speeds, the ranks' spread, link (ts, tw)."""

    def __init__(self, speeds, skew=0.05, net=(2e-5, 8e-9)):
        self.host_speeds, self._skew, self._net = speeds, skew, net
        self.platform = {"key": "fake"}

    def compute_skew(self, p):
        return self._skew

    def primitives(self):
        return ["link_host", "link_net"]

    def ts_tw(self, primitive, p, m):
        return (1.5e-6, 2e-10) if primitive == "link_host" else self._net


def test_rank_hosts_put_the_root_first():
    hosts = sm.rank_hosts(["b", "a", "b", "c", "a"], [2, 4, 2, 1, 4], root=2)
    assert [(h.name, h.ranks, h.cores) for h in hosts] == [("b", (2, 0), 2), ("a", (1, 4), 4), ("c", (3,), 1)]
    assert [h.processors for h in hosts] == [2, 2, 1]


def test_heterogeneous_needs_measured_hosts_differing_beyond_the_spread():
    hosts = sm.rank_hosts(["a", "b"], [1, 1], 0)
    assert sm.heterogeneous(hosts, FakeComm({"a": 10.0, "b": 5.0}))
    assert not sm.heterogeneous(hosts, FakeComm({"a": 10.0, "b": 9.8}))               # within the 5% spread
    assert not sm.heterogeneous(hosts, FakeComm({"a": 10.0}))                          # b not measured
    assert not sm.heterogeneous(hosts[:1], FakeComm({"a": 10.0, "b": 5.0}))            # one host


@pytest.mark.parametrize("family", ["gemm", "cholesky", "lu"])
@pytest.mark.parametrize("n", [300, 6000])
def test_placement_is_the_best_count_per_host_with_the_root_in_it(family, n):
    hosts = sm.rank_hosts(["slow", "fast", "fast", "mid"], [1, 2, 2, 1], root=0)
    pl = _platform([{"name": "slow", "processors": 1, "speed": 0.3}, {"name": "fast", "processors": 2, "speed": 1.0},
                    {"name": "mid", "processors": 1, "speed": 0.6}], most=1)
    got = sm.placement(family, n, hosts, pl)
    search = sm.Search(family, n, pl)
    every = {k: search.eet(np.array([x for x in (k[0], *_two(k[1]), k[2])])).seconds
             for k in itertools.product((1,), range(3), range(2))}
    assert got.counts[0] >= 1 and got.estimate.seconds == pytest.approx(min(every.values()))
    plan = got.plan
    if plan.algorithm == "local":
        assert got.counts == (1, 0, 0)
    else:
        want = (0, 1, 2, 3)[:1] + (1, 2)[:got.counts[1]] + (3,)[:got.counts[2]]
        assert plan.ranks == want and plan.p == sum(got.counts) and plan.threads == 1
    assert "processes per host" in got.describe()


def _two(k):
    return (k // 2 + k % 2, k // 2)


def test_placement_uses_the_fast_hosts_for_a_big_problem_and_one_process_for_a_tiny_one():
    hosts = sm.rank_hosts(["a", "a", "b", "c"], [2, 2, 1, 1], root=0)
    pl = _platform([{"name": "a", "processors": 2, "speed": 1.0}, {"name": "b", "processors": 1, "speed": 1.0},
                    {"name": "c", "processors": 1, "speed": 0.1}], links={**LINKS, "net": {"ts": 2e-5, "tw": 1e-10}},
                   most=1)
    big = sm.placement("gemm", 8000, hosts, pl)
    assert big.counts[:2] == (2, 1) and big.plan.p >= 3
    tiny = sm.placement("lu", 40, hosts, pl)
    assert tiny.plan.p == 1 and tiny.counts[0] == 1


def test_tuned_calls_place_ranks_only_on_measured_heterogeneous_hosts(tiny_db):
    from autotune.db import load_sp
    from autotune.entry import protocol

    sp = load_sp(tiny_db)
    het = FakeComm({"a": 10.0, "b": 4.0})
    placed = protocol._placement(as_problem("gemm", (3000, 3000, 3000)), ["a", "a", "b"], [2, 2, 1], 0, sp, het)
    assert placed is not None and placed.plan.used_ranks(3)[0] == 0 and "mapping" in placed.describe()
    assert placed.platform.hosts[0].name == "a" and placed.platform.hosts[0].processors == 2
    assert protocol._placement(as_problem("gemm", (3000, 3000, 3000)), ["a", "a", "a"], [2, 2, 2], 0, sp, het) is None
    assert protocol._placement(as_problem("solve", (3000, 16)), ["a", "b"], [2, 1], 0, sp, het) is None
    assert protocol._placement(as_problem("gemm", (3000, 30, 3000)), ["a", "b"], [2, 1], 0, sp, het) is None
    homo = FakeComm({"a": 10.0, "b": 9.9})
    assert protocol._placement(as_problem("lu", (3000,)), ["a", "b"], [2, 1], 1, sp, homo) is None
    lu = protocol._placement(as_problem("lu", (3000,)), ["a", "b"], [2, 1], 1, sp, het)
    assert lu.plan.used_ranks(2, 1)[0] == 1 and lu.platform.hosts[0].name == "b"


def test_a_throttled_host_stalls_the_plans_it_joins(tiny_db):
    """A host whose rank has 40% of a core (its speed measured at that rate) runs as fast as the
    root while it runs but 40% of the time: a plan on both waits for it through each period, so
    the LU runs on the root alone."""
    from autotune.db import load_sp
    from autotune.entry import protocol

    sp = load_sp(tiny_db)
    cp = FakeComm({"a": 10.0, "b": 4.0})
    cp.rank_names, cp.rank_shares = ("a", "b"), (0.0, 0.4)
    capped = protocol._placement(as_problem("lu", (3000,)), ["a", "b"], [1, 1], 0, sp, cp)
    assert [h.speed for h in capped.platform.hosts] == [1.0, 1.0] and capped.platform.hosts[1].duty == 0.4
    assert capped.plan.p == 1 and capped.plan.algorithm == "local"


def test_placement_bench_alternatives_and_bad_arguments(capsys):
    from autotune.benchmarks import placement
    from autotune.cli.command import main as cli_main

    alts = placement.alternatives("gemm", 3, [64, 128])
    assert list(alts) == ["root alone", "1x3 b=64", "1x3 b=128", "3x1 b=64", "3x1 b=128", "bsr equal rows"]
    assert alts["root alone"].algorithm == "local" and alts["3x1 b=128"].p == 3
    assert list(placement.alternatives("lu", 1, [64])) == ["root alone"]
    hohe = placement.alternatives("cholesky", 2, [64], (1.0, 0.5))
    assert list(hohe) == ["root alone", "1x2 b=64", "2x1 b=64", "1x2w b=64", "2x1w b=64"]
    assert hohe["1x2w b=64"].weights == (1.0, 0.5) and placement.alternatives("lu", 2, [64], (1.0, 1.0)).keys() \
        == {"root alone", "1x2 b=64", "2x1 b=64"}
    assert cli_main(["bench", "placement", "--reps", "0"]) == 2
    assert "--reps" in capsys.readouterr().err
