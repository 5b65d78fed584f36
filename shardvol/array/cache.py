"""Decoded chunks kept for later reads, up to a budget of bytes, least recently used out.

Reads that come back to the same chunks (xy planes through one row of 64-deep chunks, a
viewer panning, overlapping cutouts) decode each chunk once instead of once per read.
One cache serves every handle of one array (a precomputed scale, a Zarr array) in a
process (:func:`shared_cache`), safe under threads.  Entries remember the version of the
storage unit (chunk file, shard) they were read from, where the store can tell it
cheaply (local files); a unit found changed, by that check or by a read of the store
(remote stores see a replaced shard when they read it), loses its entries, and writes
through any handle drop the chunks they touch.  The budget counts the memory each chunk
keeps: a decoded chunk in a hugeblock block counts the whole block.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import NamedTuple

import numpy as np

from shardvol._ext import hugeblock
from shardvol.array.grid import ChunkCoord
from shardvol.errors import InvalidArgumentError
from shardvol.sizes import parse_bytes, physical_memory

#: The default budget of remote volumes' and arrays' caches: the chunks under a 512x512 xy
#: window twice over for 64^3 uint64 chunks, under a 2048x2048 one for uint8; small beside
#: the machines such reads run on.  Local files: no cache (the page cache holds their
#: bytes).
DEFAULT_REMOTE_CACHE_BYTES = 256 << 20


class Cached(NamedTuple):
    """A cached chunk (None: absent, it reads as the fill value) and the version of the unit
    it was read from (None: not known)."""

    chunk: np.ndarray | None
    version: Hashable | None


def cache_budget(value: int | str | None, default: int) -> int:
    """``cache_bytes`` as bytes (None: ``default``), at most this machine's memory."""
    if value is None:
        return default
    n = parse_bytes(value, "cache_bytes", allow_zero=True)
    memory = physical_memory()
    if memory is not None and n > memory:
        raise InvalidArgumentError(
            f"cache_bytes {value!r} is more than this machine's memory ({memory:,} bytes)")
    return n


class ChunkCache:
    """Decoded chunks by grid position, at most ``nbytes`` of them."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self._entries: OrderedDict[ChunkCoord, Cached] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._claims: dict[ChunkCoord, threading.Event] = {}
        # claimed chunks that a write dropped while they were being fetched: the bytes
        # fetched may be older than the write, so they are not kept
        self._spoiled: set[ChunkCoord] = set()
        _ALL.add(self)

    def __getstate__(self) -> dict[str, int]:
        return {"nbytes": self.nbytes}  # (entries belong to one process)

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["nbytes"])  # type: ignore[misc]  # unpickling: empty

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used(self) -> int:
        """Bytes of memory the chunks held keep (a chunk in a hugeblock block counts the
        block's capacity)."""
        return self._used

    def get(self, coord: ChunkCoord) -> Cached | None:
        with self._lock:
            entry = self._entries.get(coord)
            if entry is not None:
                self._entries.move_to_end(coord)
            return entry

    def put(self, coord: ChunkCoord, chunk: np.ndarray | None, version: Hashable | None) -> None:
        """Keep ``chunk`` (read-only from now on; None: absent), dropping the least recently
        used chunks to stay within the budget; a chunk larger than the budget is not kept."""
        size = 0 if chunk is None else hugeblock.footprint(chunk)
        if size > self.nbytes:
            return
        if chunk is not None:
            chunk.flags.writeable = False
        with self._lock:
            if coord in self._spoiled:
                return
            old = self._entries.pop(coord, None)
            if old is not None:
                self._used -= _size(old)
            self._entries[coord] = Cached(chunk, version)
            self._used += size
            while self._used > self.nbytes:
                _, dropped = self._entries.popitem(last=False)
                self._used -= _size(dropped)

    def claim(
        self, coords: Iterable[ChunkCoord]
    ) -> tuple[list[ChunkCoord], dict[ChunkCoord, threading.Event]]:
        """Claim the reading of the chunks no other read is fetching: those claimed (to be
        fetched, cached and then :meth:`release`-d by the caller), and for the others, an
        event set when the read fetching them releases them.  Concurrent reads of
        overlapping regions then fetch and decode each chunk once."""
        mine: list[ChunkCoord] = []
        theirs: dict[ChunkCoord, threading.Event] = {}
        with self._lock:
            for c in coords:
                event = self._claims.get(c)
                if event is None:
                    self._claims[c] = threading.Event()
                    mine.append(c)
                else:
                    theirs[c] = event
        return mine, theirs

    def release(self, coords: Iterable[ChunkCoord]) -> None:
        """End the claims on ``coords`` (fetched, or failed: the waiting reads look in the
        cache, then fetch what they do not find); those ended already are skipped."""
        with self._lock:
            events = []
            for c in coords:
                event = self._claims.pop(c, None)  # (released already, chunk by chunk)
                if event is not None:
                    events.append(event)
                    self._spoiled.discard(c)
        for event in events:
            event.set()

    def drop(self, coords: Iterable[ChunkCoord]) -> None:
        """Forget ``coords`` (written or changed), also where a read is fetching them."""
        with self._lock:
            for c in coords:
                if c in self._claims:
                    self._spoiled.add(c)
                old = self._entries.pop(c, None)
                if old is not None:
                    self._used -= _size(old)

    def drop_if(self, predicate: Callable[[ChunkCoord], bool]) -> None:
        with self._lock:
            self._spoiled.update(c for c in self._claims if predicate(c))
            for c in [c for c in self._entries if predicate(c)]:
                self._used -= _size(self._entries.pop(c))

    def clear(self) -> None:
        with self._lock:
            self._spoiled.update(self._claims)
            self._entries.clear()
            self._used = 0

    def resize(self, nbytes: int) -> None:
        """Change the budget, dropping chunks if it shrank."""
        with self._lock:
            self.nbytes = nbytes
            while self._used > self.nbytes and self._entries:
                _, dropped = self._entries.popitem(last=False)
                self._used -= _size(dropped)


def _size(entry: Cached) -> int:
    return 0 if entry.chunk is None else hugeblock.footprint(entry.chunk)


_ALL: weakref.WeakSet[ChunkCache] = weakref.WeakSet()
_shared: weakref.WeakValueDictionary[Hashable, ChunkCache] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_cache(key: Hashable, nbytes: int) -> ChunkCache:
    """The cache of the array ``key`` names (its store's URL and path), shared by the
    handles of this process that use it; its budget is the largest any of them asked."""
    with _shared_lock:
        cache = _shared.get(key)
        if cache is None:
            cache = _shared[key] = ChunkCache(nbytes)
        elif nbytes > cache.nbytes:
            cache.resize(nbytes)
        return cache


def forget_shared(key: Hashable) -> None:
    """Empty the shared cache of ``key``'s array, if any: the array is being replaced."""
    with _shared_lock:
        cache = _shared.get(key)
    if cache is not None:
        cache.clear()


def _reset_in_child() -> None:
    """After fork: a lock held by one of the parent's threads would stay held."""
    global _shared_lock
    _shared_lock = threading.Lock()
    for cache in list(_ALL):
        cache._lock = threading.Lock()
        cache._claims, cache._spoiled = {}, set()  # (the parent's reads are not here)


os.register_at_fork(after_in_child=_reset_in_child)
