"""Drop-in contracts (issue 33): numpy.matmul's call form, read-only inputs on every candidate,
options per thread/context, and ``autotune.explain`` returning the decision."""
from __future__ import annotations

import dataclasses
import inspect
import sys
import threading
import time

import numpy as np
import pytest
import scipy.linalg as sl
from autotune.kernels import _front

import autotune
from autotune import Candidate, backends, tuned_cholesky, tuned_gemm
from autotune.select import clear_cache
from autotune.settings import get_options, options, set_options

no_db_warning = pytest.mark.filterwarnings("ignore:system parameters unavailable:RuntimeWarning")


@pytest.fixture
def db(tiny_db):
    """Tuned calls read the tiny test database."""
    clear_cache()
    with options(db=str(tiny_db)):
        yield tiny_db


def _read_only(x: np.ndarray) -> np.ndarray:
    x = x.copy(order="K")
    x.flags.writeable = False
    return x


def _backend(name: str):
    try:
        return backends.get(name)
    except backends.BackendUnavailable as exc:
        pytest.skip(str(exc))


def _raised(fn, *args) -> tuple[type, str]:
    with pytest.raises(Exception) as info:   # noqa: B017 - any error, compared with numpy's below
        fn(*args)
    return type(info.value), str(info.value)


# ------------------------------------------------------------------------ numpy.matmul's call form

def test_signature_is_matmuls():
    """a and b positional-only, ``out`` the third positional argument, the BLAS extras keyword-only."""
    params = inspect.signature(tuned_gemm).parameters
    kinds = {name: p.kind for name, p in params.items()}
    assert kinds["a"] == kinds["b"] == inspect.Parameter.POSITIONAL_ONLY
    assert kinds["out"] == inspect.Parameter.POSITIONAL_OR_KEYWORD and list(params)[2] == "out"
    for name in ("alpha", "beta", "c", "trans_a", "trans_b", "config", "explain", "comm", "root"):
        assert kinds[name] == inspect.Parameter.KEYWORD_ONLY, name


@no_db_warning
@pytest.mark.parametrize("n", [8, 64])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_out_positional(n, dtype):
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal((n, n)) * 4).astype(dtype), (rng.standard_normal((n, n + 3)) * 4).astype(dtype)
    out = np.empty((n, n + 3), dtype)
    assert tuned_gemm(a, b, out) is out
    np.testing.assert_array_equal(out, np.matmul(a, b))
    tup = np.empty_like(out)
    assert tuned_gemm(a, b, (tup,)) is tup                   # the ufunc form out=(array,)
    np.testing.assert_array_equal(tup, out)


def test_out_positional_on_a_forced_candidate(db):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 80))
    for cand in (Candidate("blas", "scipy-openblas", 1), Candidate("strassen", "scipy-openblas", 1, 1)):
        for order in "CF":
            out = np.empty((64, 80), order=order)
            assert tuned_gemm(a, b, out, config=cand) is out
            np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


@no_db_warning
@pytest.mark.parametrize("use_db", [False, True])
@pytest.mark.parametrize("n", [8, 64])
def test_errors_are_numpys(request, n, use_db):
    if use_db:
        request.getfixturevalue("db")
    a = np.ones((n, n))
    cases = [
        (lambda f: f(a, np.ones((n + 1, n)))),                         # inner dimensions differ
        (lambda f: f(a, a, np.empty((n, n + 1)))),                     # out of the wrong shape
        (lambda f: f(a, a, np.empty((n, n), np.int64))),               # out of a dtype it cannot cast to
        (lambda f: f(a, a, _read_only(np.empty((n, n))))),             # read-only out
        (lambda f: f(a, a, [[0.0] * n] * n)),                          # out not an array
        (lambda f: f(a, a, None, 2.0)),                                # a fourth positional argument
        (lambda f: f(a, np.float64(2.0))),                             # a scalar operand
        (lambda f: f(a, a, bogus=1)),                                  # a keyword numpy does not know
    ]
    for case in cases:
        assert _raised(case, tuned_gemm)[0] is _raised(case, np.matmul)[0]
    assert _raised(cases[0], tuned_gemm) == _raised(cases[0], np.matmul)


@no_db_warning
def test_numpys_other_keywords_defer_to_numpy():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((40, 40)), rng.standard_normal((40, 40))
    got = tuned_gemm(a, b, dtype=np.float32)
    np.testing.assert_array_equal(got, np.matmul(a, b, dtype=np.float32))
    assert got.dtype == np.float32
    out = np.empty((40, 40), np.float32)
    assert tuned_gemm(a, b, out, casting="unsafe") is out
    with pytest.raises(TypeError, match="cannot be combined"):
        tuned_gemm(a, b, alpha=2.0, dtype=np.float32)


# ------------------------------------------------------------------------------- read-only inputs

GEMM_BACKENDS = ["numpy-openblas", "scipy-openblas", "numba-reference", "blis", "mkl"]


@pytest.mark.parametrize("backend", GEMM_BACKENDS)
@pytest.mark.parametrize("algorithm, param", [("blas", 0), ("strassen", 1), ("strassen", 2)])
def test_gemm_read_only_inputs_every_candidate(db, backend, algorithm, param):
    """numpy accepts read-only operands: so does every candidate, in any layout and transposition."""
    _backend(backend)
    rng = np.random.default_rng(3)
    cand = Candidate(algorithm, backend, 1, param)
    base_a, base_b, c0 = rng.standard_normal((70, 66)), rng.standard_normal((66, 72)), rng.standard_normal((70, 72))
    for order in "CF":
        a, b = _read_only(np.asarray(base_a, order=order)), _read_only(np.asarray(base_b, order=order))
        np.testing.assert_allclose(tuned_gemm(a, b, alpha=2.0, config=cand), 2.0 * (base_a @ base_b),
                                   rtol=1e-10, atol=1e-10)
        got = tuned_gemm(_read_only(a.T), b.T.T, trans_a=True, beta=0.5, c=_read_only(c0), config=cand)
        np.testing.assert_allclose(got, base_a @ base_b + 0.5 * c0, rtol=1e-10, atol=1e-10)
        np.testing.assert_array_equal(a, base_a)
        np.testing.assert_array_equal(b, base_b)


def test_gemm_read_only_inputs_selected(db):
    """The selector's choice (whichever backend) with the BLAS extras on read-only operands."""
    a = _read_only(np.random.default_rng(4).standard_normal((64, 64)))
    for _ in range(2):                                      # Python path, then any remembered one
        np.testing.assert_allclose(tuned_gemm(a, a, alpha=2.0), 2.0 * (a @ a), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
    with options(allow_strassen=True):
        big = _read_only(np.random.default_rng(5).standard_normal((256, 256)))
        np.testing.assert_allclose(tuned_gemm(big, big, alpha=2.0), 2.0 * (big @ big), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("backend", ["numpy-openblas", "scipy-openblas", "numba-reference"])
def test_kernels_read_read_only_operands(backend):
    """The BLAS tables' and reference kernels' input operands are const: no copy, no error."""
    ops = _backend(backend).ops
    rng = np.random.default_rng(6)
    a = _read_only(np.asfortranarray(rng.standard_normal((20, 20)) + 20 * np.eye(20)))
    b = _read_only(np.asfortranarray(rng.standard_normal((20, 20))))
    x = _read_only(rng.standard_normal(20))
    c = np.zeros((20, 20), order="F")
    ops["gemm"](1.0, a, b, 0.0, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)
    c[...] = 0.0
    ops["syrk"](1.0, a, 0.0, c, True, False)
    np.testing.assert_allclose(np.tril(c), np.tril(a @ a.T), rtol=1e-12, atol=1e-12)
    t = np.array(b, order="F")
    ops["trsm"](1.0, a, t, True, True, False, False)
    np.testing.assert_allclose(t @ np.tril(a), b, rtol=1e-10, atol=1e-10)
    y = np.zeros(20)
    ops["gemv"](1.0, a, x, 0.0, y)
    np.testing.assert_allclose(y, a @ x, rtol=1e-12, atol=1e-12)
    ops["axpy"](2.0, x, y)
    np.testing.assert_allclose(y, a @ x + 2.0 * x, rtol=1e-12, atol=1e-12)
    ops["add"](a, b, c, -1.0)
    np.testing.assert_allclose(c, a - b, rtol=0, atol=0)


def test_strassen_kernel_reads_read_only_views():
    from autotune.kernels.strassen import strassen

    gemm = backends.get("scipy-openblas").ops["gemm"]
    rng = np.random.default_rng(7)
    a, b = (_read_only(np.asfortranarray(rng.standard_normal((67, 65)))),
            _read_only(np.asfortranarray(rng.standard_normal((65, 69)))))
    c = np.empty((67, 69), order="F")
    np.testing.assert_allclose(strassen(a, b, c, 2, gemm), a @ b, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="read-only"):
        strassen(a, b, _read_only(c), 1, gemm)


def _spd(n: int, order: str) -> np.ndarray:
    g = np.random.default_rng(n).standard_normal((n, n))
    return np.asarray(g @ g.T + n * np.eye(n), order=order)


CHOLESKY_CONFIGS = [
    {"algorithm": "potrf", "backend": "scipy-openblas", "threads": 1},
    {"algorithm": "potrf", "backend": "numpy-openblas", "threads": 1},
    {"algorithm": "potrf", "backend": "numba-reference", "threads": 1},
    {"algorithm": "blocked", "backend": "scipy-openblas", "threads": 1, "param": 16},
    {"algorithm": "blocked", "backend": "numpy-openblas", "threads": 1, "param": 32, "variant": 1},
    {"algorithm": "gemv", "backend": "scipy-openblas", "threads": 1},
    {"algorithm": "axpy", "backend": "numpy-openblas", "threads": 1},
]


@pytest.mark.parametrize("config", CHOLESKY_CONFIGS, ids=lambda c: f"{c['algorithm']}-{c['backend']}")
def test_cholesky_read_only_every_candidate(db, config):
    for order in "CF":
        s = _spd(72, order)
        ro = _read_only(s)
        for lower in (False, True):
            for overwrite_a in (False, True):
                got = tuned_cholesky(ro, lower=lower, overwrite_a=overwrite_a, config=config)
                np.testing.assert_allclose(got, sl.cholesky(s, lower=lower), rtol=1e-10, atol=1e-10)
                np.testing.assert_array_equal(ro, s)


@no_db_warning
@pytest.mark.parametrize("use_db", [False, True])
def test_cholesky_read_only_is_never_written(request, use_db):
    """Neither the selector's choice, its remembered C path nor scipy's fallback (no database)
    writes into a read-only input, even with overwrite_a=True; a writable one may be overwritten."""
    if use_db:
        request.getfixturevalue("db")
    for dtype in (np.float64, np.float32):
        s = _spd(64, "F").astype(dtype)
        ro = _read_only(s)
        for _ in range(3):
            for overwrite_a in (False, True):
                got = tuned_cholesky(ro, overwrite_a=overwrite_a)
                np.testing.assert_allclose(got, sl.cholesky(s), rtol=1e-4, atol=1e-4)
                np.testing.assert_array_equal(ro, s)


# ------------------------------------------------------------------------- options per context

def _in_threads(*targets) -> None:
    """Run each target in its own thread; re-raise the first failure."""
    errors: list[BaseException] = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as exc:   # reported to the main thread
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def test_options_are_per_thread(tiny_db):
    """Two threads inside their own ``options()`` blocks see their own budget at the same time
    (and the selector ranks with it); when both have left, the default is back everywhere."""
    default = get_options()
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[int, tuple] = {}

    def worker(threads: int):
        def run():
            with options(threads=threads, allow_strassen=threads == 2):
                barrier.wait()                       # both blocks entered
                dec = autotune.explain("gemm", 64, db=tiny_db)
                seen[threads] = (get_options().thread_budget, get_options().allow_strassen, dec.threads)
                barrier.wait()                       # both looked before either leaves
            barrier.wait()                           # both left
            seen[-threads] = get_options()
        return run

    _in_threads(worker(1), worker(2))
    assert seen[1] == (1, False, 1) and seen[2] == (2, True, 2)
    assert seen[-1] == seen[-2] == default
    assert get_options() == default


@no_db_warning
def test_remembered_decisions_are_per_context():
    """A hot-path decision remembered under one thread's options is not used under another's, and
    both threads keep theirs."""
    a = np.random.default_rng(8).standard_normal((64, 64))
    key = a.shape + a.shape
    barrier = threading.Barrier(2, timeout=30)
    seen = {}

    def first():
        with options(threads=1):
            tuned_gemm(a, a)                        # no database: numpy's own call, remembered
            assert _front.remembered(key)
            barrier.wait()                          # remembered before the other thread looks
            barrier.wait()                          # the other thread remembered its own
            seen["first"] = _front.remembered(key)

    def second():
        with options(threads=2):
            barrier.wait()
            seen["second before"] = _front.remembered(key)
            np.testing.assert_array_equal(tuned_gemm(a, a), a @ a)
            seen["second after"] = _front.remembered(key)
            barrier.wait()

    _in_threads(first, second)
    assert seen == {"first": True, "second before": False, "second after": True}


def test_set_options_changes_the_process_default():
    """``set_options`` is seen by contexts without their own options, and by new threads;
    an ``options()`` block keeps what it started with."""
    before = get_options()
    try:
        with options(threads=1):
            set_options(allow_strassen=True)
            assert get_options() == dataclasses.replace(before, threads=1)
            seen = []
            _in_threads(lambda: seen.append(get_options()))
            if not getattr(sys.flags, "thread_inherit_context", 0):   # new threads start from the default
                assert seen == [dataclasses.replace(before, allow_strassen=True)]
        assert get_options() == dataclasses.replace(before, allow_strassen=True)
    finally:
        set_options(**dataclasses.asdict(before))
    assert get_options() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_options_reject_bad_threads(bad):
    with pytest.raises(ValueError, match="threads"):
        with options(threads=bad):
            pass
    assert get_options().threads is None


# ------------------------------------------------------------------------------------ explain()

def test_explain_returns_the_decision(db):
    dec = autotune.explain("gemm", 64)
    assert isinstance(dec, autotune.Decision)
    assert dec.family == "gemm" and dec.dims == (64, 64, 64) and dec.threads == get_options().thread_budget
    assert dec.ranking and dec.chosen in [r.candidate for r in dec.ranking]
    assert any(r.terms for r in dec.ranking)                       # the SP values each prediction used
    text = str(dec)
    assert text.startswith("gemm 64x64x64, thread budget") and f"chose {dec.chosen}" in text
    assert autotune.describe(dec) == text and autotune.describe(dec, top=1) == dec.describe(1)
    rect = autotune.explain("gemm", 64, 32, 48, threads=1)
    assert rect.dims == (64, 32, 48) and rect.threads == 1
    assert all(r.candidate.threads == 1 for r in rect.ranking)
    chol = autotune.explain("cholesky", 100)
    assert chol.family == "cholesky" and chol.dims == (100,)
    assert {r.candidate.algorithm for r in chol.ranking} >= {"potrf", "blocked"}


def test_explain_follows_options_and_arguments(tiny_db):
    with options(db=str(tiny_db), threads=1):
        assert autotune.explain("gemm", 512).threads == 1
        assert not any(r.candidate.algorithm == "strassen" for r in autotune.explain("gemm", 512).ranking)
        allowed = autotune.explain("gemm", 512, allow_strassen=True, threads=2)
        assert allowed.threads == 2 and any(r.candidate.algorithm == "strassen" for r in allowed.ranking)
    assert autotune.explain("gemm", 64, db=tiny_db).dims == (64, 64, 64)


@pytest.mark.parametrize("args, kwargs", [
    (("gemm", 0), {}), (("gemm", 64, 64), {}), (("gemm",), {}), (("cholesky", 64, 64), {}),
    (("qr", 64), {}), (("lu", 64, 2), {}), (("gemm", 64.0), {}), (("gemm", True), {}),
    (("gemm", 64), {"threads": 0}), (("gemm", 64), {"threads": -2}), (("gemm", 64), {"threads": 1.5}),
])
def test_explain_rejects_bad_arguments(tiny_db, args, kwargs):
    with pytest.raises(ValueError):
        autotune.explain(*args, db=tiny_db, **kwargs)


def test_explain_without_a_database_says_so(tmp_path):
    with pytest.raises(autotune.DatabaseUnavailable, match="no usable database") as info:
        autotune.explain("gemm", 64, db=tmp_path / "missing.h5")
    assert isinstance(info.value, LookupError)
    bad = tmp_path / "damaged.h5"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(LookupError, match="no usable database"):
        autotune.explain("cholesky", 64, db=bad)


def test_explain_flag_prints_and_returns_the_product(db, capsys):
    a = np.random.default_rng(9).standard_normal((64, 64))
    np.testing.assert_allclose(tuned_gemm(a, a, explain=True), a @ a, rtol=1e-12, atol=1e-12)
    printed = capsys.readouterr().out
    assert printed.startswith("gemm 64x64x64") and "chose" in printed
    s = _spd(64, "C")
    np.testing.assert_allclose(tuned_cholesky(s, explain=True), sl.cholesky(s), rtol=1e-10, atol=1e-10)
    assert capsys.readouterr().out.startswith("cholesky 64")


def test_concurrent_calls_each_run_at_their_own_thread_count():
    """A library's thread count is process-wide: two Python threads calling it at 1 and 2 threads
    at once each run at their own count (the one at another count waits), and the default is back
    after both."""
    from autotune import backends
    from autotune.backends.pools import call_with_threads

    be = backends.get("scipy-openblas")
    default = be.get_threads()
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[int, list[int]] = {1: [], 2: []}

    def worker(threads: int):
        def body():
            for _ in range(5):
                seen[threads].append(be.get_threads())
                time.sleep(0.005)                  # the other thread tries meanwhile
                seen[threads].append(be.get_threads())

        def run():
            barrier.wait()
            for _ in range(4):
                call_with_threads(be, threads, body)
        return run

    _in_threads(worker(1), worker(2))
    assert set(seen[1]) == {1} and set(seen[2]) == {2}
    assert be.get_threads() == default
