"""Cached shard indexes of Zarr v3 arrays: fewer reads, never stale or mixed bytes.

A handle keeps the indexes of the shards it read; another handle (another process, as
far as the first can tell) then rewrites, extends, truncates or deletes those shards.
"""

from __future__ import annotations

import numpy as np
import pytest

import shardvol.zarr3 as z
from shardvol.errors import ShardFormatError
from shardvol.kvstore import FileStore, MemoryStore
from shardvol.kvstore.memory import clear_memory

from .stores import Recording


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        yield str(tmp_path / "a")
    else:
        u = f"memory://zarr3-cache-{request.node.name}"
        clear_memory(u)
        yield u
        clear_memory(u)


def base_store(url: str):
    return MemoryStore(url) if url.startswith("memory://") else FileStore(url)


def make(url: str) -> np.ndarray:
    """A one-shard 16x16 array of 4x4 gzip chunks; its bottom half absent (fill 0)."""
    arr = z.create(url, (16, 16), "uint16", (16, 16), (4, 4), codecs=["gzip"], overwrite=True)
    data = np.zeros((16, 16), np.uint16)
    data[:8] = np.arange(128, dtype=np.uint16).reshape(8, 16) + 1
    arr[:8] = data[:8]
    return data


def test_a_cached_index_saves_its_read(url):
    make(url)
    store = Recording(base_store(url))
    arr = z.ZarrArray(z.ZarrChunkStore.open(store))
    arr[0:4, 0:8]
    assert [r[0] for r in store.requests()][-2:] == ["c/0/0", "c/0/0"]  # index, then data
    store.calls.clear()
    arr[4:8, 8:16]
    assert len(store.requests()) == 1  # the data only
    assert len(arr.chunk_store.shard_index_cache) == 1


@pytest.mark.parametrize("cache_size", [0, 512])
def test_other_writer_rewrites_extends_and_deletes_a_cached_shard(url, cache_size):
    data = make(url)
    ours = z.ZarrArray(z.ZarrChunkStore.open(url, shard_index_cache_size=cache_size))
    assert np.array_equal(ours[...], data)  # every chunk: the whole shard
    assert np.array_equal(ours[0:4, 0:4], data[0:4, 0:4])  # index cached
    assert (ours[12:16, 12:16] == 0).all()  # absent from the cached index

    theirs = z.open(url)
    data[0:4, 0:4] = 7  # compresses far better: every later chunk moves in the shard
    data[12:16, 12:16] = 9  # absent chunk now written
    theirs[12:16, 12:16] = 9
    assert (ours[12:16, 12:16] == 9).all()  # only chunks absent from the cached index
    theirs[0:4, 0:4] = 7
    assert np.array_equal(ours[4:8, 4:12], data[4:8, 4:12])  # moved chunks, old index cached
    assert np.array_equal(ours[...], data)

    theirs[...] = 0  # every chunk fill: the shard is deleted
    assert (ours[0:8, 0:8] == 0).all()
    assert not ours.chunk_store.exists([(0, 0)])[(0, 0)]


def test_a_shard_damaged_after_its_index_was_cached_is_a_format_error(url):
    make(url)
    ours = z.open(url)
    ours[0:4, 0:4]
    store = base_store(url)
    shard = store.get("c/0/0")
    store.set("c/0/0", shard[: len(shard) // 2])  # cut short: the index is gone
    with pytest.raises(ShardFormatError, match="c/0/0") as e:
        ours[4:8, 12:16]  # the last chunk stored, now past the end
    assert "index" in str(e.value)  # found by reading the index again, not given up on


def test_own_writes_are_read_back(url):
    data = make(url)
    arr = z.open(url)
    arr[0:4, 0:4]
    arr[2:6, 2:6] = 5
    data[2:6, 2:6] = 5
    assert np.array_equal(arr[...], data)
    assert np.array_equal(z.open(url)[...], data)
