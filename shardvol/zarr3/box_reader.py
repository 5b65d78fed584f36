"""Boxes of the inner chunks of local shards (zstd, gzip or uncompressed) decoded straight
into a read's output.

A cutout of a few dozen chunks spends as much time in Python per chunk (fetching its
bytes, handing them to a decoder, placing the box) as zstd takes to decode it, and that
Python work holds the GIL the other decoding threads need.  Here each shard file of a
batch is opened once, each chunk's span is taken from the shard's index (cached, and
used only at the version of the open file), and the C kernel (csrc/chunkbox.h) reads,
decodes and copies each box with the GIL released (a zstd chunk only up to the last item
its box needs).  Whatever it does not decode (a missing chunk or shard, corrupt data or
a corrupt index) is left to the engine's general path, which fills or reports it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from shardvol.array.box_batch import BoxBatch
from shardvol.array.indexing import ChunkPart
from shardvol.errors import ChunkDecodeError, ShardFormatError
from shardvol.kvstore.shards import Versioned
from shardvol.zarr3.sharding import ShardIndex

if TYPE_CHECKING:
    from shardvol.zarr3.chunkstore import ZarrChunkStore


class ShardBoxReader:
    """Reads boxes of the inner chunks of one sharded Zarr array stored as local files."""

    def __init__(self, store: ZarrChunkStore, codec: str) -> None:
        self.store = store
        self.codec = codec

    @classmethod
    def for_store(cls, store: ZarrChunkStore) -> ShardBoxReader | None:
        """A reader if ``store``'s shards are local files and its inner chunks are items in
        this host's byte order, compressed whole or not (codecs "bytes", then "zstd",
        "gzip" or none; 1 to 4 dimensions); else None."""
        layout = store.layout
        if layout is None or not store.kv.local or not 1 <= len(store.chunk_shape) <= 4:
            return None
        codecs = [c.name for c in layout.inner.codecs]
        codec = {("bytes",): "raw", ("bytes", "zstd"): "zstd", ("bytes", "gzip"): "gzip"}.get(
            tuple(codecs))
        if codec is None or not layout.inner.decodes_in_place:
            return None
        if store.kv.file_path(store.unit_of((0,) * len(store.chunk_shape))) is None:
            return None
        return cls(store, codec)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray,
                  parallel: int = 1) -> list[ChunkPart]:
        """Decode the boxes of ``parts`` into ``out`` on up to ``parallel`` threads; returns
        the parts left to the caller."""
        store = self.store
        left = [p for p in parts if not p.is_box]
        direct = {p.coord: p for p in parts if p.is_box}
        if not direct or out.dtype != store.codec.spec.dtype.newbyteorder("="):
            return parts
        with BoxBatch(store.kv, self.codec) as batch:
            for key, coords in store.units(list(direct)).items():
                opened = batch.open(key)
                index = None if opened is None else self._index(key, *opened)
                for c in coords:
                    span = None if index is None else index.byte_range(store.linear(c))
                    if span is None or opened is None or span[1] > opened[2]:
                        left.append(direct[c])  # (missing: filled; past the end: an error)
                    else:
                        batch.add(direct[c], key, span[0], span[1] - span[0], store.chunk_shape)
            return left + batch.read(out, parallel)

    def _index(self, key: str, fd: int, version: Hashable, size: int) -> ShardIndex | None:
        """Shard ``key``'s index as of the open file ``fd`` (at ``version``): the cached one
        if it is of that version, else read from ``fd`` (and cached); None if it cannot
        be read here (a file shorter than its index, a corrupt index, an I/O error: the
        general path reports it)."""
        store = self.store
        layout = store.layout
        assert layout is not None
        entry = store.shard_index_cache.get(key)
        if entry is not None:
            if entry.version == version:
                return entry.index
            store.shard_replaced(key)
        n = layout.index_nbytes
        start, _ = layout.index_byte_range()
        offset = start if start >= 0 else size + start
        if offset < 0:
            return None
        try:
            data = os.pread(fd, n, offset)
            index = layout.decode_index(data, f"{store.kv.url}/{key}", size)
        except (OSError, ShardFormatError, ChunkDecodeError):
            return None
        store.shard_index_cache[key] = Versioned(index, version)
        return index
