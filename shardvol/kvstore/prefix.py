"""A view of a store below a key prefix (a scale's directory, a Zarr array in a group)."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence

from shardvol.errors import VersionChangedError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.base import (
    DEFAULT_WINDOW,
    ByteRange,
    KVStore,
    Request,
    check_key,
    join_key,
    normalize_request,
)

_KEY_CACHE_SIZE = 1 << 16


class PrefixStore(KVStore):
    """Keys of ``base`` under ``prefix/``, presented without the prefix."""

    def __init__(self, base: KVStore, prefix: str) -> None:
        self.base = base
        self.prefix = check_key(prefix.strip("/"))
        self.url = f"{base.url.rstrip('/')}/{self.prefix}"
        self.read_only = base.read_only
        self.local = base.local
        self.locks_across_processes = base.locks_across_processes
        self.in_process = base.in_process
        self.conditional_writes = base.conditional_writes
        self.conflict_timeout = base.conflict_timeout
        self._keys: dict[str, str] = {}  # key -> base key, saving the check and join per read

    def _k(self, key: str) -> str:
        full = self._keys.get(key)
        if full is None:
            if len(self._keys) >= _KEY_CACHE_SIZE:
                self._keys.clear()
            full = self._keys[key] = join_key(self.prefix, check_key(key))
        return full

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        return self.base.get(self._k(key), byte_range)

    def get_many(self, requests: Iterable[Request]) -> Sequence[bytes | memoryview | None]:
        return self.base.get_many(self._requests(requests))

    def get_many_versioned(
        self, requests: Iterable[Request]
    ) -> Sequence[tuple[bytes | memoryview | None, Hashable | None]]:
        return self.base.get_many_versioned(self._requests(requests))

    def get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None]
    ) -> Sequence[bytes | memoryview | None]:
        try:
            return self.base.get_many_if(
                self._requests(requests), {self._k(k): v for k, v in versions.items()})
        except VersionChangedError as e:
            raise VersionChangedError(str(e), e.key[len(self.prefix) + 1 :]) from None

    def iter_get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None],
        window: int = DEFAULT_WINDOW, sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None]]:
        try:
            yield from self.base.iter_get_many_if(
                self._requests(requests), {self._k(k): v for k, v in versions.items()},
                window, sizes)
        except VersionChangedError as e:
            raise VersionChangedError(str(e), e.key[len(self.prefix) + 1 :]) from None

    def iter_get_many_versioned(
        self, requests: Iterable[Request], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None, Hashable | None]]:
        yield from self.base.iter_get_many_versioned(self._requests(requests), window, sizes)

    def iter_get_arriving(
        self, keys: Sequence[str], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, Arriving]]:
        try:
            yield from self.base.iter_get_arriving([self._k(k) for k in keys], window, sizes)
        except VersionChangedError as e:
            raise VersionChangedError(str(e), e.key[len(self.prefix) + 1 :]) from None

    def _requests(self, requests: Iterable[Request]) -> list[tuple[str, ByteRange | None]]:
        return [(self._k(k), r) for k, r in map(normalize_request, requests)]

    def set(self, key: str, value: bytes) -> None:
        self.base.set(self._k(key), value)

    def set_parts(self, key: str, parts: Sequence[bytes | memoryview]) -> None:
        self.base.set_parts(self._k(key), parts)

    def delete(self, key: str) -> None:
        self.base.delete(self._k(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        self.base.delete_many([self._k(key) for key in keys])

    def get_versioned(self, key: str) -> tuple[bytes | memoryview | None, Hashable | None]:
        return self.base.get_versioned(self._k(key))

    def set_if(self, key: str, value: bytes | memoryview, version: Hashable | None) -> bool:
        return self.base.set_if(self._k(key), value, version)

    def set_parts_if(self, key: str, parts: Sequence[bytes | memoryview],
                     version: Hashable | None) -> bool:
        return self.base.set_parts_if(self._k(key), parts, version)

    def delete_if(self, key: str, version: Hashable | None) -> bool:
        return self.base.delete_if(self._k(key), version)

    def list(self, prefix: str = "") -> list[str]:
        n = len(self.prefix) + 1
        return [k[n:] for k in self.base.list(f"{self.prefix}/{prefix}")]

    def size(self, key: str) -> int | None:
        return self.base.size(self._k(key))

    def version(self, key: str) -> Hashable | None:
        return self.base.version(self._k(key))

    def file_path(self, key: str) -> str | None:
        return self.base.file_path(self._k(key))

    def open_file(self, key: str) -> tuple[int, Hashable, int] | None:
        return self.base.open_file(self._k(key))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        with self.base.lock(self._k(key)):
            yield

    def write_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        return self.base.write_lock(self._k(key))
