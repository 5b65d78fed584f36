"""The chunk-store contract between array formats and the slicing layer.

A chunk store holds the *encoded* chunks of one array (one precomputed scale,
one Zarr array), addressed by integer grid coordinates.  It hides how chunks
are laid out on storage: one file per chunk, or many chunks per shard file.
The slicing layer (``shardvol.array.indexing``) never knows which.

Writes happen in *units*: the pieces of storage that are replaced atomically
(a chunk file, or a shard file holding many chunks).  Two writers that touch
the same unit must hold :meth:`ChunkStore.lock` for it around their
read-modify-write cycle, which reads the unit once (:meth:`ChunkStore.read_unit`)
and hands what it read back to :meth:`ChunkStore.update_unit`.

On stores with conditional writes (:attr:`ChunkStore.conditional`: S3), the lock
orders only this process's threads: other writers are ordered by compare-and-swap.
:meth:`ChunkStore.read_unit` then reads the unit's version too, and
:meth:`ChunkStore.update_unit` writes only if the unit is still at it, else raises
UnitChangedError; the caller redoes the cycle from a fresh read, inside
:meth:`ChunkStore.redo_on_conflict` (see :mod:`shardvol.kvstore.cas`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from shardvol._parallel import run_parallel
from shardvol.array.grid import ChunkCoord
from shardvol.kvstore.base import KVStore
from shardvol.kvstore.cas import redo_on_conflict

T = TypeVar("T")

#: A unit's name: a shard number, a chunk file's grid position, a shard key, ...
Unit = TypeVar("Unit", bound=Hashable)
#: Encoded (or stored) chunk bytes: views into a larger read, or bytes of their own.
Blob = bytes | memoryview
ChunkRead = tuple[ChunkCoord, "Blob | None", str]  # coord, encoded bytes, name


class UnitContents:
    """What a unit holds, read under its lock by :meth:`ChunkStore.read_unit`.

    This default reads the chunks asked for when asked (chunk files are their own
    units; a buffering store overlays its buffer).  Stores whose units are files of
    many chunks read the file once, keep what it holds, and rewrite the unit from it in
    :meth:`ChunkStore.update_unit` instead of reading the file again.
    """

    def __init__(self, store: ChunkStore[Any]) -> None:
        self._store = store

    def chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        """The encoded chunks among ``coords`` that the unit holds."""
        return dict(self._store.read_chunks(coords))


class ChunkFileContents(UnitContents):
    """A unit that is one stored chunk, read once with its version, for a compare-and-swap
    update (:attr:`ChunkStore.conditional`): ``blob`` None if absent, ``version`` the
    store's token of what was read (None: absent)."""

    def __init__(self, store: ChunkStore[Any], coord: ChunkCoord, blob: Blob | None,
                 version: Hashable | None) -> None:
        super().__init__(store)
        self.coord, self.blob, self.version = coord, blob, version

    def chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        if self.blob is None or self.coord not in coords:
            return {}
        return {self.coord: self.blob}


class ChunkStore(ABC, Generic[Unit]):
    """Encoded chunks by grid coordinate, batched, with atomic unit updates."""

    @property
    def remote(self) -> bool:
        """Whether reads wait on a network: :meth:`iter_stored` then has every request of
        a read in flight at once and yields chunks as they arrive."""
        return False

    @property
    def conditional(self) -> bool:
        """Whether units are updated by compare-and-swap (see the module's doc): then
        :meth:`lock` orders this process's threads only, :meth:`update_unit` given
        ``current`` raises UnitChangedError if another writer changed the unit since it
        was read, and one given none merges by compare-and-swap itself."""
        return False

    @property
    def conflict_timeout(self) -> float | None:
        """Seconds :meth:`redo_on_conflict` redoes a cycle (None: for ever)."""
        return None

    def describe_unit(self, unit: Unit) -> str:
        """How error messages name a unit (its file)."""
        return f"unit {unit!r}"

    def redo_on_conflict(self, unit: Unit, attempt: Callable[[], T]) -> T:
        """``attempt()``: a read-modify-write of ``unit`` (:meth:`read_unit`, a merge,
        :meth:`update_unit` with what was read), redone from its read while its update finds
        the unit changed by another writer; WriteConflictError naming the unit once
        :attr:`conflict_timeout` has passed.  Stores that are not :attr:`conditional`
        never find a conflict: one attempt."""
        if not self.conditional:
            return attempt()
        return redo_on_conflict(attempt, self.conflict_timeout, self.describe_unit(unit))

    @abstractmethod
    def read_chunks(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, Blob]:
        """Encoded bytes of those ``coords`` that are stored; absent chunks are left out.

        Implementations batch the I/O (shard indexes once, coalesced byte ranges,
        concurrent requests).
        """

    def iter_chunks(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        """``(coord, encoded bytes or None if absent, describe(coord))`` for every one of the
        (distinct) ``coords``, in any order.

        Stores may produce the values one by one as they read them, so that a caller
        which decodes and drops each before taking the next holds one at a time (and
        decodes it while it is still in the CPU cache).  Default: one :meth:`read_chunks`.
        """
        data = self.read_chunks(coords)
        for c in coords:
            yield c, data.get(c), self.describe(c)

    def iter_stored(self, coords: Sequence[ChunkCoord]) -> Iterator[ChunkRead]:
        """Like :meth:`iter_chunks`, but values as stored, left for :meth:`decode_stored` to turn
        into encoded chunks (on any thread: stores whose values are compressed as a
        whole, such as gzip-encoded shard data, decompress them there).  Each value
        stays valid while the caller holds it."""
        return self.iter_chunks(coords)

    def decode_stored(self, stored: Blob, name: str) -> Blob:
        """The encoded chunk in a value from :meth:`iter_stored` (``name`` from there)."""
        return stored

    @abstractmethod
    def units(self, coords: Sequence[ChunkCoord]) -> dict[Unit, list[ChunkCoord]]:
        """Group chunk coordinates by the unit that stores them."""

    @abstractmethod
    def unit_chunks(self, unit: Unit) -> list[ChunkCoord] | None:
        """Every in-bounds chunk coordinate that ``unit`` can hold.

        None when that is too costly to enumerate; writers then treat the unit as
        never fully covered (they merge into it instead of replacing it).
        """

    def scan_unit_chunks(self, unit: Unit) -> list[ChunkCoord]:
        """:meth:`unit_chunks`, however costly (a scan of the whole grid if need be)."""
        members = self.unit_chunks(unit)
        if members is None:
            raise NotImplementedError(f"{type(self).__name__} cannot list the chunks of {unit}")
        return members

    @abstractmethod
    def all_units(self) -> Iterator[Unit]:
        """Every unit that can hold a chunk of the grid (for planning work by unit)."""

    def read_unit(self, unit: Unit) -> UnitContents:
        """What ``unit`` holds now, for a read-modify-write under :meth:`lock`: its chunks
        are merged from it, and it goes back to :meth:`update_unit` as ``current`` (on
        :attr:`conditional` stores, with the version it was read at)."""
        return UnitContents(self)

    @abstractmethod
    def update_unit(
        self,
        unit: Unit,
        put: Mapping[ChunkCoord, Blob],
        delete: Iterable[ChunkCoord] = (),
        replace: bool = False,
        current: UnitContents | None = None,
    ) -> None:
        """Atomically store ``put`` and drop ``delete`` in ``unit``.

        Chunks of the unit that are in neither are kept (read and rewritten for a
        shard, or taken from ``current``, what :meth:`read_unit` read under the same
        lock) unless ``replace`` is true, in which case the unit ends up holding
        exactly ``put``.  A unit left with no chunks is deleted.  Callers doing a
        read-modify-write hold :meth:`lock` around it.

        On :attr:`conditional` stores a replacement is a plain write; an update given
        ``current`` is written only if the unit is still at the version read, else
        UnitChangedError (the caller reads it again: :meth:`redo_on_conflict`); one given
        none reads, merges and writes by compare-and-swap until it succeeds.
        """

    @abstractmethod
    def lock(self, unit: Unit) -> AbstractContextManager[object]:
        """Exclusive lock on ``unit`` (across processes where the storage allows, except
        on :attr:`conditional` stores, where it orders this process's threads only); what
        ``with`` binds is no part of the contract."""

    def unit_version(self, unit: Unit) -> Hashable | None:
        """A token of the unit's current version if the store can tell it without a request
        (a local file's identity), else None.  Cached chunks serve while it is unchanged."""
        return None

    def watch(self, changed: Callable[[Unit], None]) -> None:
        """Have ``changed(unit)`` called whenever a read finds that another writer replaced
        ``unit`` (stores whose reads check versions; others never call it)."""

    def describe(self, coord: ChunkCoord) -> str:
        """How error messages name a chunk (its file, or its shard and id)."""
        return f"chunk {coord}"

    def delete_chunks(self, coords: Sequence[ChunkCoord], parallel: int = 1) -> None:
        """Remove chunks (they then read as the fill value), a unit at a time on each of up
        to ``parallel`` threads."""

        def delete(item: tuple[Unit, list[ChunkCoord]]) -> None:
            unit, members = item
            with self.lock(unit):
                self.update_unit(unit, {}, members)

        run_parallel(delete, list(self.units(coords).items()), parallel)

    def exists(self, coords: Sequence[ChunkCoord]) -> dict[ChunkCoord, bool]:
        """Whether each chunk is stored (default: by reading it)."""
        present = self.read_chunks(coords)
        return {c: c in present for c in coords}


class KVChunkStore(ChunkStore[Unit]):
    """A chunk store whose units are values of one key-value store, ``self.kv``: it is
    remote, conditional and as patient with conflicts as that store."""

    kv: KVStore

    @property
    def remote(self) -> bool:
        return not self.kv.local

    @property
    def conditional(self) -> bool:
        return self.kv.conditional_writes

    @property
    def conflict_timeout(self) -> float | None:
        return self.kv.conflict_timeout
