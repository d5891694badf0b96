"""Thread-pool cross-call costs: stored transitions, the runtime's pool state, selection after a call,
the installer's probe, explain/show, and the reused output blocks."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from autotune.install_probe import pools as probe
from autotune.kernels import _front
from db_helpers import edited

from autotune import explain, tuned_cholesky, tuned_gemm
from autotune.backends import pools
from autotune.backends.pools import PoolState
from autotune.cli.command import main as cli_main
from autotune.core.families import CholeskyProblem, as_problem
from autotune.db import load_sp
from autotune.db.pools import COLD, ROW_DTYPE, Transitions, load_transitions, save_transitions
from autotune.select import clear_cache, rank

NP, SC = "numpy-openblas", "scipy-openblas"


def rows(extra_cross: float = 5e-3, gap_extra: float = 0.0) -> np.ndarray:
    """Hand-made transitions: 2-thread calls after the other library's 2-thread call cost
    ``extra_cross`` more; everything else nothing; a cold start 1e-4; one gap row at 0.1 s."""
    out = []
    for to in ((NP, 1), (NP, 2), (SC, 1), (SC, 2)):
        for x, own in ((64, 1e-2), (512, 1e-1)):   # foreign gap: 10 ms
            out.append((COLD, 0, *to, 0.0, x, own, own + 1e-4))
            for frm in ((NP, 1), (NP, 2), (SC, 1), (SC, 2)):
                cross = frm[0] != to[0] and frm[1] == to[1] == 2
                out.append((*frm, *to, 0.0, x, own, own + (extra_cross if cross else 0.0)))
    out.append((NP, 2, SC, 2, 0.1, 64, 1e-2, 1e-2 + gap_extra))
    return np.array(out, ROW_DTYPE)


@pytest.fixture
def db(tiny_db, tmp_path):
    path = tmp_path / "sp.h5"
    shutil.copy(tiny_db, path)
    save_transitions(path, rows(), {"hot_window": 0.1})
    clear_cache()
    yield path
    clear_cache()
    pools.set_hot_window(0.0)


def test_extra_interpolates_by_own_time_and_defaults_to_nothing():
    tr = Transitions(rows(extra_cross=5e-3), {"hot_window": 0.1})
    after_np = PoolState(NP, 2, 0.0)
    assert tr.extra(after_np, SC, 2, 1e-3) == pytest.approx(5e-3)
    assert tr.extra(after_np, NP, 2, 1e-3) == 0.0 and tr.extra(after_np, SC, 1, 1e-3) == 0.0
    assert tr.extra(None, SC, 2, 1e-3) == pytest.approx(1e-4)          # waking its pool
    assert tr.extra(after_np, "mkl", 2, 1e-3) == 0.0                    # never measured: no charge
    assert Transitions().empty and Transitions().extra(after_np, SC, 2, 1.0) == 0.0
    assert tr.hot_window == 0.1


def test_a_kernel_without_a_pool_pays_the_cold_machine_after_an_idle_spell(db):
    """After an idle spell every call pays what a one-thread library call pays (caches and clock
    gone cold, no pool to wake), so a Numba kernel is not favoured just for having no measured pool."""
    r = rows()
    np_cold = (r["from_backend"] == COLD.encode()) & (r["to_backend"] == NP.encode()) & (r["to_threads"] == 1)
    r["t_after"][np_cold] += 2e-4
    tr = Transitions(r, {"hot_window": 0.1})
    assert tr.measured(NP) and not tr.measured("numba-reference")
    assert tr.cold_machine(1e-2) == pytest.approx(1e-4)                  # the least one-thread cold extra
    save_transitions(db, r, {"hot_window": 0.1})
    dec = rank(as_problem("gemm", (64, 64, 64)), load_sp(str(db)), 1, explain=True)
    numba = [x for x in dec.ranking if x.candidate.backend == "numba-reference"]
    assert numba and all(any("cold machine" in c.note for c in x.corrections) for x in numba)


def test_round_trip_and_a_damaged_group_loads_empty(tmp_path):
    path = tmp_path / "sp.h5"
    save_transitions(path, rows(), {"hot_window": 0.2})
    tr = load_transitions(path)
    assert not tr.empty and tr.hot_window == 0.2 and len(tr.rows) == len(rows())
    with edited(path, "r+") as f:
        del f["pools/default/rows"]
        f["pools/default"].create_dataset("rows", data=np.arange(3.0).reshape(3, 1, 1))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))   # a later version of the file
    with pytest.warns(RuntimeWarning, match="thread-pool transition costs"):
        assert load_transitions(path).empty


def test_hot_window_is_where_the_transitions_calm_down():
    calm = rows(gap_extra=0.0)
    assert probe.hot_window(calm) == 0.1                 # gap 0 costs, 0.1 s does not
    assert probe.hot_window(rows(gap_extra=1e-3)) == 0.1  # still costs at the largest gap: that gap
    nothing = rows(extra_cross=0.0)
    assert probe.hot_window(nothing) == 0.0


def test_the_runtime_records_the_last_pool_and_its_state_code():
    pools.set_hot_window(0.0)
    pools.note(SC, 2)
    last = pools.last()
    assert last.backend == SC and last.threads == 2 and 0 <= last.gap < 60.0   # the line before: seconds at most
    assert pools.hot() is None and pools.state_code() == 0           # no window: always cold
    pools.set_hot_window(60.0)
    assert pools.hot() == PoolState(SC, 2, 0.0)
    assert pools.state_code() == pools.CODES[SC] * 256 + 2
    pools.set_hot_window(0.0)
    with pytest.raises(ValueError, match="LIBRARY:THREADS"):
        pools.parse("openblas:x")


def test_selection_follows_the_previous_pool(db):
    sp = load_sp(db, refresh=True)
    after_np, after_sc = PoolState(NP, 2, 0.0), PoolState(SC, 2, 0.0)
    for n in (64, 256):
        prob = CholeskyProblem(n)
        a, b = rank(prob, sp, 2, after=after_np), rank(prob, sp, 2, after=after_sc)
        assert a.chosen.backend == NP or a.chosen.threads == 1, a
        assert b.chosen.backend == SC or b.chosen.threads == 1, b
        charged = [r for r in a.ranking if r.candidate.backend == SC and r.candidate.threads == 2]
        assert charged and all(any(c.step == "contention" and "after numpy-openblas 2t" in c.note
                                   for c in r.corrections) for r in charged)


def test_tuned_calls_decide_for_the_state_they_find(db, monkeypatch):
    # An hour's hot window: a thread descheduled between two calls on a loaded machine still finds
    # the previous call's pool (with the fixture's 100 ms it could find the machine cold).
    save_transitions(db, rows(), {"hot_window": 3600.0})
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    from autotune.settings import options

    n, rng = 256, np.random.default_rng(0)
    a = rng.standard_normal((n, n))
    x = a @ a.T + n * np.eye(n)
    with options(db=str(db), threads=2, guard=False):     # unguarded: remembered at the first call
        for _ in range(3):
            c = tuned_gemm(a, a)
            f = tuned_cholesky(x)
        assert np.allclose(c, a @ a) and np.allclose(f.T @ f, x)
        c = tuned_gemm(a, a)                            # the state the Cholesky decisions were taken in
        after = pools.hot()
        assert after is not None and after == pools.last().__class__(after.backend, after.threads, 0.0)
        assert _front.remembered_cholesky(n)            # remembered for this very state
        pools.note(NP if after.backend == SC else SC, 1)
        assert not _front.remembered_cholesky(n)        # another state: decided afresh


def test_probe_measures_every_transition_and_the_cold_starts():
    from autotune import backends as bk

    spec = probe.PoolSpec(sizes=(32, 48), gaps=(0.01,), reps=1, idle=0.001)
    libs = {name: bk.get(name) for name in (NP, SC)}
    got = probe.measure(libs, spec)
    ends = 2 * len(spec.threads)
    assert len(got[got["from_backend"] == COLD.encode()]) == ends * len(spec.sizes)
    tight = got[(got["gap"] == 0.0) & (got["from_backend"] != COLD.encode())]
    assert len(tight) == ends * ends * len(spec.sizes)
    assert len(got[got["gap"] == 0.01]) == 2 * 2                      # 2-thread pools, smallest size
    assert np.isfinite(got["t_after"]).all() and (got["t_alone"] > 0).all()


def test_explain_and_show_name_the_pool_state(db, capsys):
    dec = explain("cholesky", 128, db=str(db), after="numpy-openblas:2")
    assert dec.after == PoolState(NP, 2, 0.0) and "after: numpy-openblas 2t" in str(dec)
    assert cli_main(["explain", "cholesky", "128", "--db", str(db), "--after", "scipy-openblas:2"]) == 0
    assert "after: scipy-openblas 2t" in capsys.readouterr().out
    assert cli_main(["explain", "cholesky", "128", "--db", str(db), "--after", "nonsense"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "LIBRARY:THREADS" in err[0]
    assert cli_main(["show", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "Thread pools: extra ms of a call right after a call on (hot window 100 ms" in out
    assert "idle spell" in out


def test_released_output_blocks_are_reused_without_new_memory():
    _front.set_block_cache(64 << 20)
    x = _front.aligned_empty((512, 512))
    addr = x.ctypes.data
    assert addr % 64 == 0
    del x
    kept = _front.block_cache()
    assert kept[0] >= 1 and kept[1] >= 512 * 512 * 8
    y = _front.aligned_empty((512, 512))
    assert y.ctypes.data == addr                       # the same, already mapped, memory
    small = _front.aligned_empty((8, 8))
    del small                                          # below the cache's minimum: freed
    _front.set_block_cache(0)
    assert _front.block_cache()[:2] == (0, 0)
    del y
    assert _front.block_cache()[:2] == (0, 0)         # no room: freed
    _front.set_block_cache(256 << 20)


def test_long_work_of_its_own_ending_just_now_is_foreign_not_cold():
    """Working longer than the hot window since the last tuned call (a scipy call of 0.3 s, say)
    leaves that work's pool spinning: FOREIGN, not cold; idle past the hot window after it: cold.

    The state is read at query time from the wall-clock gap and the thread's CPU time, so the
    window is set after the work, between the time the thread spent off the CPU (descheduled on a
    loaded machine) and the whole gap: the gap exceeds the window by the work's CPU time, whatever
    the load."""
    import time

    work = 0.2                                             # CPU seconds, 4x the window's margin below
    pools.set_hot_window(1e300, 0.005)
    try:
        pools.note(NP, 2)
        end = time.thread_time() + work
        while time.thread_time() < end:                    # busy, on the CPU, for ``work`` seconds
            pass
        _, _, gap, worked, _ = _front.pool_state()
        assert worked > 0.9 * work and gap >= worked       # CPU time cannot exceed the wall-clock gap
        # Off the CPU for ``gap - worked`` so far; the query below follows within microseconds, so
        # 50 ms more of margin holds unless this thread waits that long between two lines.
        window = gap - worked + 0.05
        pools.set_hot_window(window, 0.005)
        assert gap > window                                # past the window: no longer the call's state
        assert pools.state_code() == _front.FOREIGN
        time.sleep(window + 0.03)                          # then idle past it (off the CPU that long)
        assert pools.state_code() == 0
    finally:
        pools.set_hot_window(0.0)


def test_work_of_the_calling_thread_between_calls_is_a_foreign_state_waiting_is_not():
    """After the foreign gap of the calling thread's own CPU time (it may have called numpy or scipy
    itself) the state is FOREIGN; time spent waiting (sleeping, or descheduled) does not count.
    The hot window (an hour) is far beyond any wait here, so only CPU time decides."""
    import time

    pools.set_hot_window(3600.0, 0.02)
    try:
        pools.note(NP, 2)
        time.sleep(0.05)                                   # waiting past the foreign gap: no call of its own
        assert pools.hot() == PoolState(NP, 2, 0.0)        # (the few lines here take microseconds of CPU)
        end = time.thread_time() + 0.05
        while time.thread_time() < end:                    # working past it: it may have been one
            pass
        assert pools.hot() == pools.FOREIGN and pools.state_code() == _front.FOREIGN
        pools.note(SC, 1)
        assert pools.hot() == PoolState(SC, 1, 0.0)
    finally:
        pools.set_hot_window(0.0)
