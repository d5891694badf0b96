"""Drop what does not fit: candidates and plans predicted (``models.memory``) to need more memory
on a host than the cap (``options(memory_bytes=...)``), with a note for ``explain``."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
MIB = 2**20


def keep_fitting(items: Sequence[T], need: Callable[[T], float | None], cap: float | None,
                 name: Callable[[T], str]) -> tuple[list[T], list[str]]:
    """``items`` (in order) whose predicted bytes are within ``cap`` (None: no cap; a need of None:
    no memory model, kept), and the notes saying what was dropped. When nothing fits, the item
    needing least is kept, so the call still runs (and may fail as numpy would)."""
    if cap is None or not items:
        return list(items), []
    needs = [need(x) for x in items]
    kept = [x for x, b in zip(items, needs, strict=True) if b is None or b <= cap]
    over = [(b, x) for x, b in zip(items, needs, strict=True) if b is not None and b > cap]
    if not over:
        return kept, []
    least = min(over, key=lambda t: t[0])
    if not kept:
        return [least[1]], [f"nothing fits in {cap / MIB:.0f} MiB per host: kept {name(least[1])}, "
                            f"which needs least ({least[0] / MIB:.0f} MiB)"]
    return kept, [f"{len(over)} dropped: predicted to need more than {cap / MIB:.0f} MiB per host "
                  f"(e.g. {name(least[1])}: {least[0] / MIB:.0f} MiB)"]


__all__ = ["keep_fitting"]
