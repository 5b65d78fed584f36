"""Batched reads of a sharded key-value store, with LRU caches of shard and minishard indexes.

``get_data_many`` groups keys by shard, reads each shard index once (cached),
reads only the minishard indexes it needs (cached, nearby ranges of one file in
one request), then reads the data of all keys with nearby byte ranges of a file
coalesced into one request, and decodes gzip on the codec threads
(``iter_data_many``: one value at a time, in the caller's thread).

Both layouts are read: ``<shard>.shard``, and the obsolete ``<shard>.index`` +
``<shard>.data`` pair (the ``.shard`` file is their concatenation).
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np

from shardvol.compression import gzip_decompress
from shardvol.errors import (
    ByteRangeError,
    ShardFormatError,
    VersionChangedError,
    WriteConflictError,
)
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.lru import LRU
from shardvol.sharding.format import (
    EMPTY_MINISHARD,
    MinishardIndex,
    check_minishard_ranges,
    decode_minishard_indexes,
    decode_shard_index,
    decode_values,
    disassemble_shard,
    run_bounds,
    run_starts,
)
from shardvol.sharding.spec import ShardingSpec, as_keys

# Default gaps between byte ranges read as one request: about the bytes a local
# read copies in the time one extra request costs; remote stores pay a round trip.
LOCAL_COALESCE_GAP = 16 * 1024
REMOTE_COALESCE_GAP = 1024 * 1024
DEFAULT_MAX_READ = 32 * 1024 * 1024
# Reads restart when a shard file is replaced under them; this many times at most.
_ATTEMPTS = 8
# Keys whose data positions a reader remembers at most (about 100 bytes each).
_REMEMBER_LIMIT = 1 << 16


class _Shard(NamedTuple):
    """A shard's cached index: where its minishard indexes and data live."""

    filename: str  # the <shard>.shard name, the cache key
    data_key: str  # the file holding minishard indexes and data (.shard, or obsolete .data)
    origin: int  # position in data_key of the end of the shard index
    index: np.ndarray  # (num_minishards, 2) minishard index ranges relative to origin
    version: Hashable | None = None  # data_key's version token when the index was read


class _Cached(NamedTuple):
    """A shard index cache entry: the shard (None if absent) and the store's version
    token of its data file when the index was read (None: the store cannot tell)."""

    shard: _Shard | None
    version: Hashable | None


class _Stale(Exception):
    """A shard file changed between reading its index and its data (retry)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key  # the store key of the file that changed


class _Located(NamedTuple):
    """Where the data of the found keys are (arrays over found keys, ascending key order)."""

    keys: np.ndarray
    minishards: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    file: np.ndarray  # index into files of each found key
    files: list[str]  # data files (store keys) holding the found keys
    versions: list[Hashable | None]  # each data file's version when its index was read


def obsolete_names(filename: str) -> tuple[str, str]:
    """The (``.index``, ``.data``) names of the obsolete layout of ``<shard>.shard``."""
    stem = filename[: -len(".shard")]
    return stem + ".index", stem + ".data"


def fetch_shard(store: KVStore, spec: ShardingSpec, filename: str) -> tuple[bytes | None, bool]:
    """(whole shard file bytes or None, whether it came from the obsolete layout)."""
    blob = store.get(filename)
    if blob is not None:
        return blob, False
    index_name, data_name = obsolete_names(filename)
    try:
        index = store.get(index_name, (0, spec.index_length))
    except ByteRangeError:
        index = store.get(index_name)  # shorter than a shard index: report its size
    if index is None:
        return None, False
    decode_shard_index(index, spec, index_name)
    data = store.get(data_name)
    if data is None:
        raise ShardFormatError(f"{index_name} exists but {data_name} is missing")
    return index + data, True


def read_shard(store: KVStore | str, spec: ShardingSpec, shard_number: int) -> dict[int, bytes]:
    """``{key: value}`` of every entry of one shard ({} if the shard does not exist)."""
    filename = spec.shard_filename(shard_number)
    blob, _ = fetch_shard(open_store(store), spec, filename)
    return {} if blob is None else disassemble_shard(spec, blob, filename)


class ShardReader:
    """Reads values by uint64 key from the shard files of one store (or store prefix).

    ``coalesce_gap``: byte ranges of one file closer than this are read as one
    request (at most ``max_read`` bytes); by default 16 KiB for local files and
    memory, 1 MiB for remote stores.  Caches hold shard indexes by file
    name and minishard indexes by (file name, minishard); where stores have version
    tokens, the data positions of keys read before are kept too (up to 65,536 keys),
    so that reading them again skips the index lookups while their shard's cached index
    has the same version.  ``max_value_size``: a gzip-encoded value inflating to more
    bytes is a ShardFormatError (whatever it is, it is not such a value).

    Where the store has version tokens (local files, memory, S3, HTTP), data read from a
    file that was replaced after its index was read is read again: another writer
    (thread or process) rewriting a shard never makes a reader return mixed bytes.
    On local files and memory, reads return the newest data: the data reads check the
    version of each file they read, and a cached index of a file none of whose keys
    were found is checked against it (a stat).  On S3, and HTTP(S) servers with strong
    ETags, each read carries the version of the index it relies on (``If-Match``, no
    extra requests): a cached index serves until a read finds its file replaced.  On
    other stores call :meth:`invalidate` after the shard files change.
    """

    def __init__(
        self,
        store_or_url: KVStore | str,
        spec: ShardingSpec | dict,
        shard_index_cache_size: int = 512,
        minishard_index_cache_size: int = 128,
        coalesce_gap: int | None = None,
        max_read: int = DEFAULT_MAX_READ,
        max_value_size: int | None = None,
    ) -> None:
        self.store = open_store(store_or_url)
        self.max_value_size = max_value_size
        self.spec = spec if isinstance(spec, ShardingSpec) else ShardingSpec.from_dict(spec)
        self.shard_index_cache = LRU(shard_index_cache_size)
        self.minishard_index_cache = LRU(minishard_index_cache_size)
        # where keys read before are: {shard filename: (version, data key, {key: (start,
        # size)})}; used while the shard's cached index has that version (see _remembered)
        self._where: dict[str, tuple[Hashable, str, dict[int, tuple[int, int]]]] = {}
        self._where_count = 0
        if coalesce_gap is None:
            coalesce_gap = LOCAL_COALESCE_GAP if self.store.local else REMOTE_COALESCE_GAP
        self.coalesce_gap = int(coalesce_gap)
        self.max_read = int(max_read)

    def __repr__(self) -> str:
        return f"ShardReader({self.store!r}, {self.spec})"

    # -- public API ----------------------------------------------------------------------

    def get_filename(self, key: int) -> str:
        return self.spec.filename(key)

    def invalidate(self, filename: str | None = None) -> None:
        """Forget cached indexes of ``filename`` (a ``.shard`` name), or of every file."""
        if filename is None:
            self.shard_index_cache.clear()
            self.minishard_index_cache.clear()
            self._where.clear()
        else:
            self.shard_index_cache.discard(filename)
            self.minishard_index_cache.discard_if(lambda k: k[0] == filename)
            self._where.pop(filename, None)

    def get_data(self, key: int) -> bytes | None:
        """The value of ``key``, or None if absent."""
        keys = as_keys(key)
        return self.get_data_many(keys).get(int(keys[0]))

    def get_data_many(self, keys: Iterable[int] | np.ndarray) -> dict[int, bytes]:
        """``{key: value}`` for the keys that are present (absent keys are left out)."""
        keys = as_keys(keys)
        for _ in range(_ATTEMPTS):
            try:
                loc = self._locate(keys, reading=True)
                if len(loc.keys) == 0:
                    return {}
                stored = self._read_data(loc)
            except (_Stale, ShardFormatError) as e:
                self._retry_or_raise(keys, e)
                continue
            values = decode_values(
                self.spec, stored, lambda i: _value_name(loc, i), self.max_value_size
            )
            return dict(zip(loc.keys.tolist(), values))
        raise self._conflict(keys)

    def iter_data_many(
        self, keys: Iterable[int] | np.ndarray, decode: bool = True
    ) -> Iterator[tuple[int, bytes | memoryview]]:
        """``(key, value)`` for the keys that are present, values decoded one at a time.

        For callers that use each value and drop it before taking the next: they
        hold about ``max_read`` bytes of the shard files at a time, and decode values
        still in the CPU cache.  With raw data encoding the values are read-only views
        of the bytes read (no copy).  Values come in file order, not key order.
        ``decode=False``: values as stored, for :meth:`decode_value` (on other threads).
        """
        pending = as_keys(keys)
        gzip = decode and self.spec.data_encoding == "gzip"
        for _ in range(_ATTEMPTS):
            done: list[int] = []
            try:
                loc = self._locate(pending, reading=True)
                for i, blob in self._iter_read_data(loc, group_bytes=self.max_read):
                    if gzip:
                        blob = gzip_decompress(
                            blob, _value_name(loc, i), ShardFormatError,
                            max_size=self.max_value_size,
                        )
                    done.append(int(loc.keys[i]))
                    yield done[-1], blob
                return
            except (_Stale, ShardFormatError) as e:
                self._retry_or_raise(pending, e)
                pending = np.setdiff1d(pending, np.array(done, dtype=np.uint64))
        raise self._conflict(pending)

    def decode_value(self, stored: bytes | memoryview, name: str) -> bytes | memoryview:
        """A value as :meth:`iter_data_many` gives it with ``decode=False``, decoded
        (gunzipped with gzip data encoding; ShardFormatError naming ``name``)."""
        if self.spec.data_encoding == "gzip":
            return gzip_decompress(stored, name, ShardFormatError, max_size=self.max_value_size)
        return stored

    def _locate_retrying(self, keys: np.ndarray) -> _Located:
        """:meth:`_locate`, read again while shard files change under it."""
        for _ in range(_ATTEMPTS):
            try:
                return self._locate(keys)
            except (_Stale, ShardFormatError) as e:
                self._retry_or_raise(keys, e)
        raise self._conflict(keys)

    def _retry_or_raise(self, keys: np.ndarray, error: Exception) -> None:
        """After a failed read: drop the indexes of shard files that changed meanwhile
        (the caller retries), or re-raise a ShardFormatError if none did (real damage)."""
        shards, _ = self.spec.shard_and_minishard(keys)
        changed = False
        for fn in (self.spec.shard_filename(s) for s in np.unique(shards).tolist()):
            entry = self.shard_index_cache.get(fn)
            if entry is None:
                continue
            data_key = self._data_key(fn, entry.shard)
            if isinstance(error, _Stale) and error.key == data_key or (
                not self.store.still_at(data_key, entry.version)
            ):
                self.invalidate(fn)
                changed = True
        if not changed and not isinstance(error, _Stale):
            raise error

    def _conflict(self, keys: np.ndarray) -> WriteConflictError:
        shards, _ = self.spec.shard_and_minishard(keys)
        names = sorted({self.spec.shard_filename(s) for s in shards.tolist()})
        return WriteConflictError(
            f"{self.store.url}: shard files {', '.join(names[:4])} kept changing while being "
            f"read ({_ATTEMPTS} attempts)"
        )

    def exists(self, keys: Any, return_byte_range: bool = False) -> Any:
        """Where keys are stored, CloudVolume style.

        For one key: its file name (``(file, start, length)`` with
        ``return_byte_range``), or None if absent.  For several keys: a dict of
        those answers by key.  ``file`` is the store key holding the data (the
        ``.shard`` file, or ``.data`` in the obsolete layout).
        """
        one = isinstance(keys, numbers.Integral)
        arr = as_keys(keys)
        loc = self._locate_retrying(arr)
        out: dict[int, Any] = dict.fromkeys(arr.tolist())
        for k, f, start, size in zip(
            loc.keys.tolist(), loc.file.tolist(), loc.starts.tolist(), loc.sizes.tolist()
        ):
            out[k] = (loc.files[f], start, size) if return_byte_range else loc.files[f]
        return out[int(arr[0])] if one else out

    def list_labels(self, filename: str) -> np.ndarray:
        """Every key stored in shard file ``filename``, ascending (uint64)."""
        for _ in range(_ATTEMPTS):
            shard = self._shard_infos([filename])[0].shard  # a changed file is read again
            if shard is None:
                return np.zeros(0, dtype=np.uint64)
            used = np.flatnonzero(shard.index[:, 1] != shard.index[:, 0])
            try:
                msis = self._minishard_indexes([(shard, m) for m in used.tolist()])
            except _Stale:
                continue
            ids = [msi.ids for msi in msis]
            return np.sort(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.uint64)
        raise WriteConflictError(
            f"{self.store.url}: shard file {filename} kept changing while being read "
            f"({_ATTEMPTS} attempts)"
        )

    def disassemble_shard(self, blob: bytes, filename: str = "<shard>") -> dict[int, bytes]:
        """``{key: value}`` of a whole shard file already in memory."""
        return disassemble_shard(self.spec, blob, filename)

    # -- shard indexes -------------------------------------------------------------------

    @staticmethod
    def _data_key(filename: str, shard: _Shard | None) -> str:
        """The file holding ``filename``'s data (itself unless in the obsolete layout)."""
        return shard.data_key if shard is not None else filename

    def _shard_infos(self, filenames: list[str], check: bool = True) -> list[_Cached]:
        """Shard index of each file (shard None when absent), through the cache.

        With ``check``, a cached index whose file has another version now is dropped and
        read again (else the caller checks, see :meth:`_locate`).
        """
        out: list[_Cached] = [None] * len(filenames)  # type: ignore[list-item]
        missing = []
        for i, fn in enumerate(filenames):
            entry = self.shard_index_cache.get(fn)
            # where version() cannot tell (S3, HTTP by default), versioned reads check instead
            if entry is not None and (not check or self._unchanged(fn, entry)):
                out[i] = entry
            else:
                if entry is not None:
                    self.invalidate(fn)
                missing.append(i)
        if missing:
            names = [filenames[i] for i in missing]
            for i, fn, (shard, version) in zip(missing, names, self._fetch_shard_indexes(names)):
                if shard is not None:
                    if shard.data_key != fn:
                        version = self.store.version(shard.data_key)
                    shard = shard._replace(version=version)
                out[i] = self.shard_index_cache[fn] = _Cached(shard, version)
        return out

    def _fetch_shard_indexes(
        self, filenames: list[str]
    ) -> list[tuple[_Shard | None, Hashable | None]]:
        """(shard or None if absent, the version of the file it was read from) of each."""
        n = self.spec.index_length
        requests = [(fn, (0, n)) for fn in filenames]
        with self._range_errors(requests, self._truncated_index):
            read = self.store.get_many_versioned(requests)
        out: list[tuple[_Shard | None, Hashable | None]] = []
        for fn, (blob, version) in zip(filenames, read):
            shard = None if blob is None else _Shard(fn, fn, n, decode_shard_index(blob, self.spec, fn))
            out.append((shard, version))
        absent = [i for i, (shard, _) in enumerate(out) if shard is None]
        if absent:
            names = [obsolete_names(filenames[i]) for i in absent]
            blobs = self._get_many([(idx, (0, n)) for idx, _ in names], self._truncated_index)
            for i, (idx, data), blob in zip(absent, names, blobs):
                if blob is not None:
                    shard = _Shard(filenames[i], data, 0, decode_shard_index(blob, self.spec, idx))
                    out[i] = (shard, out[i][1])
        return out

    def _truncated_index(self, key: str, size: int) -> str | None:
        if size >= self.spec.index_length:
            return None
        return (
            f"{key}: shard index truncated: file has {size} bytes, the shard index needs "
            f"{self.spec.index_length} (minishard_bits {self.spec.minishard_bits})"
        )

    # -- minishard indexes ---------------------------------------------------------------

    def _minishard_indexes(self, wanted: list[tuple[_Shard, int]]) -> list[MinishardIndex]:
        """Decoded minishard index of each (shard, minishard), through the cache (whose
        entries were checked when read; the others are checked here)."""
        out: list[MinishardIndex | None] = [None] * len(wanted)
        pending: dict[str, list[tuple[int, int, int, _Shard, int]]] = {}
        by_shard: dict[int, list[int]] = {}
        cache = self.minishard_index_cache
        for i, (shard, m) in enumerate(wanted):
            msi = cache.get((shard.filename, shard.version, m))
            if msi is not None:
                out[i] = msi
            else:
                by_shard.setdefault(id(shard), []).append(i)
        for idxs in by_shard.values():
            shard = wanted[idxs[0]][0]
            ms = np.array([wanted[i][1] for i in idxs], dtype=np.intp)
            ranges = check_minishard_ranges(shard.index, ms, shard.data_key).tolist()
            for i, m, (start, end) in zip(idxs, ms.tolist(), ranges):
                if start == end:
                    out[i] = EMPTY_MINISHARD
                else:
                    pos = shard.origin + start
                    pending.setdefault(shard.data_key, []).append(
                        (pos, pos + end - start, i, shard, m)
                    )
        if pending:
            self._fetch_minishard_indexes(pending, out)
        return out  # type: ignore[return-value]

    def _fetch_minishard_indexes(self, pending: dict, out: list) -> None:
        groups = []
        for key, items in pending.items():
            items.sort(key=lambda t: t[0])
            for run in self._coalesce([(a, b) for a, b, *_ in items]):
                groups.append((key, run, items[run.first : run.last]))
        # read only from the file its shard index was read from: else offsets may lie
        blobs = self._get_many(
            [(key, (run.start, run.stop)) for key, run, _ in groups],
            lambda key, size: _first_past_end(
                key, size, ((a, b, m, "minishard index") for a, b, _, _, m in pending[key])
            ),
            {key: items[0][3].version for key, items in pending.items()},
        )
        decoded: dict[str, tuple[list, list]] = {}
        for (key, run, items), blob in zip(groups, blobs):
            if blob is None:
                raise ShardFormatError(
                    f"{key}: file disappeared while reading its minishard indexes"
                )
            view = memoryview(blob)
            bufs, metas = decoded.setdefault(key, ([], []))
            for a, b, i, shard, m in items:
                bufs.append(view[a - run.start : b - run.start])
                metas.append((i, shard, m))
        for key, (bufs, metas) in decoded.items():
            shard = metas[0][1]
            msis = decode_minishard_indexes(
                bufs, self.spec, shard.origin, key, [m for _, _, m in metas]
            )
            for (i, shard, m), msi in zip(metas, msis):
                # keyed by version: an index read from an older file never serves a newer one
                self.minishard_index_cache[(shard.filename, shard.version, m)] = msi
                out[i] = msi

    # -- lookup --------------------------------------------------------------------------

    def _locate(self, keys: Any, reading: bool = False) -> _Located:
        """Find the data byte ranges of the present keys among ``keys``.

        ``reading``: the caller reads the data found, with versioned reads, which check
        the files they read; cached indexes are then checked against their files (a
        stat each) only for files none of whose keys were found (raising _Stale).
        """
        keys = np.sort(as_keys(keys))
        keys = keys[run_starts(keys)]
        shard_no, minishard = self.spec.shard_and_minishard(keys)
        if reading and self._where:
            known = self._remembered(keys, shard_no, minishard)
            if known is not None:
                return known
        mb = np.uint64(self.spec.minishard_bits)
        # (shard, minishard) as one uint64: shard_bits + minishard_bits <= 64
        group_key = (shard_no << mb) | minishard
        order = np.argsort(group_key)
        sorted_groups = group_key[order]
        new = run_starts(sorted_groups)
        group_of_key = np.empty(len(keys), dtype=np.uint64)
        group_of_key[order] = np.cumsum(new) - 1
        g_shard = shard_no[order][new]
        g_minishard = minishard[order][new].tolist()
        ushards, g_shard_idx = np.unique(g_shard, return_inverse=True)
        files = [self.spec.shard_filename(s) for s in ushards.tolist()]
        cached = self._shard_infos(files, check=not reading)
        infos = [c.shard for c in cached]
        present = [g for g, s in enumerate(g_shard_idx.tolist()) if infos[s] is not None]
        g_info = [infos[s] for s in g_shard_idx.tolist()]
        msis = self._minishard_indexes([(g_info[g], g_minishard[g]) for g in present])
        counts = np.fromiter((len(msi.ids) for msi in msis), dtype=np.intp, count=len(msis))
        if counts.sum() == 0:
            if reading:
                self._check_unread(files, cached, set())
            empty = np.zeros(0, dtype=np.uint64)
            return _Located(empty, empty, empty, empty, empty.astype(np.intp), [], [])
        e_group = np.repeat(np.array(present, dtype=np.uint64), counts)
        e_ids = np.concatenate([msi.ids for msi in msis])
        # entries are sorted by (group, key): a lexicographic search finds each key in its group
        composite_entries = _composite(e_group, e_ids)
        pos = np.searchsorted(composite_entries, _composite(group_of_key, keys))
        pos_ok = np.minimum(pos, len(e_ids) - 1)
        hit = (pos < len(e_ids)) & (e_ids[pos_ok] == keys) & (e_group[pos_ok] == group_of_key)
        e = pos[hit]
        hit_group = group_of_key[hit].astype(np.intp)
        starts = np.concatenate([msi.starts for msi in msis])[e]
        sizes = np.concatenate([msi.sizes for msi in msis])[e]
        if reading:
            read = g_shard_idx[hit_group]
            self._check_unread(files, cached, set(read.tolist()))
            self._remember(files, cached, read, keys[hit], starts, sizes)
        data_files: dict[str, int] = {}
        versions: list[Hashable | None] = []
        info_file = []
        for s in g_shard_idx.tolist():
            info = infos[s]
            if info is None:
                info_file.append(-1)
            elif info.data_key not in data_files:
                data_files[info.data_key] = len(versions)
                versions.append(cached[s].version)
                info_file.append(data_files[info.data_key])
            else:
                info_file.append(data_files[info.data_key])
        file_of_group = np.array(info_file, dtype=np.intp)
        return _Located(
            keys[hit],
            minishard[hit],
            starts,
            sizes,
            file_of_group[hit_group],
            list(data_files),
            versions,
        )

    def _check_unread(self, files: list[str], cached: list[_Cached], read: set[int]) -> None:
        """Raise _Stale if a file (by number in ``files``) not in ``read`` has another
        version than its cached index (or, absent, exists now)."""
        for s, (fn, entry) in enumerate(zip(files, cached)):
            if s not in read and not self._unchanged(fn, entry):
                raise _Stale(self._data_key(fn, entry.shard))

    def _unchanged(self, filename: str, entry: _Cached) -> bool:
        """Whether the file a cached shard index was read from still has its version."""
        return self.store.still_at(self._data_key(filename, entry.shard), entry.version)

    def _remember(self, files: list[str], cached: list[_Cached], read: np.ndarray,
                  keys: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> None:
        """Keep where the found keys are (files by number ``read``), for _remembered."""
        if self._where_count + len(keys) > _REMEMBER_LIMIT:
            self._where.clear()
            self._where_count = 0
        for s, k, a, n in zip(read.tolist(), keys.tolist(), starts.tolist(), sizes.tolist()):
            fn, entry = files[s], cached[s]
            if entry.version is None or entry.shard is None:
                continue  # the store cannot tell versions: nothing to check it against
            table = self._where.get(fn)
            if table is None or table[0] != entry.version:
                table = self._where[fn] = (entry.version, entry.shard.data_key, {})
            if k not in table[2]:
                table[2][k] = (a, n)
                self._where_count += 1

    def _remembered(
        self, keys: np.ndarray, shard_no: np.ndarray, minishard: np.ndarray
    ) -> _Located | None:
        """:meth:`_locate` of sorted distinct ``keys`` from where reads found them before,
        or None unless every key was found in a shard whose cached index still has the
        version it had then (its reads then check that version, as any read does)."""
        tables: dict[int, tuple[int, dict[int, tuple[int, int]]]] = {}
        data_keys: list[str] = []
        versions: list[Hashable | None] = []
        starts, sizes, file = [], [], []
        for k, s in zip(keys.tolist(), shard_no.tolist()):
            found = tables.get(s)
            if found is None:
                fn = self.spec.shard_filename(s)
                table = self._where.get(fn)
                entry = self.shard_index_cache.get(fn)
                if table is None or entry is None or entry.version != table[0]:
                    return None
                found = tables[s] = (len(data_keys), table[2])
                data_keys.append(table[1])
                versions.append(table[0])
            where = found[1].get(k)
            if where is None:
                return None
            starts.append(where[0])
            sizes.append(where[1])
            file.append(found[0])
        return _Located(
            keys,
            minishard,
            np.array(starts, dtype=np.uint64),
            np.array(sizes, dtype=np.uint64),
            np.array(file, dtype=np.intp),
            data_keys,
            versions,
        )

    # -- data ----------------------------------------------------------------------------

    def _read_data(self, loc: _Located) -> list[memoryview]:
        """The stored bytes of each located key (views into coalesced reads)."""
        out: list[memoryview] = [None] * len(loc.keys)  # type: ignore[list-item]
        for i, view in self._iter_read_data(loc, group_bytes=None):
            out[i] = view
        return out

    def _iter_read_data(
        self, loc: _Located, group_bytes: int | None
    ) -> Iterator[tuple[int, memoryview]]:
        """``(i, stored bytes of the i-th located key)`` (views into coalesced reads).

        The requests are sent concurrently in groups of about ``group_bytes`` (all at
        once if None), so that a caller dropping the views as it goes holds about that
        much at a time."""
        if len(loc.keys) == 0:
            return
        ends = loc.starts + loc.sizes
        order = np.lexsort((loc.starts, loc.file))
        file_sorted = loc.file[order]
        bounds = run_bounds(file_sorted)
        requests, placements = [], []
        for a, b in pairwise(bounds):
            key = loc.files[file_sorted[a]]
            idx = order[a:b]
            for run in self._coalesce(list(zip(loc.starts[idx].tolist(), ends[idx].tolist()))):
                placements.append((idx[run.first : run.last], run.start))
                requests.append((key, (run.start, run.stop)))

        def explain(key: str, size: int) -> str | None:
            return _first_past_end(
                key,
                size,
                (
                    (int(loc.starts[i]), int(ends[i]), int(loc.minishards[i]), f"data of key {k}")
                    for i, k in enumerate(loc.keys.tolist())
                    if loc.files[loc.file[i]] == key
                ),
            )

        starts, sizes = loc.starts.tolist(), loc.sizes.tolist()
        version_of = dict(zip(loc.files, loc.versions))
        for first, last in _request_groups(requests, group_bytes):
            group = requests[first:last]  # only from the files the index was read from
            blobs = self._get_many(group, explain, {k: version_of[k] for k, _ in group})
            for (key, _), (idx, base), blob in zip(group, placements[first:last], blobs):
                if blob is None:
                    raise ShardFormatError(f"{key}: file disappeared while reading its data")
                view = memoryview(blob)
                for i in idx.tolist():
                    a = starts[i] - base
                    yield i, view[a : a + sizes[i]]
            del blobs, blob, view  # this group's bytes go before the next group is read


    # -- I/O helpers ---------------------------------------------------------------------

    def _coalesce(self, ranges: list[tuple[int, int]]) -> list[_Run]:
        """Runs of consecutive sorted ``ranges`` to read as one request each."""
        runs: list[_Run] = []
        gap, max_read = self.coalesce_gap, self.max_read
        first, start, stop = 0, None, 0
        for i, (a, b) in enumerate(ranges):
            if start is not None and (a > stop + gap or max(stop, b) - start > max_read):
                runs.append(_Run(first, i, start, stop))
                start = None
            if start is None:
                first, start, stop = i, a, b
            elif b > stop:
                stop = b
        if start is not None:
            runs.append(_Run(first, len(ranges), start, stop))
        return runs

    def _get_many(
        self,
        requests: list,
        explain: Callable[[str, int], str | None],
        versions: Mapping[str, Hashable | None] | None = None,
    ) -> list[bytes | None]:
        """store.get_many (get_many_if with ``versions``: a file of another version
        raises _Stale); a range past a file's end becomes a ShardFormatError whose message
        ``explain(key, file size)`` writes."""
        with self._range_errors(requests, explain):
            if versions is None:
                return self.store.get_many(requests)
            try:
                return self.store.get_many_if(requests, versions)
            except VersionChangedError as e:
                raise _Stale(e.key) from e

    @contextlib.contextmanager
    def _range_errors(
        self, requests: list, explain: Callable[[str, int], str | None]
    ) -> Iterator[None]:
        """A ByteRangeError of the reads inside becomes a ShardFormatError (see _get_many)."""
        try:
            yield
        except ByteRangeError as e:
            for key in dict.fromkeys(k for k, _ in requests):
                size = self.store.size(key)
                message = None if size is None else explain(key, size)
                if message is not None:
                    raise ShardFormatError(message) from e
            raise ShardFormatError(f"shard file shorter than its index says: {e}") from e


def _request_groups(requests: list, group_bytes: int | None) -> list[tuple[int, int]]:
    """``[first, last)`` slices of ``requests`` ``(key, (start, stop))`` of about
    ``group_bytes`` each (at least one request; one slice of all if None)."""
    if group_bytes is None:
        return [(0, len(requests))] if requests else []
    groups, first, total = [], 0, 0
    for i, (_, (start, stop)) in enumerate(requests):
        if i > first and total + stop - start > group_bytes:
            groups.append((first, i))
            first, total = i, 0
        total += stop - start
    if requests:
        groups.append((first, len(requests)))
    return groups


def _value_name(loc: _Located, i: int) -> str:
    """How error messages name the data of the ``i``-th located key."""
    file, minishard = loc.files[loc.file[i]], int(loc.minishards[i])
    return f"{file}: minishard {minishard}: data of key {loc.keys[i]}"


def _first_past_end(key: str, size: int, ranges: Iterable) -> str | None:
    """Message for the first (start, stop, minishard, what) of ``ranges`` ending past ``size``."""
    for start, stop, minishard, what in ranges:
        if stop > size:
            return (
                f"{key}: minishard {minishard}: {what} at [{start}, {stop}) is past the end of "
                f"the file ({size} bytes)"
            )
    return None


class _Run(NamedTuple):
    first: int  # index of the run's first range
    last: int  # one past its last range
    start: int
    stop: int


def _composite(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """(high, low) uint64 pairs as 16-byte big-endian records, which sort lexicographically."""
    out = np.empty((len(high), 2), dtype=">u8")
    out[:, 0] = high
    out[:, 1] = low
    return out.view("V16").reshape(-1)
