"""ChunkEncoding.decode_region: decoding a box of a chunk equals slicing the whole decoded chunk
(the compressed_segmentation package, numpy and the codecs' own full decode as oracles),
into fresh arrays and strided views, with every header still checked."""

import struct

import compressed_segmentation as cseg_pkg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol.errors import ChunkDecodeError, InvalidArgumentError
from shardvol.precomputed.codecs import get_codec


def blocky(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, np.iinfo(dtype).max, 9, dtype=dtype)
    g = np.indices(shape[:3])
    key = (g[0] // 5) * 7 + (g[1] // 3) * 3 + (g[2] // 4) + rng.integers(0, 2, shape[:3])
    out = ids[key % len(ids)]
    return np.stack([np.roll(out, c, 0) for c in range(shape[3])], axis=3)


def package_decode(data: bytes, shape, dtype, block) -> np.ndarray:
    """Decode with the compressed_segmentation package, channel by channel."""
    words = np.frombuffer(data, "<u4")
    channels = []
    for c in range(shape[3]):
        start = int(words[c]) * 4
        end = int(words[c + 1]) * 4 if c + 1 < shape[3] else len(data)
        single = struct.pack("<I", 1) + data[start:end]
        channels.append(cseg_pkg.decompress(single, shape[:3], dtype, block_size=block, order="F"))
    return np.stack([np.asarray(ch).reshape(shape[:3], order="F") for ch in channels], axis=3)


@st.composite
def boxes(draw, shape):
    region = []
    for n in shape:
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, n))
        region.append(slice(a, b))
    return tuple(region)


CSEG_CASES = [
    ((64, 64, 64, 1), "uint64", (8, 8, 8)),
    ((37, 20, 11, 2), "uint32", (8, 8, 8)),
    ((30, 17, 9, 1), "uint64", (5, 3, 4)),
    ((16, 16, 16, 1), "uint32", (3, 7, 2)),
]


@pytest.mark.parametrize("shape,dtype,block", CSEG_CASES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_cseg_region_matches_package(shape, dtype, block, data):
    chunk = blocky(shape, np.dtype(dtype), seed=sum(shape))
    codec = get_codec("compressed_segmentation", dtype=dtype, num_channels=shape[3],
                      compressed_segmentation_block_size=block)
    blob = codec.encode(chunk)
    region = data.draw(boxes(shape))
    expected = package_decode(blob, shape, dtype, block)[region]
    assert np.array_equal(expected, chunk[region])
    out = np.full(expected.shape, 7, dtype=dtype, order="F")
    codec.decode_region(blob, shape, region, out, "test chunk")
    np.testing.assert_array_equal(out, expected)
    # into a strided view of a larger array: the rest of it stays untouched
    big = np.zeros(tuple(n + 3 for n in expected.shape), dtype=dtype, order="F")
    view = big[1:1 + expected.shape[0], 2:2 + expected.shape[1], 3:3 + expected.shape[2],
               : expected.shape[3]]
    codec.decode_region(blob, shape, region, view)
    np.testing.assert_array_equal(view, expected)
    assert big.sum(dtype=np.uint64) == expected.sum(dtype=np.uint64)


@pytest.mark.parametrize("encoding,dtype,channels", [
    ("raw", "uint8", 1), ("raw", "uint64", 2), ("raw", "float32", 3),
    ("jpeg", "uint8", 1), ("jpeg", "uint8", 3), ("png", "uint16", 1),
])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_region_matches_full_decode(encoding, dtype, channels, data):
    shape = (24, 13, 7, channels)
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    chunk = (rng.integers(0, info.max, shape, dtype=dtype, endpoint=True) if info
             else rng.random(shape).astype(dtype))
    codec = get_codec(encoding, dtype=dtype, num_channels=channels)
    blob = codec.encode(chunk)
    whole = codec.decode(blob, shape, dtype)
    if encoding != "jpeg":
        np.testing.assert_array_equal(whole, chunk)
    region = data.draw(boxes(shape))
    out = np.empty(whole[region].shape, dtype=dtype, order="C")  # any memory order
    codec.decode_region(blob, shape, region, out)
    np.testing.assert_array_equal(out, whole[region])


def test_cseg_region_still_checks_every_block_header():
    shape, block = (16, 8, 8, 1), (8, 8, 8)
    codec = get_codec("compressed_segmentation", dtype="uint32", num_channels=1,
                      compressed_segmentation_block_size=block)
    blob = bytearray(codec.encode(blocky(shape, np.dtype("uint32"), 1)))
    # block (1, 0, 0) header: encoded bits 3 (invalid); the region only covers block (0, 0, 0)
    header = 4 + 8
    blob[header + 3] = 3
    region = (slice(0, 8), slice(0, 8), slice(0, 8), slice(0, 1))
    out = np.zeros((8, 8, 8, 1), dtype=np.uint32)
    with pytest.raises(ChunkDecodeError, match=r"my chunk: .*block \(1, 0, 0\).*bits 3"):
        codec.decode_region(bytes(blob), shape, region, out, "my chunk")


def test_cseg_region_checks_table_indexes_it_decodes():
    shape, block = (8, 8, 8, 1), (8, 8, 8)
    codec = get_codec("compressed_segmentation", dtype="uint64", num_channels=1,
                      compressed_segmentation_block_size=block)
    chunk = np.zeros(shape, dtype=np.uint64)
    chunk[0, 0, 0, 0] = 5  # two labels: 1 bit per voxel, table of 2 entries
    blob = bytearray(codec.encode(chunk))
    # drop the table's last entry: index 1 then points past the end of the data
    truncated = bytes(blob[:-8])
    out = np.zeros((2, 2, 2, 1), dtype=np.uint64)
    region = (slice(0, 2), slice(0, 2), slice(0, 2), slice(0, 1))
    with pytest.raises(ChunkDecodeError, match="past the end of the lookup table"):
        codec.decode_region(truncated, shape, region, out, "c")


@pytest.mark.parametrize("region", [
    (slice(0, 9), slice(0, 8), slice(0, 8), slice(0, 1)),  # past the chunk
    (slice(0, 8, 2), slice(0, 8), slice(0, 8), slice(0, 1)),  # step
    (slice(None), slice(0, 8), slice(0, 8), slice(0, 1)),  # open slice
    (slice(0, 8), slice(0, 8), slice(0, 8)),  # 3 slices
])
def test_bad_regions_are_rejected(region):
    codec = get_codec("raw", dtype="uint8", num_channels=1)
    blob = bytes(8 * 8 * 8)
    with pytest.raises(InvalidArgumentError, match="region"):
        codec.decode_region(blob, (8, 8, 8, 1), region, np.zeros((8, 8, 8, 1), np.uint8))


def test_out_must_have_the_region_shape():
    codec = get_codec("raw", dtype="uint8", num_channels=1)
    region = (slice(0, 4), slice(0, 8), slice(0, 8), slice(0, 1))
    with pytest.raises(InvalidArgumentError, match="out has shape"):
        codec.decode_region(bytes(512), (8, 8, 8, 1), region, np.zeros((8, 8, 8, 1), np.uint8))
