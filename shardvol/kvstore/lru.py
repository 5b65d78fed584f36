"""A small thread-safe, resizable LRU cache for shard and minishard indexes."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

_MISSING = object()
K = TypeVar("K", bound=Hashable)


_ALL: weakref.WeakSet[LRU[Any]] = weakref.WeakSet()


class LRU(Generic[K]):
    """Least-recently-used mapping holding at most ``size`` entries (0 disables caching).

    Pickles as an empty cache of the same size (entries belong to one process)."""

    def __init__(self, size: int) -> None:
        self._data: OrderedDict[K, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.size = 0
        self.resize(size)
        _ALL.add(self)

    def __getstate__(self) -> dict[str, int]:
        return {"size": self.size}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["size"])  # type: ignore[misc]  # unpickling: a fresh, empty cache

    def resize(self, size: int) -> None:
        """Change the capacity, evicting the least recently used entries if needed."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"cache size must be a non-negative integer, got {size!r}")
        with self._lock:
            self.size = size
            while len(self._data) > size:
                self._data.popitem(last=False)

    def get(self, key: K, default: Any = None) -> Any:
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._data.move_to_end(key)
            return value

    def __contains__(self, key: K) -> bool:
        return key in self._data

    def __getitem__(self, key: K) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: K, value: Any) -> None:
        with self._lock:
            if self.size == 0:
                return
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.size:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def discard(self, key: K) -> None:
        """Drop ``key``'s entry, if any."""
        with self._lock:
            self._data.pop(key, None)

    def discard_if(self, predicate: Callable[[K], bool]) -> None:
        """Drop every entry whose key satisfies ``predicate``."""
        with self._lock:
            for key in [k for k in self._data if predicate(k)]:
                del self._data[key]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def _reset_in_child() -> None:
    """After fork: a lock held by one of the parent's threads would stay held in the child."""
    for cache in list(_ALL):
        cache._lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)
