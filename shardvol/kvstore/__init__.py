"""Storage layer: a small key-value contract and a URL-scheme registry of backends.

``open_store("path/or/url")`` picks a backend: plain paths and ``file://`` use
local files, ``memory://`` an in-process dict, and every other scheme that
fsspec knows (``http``, ``https``, ``gs``, ``s3``, ...) goes through fsspec.
"""

from __future__ import annotations

from collections.abc import Callable

from shardvol.errors import UnsupportedSchemeError
from shardvol.kvstore.base import ByteRange, KVStore, Request, check_key, join_key, url_scheme
from shardvol.kvstore.file import FileStore
from shardvol.kvstore.memory import MemoryStore
from shardvol.kvstore.prefix import PrefixStore

StoreFactory = Callable[[str], KVStore]
_SCHEMES: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Make ``open_store`` use ``factory(url)`` for URLs of ``scheme``."""
    _SCHEMES[scheme.lower()] = factory


def _fsspec_factory(url: str) -> KVStore:
    from shardvol.kvstore.fsspec_store import FsspecStore

    return FsspecStore(url)


register_scheme("file", FileStore)
register_scheme("memory", MemoryStore)


def open_store(url_or_store: str | KVStore, prefix: str = "") -> KVStore:
    """A store for a URL or path (a store passes through unchanged), viewed below ``prefix``."""
    if prefix:
        return PrefixStore(open_store(url_or_store), prefix)
    if isinstance(url_or_store, KVStore):
        return url_or_store
    url = str(url_or_store)
    scheme = url_scheme(url)
    factory = _SCHEMES.get(scheme)
    if factory is not None:
        return factory(url)
    import fsspec

    if scheme in fsspec.available_protocols():
        return _fsspec_factory(url)
    raise UnsupportedSchemeError(f"no storage backend for URL scheme {scheme!r} in {url!r}")


__all__ = [
    "ByteRange",
    "FileStore",
    "KVStore",
    "MemoryStore",
    "PrefixStore",
    "Request",
    "check_key",
    "join_key",
    "open_store",
    "register_scheme",
    "url_scheme",
]
