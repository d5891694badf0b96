"""Warnings attributed to the user's call: the first frame outside autotune (and its kernels).

A fixed ``stacklevel`` points at an internal line, since the depth between a tuned call and the
warning varies by path (the C hot path, the local and MPI paths); like Python 3.12's
``skip_file_prefixes``, the level is found by walking outward past autotune's own frames.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import warnings


@functools.cache
def _internal_prefixes() -> tuple[str, ...]:
    """Directories (and stdlib helper files) whose frames are autotune's, never the user's: the package,
    its kernels (a separate directory in an editable install), and functools/contextlib wrappers."""
    dirs = {os.path.dirname(os.path.dirname(os.path.realpath(__file__)))}
    try:
        spec = importlib.util.find_spec("autotune.kernels")
        dirs.update(os.path.realpath(d) for d in (spec.submodule_search_locations or ()))
    except (ImportError, AttributeError, ValueError):
        pass
    return tuple(d + os.sep for d in sorted(dirs)) + tuple(m.__file__ for m in (functools, contextlib))


def _internal(filename: str, prefixes: tuple[str, ...]) -> bool:
    return filename.startswith(prefixes) or os.path.realpath(filename).startswith(prefixes)


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the calling function that names the first frame
    outside autotune (the user's call), or the outermost frame when every frame is autotune's."""
    prefixes = _internal_prefixes()
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and _internal(frame.f_code.co_filename, prefixes):
        frame = frame.f_back
        level += 1
    return level


def warn_user(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn(message, category)`` reported at the user's line that led to it."""
    warnings.warn(message, category, stacklevel=user_stacklevel())


__all__ = ["user_stacklevel", "warn_user"]
