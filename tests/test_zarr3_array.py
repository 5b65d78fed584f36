"""ZarrArray (shardvol.zarr3.open / create): numpy slicing against TensorStore and zarr-python.

Random shapes, data types, shard and inner chunk shapes, inner codecs, index
codecs (with and without crc32c) and index locations: arrays written through
ZarrArray slices (whole and random partial overwrites, checked against a numpy
model) are read by both oracles, and arrays the oracles write are sliced by
ZarrArray.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import shardvol.zarr3 as z
from shardvol.errors import (
    AlreadyExistsError,
    ChecksumError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    ReadOnlyStoreError,
    ShardFormatError,
    UnsupportedCodecError,
)
from shardvol.kvstore import FileStore, MemoryStore

from .stores import race_zarr3_shard_rewrite
from .test_zarr3_chunked import random_key
from .test_zarr3_roundtrip import equal, random_case, random_data
from .zarr3_util import ts_read, ts_write, zarr_read, zarr_write

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "testdata")


def create_like(path: str, meta, **kwargs) -> z.ZarrArray:
    """A ZarrArray created through the public API with ``meta``'s parameters."""
    sharding = meta.sharding
    return z.create(
        path,
        meta.shape,
        meta.dtype,
        meta.chunk_shape,
        sharding.chunk_shape if sharding else None,
        codecs=sharding.codecs if sharding else meta.codecs,
        index_codecs=sharding.index_codecs if sharding else None,
        index_location=sharding.index_location if sharding else "end",
        fill_value=meta.fill_value,
        **kwargs,
    )


def random_box(rng, shape) -> tuple[slice, ...]:
    return tuple(slice(*sorted(int(v) for v in rng.integers(0, n + 1, 2))) for n in shape)


@pytest.mark.parametrize("seed", range(12))
def test_oracles_read_what_zarrarray_writes(tmp_path, seed):
    meta, data = random_case(700 + seed, sharded=seed % 4 != 3)
    path = str(tmp_path / "a")
    arr = create_like(path, meta)
    assert arr.shape == meta.shape and arr.dtype == meta.dtype and arr.ndim == meta.ndim
    assert arr.chunks == meta.inner_chunk_shape
    assert arr.shards == (meta.chunk_shape if meta.sharding else None)
    arr[...] = data
    assert equal(ts_read(path), data) and equal(zarr_read(path), data)
    rng = np.random.default_rng(seed)
    expected = data.copy()
    for n in range(5):  # partial overwrites: read-modify-write of the shards they touch
        key = random_box(rng, meta.shape)
        value = random_data(rng, meta)[key] if n % 2 else meta.fill_value
        arr[key] = value
        expected[key] = value
    assert equal(arr[...], expected)
    assert equal(ts_read(path), expected), meta.to_json()
    assert equal(zarr_read(path), expected), meta.to_json()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("writer", ["tensorstore", "zarr"])
def test_zarrarray_slices_what_oracles_write(tmp_path, seed, writer):
    meta, data = random_case(800 + seed, sharded=seed != 5)
    path = str(tmp_path / "a")
    (ts_write if writer == "tensorstore" else zarr_write)(path, meta, data)
    arr = z.open(path, mode="r")
    assert equal(arr[...], data)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        key = random_key(rng, meta.shape)
        assert equal(np.asarray(arr[key]), data[key]), key
    assert np.asarray(arr).shape == data.shape


@pytest.mark.parametrize("seed", range(6))
def test_strided_and_integer_writes_across_shards(tmp_path, seed):
    """Writes with steps (negative too) and integer indices, cut per shard, as numpy does them."""
    meta, data = random_case(900 + seed)
    path = str(tmp_path / "a")
    arr = create_like(path, meta)
    arr[...] = data
    expected = data.copy()
    rng = np.random.default_rng(seed)
    for _ in range(5):
        key = random_key(rng, meta.shape)
        value = random_data(rng, meta)[key]
        arr[key] = value
        expected[key] = value
    assert equal(arr[...], expected)
    assert equal(ts_read(path), expected), meta.to_json()


def test_concurrent_partial_writes_to_one_shard(tmp_path):
    """Writers of different inner chunks of one shard never lose each other's chunks."""
    from concurrent.futures import ThreadPoolExecutor

    path = str(tmp_path / "a")
    arr = z.create(path, (16, 16), "uint16", (16, 16), (4, 4))
    cells = [(i, j) for i in range(4) for j in range(4)]

    def write(cell):
        i, j = cell
        z.open(path)[4 * i : 4 * i + 4, 4 * j : 4 * j + 3] = 10 * i + j + 1

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, cells))
    expected = np.zeros((16, 16), "u2")
    for i, j in cells:
        expected[4 * i : 4 * i + 4, 4 * j : 4 * j + 3] = 10 * i + j + 1
    assert equal(ts_read(path), expected) and equal(arr[...], expected)


def test_index_location_and_crc32c_on_disk(tmp_path):
    """Both index locations, with and without crc32c: layout as the spec says, oracles agree."""
    data = np.arange(8 * 6, dtype="<u4").reshape(8, 6)
    for location in ("start", "end"):
        for index_codecs in (["bytes"], ["bytes", "crc32c"]):
            path = str(tmp_path / f"{location}{len(index_codecs)}")
            arr = z.create(path, (8, 6), "uint32", (4, 6), (2, 3), codecs=["bytes"],
                           index_codecs=index_codecs, index_location=location)  # fmt: skip
            arr[...] = data
            shard = FileStore(path).get("c/0/0")
            index_bytes = 4 * 16 + 4 * (len(index_codecs) - 1)
            assert len(shard) == index_bytes + data[:4].nbytes
            index = shard[:index_bytes] if location == "start" else shard[-index_bytes:]
            offsets = np.frombuffer(index[:64], "<u8")[::2]
            assert offsets[0] == (index_bytes if location == "start" else 0)
            assert equal(ts_read(path), data) and equal(zarr_read(path), data)


def test_missing_shards_read_as_fill_and_fill_shards_are_deleted(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (10, 9), "int16", (4, 6), (2, 3), fill_value=-7)
    assert equal(arr[...], np.full((10, 9), -7, "i2"))
    arr[0:4, 0:6] = 5
    store = FileStore(path)
    assert store.list("c/") == ["c/0/0"]
    arr[1, 1] = -7  # the shard stays (other chunks are not fill)
    arr[0:4, 0:6] = -7  # now every chunk of it is fill: the shard goes
    assert store.list("c/") == []
    arr[9, 8] = 1  # an edge shard: its padding is fill
    expected = np.full((10, 9), -7, "i2")
    expected[9, 8] = 1
    assert store.list("c/") == ["c/2/1"]
    assert equal(ts_read(path), expected) and equal(arr[...], expected)


def test_properties_attributes_and_repr(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (5, 6, 7), "float32", (4, 4, 4), fill_value=float("nan"),
                   dimension_names=["z", "y", "x"], attributes={"a": 1})  # fmt: skip
    assert arr.shards is None and arr.chunks == (4, 4, 4) and arr.size == 210
    assert arr.nbytes == 840 and np.isnan(arr.fill_value) and arr.dimension_names == ("z", "y", "x")
    assert arr.url.endswith("/a") and "ZarrArray" in repr(arr)
    arr.update_attributes({"b": [2]})
    again = z.open(path)
    assert again.attrs == {"a": 1, "b": [2]} and again.metadata == arr.metadata
    assert np.isnan(arr[...]).all()
    ts_arr = json.loads(FileStore(path).get("zarr.json"))
    assert ts_arr["attributes"] == {"a": 1, "b": [2]} and ts_arr["fill_value"] == "NaN"


def test_order_f(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (6, 5), "uint8", (4, 4), (2, 2))
    data = np.arange(30, dtype="u1").reshape(6, 5)
    arr[...] = data
    got = z.open(path, order="F")[...]
    assert got.flags.f_contiguous and equal(got, data)
    assert z.open(path)[...].flags.c_contiguous


def test_create_overwrite(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (8, 8), "uint8", (4, 4), (2, 2))
    arr[...] = 3
    with pytest.raises(AlreadyExistsError, match=re.escape("zarr.json")):
        z.create(path, (8, 8), "uint8", (4, 4), (2, 2))
    again = z.create(path, (8, 8), "uint8", (4, 4), (2, 2), overwrite=True)
    assert FileStore(path).list("c/") == []  # the old shards are gone
    assert equal(again[...], np.zeros((8, 8), "u1"))


def test_golden_arrays_through_slicing():
    root = os.path.join(GOLDEN, "google__neuroglancer__zarr3_from_zarrita")
    name = "3d.chunked.mixed.compressed.sharded.i2"
    expected = np.load(os.path.join(root, "expected_sharded", f"{name}.npy"))
    arr = z.open(os.path.join(root, "data.zarr", name), mode="r")
    assert equal(arr[...], expected)
    assert equal(arr[1:, ::2, -1], expected[1:, ::2, -1])


# --------------------------------------------------------------------------- bad input


def test_bounds_dtype_shape_and_mode_errors(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (6, 5), "uint8", (4, 4), (2, 2))
    with pytest.raises(OutOfBoundsError, match="axis 0"):
        arr[4:7]
    with pytest.raises(OutOfBoundsError, match="axis 1"):
        arr[0, 5]
    with pytest.raises(OutOfBoundsError):
        arr[-7] = 1
    with pytest.raises(InvalidArgumentError, match="too many indices"):
        arr[0, 0, 0]
    with pytest.raises(InvalidArgumentError, match="only basic indexing"):
        arr[[0, 1]]
    with pytest.raises(InvalidArgumentError, match="shape"):
        arr[0:2, 0:2] = np.zeros((3, 3), "u1")
    with pytest.raises(InvalidArgumentError, match="without loss"):
        arr[0:2, 0:2] = np.zeros((2, 2), "f4")
    with pytest.raises(InvalidArgumentError, match="256"):
        arr[0, 0] = 256
    with pytest.raises(ReadOnlyStoreError, match="mode='r'"):
        z.open(path, mode="r")[0, 0] = 1
    with pytest.raises(InvalidArgumentError, match="mode"):
        z.open(path, mode="w")
    assert FileStore(path).list("c/") == []


def test_unsupported_codec_and_dtype(tmp_path):
    with pytest.raises(UnsupportedCodecError, match="'lzma'"):
        z.create(str(tmp_path / "a"), (4,), "uint8", (4,), (2,), codecs=["lzma"])
    with pytest.raises(UnsupportedCodecError, match="data type"):
        z.create(str(tmp_path / "b"), (4,), "U3", (4,))
    arr = z.create(str(tmp_path / "c"), (4,), "uint8", (4,), (2,))
    for edit, error, match in [
        (lambda d: d["codecs"][0]["configuration"]["codecs"].append({"name": "lzma"}),
         UnsupportedCodecError, "lzma"),
        (lambda d: d.update(data_type="string"), UnsupportedCodecError, "'string'"),
        (lambda d: d.pop("fill_value"), InfoError, "fill_value"),
        (lambda d: d.pop("chunk_grid"), InfoError, "chunk_grid"),
        (lambda d: d.update(node_type="group"), InfoError, "node_type"),
    ]:  # fmt: skip
        doc = arr.metadata.to_json()
        edit(doc)
        store = FileStore(str(tmp_path / "bad"))
        store.set("zarr.json", json.dumps(doc).encode())
        with pytest.raises(error, match=match):
            z.open(store.root)
    with pytest.raises(InfoError, match=re.escape("no zarr.json")):
        z.open(str(tmp_path / "nothing"))


def test_corrupt_shard_names_it(tmp_path):
    path = str(tmp_path / "a")
    arr = z.create(path, (8,), "uint16", (8,), (2,))
    arr[...] = np.arange(8, dtype="u2") + 1
    store = FileStore(path)
    shard = bytearray(store.get("c/0"))
    shard[-1] ^= 0xFF  # the index checksum
    store.set("c/0", bytes(shard))
    with pytest.raises(ChecksumError, match="c/0"):
        arr[...]
    store.set("c/0", bytes(shard[-10:]))  # shorter than its index
    with pytest.raises(ShardFormatError, match=r"'c/0'.* only 10 bytes"):
        arr[2:4]


def test_zero_dimensional_arrays_both_ways(tmp_path):
    import zarr

    path = str(tmp_path / "a")
    theirs = zarr.create_array(path, shape=(), dtype="int32", fill_value=4)
    ours = z.open(path)
    assert ours[()] == 4  # no chunk stored: the fill value
    theirs[()] = 9
    assert ours[()] == 9 and ours[...] == 9
    ours[()] = -3
    assert zarr.open_array(path)[()] == -3


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_shard_replaced_between_index_and_chunk_reads(index_location):
    got, old, new, arr = race_zarr3_shard_rewrite(
        MemoryStore, f"memory://zarr-race-{index_location}", index_location)
    assert np.array_equal(got, old[4:8, 4:8]) or np.array_equal(got, new[4:8, 4:8]), got
    assert np.array_equal(arr[...], new)


@pytest.mark.parametrize(
    "codecs",
    [["zstd"], [{"name": "transpose", "configuration": {"order": [2, 1, 0]}}, "zstd"], []],
)
def test_a_chunk_shape_far_larger_than_the_stored_chunks_is_a_decode_error(tmp_path, codecs):
    z.create(str(tmp_path), (8, 8, 8), "uint16", (8, 8, 8), codecs=codecs)[...] = 3
    doc = json.loads((tmp_path / "zarr.json").read_text())
    doc["shape"] = doc["chunk_grid"]["configuration"]["chunk_shape"] = [1 << 14] * 3  # 8 TiB
    (tmp_path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(ChunkDecodeError, match="c/0/0/0"):
        z.open(str(tmp_path), mode="r")[0:2, 0:2, 0:2]


def stored(path) -> list[str]:
    return sorted(f for f in os.listdir(path / "c") if not f.startswith("."))


def test_chunks_of_negative_zeros_and_nan_payloads_are_kept(tmp_path):
    # a chunk equal to the fill value is not stored: equal bit for bit (TensorStore's rule)
    a = z.create(str(tmp_path / "z"), (4,), "float64", (2,), fill_value=0.0)
    a[...] = np.array([-0.0, -0.0, 0.0, 0.0])
    assert stored(tmp_path / "z") == ["0"]
    assert np.signbit(a[...]).tolist() == np.signbit(ts_read(str(tmp_path / "z"))).tolist() == [
        True, True, False, False]
    payload = np.array([0x7FC00001] * 2, np.uint32).view(np.float32)
    n = z.create(str(tmp_path / "n"), (4,), "float32", (2,), fill_value="NaN")
    n[0:2] = payload
    n[2:4] = np.float32("nan")  # the fill value's own bits: not stored
    assert stored(tmp_path / "n") == ["0"]
    assert n[...].view(np.uint32).tolist() == [0x7FC00001] * 2 + [0x7FC00000] * 2
    c = z.create(str(tmp_path / "c"), (2,), "complex64", (2,), fill_value=[0.0, 0.0])
    c[...] = np.complex64(complex(0.0, -0.0))
    assert stored(tmp_path / "c") == ["0"]
    assert np.signbit(ts_read(str(tmp_path / "c")).imag).all()


def test_blosc_typesize_is_written_for_tensorstore(tmp_path):
    blosc = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle"}}
    a = z.create(str(tmp_path), (4,), "uint16", (4,), codecs=[blosc])
    a[...] = np.arange(4, dtype=np.uint16)
    config = json.loads((tmp_path / "zarr.json").read_text())["codecs"][-1]["configuration"]
    assert config["typesize"] == 2
    assert ts_read(str(tmp_path)).tolist() == [0, 1, 2, 3]


def test_complex_scalars_and_fill_values(tmp_path):
    a = z.create(str(tmp_path), (3,), "complex64", (3,), fill_value=["NaN", 0.0])
    assert np.isnan(a[0].real) and a[0].imag == 0
    a[0] = 1 + 2j
    a[1] = np.complex128(0.5 - 1j)
    a[2] = 3  # real and exact
    assert a[...].tolist() == [1 + 2j, 0.5 - 1j, 3 + 0j]
    for bad in (1 + 0.1j, complex(float("nan"), 0.1)):  # 0.1 is not a float32
        with pytest.raises(InvalidArgumentError, match="exactly"):
            a[0] = bad
    for dtype, fill in (("float32", None), ("float32", [1.0]), ("complex64", [1.0]), ("int8", 300)):
        with pytest.raises(InvalidArgumentError, match="fill_value"):
            z.create(str(tmp_path / "bad"), (2,), dtype, (2,), fill_value=fill, overwrite=True)


def test_groups_and_out_of_bounds_indexes_are_named(tmp_path):
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(InfoError, match="'node_type' must be 'array', got 'group'"):
        z.open(str(tmp_path), mode="r")
    a = z.create(str(tmp_path / "a"), (4, 5), "uint8", (2, 2))
    with pytest.raises(OutOfBoundsError, match=r"index -5 is outside .*\[0, 4\)"):
        a[-5]
    with pytest.raises(OutOfBoundsError, match=r"axis 1: index 5 is outside"):
        a[0, 5]
    with pytest.raises(OutOfBoundsError, match=r"\[-16, 4\) is outside"):
        a[-20:]
