"""A batch of chunk boxes read from local files by the box-reading kernel (csrc/chunkbox.h,
GIL released), in one call or in pieces on several threads: what the box readers of both
formats build once they know where each chunk lies.  The files a batch opens are closed
when it ends."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from types import TracebackType

import numpy as np

from shardvol._ext import chunkbox
from shardvol._parallel import run_parallel
from shardvol.array.indexing import ChunkPart
from shardvol.kvstore import KVStore


class BoxBatch:
    """Boxes of chunks stored as spans of open files, encoded by ``codec`` (a key of
    ``chunkbox.CODECS``); ``fortran``: the chunks and the output are Fortran-ordered (the
    kernel reads them with their axes reversed)."""

    def __init__(self, kv: KVStore, codec: str, fortran: bool = False) -> None:
        self.kv = kv
        self.codec = codec
        self.fortran = fortran
        self.parts: list[ChunkPart] = []
        self._spans: list[tuple[int, int, int]] = []
        self._rows: list[list[int]] = []
        self._names: list[str] = []
        self._files: dict[str, tuple[int, Hashable, int] | None] = {}

    def __enter__(self) -> BoxBatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        for opened in self._files.values():
            if opened is not None:
                os.close(opened[0])
        self._files.clear()

    def open(self, key: str) -> tuple[int, Hashable, int] | None:
        """``key``'s file (opened once per batch): a descriptor, its version, its size."""
        if key not in self._files:
            self._files[key] = self.kv.open_file(key)
        return self._files[key]

    def add(self, part: ChunkPart, key: str, start: int, length: int,
            shape: Sequence[int]) -> None:
        """``part``'s box of its chunk (of ``shape``), stored at ``[start, start + length)``
        of ``key``'s file (opened by :meth:`open`)."""
        opened = self._files[key]
        assert opened is not None
        chunk_sel, out_sel = part.chunk_sel, part.out_sel
        if self.fortran:
            shape, chunk_sel, out_sel = shape[::-1], chunk_sel[::-1], out_sel[::-1]
        self.parts.append(part)
        self._spans.append((opened[0], start, length))
        self._rows.append(box_row(shape, chunk_sel, out_sel))
        self._names.append(f"{self.kv.url}/{key}")

    def read(self, out: np.ndarray, parallel: int = 1) -> list[ChunkPart]:
        """Read every box added into ``out`` on up to ``parallel`` threads; returns the
        parts whose chunks the kernel left to the general path (damaged, of another size
        or format)."""
        if not self.parts:
            return []
        spans, rows = np.array(self._spans, np.int64), np.array(self._rows, np.int64)
        target = out.T if self.fortran else out

        def read(piece: slice) -> np.ndarray:
            return chunkbox.read_boxes(chunkbox.thread_reader(), self.codec, spans[piece],
                                       rows[piece], target, self._names[piece])

        status = in_pieces(len(self.parts), parallel, read)
        return [p for p, s in zip(self.parts, status) if s != 0]


def box_row(shape: Sequence[int], chunk_sel: Sequence[slice],
            out_sel: Sequence[slice]) -> list[int]:
    """The kernels' description of a box (slices of step 1) of a chunk of ``shape``: the
    chunk's extents, the box's origin in the chunk, its extents, its origin in the output."""
    row = [*shape]
    row += [s.start for s in chunk_sel]
    row += [s.stop - s.start for s in chunk_sel]
    row += [s.start for s in out_sel]
    return row


def in_pieces(n: int, parallel: int, read: Callable[[slice], np.ndarray]) -> np.ndarray:
    """The statuses ``read(piece)`` gives for boxes ``0..n-1``: one call, or with
    ``parallel`` > 1 calls for consecutive pieces (up to eight per thread, taken by threads
    as they free up), on up to ``parallel`` threads (the caller is one of them).  Boxes
    differ in cost (a whole chunk, the prefix of one, a corner of one): a cutout's dozen
    boxes in pieces of one balance the threads better than in two pieces per thread
    (zstd cutouts of 100^3, 2 cores: 41.0 against 42.2 ms)."""
    if parallel <= 1 or n < 2:
        return read(slice(0, n))
    count = min(n, 8 * parallel)
    bounds = [n * i // count for i in range(count + 1)]
    status = np.empty(n, np.int8)

    def piece(i: int) -> None:
        status[bounds[i]:bounds[i + 1]] = read(slice(bounds[i], bounds[i + 1]))

    run_parallel(piece, range(count), parallel)
    return status
