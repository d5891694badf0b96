"""The communication probe at scale: sampled process counts and grids, (p, m) models chosen by
AICc, lookup at unmeasured p, held-out error at the p left out, the measurement-count table.
No MPI needed: synthetic points stand for the probe's."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from autotune.install_probe import comm_estimate, comm_profile
from db_helpers import edited
from test_comm import platform_info

from autotune.cli.command import main as cli_main
from autotune.db import comm as dbc
from autotune.db.comm_lookup import load_comm
from autotune.models import comm_fit
from autotune.models import comm_scaling as cs

SIZES = [2 ** e for e in range(3, 25)] + [1536, 3072, 6144, 12288]
SAMPLE8 = [2, 3, 4, 6, 8]


def law(p, m, ts_form="log2", tw_form="lin"):
    """A two-regime synthetic cost: an eager regime below 4 KiB, a rendezvous one above."""
    p, m = np.asarray(p, float), np.asarray(m, float)
    small = 1e-6 + 0.8e-6 * cs.form_values(ts_form, p) + m / 3e9 * (1 + 0.5 * cs.form_values(tw_form, p))
    big = 5e-6 + 2e-6 * cs.form_values(ts_form, p) + m / 8e9 * (1 + 0.5 * cs.form_values(tw_form, p))
    return np.where(m < 4096, small, big)


def points(prim="bcast", ps=SAMPLE8, noise=0.0, seed=0, off=None, **forms):
    """POINT_DTYPE rows of ``prim`` at each p (grid broadcasts: on 1 x p / p x 1); ``off``: {p: factor}."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in ps:
        r, c = {"bcast_row": (1, p), "bcast_col": (p, 1)}.get(prim, (0, 0))
        t = law(p, SIZES, **forms) * (1 + noise * rng.standard_normal(len(SIZES))) * (off or {}).get(p, 1.0)
        rows += [(prim, p, r, c, m, x, x, x, x, 5, 1, x) for m, x in zip(SIZES, t, strict=True)]
    return np.array(rows, dtype=dbc.POINT_DTYPE)


def store(path, pts, P=8, models=True):
    pm = cs.fit_models(pts) if models else None
    return dbc.write_platform(path, platform_info(P), pts, comm_fit.fit_points(pts), pmodels=pm)


# -- sampling ------------------------------------------------------------------------------------

def test_sampled_process_counts_are_2_3_4_then_powers_of_two_and_midpoints_and_P():
    sample = comm_profile.sample_procs
    assert sample(1) == [] and sample(2) == [2] and sample(4) == [2, 3, 4]
    assert comm_profile.sample_procs(8) == SAMPLE8
    assert comm_profile.sample_procs(100) == [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100]
    big = comm_profile.sample_procs(1024)
    assert big[-1] == 1024 and len(big) == 19
    assert {2 ** e for e in range(1, 11)} | {3 * 2 ** e for e in range(0, 9)} == set(big)
    assert comm_profile.sample_procs(64, per_octave=1) == [2, 3, 4, 8, 16, 32, 64]
    assert comm_profile.sample_procs(16, per_octave=4) == [2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]


def test_sampled_grids_are_one_row_one_column_and_the_most_square():
    assert comm_profile.sample_grids([2, 3, 4, 6, 12]) == [(1, 2), (2, 1), (1, 3), (3, 1), (1, 4), (2, 2), (4, 1),
                                                    (1, 6), (2, 3), (6, 1), (1, 12), (3, 4), (12, 1)]


def test_profiles_sample_p_and_grids_and_reject_bad_sample_specs():
    std, quick = comm_profile.load_comm_profile("standard"), comm_profile.load_comm_profile("quick")
    assert std.procs == "sample" and std.grids == "sample"
    assert std.p_values(4) == [2, 3, 4] and std.p_values(64) == comm_profile.sample_procs(64)
    assert std.grid_values(8) == comm_profile.sample_grids(SAMPLE8)
    assert quick.p_values(64) == [2, 64]
    one = comm_profile.parse_comm_profile({"sizes": [8], "procs": {"sample": {"per_octave": 1}}, "grids": "sample"})
    assert one.p_values(32) == [2, 3, 4, 8, 16, 32]
    for bad in ({"sample": {"per_octave": 0}}, {"sample": {"every": 2}}, {"sample": "x"}, "some"):
        with pytest.raises(comm_profile.CommProfileError, match="procs"):
            comm_profile.parse_comm_profile({"sizes": [8], "procs": bad})


def test_count_points_and_comm_plan_table(capsys, tmp_path):
    std = comm_profile.load_comm_profile("standard")
    full = comm_profile.parse_comm_profile({**_yaml("standard"), "procs": "all", "grids": "all"})
    count = comm_estimate.count_points
    assert count(std, 4)["points"] == count(full, 4)["points"]    # 2, 3, 4: all of them
    s64, f64 = comm_estimate.count_points(std, 64), comm_estimate.count_points(full, 64)
    assert s64["p"] == 11 and f64["p"] == 63 and s64["points"] * 5 < f64["points"]
    out = tmp_path / "plan.json"
    assert cli_main(["bench", "comm-plan", "--np", "4", "64", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "sampled" in text and "full sweep" in text
    rows = json.loads(out.read_text())["rows"]
    assert [r["P"] for r in rows] == [4, 64] and rows[1]["sampled"]["points"] == s64["points"]
    assert rows[1]["full"]["points"] == f64["points"] and rows[1]["sampled"]["seconds"] < rows[1]["full"]["seconds"]
    assert cli_main(["bench", "comm-plan", "--np", "1"]) == 2


def _yaml(name):
    from autotune.install_probe.profile import read_profile_yaml

    prof = comm_profile
    return read_profile_yaml(name, prof.BUILTIN, "comm-{}.yaml", "comm profile", prof.CommProfileError)[0]


# -- models in (p, m) ----------------------------------------------------------------------------

def test_aicc_is_the_corrected_akaike_criterion():
    assert cs.aicc(2.0, 10, 3) == pytest.approx(10 * math.log(0.2) + 6 + 24 / 6)
    assert cs.aicc(1.0, 4, 3) == math.inf


@pytest.mark.parametrize("ts_form,tw_form", [("log2", "lin"), ("lin", "log2"), ("const", "lin"),
                                             ("ceil_log2", "const")])
def test_aicc_chooses_the_true_forms_of_ts_and_tw(ts_form, tw_form):
    ps = [2, 3, 4, 5, 6, 8, 12, 16]
    rows = cs.fit_models(points(ps=ps, noise=0.005, ts_form=ts_form, tw_form=tw_form))
    assert len(rows) == 2 and list(rows["hi"][:1]) == [4096]
    lo, hi = rows
    assert (lo["ts_form"].decode(), lo["tw_form"].decode()) == (ts_form, tw_form)
    assert hi["tw_form"].decode() == tw_form     # its ts is T(p, m0) = ts(p) + tw(p) m0: forms mix
    assert lo["ts_a"] == pytest.approx(1e-6, rel=0.05) and lo["tw_a"] == pytest.approx(1 / 3e9, rel=0.05)
    assert hi["tw_a"] == pytest.approx(1 / 8e9, rel=0.05)


def test_model_predicts_an_unmeasured_p_and_lookup_uses_it(tmp_path):
    path = tmp_path / "sp.h5"
    store(path, points(off={4: 1.15}))                    # p = 4 measured 15% off the law
    cp = load_comm(path, nprocs=8, refresh=True)
    m = np.array([64.0, 2048.0, 65536.0, 1 << 20])
    got = cp.time("bcast", 5, m)
    np.testing.assert_allclose(got, law(5, m), rtol=0.07)                            # the model ...
    for neighbour in (1.15 * law(4, m), law(6, m)):                               # ... not a neighbour
        assert np.all(np.abs(got[1:] / neighbour[1:] - 1) > 0.05)
    np.testing.assert_allclose(cp.time("bcast", 4, m), 1.15 * law(4, m), rtol=0.02)  # measured: its own curve
    assert np.all(cp.time("bcast", 16, m) > 1.1 * cp.time("bcast", 8, m))           # beyond P: the model too
    ts, tw = cp.ts_tw("bcast", 5, 65536.0)
    assert ts + tw * 65536 == pytest.approx(float(law(5, 65536.0)), rel=0.08)


def test_grid_broadcast_models_are_in_the_members_of_one_broadcast(tmp_path):
    path = tmp_path / "sp.h5"
    store(path, points("bcast_row"))
    cp = load_comm(path, nprocs=8, refresh=True)
    m = np.array([64.0, 65536.0])
    np.testing.assert_allclose(cp.time("bcast_row", 10, m, grid=(2, 5)), law(5, m), rtol=0.08)
    np.testing.assert_allclose(cp.time("bcast_row", 6, m, grid=(1, 6)), law(6, m), rtol=1e-3)   # measured


def test_a_database_without_models_still_loads_and_takes_the_nearest_p(tmp_path):
    path = tmp_path / "sp.h5"
    store(path, points(), models=False)
    q = dbc.read_platforms(path)[0]
    assert q.pmodels is None
    cp = load_comm(path, nprocs=8, refresh=True)
    np.testing.assert_allclose(cp.time("bcast", 5, 65536.0), law(6, 65536.0), rtol=1e-3)   # nearest (larger)


def test_damaged_models_are_ignored_and_the_curves_still_serve(tmp_path):
    path = tmp_path / "sp.h5"
    store(path, points())
    with edited(path, "r+") as f:
        g = next(iter(f["comm"].values()))
        del g["pmodels"]
        g.create_dataset("pmodels", data=np.arange(5.0))
    cp = load_comm(path, nprocs=8, refresh=True)
    assert cp.available
    np.testing.assert_allclose(cp.time("bcast", 5, 65536.0), law(6, 65536.0), rtol=1e-3)


def test_models_are_stored_with_the_platform_and_skip_single_pair_primitives(tmp_path):
    path = tmp_path / "sp.h5"
    pts = np.concatenate([points(), points("pingpong", ps=[2]), points("link_host", ps=[2])])
    store(path, pts)
    q = dbc.read_platforms(path)[0]
    assert set(np.unique(q.pmodels["primitive"])) == {b"bcast"}
    assert all("T(p, m)" in line for line in cs.model_lines(q.pmodels))


# -- held-out error ------------------------------------------------------------------------------

def test_heldout_error_leaves_out_each_p_but_the_two_smallest():
    err = cs.heldout_errors(points(noise=0.01))["bcast"]
    assert err["p"] == [4, 6, 8] and err["n"] == 3 * len(SIZES)
    assert err["err_med"] < 0.03 and err["err_max"] < 0.15
    off = cs.heldout_errors(points(off={6: 1.3}))["bcast"]
    by_p = {p: (med, mx) for p, med, mx, _ in off["by_p"]}
    assert by_p[6][0] == pytest.approx(0.3 / 1.3, abs=0.03)     # the model of the others misses the odd p
    assert by_p[4][0] < by_p[6][0]


def test_heldout_needs_three_p_and_says_why_not():
    pts = np.concatenate([points(ps=[2, 3]), points("pingpong", ps=[2])])
    err = cs.heldout_errors(pts)
    assert err == {}
    lines = cs.heldout_lines(err, cs.measured_p(pts))
    assert any("bcast" in x and "p = [2, 3]" in x for x in lines)
    assert any("pingpong" in x and "one pair" in x for x in lines)


def test_heldout_is_computable_offline_from_a_stored_database(tmp_path, capsys):
    path = tmp_path / "sp.h5"
    store(path, points(noise=0.01))
    assert cli_main(["bench", "comm-fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(p, m) held-out p [4, 6, 8]" in out


# -- damaged groups are reported, not swallowed ----------------------------------------------------

def test_a_platform_that_does_not_read_is_refused_with_its_reason(tmp_path):
    path = tmp_path / "sp.h5"
    good = store(path, points(), P=8)
    bad = dbc.write_platform(path, platform_info(4), points(ps=(2, 3, 4)), comm_fit.fit_points(points(ps=(2, 3, 4))))
    with edited(path) as f:
        f[f"comm/{bad}"].attrs["platform"] = "{not json"
    refused: list[str] = []
    assert [p.key for p in dbc.read_platforms(path, refused)] == [good]
    assert len(refused) == 1 and bad in refused[0] and "unreadable" in refused[0]


def test_pmodels_that_do_not_read_warn_and_leave_the_curves(tmp_path):
    path = tmp_path / "sp.h5"
    key = store(path, points(), P=8)
    with edited(path) as f:
        del f[f"comm/{key}/pmodels"]
        f[f"comm/{key}"].create_dataset("pmodels", data=np.array([b"xx", b"yy"]))     # does not read as rows
    with pytest.warns(UserWarning, match=r"\(p, m\) models do not read"):
        (platform,) = dbc.read_platforms(path)
    assert platform.pmodels is None and len(platform.fits)
