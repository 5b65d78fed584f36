"""Readers with cached shard indexes never return stale or mixed bytes after a rewrite."""

from __future__ import annotations

import re

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import ShardFormatError
from shardvol.kvstore import FileStore, MemoryStore
from shardvol.sharding import ShardingSpec, ShardReader, write_shards

SPEC = ShardingSpec.from_dict({
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
    "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "raw",
    "data_encoding": "raw"})


def contents(version: int, n: int = 40) -> dict[int, bytes]:
    """Values whose sizes change with ``version``, so every offset moves between versions."""
    return {k: bytes([version]) * (10 + 7 * version + k) for k in range(n)}


@pytest.mark.parametrize("make_store", [lambda p: FileStore(str(p)),
                                        lambda p: MemoryStore(f"memory://stale-{p.name}")])
def test_other_writer_rewrites_a_cached_shard(tmp_path, make_store):
    store = make_store(tmp_path)
    write_shards(store, SPEC, contents(1))
    reader = ShardReader(store, SPEC)
    assert reader.get_data_many(range(40)) == contents(1)  # indexes now cached
    write_shards(store, SPEC, contents(2, 60))  # someone else, without telling the reader
    assert reader.get_data_many(range(60)) == contents(2, 60)
    assert dict(reader.iter_data_many(range(60))) == contents(2, 60)
    store.delete("0.shard")
    assert reader.get_data_many(range(60)) == {}


class SwapBeforeFirstDataRead(FileStore):
    """Replaces the shard file just before the first data read opens it (a writer racing
    the reader, between its index and data reads)."""

    swapped = False

    def _read_batch(self, reqs, pooled=True):
        if not self.swapped and any(r and r[0] >= SPEC.index_length for _, r in reqs):
            self.swapped = True
            write_shards(FileStore(self.root), SPEC, contents(3))
        return super()._read_batch(reqs, pooled)


@pytest.mark.parametrize("streaming", [False, True])
def test_shard_replaced_between_index_and_data_reads(tmp_path, streaming):
    write_shards(FileStore(str(tmp_path)), SPEC, contents(1))
    store = SwapBeforeFirstDataRead(str(tmp_path))
    reader = ShardReader(store, SPEC)
    got = dict(reader.iter_data_many(range(40))) if streaming else reader.get_data_many(range(40))
    assert store.swapped
    assert {k: bytes(v) for k, v in got.items()} == contents(3)


def test_real_corruption_is_still_an_error(tmp_path):
    store = FileStore(str(tmp_path))
    write_shards(store, SPEC, contents(1))
    reader = ShardReader(store, SPEC)
    reader.get_data_many(range(40))
    blob = bytearray(store.get("0.shard"))
    blob[8:16] = (10**9).to_bytes(8, "little")  # minishard 0's index ends past the file
    store.set("0.shard", bytes(blob))  # a new version, but corrupt: still reported
    with pytest.raises(ShardFormatError, match=re.escape("0.shard")):
        reader.get_data_many(range(40))


def test_two_volume_handles_see_each_others_writes(tmp_path):
    a = Volume.create(str(tmp_path), size=(64, 64, 16), chunk_size=(16, 16, 16),
                      data_type="uint16", sharding="auto")
    b = Volume(str(tmp_path))
    a[...] = 1
    assert (b[...] == 1).all()  # b caches the shard index now
    rng = np.random.default_rng(0)
    data = rng.integers(0, 60000, (64, 64, 16, 1)).astype(np.uint16)  # other chunk sizes
    a[...] = data
    np.testing.assert_array_equal(b[...], data)


class RefreshDuringMinishardRead(FileStore):
    """While a reader fetches minishard indexes, another writer replaces the shard and another
    thread (played here by a nested call) reads the new file with the same reader."""

    def __init__(self, root):
        super().__init__(root)
        self.reader = None

    def _read_batch(self, reqs, pooled=True):
        if self.reader is not None and any(r and r[0] > 0 for _, r in reqs):  # minishard index
            reader, self.reader = self.reader, None
            write_shards(FileStore(self.root), SPEC, contents(2))
            assert reader.get_data_many(range(40)) == contents(2)
        return super()._read_batch(reqs, pooled)


@pytest.mark.parametrize("call", ["get", "stream", "exists", "labels"])
def test_minishard_index_of_a_replaced_shard_is_not_cached_for_the_new_one(tmp_path, call):
    write_shards(FileStore(str(tmp_path)), SPEC, contents(1))
    store = RefreshDuringMinishardRead(str(tmp_path))
    reader = ShardReader(store, SPEC)
    store.reader = reader
    if call == "get":
        assert reader.get_data_many(range(40)) == contents(2)
    elif call == "stream":
        assert {k: bytes(v) for k, v in reader.iter_data_many(range(40))} == contents(2)
    elif call == "exists":
        assert reader.exists(range(40)) == dict.fromkeys(range(40), "0.shard")
    else:
        assert reader.list_labels("0.shard").tolist() == list(range(40))
    assert store.reader is None  # the race happened
    assert reader.get_data_many(range(40)) == contents(2)


class ReadWhileMemoryWriteLands(MemoryStore):
    """Runs ``hook`` (another thread's read) inside a write, at the first version update
    made once the new value is in place."""

    hook = None
    old = None

    def _bump(self, key):
        if self.hook is not None and self._data.get(key) != self.old:
            hook, self.hook = self.hook, None
            hook()
        super()._bump(key)


def test_memory_store_readers_never_see_new_bytes_under_the_old_version():
    store = ReadWhileMemoryWriteLands("memory://stale-bump")
    write_shards(store, SPEC, contents(1))
    reader = ShardReader(store, SPEC)
    assert reader.get_data_many(range(40)) == contents(1)  # index of version 1 cached
    seen = []
    store.old = store.get("0.shard")
    store.hook = lambda: seen.append(reader.get_data_many(range(40)))
    write_shards(store, SPEC, contents(2))
    assert len(seen) == 1 and seen[0] in (contents(1), contents(2))
    assert reader.get_data_many(range(40)) == contents(2)


@pytest.mark.parametrize("streaming", [False, True])
def test_keys_absent_from_a_cached_index_are_found_once_written(tmp_path, streaming):
    store = FileStore(str(tmp_path))
    reader = ShardReader(store, SPEC)

    def read(keys):
        got = reader.iter_data_many(keys) if streaming else reader.get_data_many(keys).items()
        return {k: bytes(v) for k, v in got}

    assert read([50]) == {}  # no shard file yet: its absence is cached
    write_shards(store, SPEC, contents(1))
    assert read([50]) == {}  # only keys 0-39: this index is cached
    write_shards(store, SPEC, contents(2, 60))  # another writer adds key 50
    assert read([50]) == {50: contents(2, 60)[50]}


@pytest.mark.parametrize("index_cache_size", [1, 512])
@pytest.mark.parametrize("streaming", [False, True])
def test_remembered_positions_of_a_rewritten_shard_are_not_used(tmp_path, index_cache_size,
                                                                streaming):
    """Keys read before are located from where they were found (no index work); after
    another writer moves every value, the same keys read the new values."""
    spec = ShardingSpec.from_dict({**SPEC.to_dict(), "shard_bits": 1})  # two shard files
    store = FileStore(str(tmp_path))
    reader = ShardReader(store, spec, shard_index_cache_size=index_cache_size)

    def read(keys):
        got = reader.iter_data_many(keys) if streaming else reader.get_data_many(keys).items()
        return {k: bytes(v) for k, v in got}

    keys = list(range(40))
    for version in (1, 2, 3):
        write_shards(store, spec, contents(version))
        assert read(keys) == contents(version)
        assert read(keys) == contents(version)  # from the remembered positions
