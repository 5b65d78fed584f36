"""The decoded-chunk cache (shardvol.array.cache): reads served from it equal the stored
data (TensorStore's read of the same files), writes through any handle of the process drop
what they touch, and another writer's changes are seen as documented: locally by each
read (the unit's version), remotely once a read of the store finds the unit replaced."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import InvalidArgumentError
from shardvol.kvstore.fsspec_store import FsspecStore

from .fault_server import FaultServer
from .oracles import ts_create, ts_open, ts_read

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
        "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip",
        "data_encoding": "gzip"}


def _volume(path, sharding=SPEC, seed=0):
    """TensorStore writes random data (creating the volume if there is none)."""
    data = np.random.default_rng(seed).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    if (path / "info").exists():
        t = ts_open(str(path))
    else:
        t = ts_create(str(path), data_type="uint8", num_channels=1, size=[64, 64, 64],
                      chunk_size=[16, 16, 16], encoding="raw", sharding=sharding)
    t[...] = data
    return data


@pytest.mark.parametrize("sharding", [SPEC, None])
def test_xy_planes_through_one_chunk_row_fetch_each_chunk_once(tmp_path, sharding):
    data = _volume(tmp_path / "v", sharding)
    with FaultServer(str(tmp_path)) as server:
        vol = Volume(FsspecStore(server.url + "/v", skip_instance_cache=True))
        assert vol.cache is not None and vol.cache.nbytes == 256 << 20  # remote: on
        server.stats(reset=True)
        for z in range(16):
            assert np.array_equal(vol[:, :, z], data[:, :, z])
        first = server.stats(reset=True)
        for z in range(16):
            assert np.array_equal(vol[:, :, z], data[:, :, z])
        assert server.stats()["requests"] == 0
        if sharding is None:
            assert first["GET"] == 16  # the 16 chunk files of the row, once each
        uncached = Volume(FsspecStore(server.url + "/v", skip_instance_cache=True),
                          cache_bytes=0)
        server.stats(reset=True)
        for z in range(16):
            assert np.array_equal(uncached[:, :, z], data[:, :, z])
        assert server.stats()["requests"] > first["requests"]


def test_writes_through_any_handle_drop_what_they_touch(tmp_path):
    _volume(tmp_path / "v")
    a = Volume(str(tmp_path / "v"), cache_bytes="64MB")
    b = Volume(str(tmp_path / "v"), cache_bytes="64MB")
    assert a.cache is b.cache  # one scale of one volume: one cache in the process
    model = ts_read(str(tmp_path / "v"))
    assert np.array_equal(a[...], model)
    assert len(a.cache) == 64
    b[5:40, 7:9, 30:33] = 7
    model[5:40, 7:9, 30:33] = 7
    assert np.array_equal(a[...], model)
    b.delete((slice(0, 16), slice(0, 16), slice(0, 16)))
    model[:16, :16, :16] = 0
    assert np.array_equal(a[...], model)
    assert np.array_equal(ts_read(str(tmp_path / "v")), model)


def test_local_reads_check_the_unit_version(tmp_path):
    """Another writer (here TensorStore) replaces shards: each read checks their files."""
    _volume(tmp_path / "v")
    vol = Volume(str(tmp_path / "v"), cache_bytes="64MB")
    vol[...]
    new = _volume(tmp_path / "v", seed=1)
    assert np.array_equal(vol[...], new)


def test_remote_cached_chunks_serve_until_a_read_sees_their_shard_replaced(tmp_path):
    """Remote stores tell a shard's version only with a read: a cached chunk serves until a
    read of its shard (of chunks not cached) finds the shard replaced; then the shard's
    cached chunks go."""
    old = _volume(tmp_path / "v")
    with FaultServer(str(tmp_path)) as server:
        vol = Volume(FsspecStore(server.url + "/v", skip_instance_cache=True))
        box = (slice(0, 16), slice(0, 16), slice(0, 16))  # one chunk of shard 0
        other = (slice(16, 32), slice(16, 32), slice(16, 32))  # another chunk of shard 0
        assert np.array_equal(vol[box], old[box])
        new = _volume(tmp_path / "v", seed=1)
        assert np.array_equal(vol[box], old[box])  # cached: the documented staleness
        assert np.array_equal(vol[other], new[other])  # a read of the shard sees it change
        assert np.array_equal(vol[box], new[box])


def test_cache_bytes_must_be_a_size_the_machine_has(tmp_path):
    _volume(tmp_path / "v")
    for bad in (-1, "lots", "1.5 zettabytes", 1 << 62):
        with pytest.raises(InvalidArgumentError, match="cache_bytes"):
            Volume(str(tmp_path / "v"), cache_bytes=bad)
    assert Volume(str(tmp_path / "v")).cache is None  # local: off
    assert Volume(str(tmp_path / "v"), cache_bytes="1MB").cache.nbytes == 10**6


def test_a_pickled_remote_volume_gets_the_process_cache_back(tmp_path):
    import pickle

    data = _volume(tmp_path / "v")
    with FaultServer(str(tmp_path)) as server:
        vol = Volume(FsspecStore(server.url + "/v", skip_instance_cache=True))
        assert np.array_equal(vol[:16], data[:16])
        again = pickle.loads(pickle.dumps(vol))
        assert again.cache is vol.cache
        assert np.array_equal(again[...], data)


def test_a_read_larger_than_half_the_cache_is_not_cached(tmp_path):
    """It would only evict itself (and cost a copy of every chunk): it reads as without a
    cache, and what the cache held stays."""
    data = _volume(tmp_path / "v")
    chunk = 16 * 16 * 16 * data.dtype.itemsize  # (the chunk size of _volume)
    vol = Volume(str(tmp_path / "v"), cache_bytes=5 * chunk)
    assert vol.cache is not None
    vol.cache.clear()
    small = (slice(0, 16), slice(0, 16), slice(0, 16))
    assert np.array_equal(vol[small], data[small])
    assert len(vol.cache) == 1
    big = (slice(0, 64), slice(0, 16), slice(0, 16))  # (3 chunks to fetch > 2.5, half)
    assert np.array_equal(vol[big], data[big])
    assert len(vol.cache) == 1
    two = (slice(16, 48), slice(0, 16), slice(0, 16))
    assert np.array_equal(vol[two], data[two])
    assert len(vol.cache) == 3


def test_chunks_read_whole_are_not_cached_once_they_take_half_the_cache(tmp_path):
    """Chunks read whole decode straight into the output (caching them costs a copy), once
    they take half the cache; chunks read in part (decoded whole anyway) are cached up to
    half of it."""
    data = _volume(tmp_path / "v")
    chunk = 16 * 16 * 16 * data.dtype.itemsize
    vol = Volume(str(tmp_path / "v"), cache_bytes=4 * chunk)
    assert vol.cache is not None
    vol.cache.clear()
    whole = (slice(0, 32), slice(0, 16), slice(0, 16))  # 2 chunks read whole: half
    assert np.array_equal(vol[whole], data[whole])
    assert len(vol.cache) == 0
    plane = (slice(0, 32), slice(0, 16), slice(5, 6))  # the same 2 chunks, in part
    assert np.array_equal(vol[plane], data[plane])
    assert len(vol.cache) == 2
    one = (slice(32, 48), slice(0, 16), slice(0, 16))  # 1 chunk read whole: a quarter
    assert np.array_equal(vol[one], data[one])
    assert len(vol.cache) == 3


def test_the_budget_counts_the_blocks_decoded_chunks_keep(tmp_path):
    """Decoded chunks of 256 KiB or more live in blocks of whole 2 MiB pages above 2 MiB:
    a chunk of 130^3 (2.2 MB) keeps 4 MiB, and the cache counts that, not its bytes.  (Read
    in a fresh process: a freed block other tests left in hugeblock's cache would serve a
    chunk with its own, larger capacity.)"""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 255, (260, 130, 130, 1), dtype=np.uint8)
    t = ts_create(str(tmp_path / "v"), data_type="uint8", num_channels=1, size=[260, 130, 130],
                  chunk_size=[130, 130, 130], encoding="raw")
    t[...] = data
    np.save(tmp_path / "data.npy", data)
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from shardvol import Volume\n"
        "data = np.load(sys.argv[1] + '/data.npy')\n"
        "vol = Volume(sys.argv[1] + '/v', cache_bytes=9 << 20)\n"
        "part = (slice(0, 260), slice(0, 130), slice(5, 6))  # both chunks, in part: cached\n"
        "assert np.array_equal(vol[part], data[part])\n"
        "assert len(vol.cache) == 2 and vol.cache.used == 2 * (4 << 20), vol.cache.used\n"
        "assert np.array_equal(vol[part], data[part])  # (from the cache)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
