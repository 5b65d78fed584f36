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

import sys

import numpy as np

from shardvol._ext import rawfile
from shardvol.codecs.base import Codec
from shardvol.grid import ChunkGrid
from shardvol.indexing import ChunkPart
from shardvol.kvstore import KVStore
from shardvol.precomputed_store import chunk_key


class RawFileReader:
    """Reads boxes of the raw chunk files of one scale stored as local files."""

    def __init__(self, kv: KVStore, grid: ChunkGrid) -> None:
        self.kv = kv
        self.grid = grid

    @classmethod
    def for_scale(cls, kv: KVStore, grid: ChunkGrid, codec: Codec) -> RawFileReader | None:
        """A reader if the scale's chunks are raw voxels in local files this host can
        copy as they are (little-endian, or single bytes); else None."""
        if codec.encoding != "raw" or kv.file_path("info") is None:
            return None
        if sys.byteorder != "little" and codec.dtype.itemsize > 1:
            return None
        return cls(kv, grid)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray) -> list[ChunkPart]:
        """Copy the boxes of ``parts`` into ``out``; returns the parts left to the caller."""
        direct: list[ChunkPart] = []
        left: list[ChunkPart] = []
        for p in parts:
            (direct if _unit_steps(p) else left).append(p)
        if not direct:
            return left
        boxes = np.empty((len(direct), 16), dtype=np.int64)
        paths = []
        for i, p in enumerate(direct):
            paths.append(self.kv.file_path(chunk_key(self.grid, p.coord)))
            boxes[i, 0:4] = self.grid.chunk_extent(p.coord)
            boxes[i, 4:8] = [s.start for s in p.chunk_sel]
            boxes[i, 8:12] = [s.stop - s.start for s in p.chunk_sel]
            boxes[i, 12:16] = [s.start for s in p.out_sel]
        status = rawfile.read_boxes(paths, boxes, out)
        left.extend(p for p, s in zip(direct, status) if s != 0)
        return left

def _unit_steps(p: ChunkPart) -> bool:
    """Whether both sides of the part are boxes (slices of step 1 with both ends)."""
    return all(s.step in (None, 1) and s.stop is not None for s in (*p.chunk_sel, *p.out_sel))
