"""Shard files as bytes: the shard index, minishard indexes, and whole-shard encode/decode.

Pure functions (no I/O).  Layout written by :func:`assemble_shard`::

    [shard index: 2**minishard_bits x (start, end) uint64le, relative to its end]
    [chunk data, minishard by minishard, keys ascending within a minishard]
    [minishard indexes, one per non-empty minishard, in minishard order]

A decoded minishard index lists, for each key, the absolute byte range of its
(encoded) data.  Every offset and sum is checked: a malformed file raises
:class:`ShardFormatError` naming the file and the minishard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from shardvol._ext import minishard as _minishard
from shardvol._parallel import default_parallel, run_parallel
from shardvol.compression import DEFAULT_LEVEL, gzip_compress, gzip_decompress
from shardvol.errors import InvalidArgumentError, ShardFormatError
from shardvol.sharding.spec import ShardingSpec, as_keys

_U64 = np.dtype("<u8")
# gzip releases the GIL only around its C work, so it runs on several threads only
# when there is enough of it: at least MIN_PARALLEL_BYTES in all, and values of
# these average sizes (inflate gives the GIL up for far less time per byte).
MIN_PARALLEL_BYTES = 256 * 1024
PARALLEL_GUNZIP_BYTES = 64 * 1024
PARALLEL_GZIP_BYTES = 1024


class MinishardIndex(NamedTuple):
    """Decoded minishard index: keys strictly ascending, data at ``[starts, starts + sizes)``."""

    ids: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @property
    def ends(self) -> np.ndarray:
        return self.starts + self.sizes


EMPTY_MINISHARD = MinishardIndex(*(np.zeros(0, dtype=np.uint64) for _ in range(3)))


def decode_shard_index(buf: bytes | memoryview, spec: ShardingSpec, filename: str) -> np.ndarray:
    """The ``(num_minishards, 2)`` uint64 array of minishard index ranges (relative offsets)."""
    if len(buf) != spec.index_length:
        raise ShardFormatError(
            f"{filename}: shard index truncated: {len(buf)} bytes, expected {spec.index_length} "
            f"for minishard_bits {spec.minishard_bits}"
        )
    # a copy: a view would keep the whole buffer the index was read into (see FileStore)
    return np.frombuffer(buf, dtype=_U64).reshape(-1, 2).astype(np.uint64)


def check_minishard_ranges(
    index: np.ndarray, minishards: np.ndarray, filename: str, limit: int | None = None
) -> np.ndarray:
    """Validated ``(len(minishards), 2)`` relative ranges; ``limit`` = bytes after the index."""
    ranges = index[minishards]
    bad = ranges[:, 1] < ranges[:, 0]
    if limit is not None:
        bad |= ranges[:, 1] > np.uint64(limit)
    if bad.any():
        i = int(np.argmax(bad))
        start, end = (int(x) for x in ranges[i])
        what = "ends before it starts" if end < start else "is past the end of the file"
        raise ShardFormatError(
            f"{filename}: minishard {int(minishards[i])}: minishard index range [{start}, {end}) "
            f"(relative to the shard index end) {what}"
        )
    return ranges


def decode_minishard_index(
    buf: bytes, spec: ShardingSpec, base: int, filename: str, minishard: int
) -> MinishardIndex:
    """Decode one (possibly gzip'd) minishard index; data offsets are ``base`` + stored sums."""
    return decode_minishard_indexes([buf], spec, base, filename, [minishard])[0]


def decode_minishard_indexes(
    bufs: list, spec: ShardingSpec, base: int, filename: str, minishards: list[int]
) -> list[MinishardIndex]:
    """Decode several minishard indexes of one file at once (in C, csrc/minishard.c).

    Key deltas must sum to strictly increasing keys (a repeat is a duplicate key),
    and no sum of key deltas or of ``base`` + data offsets and sizes may exceed
    2**64 - 1.
    """
    if spec.minishard_index_encoding == "gzip":
        bufs = [
            gzip_decompress(buf, f"{filename}: minishard {m}: minishard index", ShardFormatError)
            for buf, m in zip(bufs, minishards)
        ]
    table, ends = _minishard.decode_minishard_indexes(
        bufs, base, lambda i: f"{filename}: minishard {minishards[i]}"
    )
    ids, starts, sizes = table
    out, a = [], 0
    for b in ends:
        out.append(MinishardIndex(ids[a:b], starts[a:b], sizes[a:b]) if b > a else EMPTY_MINISHARD)
        a = b
    return out


def encode_minishard_index(
    spec: ShardingSpec, ids: np.ndarray, starts: np.ndarray, sizes: np.ndarray, base: int
) -> bytes:
    """Minishard index bytes for ascending ``ids`` whose data lie at absolute ``starts``."""
    arr = np.empty((3, len(ids)), dtype=_U64)
    arr[0, 0] = ids[0]
    np.subtract(ids[1:], ids[:-1], out=arr[0, 1:])
    arr[1, 0] = starts[0] - np.uint64(base)
    np.subtract(starts[1:], starts[:-1] + sizes[:-1], out=arr[1, 1:])
    arr[2] = sizes
    raw = arr.tobytes()
    return gzip_compress(raw) if spec.minishard_index_encoding == "gzip" else raw


def encode_values(
    spec: ShardingSpec, values: list[bytes], level: int = DEFAULT_LEVEL
) -> list[bytes]:
    """Values in the shard's data encoding (gzip at ``level``, on the codec threads)."""
    if spec.data_encoding == "raw":
        return [bytes(v) for v in values]
    return _map_batched(partial(_gzip_all, level=level), values, PARALLEL_GZIP_BYTES)


def decode_values(
    spec: ShardingSpec, blobs: list, contexts: Callable[[int], str], max_size: int | None = None
) -> list[bytes]:
    """Inverse of :func:`encode_values`; ``contexts(i)`` names entry ``i`` in error messages.
    ``max_size``: gzipped values that inflate to more bytes are errors."""
    if spec.data_encoding == "raw":
        return [bytes(b) for b in blobs]
    try:
        return _map_batched(partial(_gunzip_all, max_size=max_size), blobs, PARALLEL_GUNZIP_BYTES)
    except ShardFormatError:
        for i, blob in enumerate(blobs):  # find the first bad value to name it
            gzip_decompress(blob, contexts(i), ShardFormatError, max_size=max_size)
        raise


def _map_batched(fn: Callable[[Sequence], list], items: Sequence, min_item_bytes: int) -> list:
    """``fn(items)`` for a batch -> list function, split in one batch per thread when the
    items hold enough bytes of codec work (see MIN_PARALLEL_BYTES)."""
    n = len(items)
    total = sum(map(len, items))
    threads = default_parallel()
    if n < 2 or total < MIN_PARALLEL_BYTES or total < n * min_item_bytes:
        return fn(items)
    step = -(-n // threads)
    batches = [items[i : i + step] for i in range(0, n, step)]
    results: list[list] = [[] for _ in batches]

    def run(i: int) -> None:
        results[i] = fn(batches[i])

    run_parallel(run, range(len(batches)), threads)
    return [x for r in results for x in r]


def _gzip_all(values: Sequence[bytes], level: int) -> list[bytes]:
    return [gzip_compress(v, level) for v in values]


def _gunzip_all(blobs: Sequence, max_size: int | None) -> list[bytes]:
    return [gzip_decompress(b, "data", ShardFormatError, max_size=max_size) for b in blobs]


def run_starts(x: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``x`` starts (bool mask)."""
    out = np.empty(len(x), dtype=bool)
    out[:1] = True
    np.not_equal(x[1:], x[:-1], out=out[1:])
    return out


def run_bounds(x: np.ndarray) -> list[int]:
    """Where each run of equal values of ``x`` starts, then ``len(x)``: runs are
    ``pairwise(run_bounds(x))``."""
    return [*np.flatnonzero(run_starts(x)).tolist(), len(x)]


def sort_entries(spec: ShardingSpec, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, shard numbers, minishard numbers) sorting keys by shard, minishard, key."""
    shard, minishard = spec.shard_and_minishard(keys)
    order = np.lexsort((keys, minishard, shard))
    return order, shard[order], minishard[order]


def assemble_shard(
    spec: ShardingSpec, keys: np.ndarray, minishards: np.ndarray,
    blobs: Sequence[bytes | memoryview], prefixes: Sequence[bytes | memoryview] | None = None,
) -> bytes:
    """One shard file from encoded ``blobs``; keys sorted by (minishard, key), unique.
    ``prefixes``: bytes stored just before each blob, outside its indexed range (the
    multi-resolution mesh layout keeps a label's fragment data there)."""
    return b"".join(shard_parts(spec, keys, minishards, blobs, prefixes))


def shard_parts(
    spec: ShardingSpec, keys: np.ndarray, minishards: np.ndarray,
    blobs: Sequence[bytes | memoryview], prefixes: Sequence[bytes | memoryview] | None = None,
) -> list[bytes | memoryview]:
    """The shard file of :func:`assemble_shard` as the parts it joins (the blobs are not
    copied: a store can write them without joining them)."""
    n = len(keys)
    base = spec.index_length
    index = np.zeros((spec.num_minishards, 2), dtype=_U64)
    if n == 0:
        return [index.tobytes()]
    sizes = np.fromiter(map(len, blobs), dtype=np.uint64, count=n)
    stored = sizes if prefixes is None else sizes + np.fromiter(map(len, prefixes),
                                                                dtype=np.uint64, count=n)
    ends = np.cumsum(stored, dtype=np.uint64) + np.uint64(base)
    starts = ends - sizes
    bounds = run_bounds(minishards)
    msis = [
        encode_minishard_index(spec, keys[a:b], starts[a:b], sizes[a:b], base)
        for a, b in pairwise(bounds)
    ]
    msi_sizes = np.fromiter(map(len, msis), dtype=np.uint64, count=len(msis))
    msi_ends = np.cumsum(msi_sizes, dtype=np.uint64) + (ends[-1] - np.uint64(base))
    used = minishards[bounds[:-1]]
    index[used, 0] = msi_ends - msi_sizes
    index[used, 1] = msi_ends
    body = blobs if prefixes is None else [b for pair in zip(prefixes, blobs) for b in pair]
    return [index.tobytes(), *body, *msis]


def encode_shard(
    spec: ShardingSpec, entries: dict[int, bytes], level: int = DEFAULT_LEVEL
) -> bytes:
    """The shard file holding exactly ``entries`` (``{key: value}``), all of one shard;
    gzip data encoding at ``level``."""
    keys = as_keys(list(entries))
    order, shards, minishards = sort_entries(spec, keys)
    if len(shards) and shards[0] != shards[-1]:
        raise InvalidArgumentError(
            f"encode_shard: keys belong to several shards ({spec.shard_filename(int(shards[0]))}"
            f", {spec.shard_filename(int(shards[-1]))}, ...); use synthesize_shards"
        )
    values = list(entries.values())
    blobs = encode_values(spec, [values[i] for i in order.tolist()], level)
    return assemble_shard(spec, keys[order], minishards, blobs)


Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class ShardScan:
    """A shard file parsed from its first bytes on, as they arrive: its shard index, then
    each minishard index once it is in, then each entry once its data is (the layout
    writers use puts a minishard's data before its index).  Validated as a whole file is:
    ranges within the file, keys strictly ascending per minishard, each key in the
    minishard it hashes to (so listed once)."""

    def __init__(self, spec: ShardingSpec, filename: str, size: int) -> None:
        """``size``: the bytes of the whole file."""
        self.spec, self.filename, self.size = spec, filename, size
        self.index: np.ndarray | None = None  # (see decode_shard_index)
        self._used: np.ndarray = EMPTY_MINISHARD.ids  # minishards with an index
        self._ranges: np.ndarray = EMPTY_MINISHARD.ids  # their absolute index ranges
        self._read: np.ndarray = EMPTY_MINISHARD.ids  # which of those were decoded
        empty = EMPTY_MINISHARD.ids
        self._waiting: Entries = (empty, empty, empty, empty)
        self.minishard_indexes: dict[int, MinishardIndex] = {}  # those decoded so far

    def scan(self, buf: memoryview) -> Entries:
        """``(keys, minishards, starts, ends)`` of the entries whose data lie in ``buf``, the
        file's first bytes, not given before (all of them once ``buf`` is the file)."""
        have, n = len(buf), self.spec.index_length
        if self.index is None:
            if have < min(n, self.size):
                return self._waiting
            self.index = decode_shard_index(buf[:n], self.spec, self.filename)
            self._used = np.flatnonzero(self.index[:, 1] != self.index[:, 0])
            ranges = check_minishard_ranges(self.index, self._used, self.filename, self.size - n)
            self._ranges = ranges + np.uint64(n)
            self._read = np.zeros(len(self._used), dtype=bool)
        found = [self._waiting]
        ready = ~self._read & (self._ranges[:, 1] <= np.uint64(have))
        if ready.any():
            self._read |= ready
            found.append(self._entries(buf, self._used[ready].tolist(), self._ranges[ready]))
        keys, minishards, starts, ends = (np.concatenate(a) for a in zip(*found))
        now = ends <= np.uint64(have)
        self._waiting = (keys[~now], minishards[~now], starts[~now], ends[~now])
        return keys[now], minishards[now], starts[now], ends[now]

    def _entries(self, buf: memoryview, minishards: list[int],
                 ranges: np.ndarray) -> Entries:
        """The entries listed by these minishards' indexes (at absolute ``ranges``)."""
        msis = decode_minishard_indexes([buf[a:b] for a, b in ranges.tolist()], self.spec,
                                        self.spec.index_length, self.filename, minishards)
        self.minishard_indexes.update(zip(minishards, msis))
        ids = np.concatenate([msi.ids for msi in msis])
        starts = np.concatenate([msi.starts for msi in msis])
        ends = starts + np.concatenate([msi.sizes for msi in msis])
        listed = np.repeat(np.array(minishards, dtype=np.uint64), [len(m.ids) for m in msis])
        past = ends > np.uint64(self.size)
        if past.any():
            i = int(np.argmax(past))
            raise ShardFormatError(
                f"{self.filename}: minishard {int(listed[i])}: data of key {int(ids[i])} at "
                f"[{int(starts[i])}, {int(ends[i])}) is past the end of the file ({self.size} "
                f"bytes)"
            )
        _, home = self.spec.shard_and_minishard(ids)
        stray = home != listed
        if stray.any():
            i = int(np.argmax(stray))
            raise ShardFormatError(
                f"{self.filename}: minishard {int(listed[i])}: key {int(ids[i])} belongs in "
                f"minishard {int(home[i])}"
            )
        return ids, listed, starts, ends


def shard_entries(
    spec: ShardingSpec, blob: bytes | memoryview, filename: str = "<shard>"
) -> tuple[np.ndarray, np.ndarray, list[memoryview]]:
    """(keys, minishards, stored data views) of every entry of a whole shard file, validated
    (see ShardScan).  Data stays in the shard's data encoding."""
    view = memoryview(blob)
    keys, minishards, starts, ends = ShardScan(spec, filename, len(view)).scan(view)
    return keys, minishards, [view[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def disassemble_shard(
    spec: ShardingSpec, blob: bytes | memoryview, filename: str = "<shard>"
) -> dict[int, bytes]:
    """``{key: decoded value}`` of every entry of a whole shard file."""
    keys, minishards, views = shard_entries(spec, blob, filename)
    klist = keys.tolist()
    values = decode_values(
        spec, views, lambda i: f"{filename}: minishard {int(minishards[i])}: data of key {klist[i]}"
    )
    return dict(zip(klist, values))
