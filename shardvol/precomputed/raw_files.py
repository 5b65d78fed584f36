"""Raw chunk files of a local unsharded scale, read straight into the output array.

The generic read path reads each chunk file whole into a bytes object, then
copies the selected box into the output.  For raw chunks in local files the C
kernel (csrc/rawfile) instead reads only the byte span of the box (for a box
of a few z planes, those planes) into a reused buffer and copies it into the
output, a batch of chunks per call with the GIL released.  Chunks it does not
handle (missing, gzipped, of another size, strided selections) are returned to
the generic path, which applies the fill value, reads CloudVolume's ``.gz``
files, or raises the usual errors.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from shardvol._ext import rawfile
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import ChunkPart
from shardvol.kvstore import KVStore
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.unsharded import chunk_key


class RawFileReader:
    """Reads boxes of the raw chunk files of one scale stored as local files."""

    def __init__(self, directory: str, grid: ChunkGrid) -> None:
        self.directory = directory
        self.grid = grid

    @classmethod
    def for_scale(cls, kv: KVStore, grid: ChunkGrid, codec: ChunkEncoding) -> RawFileReader | None:
        """A reader if the scale's chunks are raw voxels in local files this host can
        copy as they are (little-endian, or single bytes); else None."""
        if codec.encoding != "raw" or (sys.byteorder != "little" and codec.dtype.itemsize > 1):
            return None
        # chunk keys hold no "/": every chunk file lies in the directory of the scale's keys
        path = kv.file_path("info")
        return None if path is None else cls(os.path.dirname(path), grid)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray) -> list[ChunkPart]:
        """Copy the boxes of ``parts`` into ``out``; returns the parts left to the caller."""
        direct: list[ChunkPart] = []
        left: list[ChunkPart] = []
        for p in parts:
            (direct if p.is_box else left).append(p)
        if not direct:
            return left
        rows = []
        paths = []
        for p in direct:
            paths.append(os.path.join(self.directory, chunk_key(self.grid, p.coord)))
            rows.append([
                *self.grid.chunk_extent(p.coord),
                *(s.start for s in p.chunk_sel),
                *(s.stop - s.start for s in p.chunk_sel),
                *(s.start for s in p.out_sel),
            ])
        boxes = np.array(rows, dtype=np.int64)
        status = rawfile.read_boxes(paths, boxes, out)
        left.extend(p for p, s in zip(direct, status) if s != 0)
        return left
