"""The chunk store of one Zarr v3 array: encoded chunks by grid coordinate.

Unsharded arrays: a chunk is a stored key ("c/0/1/2") and its own unit.
Sharded arrays (codecs exactly ``[sharding_indexed]``): chunks are the *inner*
chunks, addressed by their coordinates in the inner chunk grid of the whole
array; the unit is the shard key.  Reads fetch each shard's index with one
prefix/suffix byte range, then only the needed inner chunks as coalesced byte
ranges (or the whole shard when every one of its chunks is wanted).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from math import prod
from typing import Any

from shardvol.chunkstore import ChunkCoord, ChunkStore
from shardvol.errors import (
    AlreadyExistsError,
    ByteRangeError,
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    ShardFormatError,
    VersionChangedError,
    WriteConflictError,
)
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.base import Request
from shardvol.zarr3.codecs import CodecChain
from shardvol.zarr3.metadata import ZARR_JSON, ArrayMetadata
from shardvol.zarr3.sharding import ShardIndex

#: byte ranges of one shard closer than this are fetched as one request
DEFAULT_COALESCE_GAP = 1 << 16
#: reads restart when a shard is replaced between its index and chunk reads; this many times
_ATTEMPTS = 8


class ZarrChunkStore(ChunkStore):
    """Encoded (inner) chunks of one Zarr v3 array in ``store`` (the array's directory)."""

    def __init__(
        self, store: KVStore, metadata: ArrayMetadata, coalesce_gap: int = DEFAULT_COALESCE_GAP
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.coalesce_gap = coalesce_gap
        sharding = metadata.sharding
        self.layout = sharding.layout(metadata.chunk_spec, "codecs[0]") if sharding else None
        #: codec of one stored chunk (an inner chunk when sharded): encode / decode / is_fill
        self.codec: CodecChain = self.layout.inner if self.layout else metadata.codec_chain
        self.chunk_shape = metadata.inner_chunk_shape
        self.grid_shape = tuple(-(-s // c) for s, c in zip(metadata.shape, self.chunk_shape))
        self._per_shard = self.layout.chunks_per_shard if self.layout else (1,) * metadata.ndim

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
        coord = tuple(int(c) for c in coord)
        if len(coord) != len(self.grid_shape) or not all(
            0 <= c < g for c, g in zip(coord, self.grid_shape)
        ):
            raise OutOfBoundsError(
                f"chunk {coord} is outside the chunk grid {list(self.grid_shape)} of the array"
            )
        return coord

    def unit_of(self, coord: Sequence[int]) -> str:
        """Key of the unit (shard or chunk file) that stores chunk ``coord``."""
        coord = self._check(coord)
        return self.metadata.chunk_key(tuple(c // p for c, p in zip(coord, self._per_shard)))

    def describe(self, coord: ChunkCoord) -> str:
        """How error messages name a chunk: its key, or its shard key and inner position."""
        unit = self.unit_of(coord)
        if self.layout is None:
            return f"chunk {unit}"
        inner = tuple(int(c) % p for c, p in zip(coord, self._per_shard))
        return f"shard {unit} inner chunk {inner} (chunk {tuple(int(c) for c in coord)})"

    def _linear(self, coord: ChunkCoord) -> int:
        assert self.layout is not None
        return self.layout.linear(tuple(c % p for c, p in zip(coord, self._per_shard)))

    def units(self, coords: Sequence[ChunkCoord]) -> dict[str, list[ChunkCoord]]:
        groups: dict[str, list[ChunkCoord]] = {}
        for coord in coords:
            groups.setdefault(self.unit_of(coord), []).append(tuple(int(c) for c in coord))
        return groups

    def unit_chunks(self, unit: str) -> list[ChunkCoord]:
        outer = self.metadata.chunk_key_encoding.coords(unit, self.metadata.ndim)
        ranges = []
        for s, p, g in zip(outer, self._per_shard, self.grid_shape):
            if s * p >= g:
                raise OutOfBoundsError(f"unit {unit!r} is outside the array")
            ranges.append(range(s * p, min((s + 1) * p, g)))
        return list(itertools.product(*ranges))

    # ----------------------------------------------------------------- reads

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bytes]:
        groups = self.units(coords)
        if self.layout is None:
            keys = list(groups)
            values = self._get_many(self.store.get_many, keys)
            return {groups[k][0]: v for k, v in zip(keys, values) if v is not None}
        return self._read_sharded_stable(groups)

    def exists(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bool]:
        """Whether each chunk is stored; sharded arrays read only the shard indexes."""
        groups = self.units(coords)
        if self.layout is None:
            present = {k: self.store.exists(k) for k in groups}
            return {c: present[k] for k, members in groups.items() for c in members}
        stored = {c for c, _ in self._read_sharded(groups, want_data=False)}
        return {tuple(int(x) for x in c): tuple(int(x) for x in c) in stored for c in coords}

    def _read_sharded_stable(self, groups: dict[str, list[ChunkCoord]]) -> dict[ChunkCoord, bytes]:
        """:meth:`_read_sharded` of the data, read again while a shard is replaced between
        the reads of its index and of its chunks (which would pair an index with another
        file's bytes).  Stores without version tokens are read once."""
        for _ in range(_ATTEMPTS):
            versions: dict[str, Hashable | None] = {}
            try:
                return dict(self._read_sharded(groups, want_data=True, versions=versions))
            except VersionChangedError:
                continue
            except ShardFormatError:  # e.g. an offset past the end of a shorter new file
                if self._unchanged(versions):
                    raise
        raise WriteConflictError(
            f"{self.store.url}: shards {', '.join(sorted(groups)[:4])} kept changing while "
            f"being read ({_ATTEMPTS} attempts)"
        )

    def _unchanged(self, versions: dict[str, Hashable | None]) -> bool:
        return all(self.store.still_at(key, v) for key, v in versions.items())

    def _read_sharded(
        self,
        groups: dict[str, list[ChunkCoord]],
        want_data: bool,
        versions: dict[str, Hashable | None] | None = None,
    ) -> Iterator[tuple[ChunkCoord, bytes | None]]:
        """(coord, bytes, or None when only presence is wanted) of the stored chunks.
        ``versions``: filled with each shard's version as its index is read; the chunks
        are then read only from that version (else VersionChangedError)."""
        layout = self.layout
        assert layout is not None
        keys = list(groups)
        wanted = {k: {c: self._linear(c) for c in groups[k]} for k in keys}
        whole = {
            k for k in keys if want_data and len(set(wanted[k].values())) == self._chunks_in_unit(k)
        }
        requests = [k if k in whole else (k, layout.index_byte_range()) for k in keys]
        if versions is None:
            first = self._get_many(self.store.get_many, requests)
        else:
            first = []
            for key, (data, version) in zip(
                keys, self._get_many(self.store.get_many_versioned, requests)
            ):
                first.append(data)
                if key not in whole:
                    versions[key] = version
        second: list[tuple[str, tuple[int, int], list[tuple[ChunkCoord, int, int]]]] = []
        for key, data in zip(keys, first):
            if data is None:
                continue
            if key in whole:
                parts = layout.split_shard(data, key)
                for coord, i in wanted[key].items():
                    if i in parts:
                        yield coord, parts[i]
                continue
            index = layout.decode_index(data, key)
            if not want_data:
                for coord, i in wanted[key].items():
                    if index.byte_range(i) is not None:
                        yield coord, None
                continue
            for span, members in self._coalesce(index, wanted[key]):
                second.append((key, span, members))
        values = self._get_many(
            self.store.get_many_if, [(key, span) for key, span, _ in second], versions or {}
        )
        for (key, (start, stop), members), data in zip(second, values):
            if data is None:
                continue  # the shard was deleted since its index was read
            if len(data) != stop - start:
                raise ShardFormatError(
                    f"{key}: inner chunk bytes [{start}, {stop}) point past the end of the shard"
                )
            view = memoryview(data)
            for coord, a, b in members:
                yield coord, data if (a, b) == (start, stop) else view[a - start : b - start]

    def _coalesce(
        self, index: ShardIndex, wanted: dict[ChunkCoord, int]
    ) -> list[tuple[tuple[int, int], list[tuple[ChunkCoord, int, int]]]]:
        """Byte ranges to fetch for the present ``wanted`` chunks, merging near neighbours."""
        spans = sorted(
            (r[0], r[1], coord)
            for coord, i in wanted.items()
            if (r := index.byte_range(i)) is not None
        )
        out: list[tuple[tuple[int, int], list[tuple[ChunkCoord, int, int]]]] = []
        for start, stop, coord in spans:
            if out and start - out[-1][0][1] <= self.coalesce_gap:
                (lo, hi), members = out[-1]
                out[-1] = ((lo, max(hi, stop)), members)
            else:
                out.append(((start, stop), []))
            out[-1][1].append((coord, start, stop))
        return out

    def _chunks_in_unit(self, key: str) -> int:
        outer = self.metadata.chunk_key_encoding.coords(key, self.metadata.ndim)
        return prod(min(p, g - s * p) for s, p, g in zip(outer, self._per_shard, self.grid_shape))

    @staticmethod
    def _get_many(read: Callable[..., list], requests: list[Request], *args: Any) -> list:
        """``read(requests, *args)`` (one of the store's get_many methods), with a range
        past a shard's end reported as ShardFormatError."""
        if not requests:
            return []
        try:
            return read(requests, *args)
        except ByteRangeError as e:
            raise ShardFormatError(
                f"shard too short for its index or an index entry ({e})"
            ) from e

    # ----------------------------------------------------------------- writes

    def update_unit(
        self,
        unit: str,
        put: dict[ChunkCoord, bytes],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
    ) -> None:
        members = {tuple(int(c) for c in coord) for coord in itertools.chain(put, delete)}
        strays = [c for c in members if self.unit_of(c) != unit]
        if strays:
            raise InvalidArgumentError(f"chunks {strays[:3]} are not stored in unit {unit!r}")
        if self.layout is None:
            if put:
                self.store.set(unit, next(iter(put.values())))
            elif replace or members:
                self.store.delete(unit)
            return
        chunks: dict[int, bytes | memoryview] = {}
        if not replace:
            data = self.store.get(unit)
            if data is not None:
                chunks.update(self.layout.split_shard(data, unit))
        for coord in delete:
            chunks.pop(self._linear(tuple(coord)), None)
        for coord, value in put.items():
            chunks[self._linear(tuple(coord))] = value
        if chunks:
            self.store.set(unit, self.layout.join_shard(chunks))
        else:
            self.store.delete(unit)

    def lock(self, unit: str) -> AbstractContextManager[None]:
        return self.store.lock(unit)
