"""The chunk store of one Zarr v3 array: encoded chunks by grid coordinate.

Unsharded arrays: a chunk is a stored key ("c/0/1/2") and its own unit.
Sharded arrays (codecs exactly ``[sharding_indexed]``): chunks are the *inner*
chunks, addressed by their coordinates in the inner chunk grid of the whole
array; the unit is the shard key.  Reads fetch each shard's index with one
prefix/suffix byte range, then only the needed inner chunks as coalesced byte
ranges (or the whole shard when every one of its chunks is wanted).  Shard
indexes are cached with the version of the shard they were read from (on stores
that report versions): chunk reads that rely on a cached index are checked
against that version and read again when the shard was replaced.  On stores with
conditional writes, read-modify-writes of a unit are compare-and-swaps on its version
(see ChunkStore.conditional).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from shardvol.array.chunkstore import (
    Blob,
    ChunkCoord,
    ChunkFileContents,
    ChunkRead,
    KVChunkStore,
    UnitContents,
)
from shardvol.errors import (
    AlreadyExistsError,
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    ShardFormatError,
    UnitChangedError,
)
from shardvol.kvstore import KVStore, Request, open_store
from shardvol.kvstore.cas import write_if
from shardvol.kvstore.lru import LRU
from shardvol.kvstore.shards import (
    ATTEMPTS,
    DEFAULT_MAX_READ,
    RangeReader,
    Stale,
    Versioned,
    conflict,
    retrying,
)
from shardvol.zarr3.codecs import CodecChain
from shardvol.zarr3.metadata import ZARR_JSON, ArrayMetadata
from shardvol.zarr3.sharding import EMPTY, ShardIndex

#: byte ranges of one shard closer than this are fetched as one request
DEFAULT_COALESCE_GAP = 1 << 16
#: shard indexes kept per array (fewer when they are large: _INDEX_CACHE_BYTES in all)
DEFAULT_INDEX_CACHE_SIZE = 512
_INDEX_CACHE_BYTES = 64 << 20
#: remote reads that want most of a shard whose chunks hold at most this many bytes
#: (decoded) read it whole
WHOLE_SHARD_BYTES = 256 << 20
#: unit keys of this many shards or chunk files are remembered
_UNIT_KEYS_CACHED = 4096


class ZarrChunkStore(KVChunkStore[str]):
    """Encoded (inner) chunks of one Zarr v3 array in ``store`` (the array's directory)."""

    def __init__(
        self,
        store: KVStore,
        metadata: ArrayMetadata,
        coalesce_gap: int = DEFAULT_COALESCE_GAP,
        shard_index_cache_size: int = DEFAULT_INDEX_CACHE_SIZE,
    ) -> None:
        self.kv = store
        self.metadata = metadata
        self.coalesce_gap = coalesce_gap
        self._ranges = RangeReader(store, coalesce_gap, DEFAULT_MAX_READ)
        sharding = metadata.sharding
        self.layout = sharding.layout(metadata.chunk_spec, "codecs[0]") if sharding else None
        #: codec of one stored chunk (an inner chunk when sharded): encode / decode / is_fill
        self.codec: CodecChain = self.layout.inner if self.layout else metadata.codec_chain
        self.chunk_shape = metadata.inner_chunk_shape
        self.grid_shape = tuple(-(-s // c) for s, c in zip(metadata.shape, self.chunk_shape))
        self._per_shard = self.layout.chunks_per_shard if self.layout else (1,) * metadata.ndim
        self._unit_keys: dict[tuple[int, ...], str] = {}  # outer grid coords -> unit key
        self._listeners: list[Callable[[str], None]] = []
        #: shard key -> _CachedIndex; only indexes whose shard's version the store reported
        self.shard_index_cache: LRU[str] = LRU(
            min(shard_index_cache_size, max(1, _INDEX_CACHE_BYTES // self.layout.index_nbytes))
            if self.layout
            else 0
        )

    def describe_unit(self, unit: str) -> str:
        return f"{'shard' if self.layout else 'chunk'} {self.kv.url}/{unit}"

    @classmethod
    def open(cls, url_or_store: str | KVStore, **kwargs) -> ZarrChunkStore:
        """The chunk store of the array whose ``zarr.json`` is at ``url_or_store``."""
        store = open_store(url_or_store)
        doc = store.get(ZARR_JSON)
        if doc is None:
            raise InfoError(f"no {ZARR_JSON} in {store.url}")
        return cls(store, ArrayMetadata.from_json(doc, f"{store.url}/{ZARR_JSON}"), **kwargs)

    @classmethod
    def create(
        cls, url_or_store: str | KVStore, metadata: ArrayMetadata, overwrite: bool = False, **kwargs
    ) -> ZarrChunkStore:
        """Write ``metadata`` as a new array's ``zarr.json`` (existing chunks are not touched)."""
        store = open_store(url_or_store)
        if not overwrite and store.exists(ZARR_JSON):
            raise AlreadyExistsError(f"{store.url} already holds a {ZARR_JSON} (overwrite=False)")
        store.set(ZARR_JSON, metadata.to_bytes())
        return cls(store, metadata, **kwargs)

    # ----------------------------------------------------------------- geometry

    @property
    def shape(self) -> tuple[int, ...]:
        return self.metadata.shape

    @property
    def dtype(self):
        return self.metadata.dtype

    @property
    def fill_value(self):
        return self.metadata.fill_value

    @property
    def sharded(self) -> bool:
        return self.layout is not None

    def _check(self, coord: Sequence[int]) -> ChunkCoord:
        coord = tuple(map(int, coord))
        if len(coord) != len(self.grid_shape) or not (
            min(coord, default=0) >= 0 and all(map(operator.lt, coord, self.grid_shape))
        ):
            raise OutOfBoundsError(
                f"chunk {coord} is outside the chunk grid {list(self.grid_shape)} of the array"
            )
        return coord

    def unit_of(self, coord: Sequence[int]) -> str:
        """Key of the unit (shard or chunk file) that stores chunk ``coord``."""
        return self._unit_key(self._check(coord))

    def _unit_key(self, coord: ChunkCoord) -> str:
        """:meth:`unit_of` a chunk inside the grid."""
        outer = tuple(map(operator.floordiv, coord, self._per_shard))
        key = self._unit_keys.get(outer)
        if key is None:
            if len(self._unit_keys) >= _UNIT_KEYS_CACHED:
                self._unit_keys.clear()
            key = self._unit_keys[outer] = self.metadata.chunk_key(outer)
        return key

    def describe(self, coord: ChunkCoord) -> str:
        """How error messages name a chunk: its key, or its shard key and inner position."""
        coord = tuple(int(c) for c in coord)
        unit = self._unit_key(coord)
        if self.layout is None:
            return f"chunk {unit}"
        inner = tuple(c % p for c, p in zip(coord, self._per_shard))
        return f"shard {unit} inner chunk {inner} (chunk {coord})"

    def linear(self, coord: ChunkCoord) -> int:
        """The number of inner chunk ``coord`` in its shard (C order; the index's entry)."""
        assert self.layout is not None
        return self.layout.linear(coord)

    def units(self, coords: Sequence[ChunkCoord]) -> dict[str, list[ChunkCoord]]:
        groups: dict[str, list[ChunkCoord]] = {}
        for coord in coords:
            coord = self._check(coord)
            groups.setdefault(self._unit_key(coord), []).append(coord)
        return groups

    def all_units(self) -> Iterator[str]:
        outer = [range(-(-g // p)) for g, p in zip(self.grid_shape, self._per_shard)]
        return (self.metadata.chunk_key(c) for c in itertools.product(*outer))

    def unit_chunks(self, unit: str) -> list[ChunkCoord]:
        outer = self.metadata.chunk_key_encoding.coords(unit, self.metadata.ndim)
        ranges = []
        for s, p, g in zip(outer, self._per_shard, self.grid_shape):
            if s * p >= g:
                raise OutOfBoundsError(f"unit {unit!r} is outside the array")
            ranges.append(range(s * p, min((s + 1) * p, g)))
        return list(itertools.product(*ranges))

    # ----------------------------------------------------------------- reads

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        groups = self.units(coords)
        if self.layout is None:
            keys = list(groups)
            values = self.kv.get_many(keys)
            return {groups[k][0]: v for k, v in zip(keys, values) if v is not None}
        return self._read_sharded_stable(groups)  # type: ignore[return-value]  # want_data: no None

    def exists(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bool]:
        """Whether each chunk is stored; sharded arrays read only the shard indexes."""
        groups = self.units(coords)
        if self.layout is None:
            present = {k: self.kv.exists(k) for k in groups}
            return {c: present[k] for k, members in groups.items() for c in members}
        stored = self._read_sharded_stable(groups, want_data=False)
        return {tuple(int(x) for x in c): tuple(int(x) for x in c) in stored for c in coords}

    def _read_sharded_stable(
        self, groups: dict[str, list[ChunkCoord]], want_data: bool = True
    ) -> dict[ChunkCoord, bytes | memoryview | None]:
        """:meth:`_read_sharded`, read again while a shard is replaced between the reads of
        its index and of its chunks (which would pair an index with another file's
        bytes), or after its cached index: the indexes of changed shards are read anew.
        Stores without version tokens are read once."""
        versions: dict[str, Hashable | None] = {}
        cached: set[str] = set()

        def read() -> dict[ChunkCoord, bytes | memoryview | None]:
            versions.clear()
            cached.clear()
            return dict(self._read_sharded(groups, want_data, versions, cached))

        return retrying(read, lambda e: self._recover(e, versions, cached), self._what(groups))

    def iter_chunks(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        """Sharded arrays: the chunks as their bytes arrive (remote stores send all the
        requests at once), read again for those left when a shard is replaced meanwhile."""
        if self.layout is None:
            yield from super().iter_chunks(coords)
            return
        pending = self.units(coords)
        done: set[ChunkCoord] = set()
        for _ in range(ATTEMPTS):
            versions: dict[str, Hashable | None] = {}
            cached: set[str] = set()
            try:
                for coord, data in self._read_sharded(pending, True, versions, cached):
                    done.add(coord)
                    yield coord, data, self.describe(coord)
                break
            except (Stale, ShardFormatError) as e:
                if not self._recover(e, versions, cached) and not isinstance(e, Stale):
                    raise
                pending = {k: rest for k, members in pending.items()
                           if (rest := [c for c in members if c not in done])}
        else:
            raise conflict(self._what(pending))
        for members in pending.values():
            for c in members:
                if c not in done:
                    yield c, None, self.describe(c)

    def _recover(self, error: Exception, versions: Mapping[str, Hashable | None],
                 cached: set[str]) -> bool:
        """After a failed read: drop the indexes of the shards that changed (or came from
        the cache: e.g. an offset past the end of a shorter new file); whether any did."""
        if isinstance(error, Stale):
            stale = [error.key]
        else:
            stale = [k for k, v in versions.items() if k in cached or not self.kv.still_at(k, v)]
        for key in stale:
            self.shard_replaced(key)
        return bool(stale)

    def shard_replaced(self, key: str) -> None:
        """A read found shard ``key`` replaced by another writer."""
        self.shard_index_cache.discard(key)
        for listener in self._listeners:
            listener(key)

    def watch(self, changed: Callable[[str], None]) -> None:
        self._listeners.append(changed)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_listeners"] = []  # (the handles that listen live in this process)
        return state

    def unit_version(self, unit: str) -> Hashable | None:
        return self.kv.version(unit) if self.kv.local else None

    def _what(self, groups: Mapping[str, object]) -> str:
        return f"{self.kv.url}: shards {', '.join(sorted(groups)[:4])}"

    def _read_sharded(
        self,
        groups: dict[str, list[ChunkCoord]],
        want_data: bool,
        versions: dict[str, Hashable | None],
        cached: set[str],
    ) -> Iterator[tuple[ChunkCoord, Blob | None]]:
        """(coord, bytes, or None when only presence is wanted) of the stored chunks.
        ``versions``: filled with each shard's version as its index is read (or taken
        from the cache: those keys go in ``cached``); the chunks are then read only from
        that version (else VersionChangedError)."""
        layout = self.layout
        assert layout is not None
        keys = list(groups)
        wanted = {k: {c: self.linear(c) for c in groups[k]} for k in keys}
        whole = {k for k in keys if want_data and self._read_whole(k, len(set(wanted[k].values())))}
        indexes: dict[str, ShardIndex] = {}
        for key in keys:
            entry = None if key in whole else self._cached_index(key, wanted[key], want_data)
            if entry is not None:
                indexes[key], versions[key] = entry
                cached.add(key)
        # whole shards and the indexes of the others in one round of requests, the whole
        # shards' chunks yielded as each arrives (remote stores stream them)
        fetch = [k for k in keys if k not in indexes]
        requests: list[Request] = [k if k in whole else (k, layout.index_byte_range())
                                   for k in fetch]
        sizes = [self._chunks_in_unit(k) * self.codec.spec.nbytes if k in whole else None
                 for k in fetch]
        for n, data, version in self._ranges.iter_versioned(requests, sizes, self._too_short):
            key = fetch[n]
            if data is None:
                continue
            if key in whole:
                parts = layout.split_shard(data, key)
                for coord, i in wanted[key].items():
                    if i in parts:
                        yield coord, parts[i]
                continue
            versions[key] = version
            indexes[key] = layout.decode_index(data, key)
            if version is not None:
                self.shard_index_cache[key] = Versioned(indexes[key], version)
        spans: list[tuple[str, int, int]] = []
        span_coords: list[ChunkCoord] = []
        for key, index in indexes.items():
            if not want_data:
                for coord, i in wanted[key].items():
                    if index.byte_range(i) is not None:
                        yield coord, None
                continue
            for coord, i in wanted[key].items():
                r = index.byte_range(i)
                if r is not None:
                    spans.append((key, *r))
                    span_coords.append(coord)
        for n, view in self._ranges.read(spans, versions, self._too_short):
            yield span_coords[n], view

    def _cached_index(
        self, key: str, wanted: dict[ChunkCoord, int], will_read: bool
    ) -> Versioned | None:
        """The cached index of shard ``key``, if it may serve: when some ``wanted`` chunk
        is present in it and will be read (that read checks the shard's version), or else
        when the store reports the shard unchanged (a store that cannot tell, such as S3,
        whose versions come with each read, has the index read again)."""
        entry = self.shard_index_cache.get(key)
        if entry is None:
            return None
        if will_read and (entry.index.offsets[list(wanted.values())] != EMPTY).any():
            return entry
        now = self.kv.version(key)
        if now == entry.version:  # (never None: such indexes are not cached)
            return entry
        if now is not None:
            self.shard_replaced(key)
        return None

    def _read_whole(self, key: str, n_wanted: int) -> bool:
        """Whether to read shard ``key`` whole for ``n_wanted`` of its chunks: when all are
        wanted; from a remote store, also when at least half are and its index is not
        cached (one request instead of the index's and the chunks' round trips), if the
        shard's chunks hold at most WHOLE_SHARD_BYTES decoded."""
        n = self._chunks_in_unit(key)
        if n_wanted == n:
            return True
        return (self.remote and 2 * n_wanted >= n and key not in self.shard_index_cache
                and n * self.codec.spec.nbytes <= WHOLE_SHARD_BYTES)

    def _chunks_in_unit(self, key: str) -> int:
        outer = self.metadata.chunk_key_encoding.coords(key, self.metadata.ndim)
        return math.prod(
            min(p, g - s * p) for s, p, g in zip(outer, self._per_shard, self.grid_shape)
        )

    @staticmethod
    def _too_short(key: str, size: int) -> str:
        return f"shard {key!r} has only {size} bytes: too short for its index or an index entry"

    # ----------------------------------------------------------------- writes

    def read_unit(self, unit: str) -> UnitContents:
        """A shard, read whole once (its inner chunks as stored); a chunk file as asked, or
        at once with its version on conditional stores (as a shard is there)."""
        if self.layout is not None:
            return self._read_shard(unit)
        if not self.conditional:
            return super().read_unit(unit)
        blob, version = self.kv.get_versioned(unit)
        return ChunkFileContents(self, self.unit_chunks(unit)[0], blob, version)

    def _read_shard(self, unit: str) -> _ShardContents:
        assert self.layout is not None
        if self.conditional:
            data, version = self.kv.get_versioned(unit)
        else:
            data, version = self.kv.get(unit), None
        parts = {} if data is None else self.layout.split_shard(data, unit)
        return _ShardContents(self, parts, version, self.conditional)

    def update_unit(
        self,
        unit: str,
        put: Mapping[ChunkCoord, Blob],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
        current: UnitContents | None = None,
    ) -> None:
        delete = list(delete)
        members = {tuple(int(c) for c in coord) for coord in itertools.chain(put, delete)}
        strays = [c for c in members if self.unit_of(c) != unit]
        if strays:
            raise InvalidArgumentError(f"chunks {strays[:3]} are not stored in unit {unit!r}")
        if self.layout is None:
            read = current if isinstance(current, ChunkFileContents) and not replace else None
            value = next(iter(put.values())) if put else None
            if value is None and not (replace or members):
                return
            if read is not None:
                write_if(self.kv, unit, value, read.version)
            elif value is not None:
                self.kv.set_parts(unit, [value])  # (a view of the engine's encoding block)
            else:
                self.kv.delete(unit)
            return
        if current is None and not replace and self.conditional:
            self.redo_on_conflict(unit, lambda: self.update_unit(
                unit, put, delete, current=self._read_shard(unit)))
            return
        chunks: dict[int, bytes | memoryview] = {}
        shard = None
        if not replace:
            shard = current if isinstance(current, _ShardContents) else self._read_shard(unit)
            chunks.update(shard.parts)
        for coord in delete:
            chunks.pop(self.linear(tuple(coord)), None)
        for coord, value in put.items():
            chunks[self.linear(tuple(coord))] = value
        try:
            self._store_shard(unit, chunks, shard if shard is not None and shard.checked
                              else None)
        finally:
            self.shard_index_cache.discard(unit)  # (a stale entry would only cost a retry)

    def _store_shard(self, unit: str, chunks: dict[int, bytes | memoryview],
                     read: _ShardContents | None) -> None:
        """Write the shard of ``chunks`` (delete it if none); if ``read``, only if the shard
        is still at the version read, else UnitChangedError."""
        assert self.layout is not None
        if read is None:
            if chunks:
                self.kv.set_parts(unit, self.layout.shard_parts(chunks))
            else:
                self.kv.delete(unit)
            return
        value = b"".join(self.layout.shard_parts(chunks)) if chunks else None
        try:
            write_if(self.kv, unit, value, read.version)
        except UnitChangedError:
            self.shard_replaced(unit)  # (another writer's shard: its cached chunks go)
            raise

    def lock(self, unit: str) -> AbstractContextManager[None]:
        return self.kv.write_lock(unit)


class _ShardContents(UnitContents):
    """A shard as read under its lock: its inner chunks as stored, by linear number; if
    ``checked`` (a conditional store), the shard's ``version`` (None: absent), which its
    rewrite must still find."""

    def __init__(self, store: ZarrChunkStore, parts: dict[int, memoryview],
                 version: Hashable | None = None, checked: bool = False) -> None:
        super().__init__(store)
        self.store = store
        self.parts = parts
        self.version, self.checked = version, checked

    def chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bytes | memoryview]:
        found = ((c, self.parts.get(self.store.linear(c))) for c in coords)
        return {c: part for c, part in found if part is not None}
