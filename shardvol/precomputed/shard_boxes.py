"""Raw and jpeg chunks of a local sharded scale, read straight into the output array.

The generic read path reads each chunk's bytes (gzip data encoding: a gzip member) into
a buffer, inflates it into a bytes object and decodes or copies the selected box into the
output, with Python work per chunk between those steps.  Here the chunks' places in their
shard files come from the shard and minishard indexes (:meth:`ShardReader.locate`,
cached), each shard file is opened once per batch and used only at the version its index
was read from, and the C kernel (csrc/chunkbox.h) reads, inflates and decodes or copies
each box with the GIL released.  Chunks it does not handle (missing, of another size,
damaged, in a shard replaced since its index was read, strided selections) are returned
to the generic path, which fills them, reads them again or raises the usual errors.
"""

from __future__ import annotations

import sys

import numpy as np

from shardvol.array.box_batch import BoxBatch
from shardvol.array.indexing import ChunkPart
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.sharded import ShardedChunkStore


class ShardBoxReader:
    """Reads boxes of the raw or jpeg chunks of one sharded scale stored as local files."""

    def __init__(self, store: ShardedChunkStore, encoding: str) -> None:
        self.store = store
        gzip = store.spec.data_encoding == "gzip"
        #: the kernel's codec (a key of chunkbox.CODECS)
        self.codec = (("gzip" if gzip else "raw") if encoding == "raw"
                      else "gzip jpeg" if gzip else "jpeg")

    @classmethod
    def for_scale(cls, store: ShardedChunkStore, codec: ChunkEncoding) -> ShardBoxReader | None:
        """A reader if the scale's chunks are raw voxels (little-endian, or single bytes)
        or uint8 jpeg images, gzipped or not, in local shard files; else None."""
        if codec.encoding == "raw":
            if sys.byteorder != "little" and codec.dtype.itemsize > 1:
                return None
        elif codec.encoding != "jpeg" or codec.dtype != np.uint8:
            return None
        if store.kv.file_path(store.spec.shard_filename(0)) is None:
            return None
        return cls(store, codec.encoding)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray,
                  parallel: int = 1) -> list[ChunkPart]:
        """Copy the boxes of ``parts`` into ``out`` on up to ``parallel`` threads; returns
        the parts left to the caller."""
        left = [p for p in parts if not p.is_box]
        direct = [p for p in parts if p.is_box]
        if not direct:
            return left
        store = self.store
        codes = store.codes([p.coord for p in direct]).tolist()
        where = store.reader.locate(codes)
        # Fortran-ordered (x, y, z, channel) chunks and output: the kernel's C order reversed
        with BoxBatch(store.kv, self.codec, fortran=True) as batch:
            for p, code in zip(direct, codes):
                if code not in where:
                    left.append(p)  # (missing: filled there)
                    continue
                key, start, length, version = where[code]
                opened = batch.open(key)
                if opened is None or opened[1] != version or start + length > opened[2]:
                    left.append(p)  # (replaced: read again there; past the end: an error)
                else:
                    batch.add(p, key, start, length, store.grid.chunk_extent(p.coord))
            return left + batch.read(out, parallel)
