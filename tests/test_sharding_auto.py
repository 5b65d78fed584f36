"""sharding="auto": shards are aligned blocks of chunks, and shard_shape says which."""

from __future__ import annotations

import tracemalloc
import uuid

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol import Volume
from shardvol import _reference as reference
from shardvol._ext.morton import compressed_morton_code
from shardvol.array.grid import ChunkGrid
from shardvol.kvstore import MemoryStore
from shardvol.precomputed import sharded as sharded_store
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.sharding import ShardingSpec, auto_sharding, shard_shape
from shardvol.sharding.auto import shard_shape_in_chunks


@settings(max_examples=40, deadline=None)
@given(
    st.tuples(*[st.integers(1, 24) for _ in range(3)]),
    st.sampled_from([1, 4096, 262144, 2**21]),
    st.sampled_from([2**16, 2**20, 2**24]),
)
def test_auto_shards_are_the_predicted_aligned_blocks(grid, chunk_bytes, target):
    spec = auto_sharding(grid, chunk_bytes, "raw", target_shard_bytes=target)
    assert spec.hash == "identity"
    block = shard_shape_in_chunks(spec, grid)
    assert block is not None
    per_shard = 2 ** (spec.preshift_bits + spec.minishard_bits)
    assert per_shard * chunk_bytes <= max(target, chunk_bytes)
    coords = np.stack(np.unravel_index(np.arange(np.prod(grid)), grid), 1)
    shards, _ = spec.shard_and_minishard(compressed_morton_code(coords, grid))
    # every shard holds exactly the chunks of one aligned block
    blocks = coords // np.array(block)
    for s in np.unique(shards):
        members = blocks[shards == s]
        assert (members == members[0]).all()
    assert len(np.unique(shards)) == len(np.unique(blocks, axis=0))


def test_shard_shape_is_none_for_hashed_or_aliased_specs():
    base = {"preshift_bits": 1, "minishard_bits": 2, "shard_bits": 4,
            "minishard_index_encoding": "raw", "data_encoding": "raw"}
    hashed = ShardingSpec.from_dict({"@type": "neuroglancer_uint64_sharded_v1",
                                     "hash": "murmurhash3_x86_128", **base})
    assert shard_shape(hashed, (16, 16, 16), (64, 64, 64)) is None
    aliased = ShardingSpec.from_dict({"@type": "neuroglancer_uint64_sharded_v1",
                                      "hash": "identity", **base})
    assert shard_shape(aliased, (64, 64, 64), (8, 8, 8)) is None  # 18 bits > 3 + 4
    assert shard_shape(aliased, (8, 4, 4), (8, 8, 8)) == (16, 16, 16)  # bits x0 y0 z0


def test_volume_auto_sharding_and_shard_aligned_writes(tmp_path):
    vol = Volume.create(str(tmp_path), size=(256, 256, 64), chunk_size=(32, 32, 32),
                        data_type="uint16", sharding="auto")
    spec = vol.sharding
    grid = vol.scale.grid_size
    shape = shard_shape(spec, grid, vol.chunk_size)
    assert shape is not None and vol.shard_shape == shape
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1000, (256, 256, 64, 1)).astype(np.uint16)
    vol[...] = data
    files = sorted(p.name for p in (tmp_path / "1_1_1").iterdir() if not p.name.startswith("."))
    expected = int(np.prod([-(-n // s) for n, s in zip((256, 256, 64), shape)]))
    assert len(files) == expected and all(f.endswith(".shard") for f in files)
    np.testing.assert_array_equal(vol[...], data)


@pytest.mark.parametrize("encoding, data", [("jpeg", "raw"), ("raw", "gzip"),
                                            ("compressed_segmentation", "gzip")])
def test_auto_data_encoding(encoding, data):
    assert auto_sharding((4, 4, 4), 1000, encoding).data_encoding == data


def _store(grid_size, spec):
    grid = ChunkGrid((0, 0, 0, 0), (*grid_size, 1), (1, 1, 1, 1))
    return ShardedChunkStore(MemoryStore(f"memory://units-{uuid.uuid4().hex}"), grid, spec)


def test_unit_chunks_of_hashed_shards_match_the_reference():
    spec = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=1, minishard_bits=1,
                        shard_bits=3)
    grid = (5, 7, 3)
    expected: dict[int, set] = {s: set() for s in range(8)}
    for x, y, z in np.ndindex(*grid):
        code = int(reference.compressed_morton_code(np.array([[x, y, z]]), grid)[0])
        h = mmh3.hash64((code >> 1).to_bytes(8, "little"), 0, False)[0] % 2**64
        expected[(h >> 1) & 7].add((x, y, z, 0))
    store = _store(grid, spec)
    assert {s: set(store.unit_chunks(s)) for s in range(8)} == expected
    assert all(len(store.unit_chunks(s)) == len(expected[s]) for s in range(8))


def test_grids_too_large_to_enumerate_are_scanned(monkeypatch):
    """Past the enumeration limit unit_chunks gives None (writers then merge), while the
    scans used to plan copies find the same members and units, block by block."""
    spec = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=1, minishard_bits=1,
                        shard_bits=3)
    grid = (5, 7, 3)
    expected = {s: _store(grid, spec).unit_chunks(s) for s in range(8)}
    monkeypatch.setattr(sharded_store, "_ENUMERATE_LIMIT", 50)
    monkeypatch.setattr(sharded_store, "_ENUMERATE_BLOCK", 16)
    store = _store(grid, spec)
    assert store.unit_chunks(0) is None
    assert {s: store.scan_unit_chunks(s) for s in range(8)} == expected
    assert list(store.all_units()) == [s for s in range(8) if expected[s]]


def test_unit_chunks_of_a_large_hashed_grid_take_little_memory():
    spec = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=6, shard_bits=10)
    store = _store((100, 100, 100), spec)  # a million chunks
    tracemalloc.start()
    try:
        members = store.unit_chunks(5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < len(members) < 2000
    assert peak < 64e6  # chunk lists of every shard as Python tuples took 240 MB
