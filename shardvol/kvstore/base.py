"""The key-value store contract every storage backend implements.

Keys are ``/``-separated relative paths (``"8_8_8/0-64_0-64_0-64"``).  Values
are bytes.  A byte range is ``(start, stop)`` with ``stop`` exclusive and
``None`` meaning "to the end"; a negative ``start`` with ``stop=None`` asks for
the last ``-start`` bytes (a suffix).  Missing keys read as ``None``; a range
reaching past the end of a value raises :class:`ByteRangeError`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from shardvol._parallel import CarryingPool
from shardvol.errors import (
    ByteRangeError,
    InvalidKeyError,
    ReadOnlyStoreError,
    VersionChangedError,
)
from shardvol.kvstore.arriving import Arriving

ByteRange = tuple[int, int | None]
#: Names starting with this are shardvol's own (temporary files, locks): never listed.
HIDDEN_PREFIX = ".shardvol-"
#: Bytes of ranges that a streaming read (KVStore.iter_get_many_if) asks for ahead of the
#: values its caller has taken.
DEFAULT_WINDOW = 256 << 20
Request = str | tuple[str, ByteRange | None]

_io_pool: CarryingPool | None = None
_io_pool_lock = threading.Lock()


def _reset_in_child() -> None:
    """After fork: the parent's pool threads and the holders of its locks do not exist in
    the child, so it starts with no pool and free locks."""
    global _io_pool, _io_pool_lock, _key_locks_guard
    _io_pool, _io_pool_lock = None, threading.Lock()
    _key_locks.clear()
    _key_locks_guard = threading.Lock()


def io_pool() -> CarryingPool:
    """The process-wide thread pool used for concurrent store I/O.

    Only store I/O runs on it (tasks never submit back to it), so it cannot
    deadlock when callers are themselves running on another pool.  Its tasks run under
    the call limit of the thread that submitted them (see :func:`shardvol.io_limit`).
    """
    global _io_pool
    with _io_pool_lock:
        if _io_pool is None:
            _io_pool = CarryingPool(
                max_workers=min(32, 4 * (os.cpu_count() or 1)), thread_name_prefix="shardvol-io"
            )
        return _io_pool


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid relative key, else raise InvalidKeyError."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"store key must be a non-empty string, got {key!r}")
    return _check_path(key)


@functools.lru_cache(maxsize=4096)  # every chunk read checks its key (twice through a prefix)
def _check_path(key: str) -> str:
    if key.startswith("/") or "\\" in key or "\0" in key:
        raise InvalidKeyError(f"store key {key!r} must be a relative '/'-separated path")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidKeyError(f"store key {key!r} has an empty, '.' or '..' component")
    return key


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix (may be empty or end with '/')."""
    if prefix:
        check_key(prefix.rstrip("/") or "x")
    return prefix


def resolve_range(byte_range: ByteRange | None, size: int, key: str) -> tuple[int, int]:
    """Absolute ``[start, stop)`` of ``byte_range`` in a value of ``size`` bytes."""
    if byte_range is None:
        return 0, size
    start, stop = byte_range
    if start < 0:
        if stop is not None:
            raise ByteRangeError(f"suffix byte range {byte_range} of {key!r} must have stop=None")
        if -start > size:
            raise ByteRangeError(
                f"suffix of {-start} bytes requested from {key!r}, which has only {size} bytes"
            )
        return size + start, size
    stop = size if stop is None else stop
    if stop < start:
        raise ByteRangeError(f"byte range {byte_range} of {key!r} ends before it starts")
    if stop > size or start > size:
        raise ByteRangeError(
            f"byte range [{start}, {stop}) of {key!r} reaches past its end ({size} bytes)"
        )
    return start, stop


Piece = TypeVar("Piece", bytes, memoryview)


def pieces_in_range(pieces: Iterable[Piece], start: int, stop: int) -> Iterator[Piece]:
    """Slices of ``pieces`` that make up bytes ``[start, stop)`` of their concatenation,
    in order (the pieces after ``stop`` are not taken)."""
    at = 0
    for piece in pieces:
        end = at + len(piece)
        if end > start and at < stop:
            yield piece[max(start - at, 0) : min(stop, end) - at]
        at = end
        if at >= stop:
            return


def normalize_request(req: Request) -> tuple[str, ByteRange | None]:
    if isinstance(req, str):
        return req, None
    key, byte_range = req
    return key, byte_range


class KVStore(ABC):
    """Byte values by key, with ranged reads and atomic writes."""

    url: str
    read_only: bool = False
    #: Reads are memory or page-cache copies (no network round trip): reading values one
    #: at a time, in the thread that uses them, is then cheaper than fanning out requests.
    local: bool = False
    #: :meth:`lock` excludes other processes (and machines) too, not only this one's threads.
    locks_across_processes: bool = False
    #: The values live in this process (``memory://``): no other process can reach them.
    in_process: bool = False
    #: :meth:`set_if` and :meth:`delete_if` are atomic compare-and-swaps against every other
    #: writer (other processes and machines too), on the versions :meth:`get_versioned` reads.
    conditional_writes: bool = False
    #: Seconds a compare-and-swap update is redone while other writers keep changing its
    #: value, before WriteConflictError (None: for ever); see :mod:`shardvol.kvstore.cas`.
    conflict_timeout: float | None = 600.0

    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value (or a byte range of it) stored under ``key``; None if absent."""

    def get_many(self, requests: Iterable[Request]) -> Sequence[bytes | memoryview | None]:
        """Several :meth:`get` calls at once, run concurrently; results in request order
        (stores may return read-only memoryviews rather than bytes)."""
        reqs = [normalize_request(r) for r in requests]
        if len(reqs) <= 1:
            return [self.get(k, r) for k, r in reqs]
        return list(io_pool().map(lambda kr: self.get(*kr), reqs))

    def get_many_versioned(
        self, requests: Iterable[Request]
    ) -> Sequence[tuple[bytes | memoryview | None, Hashable | None]]:
        """:meth:`get_many`, each value with its version token (None: unknown).

        By default the token is :meth:`version` taken before the read: a value replaced
        in between is then seen as changed later, never the reverse.  Stores that can
        tell versions within the requests themselves (S3: the ETag of each response, and
        ``If-Match`` for :meth:`get_many_if`) override both, and need no :meth:`version`.
        """
        reqs = [normalize_request(r) for r in requests]
        versions = {key: self.version(key) for key, _ in reqs}
        return [(v, versions[k]) for (k, _), v in zip(reqs, self.get_many(reqs))]

    def get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None]
    ) -> Sequence[bytes | memoryview | None]:
        """:meth:`get_many` of values that must still be at ``versions[key]`` (tokens from
        :meth:`get_many_versioned`; None: unchecked); raises VersionChangedError naming a
        key replaced since.  By default :meth:`version` is compared after the reads."""
        values = self.get_many(requests)
        for key, expected in versions.items():
            if expected is not None and not self.still_at(key, expected):
                raise VersionChangedError(
                    f"{key!r} in {self.url} changed since version {expected!r}", key)
        return values

    def iter_get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None],
        window: int = DEFAULT_WINDOW, sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None]]:
        """``(i, value of requests[i])`` as :meth:`get_many_if` reads them, in any order.
        Remote stores send every request at once and yield each value as it arrives, with
        at most ``window`` bytes asked for but not yet taken (a ranged request counts its
        range, another its estimate in ``sizes``, if any); this default reads them all,
        then yields them in order."""
        yield from enumerate(self.get_many_if(requests, versions))

    def iter_get_many_versioned(
        self, requests: Iterable[Request], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None, Hashable | None]]:
        """``(i, value, version)`` of each request, as :meth:`get_many_versioned` reads
        them, streamed as :meth:`iter_get_many_if` streams them."""
        for i, (value, version) in enumerate(self.get_many_versioned(requests)):
            yield i, value, version

    def iter_get_arriving(
        self, keys: Sequence[str], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, Arriving]]:
        """``(i, keys[i]'s value so far)`` of whole values, each time more of one has come
        in (the last time ``done`` or ``missing``), in any order across values, with
        :meth:`iter_get_many_versioned`'s window.  Remote stores that can stream a value
        into its buffer as its bytes arrive (see :mod:`shardvol.kvstore.arriving`); this
        default yields each value whole, with its version."""
        for i, value, version in self.iter_get_many_versioned(keys, window, sizes):
            arriving = Arriving()
            arriving.complete(value, version)
            yield i, arriving

    def get_versioned(self, key: str) -> tuple[bytes | memoryview | None, Hashable | None]:
        """The value under ``key`` (None if absent) and its version, as one read: the token
        that :meth:`set_if` and :meth:`delete_if` compare (None for an absent value)."""
        return self.get_many_versioned([key])[0]

    @abstractmethod
    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` atomically (readers see the old or the new value)."""

    def set_if(self, key: str, value: bytes | memoryview, version: Hashable | None) -> bool:
        """Store ``value`` under ``key`` only if it is still at ``version`` (from
        :meth:`get_versioned`; None: only if ``key`` is absent), atomically; whether it did.
        Stores with :attr:`conditional_writes` only.

        A write whose condition failed but which finds ``key`` holding exactly ``value``
        counts as done: a retried request whose first attempt had landed finds its own
        bytes, and otherwise the value is what the write meant it to be."""
        raise NotImplementedError(f"{self.url} has no conditional writes")

    def set_parts_if(self, key: str, parts: Sequence[bytes | memoryview],
                     version: Hashable | None) -> bool:
        """:meth:`set_if` of the concatenation of ``parts``; stores that can write the parts
        without joining them override this."""
        return self.set_if(key, b"".join(parts), version)

    def delete_if(self, key: str, version: Hashable | None) -> bool:
        """Delete ``key`` only if it is still at ``version``; whether it is gone as asked
        (an absent ``key``, or ``version`` None: nothing to delete, done).  Stores with
        :attr:`conditional_writes` only."""
        raise NotImplementedError(f"{self.url} has no conditional writes")

    def set_parts(self, key: str, parts: Sequence[bytes | memoryview]) -> None:
        """Store the concatenation of ``parts`` as :meth:`set` would (a shard of encoded
        chunks); stores that can write the parts without joining them override this."""
        self.set(key, b"".join(parts))

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are ignored."""

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove every key of ``keys``; absent keys are ignored.  Remote stores send the
        deletes concurrently, within their request budgets."""
        for key in keys:
            self.delete(key)

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Sorted keys that start with ``prefix`` (recursively).  Names of shardvol's own
        (starting with ``HIDDEN_PREFIX``) are left out, but for those the prefix names in
        full (``list(".shardvol-job.d/")`` lists what is in that folder)."""

    def exists(self, key: str) -> bool:
        """Whether a value is stored under ``key``."""
        return self.size(key) is not None

    @abstractmethod
    def size(self, key: str) -> int | None:
        """Length in bytes of the value under ``key``; None if absent."""

    def version(self, key: str) -> Hashable | None:
        """A token that changes whenever ``key`` is written or deleted; None if unknown.

        Caches of derived data (shard indexes) compare it to notice that another
        writer replaced a value.  Backends that cannot tell cheaply return None.
        """
        return None

    def still_at(self, key: str, version: Hashable | None) -> bool:
        """Whether ``key`` still has ``version`` as far as :meth:`version` can tell (a
        store that cannot tell, which returns None, reports no change)."""
        now = self.version(key)
        return now is None or now == version

    def file_path(self, key: str) -> str | None:
        """The local file holding ``key``'s value, for readers that open it themselves;
        None unless the value is a plain file."""
        return None

    def open_file(self, key: str) -> tuple[int, Hashable, int] | None:
        """For readers that read a local file themselves: a read descriptor of ``key``'s
        file (the caller closes it), the version of that very file (as :meth:`version`
        reports it) and its size; None if there is no such file (or the value is not a
        plain file)."""
        return None

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Exclusive lock on ``key`` for read-modify-write cycles.

        The base implementation serialises writers of one key inside this
        process only; backends that can do better (local files) override it.
        """
        check_key(key)
        with _process_lock(self.url, key):
            yield

    def write_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        """What a writer of ``key``'s value holds around its read-modify-write: on stores with
        :attr:`conditional_writes`, the lock of this process's threads only (every store
        object of this URL), whose writes are then compare-and-swaps (see
        :mod:`shardvol.kvstore.cas`); on the others, :meth:`lock`."""
        if self.conditional_writes:
            check_key(key)
            return _process_lock(self.url, key)
        return self.lock(key)

    def _require_writable(self, key: str) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"cannot write {key!r}: store {self.url} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class _KeyLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # threads holding or waiting for the lock


# The lock of each (url, key) some thread holds or waits for: an entry goes when its last
# user leaves (a write of a volume locks every chunk file once, millions of keys).
_key_locks: dict[tuple[str, str], _KeyLock] = {}
_key_locks_guard = threading.Lock()


@contextlib.contextmanager
def _process_lock(url: str, key: str) -> Iterator[None]:
    with _key_locks_guard:
        entry = _key_locks.get((url, key))
        if entry is None:
            entry = _key_locks[(url, key)] = _KeyLock()
        entry.users += 1
    try:
        with entry.lock:
            yield
    finally:
        with _key_locks_guard:
            entry.users -= 1
            if entry.users == 0:
                del _key_locks[(url, key)]


os.register_at_fork(after_in_child=_reset_in_child)


def process_lock(url: str, key: str) -> contextlib.AbstractContextManager[None]:
    """In-process lock on (store url, key), shared by every store object of that url."""
    return _process_lock(url, key)


def url_scheme(url: str) -> str:
    """Scheme of a URL ("file" for plain paths)."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def join_key(*parts: str) -> str:
    """Join key components with '/', skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))

