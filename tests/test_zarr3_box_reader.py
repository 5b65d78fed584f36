"""Boxes of zstd inner chunks of local shards decoded straight into the output
(shardvol.zarr3.box_reader, csrc/chunkbox).

TensorStore writes the arrays; every read is compared with what TensorStore reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import numpy as np
import pytest
import tensorstore as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardvol import zarr3
from shardvol._ext import chunkbox
from shardvol.array.indexing import chunk_parts
from shardvol.errors import ChunkDecodeError, InvalidArgumentError, ShardFormatError, StoreError
from shardvol.zarr3 import create_metadata
from shardvol.zarr3.box_reader import ShardBoxReader
from tests.c_checkers import run_checker


def _ts_array(path, data, shard, inner, codecs=None, index_location="end", fill_value=0):
    meta = create_metadata(data.shape, data.dtype, shard, inner, codecs=codecs or ["zstd"],
                           index_location=index_location, fill_value=fill_value)
    doc = meta.to_json()
    doc.pop("attributes", None)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": doc}
    arr = ts.open(spec, create=True, delete_existing=True).result()
    arr.write(data).result()
    return arr


def _random(shape, dtype, rng):
    if np.dtype(dtype).kind == "f":
        return rng.normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    # blocks of few values, as images and labels are: zstd then writes several blocks
    coarse = rng.integers(info.min, info.max, size=[-(-s // 4) for s in shape], dtype=dtype,
                          endpoint=True)
    return np.ascontiguousarray(coarse[tuple(np.arange(s) // 4 for s in shape)]
                                if len(shape) == 1 else
                                coarse[np.ix_(*(np.arange(s) // 4 for s in shape))])


def _box(rng, shape):
    lo = [int(rng.integers(0, s)) for s in shape]
    return tuple(slice(a, int(rng.integers(a + 1, s + 1))) for a, s in zip(lo, shape))


def _handled(arr, box):
    """The parts of ``box`` the box reader leaves to the general path."""
    ca = arr.chunked_array
    parts = chunk_parts(arr._selection(box), ca.grid)
    out = np.empty(tuple(s.stop - s.start for s in box), arr.dtype)
    return ca.box_reader.read_into(parts, out), out


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dtype=st.sampled_from(["uint8", "int16", "uint32", "float32", "uint64"]),
    ndim=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    order=st.sampled_from(["C", "F"]),
    index_location=st.sampled_from(["end", "start"]),
    codec=st.sampled_from(["zstd", "gzip", "raw"]),
)
def test_random_boxes_match_tensorstore(tmp_path_factory, dtype, ndim, seed, order,
                                        index_location, codec):
    rng = np.random.default_rng(seed)
    inner = [int(rng.integers(1, 9)) for _ in range(ndim)]
    shard = [i * int(rng.integers(1, 4)) for i in inner]
    shape = [int(rng.integers(1, 3 * s + 2)) for s in shard]
    data = _random(shape, dtype, rng)
    path = tmp_path_factory.mktemp("z")
    oracle = _ts_array(path, data, shard, inner, codecs=["bytes" if codec == "raw" else codec],
                       index_location=index_location)
    arr = zarr3.open(str(path), mode="r", order=order)
    assert isinstance(arr.chunked_array.box_reader, ShardBoxReader)
    assert arr.chunked_array.box_reader.codec == codec
    for _ in range(12):
        box = _box(rng, shape)
        got = arr[box]
        np.testing.assert_array_equal(got, oracle[box].read().result())
        assert got.flags.f_contiguous if order == "F" else got.flags.c_contiguous


def test_prefixes_of_chunks_of_many_blocks(tmp_path):
    """64^3 uint8 and 32^3 uint64 chunks hold several zstd blocks: boxes in a chunk's first
    half decode only its first blocks; every box read here, none left to the general path."""
    rng = np.random.default_rng(5)
    for dtype, inner in (("uint8", (64, 64, 64)), ("uint64", (32, 32, 32))):
        shape = (128, 128, 96)
        noise = rng.integers(0, 40, shape).astype(dtype)  # compresses poorly: many blocks
        path = tmp_path / dtype
        oracle = _ts_array(path, noise, (128, 128, 128 if dtype == "uint8" else 64), inner)
        arr = zarr3.open(str(path), mode="r")
        for _ in range(30):
            lo = rng.integers(0, 64, 3)
            box = tuple(slice(int(a), int(a) + int(rng.integers(1, 40))) for a in lo)
            left, out = _handled(arr, box)
            assert left == []
            np.testing.assert_array_equal(out, oracle[box].read().result())


def test_missing_chunks_and_shards_read_as_fill(tmp_path):
    data = np.zeros((40, 40), np.uint16)
    data[:8, :8] = np.arange(64, dtype=np.uint16).reshape(8, 8) + 1  # one chunk, one shard
    _ts_array(tmp_path, data, (16, 16), (8, 8), fill_value=0)
    arr = zarr3.open(str(tmp_path), mode="r")
    np.testing.assert_array_equal(arr[3:30, 2:39], data[3:30, 2:39])
    left, _ = _handled(arr, (slice(0, 12), slice(0, 12)))
    assert sorted(p.coord for p in left) == [(0, 1), (1, 0), (1, 1)]  # (absent: filled there)


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_damaged_chunks_are_errors_as_before(tmp_path, codec):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 255, (32, 32, 32), dtype=np.uint8)
    _ts_array(tmp_path, data, (32, 32, 32), (16, 16, 16), codecs=[codec])
    shard = tmp_path / "c" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    index = np.frombuffer(raw[-8 * 16 - 4:-4], "<u8").reshape(8, 2)  # (offset, nbytes) each
    first = int(index[0, 0])
    raw[first:first + 4] = b"\0\0\0\0"  # chunk (0, 0, 0): no zstd frame or gzip member
    shard.write_bytes(bytes(raw))
    arr = zarr3.open(str(tmp_path), mode="r")
    left, _ = _handled(arr, (slice(0, 20), slice(0, 4), slice(0, 4)))
    assert [p.coord for p in left] == [(0, 0, 0)]
    with pytest.raises(ChunkDecodeError, match=codec):
        arr[0:4, 0:4, 0:4]
    np.testing.assert_array_equal(arr[16:, 16:, 16:], data[16:, 16:, 16:])  # others intact
    shard.write_bytes(bytes(raw[:2000]))  # index gone: a shard shorter than its entries
    with pytest.raises(ShardFormatError):
        zarr3.open(str(tmp_path), mode="r")[0:4, 0:4, 0:4]


def _first_chunk(shard: Path, n: int = 2) -> tuple[bytearray, int, int]:
    """The bytes of a shard of ``n`` inner chunks, and where its chunk 0 lies (the index at
    the end, with its crc32c)."""
    raw = bytearray(shard.read_bytes())
    index = np.frombuffer(bytes(raw[-16 * n - 4:-4]), "<u8").reshape(n, 2)
    return raw, int(index[0, 0]), int(index[0, 1])


def test_a_prefix_is_read_only_from_whole_frames_without_checksums(tmp_path):
    """A box in the first half of a chunk decodes only its first blocks, unless the frame
    has a checksum (damage after the box then still fails the read, as TensorStore's does)
    or is cut short (its blocks' headers do not end where its span does)."""
    rng = np.random.default_rng(6)
    data = rng.integers(0, 250, (64, 64, 64), dtype=np.uint8)  # two zstd blocks per chunk
    box = (slice(0, 8), slice(0, 8), slice(0, 8))
    checksum = {"name": "zstd", "configuration": {"level": 3, "checksum": True}}
    _ts_array(tmp_path / "sum", data, (64, 64, 128), (64, 64, 64), codecs=[checksum])
    _ts_array(tmp_path / "cut", data, (64, 64, 128), (64, 64, 64))
    shard = tmp_path / "sum" / "c" / "0" / "0" / "0"
    raw, start, length = _first_chunk(shard)
    raw[start + length - 1] ^= 0xFF  # the checksum's last byte
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChunkDecodeError, match="checksum"):
        zarr3.open(str(tmp_path / "sum"), mode="r")[box]
    shard = tmp_path / "cut" / "c" / "0" / "0" / "0"
    raw, start, length = _first_chunk(shard)
    table = np.frombuffer(bytes(raw[-2 * 16 - 4:-4]), "<u8").reshape(2, 2).copy()
    table[0, 1] = length // 2  # the index gives the chunk half its frame
    raw[-2 * 16 - 4:-4] = table.tobytes()
    raw[-4:] = crc32c.crc32c(bytes(raw[-2 * 16 - 4:-4])).to_bytes(4, "little")
    shard.write_bytes(bytes(raw))
    cut = zarr3.open(str(tmp_path / "cut"), mode="r")
    assert [p.coord for p in _handled(cut, box)[0]] == [(0, 0, 0)]
    with pytest.raises(ChunkDecodeError):
        cut[box]
    np.testing.assert_array_equal(cut[:, :, 64:], data[:, :, 64:])  # the other chunk


def test_zero_dimensional_arrays_read_the_general_way(tmp_path):
    arr = zarr3.create(str(tmp_path), (), "uint16", (), ())
    arr[()] = 7
    assert arr.chunked_array.box_reader is None
    assert zarr3.open(str(tmp_path), mode="r")[()] == 7


def test_a_replaced_shard_is_read_at_its_new_version(tmp_path):
    rng = np.random.default_rng(2)
    first, second = (rng.integers(0, 255, (32, 32), dtype=np.uint8) for _ in range(2))
    _ts_array(tmp_path / "a", first, (32, 32), (8, 8))
    _ts_array(tmp_path / "b", second, (32, 32), (8, 8))
    arr = zarr3.open(str(tmp_path / "a"), mode="r")
    np.testing.assert_array_equal(arr[:, :], first)  # its index is cached now
    os.replace(tmp_path / "b" / "c" / "0" / "0", tmp_path / "a" / "c" / "0" / "0")
    np.testing.assert_array_equal(arr[3:20, 5:30], second[3:20, 5:30])


def test_other_arrays_have_no_box_reader(tmp_path):
    data = np.arange(4096, dtype=np.uint16).reshape(64, 64)
    cases = {
        "blosc": ["blosc"],
        "big-endian": [{"name": "bytes", "configuration": {"endian": "big"}}, "zstd"],
        "checksum": ["zstd", "crc32c"],
        "transpose": [{"name": "transpose", "configuration": {"order": [1, 0]}}, "zstd"],
    }
    for name, codecs in cases.items():
        _ts_array(tmp_path / name, data, (32, 32), (16, 16), codecs=codecs)
        arr = zarr3.open(str(tmp_path / name), mode="r")
        assert arr.chunked_array.box_reader is None, name
        np.testing.assert_array_equal(arr[5:50, 7:60], data[5:50, 7:60])
    unsharded = zarr3.create(str(tmp_path / "plain"), (64, 64), "uint16", (16, 16))
    assert unsharded.chunked_array.box_reader is None
    remote = zarr3.create("memory://box-reader", (64, 64), "uint16", (32, 32), (16, 16))
    assert remote.chunked_array.box_reader is None


def test_kernel_arguments_and_io_errors(tmp_path):
    reader = chunkbox.thread_reader()
    out = np.zeros((4, 4), np.uint8)
    path = tmp_path / "f"
    path.write_bytes(bytes(64))
    fd = os.open(path, os.O_RDONLY)
    try:
        spans = np.array([[fd, 0, 64]], np.int64)
        good = np.array([[4, 4, 0, 0, 2, 2, 0, 0]], np.int64)
        for codec in ("zstd", "gzip"):
            assert chunkbox.read_boxes(reader, codec, spans, good, out, ["f"]).tolist(
            ) == [chunkbox.OTHER]  # zeros are no zstd frame, no gzip member
        with pytest.raises(InvalidArgumentError, match="codec must be one of"):
            chunkbox.read_boxes(reader, "lz4", spans, good, out, ["f"])
        with pytest.raises(InvalidArgumentError, match="outside out"):
            chunkbox.read_boxes(reader, "zstd", spans,
                                np.array([[4, 4, 0, 0, 2, 2, 3, 0]], np.int64), out, ["f"])
        with pytest.raises(InvalidArgumentError, match="does not fit its chunk"):
            chunkbox.read_boxes(reader, "zstd", spans,
                                np.array([[4, 4, 3, 0, 2, 2, 0, 0]], np.int64), out, ["f"])
        with pytest.raises(InvalidArgumentError, match="writable"):
            chunkbox.read_boxes(reader, "zstd", spans, good, _read_only(out), ["f"])
    finally:
        os.close(fd)
    with pytest.raises(StoreError, match="cannot read f"):
        chunkbox.read_boxes(reader, "gzip", np.array([[fd, 0, 64]], np.int64), good, out,
                            ["f"])


def _read_only(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.setflags(write=False)
    return b


def test_c_kernel_checker(tmp_path):
    """tests/c/fuzz_chunkbox.c: random zstd and gzip chunks (some of several zstd blocks),
    boxes and output layouts read exactly; damaged data read or left to the caller, never a
    crash.  Built
    with the sanitizers when the compiler has them; run it longer by hand (see the file)."""
    out = run_checker(tmp_path, "fuzz_chunkbox", ["chunkbox.c", "transpose.c", "jpeg.c"],
                      ["3000", str(tmp_path / "chunk")], libs=("zstd", "deflate", "jpeg"),
                      sanitize=True, timeout=240)
    words = out.split()  # "<n> read, <m> left to the generic path"
    read, left = int(words[0]), int(words[2])
    assert read + left == 3000 and read > 1800 and left > 400, out

