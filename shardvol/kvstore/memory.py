"""In-memory store (``memory://name``), shared by every store of the same URL in a process."""

from __future__ import annotations

import itertools
import os
import threading

from shardvol.kvstore.base import (
    HIDDEN_PREFIX,
    ByteRange,
    KVStore,
    check_key,
    check_prefix,
    resolve_range,
)

_SPACES: dict[str, dict[str, bytes]] = {}
_VERSIONS: dict[str, dict[str, int]] = {}
_COUNTER = itertools.count(1)
_SPACES_LOCK = threading.Lock()


def _reset_in_child() -> None:
    global _SPACES_LOCK
    _SPACES_LOCK = threading.Lock()  # (a parent's thread may have held it at fork)


os.register_at_fork(after_in_child=_reset_in_child)


class MemoryStore(KVStore):
    """Values in a dict; ``memory://a`` opened twice sees the same values."""

    local = True
    in_process = True

    def __init__(self, url: str = "memory://") -> None:
        name = url.removeprefix("memory://")
        name = name.strip("/")
        self.url = "memory://" + name
        with _SPACES_LOCK:
            self._data = _SPACES.setdefault(name, {})
            self._versions = _VERSIONS.setdefault(name, {})
        self._guard = threading.Lock()

    def __getstate__(self) -> dict[str, str]:
        return {"url": self.url}  # (another process has its own values under that URL)

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["url"])  # type: ignore[misc]  # unpickling: a fresh, empty store

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        value = self._data.get(check_key(key))
        if value is None:
            return None
        start, stop = resolve_range(byte_range, len(value), key)
        return value if (start, stop) == (0, len(value)) else value[start:stop]

    def set(self, key: str, value: bytes) -> None:
        check_key(key)
        value = bytes(value)
        self._bump(key)  # before and after: a reader that saw either value under one
        self._data[key] = value  # version token sees that token change
        self._bump(key)

    def delete(self, key: str) -> None:
        check_key(key)
        self._bump(key)
        self._data.pop(key, None)
        self._bump(key)

    def _bump(self, key: str) -> None:
        with _SPACES_LOCK:
            self._versions[key] = next(_COUNTER)

    def version(self, key: str) -> int:
        """A process-wide write counter of ``key`` (0 if never written)."""
        return self._versions.get(check_key(key), 0)

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        with self._guard:
            keys = list(self._data)
        shown = prefix.count("/")  # (hidden names are listed only where the prefix gives them)
        return sorted(k for k in keys if k.startswith(prefix) and not any(
            part.startswith(HIDDEN_PREFIX) for part in k.split("/")[shown:]))

    def size(self, key: str) -> int | None:
        value = self._data.get(check_key(key))
        return None if value is None else len(value)


def clear_memory(url: str) -> None:
    """Drop every value of the memory space ``url`` (tests use this)."""
    name = url[len("memory://") :].strip("/") if url.startswith("memory://") else url.strip("/")
    with _SPACES_LOCK:
        _SPACES.get(name, {}).clear()
