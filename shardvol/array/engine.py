"""Reads and writes of numpy selections over a chunk store: the engine behind Volume and zarr3.

Reads: selection -> chunk parts -> batches (grouped by storage unit) -> each
batch streamed by one ``iter_chunks`` call, in parallel threads, every chunk
decoded as it arrives, straight into the output (only the selected box of a
partially selected chunk, when the codec can).  Small reads are fetched in one
go and then decoded in parallel; a ``box_reader`` (raw chunks of local files or
shards, inner chunks of local Zarr shards: read, decoded and placed in C) takes what it
can of each batch first.

Writes: storage units (chunk files or shards) are written concurrently, each
once: its fully covered chunks are encoded without reading, then it is updated
holding its lock (existing content is read and merged only when it must be kept:
partially covered chunks, or other chunks of a shard).  Each unit is replaced
atomically; if one fails (say a chunk its encoding cannot store), units already
written stay written.  On stores with conditional writes (S3) the lock orders this
process's threads only: a merge is written only if the unit is unchanged since it
was read, else read and merged again (see ChunkStore.redo_on_conflict), and a whole
unit replaced is one plain write.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import EllipsisType
from typing import Any, Literal, Protocol, cast, runtime_checkable

import numpy as np

from shardvol._ext import hugeblock
from shardvol._parallel import WorkEstimate, default_parallel, run_parallel, submit
from shardvol.array.cache import ChunkCache
from shardvol.array.chunkstore import Blob, ChunkCoord, ChunkRead, ChunkStore
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import (
    AxisSelection,
    ChunkPart,
    chunk_parts,
    clip_selection,
    drop_axes,
    selection_in_domain,
)
from shardvol.array.values import cast_value, is_fill
from shardvol.errors import InvalidArgumentError, MissingChunkError

_MIN_BATCH = 8  # chunks: a batch costs about as much as decoding a few small chunks
_MAX_BATCH = 64
_BATCHES_PER_THREAD = 8  # enough for the threads to finish together
_MAX_WRITERS = 8
_POPULATE_BYTES = 256 << 20  # outputs of local reads faulted in ahead (see _populate)
_POPULATE_PIECE = 64 << 20
# Remote stores: units uploaded at once, at most (each waits on the network, not a core)
_MAX_REMOTE_WRITERS = 32
_WRITE_BUFFER_BYTES = 64 << 20
_REMOTE_WRITE_BUFFER_BYTES = 256 << 20
# Reads of at most this many chunks (a 100^3 box of 64^3 chunks touches up to 27) and of
# decoded chunk bytes are fetched whole before decoding (their stored bytes held at once).
_FETCH_FIRST_CHUNKS = 64
_FETCH_FIRST_BYTES = 64 << 20
# Reads of at most this many chunks through a box reader are located first, then read on
# all threads as one batch (see _read_boxes): 7-10% faster for 256^3 cutouts (64-125
# chunks) and as fast for a 512-chunk read; a whole 4,096-chunk read took 15% longer so
# (twice the page faults: the threads met in the output's fresh pages).
_LOCATE_FIRST_CHUNKS = 512


class ChunkCodec(Protocol):
    def encode(self, array: np.ndarray) -> bytes: ...

    def decode(
        self, data: Blob, shape: tuple[int, ...], dtype: Any, out: np.ndarray | None = None,
        context: str = "",
    ) -> np.ndarray: ...


@runtime_checkable
class RegionCodec(ChunkCodec, Protocol):
    """A codec that can decode a box of a chunk (``region``: slices of step 1) into ``out``."""

    def decode_region(
        self, data: Blob, shape: tuple[int, ...], region: tuple[slice, ...], out: np.ndarray,
        context: str = "",
    ) -> np.ndarray: ...


@runtime_checkable
class BufferCodec(ChunkCodec, Protocol):
    """A codec that can encode a chunk into a buffer it is given (zstd-compressed Zarr
    chunks): ``encoded_bound()`` bytes of it (None: it cannot)."""

    def encoded_bound(self) -> int | None: ...

    def encode_into(self, array: np.ndarray, out: memoryview) -> Blob: ...


class BoxReader(Protocol):
    """Reads some chunks' selected boxes straight into the output, faster than
    fetching and decoding them one by one (raw chunk files, say)."""

    def read_into(self, parts: list[ChunkPart], out: np.ndarray,
                  parallel: int = 1) -> list[ChunkPart]:
        """Read what it can of ``parts`` into ``out`` on up to ``parallel`` threads;
        returns the parts left to read."""
        ...


@dataclass
class ChunkedArray:
    """A chunked n-D array: ``grid`` geometry, ``store`` of encoded chunks, ``codec``.

    ``padded_chunks``: encoded chunks always have the full chunk shape (Zarr)
    rather than being clipped at the domain's end (precomputed).
    ``skip_fill_chunks``: chunks equal to the fill value are deleted, not stored.
    ``box_reader``: reads what it can of each batch before the generic fetch and decode.
    ``cache``: decoded chunks kept for later reads (see :mod:`shardvol.array.cache`); the
    store tells it which units changed under it, and writes drop the chunks they touch.
    """

    grid: ChunkGrid
    dtype: np.dtype
    store: ChunkStore[Any]  # any unit type: the engine only hands units back to the store
    codec: ChunkCodec
    fill_value: Any = 0
    order: Literal["C", "F"] = "F"
    padded_chunks: bool = False
    skip_fill_chunks: bool = False
    fill_missing: bool = True
    parallel: int = 0
    box_reader: BoxReader | None = None
    cache: ChunkCache | None = None
    _read_work: WorkEstimate = field(
        default_factory=WorkEstimate, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.cache is not None:
            self.store.watch(self._unit_changed)

    def _unit_changed(self, unit: Any) -> None:
        """The store found ``unit`` changed by another writer: its cached chunks go."""
        if self.cache is not None:
            members = self.store.unit_chunks(unit)
            if members is None:
                self.cache.clear()
            else:
                self.cache.drop(members)

    def _threads(self) -> int:
        return self.parallel or default_parallel()

    @cached_property
    def _chunk_bytes(self) -> int:
        """Bytes of a decoded chunk."""
        return math.prod(self.grid.chunk_shape) * self.dtype.itemsize

    @cached_property
    def _decodes_regions(self) -> bool:
        return isinstance(self.codec, RegionCodec)

    def encoded_shape(self, coord: ChunkCoord) -> tuple[int, ...]:
        return self.grid.chunk_shape if self.padded_chunks else self.grid.chunk_extent(coord)

    # ----------------------------------------------------------------- reading
    def read(
        self, sel: tuple[AxisSelection, ...], order: Literal["C", "F"] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """The selected elements; dropped axes removed, in ``order`` (default: the array's
        ``order``) memory layout; read into ``out`` if given (of the selection's full-rank
        shape, the array's dtype, contiguous in ``order``: a buffer a caller reads again
        and again, as a pyramid's slabs)."""
        shape = tuple(a.count for a in sel)
        inside = selection_in_domain(sel, self.grid)
        layout = order or self.order
        if out is not None:
            if (out.shape != shape or out.dtype != self.dtype
                    or not out.flags["F_CONTIGUOUS" if layout == "F" else "C_CONTIGUOUS"]):
                raise InvalidArgumentError(
                    f"cannot read a {shape} selection of {self.dtype} into an array of shape "
                    f"{out.shape} and {out.dtype} (it must be {layout}-contiguous)")
        else:
            try:
                out = hugeblock.empty(shape, self.dtype, order=layout)
            except (MemoryError, OverflowError) as e:
                raise InvalidArgumentError(
                    f"no memory for the {shape} array of {self.dtype} this read returns ({e})"
                ) from None
        if not inside:
            np.copyto(out, self.fill_value, casting="unsafe")  # as np.full does
        elif out.nbytes >= _POPULATE_BYTES and not self.store.remote:
            self._populate(out)
        parts = chunk_parts(sel, self.grid)
        if parts:
            self._read_parts(parts, out)
        return out[drop_axes(sel)]

    def _populate(self, out: np.ndarray) -> None:
        """Fault in a large output's pages before the reading threads write them, a piece
        a call on each thread: a call per piece costs the kernel about a third less than
        a fault per page (a whole 8 GiB raw read, 4.75-5.11 s against 5.00-5.33).  Reads
        of remote stores skip it: their threads fault the pages in while they wait."""
        n = out.nbytes

        def piece(start: int) -> None:
            hugeblock.populate(out, start, min(n, start + _POPULATE_PIECE))

        run_parallel(piece, range(0, n, _POPULATE_PIECE), self._threads())

    def _read_parts(self, parts: list[ChunkPart], out: np.ndarray) -> None:
        """Fetch and decode ``parts`` into ``out``: cached chunks are copied; of the others,
        those that a concurrent read is fetching are waited for (it caches them) while this
        read fetches the rest.  Reads of chunks that take more than half the cache, or of
        chunks read whole that take half of it, are not cached."""
        if self.cache is None:
            self._fetch_parts(parts, out)
            return
        parts, versions = self._from_cache(parts, out)
        if not parts:
            return
        whole = sum(p.full for p in parts)
        if (2 * len(parts) * self._chunk_bytes > self.cache.nbytes
                or 2 * whole * self._chunk_bytes >= self.cache.nbytes):
            # (a read of more than half the cache would only evict itself, and caching a
            # chunk read whole costs a copy of it, for a later read that may not come:
            # such reads decode straight into their output, as without a cache)
            self._fetch_parts(parts, out)
            return
        theirs = self._fetch_claimed(parts, out, versions)
        if not theirs:
            return
        for event in theirs.values():
            event.wait()
        rest, versions = self._from_cache([p for p in parts if p.coord in theirs], out)
        # the other read failed, its chunks were written meanwhile, or are out of the
        # cache already: fetched here, and cached unless yet another read is fetching them
        again = self._fetch_claimed(rest, out, versions)
        self._fetch_parts([p for p in rest if p.coord in again], out)

    def _fetch_claimed(
        self, parts: list[ChunkPart], out: np.ndarray,
        versions: dict[ChunkCoord, Hashable | None],
    ) -> dict[ChunkCoord, threading.Event]:
        """Fetch, decode and cache the parts no concurrent read is fetching (claimed, and
        released chunk by chunk as they are cached); the others, with the event their
        fetching read sets when it is done with them."""
        assert self.cache is not None
        mine, theirs = self.cache.claim(p.coord for p in parts)
        try:
            claimed = set(mine)
            self._fetch_parts([p for p in parts if p.coord in claimed], out, versions)
        finally:
            self.cache.release(mine)
        return theirs

    def _fetch_parts(
        self, parts: list[ChunkPart], out: np.ndarray,
        versions: dict[ChunkCoord, Hashable | None] | None = None,
    ) -> None:
        """Fetch and decode ``parts`` into ``out``, batches in parallel; with ``versions``,
        each chunk decoded whole and cached.

        Each batch streams its chunks, decoding each as soon as it is read (a hand-off
        to another thread costs more than decoding a chunk still in the CPU cache).
        Reads expected to take less than half a millisecond (from the time chunks
        of this array took so far) run in the caller's thread only.  Reads of a few
        chunks are fetched first and then decoded in parallel (see _fetch_then_decode);
        where the chunks are copied straight from their files (``box_reader``), reads of
        up to a few hundred are located first and then read in parallel (see _read_boxes).
        """
        if not parts:
            return
        by_coord = {p.coord: p for p in parts}
        if self.store.remote:
            self._stream_decode(by_coord, out, versions)
            return
        threads = self._read_work.threads(len(by_coord), self._threads())
        n = len(by_coord)
        small = n <= _FETCH_FIRST_CHUNKS
        boxes = self.box_reader is not None and versions is None  # (the cache wants chunks)
        if boxes and n <= _LOCATE_FIRST_CHUNKS:
            by_coord = {p.coord: p for p in self._read_boxes(parts, out, threads)}
            if not by_coord:
                return
            boxes = False
        if threads > 1 and not boxes and small and n * self._chunk_bytes <= _FETCH_FIRST_BYTES:
            self._fetch_then_decode(by_coord, out, threads, versions)
            return

        def fetch_and_decode(batch: list[ChunkCoord]) -> None:
            start = time.perf_counter()
            rest = batch
            if boxes:
                assert self.box_reader is not None
                parts = [by_coord[c] for c in batch]
                rest = [p.coord for p in self.box_reader.read_into(parts, out)]
            for coord, blob, name in self.store.iter_chunks(rest):
                self._decode_part(by_coord[coord], blob, name, out, versions)
            self._read_work.record(time.perf_counter() - start, len(batch))

        run_parallel(fetch_and_decode, self._batches(list(by_coord), threads), threads)

    def _read_boxes(self, parts: list[ChunkPart], out: np.ndarray,
                    threads: int) -> list[ChunkPart]:
        """A read of up to _LOCATE_FIRST_CHUNKS chunks through the box reader: their places
        are found in this thread, then the kernel reads them on ``threads`` threads
        (batches that each find their chunks would hold the GIL the other threads' kernel
        calls wait for, and open the same shard files again).  Returns the parts left to
        the generic path."""
        assert self.box_reader is not None
        start = time.perf_counter()
        left = self.box_reader.read_into(parts, out, threads)
        self._read_work.record((time.perf_counter() - start) * threads, len(parts))
        return left

    def _from_cache(
        self, parts: list[ChunkPart], out: np.ndarray
    ) -> tuple[list[ChunkPart], dict[ChunkCoord, Hashable | None]]:
        """Copy the parts whose chunks are cached (at their unit's current version, where the
        store tells it cheaply) into ``out``; the others, and the version of each one's unit
        to cache it with."""
        cache = self.cache
        assert cache is not None
        left: list[ChunkPart] = []
        versions: dict[ChunkCoord, Hashable | None] = {}
        for unit, coords in self.store.units([p.coord for p in parts]).items():
            version = self.store.unit_version(unit)
            for c in coords:
                versions[c] = version
        for p in parts:
            entry = cache.get(p.coord)
            if entry is None or entry.version != versions[p.coord]:
                left.append(p)
                continue
            box: tuple[slice | EllipsisType, ...] = (*p.out_sel, ...)
            view = out[box]
            if entry.chunk is None:
                if not self.fill_missing:
                    raise MissingChunkError(f"{self.store.describe(p.coord)} is missing")
                view[...] = self.fill_value
            else:
                view[...] = entry.chunk[p.chunk_sel]
        return left, versions

    def _stream_decode(
        self, by_coord: dict[ChunkCoord, ChunkPart], out: np.ndarray,
        versions: dict[ChunkCoord, Hashable | None] | None = None,
    ) -> None:
        """Remote stores: every chunk of the read requested at once (the store keeps many
        requests in flight, apart from the decode threads), each decoded as its bytes
        arrive by one of ``parallel`` threads, which take them from a short queue (this
        thread stops taking chunks from the store while it is full)."""
        threads = self._threads()
        work: queue.Queue[ChunkRead | None] = queue.Queue(maxsize=2 * threads)
        failed: list[BaseException] = []

        def decode_all() -> None:
            while (item := work.get()) is not None:
                if failed:
                    continue  # (after an error: the rest is only drained)
                coord, blob, name = item
                try:
                    if blob is not None:
                        blob = self.store.decode_stored(blob, name)
                    self._decode_part(by_coord[coord], blob, name, out, versions)
                except BaseException as e:  # (raised in the caller's thread)
                    failed.append(e)

        workers = [submit(decode_all) for _ in range(threads)]
        stored = self.store.iter_stored(list(by_coord))
        try:
            fast = _fast_axis(out, by_coord)
            for item in _apart(stored, fast, 2 * threads, lambda: work.qsize() < threads):
                if failed:
                    break
                work.put(item)
        finally:
            for _ in workers:
                work.put(None)
            for worker in workers:
                worker.result()
            close = getattr(stored, "close", None)
            if close is not None:
                close()  # (a generator: its requests still in flight are cancelled)
        if failed:
            raise failed[0]

    def _fetch_then_decode(
        self, by_coord: dict[ChunkCoord, ChunkPart], out: np.ndarray, threads: int,
        versions: dict[ChunkCoord, Hashable | None] | None = None,
    ) -> None:
        """Read every chunk in this thread (one batched request per storage unit), then
        decode them on ``threads`` threads, a chunk at a time.

        For small reads: batches that each fetch then decode leave the threads locating
        and requesting their chunks at the same time, which is Python work that holds
        the GIL, while here the threads only wait on each other for decoding, which
        releases it."""
        start = time.perf_counter()
        stored = list(self.store.iter_stored(list(by_coord)))
        spent = [time.perf_counter() - start]

        def decode(item: ChunkRead) -> None:
            t = time.perf_counter()
            coord, blob, name = item
            if blob is not None:
                blob = self.store.decode_stored(blob, name)
            self._decode_part(by_coord[coord], blob, name, out, versions)
            spent.append(time.perf_counter() - t)

        run_parallel(decode, stored, threads)
        self._read_work.record(sum(spent), len(by_coord))

    def _batches(self, coords: list[ChunkCoord], threads: int) -> list[list[ChunkCoord]]:
        """Coordinates grouped by storage unit, small units combined up to a batch size
        and large ones cut into batches of that size (a batch's stored bytes are held
        while it decodes: a whole shard per thread made a full read of a one-shard
        volume peak at 1.7x its output).

        A shard's index and data are then fetched by one request per batch.  When
        that gives fewer than two batches per thread, the coordinates (still in unit
        order) are instead cut in one equal batch per thread, which keeps the
        threads equally busy.
        """
        n = len(coords)
        target = min(_MAX_BATCH, max(_MIN_BATCH, -(-n // (_BATCHES_PER_THREAD * threads))))
        batches: list[list[ChunkCoord]] = []
        current: list[ChunkCoord] = []
        for unit in self.store.units(coords).values():
            for i in range(0, len(unit), target):  # (a large unit in pieces: each batch
                members = unit[i : i + target]  # holds its stored bytes while decoding)
                if current and len(current) + len(members) > target:
                    batches.append(current)
                    current = []
                current.extend(members)
        if current:
            batches.append(current)
        if len(batches) < 2 * threads:
            flat = [c for b in batches for c in b]
            size = -(-n // min(threads, n))
            batches = [flat[i : i + size] for i in range(0, n, size)]
        return batches

    def _decode_part(
        self, p: ChunkPart, blob: bytes | memoryview | None, context: str, out: np.ndarray,
        versions: dict[ChunkCoord, Hashable | None] | None = None,
    ) -> None:
        """Decode ``p``'s box of its chunk into ``out``; with ``versions`` (a cached read),
        decode the whole chunk and keep it in the cache with its unit's version."""
        box: tuple[slice | EllipsisType, ...] = (*p.out_sel, ...)  # (in [...]: Python 3.11)
        view = out[box]  # a view also of a 0-d array (out[()] is a copy)
        if versions is not None and self.cache is not None:
            # (a claimed chunk: cached, then its claim ends, so that reads waiting for it
            # need not wait for the rest of this read)
            if blob is not None:
                chunk = self.codec.decode(blob, self.encoded_shape(p.coord), self.dtype,
                                          context=context)
                self.cache.put(p.coord, chunk, versions[p.coord])
                self.cache.release([p.coord])
                view[...] = chunk[p.chunk_sel]
                return
            self.cache.put(p.coord, None, versions[p.coord])
            self.cache.release([p.coord])
        if blob is None:
            if not self.fill_missing:
                raise MissingChunkError(f"{context} is missing")
            view[...] = self.fill_value
            return
        shape = self.encoded_shape(p.coord)
        if p.full and view.shape == shape:
            self.codec.decode(blob, shape, self.dtype, out=view, context=context)
        elif self._decodes_regions and p.is_box:
            self.codec.decode_region(  # type: ignore[attr-defined]  # a RegionCodec, see above
                blob, shape, p.chunk_sel, view, context
            )
        else:
            chunk = self.codec.decode(blob, shape, self.dtype, context=context)
            view[...] = chunk[p.chunk_sel]

    def delete_chunks(self, coords: list[ChunkCoord]) -> None:
        """Remove chunks (they then read as the fill value), and their cached copies; units
        concurrently (remote stores: up to _MAX_REMOTE_WRITERS at once)."""
        try:
            self.store.delete_chunks(
                coords, _MAX_REMOTE_WRITERS if self.store.remote else self._threads())
        finally:
            if self.cache is not None:
                self.cache.drop(coords)

    # ----------------------------------------------------------------- writing
    def write(self, sel: tuple[AxisSelection, ...], value: Any, bounded: bool = True) -> None:
        """Store ``value`` (broadcast to the selection) into the selected elements."""
        self.write_many([(sel, value)], bounded)

    def write_many(
        self, pieces: Sequence[tuple[tuple[AxisSelection, ...], Any]], bounded: bool = True
    ) -> None:
        """Store each value into its selection, every storage unit they touch updated once
        (pieces sharing a chunk are merged into it in order: the later wins where they
        overlap).  Every value is checked before anything is written."""
        members: dict[ChunkCoord, list[tuple[ChunkPart, np.ndarray]]] = {}
        for sel, value in pieces:
            arr = self.prepare_value(sel, value)
            if not bounded:
                sel, where = clip_selection(sel, self.grid)
                arr = arr[where]
            for p in chunk_parts(sel, self.grid):
                members.setdefault(p.coord, []).append((p, arr))
        if not members:
            return
        units = list(self.store.units(list(members)).items())
        threads = self._threads()
        # Units are written concurrently; a unit's chunks are encoded on several threads
        # only when there are fewer units than threads.
        inner = threads if len(units) < threads else 1

        def write_unit(item: tuple[Any, list[ChunkCoord]]) -> None:
            unit, coords = item
            self._write_unit(unit, {c: members[c] for c in coords}, inner)

        run_parallel(write_unit, units, self._writers(len(units), len(members), threads))

    def _writers(self, n_units: int, n_chunks: int, threads: int) -> int:
        """Threads writing units: more than the CPUs, so that some encode while others
        wait for their files to reach the disk (fsync) or their uploads to be answered
        (remote stores: up to _MAX_REMOTE_WRITERS), but with at most about
        _WRITE_BUFFER_BYTES (remote: _REMOTE_WRITE_BUFFER_BYTES) of units in flight."""
        unit_bytes = max(1, n_chunks // n_units) * math.prod(self.grid.chunk_shape)
        unit_bytes *= self.dtype.itemsize
        if self.store.remote:
            return max(threads, min(_MAX_REMOTE_WRITERS, _REMOTE_WRITE_BUFFER_BYTES // unit_bytes))
        return max(threads, min(_MAX_WRITERS, _WRITE_BUFFER_BYTES // unit_bytes))

    def _write_unit(
        self, unit: Any, members: dict[ChunkCoord, list[tuple[ChunkPart, np.ndarray]]],
        threads: int,
    ) -> None:
        """Encode and store one unit's chunks (fully covered ones before taking its lock);
        ``members``: the parts of each chunk, each with the array its ``out_sel`` indexes."""
        full = [c for c, parts in members.items() if self._covered(c, parts)]
        done = set(full)
        partial = [c for c in members if c not in done]
        all_chunks = None if partial else self.store.unit_chunks(unit)
        replace = all_chunks is not None and set(all_chunks) == set(members)
        blobs: dict[ChunkCoord, Blob | None] = {}
        slots = self._slots(list(members))

        def encode_full(c: ChunkCoord) -> None:
            parts = members[c]
            chunk = (self._chunk_from_value(*parts[0]) if len(parts) == 1
                     else self._merge(c, None, parts))
            blobs[c] = self._encode(c, chunk, slots.get(c))

        run_parallel(encode_full, full, threads)

        def apply() -> None:
            # the unit is read once: the partly covered chunks are merged from what it
            # holds, and the same contents are rewritten with the new chunks
            current = self.store.read_unit(unit) if partial else None
            existing = current.chunks(partial) if current else {}

            def encode_merged(c: ChunkCoord) -> None:
                blobs[c] = self._encode(c, self._merge(c, existing.get(c), members[c]),
                                        slots.get(c))

            run_parallel(encode_merged, partial, threads)
            put = {c: b for c, b in blobs.items() if b is not None}
            delete = [c for c, b in blobs.items() if b is None]
            try:
                self.store.update_unit(unit, put, delete, replace=replace, current=current)
            finally:  # (what a failed update left is not known either)
                if self.cache is not None:
                    self.cache.drop(all_chunks if replace and all_chunks else blobs)

        # Replacing a unit takes its lock too: a read-modify-write of the unit running
        # meanwhile would otherwise store its merge over the replacement, losing it.  On
        # conditional stores the lock orders this process's threads, and other writers'
        # merges are compare-and-swaps, which fail after a replacement: a merge is then
        # redone from a fresh read (with the chunks' cached copies dropped each time).
        with self.store.lock(unit):
            self.store.redo_on_conflict(unit, apply)

    def _covered(self, coord: ChunkCoord, parts: list[tuple[ChunkPart, np.ndarray]]) -> bool:
        """Whether ``parts`` together cover every in-domain element of the chunk (then
        what it held is not needed)."""
        if len(parts) == 1:
            return parts[0][0].full
        if not all(p.is_box for p, _ in parts):
            return False
        seen = np.zeros(self.grid.chunk_extent(coord), dtype=bool)
        for p, _ in parts:
            seen[p.chunk_sel] = True
        return bool(seen.all())

    def _chunk_from_value(self, p: ChunkPart, arr: np.ndarray) -> np.ndarray:
        """A fully covered chunk's array, padded with the fill value when chunks are padded."""
        piece = arr[p.out_sel]
        shape = self.encoded_shape(p.coord)
        if piece.shape == shape:
            return piece
        chunk = np.full(shape, self.fill_value, self.dtype, order=self.order)
        chunk[tuple(slice(0, n) for n in piece.shape)] = piece
        return chunk

    def _merge(
        self, coord: ChunkCoord, blob: bytes | memoryview | None,
        parts: list[tuple[ChunkPart, np.ndarray]],
    ) -> np.ndarray:
        shape = self.encoded_shape(coord)
        if blob is None:
            chunk = np.full(shape, self.fill_value, self.dtype, order=self.order)
        else:
            chunk = self.codec.decode(blob, shape, self.dtype, context=self.store.describe(coord))
            if not chunk.flags.writeable:
                chunk = chunk.copy(order="A")
        for p, arr in parts:
            chunk[p.chunk_sel] = arr[p.out_sel]
        return chunk

    def _slots(self, coords: list[ChunkCoord]) -> dict[ChunkCoord, memoryview]:
        """Where a unit's chunks are encoded, if the codec encodes into a buffer: a slot
        each of one block, which goes back to hugeblock's cache once the unit is stored
        and its chunks' views dropped.  The next unit's chunks are then encoded into pages
        already there: encoded into new bytes each, 512 zstd chunks of 256 KiB took 22,600
        page faults and 44-94 ms of system time, in slots 1,200 and 1-18 ms."""
        bound = self.codec.encoded_bound() if isinstance(self.codec, BufferCodec) else None
        if bound is None:
            return {}
        block = hugeblock.buffer(len(coords) * bound).data
        return {c: block[i * bound:(i + 1) * bound] for i, c in enumerate(coords)}

    def _encode(self, coord: ChunkCoord, chunk: np.ndarray,
                slot: memoryview | None = None) -> Blob | None:
        if self.skip_fill_chunks and is_fill(chunk, self.fill_value):
            return None
        if slot is not None:
            return cast(BufferCodec, self.codec).encode_into(chunk, slot)  # (see _slots)
        return self.codec.encode(chunk)

    def prepare_value(self, sel: tuple[AxisSelection, ...], value: Any) -> np.ndarray:
        """``value`` checked for dtype and broadcast to the selection's full-rank shape."""
        arr = cast_value(value, self.dtype)
        sel_shape = tuple(a.count for a in sel if not a.drop)
        try:
            arr = np.broadcast_to(arr, sel_shape)
        except ValueError:
            raise InvalidArgumentError(
                f"cannot write a value of shape {arr.shape} into a selection of shape {sel_shape}"
            ) from None
        return arr.reshape(tuple(a.count for a in sel))


def _fast_axis(out: np.ndarray, coords: Collection[ChunkCoord]) -> int:
    """The axis of the chunks of ``coords`` whose neighbours share pages of ``out``: the
    first in ``out``'s memory order (the first axis of a Fortran-ordered array, else the
    last) along which they span more than one chunk."""
    ndim = len(next(iter(coords), ()))
    fortran = out.flags.f_contiguous and not out.flags.c_contiguous
    for axis in range(ndim) if fortran else reversed(range(ndim)):
        if len({c[axis] for c in coords}) > 1:
            return axis
    return 0


def _apart(items: Iterator[ChunkRead], fast: int, hold: int,
           starved: Callable[[], bool]) -> Iterator[ChunkRead]:
    """``items`` reordered so that two in a row are rarely of one line of chunks along the
    ``fast`` axis: such chunks write the same pages of the output, and threads decoding
    them at once fault each page in twice (a 1 GiB jpeg read through S3 took 500
    thousand faults for 262 thousand pages).  At most ``hold`` items wait, and none
    while the decode threads are ``starved()`` (waiting on the network, say)."""
    def line(item: ChunkRead) -> tuple[int, ...]:
        coord = item[0]
        return coord[:fast] + coord[fast + 1:]

    held: deque[ChunkRead] = deque()
    last: tuple[int, ...] | None = None
    for item in items:
        held.append(item)
        while held:
            pick = next((i for i, h in enumerate(held) if line(h) != last), None)
            if pick is None and len(held) <= hold and not starved():
                break
            if pick is None:
                chosen = held.popleft()
            else:
                chosen = held[pick]
                del held[pick]
            last = line(chosen)
            yield chosen
    yield from held
