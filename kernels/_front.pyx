# cython: language_level=3, boundscheck=False, wraparound=False
"""The hot paths of ``tuned_gemm`` and ``tuned_cholesky`` in C.

A remembered decision runs here without the Python layer: a product whose choice is numpy's own
``matmul`` (plain ``a @ b`` of 2-D float64 ndarrays) costs one dict lookup, and a Cholesky of a
remembered order is checked, copied, factored by its kernel and cleaned in one C function. At
small orders the kernels take microseconds, so the Python layer's checks and decision lookup
would be a large tax. Anything else goes to the Python implementations given to ``configure``.
What is remembered belongs to the options object in force (one per context's ``options()`` block,
see ``autotune.config``), so a context never runs a decision taken under another's options, and
is forgotten ``seconds`` after it was first remembered (so database, learning and thread changes
are seen again).
"""
cimport numpy as cnp
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cnp.import_array()

cdef dict _memos = {}              # id(options object) -> its _Memo
cdef object _last = None           # the _Memo found last (skips the id/dict lookup while one context calls)
cdef double _period = 1.0
cdef object _get_options = None
cdef object _slow = None
cdef object _slow_chol = None
cdef object _matmul = None
cdef enum:
    CACHE_LINE = 64
    MEMO_LIMIT = 64                # options objects remembered at once (expired ones dropped first)


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

    def __init__(self, run, addresses, int threads):
        self.run, self.threads = run, threads
        self.set_threads = NULL
        self.get_threads = NULL
        if addresses is not None:
            self.set_threads = <set_threads_t><size_t>addresses[0]
            self.get_threads = <get_threads_t><size_t>addresses[1]

    cdef int call(self, w, bint lower) except? -1:
        cdef int before
        if self.set_threads == NULL:
            return self.run(w, lower)
        before = self.get_threads()
        if before == self.threads:
            return self.run(w, lower)
        self.set_threads(self.threads)
        try:
            return self.run(w, lower)
        finally:
            self.set_threads(before)


cdef double _now() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + 1e-9 * ts.tv_nsec


cdef class _Memo:
    """Decisions remembered under one options object, trusted until ``expiry``."""
    cdef object opts
    cdef dict shapes               # shape key -> write into a cache-line-aligned output?
    cdef dict chol                 # order -> _Kernel
    cdef double expiry

    def __cinit__(self, opts, double expiry):
        self.opts, self.expiry = opts, expiry
        self.shapes, self.chol = {}, {}


def configure(get_options, slow_gemm, slow_cholesky, matmul, double seconds) -> None:
    """Install the options getter, the full Python implementations and numpy's matmul."""
    global _get_options, _slow, _slow_chol, _matmul, _period
    _get_options, _slow, _slow_chol, _matmul = get_options, slow_gemm, slow_cholesky, matmul
    _period = seconds
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


cdef cnp.ndarray _aligned_empty(int nd, cnp.npy_intp *dims, bint fortran):
    """Uninitialised float64 array whose data starts on a cache line, owned by a byte buffer.

    Multi-threaded OpenBLAS writes an output that is not cache-line aligned more slowly (dgemm,
    dpotrf); numpy's own allocations are only 16-byte aligned, so where one lands decides the
    speed. The probe and the tuned calls both write into these."""
    cdef cnp.npy_intp size = 8 * dims[0] * (dims[1] if nd == 2 else 1) + CACHE_LINE
    cdef cnp.npy_intp strides[2]
    cdef cnp.ndarray buf = cnp.PyArray_EMPTY(1, &size, cnp.NPY_UINT8, 0)
    cdef size_t addr = <size_t>cnp.PyArray_DATA(buf)
    cdef char *data = <char *>cnp.PyArray_DATA(buf) + (CACHE_LINE - addr % CACHE_LINE) % CACHE_LINE
    strides[0] = 8
    if nd == 2 and fortran:
        strides[1] = 8 * dims[0]
    elif nd == 2:
        strides[0], strides[1] = 8 * dims[1], 8
    cdef cnp.ndarray arr = cnp.PyArray_New(cnp.ndarray, nd, dims, cnp.NPY_DOUBLE, strides, data, 8,
                                           cnp.NPY_ARRAY_FARRAY if fortran else cnp.NPY_ARRAY_CARRAY, None)
    cnp.set_array_base(arr, buf)
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


def remember(tuple key, bint aligned=False, opts=None) -> None:
    """Shape key ``a.shape + b.shape`` whose choice is numpy's own call under ``opts`` (the options
    the decision was taken under; None: those in force), into a cache-line-aligned output when
    ``aligned`` (multi-threaded choices, see _aligned_empty)."""
    _memo_of(_get_options() if opts is None else opts, True).shapes[key] = aligned


def remember_cholesky(Py_ssize_t n, run, thread_addresses, int threads, opts=None) -> None:
    """Order ``n`` whose choice under ``opts`` (None: the options in force) is ``run(w, lower) -> info``
    with the library at ``threads`` threads (``thread_addresses``: C set/get functions of its
    thread count, or None)."""
    _memo_of(_get_options() if opts is None else opts, True).chol[n] = _Kernel(run, thread_addresses, threads)


def forget() -> None:
    """Forget every remembered decision, under all options."""
    global _last
    _memos.clear()
    _last = None


def remembered(tuple key) -> bool:
    """Would a product with shape key ``key`` take the hot path now, in this context?"""
    cdef _Memo memo = _current()
    return memo is not None and key in memo.shapes


def remembered_cholesky(Py_ssize_t n) -> bool:
    """Would a Cholesky of order ``n`` take the hot path now, in this context?"""
    cdef _Memo memo = _current()
    return memo is not None and n in memo.chol


cdef inline bint _plain_f64(object x):
    return (type(x) is cnp.ndarray and cnp.PyArray_NDIM(<cnp.ndarray>x) == 2
            and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_DOUBLE)


def tuned_gemm(a, b, /, out=None, *, alpha=1.0, beta=0.0, c=None, trans_a=False, trans_b=False,
               config=None, explain=False, comm=None, root=0, **ufunc_kwargs):
    """``alpha op(a) op(b) + beta c`` with the measured-fastest configuration; ``a @ b`` by default.

    Called as ``numpy.matmul(x1, x2, /, out=None, *, ...)`` is, it accepts what numpy accepts and
    returns the same values, dtypes and errors; only 2-D float64 products are tuned (others, and
    calls with numpy's other keywords such as ``dtype=``, defer to numpy). The BLAS-style extras
    are keyword-only: ``c`` is read only when ``beta != 0``; pass ``out=c`` to update it in place.
    ``config`` forces a candidate (a ``Candidate`` or dict of its fields); ``explain=True`` prints
    the ranked candidates (``autotune.explain`` returns them).

    With ``comm`` (an mpi4py communicator) the call is collective: the ``root`` rank passes a and
    b and receives the result, the other ranks pass None and get None; the plan (algorithm,
    processes, grid, block, threads per rank) is chosen from measured communication costs, or
    forced with ``config=`` (a ``Plan`` or dict of its fields).
    """
    cdef cnp.npy_intp *da
    cdef cnp.npy_intp *db
    cdef cnp.npy_intp dc[2]
    cdef _Memo memo
    if (c is None and out is None and config is None and comm is None and not ufunc_kwargs
            and _plain_f64(a) and _plain_f64(b) and not (trans_a or trans_b or explain)
            and alpha == 1.0 and beta == 0.0):
        memo = _current()
        if memo is not None:
            da = cnp.PyArray_DIMS(<cnp.ndarray>a)
            db = cnp.PyArray_DIMS(<cnp.ndarray>b)
            aligned = memo.shapes.get((da[0], da[1], db[0], db[1]))
            if aligned is not None:
                if not aligned:
                    return _matmul(a, b)
                dc[0], dc[1] = da[0], db[1]
                return _matmul(a, b, _aligned_empty(2, dc, False))
    return _slow(a, b, alpha, beta, c, trans_a, trans_b, out, config, explain, comm, root, ufunc_kwargs)


cdef inline unsigned long long _copy_span(const double *src, double *dst, Py_ssize_t count) noexcept nogil:
    """Copy ``count`` doubles; non-zero if one is inf/NaN (exponent bits all ones)."""
    cdef const unsigned long long *bits = <const unsigned long long *>src
    cdef unsigned long long bad = 0
    cdef Py_ssize_t i
    for i in range(count):
        dst[i] = src[i]
        bad |= (bits[i] & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL
    return bad


cdef inline unsigned long long _zero_span(const double *src, double *dst, Py_ssize_t count) noexcept nogil:
    """Write ``count`` zeros; non-zero if one of the skipped source values is inf/NaN."""
    cdef const unsigned long long *bits = <const unsigned long long *>src
    cdef unsigned long long bad = 0
    cdef Py_ssize_t i
    for i in range(count):
        dst[i] = 0.0
        bad |= (bits[i] & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL
    return bad


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
    non-square or (with ``check_finite``) non-finite input. Other dtypes and stacks go to scipy.

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
            memo = _current()
            kernel = memo.chol.get(d[0]) if memo is not None else None
        w = _prepare(x, bool(lower), bool(check_finite)) if kernel is not None else None
        if w is not None:
            c_order = not cnp.PyArray_IS_F_CONTIGUOUS(w)
            lo = (not lower) if c_order else bool(lower)   # a C buffer is the transpose in Fortran order
            if kernel.call(w.T if c_order else w, lo) == 0:
                return w
    # Anything else, including a failed factorisation (the Python path raises the right error).
    return _slow_chol(a, lower, overwrite_a, check_finite, config, explain, comm, root)
