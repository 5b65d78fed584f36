"""A batch of chunk boxes read from local files by one call of the box-reading kernel
(csrc/chunkbox.h, GIL released): what the box readers of both formats build once they know
where each chunk lies.  The files a batch opens are closed when it ends."""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from types import TracebackType

import numpy as np

from shardvol._ext import chunkbox
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
        self._rows.append([*shape, *(s.start for s in chunk_sel),
                           *(s.stop - s.start for s in chunk_sel), *(s.start for s in out_sel)])
        self._names.append(f"{self.kv.url}/{key}")

    def read(self, out: np.ndarray) -> list[ChunkPart]:
        """Read every box added into ``out``; returns the parts whose chunks the kernel
        left to the general path (damaged, of another size or format)."""
        if not self.parts:
            return []
        status = chunkbox.read_boxes(
            chunkbox.thread_reader(), self.codec, np.array(self._spans, np.int64),
            np.array(self._rows, np.int64), out.T if self.fortran else out, self._names)
        return [p for p, s in zip(self.parts, status) if s != 0]
