"""The uniform backend interface: one object per BLAS library, same routine signatures for all.

Signatures follow ``autotune.kernels`` BLAS tables (Fortran-ordered float64 views):
``gemm(alpha, a, b, beta, c, trans_a, trans_b)``, ``syrk(alpha, a, beta, c, lower, trans)``,
``trsm(alpha, a, b, right, lower, trans_a, unit)``, ``gemv(alpha, a, x, beta, y, trans)``,
``axpy(alpha, x, y)``, ``add(a, b, c, beta)``, ``potrf(a, lower)``/``potf2`` -> info,
``getrf(a, ipiv)`` -> info.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

BLAS_ROUTINES = ("gemm", "syrk", "trsm", "gemv", "axpy", "add", "potrf", "potf2", "getrf", "getrs", "laswp")
# Every routine a backend may offer: the BLAS/LAPACK ones, the stencil sweep and STREAM's copy and
# triad (backends.stencil).
ALL_ROUTINES = BLAS_ROUTINES + ("stencil", "stream")


def package_info(dist: str) -> dict[str, str]:
    """The Python distribution that ships a backend's library, and its installed version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"package": dist, "package_version": version(dist)}
    except PackageNotFoundError:
        return {"package": dist, "package_version": ""}


class BackendUnavailable(RuntimeError):
    """The library behind a backend is not installed or cannot be loaded here."""


@dataclass
class Backend:
    """A BLAS/LAPACK library seen through the uniform interface.

    ``ops`` maps routine name to callable; ``set_threads`` sets the library's thread count
    (None when it cannot be controlled, then only one thread is offered).
    """

    name: str
    ops: dict[str, Callable]
    info: dict[str, str]
    set_threads: Callable[[int], None] | None = None
    get_threads: Callable[[], int] | None = None
    int_dtype: str = "int32"
    native_repeat: bool = False  # every op takes ``repeat=`` and loops outside Python
    # C addresses of ``void set(int)`` / ``int get(void)`` for the thread count (hot paths), or None
    thread_addresses: tuple[int, int] | None = None
    extra: dict = field(default_factory=dict)

    @property
    def routines(self) -> tuple[str, ...]:
        return tuple(r for r in ALL_ROUTINES if r in self.ops)

    @property
    def max_threads(self) -> int:
        return (os.cpu_count() or 1) if self.set_threads else 1

    def supports(self, routine: str) -> bool:
        return routine in self.ops

    def __getattr__(self, routine: str) -> Callable:
        ops = self.__dict__.get("ops", {})
        if routine in ops:
            return ops[routine]
        raise AttributeError(f"backend {self.__dict__.get('name')!r} has no routine {routine!r}")

    @contextlib.contextmanager
    def threads(self, n: int) -> Iterator[None]:
        """Run the block with the library limited to ``n`` threads, then restore."""
        if n < 1 or n > self.max_threads:
            raise ValueError(f"backend {self.name!r}: thread count {n} outside 1..{self.max_threads}")
        if self.set_threads is None:
            yield
            return
        before = self.get_threads() if self.get_threads else None
        self.set_threads(n)
        try:
            yield
        finally:
            if before is not None:
                self.set_threads(before)
