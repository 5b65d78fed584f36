"""Writing shard files: whole shards at once, or read-modify-write updates of existing shards.

Every shard file is replaced atomically (``store.set``).  ``update_shard`` holds
``store.write_lock(<shard file>)`` around its read-modify-write, so concurrent updates
of one shard (threads or processes, as far as the store's lock reaches) lose
nothing; on stores with conditional writes (S3) that lock orders this process's threads
only, and the rewrite is a compare-and-swap, redone from a fresh read when another
writer changed the shard since it was read (see :mod:`shardvol.kvstore.cas`).  A
``reader`` passed to these functions has its cached indexes of the rewritten files
invalidated.  ``level``: the gzip level of values written with gzip data encoding
(values kept from a shard are not re-encoded).

Prefixes: a value may carry bytes stored just before it, outside its indexed range (the
multi-resolution mesh layout keeps a label's fragment data there).  ``update_shard`` keeps
the prefixes of the entries it does not touch when it is told where they start
(``prefix_start``) and writes those of ``prefixes`` before the values it puts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from shardvol.compression import DEFAULT_LEVEL
from shardvol.errors import ShardFormatError
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.base import io_pool
from shardvol.kvstore.cas import redo_on_conflict, write_if
from shardvol.sharding.format import (
    ShardScan,
    assemble_shard,
    encode_values,
    run_bounds,
    shard_parts,
    sort_entries,
)
from shardvol.sharding.reader import ShardReader, fetch_shard, obsolete_names
from shardvol.sharding.spec import ShardingSpec, as_keys


def synthesize_shards(
    spec: ShardingSpec, data: dict[int, bytes], level: int = DEFAULT_LEVEL
) -> dict[str, bytes]:
    """``{filename: shard file bytes}`` holding exactly ``data``; keys sorted per minishard."""
    keys = as_keys(list(data))
    values = list(data.values())
    order, shards, minishards = sort_entries(spec, keys)
    blobs = encode_values(spec, [values[i] for i in order.tolist()], level)
    keys = keys[order]
    bounds = run_bounds(shards)
    return {
        spec.shard_filename(int(shards[a])): assemble_shard(
            spec, keys[a:b], minishards[a:b], blobs[a:b]
        )
        for a, b in pairwise(bounds)
    }


def write_shards(
    store: KVStore | str,
    spec: ShardingSpec,
    data: dict[int, bytes],
    reader: ShardReader | None = None,
    level: int = DEFAULT_LEVEL,
) -> list[str]:
    """Write the shard files holding ``data``, replacing those files entirely.

    Shards that ``data`` does not touch are left alone (as are obsolete-layout
    ``.index``/``.data`` files, which readers ignore once the ``.shard`` exists).
    Returns the file names written.  Call from outside the store I/O pool.
    """
    store = open_store(store)
    files = synthesize_shards(spec, data, level)
    list(io_pool().map(lambda item: store.set(*item), files.items()))
    if reader is not None:
        for fn in files:
            reader.invalidate(fn)
    return sorted(files)


#: Where the prefix of a stored entry starts: ``(key, its stored value, the value's start
#: in the shard file, the file's name)`` -> a position at or before that start.
PrefixStart = Callable[[int, memoryview, int, str], int]


def update_shard(
    store: KVStore | str,
    spec: ShardingSpec,
    put: dict[int, bytes],
    delete: Iterable[int] = (),
    reader: ShardReader | None = None,
    level: int = DEFAULT_LEVEL,
    prefixes: Mapping[int, bytes] | None = None,
    prefix_start: PrefixStart | None = None,
) -> list[str]:
    """Store ``put`` and remove ``delete`` (applied first) in the existing shard files.

    Each touched shard is read, changed and rewritten atomically under
    ``store.write_lock(filename)`` (by compare-and-swap on stores with conditional
    writes); entries not named are kept as stored (not re-encoded).  A shard left empty
    is deleted.  Returns the touched file names.
    """
    store = open_store(store)
    put_keys = as_keys(list(put))
    del_keys = np.unique(as_keys(list(delete)))
    put_blobs = encode_values(spec, list(put.values()), level)
    put_shard, _ = spec.shard_and_minishard(put_keys)
    del_shard, _ = spec.shard_and_minishard(del_keys)
    touched = []
    for shard in np.union1d(put_shard, del_shard).tolist():
        in_put = np.flatnonzero(put_shard == shard)
        fn = spec.shard_filename(shard)
        puts = {int(put_keys[i]): put_blobs[i] for i in in_put.tolist()}
        gone = del_keys[del_shard == shard].tolist()

        def attempt(shard: int = shard, puts: dict = puts, gone: list = gone) -> None:
            current = read_entries(store, spec, shard, store.conditional_writes, prefix_start)
            _rewrite(store, spec, shard, puts, gone, current, prefixes)

        with store.write_lock(fn):
            if store.conditional_writes:
                redo_on_conflict(attempt, store.conflict_timeout, f"{store.url}/{fn}")
            else:
                attempt()
        if reader is not None:
            reader.invalidate(fn)
        touched.append(fn)
    return touched


class ShardEntries(NamedTuple):
    """What one shard file held when read: its entries (values as stored, in the data
    encoding) and whether it came from the obsolete ``.index`` + ``.data`` layout; if
    ``checked`` (read with its version, from a store with conditional writes), the
    ``.shard`` file's ``version`` (None: absent), which its rewrite must still find."""

    entries: dict[int, bytes | memoryview]
    obsolete: bool
    version: Hashable | None = None
    checked: bool = False
    prefixes: dict[int, bytes | memoryview] | None = None  # (read with prefix_start)


def read_entries(store: KVStore, spec: ShardingSpec, shard: int, versioned: bool = False,
                 prefix_start: PrefixStart | None = None) -> ShardEntries:
    """The entries of one shard file (none if it does not exist), checked to belong there;
    ``versioned``: with the file's version, for a compare-and-swap rewrite (stores with
    conditional writes); ``prefix_start``: with each entry's prefix."""
    fn = spec.shard_filename(shard)
    blob, obsolete, version = fetch_shard(store, spec, fn, versioned)
    if blob is None:
        return ShardEntries({}, False, None, versioned, {} if prefix_start else None)
    whole = memoryview(blob).cast("B")
    keys, _, starts, ends = ShardScan(spec, fn, len(whole)).scan(whole)
    home, _ = spec.shard_and_minishard(keys)
    if (home != np.uint64(shard)).any():
        k = int(keys[np.argmax(home != np.uint64(shard))])
        raise ShardFormatError(f"{fn}: key {k} belongs in {spec.filename(k)}")
    entries: dict[int, bytes | memoryview] = {}
    found: dict[int, bytes | memoryview] | None = None if prefix_start is None else {}
    for k, a, b in zip(keys.tolist(), starts.tolist(), ends.tolist()):
        entries[k] = whole[a:b]
        if found is not None and prefix_start is not None:
            begin = prefix_start(k, whole[a:b], a, fn)
            if not spec.index_length <= begin <= a:
                raise ShardFormatError(f"{fn}: the prefix of key {k} starts at byte {begin}, "
                                       "outside the file's data before it")
            found[k] = whole[begin:a]
    return ShardEntries(entries, obsolete, version, versioned, found)


def rewrite_shard(
    store: KVStore,
    spec: ShardingSpec,
    shard: int,
    put: dict[int, bytes],
    delete: Iterable[int] = (),
    level: int = DEFAULT_LEVEL,
    current: ShardEntries | None = None,
) -> None:
    """Read-modify-write of one shard file; the caller holds ``store.write_lock(filename)``.

    ``put`` values are raw (encoded here per ``data_encoding``); entries not
    named are kept as stored.  A shard left empty is deleted.  ``current``: the shard as
    :func:`read_entries` read it under the same lock (else it is read here); if read
    with its version, the file is rewritten only if still at it, else UnitChangedError
    (read it again and redo).
    """
    blobs = encode_values(spec, list(put.values()), level)
    _rewrite(store, spec, shard, dict(zip(put, blobs)), [int(k) for k in delete], current)


def _rewrite(
    store: KVStore,
    spec: ShardingSpec,
    shard: int,
    put: dict[int, bytes],
    delete: list[int],
    current: ShardEntries | None = None,
    put_prefixes: Mapping[int, bytes] | None = None,
) -> None:
    """One shard's read-modify-write (the caller holds the lock); put values are encoded."""
    fn = spec.shard_filename(shard)
    if current is None:
        current = read_entries(store, spec, shard)
    entries = dict(current.entries)
    prefixes: dict[int, bytes | memoryview] = dict(current.prefixes or {})
    for k in delete:
        entries.pop(k, None)
        prefixes.pop(k, None)
    entries.update(put)
    prefixes.update({k: (put_prefixes or {}).get(k, b"") for k in put})
    if entries:
        keys = as_keys(list(entries))
        values = list(entries.values())
        order, _, minishards = sort_entries(spec, keys)
        ordered = keys[order].tolist()
        # (the shard's parts: a store writes them without joining them into a copy)
        parts = shard_parts(spec, keys[order], minishards, [values[i] for i in order.tolist()],
                            [prefixes.get(k, b"") for k in ordered]
                            if any(prefixes.values()) else None)
        if current.checked:
            write_if(store, fn, parts, current.version)
        else:
            store.set_parts(fn, parts)
    elif current.checked:
        write_if(store, fn, None, current.version)
    else:
        store.delete(fn)
    if current.obsolete or not entries:  # an obsolete pair left behind would be read again
        for name in obsolete_names(fn):
            store.delete(name)


class ShardWriter:
    """Collects puts and deletes, then merges them into the shards with :func:`update_shard`
    on :meth:`flush` (or on leaving a ``with`` block without an exception)."""

    def __init__(
        self,
        store: KVStore | str,
        spec: ShardingSpec,
        reader: ShardReader | None = None,
        level: int = DEFAULT_LEVEL,
    ) -> None:
        self.store = open_store(store)
        self.spec = spec
        self.reader = reader
        self.level = level
        self._put: dict[int, bytes] = {}
        self._delete: set[int] = set()

    def put(self, key: int, value: bytes) -> None:
        k = int(as_keys(key)[0])
        self._delete.discard(k)
        self._put[k] = bytes(value)

    def delete(self, key: int) -> None:
        k = int(as_keys(key)[0])
        self._put.pop(k, None)
        self._delete.add(k)

    def flush(self) -> list[str]:
        """Write what was collected; returns the shard files written."""
        put, delete = self._put, self._delete
        self._put, self._delete = {}, set()
        return update_shard(self.store, self.spec, put, delete, self.reader, self.level)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()
