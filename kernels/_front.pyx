# cython: language_level=3, boundscheck=False, wraparound=False
"""The hot paths of ``tuned_gemm`` and ``tuned_cholesky`` in C.

A remembered decision runs here without the Python layer: a product whose choice is numpy's own
``matmul`` (plain ``a @ b`` of 2-D float64 ndarrays) costs one dict lookup, and a Cholesky of a
remembered order is checked, copied, factored by its kernel and cleaned in one C function. At
small orders the kernels take microseconds, so the Python layer's checks and decision lookup
would be a large tax. Anything else goes to the Python implementations given to ``configure``.
What is remembered belongs to the options object in force (one per context's ``options()`` block,
see ``autotune.settings``), so a context never runs a decision taken under another's options, and
is forgotten ``seconds`` after it was first remembered (so database, learning and thread changes
are seen again).

Every call made through here or through ``pool_note`` records which library's thread pool ran
last and when (``pool_state``): a call's cost depends on it (another library's pool may still be
spinning on the cores). Decisions are remembered per pool state (``pool_code``): the library and
thread count of the last call while it is within the hot window, else cold.
"""
cimport numpy as cnp
from libc.stdlib cimport free, malloc
from libc.string cimport memmove
from posix.mman cimport MADV_HUGEPAGE, madvise
from posix.time cimport CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, clock_gettime, timespec

from autotune.core.assumptions import HUGE_ADVISE_BYTES

cnp.import_array()

cdef dict _memos = {}              # id(options object) -> its _Memo
cdef object _last = None           # the _Memo found last (skips the id/dict lookup while one context calls)
cdef double _period = 1.0
cdef object _get_options = None
cdef object _slow = None
cdef object _slow_chol = None
cdef object _slow_lu = None
cdef object _slow_solve = None
cdef object _matmul = None
cdef enum:
    CACHE_LINE = 64
    MEMO_LIMIT = 64                # options objects remembered at once (expired ones dropped first)


cdef int _pool_lib = 0             # code of the library whose pool ran last (0: none yet)
cdef int _pool_threads = 0
cdef double _pool_end = -1e300
cdef double _cpu_sample = 0.0      # the noting thread's CPU time at a recent note (a syscall: at
cdef double _cpu_sample_wall = -1e300  # most once per CPU_SAMPLE_PERIOD), and the wall time then
cdef double CPU_SAMPLE_PERIOD = 1e-3
cdef unsigned long _pool_thread = 0


cdef extern from "<pthread.h>" nogil:
    unsigned long pthread_self()
cdef double _hot_window = 0.0      # seconds after a call during which its pool state is told apart
cdef double _foreign_gap = 1e300   # a gap longer than this may hide a call of the program's own
FOREIGN = 1                        # the state code after such a gap (real codes are >= 256)
cdef enum:
    FOREIGN_CODE = 1
cdef int _numpy_lib = 0            # numpy's own library (the C gemm path's calls)


ctypedef void (*set_threads_t)(int) noexcept nogil
ctypedef int (*get_threads_t)() noexcept nogil


cdef class _Kernel:
    """A remembered Cholesky choice: ``run(w, lower) -> info`` at ``threads`` library threads,
    switched through the library's own C setter (None addresses: the count is not controllable).
    ``call`` is the C twin of ``dispatch.layout.call_with_threads``, whose threadpoolctl round trip
    costs microseconds per call."""
    cdef object run
    cdef set_threads_t set_threads
    cdef get_threads_t get_threads
    cdef int threads
    cdef int lib
    cdef object aux                # per-family extra: the pivot integer type number of an LU kernel

    def __init__(self, run, addresses, int threads, int lib=0, aux=None):
        self.run, self.threads, self.lib, self.aux = run, threads, lib, aux
        self.set_threads = NULL
        self.get_threads = NULL
        if addresses is not None:
            self.set_threads = <set_threads_t><size_t>addresses[0]
            self.get_threads = <get_threads_t><size_t>addresses[1]

    cdef int call(self, w, object arg) except? -1:
        """``run(w, arg)``: LAPACK's info, or BUSY when another thread holds the library at another count."""
        cdef int taken = _lease_take(self.lib, self.threads)
        if taken == 0:
            return BUSY
        if taken == 1 and self.set_threads != NULL:
            _lease_before[self.lib] = self.get_threads()
            if _lease_before[self.lib] != self.threads:
                self.set_threads(self.threads)
        try:
            return self.run(w, arg)
        finally:
            _note(self.lib, self.threads)
            if _lease_give(self.lib) and self.set_threads != NULL and _lease_before[self.lib] != self.threads:
                self.set_threads(_lease_before[self.lib])


cdef double _now() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + 1e-9 * ts.tv_nsec


# Leases: the Python threads calling one library at once share its thread count. A call takes the
# library at its count (joining holders at that count), else waits (Python) or leaves the hot path
# (C); the first holder sets the count and the last restores it. All under the GIL.
cdef enum:
    LIBS = 16
    BUSY = -1000000
cdef int _lease_holders[16]
cdef int _lease_count[16]
cdef int _lease_before[16]


cdef inline int _lease_take(int lib, int threads) noexcept:
    """0: held by others at another count; 1: taken first (set the count); 2: joined at this count."""
    if lib <= 0 or lib >= LIBS:
        return 2
    if _lease_holders[lib]:
        if _lease_count[lib] != threads:
            return 0
        _lease_holders[lib] += 1
        return 2
    _lease_holders[lib], _lease_count[lib] = 1, threads
    return 1


cdef inline bint _lease_give(int lib) noexcept:
    """Release one hold; True for the last holder (restore the count)."""
    if lib <= 0 or lib >= LIBS or _lease_holders[lib] == 0:
        return False
    _lease_holders[lib] -= 1
    return _lease_holders[lib] == 0


def lease_enter(int lib, int threads, size_t set_address=0, size_t get_address=0) -> int:
    """``_lease_take`` for Python callers; the first holder also switches the count through the
    library's C setter (addresses 0: the caller switches it) in the same step, under the GIL."""
    cdef int taken = _lease_take(lib, threads)
    if taken == 1 and set_address and get_address:
        _lease_before[lib] = (<get_threads_t>get_address)()
        if _lease_before[lib] != threads:
            (<set_threads_t>set_address)(threads)
    return taken


def lease_exit(int lib, int threads, size_t set_address=0) -> bool:
    """``_lease_give`` for Python callers; the last holder also restores the count through the C
    setter (address 0: the caller restores it, when this returns True)."""
    cdef bint last = _lease_give(lib)
    if last and set_address and 0 < lib < LIBS and _lease_before[lib] != threads:
        (<set_threads_t>set_address)(_lease_before[lib])
    return last


def lease_before(int lib, int threads=-1) -> int:
    """The count to restore when the last holder leaves (set it with ``threads`` >= 0)."""
    if 0 < lib < LIBS and threads >= 0:
        _lease_before[lib] = threads
    return _lease_before[lib] if 0 < lib < LIBS else 0


cdef double _thread_cpu() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return ts.tv_sec + 1e-9 * ts.tv_nsec


cdef inline void _note(int lib, int threads) noexcept:
    global _pool_lib, _pool_threads, _pool_end, _cpu_sample, _cpu_sample_wall, _pool_thread
    cdef unsigned long me
    if lib:
        me = pthread_self()
        _pool_lib, _pool_threads, _pool_end = lib, threads, _now()
        if me != _pool_thread or _pool_end - _cpu_sample_wall > CPU_SAMPLE_PERIOD:
            _cpu_sample, _cpu_sample_wall, _pool_thread = _thread_cpu(), _pool_end, me


cdef inline double _cpu_since() noexcept:
    """CPU time the noting thread has worked since the last note, at least: since the last sample
    less the wall time from the sample to the note (it cannot have worked longer than that)."""
    return _thread_cpu() - _cpu_sample - (_pool_end - _cpu_sample_wall)


cdef inline int _state() noexcept:
    """The pool state decisions are remembered under: lib * 256 + threads right after a call; FOREIGN
    when the calling thread has since worked longer than the foreign gap (CPU time: a call of the
    program's own may have run in between; time it waited for a core does not count; read only once
    the wall-clock gap exceeds it) and was busy within the hot window, or is another thread; 0
    (cold) once nothing ran within the hot window."""
    cdef double gap = _now() - _pool_end, worked
    if _pool_lib == 0:
        return 0
    if pthread_self() != _pool_thread:
        return FOREIGN_CODE if gap <= _hot_window else 0
    if gap > _foreign_gap:
        worked = _cpu_since()
        # Idle (off the CPU) for less than the hot window: its last work, perhaps a library call of
        # its own, may still have a pool spinning.
        if worked > _foreign_gap and gap - worked <= _hot_window:
            return FOREIGN_CODE
    if gap > _hot_window:
        return 0
    return _pool_lib * 256 + _pool_threads


def pool_note(int lib, int threads) -> None:
    """Record a call that just ended on library ``lib`` (a code > 0) with ``threads`` threads."""
    _note(lib, threads)


def pool_state():
    """(library code, threads, seconds since that call ended, CPU seconds the noting thread has
    worked since, whether this is that thread) of the last recorded call; code 0: none."""
    return _pool_lib, _pool_threads, _now() - _pool_end, _cpu_since(), pthread_self() == _pool_thread


def pool_code() -> int:
    """The pool state decisions taken now are remembered under (see ``_state``)."""
    return _state()


def set_hot_window(double seconds, double foreign_gap=1e300) -> None:
    """How long after a call its pool state still changes what the next call costs, and after how
    long another call may have run in between (both from the measured transitions)."""
    global _hot_window, _foreign_gap
    _hot_window, _foreign_gap = seconds, foreign_gap


cdef class _Memo:
    """Decisions remembered under one options object, trusted until ``expiry``."""
    cdef object opts
    cdef dict shapes               # shape key -> write into a cache-line-aligned output?
    cdef dict chol                 # (order, LAPACK triangle lower, state) -> _Kernel
    cdef dict lu                   # (order, state) -> _Kernel running getrf(w, ipiv)
    cdef dict solve                # (order, right-hand sides, state) -> _Kernel running solve(w, (x, trans))
    cdef double expiry

    def __cinit__(self, opts, double expiry):
        self.opts, self.expiry = opts, expiry
        self.shapes, self.chol, self.lu, self.solve = {}, {}, {}, {}


def configure(*, get_options, slow_gemm, slow_cholesky, slow_lu, slow_solve, matmul, double seconds,
              int numpy_lib=0) -> None:
    """Install the options getter, the full Python implementations, numpy's matmul and its library code."""
    global _get_options, _slow, _slow_chol, _matmul, _period, _numpy_lib, _slow_lu, _slow_solve
    _get_options, _slow, _slow_chol, _matmul = get_options, slow_gemm, slow_cholesky, matmul
    _slow_lu, _slow_solve = slow_lu, slow_solve
    _period, _numpy_lib = seconds, numpy_lib
    forget()


cdef _Memo _memo_of(object opts, bint create):
    """The fresh memo of ``opts``; if it has none, a new one when ``create``, else None."""
    global _last
    cdef object found = _last
    cdef _Memo memo
    if found is None or (<_Memo>found).opts is not opts:
        found = _memos.get(id(opts))
    if found is not None:
        memo = <_Memo>found
        if memo.opts is opts and _now() < memo.expiry:
            _last = memo
            return memo
    if not create:
        return None
    if len(_memos) >= MEMO_LIMIT:
        _prune()
    memo = _Memo(opts, _now() + _period)
    _memos[id(opts)] = memo        # holds opts, so its id is not reused while the entry lives
    _last = memo
    return memo


cdef inline _Memo _current():
    """The fresh memo of the options in force in the calling context, or None."""
    return _memo_of(_get_options(), False)


cdef void _prune():
    """Drop expired memos; all of them if that is not enough."""
    cdef double now = _now()
    for key in [k for k, m in _memos.items() if (<_Memo>m).expiry <= now]:
        _memos.pop(key, None)
    if len(_memos) >= MEMO_LIMIT:
        forget()


cdef class _Block:
    """A cache-line-aligned block of memory owning an array's data; on release it goes back to the
    block cache (``_give``) instead of the system while the cache has room."""
    cdef char *raw
    cdef char *data
    cdef size_t size

    def __dealloc__(self):
        _give(self.raw, self.size)


cdef enum:
    CACHED_MAX = 32                # blocks kept at once
cdef char *_cached_raw[32]
cdef size_t _cached_size[32]
cdef int _cached = 0
cdef size_t _cached_bytes = 0
cdef size_t _cache_limit = 256 * 1024 * 1024     # bytes kept in all (set_block_cache)
cdef size_t _cache_min = 256 * 1024              # smaller blocks come from malloc's own arenas
cdef size_t HUGE_MIN = HUGE_ADVISE_BYTES          # larger new blocks ask for huge pages (numpy's threshold)
BLOCK_CACHE_MIN = _cache_min


cdef char *_take(size_t size):
    """A block of exactly ``size`` bytes: the most recently returned one of that size, else a new one.
    Reused memory is already mapped: no page faults, as in a loop of calls of one size."""
    global _cached, _cached_bytes
    cdef int i
    cdef char *raw
    cdef size_t skip
    for i in range(_cached - 1, -1, -1):
        if _cached_size[i] == size:
            raw = _cached_raw[i]
            _cached_bytes -= size
            _cached -= 1
            _cached_raw[i], _cached_size[i] = _cached_raw[_cached], _cached_size[_cached]
            return raw
    raw = <char *>malloc(size)
    if raw != NULL and size >= HUGE_MIN:
        # As numpy does for its large arrays: huge pages where the kernel allows them on request,
        # so transposing copies and strided kernels do not miss the TLB on every row.
        skip = (4096 - <size_t>raw % 4096) % 4096          # madvise wants a page-aligned start
        madvise(raw + skip, size - skip, MADV_HUGEPAGE)
    return raw


cdef void _give(char *raw, size_t size) noexcept:
    """Keep a released block for the next call of its size (dropping the oldest kept beyond the
    limits), or free it if it is small or larger than the whole cache."""
    global _cached, _cached_bytes
    if raw == NULL:
        return
    if size < _cache_min or size > _cache_limit:
        free(raw)
        return
    while _cached and (_cached == CACHED_MAX or _cached_bytes + size > _cache_limit):
        free(_cached_raw[0])
        _cached_bytes -= _cached_size[0]
        _cached -= 1
        memmove(&_cached_raw[0], &_cached_raw[1], _cached * sizeof(char *))
        memmove(&_cached_size[0], &_cached_size[1], _cached * sizeof(size_t))
    _cached_raw[_cached], _cached_size[_cached] = raw, size
    _cached += 1
    _cached_bytes += size


def set_block_cache(size_t limit_bytes) -> None:
    """How many bytes of released output blocks to keep for reuse (0: none; every block is freed)."""
    global _cache_limit, _cached, _cached_bytes
    _cache_limit = limit_bytes
    while _cached and _cached_bytes > _cache_limit:
        _cached -= 1
        _cached_bytes -= _cached_size[_cached]
        free(_cached_raw[_cached])


def block_cache() -> tuple:
    """(blocks kept, bytes kept, limit in bytes)."""
    return _cached, _cached_bytes, _cache_limit


cdef cnp.ndarray _aligned_empty(int nd, cnp.npy_intp *dims, bint fortran):
    """Uninitialised float64 array whose data starts on a cache line, owned by a ``_Block``.

    Multi-threaded OpenBLAS writes an output that is not cache-line aligned more slowly (dgemm,
    dpotrf); numpy's own allocations are only 16-byte aligned, so where one lands decides the
    speed. Blocks are reused once released (``_take``/``_give``), so a loop of calls does not pay
    the system's page faults for fresh memory on every output. The probe and the tuned calls
    both write into these."""
    cdef size_t size = 8 * dims[0] * (dims[1] if nd == 2 else 1) + CACHE_LINE
    cdef cnp.npy_intp strides[2]
    cdef _Block block = _Block.__new__(_Block)
    block.raw = _take(size)
    if block.raw == NULL:
        raise MemoryError(f"cannot allocate {size} bytes")
    block.size = size
    cdef size_t addr = <size_t>block.raw
    block.data = block.raw + (CACHE_LINE - addr % CACHE_LINE) % CACHE_LINE
    strides[0] = 8
    if nd == 2 and fortran:
        strides[1] = 8 * dims[0]
    elif nd == 2:
        strides[0], strides[1] = 8 * dims[1], 8
    cdef cnp.ndarray arr = cnp.PyArray_New(cnp.ndarray, nd, dims, cnp.NPY_DOUBLE, strides, block.data, 8,
                                           cnp.NPY_ARRAY_FARRAY if fortran else cnp.NPY_ARRAY_CARRAY, None)
    cnp.set_array_base(arr, block)
    return arr


def aligned_empty(shape, order="C"):
    """``numpy.empty(shape, order=order)`` for float64 (1-D or 2-D), its data on a 64-byte boundary."""
    cdef cnp.npy_intp dims[2]
    shape = (shape.__index__(),) if hasattr(shape, "__index__") else tuple(shape)   # int or numpy integer
    if len(shape) not in (1, 2) or min(shape) < 0 or order not in ("C", "F"):
        raise ValueError(f"aligned_empty: a 1-D or 2-D non-negative shape and order 'C' or 'F', got {shape!r}, {order!r}")
    for i, d in enumerate(shape):
        dims[i] = d
    return _aligned_empty(len(shape), dims, order == "F")


def aligned_copy(x, order="C"):
    """``numpy.array(x, dtype=float64, order=order)`` for a 1-D or 2-D ``x``, on a 64-byte boundary."""
    out = aligned_empty(x.shape, order)
    out[...] = x
    return out


def remember(tuple key, bint aligned=False, opts=None, int threads=0, int state=0, bint aat=False) -> None:
    """Shape key ``a.shape + b.shape`` whose choice in pool state ``state`` is numpy's own call
    (at ``threads`` threads) under ``opts`` (the options the decision was taken under; None: those
    in force), into a cache-line-aligned output when ``aligned`` (multi-threaded choices, see
    _aligned_empty); ``aat``: ``a @ a.T`` on one buffer (numpy's syrk), a key of its own."""
    _memo_of(_get_options() if opts is None else opts, True).shapes[key + (aat, state)] = (aligned, threads)


def remember_cholesky(Py_ssize_t n, run, thread_addresses, int threads, opts=None, int lib=0,
                      int state=0, bint lapack_lower=True) -> None:
    """Order ``n`` whose choice in pool state ``state`` under ``opts`` (None: the options in force),
    on the LAPACK triangle ``lapack_lower`` (the triangle of the Fortran-ordered buffer: a C-ordered
    input's is the other one), is ``run(w, lower) -> info`` on library ``lib`` at ``threads``
    threads (``thread_addresses``: C set/get functions of its thread count, or None)."""
    _memo_of(_get_options() if opts is None else opts, True).chol[(n, lapack_lower, state)] = _Kernel(
        run, thread_addresses, threads, lib)


def remember_lu(Py_ssize_t n, run, thread_addresses, int threads, int_dtype, opts=None, int lib=0,
                int state=0) -> None:
    """Order ``n`` whose LU choice in pool state ``state`` is ``run(w, ipiv) -> info`` (pivots of
    ``int_dtype``) on library ``lib`` at ``threads`` threads (see ``remember_cholesky``)."""
    _memo_of(_get_options() if opts is None else opts, True).lu[(n, state)] = _Kernel(
        run, thread_addresses, threads, lib, int(int_dtype.num))


def remember_solve(Py_ssize_t n, Py_ssize_t nrhs, run, thread_addresses, int threads, opts=None, int lib=0,
                   int state=0) -> None:
    """Order ``n`` and ``nrhs`` right-hand sides whose solve in pool state ``state`` is
    ``run(w, (x, trans)) -> info`` on library ``lib`` at ``threads`` threads."""
    _memo_of(_get_options() if opts is None else opts, True).solve[(n, nrhs, state)] = _Kernel(
        run, thread_addresses, threads, lib)


def forget() -> None:
    """Forget every remembered decision, under all options."""
    global _last
    _memos.clear()
    _last = None


def remembered(tuple key, bint aat=False) -> bool:
    """Would a product with shape key ``key`` take the hot path now, in this context and pool state?"""
    cdef _Memo memo = _current()
    return memo is not None and key + (aat, _state()) in memo.shapes


def remembered_lu(Py_ssize_t n) -> bool:
    """Would an LU factorisation of order ``n`` take the hot path now, in this context and pool state?"""
    cdef _Memo memo = _current()
    return memo is not None and (n, _state()) in memo.lu


def remembered_cholesky(Py_ssize_t n, bint lapack_lower=True) -> bool:
    """Would a Cholesky of order ``n`` on LAPACK triangle ``lapack_lower`` take the hot path now, in
    this context and pool state?"""
    cdef _Memo memo = _current()
    return memo is not None and (n, lapack_lower, _state()) in memo.chol


cdef inline bint _default_scalars(object alpha, object beta):
    """alpha 1 and beta 0 as Python floats or ints (the defaults); any other type, even equal (a
    numpy scalar, an array whose truth is ambiguous), takes the Python path's one check."""
    return ((type(alpha) is float or type(alpha) is int) and (type(beta) is float or type(beta) is int)
            and alpha == 1.0 and beta == 0.0)


cdef inline bint _plain_f64(object x):
    return (type(x) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>x) == 2
            and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_DOUBLE)


def tuned_gemm(a, b, /, out=None, *, alpha=1.0, beta=0.0, c=None, trans_a=False, trans_b=False,
               config=None, explain=False, comm=None, root=0, **ufunc_kwargs):
    """``alpha op(a) op(b) + beta c`` with the measured-fastest configuration; ``a @ b`` by default.

    Called as ``numpy.matmul(x1, x2, /, out=None, *, ...)`` is, it accepts what numpy accepts and
    returns the same values, dtypes and errors; only 2-D float64 products are tuned (others, and
    calls with numpy's other keywords such as ``dtype=``, defer to numpy). The BLAS-style extras
    are keyword-only and checked alike at every size and dtype, tuned or not: ``alpha`` and
    ``beta`` are scalar numbers (TypeError for a string, array or None), ``c`` must have the
    product's shape whenever given, even with ``beta == 0`` (ValueError), and is read only when
    ``beta != 0``; pass ``out=c`` to update it in place. The result's dtype and values are numpy's
    ``alpha * (op(a) @ op(b)) + beta * c`` (``alpha`` 1 and ``beta * c`` with ``beta`` 0 not applied):
    a complex ``alpha``, ``beta`` or ``c`` gives a complex result, a float32 product with a Python
    float stays float32.
    ``config`` forces a candidate (a ``Candidate`` or dict of its fields); ``explain=True`` prints
    the ranked candidates (``autotune.explain`` returns them).

    With ``comm`` (an mpi4py communicator) the call is collective: the ``root`` rank passes a and
    b and receives the result, the other ranks pass None and get None; the plan (algorithm,
    processes, grid, block, threads per rank) is chosen from measured communication costs, or
    forced with ``config=`` (a ``Plan`` or dict of its fields).

    A tuned result may live in a reused, cache-line-aligned block (docs/usage.md#thread-pools): like a
    view, it does not own its memory, so ``ndarray.resize`` raises ValueError on it;
    ``numpy.array(x)`` (or ``x.copy()``) is an owning copy. The same holds for every tuned call.
    """
    cdef cnp.npy_intp *da
    cdef cnp.npy_intp *db
    cdef cnp.npy_intp dc[2]
    cdef _Memo memo
    if (c is None and out is None and config is None and comm is None and not ufunc_kwargs
            and _plain_f64(a) and _plain_f64(b) and not (trans_a or trans_b or explain)
            and _default_scalars(alpha, beta)):
        memo = _current()
        if memo is not None:
            da = cnp.PyArray_DIMS(<cnp.ndarray>a)
            db = cnp.PyArray_DIMS(<cnp.ndarray>b)
            found = memo.shapes.get((da[0], da[1], db[0], db[1],
                                     _one_buffer_transposed(<cnp.ndarray>a, <cnp.ndarray>b), _state()))
            if found is not None:
                aligned, threads = found
                if _lease_take(_numpy_lib, threads):
                    try:
                        if not aligned and 8 * da[0] * db[1] < _cache_min:
                            result = _matmul(a, b)
                        else:
                            dc[0], dc[1] = da[0], db[1]
                            result = _matmul(a, b, _aligned_empty(2, dc, False))
                    finally:
                        _note(_numpy_lib, threads)
                        _lease_give(_numpy_lib)
                    return result
    return _slow(a, b, alpha=alpha, beta=beta, c=c, trans_a=trans_a, trans_b=trans_b, out=out, config=config,
                 explain=explain, comm=comm, root=root, ufunc_kwargs=ufunc_kwargs)


cdef inline unsigned long long _nonfinite_bit(const double *x) noexcept nogil:
    """The sign bit set when ``*x`` is inf/NaN (exponent bits all ones: adding one to the exponent
    carries into the sign bit), else clear: OR these over a span, then shift by 63. Adds and ors
    vectorise; compares into a flag do not (0.8 against 0.15 ms over 10^6 doubles)."""
    return ((<const unsigned long long *>x)[0] & 0x7ff0000000000000ULL) + 0x0010000000000000ULL


cdef inline unsigned long long _copy_span(const double *src, double *dst, Py_ssize_t count) noexcept nogil:
    """Copy ``count`` doubles; non-zero if one is inf/NaN."""
    cdef unsigned long long bad = 0
    cdef Py_ssize_t i
    for i in range(count):
        dst[i] = src[i]
        bad |= _nonfinite_bit(src + i)
    return bad >> 63


cdef inline unsigned long long _zero_span(const double *src, double *dst, Py_ssize_t count) noexcept nogil:
    """Write ``count`` zeros; non-zero if one of the skipped source values is inf/NaN."""
    cdef unsigned long long bad = 0
    cdef Py_ssize_t i
    for i in range(count):
        dst[i] = 0.0
        bad |= _nonfinite_bit(src + i)
    return bad >> 63


cdef object _prepare(cnp.ndarray x, bint lower, bint check_finite):
    """One pass over a contiguous square float64 ``x``: a new array of the same memory order
    holding the triangle the factor needs and zeros in the other, or None if ``check_finite``
    and some entry (either triangle, as scipy checks) is inf/NaN."""
    cdef Py_ssize_t n = cnp.PyArray_DIMS(x)[0], u, cut
    cdef cnp.ndarray w = _aligned_empty(2, cnp.PyArray_DIMS(x), not cnp.PyArray_IS_C_CONTIGUOUS(x))
    cdef const double *src = <const double *>cnp.PyArray_DATA(x)
    cdef double *dst = <double *>cnp.PyArray_DATA(w)
    cdef unsigned long long bad = 0
    # Memory rows u hold logical rows (C order) or columns (F order); the kept entries of a row
    # lie at or after position u when the kept triangle is upper-in-memory, else up to u.
    cdef bint keep_tail = (not lower) if cnp.PyArray_IS_C_CONTIGUOUS(x) else bool(lower)
    with nogil:
        for u in range(n):
            if keep_tail:
                cut = u
                bad |= _zero_span(src + u * n, dst + u * n, cut)
                bad |= _copy_span(src + u * n + cut, dst + u * n + cut, n - cut)
            else:
                cut = u + 1
                bad |= _copy_span(src + u * n, dst + u * n, cut)
                bad |= _zero_span(src + u * n + cut, dst + u * n + cut, n - cut)
    if check_finite and bad:
        return None
    return w


def prepare_cholesky(a, lower, check_finite):
    """Python access to the one-pass check, copy and clean of a contiguous square float64 array."""
    cdef cnp.ndarray x = a
    if not (_plain_f64(x) and x.shape[0] == x.shape[1]
            and (cnp.PyArray_IS_C_CONTIGUOUS(x) or cnp.PyArray_IS_F_CONTIGUOUS(x))):
        raise ValueError("prepare_cholesky needs a contiguous square float64 array")
    return _prepare(x, bool(lower), bool(check_finite))


def tuned_cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, config=None, explain=False,
                   comm=None, root=0):
    """Cholesky factor with the contract of ``scipy.linalg.cholesky``, tuned for 2-D float64.

    Returns upper ``U`` with ``a = U^H U`` (or lower ``L`` with ``a = L L^H``), the other triangle
    zeroed. Raises LinAlgError for a matrix that is not positive definite, ValueError for a
    non-square or (with ``check_finite``) non-finite input. Other dtypes and stacks go to scipy,
    so the result's dtype is scipy's (float32 for bool and integers of up to 16 bits).
    A result from the reused blocks does not own its memory (``resize`` raises ValueError;
    ``numpy.array(x)`` is an owning copy), see ``tuned_gemm``.

    With ``comm`` the call is collective (see ``tuned_gemm``): the root passes ``a`` and gets the
    factor, other ranks pass None and get None; errors are raised on every rank.
    """
    cdef cnp.ndarray x, w
    cdef cnp.npy_intp *d
    cdef bint c_order, lo
    cdef _Kernel kernel = None
    cdef _Memo memo
    if config is None and comm is None and not explain and not overwrite_a and _plain_f64(a):
        x = <cnp.ndarray>a
        d = cnp.PyArray_DIMS(x)
        if d[0] == d[1] and (cnp.PyArray_IS_C_CONTIGUOUS(x) or cnp.PyArray_IS_F_CONTIGUOUS(x)):
            # The buffer keeps x's order; a C buffer is the transpose in Fortran order (other triangle).
            c_order = not cnp.PyArray_IS_F_CONTIGUOUS(x)
            lo = (not lower) if c_order else bool(lower)
            memo = _current()
            kernel = memo.chol.get((d[0], lo, _state())) if memo is not None else None
        w = _prepare(x, bool(lower), bool(check_finite)) if kernel is not None else None
        if w is not None:
            if kernel.call(w.T if c_order else w, lo) == 0:
                return w                    # else: not positive definite, or the library busy at another count
    # Anything else, including a failed factorisation (the Python path raises the right error).
    return _slow_chol(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite, config=config,
                      explain=explain, comm=comm, root=root)


cdef enum:
    STRIP = 4                      # a transposing copy goes down strips of this many source columns


cdef object _fortran_copy(cnp.ndarray x, bint check_finite):
    """A Fortran-ordered aligned copy of a contiguous 2-D float64 ``x`` in one pass, or None if
    ``check_finite`` and an entry is inf/NaN. A C-ordered ``x`` is transposed a strip of STRIP
    columns at a time, all rows down: each row's piece is read once and written to STRIP
    sequential streams (no tile edges for the prefetchers, no cache-set conflicts at
    power-of-two orders as a column-at-a-time copy has)."""
    cdef Py_ssize_t m = cnp.PyArray_DIMS(x)[0], n = cnp.PyArray_DIMS(x)[1], i, j = 0, k
    cdef cnp.ndarray w = _aligned_empty(2, cnp.PyArray_DIMS(x), True)
    cdef const double *src = <const double *>cnp.PyArray_DATA(x)
    cdef double *dst = <double *>cnp.PyArray_DATA(w)
    cdef unsigned long long bad = 0
    with nogil:
        if cnp.PyArray_IS_F_CONTIGUOUS(x):
            bad = _copy_span(src, dst, m * n)
        else:
            while j + STRIP <= n:
                for i in range(m):
                    for k in range(STRIP):
                        dst[i + (j + k) * m] = src[i * n + j + k]
                        bad |= _nonfinite_bit(src + i * n + j + k)
                j += STRIP
            for k in range(j, n):
                for i in range(m):
                    dst[i + k * m] = src[i * n + k]
                    bad |= _nonfinite_bit(src + i * n + k)
            bad >>= 63
    if check_finite and bad:
        return None
    return w


cdef object _same_copy(cnp.ndarray x, bint check_finite):
    """An aligned copy of a contiguous 2-D float64 ``x`` in its own memory order, or None if
    ``check_finite`` and an entry is inf/NaN."""
    cdef cnp.ndarray w = _aligned_empty(2, cnp.PyArray_DIMS(x), not cnp.PyArray_IS_C_CONTIGUOUS(x))
    cdef unsigned long long bad
    cdef const double *src = <const double *>cnp.PyArray_DATA(x)
    cdef double *dst = <double *>cnp.PyArray_DATA(w)
    cdef Py_ssize_t size = cnp.PyArray_SIZE(x)
    with nogil:
        bad = _copy_span(src, dst, size)
    if check_finite and bad:
        return None
    return w


cdef inline bint _one_buffer_transposed(cnp.ndarray a, cnp.ndarray b):
    """``b`` is ``a.T`` on the same memory, ``a`` contiguous (numpy's matmul then calls syrk):
    ``families.gemm_layout``'s "aat"."""
    cdef cnp.npy_intp *sa = cnp.PyArray_STRIDES(a)
    cdef cnp.npy_intp *sb = cnp.PyArray_STRIDES(b)
    cdef cnp.npy_intp *da = cnp.PyArray_DIMS(a)
    cdef cnp.npy_intp *db = cnp.PyArray_DIMS(b)
    return (cnp.PyArray_DATA(a) == cnp.PyArray_DATA(b) and da[0] == db[1] and da[1] == db[0]
            and sa[0] == sb[1] and sa[1] == sb[0] and _contiguous(a))


cdef inline bint _contiguous(cnp.ndarray x):
    return cnp.PyArray_IS_C_CONTIGUOUS(x) or cnp.PyArray_IS_F_CONTIGUOUS(x)


cdef object _zero_based_int32(cnp.ndarray ipiv):
    """LAPACK's 1-based pivots as scipy's 0-based int32 (in place when they are int32 already)."""
    cdef Py_ssize_t i, k = cnp.PyArray_SIZE(ipiv)
    cdef cnp.ndarray out = ipiv if cnp.PyArray_TYPE(ipiv) == cnp.NPY_INT32 else cnp.PyArray_EMPTY(
        1, cnp.PyArray_DIMS(ipiv), cnp.NPY_INT32, 0)
    cdef int *dst = <int *>cnp.PyArray_DATA(out)
    cdef long long *wide
    cdef int *narrow
    if cnp.PyArray_TYPE(ipiv) == cnp.NPY_INT32:
        narrow = <int *>cnp.PyArray_DATA(ipiv)
        for i in range(k):
            dst[i] = narrow[i] - 1
    else:
        wide = <long long *>cnp.PyArray_DATA(ipiv)
        for i in range(k):
            dst[i] = <int>(wide[i] - 1)
    return out


def fortran_copy(a, check_finite):
    """Python access to the one-pass Fortran-ordered copy and finiteness check of a contiguous 2-D
    float64 array (None when ``check_finite`` finds inf/NaN)."""
    cdef cnp.ndarray x = a
    if not (_plain_f64(x) and _contiguous(x)):
        raise ValueError("fortran_copy needs a contiguous 2-D float64 array")
    return _fortran_copy(x, bool(check_finite))


def tuned_lu_factor(a, overwrite_a=False, check_finite=True, *, config=None, explain=False, comm=None, root=0):
    """``(lu, piv)`` with the contract of ``scipy.linalg.lu_factor``, tuned for square 2-D float64.

    ``lu`` holds ``U`` in its upper triangle and the unit-diagonal ``L`` below it (Fortran order),
    ``piv`` the 0-based int32 row interchanges: row i was interchanged with row piv[i]. An exactly
    singular factor gives a ``LinAlgWarning``; non-finite input with ``check_finite`` a ValueError.
    The LAPACK library and its thread count are chosen from the measured models; other dtypes
    (so ``lu`` has scipy's dtype: float32 for bool and integers of up to 16 bits), shapes and
    ``overwrite_a`` of a non-Fortran array go to scipy's own call. ``config`` forces a candidate
    (checked at every size), ``explain=True`` prints the ranking. A tuned ``lu`` does not own its
    memory (``resize`` raises ValueError; ``numpy.array(lu)`` is an owning copy), see ``tuned_gemm``.

    With ``comm`` the call is collective (see ``tuned_gemm``): the root passes ``a`` and gets
    ``(lu, piv)``, the others get None; the plan (one process, or the distributed block-cyclic LU
    on p ranks, grid and block) is the selector's, ``config`` a forced ``Plan``.
    """
    cdef cnp.ndarray x, w, ipiv
    cdef cnp.npy_intp *d
    cdef _Kernel kernel = None
    cdef _Memo memo
    if config is None and comm is None and not explain and not overwrite_a and _plain_f64(a):
        x = <cnp.ndarray>a
        d = cnp.PyArray_DIMS(x)
        if d[0] == d[1] and _contiguous(x):
            memo = _current()
            kernel = memo.lu.get((d[0], _state())) if memo is not None else None
        if kernel is not None:
            w = _fortran_copy(x, bool(check_finite))
            if w is not None:
                ipiv = cnp.PyArray_EMPTY(1, d, <int>kernel.aux, 0)
                if kernel.call(w, ipiv) == 0:
                    return w, _zero_based_int32(ipiv)
    # Anything else, including a singular factor (the Python path warns as scipy does).
    return _slow_lu(a, overwrite_a=overwrite_a, check_finite=check_finite, config=config, explain=explain,
                    comm=comm, root=root)


cdef inline bint _general_corners(cnp.ndarray x, Py_ssize_t n):
    """True when the corners already show ``x`` is neither triangular nor symmetric (what scipy's
    ``assume_a=None`` would detect); False means a full look is needed (the Python path)."""
    cdef const double *p = <const double *>cnp.PyArray_DATA(x)
    return p[n - 1] != 0 and p[(n - 1) * n] != 0 and p[1] != p[n]


def tuned_solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None,
                transposed=False, *, config=None, explain=False, comm=None, root=0):
    """The solution of ``a x = b`` with the contract of ``scipy.linalg.solve``.

    A general square float64 ``a`` is factored by the tuned LU (library and threads from the
    measured models), ``assume_a="pos"`` by the tuned Cholesky; other structures (and what
    ``assume_a=None`` detects as triangular or symmetric), dtypes and stacks go to scipy. A singular
    matrix raises ``LinAlgError`` and an ill-conditioned one warns ``LinAlgWarning``, as scipy does.

    With ``comm`` the call is collective: the root passes ``a`` and ``b`` and gets x, the others
    get None (a singular matrix raises on every rank of the plan). The distributed solve does not
    estimate the condition number: no ill-conditioning warning from it.

    A tuned x does not own its memory (``resize`` raises ValueError; ``numpy.array(x)`` is an
    owning copy), see ``tuned_gemm``.
    """
    cdef cnp.ndarray x, rhs, w, xb
    cdef cnp.npy_intp *d
    cdef Py_ssize_t n, k
    cdef _Kernel kernel = None
    cdef _Memo memo
    cdef bint c_order
    if (config is None and comm is None and not explain and not overwrite_a and not overwrite_b and _plain_f64(a)
            and (assume_a is None or assume_a == "gen" or assume_a == "general")
            and type(b) is cnp.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>b) == cnp.NPY_DOUBLE
            and 1 <= cnp.PyArray_NDIM(<cnp.ndarray>b) <= 2):
        x, rhs = <cnp.ndarray>a, <cnp.ndarray>b
        d = cnp.PyArray_DIMS(x)
        n = d[0]
        k = cnp.PyArray_DIMS(rhs)[1] if cnp.PyArray_NDIM(rhs) == 2 else 1
        if (d[1] == n and n >= 2 and cnp.PyArray_DIMS(rhs)[0] == n and k >= 1 and _contiguous(x)
                and _contiguous(rhs) and (assume_a is not None or _general_corners(x, n))):
            memo = _current()
            kernel = memo.solve.get((n, k, _state())) if memo is not None else None
        if kernel is not None:
            w = _same_copy(x, bool(check_finite))
            xb = _fortran_copy(rhs if cnp.PyArray_NDIM(rhs) == 2 else rhs.reshape(n, 1), bool(check_finite))
            if w is not None and xb is not None:
                # A C-ordered buffer is a^T in Fortran order: solve with the other transposition.
                c_order = not cnp.PyArray_IS_F_CONTIGUOUS(w)
                if kernel.call(w.T if c_order else w, (xb, bool(transposed) != c_order)) == 0:
                    return xb if cnp.PyArray_NDIM(rhs) == 2 else xb.reshape(n)
    return _slow_solve(a, b, lower=lower, overwrite_a=overwrite_a, overwrite_b=overwrite_b,
                       check_finite=check_finite, assume_a=assume_a, transposed=transposed, config=config,
                       explain=explain, comm=comm, root=root)
