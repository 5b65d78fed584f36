"""A chunk store that collects writes in memory and stores each unit once.

Writers that produce one storage unit (a shard) piece by piece — the
downsampling tasks — write through it, so the shard file is written once,
whole, instead of being read and rewritten after every piece.  Reads see the
buffered chunks first.  A unit whose every chunk has been written is stored
at once in the background (its compression overlaps the writer's next
piece); :meth:`flush` stores the rest and waits.  Until a unit is stored, reads of it
see the buffer (and a unit replaced in the buffer hides what storage holds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager

from shardvol._parallel import default_parallel, run_parallel, submit
from shardvol.array.chunkstore import Blob, ChunkCoord, ChunkStore, Unit, UnitContents


class _Buffer:
    """The changes buffered for one unit: chunks put (bytes) or deleted (None); after a
    replacement, chunks not in ``chunks`` are absent whatever storage holds."""

    __slots__ = ("chunks", "replaced")

    def __init__(self) -> None:
        self.chunks: dict[ChunkCoord, Blob | None] = {}
        self.replaced = False

    def lookup(self, coord: ChunkCoord) -> tuple[bool, Blob | None]:
        """(whether the buffer decides this chunk, its bytes or None if absent)."""
        if coord in self.chunks:
            return True, self.chunks[coord]
        return self.replaced, None


class BufferedChunkStore(ChunkStore[Unit]):
    """Buffers ``update_unit`` calls of ``inner`` until :meth:`flush`."""

    def __init__(self, inner: ChunkStore[Unit]) -> None:
        self.inner = inner
        self._units: dict[Unit, _Buffer] = {}  # open buffers
        self._sending: dict[Unit, _Buffer] = {}  # complete units being stored in the background
        self._members: dict[Unit, frozenset[ChunkCoord] | None] = {}
        self._storing: list[Future] = []
        self._guard = threading.Lock()
        self._locks: dict[Unit, threading.Lock] = {}

    @property
    def buffered_bytes(self) -> int:
        with self._guard:
            buffers = [*self._units.values(), *self._sending.values()]
            return sum(len(b) for buf in buffers for b in buf.chunks.values() if b)

    @property
    def remote(self) -> bool:
        return self.inner.remote

    def describe(self, coord: ChunkCoord) -> str:
        return self.inner.describe(coord)

    def unit_version(self, unit: Unit) -> Hashable | None:
        return self.inner.unit_version(unit)

    def watch(self, changed: Callable[[Unit], None]) -> None:
        self.inner.watch(changed)

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        found: dict[ChunkCoord, Blob] = {}
        rest = []
        with self._guard:
            for unit, members in self.inner.units(coords).items():
                buffers = [b for b in (self._units.get(unit), self._sending.get(unit)) if b]
                for c in members:
                    decided, blob = False, None
                    for buf in buffers:  # the newest first
                        decided, blob = buf.lookup(c)
                        if decided:
                            break
                    if not decided:
                        rest.append(c)
                    elif blob is not None:
                        found[c] = blob
        if rest:
            found.update(self.inner.read_chunks(rest))
        return found

    def units(self, coords: Sequence[ChunkCoord]) -> dict[Unit, list[ChunkCoord]]:
        return self.inner.units(coords)

    def unit_chunks(self, unit: Unit) -> list[ChunkCoord] | None:
        return self.inner.unit_chunks(unit)

    def scan_unit_chunks(self, unit: Unit) -> list[ChunkCoord]:
        return self.inner.scan_unit_chunks(unit)

    def all_units(self) -> Iterator[Unit]:
        return self.inner.all_units()

    def update_unit(
        self,
        unit: Unit,
        put: Mapping[ChunkCoord, Blob],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
        current: UnitContents | None = None,
    ) -> None:
        if unit not in self._members:
            chunks = self.inner.unit_chunks(unit)
            self._members[unit] = None if chunks is None else frozenset(chunks)
        with self._guard:
            buf = self._units.get(unit)
            if buf is None or replace:
                buf = self._units[unit] = _Buffer()
                buf.replaced = replace
            for c in delete:
                buf.chunks[c] = None
            buf.chunks.update(put)
            members = self._members[unit]
            complete = members is not None and members <= buf.chunks.keys()
            # (a unit still being sent waits for flush, which stores it after that send)
            if complete and unit not in self._sending:
                buf.replaced = True
                self._sending[unit] = self._units.pop(unit)
                self._storing.append(submit(self._send, unit))

    def lock(self, unit: Unit) -> AbstractContextManager[object]:
        """A lock of this buffer's unit (threads writing through it); storage's own locks
        are taken when the unit is stored."""
        with self._guard:
            return self._locks.setdefault(unit, threading.Lock())

    def _send(self, unit: Unit) -> None:
        """Store a complete unit taken from the buffer, then forget it."""
        try:
            self._store((unit, self._sending[unit]))
        finally:
            with self._guard:
                del self._sending[unit]

    def _store(self, item: tuple[Unit, _Buffer]) -> None:
        """Store one unit's buffer, replacing the unit or merging into it, under its lock."""
        unit, buf = item
        put = {c: b for c, b in buf.chunks.items() if b is not None}
        delete = [c for c, b in buf.chunks.items() if b is None]
        with self.inner.lock(unit):
            if buf.replaced:
                self.inner.update_unit(unit, put, (), replace=True)
            else:
                self.inner.update_unit(unit, put, delete)

    def flush(self, parallel: int | None = None) -> None:
        """Store every buffered unit and wait until all are stored."""
        with self._guard:
            storing, self._storing = self._storing, []
        for future in storing:  # first: a unit may be buffered again after its send
            future.result()
        with self._guard:
            units, self._units = list(self._units.items()), {}
        run_parallel(self._store, units, parallel or default_parallel())
