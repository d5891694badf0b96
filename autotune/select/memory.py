"""Drop what does not fit: candidates and plans predicted (``models.memory``) to need more memory
on a host than the cap (``options(memory_bytes=...)``), with a note for ``explain``."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
MIB = 2**20


def keep_fitting(items: Sequence[T], need: Callable[[T], float | None], cap: float | None,
                 name: Callable[[T], str], what: str = "candidates") -> tuple[list[T], list[str]]:
    """``items`` (in order) whose predicted bytes are within ``cap`` (None: no cap; a need of None:
    no memory model, kept), and a note naming the ``what`` (candidates, plans) dropped. When
    nothing fits, the item needing least is kept, so the call still runs (and may fail as numpy
    would)."""
    if cap is None or not items:
        return list(items), []
    needs = [need(x) for x in items]
    kept = [x for x, b in zip(items, needs, strict=True) if b is None or b <= cap]
    over = [(b, x) for x, b in zip(items, needs, strict=True) if b is not None and b > cap]
    if not over:
        return kept, []
    least, smallest = min(over, key=lambda t: t[0])
    if not kept:
        return [smallest], [f"{what}: nothing fits in {cap / MIB:.0f} MiB per host; kept {name(smallest)}, "
                            f"which needs least ({least / MIB:.0f} MiB)"]
    return kept, [f"{what}: {len(over)} dropped, predicted to need more than {cap / MIB:.0f} MiB per host "
                  f"(e.g. {name(smallest)}: {least / MIB:.0f} MiB)"]


__all__ = ["keep_fitting"]
