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

import numbers
import threading
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from shardvol._parallel import carry
from shardvol.compression import gzip_decompress
from shardvol.errors import ByteRangeError, ShardFormatError, ShardvolError, VersionChangedError
from shardvol.kvstore import KVStore, open_store
from shardvol.kvstore.lru import LRU
from shardvol.kvstore.shards import (
    ATTEMPTS,
    DEFAULT_MAX_READ,
    RangeReader,
    Stale,
    Versioned,
    conflict,
    retrying,
)
from shardvol.sharding.format import (
    EMPTY_MINISHARD,
    MinishardIndex,
    ShardScan,
    check_minishard_ranges,
    decode_minishard_indexes,
    decode_shard_index,
    decode_values,
    disassemble_shard,
    run_starts,
)
from shardvol.sharding.spec import ShardingSpec, as_keys

# Default gaps between byte ranges read as one request: about the bytes a local
# read copies in the time one extra request costs; remote stores pay a round trip.
LOCAL_COALESCE_GAP = 16 * 1024
# Remote reads fetch all the minishard indexes of a shard once they have those they need,
# when there are at most this many, of at most this many bytes (see ShardReader._fetch_later).
ALL_MINISHARDS_COUNT = 64
ALL_MINISHARDS_BYTES = 1 << 20
REMOTE_COALESCE_GAP = 1024 * 1024
# Keys whose data positions a reader remembers at most (about 100 bytes each).
_REMEMBER_LIMIT = 1 << 16


class _Shard(NamedTuple):
    """A shard's cached index: where its minishard indexes and data live."""

    filename: str  # the <shard>.shard name, the cache key
    data_key: str  # the file holding minishard indexes and data (.shard, or obsolete .data)
    origin: int  # position in data_key of the end of the shard index
    ranges: np.ndarray  # (num_minishards, 2) minishard index ranges relative to origin
    version: Hashable | None = None  # data_key's version token when the index was read


class _Located(NamedTuple):
    """Where the data of the found keys are (arrays over found keys, ascending key order)."""

    keys: np.ndarray
    minishards: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    file: np.ndarray  # index into files of each found key
    files: list[str]  # data files (store keys) holding the found keys
    versions: list[Hashable | None]  # each data file's version when its index was read
    # (remote stores) other minishard indexes of the shards read, to fetch after the read
    later: tuple[tuple[_Shard, int], ...] = ()


def obsolete_names(filename: str) -> tuple[str, str]:
    """The (``.index``, ``.data``) names of the obsolete layout of ``<shard>.shard``."""
    stem = filename[: -len(".shard")]
    return stem + ".index", stem + ".data"


def delete_shards(store: KVStore, filenames: Sequence[str]) -> None:
    """Delete ``<hex>.shard`` files and their obsolete ``.index``/``.data`` pairs, at once on
    remote stores, the ``.data`` files last: a delete cut short never leaves an ``.index``
    without its ``.data``, which reads refuse (a ``.data`` alone is no shard)."""
    pairs = [obsolete_names(f) for f in filenames]
    store.delete_many([*filenames, *(index for index, _ in pairs)])
    store.delete_many([data for _, data in pairs])


def shard_files(store: KVStore) -> list[str]:
    """The ``<hex>.shard`` files in the top directory of ``store``, also those stored in
    the obsolete ``.index``/``.data`` layout (named as ``.shard``), sorted."""
    names = set()
    for key in store.list():
        stem, dot, ext = key.rpartition(".")
        if dot and ext in ("shard", "index") and "/" not in stem and stem and all(
                c in "0123456789abcdef" for c in stem):
            names.add(f"{stem}.shard")
    return sorted(names)


def fetch_shard(
    store: KVStore, spec: ShardingSpec, filename: str, versioned: bool = False
) -> tuple[bytes | memoryview | None, bool, Hashable | None]:
    """(whole shard file bytes or None, whether it came from the obsolete layout, and with
    ``versioned`` the version of the ``.shard`` file read (KVStore.get_versioned; None if
    it is absent), else None)."""
    if versioned:
        blob, version = store.get_versioned(filename)
    else:
        blob, version = store.get(filename), None
    if blob is not None:
        return blob, False, version
    index_name, data_name = obsolete_names(filename)
    try:
        index = store.get(index_name, (0, spec.index_length))
    except ByteRangeError:
        index = store.get(index_name)  # shorter than a shard index: report its size
    if index is None:
        return None, False, None
    decode_shard_index(index, spec, index_name)
    data = store.get(data_name)
    if data is None:
        raise ShardFormatError(f"{index_name} exists but {data_name} is missing")
    return index + data, True, None


def read_shard(store: KVStore | str, spec: ShardingSpec, shard_number: int) -> dict[int, bytes]:
    """``{key: value}`` of every entry of one shard ({} if the shard does not exist)."""
    filename = spec.shard_filename(shard_number)
    blob, _, _ = fetch_shard(open_store(store), spec, filename)
    return {} if blob is None else disassemble_shard(spec, blob, filename)


class ShardReader:
    """Reads values by uint64 key from the shard files of one store (or store prefix).

    ``coalesce_gap``: byte ranges of one file closer than this are read as one
    request (at most ``max_read`` bytes); by default 16 KiB for local files and
    memory, 1 MiB for remote stores.  Caches hold shard indexes by file
    name and minishard indexes by (file name, minishard); where stores have version
    tokens, the data positions of keys read before are kept too (up to 65,536 keys),
    so that reading them again skips the index lookups while their shard's cached index
    has the same version.  On remote stores, once a read has its data, the other minishard
    indexes of the shards it touched are fetched in the background (up to 64 a shard), so
    that later reads of those shards take one round trip.  ``max_value_size``: a
    gzip-encoded value inflating to more bytes is a ShardFormatError (whatever it is, it
    is not such a value).

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
        self.shard_index_cache: LRU[str] = LRU(shard_index_cache_size)
        #: (shard file name, its version, minishard) -> MinishardIndex
        self.minishard_index_cache: LRU[tuple[str, Hashable | None, int]] = LRU(
            minishard_index_cache_size
        )
        # where keys read before are: {shard filename: (version, data key, {key: (start,
        # size)})}; used while the shard's cached index has that version (see _remembered)
        self._where: dict[str, tuple[Hashable, str, dict[int, tuple[int, int]]]] = {}
        self._where_count = 0
        self._listeners: list[Callable[[str], None]] = []
        if coalesce_gap is None:
            coalesce_gap = LOCAL_COALESCE_GAP if self.store.local else REMOTE_COALESCE_GAP
        self.coalesce_gap = int(coalesce_gap)
        self.max_read = int(max_read)
        self._ranges = RangeReader(self.store, self.coalesce_gap, self.max_read)
        #: (file name, version, minishard) of the indexes fetched after reads, under way
        self._fetching: set[tuple[str, Hashable | None, int]] = set()

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

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_listeners"] = []  # (the handles that listen live in this process)
        state["_fetching"] = set()  # (the fetches under way, too)
        return state

    def on_replaced(self, listener: Callable[[str], None]) -> None:
        """Have ``listener(filename)`` called when a read finds that shard file replaced
        since its cached index was read (by another writer)."""
        self._listeners.append(listener)

    def replaced(self, filename: str) -> None:
        """Shard file ``filename`` was found replaced by another writer: its cached indexes
        go, and the listeners (see :meth:`on_replaced`) are told."""
        self.invalidate(filename)
        for listener in self._listeners:
            listener(filename)

    def get_data(self, key: int) -> bytes | None:
        """The value of ``key``, or None if absent."""
        keys = as_keys(key)
        return self.get_data_many(keys).get(int(keys[0]))

    def get_data_many(self, keys: Iterable[int] | np.ndarray) -> dict[int, bytes]:
        """``{key: value}`` for the keys that are present (absent keys are left out)."""
        keys = as_keys(keys)

        def read() -> tuple[_Located, list[memoryview]]:
            loc = self._locate(keys, reading=True)
            return loc, self._read_data(loc)

        loc, stored = retrying(read, lambda e: self._drop_changed(keys, e), self._what(keys))
        self._fetch_later(loc.later)
        if len(loc.keys) == 0:
            return {}
        values = decode_values(
            self.spec, stored, lambda i: _value_name(loc, i), self.max_value_size
        )
        return dict(zip(loc.keys.tolist(), values))

    def iter_data_many(
        self, keys: Iterable[int] | np.ndarray, decode: bool = True,
        whole: Mapping[int, int] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview]]:
        """``(key, value)`` for the keys that are present, values decoded one at a time.

        For callers that use each value and drop it before taking the next: they
        hold about ``max_read`` bytes of the shard files at a time, and decode values
        still in the CPU cache.  With raw data encoding the values are read-only views
        of the bytes read (no copy).  Values come in file order, not key order.
        ``decode=False``: values as stored, for :meth:`decode_value` (on other threads).
        ``whole``: shard numbers (and the bytes each is expected to hold) whose files are
        read whole, one request each, for callers that want most of their keys from a
        remote store (no index round trips first); their shard indexes are cached.
        """
        pending = as_keys(keys)
        if whole:
            shards, _ = self.spec.shard_and_minishard(pending)
            mine = np.isin(shards, np.array(list(whole), dtype=np.uint64))
            left = yield from self._iter_whole(pending[mine], whole, decode)
            pending = np.concatenate([pending[~mine], left])
        gzip = decode and self.spec.data_encoding == "gzip"
        blob: bytes | memoryview
        for _ in range(ATTEMPTS):
            done: list[int] = []
            try:
                loc = self._locate(pending, reading=True)
                for i, blob in self._iter_read_data(loc, group_bytes=self.max_read):
                    if gzip:
                        blob = self.decode_value(blob, _value_name(loc, i))
                    done.append(int(loc.keys[i]))
                    yield done[-1], blob
                self._fetch_later(loc.later)
                return
            except (Stale, ShardFormatError) as e:
                if not self._drop_changed(pending, e) and not isinstance(e, Stale):
                    raise
                pending = np.setdiff1d(pending, np.array(done, dtype=np.uint64))
        raise conflict(self._what(pending))

    def _iter_whole(
        self, keys: np.ndarray, whole: Mapping[int, int], decode: bool
    ) -> Generator[tuple[int, bytes | memoryview], None, np.ndarray]:
        """``(key, value)`` of the present ``keys``, from their shard files read whole (all
        requested at once, within the store's window, by their expected sizes), each
        value given as soon as its bytes are in (remote stores stream the files); returns
        the keys left to read by ranges: those of files absent as ``.shard`` files
        (absent, or in the obsolete layout), and, if a file was replaced while it was
        read, those not given yet."""
        shards, _ = self.spec.shard_and_minishard(keys)
        numbers = np.unique(shards).tolist()
        files = [self.spec.shard_filename(s) for s in numbers]
        wanted = [keys[shards == np.uint64(s)] for s in numbers]
        scans: list[ShardScan | None] = [None] * len(files)
        given: list[list[int]] = [[] for _ in files]
        finished = [False] * len(files)
        gzip = decode and self.spec.data_encoding == "gzip"
        arriving = self.store.iter_get_arriving(files, sizes=[whole[s] for s in numbers])
        try:
            for f, value in arriving:
                fn = files[f]
                if value.missing or finished[f] or value.size is None:  # (none in yet)
                    continue
                scan = scans[f]
                if scan is None:
                    scan = scans[f] = ShardScan(self.spec, fn, value.size)
                done = value.done  # (before the view: the bytes may still be coming in)
                data = value.view()
                ids, minishards, starts, ends = scan.scan(data)
                mine = np.isin(ids, wanted[f])
                for k, m, a, b in zip(ids[mine].tolist(), minishards[mine].tolist(),
                                      starts[mine].tolist(), ends[mine].tolist()):
                    stored: bytes | memoryview = data[a:b]
                    if gzip:
                        stored = self.decode_value(
                            stored, f"{fn}: minishard {m}: data of key {k}")
                    given[f].append(k)
                    yield k, stored
                if done:
                    finished[f], scans[f] = True, None
                    index = cast(np.ndarray, scan.index)  # (read: the file is all in)
                    shard = _Shard(fn, fn, self.spec.index_length, index, value.version)
                    self.shard_index_cache[fn] = Versioned(shard, value.version)
                    self._keep_minishard_indexes(fn, value.version, scan.minishard_indexes)
                del data
        except VersionChangedError:  # a file replaced between two attempts of its read
            pass
        finally:
            close = getattr(arriving, "close", None)
            if close is not None:
                close()  # (a generator: its requests still in flight are cancelled)
        left = [np.setdiff1d(w, np.array(g, dtype=np.uint64))
                for w, g, done in zip(wanted, given, finished) if not done]
        return np.concatenate(left) if left else np.zeros(0, dtype=np.uint64)

    def _keep_minishard_indexes(self, filename: str, version: Hashable | None,
                                found: dict[int, MinishardIndex]) -> None:
        """Cache the minishard indexes of a file read whole, when there are few enough (see
        _other_minishards): later reads of its keys then take one request."""
        cache = self.minishard_index_cache
        if len(found) <= ALL_MINISHARDS_COUNT and len(found) + len(cache) <= cache.size:
            for m, msi in found.items():
                cache[(filename, version, m)] = msi

    def decode_value(self, stored: bytes | memoryview, name: str) -> bytes | memoryview:
        """A value as :meth:`iter_data_many` gives it with ``decode=False``, decoded
        (gunzipped with gzip data encoding; ShardFormatError naming ``name``)."""
        if self.spec.data_encoding == "gzip":
            return gzip_decompress(stored, name, ShardFormatError, max_size=self.max_value_size)
        return stored

    def _drop_changed(self, keys: np.ndarray, error: Exception) -> bool:
        """After a failed read of ``keys``: drop the indexes of the shard files that changed
        meanwhile (the one ``error`` names if it is Stale); whether any did."""
        shards, _ = self.spec.shard_and_minishard(keys)
        changed = False
        for fn in (self.spec.shard_filename(s) for s in np.unique(shards).tolist()):
            entry = self.shard_index_cache.get(fn)
            if entry is None:
                continue
            data_key = self._data_key(fn, entry.index)
            if (isinstance(error, Stale) and error.key == data_key) or (
                not self.store.still_at(data_key, entry.version)
            ):
                self.replaced(fn)
                changed = True
        return changed

    def _what(self, keys: np.ndarray) -> str:
        """How a conflict names the shard files of ``keys``."""
        shards, _ = self.spec.shard_and_minishard(keys)
        names = sorted({self.spec.shard_filename(s) for s in shards.tolist()})
        return f"{self.store.url}: shard files {', '.join(names[:4])}"

    def exists(self, keys: Any, return_byte_range: bool = False) -> Any:
        """Where keys are stored, CloudVolume style.

        For one key: its file name (``(file, start, length)`` with
        ``return_byte_range``), or None if absent.  For several keys: a dict of
        those answers by key.  ``file`` is the store key holding the data (the
        ``.shard`` file, or ``.data`` in the obsolete layout).
        """
        one = isinstance(keys, numbers.Integral)
        arr = as_keys(keys)
        loc = retrying(lambda: self._locate(arr), lambda e: self._drop_changed(arr, e),
                       self._what(arr))
        self._fetch_later(loc.later)
        out: dict[int, Any] = dict.fromkeys(arr.tolist())
        for k, f, start, size in zip(
            loc.keys.tolist(), loc.file.tolist(), loc.starts.tolist(), loc.sizes.tolist()
        ):
            out[k] = (loc.files[f], start, size) if return_byte_range else loc.files[f]
        return out[int(arr[0])] if one else out

    def locate(self, keys: Any) -> dict[int, tuple[str, int, int, Hashable | None]]:
        """Where the present keys' stored values are: ``(file, start, size, version)``, the
        version being the file's when its index was read.  For reads of those bytes (or
        of bytes beside them) checked against it (``KVStore.get_many_if``): after a
        VersionChangedError, :meth:`invalidate` and locate again."""
        arr = as_keys(keys)
        loc = retrying(lambda: self._locate(arr, reading=True),
                       lambda e: self._drop_changed(arr, e), self._what(arr))
        self._fetch_later(loc.later)
        return {k: (loc.files[f], start, size, loc.versions[f]) for k, f, start, size in zip(
            loc.keys.tolist(), loc.file.tolist(), loc.starts.tolist(), loc.sizes.tolist())}

    def list_labels(self, filename: str) -> np.ndarray:
        """Every key stored in shard file ``filename``, ascending (uint64)."""

        def read() -> np.ndarray:
            shard = self._shard_infos([filename])[0].index  # a changed file is read again
            if shard is None:
                return np.zeros(0, dtype=np.uint64)
            used = np.flatnonzero(shard.ranges[:, 1] != shard.ranges[:, 0])
            msis = self._minishard_indexes([(shard, m) for m in used.tolist()])
            ids = [msi.ids for msi in msis]
            return np.sort(np.concatenate(ids)) if ids else np.zeros(0, dtype=np.uint64)

        # (a Stale file's index is read again by the next _shard_infos)
        return retrying(read, lambda e: False, f"{self.store.url}: shard file {filename}")

    def all_labels(self) -> np.ndarray:
        """Every key stored in the shard files of the store (listed), ascending (uint64)."""
        lists = [self.list_labels(f) for f in shard_files(self.store)]
        return np.unique(np.concatenate(lists)) if lists else np.zeros(0, dtype=np.uint64)

    def disassemble_shard(self, blob: bytes, filename: str = "<shard>") -> dict[int, bytes]:
        """``{key: value}`` of a whole shard file already in memory."""
        return disassemble_shard(self.spec, blob, filename)

    # -- shard indexes -------------------------------------------------------------------

    @staticmethod
    def _data_key(filename: str, shard: _Shard | None) -> str:
        """The file holding ``filename``'s data (itself unless in the obsolete layout)."""
        return shard.data_key if shard is not None else filename

    def _shard_infos(self, filenames: list[str], check: bool = True) -> list[Versioned]:
        """Shard index of each file (shard None when absent), through the cache.

        With ``check``, a cached index whose file has another version now is dropped and
        read again (else the caller checks, see :meth:`_locate`).
        """
        out: list[Versioned] = [None] * len(filenames)  # type: ignore[list-item]  # all filled
        missing = []
        for i, fn in enumerate(filenames):
            entry = self.shard_index_cache.get(fn)
            # where version() cannot tell (S3, HTTP by default), versioned reads check instead
            if entry is not None and (not check or self._unchanged(fn, entry)):
                out[i] = entry
            else:
                if entry is not None:
                    self.replaced(fn)
                missing.append(i)
        if missing:
            names = [filenames[i] for i in missing]
            for i, fn, (shard, version) in zip(missing, names, self._fetch_shard_indexes(names)):
                if shard is not None:
                    if shard.data_key != fn:
                        version = self.store.version(shard.data_key)
                    shard = shard._replace(version=version)
                out[i] = self.shard_index_cache[fn] = Versioned(shard, version)
        return out

    def _fetch_shard_indexes(
        self, filenames: list[str]
    ) -> list[tuple[_Shard | None, Hashable | None]]:
        """(shard or None if absent, the version of the file it was read from) of each."""
        n = self.spec.index_length
        requests: list = [(fn, (0, n)) for fn in filenames]
        read = self._ranges.get_versioned(requests, self._truncated_index)
        out: list[tuple[_Shard | None, Hashable | None]] = []
        for fn, (blob, version) in zip(filenames, read):
            shard = None
            if blob is not None:
                shard = _Shard(fn, fn, n, decode_shard_index(blob, self.spec, fn))
            out.append((shard, version))
        absent = [i for i, (shard, _) in enumerate(out) if shard is None]
        if absent:
            names = [obsolete_names(filenames[i]) for i in absent]
            blobs = self._ranges.get(
                [(idx, (0, n)) for idx, _ in names], None, self._truncated_index
            )
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

    def _minishard_indexes(self, wanted: list[tuple[_Shard, int]],
                           later: list[tuple[_Shard, int]] | None = None
                           ) -> list[MinishardIndex]:
        """Decoded minishard index of each (shard, minishard), through the cache (whose
        entries were checked when read; the others are checked here).  ``later`` (remote
        stores): where the shards' other minishard indexes to fetch after the read are
        added."""
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
            asked = [wanted[i][1] for i in idxs]
            more: list[int] = []
            if not self.store.local:
                if shard.version is None:  # (the others now, with these: the key of a fetch
                    # after the read would not tell an old file's indexes from a new one's)
                    more = self._other_minishards(shard, set(asked))
                elif later is not None:
                    later.extend((shard, m) for m in self._other_minishards(shard, set(asked)))
            ms = np.array(asked + more, dtype=np.intp)
            ranges = check_minishard_ranges(shard.ranges, ms, shard.data_key).tolist()
            for n, (m, (start, end)) in enumerate(zip(ms.tolist(), ranges)):
                i = idxs[n] if n < len(idxs) else -1  # (-1: cached only)
                if start == end:
                    if i >= 0:
                        out[i] = EMPTY_MINISHARD
                else:
                    pos = shard.origin + start
                    pending.setdefault(shard.data_key, []).append(
                        (pos, pos + end - start, i, shard, m)
                    )
        if pending:
            self._fetch_minishard_indexes(pending, out)
        return out  # type: ignore[return-value]  # no None left: every slot is filled by now

    def _other_minishards(self, shard: _Shard, asked: set[int]) -> list[int]:
        """Remote stores: the shard's minishard indexes a read did not ask for and that are
        neither cached nor being fetched, when the shard's hold at most
        ALL_MINISHARDS_BYTES and fit in the cache: fetched once the read ends (see
        _fetch_later), later reads of the shard take one round trip, not two."""
        used = np.flatnonzero(shard.ranges[:, 1] != shard.ranges[:, 0])
        if not len(used) or len(used) > ALL_MINISHARDS_COUNT:
            return []
        if int((shard.ranges[used, 1] - shard.ranges[used, 0]).sum()) > ALL_MINISHARDS_BYTES:
            return []
        cache = self.minishard_index_cache
        more = [m for m in used.tolist() if m not in asked
                and (k := (shard.filename, shard.version, m)) not in cache
                and k not in self._fetching]
        return more if len(more) + len(cache) <= cache.size else []

    def _fetch_later(self, later: Sequence[tuple[_Shard, int]]) -> None:
        """Fetch the minishard indexes ``later`` lists (a read's, now that it has ended)
        into the cache, on a daemon thread, under the caller's limit of requests in
        flight; only of files with version tokens (see _minishard_indexes).

        Fetched with the ones the read needed, their requests held up the read (the first
        chunk of a 1 GiB volume through S3 at 25 ms: 121-125 ms against 86-88): it waited
        for the slowest of some 64 answers.  A read that needs one of them meanwhile asks
        for it (sharing the request in flight if it asks for the same byte range, see
        FsspecStore); the fetches after other reads leave them out.  An interpreter that
        exits does not wait for them.  A failed fetch only leaves them to the reads that
        need them."""
        if not later:
            return
        items = list(later)
        keys = {(shard.filename, shard.version, m) for shard, m in items}
        self._fetching |= keys  # (one operation on a set: atomic, as the two below)

        def fetch() -> None:
            try:
                self._minishard_indexes(items)  # (those cached meanwhile: not again)
            except (ShardvolError, Stale, OSError):
                pass  # (the reads that need them read them, and report what is wrong)
            finally:
                self._fetching -= keys

        try:
            threading.Thread(target=carry(fetch), name="shardvol-minishard-indexes",
                             daemon=True).start()
        except RuntimeError:  # (no thread to be had: at exit, at the process's limit)
            self._fetching -= keys

    def _fetch_minishard_indexes(self, pending: dict, out: list) -> None:
        """Read and decode the minishard indexes of ``pending`` ({data file: [(start, stop,
        i, shard, minishard)]}) into ``out[i]``: one coalesced, versioned read."""
        items = [(key, *item) for key, file_items in pending.items() for item in file_items]
        views: list = [None] * len(items)
        # read only from the file its shard index was read from: else offsets may lie
        for n, view in self._ranges.read(
            [(key, a, b) for key, a, b, *_ in items],
            {key: file_items[0][3].version for key, file_items in pending.items()},
            lambda key, size: _first_past_end(
                key, size, ((a, b, m, "minishard index") for a, b, _, _, m in pending[key])
            ),
        ):
            views[n] = view
        by_file: dict[str, list[int]] = {}
        for n, (key, *_rest) in enumerate(items):
            by_file.setdefault(key, []).append(n)
        for key, ns in by_file.items():
            shard = items[ns[0]][4]
            msis = decode_minishard_indexes(
                [views[n] for n in ns], self.spec, shard.origin, key, [items[n][5] for n in ns]
            )
            for n, msi in zip(ns, msis):
                _, _, _, i, shard, m = items[n]
                # keyed by version: an index read from an older file never serves a newer one
                self.minishard_index_cache[(shard.filename, shard.version, m)] = msi
                if i >= 0:
                    out[i] = msi

    # -- lookup --------------------------------------------------------------------------

    def _locate(self, keys: Any, reading: bool = False) -> _Located:
        """Find the data byte ranges of the present keys among ``keys``.

        ``reading``: the caller reads the data found, with versioned reads, which check
        the files they read; cached indexes are then checked against their files (a
        stat each) only for files none of whose keys were found (raising Stale).
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
        infos = [c.index for c in cached]
        present = [g for g, s in enumerate(g_shard_idx.tolist()) if infos[s] is not None]
        g_info = [infos[s] for s in g_shard_idx.tolist()]
        later: list[tuple[_Shard, int]] = []
        msis = self._minishard_indexes([(g_info[g], g_minishard[g]) for g in present], later)
        counts = np.fromiter((len(msi.ids) for msi in msis), dtype=np.intp, count=len(msis))
        if counts.sum() == 0:
            if reading:
                self._check_unread(files, cached, set())
            empty = np.zeros(0, dtype=np.uint64)
            return _Located(empty, empty, empty, empty, empty.astype(np.intp), [], [],
                            tuple(later))
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
            tuple(later),
        )

    def _check_unread(self, files: list[str], cached: list[Versioned], read: set[int]) -> None:
        """Raise Stale if a file (by number in ``files``) not in ``read`` has another
        version than its cached index (or, absent, exists now)."""
        for s, (fn, entry) in enumerate(zip(files, cached)):
            if s not in read and not self._unchanged(fn, entry):
                raise Stale(self._data_key(fn, entry.index))

    def _unchanged(self, filename: str, entry: Versioned) -> bool:
        """Whether the file a cached shard index was read from still has its version."""
        return self.store.still_at(self._data_key(filename, entry.index), entry.version)

    def _remember(
        self,
        files: list[str],
        cached: list[Versioned],
        read: np.ndarray,
        keys: np.ndarray,
        starts: np.ndarray,
        sizes: np.ndarray,
    ) -> None:
        """Keep where the found keys are (files by number ``read``), for _remembered."""
        if self._where_count + len(keys) > _REMEMBER_LIMIT:
            self._where.clear()
            self._where_count = 0
        for s, k, a, n in zip(read.tolist(), keys.tolist(), starts.tolist(), sizes.tolist()):
            fn, entry = files[s], cached[s]
            if entry.version is None or entry.index is None:
                continue  # the store cannot tell versions: nothing to check it against
            table = self._where.get(fn)
            if table is None or table[0] != entry.version:
                table = self._where[fn] = (entry.version, entry.index.data_key, {})
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
        out: list[memoryview] = [None] * len(loc.keys)  # type: ignore[list-item]  # all filled
        for i, view in self._iter_read_data(loc, group_bytes=None):
            out[i] = view
        return out

    def _iter_read_data(
        self, loc: _Located, group_bytes: int | None
    ) -> Iterator[tuple[int, memoryview]]:
        """``(i, stored bytes of the i-th located key)`` (views into coalesced reads, in
        groups of about ``group_bytes``; see RangeReader.read)."""
        if len(loc.keys) == 0:
            return
        starts, sizes = loc.starts.tolist(), loc.sizes.tolist()
        files = [loc.files[f] for f in loc.file.tolist()]

        def explain(key: str, size: int) -> str | None:
            return _first_past_end(
                key,
                size,
                (
                    (starts[i], starts[i] + sizes[i], int(loc.minishards[i]), f"data of key {k}")
                    for i, k in enumerate(loc.keys.tolist())
                    if files[i] == key
                ),
            )

        spans = [(f, a, a + n) for f, a, n in zip(files, starts, sizes)]
        versions = dict(zip(loc.files, loc.versions))
        yield from self._ranges.read(spans, versions, explain, group_bytes)


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


def _composite(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """(high, low) uint64 pairs as 16-byte big-endian records, which sort lexicographically."""
    out = np.empty((len(high), 2), dtype=">u8")
    out[:, 0] = high
    out[:, 1] = low
    return out.view("V16").reshape(-1)
