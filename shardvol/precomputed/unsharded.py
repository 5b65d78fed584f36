"""Chunk stores of one precomputed scale: one file per chunk, or sharded.

Chunk coordinates are 4-D ``(gx, gy, gz, 0)``: the channel axis is a single
chunk wide, so the generic engine can treat a scale as an (x, y, z, c) array.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from shardvol.array.chunkstore import (
    Blob,
    ChunkCoord,
    ChunkFileContents,
    ChunkRead,
    KVChunkStore,
    UnitContents,
)
from shardvol.array.grid import ChunkGrid
from shardvol.kvstore import KVStore
from shardvol.kvstore.base import io_pool
from shardvol.kvstore.cas import write_if
from shardvol.precomputed import file_copies
from shardvol.precomputed.file_copies import delete_copies, read_copies


def chunk_key(grid: ChunkGrid, coord: ChunkCoord) -> str:
    """Unsharded chunk file name ``x0-x1_y0-y1_z0-z1`` (global voxel coordinates)."""
    start = grid.chunk_start(coord)
    extent = grid.chunk_extent(coord)
    return "_".join(f"{start[d]}-{start[d] + extent[d]}" for d in range(3))


class UnshardedChunkStore(KVChunkStore[ChunkCoord]):
    """One file per chunk, named by its voxel bounds.

    A chunk CloudVolume stored compressed whole (its ``compress=`` option) is read too:
    ``NAME.gz``, ``NAME.br``, ``NAME.zstd``, ``NAME.xz`` or ``NAME.bz2`` when ``NAME`` is
    absent (in object stores it is ``NAME`` with a ``Content-Encoding``, which the store
    decodes).  A chunk is missing only if none of them exists; one that exists but cannot
    be decoded is a ChunkDecodeError, never the fill value.  Writing a chunk stores
    ``NAME``; on local files it removes such compressed copies (deleting a chunk removes
    them on every store).
    """

    def __init__(
        self, store: KVStore, grid: ChunkGrid, max_chunk_bytes: int | None = None,
        chunk_nbytes: int | None = None,
    ) -> None:
        """``max_chunk_bytes``: a compressed chunk file decoding to more is corrupt.
        ``chunk_nbytes``: a decoded chunk's bytes (the expected size of a chunk file, for
        the window of a streamed remote read)."""
        self.kv = store
        self.grid = grid
        self.max_chunk_bytes = max_chunk_bytes
        self.chunk_nbytes = chunk_nbytes

    def describe_unit(self, unit: ChunkCoord) -> str:
        return self.describe(unit)

    def unit_version(self, unit: ChunkCoord) -> Hashable | None:
        return self.kv.version(chunk_key(self.grid, unit)) if self.kv.local else None

    def describe(self, coord: ChunkCoord) -> str:
        return self._name(chunk_key(self.grid, coord))

    def _name(self, key: str) -> str:
        return f"chunk {self.kv.url}/{key}"

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        keys = [chunk_key(self.grid, c) for c in coords]
        blobs = self.kv.get_many(keys)
        found = {c: b for c, b in zip(coords, blobs) if b is not None}
        missing = [i for i, b in enumerate(blobs) if b is None]
        for i, blob in zip(missing, self._compressed([keys[i] for i in missing])):
            if blob is not None:
                found[coords[i]] = blob
        return found

    def iter_chunks(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        """Local stores: one file at a time; remote ones: every chunk requested at once,
        yielded as it arrives (then the compressed copies of those missing)."""
        if not self.kv.local:
            keys = [chunk_key(self.grid, c) for c in coords]
            missing = []
            sizes = [self.chunk_nbytes] * len(keys)
            for i, blob in self.kv.iter_get_many_if(keys, {}, sizes=sizes):
                if blob is None:
                    missing.append(i)
                else:
                    yield coords[i], blob, self._name(keys[i])
            for i, value in zip(missing, self._compressed([keys[i] for i in missing])):
                yield coords[i], value, self._name(keys[i])
            return
        for c in coords:
            key = chunk_key(self.grid, c)
            blob = self.kv.get(key)
            if blob is None:
                blob = self._compressed([key])[0]
            yield c, blob, self._name(key)

    def _compressed(self, keys: Sequence[str]) -> list[bytes | None]:
        """The chunk of each key (absent as stored plain) from its compressed copy."""
        return read_copies(self.kv, keys, self._name, self.max_chunk_bytes)

    def units(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, list[ChunkCoord]]:
        return {c: [c] for c in coords}

    def unit_chunks(self, unit: ChunkCoord) -> list[ChunkCoord]:
        return [unit]

    def all_units(self) -> Iterator[ChunkCoord]:
        gx, gy, gz = self.grid.grid_shape[:3]
        return ((x, y, z, 0) for z, y, x in itertools.product(range(gz), range(gy), range(gx)))

    def read_unit(self, unit: ChunkCoord) -> UnitContents:
        """On conditional stores the chunk file, read now with its version (a compressed
        copy read in its place counts as absent: it is not what is rewritten)."""
        if not self.conditional:
            return super().read_unit(unit)
        key = chunk_key(self.grid, unit)
        blob, version = self.kv.get_versioned(key)
        if blob is None:
            blob = self._compressed([key])[0]
        return ChunkFileContents(self, unit, blob, version)

    def update_unit(
        self,
        unit: ChunkCoord,
        put: Mapping[ChunkCoord, Blob],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
        current: UnitContents | None = None,
    ) -> None:
        """A chunk put or deleted replaces the file whatever it held; with ``current`` read
        with its version (conditional stores), only if the file is still at it.  Compressed
        copies go with a deleted chunk, and with a chunk put in local files (a request each
        would double the cost of a remote write, and ``NAME`` is read before them)."""
        key = chunk_key(self.grid, unit)
        read = current if isinstance(current, ChunkFileContents) and not replace else None
        if unit in put:
            if read is None:
                self.kv.set(key, bytes(put[unit]))  # (bytes already: no copy)
            else:
                write_if(self.kv, key, put[unit], read.version)
            if self.kv.local:
                delete_copies(self.kv, key)
        elif unit in set(delete) or replace:
            if read is None:
                self.kv.delete(key)
            else:
                write_if(self.kv, key, None, read.version)
            delete_copies(self.kv, key)

    def lock(self, unit: ChunkCoord) -> AbstractContextManager[None]:
        return self.kv.write_lock(chunk_key(self.grid, unit))

    def exists(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bool]:
        def one(c: ChunkCoord) -> bool:
            key = chunk_key(self.grid, c)
            return file_copies.exists(self.kv, key)

        return dict(zip(coords, io_pool().map(one, coords)))

