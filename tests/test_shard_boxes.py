"""Raw and jpeg chunks of local shards read straight into the output
(shardvol.precomputed.shard_boxes, csrc/chunkbox).

TensorStore writes the sharded volumes; every read is compared with what TensorStore reads.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardvol import Volume
from shardvol.array.indexing import chunk_parts
from shardvol.errors import ShardvolError
from shardvol.precomputed.shard_boxes import ShardBoxReader
from tests.oracles import RANDOM_VOLUMES, random_values, ts_create


def _spec(data_encoding: str, preshift: int = 1) -> dict:
    return {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
            "preshift_bits": preshift, "minishard_bits": 1, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": data_encoding}


def _ts_volume(path, data, offset, chunk, data_encoding="gzip", preshift=1, encoding="raw"):
    store = ts_create(
        str(path), data_type=data.dtype.name, num_channels=data.shape[3],
        size=list(data.shape[:3]), resolution=[1, 1, 1], voxel_offset=list(offset),
        chunk_size=list(chunk), encoding=encoding, sharding=_spec(data_encoding, preshift),
    )
    store.write(data).result()
    return store


def _check_random_boxes(vol, oracle, rng, shape, offset):
    """Random boxes read by the volume and by its box reader alone, against TensorStore's
    reads; the box reader reads every stored chunk itself."""
    reader = vol.chunked_array.box_reader
    for _ in range(10):
        lo = [int(rng.integers(0, s)) for s in shape]
        box = tuple(slice(o + a, o + int(rng.integers(a + 1, s + 1)))
                    for o, a, s in zip(offset, lo, shape))
        got = vol[box]
        want = oracle[box].read(order="F").result()
        np.testing.assert_array_equal(got, want)
        parts = chunk_parts(vol._selection(box, True), vol.chunked_array.grid)
        out = np.zeros(got.shape, got.dtype, order="F")
        codes = reader.store.codes([p.coord for p in parts]).tolist()
        stored = reader.store.reader.locate(codes)
        left = reader.read_into(parts, out)  # all the stored chunks are read here
        assert {p.coord for p in left} == {  # (TensorStore stores no chunk of zeros)
            p.coord for p, k in zip(parts, codes) if k not in stored}
        np.testing.assert_array_equal(out, want)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM_VOLUMES, data_encoding=st.sampled_from(["gzip", "raw"]))
def test_random_boxes_match_tensorstore(tmp_path_factory, dtype, channels, shape, chunk,
                                        offset, data_encoding, seed):
    rng = np.random.default_rng(seed)
    data = random_values((*shape, channels), dtype, rng)
    path = tmp_path_factory.mktemp("v")
    oracle = _ts_volume(path, data, offset, chunk, data_encoding)
    vol = Volume(str(path))
    reader = vol.chunked_array.box_reader
    assert isinstance(reader, ShardBoxReader)
    assert reader.codec == data_encoding
    _check_random_boxes(vol, oracle, rng, shape, offset)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(channels=st.sampled_from([1, 3]), shape=RANDOM_VOLUMES["shape"],
       chunk=st.tuples(st.integers(1, 33), st.integers(1, 33), st.integers(1, 9)),
       offset=RANDOM_VOLUMES["offset"], data_encoding=st.sampled_from(["gzip", "raw"]),
       seed=RANDOM_VOLUMES["seed"])
def test_random_boxes_of_jpeg_chunks_match_tensorstore(tmp_path_factory, channels, shape,
                                                       chunk, offset, data_encoding, seed):
    """Smooth images (jpeg keeps them close, and their chunks differ from each other)."""
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    data = np.stack([(x * (3 + c) + y * (5 - c) + z * 7 + rng.integers(0, 40)) % 256
                     for c in range(channels)], axis=-1).astype(np.uint8)
    path = tmp_path_factory.mktemp("j")
    oracle = _ts_volume(path, data, offset, chunk, data_encoding, encoding="jpeg")
    vol = Volume(str(path))
    reader = vol.chunked_array.box_reader
    assert isinstance(reader, ShardBoxReader)
    assert reader.codec == ("gzip jpeg" if data_encoding == "gzip" else "jpeg")
    _check_random_boxes(vol, oracle, rng, shape, offset)


def test_missing_chunks_read_as_fill_and_damaged_ones_are_errors(tmp_path):
    rng = np.random.default_rng(4)
    data = np.zeros((32, 32, 16, 1), np.uint16)
    data[:8, :8, :8] = rng.integers(1, 1000, (8, 8, 8, 1))  # one chunk stored
    _ts_volume(tmp_path, data, (0, 0, 0), (8, 8, 8))
    vol = Volume(str(tmp_path))
    np.testing.assert_array_equal(vol[2:30, 3:31, 1:15], data[2:30, 3:31, 1:15])
    parts = chunk_parts(vol._selection((slice(0, 16), slice(0, 8), slice(0, 8)), True),
                        vol.chunked_array.grid)
    out = np.empty((16, 8, 8, 1), np.uint16, order="F")
    assert [p.coord[:3] for p in vol.chunked_array.box_reader.read_into(parts, out)] == [
        (1, 0, 0)]  # absent: filled by the general path
    (shard,) = [f for f in os.listdir(tmp_path / vol.scale.key) if f.endswith(".shard")]
    raw = bytearray((tmp_path / vol.scale.key / shard).read_bytes())
    at = raw.find(b"\x1f\x8b", 16 * 4)  # the chunk's gzip member, after the shard index
    raw[at:at + 2] = b"\0\0"
    (tmp_path / vol.scale.key / shard).write_bytes(bytes(raw))
    general = Volume(str(tmp_path))
    general.chunked_array.box_reader = None
    for reading in (general, Volume(str(tmp_path))):  # (the damage is the general path's to name)
        with pytest.raises(ShardvolError, match=r"0\.shard.*corrupt gzip data"):
            reading[0:4, 0:4, 0:4]


def test_a_replaced_shard_is_read_at_its_new_version(tmp_path):
    rng = np.random.default_rng(5)
    first, second = (rng.integers(0, 255, (16, 16, 8, 1), dtype=np.uint8) for _ in range(2))
    _ts_volume(tmp_path / "a", first, (0, 0, 0), (8, 8, 8), preshift=9)  # one shard
    _ts_volume(tmp_path / "b", second, (0, 0, 0), (8, 8, 8), preshift=9)
    vol = Volume(str(tmp_path / "a"))
    np.testing.assert_array_equal(vol[:, :, :], first)  # its indexes are cached now
    key = vol.scale.key
    (shard,) = [f for f in os.listdir(tmp_path / "b" / key) if f.endswith(".shard")]
    os.replace(tmp_path / "b" / key / shard, tmp_path / "a" / key / shard)
    np.testing.assert_array_equal(vol[1:15, 2:13, 0:8], second[1:15, 2:13, 0:8])


def test_raw_and_uint8_jpeg_chunks_in_local_shards_only(tmp_path):
    jpeg = Volume.create(str(tmp_path / "j"), size=[16, 16, 16], data_type="uint8",
                         chunk_size=[8, 8, 8], encoding="jpeg", sharding="auto")
    assert isinstance(jpeg.chunked_array.box_reader, ShardBoxReader)
    cseg = Volume.create(str(tmp_path / "c"), size=[16, 16, 16], data_type="uint32",
                         chunk_size=[8, 8, 8], encoding="compressed_segmentation",
                         sharding="auto")
    assert cseg.chunked_array.box_reader is None
    mem = Volume.create("memory://raw-shards-test", size=[16, 16, 16], data_type="uint8",
                        chunk_size=[8, 8, 8], sharding="auto")
    assert mem.chunked_array.box_reader is None


def test_a_damaged_jpeg_chunk_is_the_general_paths_to_name(tmp_path):
    data = np.random.default_rng(6).integers(0, 255, (16, 16, 8, 1), dtype=np.uint8)
    _ts_volume(tmp_path, data, (0, 0, 0), (8, 8, 8), data_encoding="raw", preshift=9,
               encoding="jpeg")
    vol = Volume(str(tmp_path))
    (shard,) = [f for f in os.listdir(tmp_path / vol.scale.key) if f.endswith(".shard")]
    raw = bytearray((tmp_path / vol.scale.key / shard).read_bytes())
    at = raw.find(b"\xff\xda")  # the first chunk's scan: its entropy-coded data after it
    raw[at + 20:at + 60] = b"\xff\xd9" * 20
    (tmp_path / vol.scale.key / shard).write_bytes(bytes(raw))
    general = Volume(str(tmp_path))
    general.chunked_array.box_reader = None
    for reading in (general, Volume(str(tmp_path))):
        with pytest.raises(ShardvolError, match=r"0\.shard.*jpeg"):
            reading[...]
