"""A chunk store that collects writes in memory and stores each unit once.

Writers that produce one storage unit (a shard) piece by piece — the
downsampling tasks — write through it, so the shard file is written once,
whole, instead of being read and rewritten after every piece.  Reads see the
buffered chunks first.  A unit whose every chunk has been written is stored
at once in the background (its compression overlaps the writer's next
piece); :meth:`flush` stores the rest and waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext

from shardvol._parallel import default_parallel, run_parallel, submit
from shardvol.array.chunkstore import ChunkCoord, ChunkStore, Unit


class BufferedChunkStore(ChunkStore):
    """Buffers ``update_unit`` calls of ``inner`` until :meth:`flush`."""

    def __init__(self, inner: ChunkStore) -> None:
        self.inner = inner
        self._units: dict[Unit, dict[ChunkCoord, bytes | None]] = {}
        self._members: dict[Unit, frozenset[ChunkCoord] | None] = {}
        self._storing: list[Future] = []
        self._guard = threading.Lock()

    @property
    def buffered_bytes(self) -> int:
        with self._guard:
            return sum(len(b) for u in self._units.values() for b in u.values() if b)

    def describe(self, coord: ChunkCoord) -> str:
        return self.inner.describe(coord)

    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bytes]:
        found: dict[ChunkCoord, bytes] = {}
        rest = []
        with self._guard:
            for unit, members in self.inner.units(coords).items():
                buf = self._units.get(unit, {})
                for c in members:
                    if c in buf:
                        if buf[c] is not None:
                            found[c] = buf[c]  # type: ignore[assignment]
                    else:
                        rest.append(c)
        if rest:
            found.update(self.inner.read_chunks(rest))
        return found

    def units(self, coords: Sequence[ChunkCoord]) -> dict[Unit, list[ChunkCoord]]:
        return self.inner.units(coords)

    def unit_chunks(self, unit: Unit) -> list[ChunkCoord] | None:
        return self.inner.unit_chunks(unit)

    def update_unit(
        self,
        unit: Unit,
        put: dict[ChunkCoord, bytes],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
    ) -> None:
        if unit not in self._members:
            members = self.inner.unit_chunks(unit)
            self._members[unit] = None if members is None else frozenset(members)
        with self._guard:
            buf = self._units.setdefault(unit, {})
            for c in delete:
                buf[c] = None
            buf.update(put)
            members = self._members[unit]
            complete = members is not None and members <= buf.keys()
            if complete:
                del self._units[unit]
                self._storing.append(submit(self._store, (unit, buf)))

    def lock(self, unit: Unit) -> AbstractContextManager[None]:
        return nullcontext()  # nothing reaches storage before flush()

    def _store(self, item: tuple[Unit, dict[ChunkCoord, bytes | None]]) -> None:
        """Whole units are replaced; others are merged under their lock."""
        unit, buf = item
        put = {c: b for c, b in buf.items() if b is not None}
        delete = [c for c, b in buf.items() if b is None]
        members = self._members.get(unit)
        if members is not None and members <= buf.keys():
            self.inner.update_unit(unit, put, (), replace=True)
        else:
            with self.inner.lock(unit):
                self.inner.update_unit(unit, put, delete)

    def flush(self, parallel: int | None = None) -> None:
        """Store every buffered unit and wait until all are stored."""
        with self._guard:
            units, self._units = list(self._units.items()), {}
            storing, self._storing = self._storing, []
        run_parallel(self._store, units, parallel or default_parallel())
        for future in storing:
            future.result()
