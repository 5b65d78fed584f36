"""Raw chunks of a local sharded scale, read straight into the output array.

The generic read path reads each chunk's bytes (gzip data encoding: a gzip member) into
a buffer, inflates it into a bytes object and copies the selected box into the output,
with Python work per chunk between those steps.  Here the chunks' places in their shard
files come from the shard and minishard indexes (:meth:`ShardReader.locate`, cached),
each shard file is opened once per batch and used only at the version its index was read
from, and the C kernel (csrc/chunkbox.h) reads, inflates and copies each box with the
GIL released.  Chunks it does not handle (missing, of another size, damaged, in a shard
replaced since its index was read, strided selections) are returned to the generic path,
which fills them, reads them again or raises the usual errors.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from shardvol._ext import chunkbox
from shardvol.array.indexing import ChunkPart
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.sharded import ShardedChunkStore


class RawShardReader:
    """Reads boxes of the raw chunks of one sharded scale stored as local files."""

    def __init__(self, store: ShardedChunkStore) -> None:
        self.store = store
        self.codec = "gzip" if store.spec.data_encoding == "gzip" else "raw"

    @classmethod
    def for_scale(cls, store: ShardedChunkStore, codec: ChunkEncoding) -> RawShardReader | None:
        """A reader if the scale's chunks are raw voxels (gzipped or not) in local shard
        files this host can copy as they are (little-endian, or single bytes); else None."""
        if codec.encoding != "raw" or (sys.byteorder != "little" and codec.dtype.itemsize > 1):
            return None
        if store.kv.file_path(store.spec.shard_filename(0)) is None:
            return None
        return cls(store)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray) -> list[ChunkPart]:
        """Copy the boxes of ``parts`` into ``out``; returns the parts left to the caller."""
        left = [p for p in parts if not p.is_box]
        direct = [p for p in parts if p.is_box]
        if not direct:
            return left
        store = self.store
        codes = store.codes([p.coord for p in direct]).tolist()
        where = store.reader.locate(codes)
        spans: list[tuple[int, int, int]] = []
        rows: list[list[int]] = []
        names: list[str] = []
        placed: list[ChunkPart] = []
        files: dict[str, tuple[int, int] | None] = {}  # file -> (descriptor, size) at its version
        try:
            for p, code in zip(direct, codes):
                found = where.get(code)
                opened = None if found is None else self._open(files, found[0], found[3])
                if found is None or opened is None:
                    left.append(p)  # (missing: filled; a replaced file: read again, there)
                    continue
                fd, size = opened
                _, start, length, _ = found
                if start + length > size:
                    left.append(p)  # (an error, there)
                    continue
                spans.append((fd, start, length))
                # Fortran-ordered (x, y, z, channel) chunks: C order with the axes reversed
                rows.append([*reversed(store.grid.chunk_extent(p.coord)),
                             *(s.start for s in reversed(p.chunk_sel)),
                             *(s.stop - s.start for s in reversed(p.chunk_sel)),
                             *(s.start for s in reversed(p.out_sel))])
                names.append(f"{store.kv.url}/{found[0]}")
                placed.append(p)
            if placed:
                status = chunkbox.read_boxes(
                    chunkbox.thread_reader(), self.codec, np.array(spans, np.int64),
                    np.array(rows, np.int64), out.T, names)
                left.extend(p for p, s in zip(placed, status) if s != 0)
        finally:
            for opened in files.values():
                if opened is not None:
                    os.close(opened[0])
        return left

    def _open(self, files: dict[str, tuple[int, int] | None], key: str,
              version: object) -> tuple[int, int] | None:
        """``key``'s file opened (once per read) if it is still at ``version``."""
        if key not in files:
            opened = self.store.kv.open_file(key)
            if opened is not None and opened[1] != version:
                os.close(opened[0])
                opened = None
            files[key] = None if opened is None else (opened[0], opened[2])
        return files[key]
