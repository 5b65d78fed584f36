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
from shardvol.array.box_batch import box_row, in_pieces
from shardvol.array.chunkstore import ChunkCoord
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import ChunkPart
from shardvol.kvstore import KVStore
from shardvol.precomputed.codecs.base import ChunkEncoding
from shardvol.precomputed.unsharded import chunk_key

_FILES_REMEMBERED = 1 << 16


class RawFileReader:
    """Reads boxes of the raw chunk files of one scale stored as local files."""

    def __init__(self, directory: str, grid: ChunkGrid) -> None:
        self.directory = directory
        self.grid = grid
        self._files: dict[ChunkCoord, tuple[str, tuple[int, ...]]] = {}

    @classmethod
    def for_scale(cls, kv: KVStore, grid: ChunkGrid, codec: ChunkEncoding) -> RawFileReader | None:
        """A reader if the scale's chunks are raw voxels in local files this host can
        copy as they are (little-endian, or single bytes); else None."""
        if codec.encoding != "raw" or (sys.byteorder != "little" and codec.dtype.itemsize > 1):
            return None
        # chunk keys hold no "/": every chunk file lies in the directory of the scale's keys
        path = kv.file_path("info")
        return None if path is None else cls(os.path.dirname(path), grid)

    def read_into(self, parts: list[ChunkPart], out: np.ndarray,
                  parallel: int = 1) -> list[ChunkPart]:
        """Copy the boxes of ``parts`` into ``out`` on up to ``parallel`` threads; returns
        the parts left to the caller."""
        direct: list[ChunkPart] = []
        left: list[ChunkPart] = []
        for p in parts:
            (direct if p.is_box else left).append(p)
        if not direct:
            return left
        rows = []
        paths = []
        for p in direct:
            path, extent = self._file(p.coord)
            paths.append(path)
            rows.append(box_row(extent, p.chunk_sel, p.out_sel))
        boxes = np.array(rows, dtype=np.int64)
        status = in_pieces(len(direct), parallel,
                           lambda piece: rawfile.read_boxes(paths[piece], boxes[piece], out))
        left.extend(p for p, s in zip(direct, status) if s != 0)
        return left

    def _file(self, coord: ChunkCoord) -> tuple[str, tuple[int, ...]]:
        """Chunk ``coord``'s file and extent (remembered for the next reads: their Python
        was a third of a 100^3 cutout's time)."""
        found = self._files.get(coord)
        if found is None:
            if len(self._files) >= _FILES_REMEMBERED:
                self._files.clear()
            found = self._files[coord] = (os.path.join(self.directory, chunk_key(self.grid, coord)),
                                          self.grid.chunk_extent(coord))
        return found
