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
from typing import TYPE_CHECKING

import numpy as np

from shardvol._ext import chunkbox
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
        "gzip" or none; at most 4 dimensions); else None."""
        layout = store.layout
        if layout is None or not store.kv.local or len(store.chunk_shape) > 4:
            return None
        codecs = [c.name for c in layout.inner.codecs]
        codec = {("bytes",): "raw", ("bytes", "zstd"): "zstd", ("bytes", "gzip"): "gzip"}.get(
            tuple(codecs))
        if codec is None or not layout.inner.decodes_in_place:
            return None
        if store.kv.file_path(store.unit_of((0,) * len(store.chunk_shape))) is None:
            return None
        return cls(store, codec)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray) -> list[ChunkPart]:
        """Decode the boxes of ``parts`` into ``out``; returns the parts left to the caller."""
        store = self.store
        left = [p for p in parts if not p.is_box]
        direct = {p.coord: p for p in parts if p.is_box}
        if not direct or out.dtype != store.codec.spec.dtype.newbyteorder("="):
            return parts
        spans: list[tuple[int, int, int]] = []
        boxes: list[list[int]] = []
        names: list[str] = []
        placed: list[ChunkPart] = []
        fds: list[int] = []
        try:
            for key, coords in store.units(list(direct)).items():
                opened = store.kv.open_file(key)
                if opened is None:
                    left.extend(direct[c] for c in coords)
                    continue
                fd, version, size = opened
                fds.append(fd)
                index = self._index(key, fd, version, size)
                name = f"{store.kv.url}/{key}"
                for c in coords:
                    p = direct[c]
                    span = None if index is None else index.byte_range(store._linear(c))
                    if span is None or span[1] > size:
                        left.append(p)  # (missing: filled; past the end: an error, there)
                        continue
                    spans.append((fd, span[0], span[1] - span[0]))
                    boxes.append([*store.chunk_shape, *(s.start for s in p.chunk_sel),
                                  *(s.stop - s.start for s in p.chunk_sel),
                                  *(s.start for s in p.out_sel)])
                    names.append(name)
                    placed.append(p)
            if placed:
                status = chunkbox.read_boxes(
                    chunkbox.thread_reader(), self.codec, np.array(spans, np.int64).reshape(-1, 3),
                    np.array(boxes, np.int64).reshape(len(placed), -1), out, names)
                left.extend(p for p, s in zip(placed, status) if s != 0)
        finally:
            for fd in fds:
                os.close(fd)
        return left

    def _index(self, key: str, fd: int, version: object, size: int) -> ShardIndex | None:
        """Shard ``key``'s index as of the open file ``fd`` (at ``version``): the cached one
        if it is of that version, else read from ``fd`` (and cached); None if it cannot
        be read here (a file shorter than its index, a corrupt index: the general path
        reports it)."""
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
        data = os.pread(fd, n, offset)
        try:
            index = layout.decode_index(data, f"{store.kv.url}/{key}", size)
        except (ShardFormatError, ChunkDecodeError):
            return None
        store.shard_index_cache[key] = Versioned(index, version)
        return index

