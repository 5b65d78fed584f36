"""Chunk store of a sharded precomputed scale: chunk ids are compressed Morton codes.

A unit is a shard (by number); updating it rewrites the whole shard file
atomically, keeping the chunks that are neither put nor deleted (as stored: only the
chunks put are gzipped, at ``level``, with gzip data encoding).  On stores with
conditional writes the rewrite is a compare-and-swap on the shard file's version (see
ChunkStore.conditional).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property

import numpy as np

from shardvol._ext.morton import compressed_morton_code, decode_morton_code
from shardvol.array.chunkstore import Blob, ChunkCoord, ChunkRead, KVChunkStore, UnitContents
from shardvol.array.grid import ChunkGrid
from shardvol.compression import DEFAULT_LEVEL
from shardvol.errors import InvalidArgumentError, UnitChangedError
from shardvol.kvstore import KVStore
from shardvol.sharding import ShardingSpec, ShardReader, encode_shard, rewrite_shard
from shardvol.sharding.auto import shard_shape_in_chunks
from shardvol.sharding.reader import delete_shards
from shardvol.sharding.writer import ShardEntries, read_entries

#: Remote reads that want most of a shard whose chunks hold at most this many bytes
#: (decoded) read the shard file whole, as do reads that want all of any shard.
WHOLE_SHARD_BYTES = 256 << 20
_ENUMERATE_LIMIT = 1 << 22  # grids up to this many chunks are enumerated to map shard -> chunks
_ENUMERATE_BLOCK = 1 << 18


class ShardedChunkStore(KVChunkStore[int]):
    """Chunks of one scale in ``neuroglancer_uint64_sharded_v1`` shard files."""

    def __init__(
        self,
        store: KVStore,
        grid: ChunkGrid,
        spec: ShardingSpec,
        level: int = DEFAULT_LEVEL,
        max_chunk_bytes: int | None = None,
        chunk_nbytes: int | None = None,
    ) -> None:
        """``max_chunk_bytes``: gzip-encoded chunk data inflating to more is corrupt.
        ``chunk_nbytes``: a decoded chunk's bytes (to size whole-shard reads)."""
        self.kv = store
        self.chunk_nbytes = chunk_nbytes
        self.grid = grid
        self.spec = spec
        self.level = level
        self.grid_size = grid.grid_shape[:3]
        self.reader = ShardReader(store, spec, max_value_size=max_chunk_bytes)

    def describe_unit(self, unit: int) -> str:
        return f"shard {self.kv.url}/{self.spec.shard_filename(unit)}"

    def codes(self, coords: Sequence[ChunkCoord]) -> np.ndarray:
        xyz = np.array([c[:3] for c in coords], dtype=np.uint64).reshape(-1, 3)
        return compressed_morton_code(xyz, self.grid_size)

    def unit_version(self, unit: int) -> Hashable | None:
        return self.kv.version(self.spec.shard_filename(unit)) if self.kv.local else None

    def watch(self, changed: Callable[[int], None]) -> None:
        self.reader.on_replaced(lambda filename: changed(int(filename[: -len(".shard")], 16)))

    def describe(self, coord: ChunkCoord) -> str:
        return self._names([coord])[0]

    def _names(self, coords: Sequence[ChunkCoord], codes: np.ndarray | None = None) -> list[str]:
        """How error messages name chunks (by coordinate, id and shard file)."""
        codes = self.codes(coords) if codes is None else codes
        shards, _ = self.spec.shard_and_minishard(codes)
        return [
            f"chunk {tuple(c[:3])} (id {k}) in {self.kv.url}/{self.spec.shard_filename(s)}"
            for c, k, s in zip(coords, codes.tolist(), shards.tolist())
        ]

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        codes = [int(k) for k in self.codes(coords)]
        data = self.reader.get_data_many(codes)
        return {c: data[k] for c, k in zip(coords, codes) if k in data}

    def iter_chunks(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        """Values are decoded (gunzipped) one at a time, as the caller takes them."""
        return self._iter(coords, decode=True)

    def iter_stored(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        return self._iter(coords, decode=False)

    def decode_stored(self, stored: bytes | memoryview, name: str) -> bytes | memoryview:
        return self.reader.decode_value(stored, name)

    def _iter(self, coords: Sequence[ChunkCoord], decode: bool) -> Iterator[ChunkRead]:
        codes = self.codes(coords)
        index = {k: i for i, k in enumerate(codes.tolist())}
        names = self._names(coords, codes)
        whole = self._whole_shards(codes) if self.remote else None
        for key, blob in self.reader.iter_data_many(codes, decode=decode, whole=whole):
            i = index.pop(key)
            yield coords[i], blob, names[i]
        for i in index.values():
            yield coords[i], None, names[i]

    def _whole_shards(self, codes: np.ndarray) -> dict[int, int]:
        """Shards whose index is not cached and of which a read wants every chunk, or at
        least half of them when they hold at most WHOLE_SHARD_BYTES decoded: read whole
        (one request instead of the index, minishard index and data round trips; its
        chunks decoded as their bytes arrive), with the bytes their chunks hold decoded.
        (With its index cached, a shard's data is one request anyway.)"""
        if self.chunk_nbytes is None:
            return {}
        shards, counts = np.unique(self.spec.shard_and_minishard(codes)[0], return_counts=True)
        whole = {}
        for s, n in zip(shards.tolist(), counts.tolist()):
            if self.spec.shard_filename(s) in self.reader.shard_index_cache:
                continue
            members = self.unit_chunks(s)
            if members is None:
                continue
            nbytes = len(members) * self.chunk_nbytes
            if n == len(members) or (nbytes <= WHOLE_SHARD_BYTES and 2 * n >= len(members)):
                whole[s] = nbytes
        return whole

    def units(self, coords: Sequence[ChunkCoord]) -> dict[int, list[ChunkCoord]]:
        shards, _ = self.spec.shard_and_minishard(self.codes(coords))
        out: dict[int, list[ChunkCoord]] = {}
        for c, s in zip(coords, shards.tolist()):
            out.setdefault(s, []).append(c)
        return out

    def _grid_shards(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(linear indices (x fastest), shard numbers) of every chunk of the grid, in
        blocks of _ENUMERATE_BLOCK chunks (which bound the temporaries)."""
        n = int(np.prod(self.grid_size))
        for a in range(0, n, _ENUMERATE_BLOCK):
            linear = np.arange(a, min(n, a + _ENUMERATE_BLOCK))
            xyz = np.stack(np.unravel_index(linear, self.grid_size, order="F"), axis=1)
            codes = compressed_morton_code(xyz, self.grid_size)
            yield linear, self.spec.shard_and_minishard(codes)[0]

    @cached_property
    def _shard_members(self) -> tuple[np.ndarray, np.ndarray] | None:
        """For grids small enough to enumerate: the shard number of every chunk, sorted,
        and the chunks' linear indices (x fastest) in that order (16 bytes per chunk)."""
        if int(np.prod(self.grid_size)) > _ENUMERATE_LIMIT:
            return None
        shards = np.concatenate([s for _, s in self._grid_shards()])
        order = np.argsort(shards, kind="stable")
        return shards[order], order

    def unit_chunks(self, unit: int) -> list[ChunkCoord] | None:
        block = shard_shape_in_chunks(self.spec, self.grid_size)
        if block is not None:
            # Aligned blocks: shard s is block number s in Morton order of blocks.
            p = self.spec.preshift_bits + self.spec.minishard_bits
            first = self._decode_block_origin(unit << p)
            if first is None:
                return []
            ranges = [range(f, min(f + b, g)) for f, b, g in zip(first, block, self.grid_size)]
            return [(x, y, z, 0) for z in ranges[2] for y in ranges[1] for x in ranges[0]]
        members = self._shard_members
        if members is None:
            return None
        shards, order = members
        key = np.uint64(unit)
        a, b = np.searchsorted(shards, key, "left"), np.searchsorted(shards, key, "right")
        return self._coords(order[a:b])

    def scan_unit_chunks(self, unit: int) -> list[ChunkCoord]:
        """:meth:`unit_chunks`, on grids of any size: those too large to enumerate once
        are scanned in blocks (a pass over the grid's chunk ids, in C, per call)."""
        members = self.unit_chunks(unit)
        if members is not None:
            return members
        key = np.uint64(unit)
        return self._coords(np.concatenate([lin[s == key] for lin, s in self._grid_shards()]))

    def all_units(self) -> Iterator[int]:
        """Every shard number that holds some chunk of the grid, ascending (a scan in
        blocks)."""
        found = [np.unique(s) for _, s in self._grid_shards()]
        return iter(np.unique(np.concatenate(found)).tolist() if found else [])

    def _coords(self, linear: np.ndarray) -> list[ChunkCoord]:
        xyz = np.unravel_index(linear, self.grid_size, order="F")
        return [(x, y, z, 0) for x, y, z in zip(*(v.tolist() for v in xyz))]

    def _decode_block_origin(self, code: int) -> tuple[int, int, int] | None:
        try:
            xyz = tuple(int(v) for v in decode_morton_code([code], self.grid_size)[0])
            return xyz  # type: ignore[return-value]  # 3 axes
        except InvalidArgumentError:
            return None

    def read_unit(self, unit: int) -> _ShardContents:
        """The shard file, read whole once (its entries as stored; with its version on
        conditional stores)."""
        return _ShardContents(self, read_entries(self.kv, self.spec, unit, self.conditional))

    def update_unit(
        self,
        unit: int,
        put: Mapping[ChunkCoord, Blob],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
        current: UnitContents | None = None,
    ) -> None:
        filename = self.spec.shard_filename(unit)
        if current is None and not replace and self.conditional:
            delete = list(delete)
            self.redo_on_conflict(unit, lambda: self.update_unit(
                unit, put, delete, current=self.read_unit(unit)))
            return
        entries = dict(zip(self.codes(list(put)).tolist(), put.values())) if put else {}
        if replace:
            if entries:
                self.kv.set(filename, encode_shard(self.spec, entries, self.level))
            else:  # with any obsolete pair, which would be read again
                delete_shards(self.kv, [filename])
        else:
            delete = list(delete)
            gone = self.codes(delete).tolist() if delete else []
            read = current.shard if isinstance(current, _ShardContents) else None
            try:
                rewrite_shard(self.kv, self.spec, unit, entries, gone, self.level, read)
            except UnitChangedError:  # another writer's shard: not our cached indexes
                self.reader.replaced(filename)
                raise
        self.reader.invalidate(filename)

    @contextmanager
    def lock(self, unit: int) -> Iterator[None]:
        """The shard file's lock (on conditional stores, of this process's threads); cached
        indexes of it are dropped once it is held."""
        filename = self.spec.shard_filename(unit)
        with self.kv.write_lock(filename):
            self.reader.invalidate(filename)
            yield

    def exists(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bool]:
        codes = [int(k) for k in self.codes(coords)]
        found = self.reader.exists(codes)
        return {c: found[k] is not None for c, k in zip(coords, codes)}


class _ShardContents(UnitContents):
    """A shard file as read under its lock: the chunks merged from it are decoded from its
    entries, and the rewrite keeps the other entries as stored."""

    def __init__(self, store: ShardedChunkStore, shard: ShardEntries) -> None:
        super().__init__(store)
        self.store = store
        self.shard = shard

    def chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bytes | memoryview]:
        if not coords:
            return {}
        names = self.store._names(coords)
        out: dict[ChunkCoord, bytes | memoryview] = {}
        for c, k, name in zip(coords, self.store.codes(coords).tolist(), names):
            stored = self.shard.entries.get(k)
            if stored is not None:
                out[c] = self.store.reader.decode_value(stored, name)
        return out
