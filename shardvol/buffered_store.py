"""A chunk store that collects writes in memory and stores each unit once, on flush.

Writers that produce one storage unit (a shard) piece by piece — the
downsampling tasks — write through it, so the shard file is written once,
whole, instead of being read and rewritten after every piece.  Reads see the
buffered chunks first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext

from shardvol._parallel import default_parallel, run_parallel
from shardvol.chunkstore import ChunkCoord, ChunkStore, Unit


class BufferedChunkStore(ChunkStore):
    """Buffers ``update_unit`` calls of ``inner`` until :meth:`flush`."""

    def __init__(self, inner: ChunkStore) -> None:
        self.inner = inner
        self._units: dict[Unit, dict[ChunkCoord, bytes | None]] = {}
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
        with self._guard:
            buf = self._units.setdefault(unit, {})
            for c in delete:
                buf[c] = None
            buf.update(put)

    def lock(self, unit: Unit) -> AbstractContextManager[None]:
        return nullcontext()  # nothing reaches storage before flush()

    def flush(self, parallel: int | None = None) -> None:
        """Store every buffered unit: whole units are replaced, others merged under their lock."""
        with self._guard:
            units, self._units = list(self._units.items()), {}

        def store(item: tuple[Unit, dict[ChunkCoord, bytes | None]]) -> None:
            unit, buf = item
            put = {c: b for c, b in buf.items() if b is not None}
            delete = [c for c, b in buf.items() if b is None]
            members = self.inner.unit_chunks(unit)
            if members is not None and set(members) <= set(buf):
                self.inner.update_unit(unit, put, (), replace=True)
            else:
                with self.inner.lock(unit):
                    self.inner.update_unit(unit, put, delete)

        run_parallel(store, units, parallel or default_parallel())
