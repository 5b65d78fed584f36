"""The streaming read path and the engine's scheduling: ChunkStore.iter_chunks of both
precomputed stores (local and remote-like, sharded or not) against read_chunks and
describe, ShardReader.iter_data_many against get_data_many, batching and thread-count
decisions, and whole reads on either side of those decisions against a numpy model."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from shardvol import Volume
from shardvol._parallel import MIN_PARALLEL_SECONDS, WorkEstimate
from shardvol.array.grid import ChunkGrid
from shardvol.errors import ChunkDecodeError, MissingChunkError, ShardFormatError
from shardvol.kvstore import MemoryStore
from shardvol.kvstore.memory import clear_memory
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.precomputed.unsharded import UnshardedChunkStore, chunk_key
from shardvol.sharding import ShardingSpec, ShardReader, write_shards

from .stores import Recording

GRID = ChunkGrid(origin=(0, 0, 0, 0), shape=(10, 8, 6, 1), chunk_shape=(4, 4, 4, 1))
COORDS = [(x, y, z, 0) for z in range(2) for y in range(2) for x in range(3)]


@pytest.fixture
def memory(request):
    url = f"memory://streaming-{request.node.name}"
    yield MemoryStore(url)
    clear_memory(url)


def blob_of(c) -> bytes:
    return bytes([c[0], c[1], c[2]]) * 5


def check_stream(store, coords, present):
    got = list(store.iter_chunks(coords))
    assert sorted(c for c, _, _ in got) == sorted(coords)
    expected = store.read_chunks(coords)
    assert set(expected) == set(present)
    for c, blob, name in got:
        assert (None if blob is None else bytes(blob)) == expected.get(c)
        assert name == store.describe(c)


@pytest.mark.parametrize("local", [True, False])
def test_unsharded_stream_matches_read_chunks(memory, local):
    kv = Recording(memory, local)
    store = UnshardedChunkStore(kv, GRID)
    present = COORDS[::2]
    for c in present[:-1]:
        memory.set(chunk_key(GRID, c), blob_of(c))
    gz = present[-1]  # CloudVolume's gzipped chunk file
    memory.set(chunk_key(GRID, gz) + ".gz", gzip.compress(blob_of(gz)))
    check_stream(store, COORDS, present)
    kv.calls.clear()
    next(store.iter_chunks(COORDS))
    # local: one file read per chunk taken; remote: every request sent at once first
    assert len(kv.gets) == 1 if local else len(kv.gets) >= len(COORDS)


def test_unsharded_stream_names_a_corrupt_gz_file(memory):
    store = UnshardedChunkStore(memory, GRID)
    memory.set(chunk_key(GRID, COORDS[1]) + ".gz", b"\x1f\x8bnot really gzip data....")
    with pytest.raises(ChunkDecodeError, match=chunk_key(GRID, COORDS[1]) + ".gz"):
        list(store.iter_chunks(COORDS))


@pytest.mark.parametrize("data_encoding", ["raw", "gzip"])
@pytest.mark.parametrize("hash_", ["identity", "murmurhash3_x86_128"])
def test_sharded_stream_matches_read_chunks(memory, data_encoding, hash_):
    spec = ShardingSpec(hash=hash_, preshift_bits=1, minishard_bits=1, shard_bits=1,
                        minishard_index_encoding="gzip", data_encoding=data_encoding)
    store = ShardedChunkStore(memory, GRID, spec)
    present = [c for i, c in enumerate(COORDS) if i % 3]
    codes = store.codes(present).tolist()
    write_shards(memory, spec, {k: blob_of(c) for k, c in zip(codes, present)})
    check_stream(store, COORDS, present)
    reader = ShardReader(memory, spec)
    asked = store.codes(COORDS)
    assert dict(reader.iter_data_many(asked)) == reader.get_data_many(asked)


def test_sharded_stream_reads_about_max_read_bytes_at_a_time(memory):
    spec = ShardingSpec(hash="identity", preshift_bits=0, minishard_bits=0, shard_bits=0,
                        minishard_index_encoding="raw", data_encoding="raw")
    data = {k: bytes([k]) * 1000 for k in range(40)}
    write_shards(memory, spec, data)
    store = Recording(memory, True)
    batches = store.calls
    reader = ShardReader(store, spec, coalesce_gap=0, max_read=2500)
    keys = list(range(0, 40, 2))  # 1000-byte values 1000 bytes apart: 20 requests
    assert dict(reader.iter_data_many(keys)) == {k: data[k] for k in keys}
    data_batches = batches[-10:]  # after the index reads: two 1000-byte requests per batch
    assert [len(b) for b in data_batches] == [2] * 10
    batches.clear()
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    assert len(batches[-1]) == 20  # all at once


def test_sharded_stream_names_corrupt_gzip_data(memory):
    spec = ShardingSpec(hash="identity", preshift_bits=0, minishard_bits=0, shard_bits=0,
                        minishard_index_encoding="raw", data_encoding="gzip")
    reader = ShardReader(memory, spec)
    write_shards(memory, spec, {5: b"hello" * 10})
    blob = bytearray(memory.get("0.shard"))
    blob[spec.index_length + 12] ^= 0xFF  # inside the deflate stream of key 5
    memory.set("0.shard", bytes(blob))
    reader.invalidate()
    with pytest.raises(ShardFormatError, match=r"0\.shard: minishard 0: data of key 5"):
        dict(reader.iter_data_many([5]))


def test_batches_follow_units_unless_too_few_for_the_threads(tmp_path):
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
            "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "raw",
            "data_encoding": "raw"}
    vol = Volume.create(str(tmp_path / "v"), size=(64, 64, 64), chunk_size=(8, 8, 8),
                        sharding=spec)
    arr, store = vol._array, vol._array.store
    coords = [(x, y, z, 0) for z in range(8) for y in range(8) for x in range(8)]
    assert sorted(map(len, store.units(coords).values())) == [64] * 8
    for threads in (1, 2, 4, 5, 7):
        batches = arr._batches(coords, threads)
        assert sorted(c for b in batches for c in b) == sorted(coords)
        # about 8 batches per thread, each of one shard (a shard of more chunks in pieces:
        # a batch holds its stored bytes while it decodes)
        target = max(8, -(-512 // (8 * threads)))
        assert all(len(store.units(b)) == 1 for b in batches)
        assert max(map(len, batches)) == min(64, target) and len(batches) >= 2 * threads
    one_shard = coords[:2]  # two chunks of one shard, three threads: split in two batches
    assert sorted(map(len, arr._batches(one_shard, 3))) == [1, 1]


def test_work_estimate_decides_threads():
    w = WorkEstimate()
    assert w.threads(1, 4) == 4  # unknown work: parallel
    w.record(MIN_PARALLEL_SECONDS / 10, 1)
    assert w.threads(5, 4) == 1  # half the threshold: caller's thread only
    assert w.threads(20, 4) == 4
    w.record(0.0, 0)  # no items: nothing learnt
    assert w.seconds == pytest.approx(MIN_PARALLEL_SECONDS / 10)


@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
@pytest.mark.parametrize("sharded", [False, True])
def test_reads_alone_and_in_threads_match_the_model(tmp_path, encoding, sharded):
    rng = np.random.default_rng(5)
    model = rng.integers(0, 4, (37, 29, 23, 1)).astype(np.uint32)
    vol = Volume.create(str(tmp_path / "v"), size=model.shape[:3], chunk_size=(8, 8, 8),
                        data_type="uint32", encoding=encoding,
                        sharding="auto" if sharded else None, parallel=3)
    vol[...] = model
    arr = vol._array
    for seconds in (None, 1.0, 0.0):  # unknown, slow chunks (threads), fast chunks (alone)
        for _ in range(5):
            arr._read_work.seconds = seconds
            lo = rng.integers(0, model.shape[:3])
            hi = np.minimum(lo + rng.integers(1, 20, 3), model.shape[:3])
            key = (slice(lo[0], hi[0]), slice(lo[1], hi[1], 2), slice(lo[2], hi[2]))
            np.testing.assert_array_equal(vol[key], model[key])
    np.testing.assert_array_equal(vol[...], model)


def test_missing_chunk_is_named_in_the_stream(tmp_path):
    vol = Volume.create(str(tmp_path / "v"), size=(8, 8, 8), chunk_size=(4, 4, 4))
    vol[0:4, 0:4, 0:4] = 1
    strict = Volume(str(tmp_path / "v"), fill_missing=False)
    missing = r"chunk file://.*/1_1_1/4-8_\d-\d_\d-\d is missing"
    with pytest.raises(MissingChunkError, match=missing):
        strict[4:8, ...]


def test_writers_bounded_by_units_in_flight(tmp_path):
    vol = Volume.create(str(tmp_path / "v"), size=(8, 8, 8), chunk_size=(4, 4, 4),
                        data_type="uint64", parallel=2)
    arr = vol._array
    # chunks of 4^3 uint64 = 512 bytes
    assert arr._writers(n_units=100, n_chunks=100, threads=2) == 8  # small units: 8 writers
    assert arr._writers(n_units=4, n_chunks=4 * 2**17, threads=3) == 3  # 64 MB units: threads
    assert arr._writers(n_units=4, n_chunks=4 * 2**15, threads=2) == 4  # 16 MB units: 4
