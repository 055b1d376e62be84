"""The last few results of an expensive call, kept by key: the program caches of the model's entry points (a
one-machine replay's outputs, what ``cost()`` reads of a machine) share this one store."""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable
from typing import Any


class Kept:
    """A thread-safe store of at most ``limit`` entries (given per :meth:`put`), the least recently used dropped
    first.

    >>> kept = Kept()
    >>> kept.put("a", 1, limit=2); kept.put("b", 2, limit=2); kept.get("a")
    1
    >>> kept.put("c", 3, limit=2); sorted(kept.keys())  # "b" was used least recently
    ['a', 'c']
    """

    def __init__(self) -> None:
        self._items: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any, limit: int) -> None:
        """Keep ``value`` under ``key``, then drop the least recently used entries past ``limit``."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > max(int(limit), 0):
                self._items.popitem(last=False)

    def keys(self) -> list[Hashable]:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
