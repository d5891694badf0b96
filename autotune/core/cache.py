"""The one bounded cache of decisions: at most ``CACHE_ENTRIES`` entries, emptied when full (a
miss costs one ranking, so no eviction order is worth keeping)."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from autotune.core.assumptions import CACHE_ENTRIES

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A dict of at most ``limit`` entries, emptied before the entry that would exceed it."""

    def __init__(self, limit: int = CACHE_ENTRIES):
        self.limit = limit
        self._entries: dict[Hashable, V] = {}

    def get(self, key: Hashable) -> V | None:
        return self._entries.get(key)

    def put(self, key: Hashable, value: V) -> V:
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = value
        return value

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        hit = self._entries.get(key)
        return self.put(key, make()) if hit is None else hit

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
