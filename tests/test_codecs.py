"""Chunk codecs: the contract, raw / jpeg / png against golden files written by
other implementations, and bad input.  compressed_segmentation has its own file
(test_codecs_cseg.py); TensorStore round trips are in test_codecs_tensorstore.py."""

import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import imagecodecs
import numpy as np
import pytest

from shardvol.errors import (
    ChunkDecodeError,
    ChunkEncodeError,
    InvalidArgumentError,
    UnsupportedCodecError,
)
from shardvol.precomputed.codecs import (
    CODECS,
    CompressedSegmentationCodec,
    JpegCodec,
    PngCodec,
    RawCodec,
    get_codec,
)
from shardvol.precomputed.info import ENCODINGS

TESTDATA = Path(__file__).parent / "data" / "testdata"  # copies; see each SOURCE.txt
RAW_DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
              "float32", "float64"]


def smooth_image(shape, dtype="uint8", seed=0):
    """Low-frequency data (JPEG reproduces it closely)."""
    x, y, z, c = shape
    g = np.mgrid[0:x, 0:y, 0:z].astype(np.float64)
    rng = np.random.default_rng(seed)
    out = np.empty(shape)
    for ch in range(c):
        f = rng.uniform(0.05, 0.2, 3)
        out[..., ch] = 128 + 60 * np.sin(f[0] * g[0] + f[1] * g[1]) * np.cos(f[2] * g[2] + ch)
    return out.astype(dtype)


def chunk_bounds(name):
    """'7-10_8-10_7-9' -> ((7, 10), (8, 10), (7, 9))."""
    return tuple(tuple(int(v) for v in part.split("-")) for part in name.split("_"))


# ---- registry and contract --------------------------------------------------------------------


def test_registry_maps_info_encodings_to_codecs():
    assert set(CODECS) == {"raw", "compressed_segmentation", "jpeg", "png", "compresso",
                           "crackle", "fpzip", "kempressed", "zfpc"}
    assert set(CODECS) == set(ENCODINGS)  # every encoding an info file may name
    assert isinstance(get_codec("raw", dtype="float32", num_channels=2), RawCodec)
    assert isinstance(get_codec("jpeg", dtype="uint8", num_channels=3), JpegCodec)
    assert isinstance(get_codec("png", dtype="uint16", num_channels=4, png_level=3), PngCodec)
    c = get_codec("compressed_segmentation", dtype=np.uint64, num_channels=1,
                  compressed_segmentation_block_size=[8, 8, 8], jpeg_quality=50)
    assert isinstance(c, CompressedSegmentationCodec)
    assert c.compressed_segmentation_block_size == (8, 8, 8)
    assert c == get_codec("compressed_segmentation", dtype="uint64", num_channels=1,
                          compressed_segmentation_block_size=(8, 8, 8))
    assert get_codec("jpeg", dtype="uint8", num_channels=1).jpeg_quality == 75  # TensorStore's


@pytest.mark.parametrize(
    "encoding, dtype, channels, words",
    [
        ("zstd", "uint8", 1, ["'zstd'", "raw"]),
        ("jpeg", "uint16", 1, ["uint16", "jpeg"]),
        ("jpeg", "uint8", 2, ["2 channel", "jpeg"]),
        ("png", "uint8", 5, ["5 channel", "png"]),
        ("png", "float32", 1, ["float32"]),
        ("compressed_segmentation", "int64", 1, ["int64"]),
        ("raw", "bool", 1, ["bool"]),
        ("raw", "complex64", 1, ["complex64"]),
        ("raw", "not-a-dtype", 1, ["not-a-dtype"]),
    ],
)
def test_unsupported_combinations_are_named(encoding, dtype, channels, words):
    with pytest.raises(UnsupportedCodecError) as e:
        get_codec(encoding, dtype=dtype, num_channels=channels,
                  compressed_segmentation_block_size=(8, 8, 8))
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(
    "encoding, kwargs",
    [
        ("jpeg", {"jpeg_quality": 101}),
        ("jpeg", {"jpeg_quality": "high"}),
        ("png", {"png_level": 10}),
        ("compressed_segmentation", {}),
        ("compressed_segmentation", {"compressed_segmentation_block_size": (8, 0, 8)}),
        ("compressed_segmentation", {"compressed_segmentation_block_size": (8, 8)}),
        ("raw", {"num_channels": 0}),
    ],
)
def test_bad_options(encoding, kwargs):
    dtype = "uint32" if encoding == "compressed_segmentation" else "uint8"
    kwargs = {"num_channels": 1, **kwargs}
    with pytest.raises(InvalidArgumentError):
        get_codec(encoding, dtype=dtype, **kwargs)


ALL_CODECS = [
    get_codec("raw", dtype="int16", num_channels=2),
    get_codec("compressed_segmentation", dtype="uint64", num_channels=2,
              compressed_segmentation_block_size=(4, 3, 2)),
    get_codec("jpeg", dtype="uint8", num_channels=3),
    get_codec("png", dtype="uint16", num_channels=2),
]


def sample(codec, shape, seed=0):
    if codec.encoding == "jpeg":
        return smooth_image(shape)
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 7, shape) * 1000 + rng.integers(0, 2, shape)).astype(codec.dtype)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.encoding)
def test_any_memory_order_encodes_like_fortran(codec):
    a = sample(codec, (13, 10, 6, codec.num_channels))
    reference = codec.encode(np.asfortranarray(a))
    big = np.zeros((30, 25, 14, codec.num_channels), codec.dtype)
    big[5:31:2, 20:10:-1, 1:13:2] = a
    views = [
        np.ascontiguousarray(a),
        big[5:31:2, 20:10:-1, 1:13:2],  # strided, negative step, C-ordered parent
        np.asfortranarray(a.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0),
        a.astype(a.dtype.newbyteorder(">")) if a.dtype.itemsize > 1 else a,
    ]
    for v in views:
        assert codec.encode(v) == reference


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.encoding)
def test_decode_into_a_strided_view_touches_only_it(codec):
    a = sample(codec, (13, 10, 6, codec.num_channels))
    data = codec.encode(a)
    expected = codec.decode(data, a.shape, codec.dtype)
    assert expected.flags.f_contiguous and expected.flags.writeable and expected.shape == a.shape
    big = np.full((40, 30, 20, codec.num_channels), 77, codec.dtype, order="F")
    view = big[10:23, 4:14, 5:11, :]
    assert codec.decode(data, a.shape, codec.dtype, out=view, context="k") is view
    np.testing.assert_array_equal(view, expected)
    view[...] = 77
    assert (big == 77).all()
    # a non-Fortran view (C-ordered parent, channel stride largest, reversed x)
    cbig = np.zeros((codec.num_channels, 20, 30, 40), codec.dtype).transpose(3, 2, 1, 0)
    cview = cbig[30:17:-1, 2:12, 1:7, :]
    codec.decode(data, a.shape, codec.dtype, out=cview)
    np.testing.assert_array_equal(cview, expected)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.encoding)
def test_decode_accepts_zero_copy_buffers(codec):
    a = sample(codec, (9, 8, 7, codec.num_channels))
    data = codec.encode(a)
    shard = b"header" + data + b"trailer"
    view = memoryview(shard)[6: 6 + len(data)]  # e.g. a chunk inside a shard file
    expected = codec.decode(data, a.shape, codec.dtype)
    for buf in (view, bytearray(data), np.frombuffer(data, np.uint8)):
        np.testing.assert_array_equal(codec.decode(buf, a.shape, codec.dtype), expected)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        codec.decode(memoryview(shard)[::2], a.shape, codec.dtype)
    with pytest.raises(InvalidArgumentError, match="bytes-like"):
        codec.decode("text", a.shape, codec.dtype)


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.encoding)
def test_decode_argument_errors(codec):
    a = sample(codec, (4, 4, 4, codec.num_channels))
    data = codec.encode(a)
    with pytest.raises(InvalidArgumentError, match="shape"):
        codec.decode(data, (4, 4, 4), codec.dtype)
    with pytest.raises(InvalidArgumentError, match="channels"):
        codec.decode(data, (4, 4, 4, codec.num_channels + 1), codec.dtype)
    with pytest.raises(InvalidArgumentError, match="dtype"):
        codec.decode(data, a.shape, codec.dtype, out=np.zeros(a.shape, np.float64))
    with pytest.raises(InvalidArgumentError, match="shape"):
        codec.decode(data, a.shape, codec.dtype, out=np.zeros((4, 4, 5, codec.num_channels),
                                                              codec.dtype))
    ro = np.zeros(a.shape, codec.dtype)
    ro.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        codec.decode(data, a.shape, codec.dtype, out=ro)
    with pytest.raises(InvalidArgumentError):
        codec.decode(data, a.shape, "float32")
    with pytest.raises(ChunkEncodeError, match="channels"):
        codec.encode(a[..., :1] if codec.num_channels > 1 else np.concatenate([a, a], 3))
    with pytest.raises(ChunkEncodeError, match="dtype"):
        codec.encode(a.astype(np.float64))
    with pytest.raises(ChunkEncodeError):
        codec.encode(a[..., 0])


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.encoding)
def test_decoding_in_threads_matches_serial(codec):
    chunks = [sample(codec, (16, 12, 9, codec.num_channels), seed=s) for s in range(16)]
    encoded = [codec.encode(c) for c in chunks]
    serial = [codec.decode(e, c.shape, codec.dtype) for e, c in zip(encoded, chunks)]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda ec: codec.decode(ec[0], ec[1].shape, codec.dtype),
                                 zip(encoded * 4, chunks * 4)))
    for i, p in enumerate(parallel):
        np.testing.assert_array_equal(p, serial[i % len(serial)])


# ---- raw --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", RAW_DTYPES)
def test_raw_is_little_endian_fortran_bytes(dtype):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 4, 3, 2)) * 100).astype(dtype)
    codec = get_codec("raw", dtype=dtype, num_channels=2)
    data = codec.encode(a)
    # independent layout: walk the voxels in [x, y, z, channel] Fortran order by hand
    le = np.dtype(dtype).newbyteorder("<")
    manual = b"".join(
        np.array(a[x, y, z, c], dtype=le).tobytes()
        for c in range(2) for z in range(3) for y in range(4) for x in range(5)
    )
    assert data == manual
    np.testing.assert_array_equal(codec.decode(data, a.shape, dtype), a)


def test_raw_golden_tensorstore_uint16_4ch():
    d = TESTDATA / "google__tensorstore__golden_raw_uint16_4ch"
    scale = json.loads((d / "info").read_text())["scales"][0]
    assert scale["encoding"] == "raw"
    codec = get_codec("raw", dtype="uint16", num_channels=4)
    vol = np.zeros((12, 13, 10, 4), np.uint16, order="F")  # x, y, z in volume coordinates
    for f in sorted((d / "1_1_1").iterdir()):
        (x0, x1), (y0, y1), (z0, z1) = chunk_bounds(f.name)
        data = f.read_bytes()
        shape = (x1 - x0, y1 - y0, z1 - z0, 4)
        codec.decode(data, shape, "uint16", out=vol[x0:x1, y0:y1, z0:z1], context=f.name)
        assert codec.encode(vol[x0:x1, y0:y1, z0:z1]) == data  # byte-identical with TensorStore
    expected = np.load(d / "expected_x9-11_y7-11_z7-9_c0-3.npy")  # x 9..11, y 7..11, z 7..9
    np.testing.assert_array_equal(vol[9:11, 7:11, 7:9, 0:3], expected)
    assert vol[9, 8, 7, 1] == 0x9871 and vol[10, 10, 8, 2] == 0xAA82


def test_raw_gzip_compressed_chunks_are_read():
    codec = get_codec("raw", dtype="uint32", num_channels=1)
    a = np.arange(6 * 5 * 4, dtype=np.uint32).reshape((6, 5, 4, 1))
    plain = codec.encode(a)
    for packed in (gzip.compress(plain), gzip.compress(plain[:100]) + gzip.compress(plain[100:])):
        np.testing.assert_array_equal(codec.decode(packed, a.shape, "uint32"), a)


def test_raw_that_merely_starts_with_the_gzip_magic_stays_raw():
    codec = get_codec("raw", dtype="uint8", num_channels=1)
    a = np.arange(64, dtype=np.uint8).reshape((4, 4, 4, 1), order="F")
    a[0, 0, 0, 0], a[1, 0, 0, 0], a[2, 0, 0, 0] = 0x1F, 0x8B, 8
    np.testing.assert_array_equal(codec.decode(codec.encode(a), a.shape, "uint8"), a)


def test_raw_wrong_length_names_sizes_and_chunk():
    codec = get_codec("raw", dtype="uint16", num_channels=2)
    with pytest.raises(ChunkDecodeError) as e:
        codec.decode(b"\0" * 100, (4, 4, 4, 2), "uint16", context="8_8_8/0-4_0-4_0-4")
    msg = str(e.value)
    assert "8_8_8/0-4_0-4_0-4" in msg and "256" in msg and "100" in msg
    with pytest.raises(ChunkDecodeError, match="0-4_0-4_0-4"):
        codec.decode(gzip.compress(b"\0" * 100), (4, 4, 4, 2), "uint16", context="0-4_0-4_0-4")
    with pytest.raises(ChunkDecodeError, match="c1"):
        codec.decode(b"\x1f\x8b\x08garbage-garbage-garbage", (4, 4, 4, 2), "uint16", context="c1")


# ---- jpeg -------------------------------------------------------------------------------------


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_layout_and_quality(channels):
    a = smooth_image((32, 16, 8, channels))
    hi = get_codec("jpeg", dtype="uint8", num_channels=channels, jpeg_quality=95)
    lo = get_codec("jpeg", dtype="uint8", num_channels=channels, jpeg_quality=20)
    data = hi.encode(a)
    img = imagecodecs.jpeg8_decode(data)  # independent decoder: x wide, y*z high, RGB pixels
    assert img.shape[:2] == (16 * 8, 32) and (img.ndim == 2) == (channels == 1)
    pixels = img.reshape(8, 16, 32, channels).transpose(2, 1, 0, 3)
    np.testing.assert_array_equal(hi.decode(data, a.shape, "uint8"), pixels)
    err_hi = np.abs(pixels.astype(int) - a).mean()
    assert err_hi < 2.5
    assert len(lo.encode(a)) < len(data)
    err_lo = np.abs(lo.decode(lo.encode(a), a.shape, "uint8").astype(int) - a).mean()
    assert err_hi < err_lo < 10


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_accepts_any_width_height_with_the_right_area(channels):
    a = smooth_image((16, 8, 4, channels))
    codec = get_codec("jpeg", dtype="uint8", num_channels=channels, jpeg_quality=100)
    flat = np.ascontiguousarray(a.transpose(2, 1, 0, 3)).reshape(-1, channels)
    for h, w in [(16, 32), (4, 128), (512, 1)]:
        img = flat.reshape(h, w, channels)
        data = imagecodecs.jpeg8_encode(img[..., 0] if channels == 1 else img, level=100)
        ref = imagecodecs.jpeg8_decode(data).reshape(4, 8, 16, channels).transpose(2, 1, 0, 3)
        np.testing.assert_array_equal(codec.decode(data, a.shape, "uint8"), ref)


def test_jpeg_bad_input_names_the_chunk():
    codec = get_codec("jpeg", dtype="uint8", num_channels=1)
    a = smooth_image((16, 8, 4, 1))
    data = codec.encode(a)
    cases = [
        (data, (16, 8, 5, 1), "pixels"),  # wrong size
        (data[: len(data) // 2], a.shape, ""),  # truncated
        (b"not a jpeg at all", a.shape, "not JPEG"),
        (data[:2] + b"\xff\xe0\x00\x04ab", a.shape, "frame header"),
        (get_codec("jpeg", dtype="uint8", num_channels=3).encode(smooth_image((16, 8, 4, 3))),
         a.shape, "channel"),
    ]
    for bad, shape, words in cases:
        with pytest.raises(ChunkDecodeError, match="img/16-32_0-8_4-8") as e:
            codec.decode(bad, shape, "uint8", context="img/16-32_0-8_4-8")
        assert words in str(e.value)


def test_jpeg_forged_huge_dimensions_are_rejected_before_decoding():
    codec = get_codec("jpeg", dtype="uint8", num_channels=1)
    data = bytearray(codec.encode(smooth_image((16, 8, 4, 1))))
    sof = data.index(b"\xff\xc0")
    data[sof + 5: sof + 9] = b"\xff\xff\xff\xff"  # 65535 x 65535
    with pytest.raises(ChunkDecodeError, match="65535 x 65535"):
        codec.decode(bytes(data), (16, 8, 4, 1), "uint8", context="c")


# ---- png --------------------------------------------------------------------------------------


def test_png_golden_webknossos_dataset():
    d = TESTDATA / "scalableminds__webknossos-libs__simple_ng_dataset"
    info = json.loads((d / "color" / "info").read_text())
    scale = info["scales"][0]
    codec = get_codec(scale["encoding"], dtype=info["data_type"], num_channels=info["num_channels"],
                      png_level=scale.get("png_level"))
    f = d / "color" / scale["key"] / "0-24_0-24_0-24"
    (x0, x1), (y0, y1), (z0, z1) = chunk_bounds(f.name)
    got = codec.decode(f.read_bytes(), (x1 - x0, y1 - y0, z1 - z0, 3), "uint8", context=f.name)
    expected = np.load(d / "expected_cxyz_from_simple_zarr_dataset.npy").transpose(1, 2, 3, 0)
    np.testing.assert_array_equal(got, expected)
    # and our encoding of it decodes (independently) to the same image
    img = imagecodecs.png_decode(codec.encode(got))
    np.testing.assert_array_equal(img, imagecodecs.png_decode(f.read_bytes()))


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_round_trip_is_exact(dtype, channels):
    rng = np.random.default_rng(channels)
    a = rng.integers(0, np.iinfo(dtype).max, (9, 7, 5, channels), dtype=dtype)
    codec = get_codec("png", dtype=dtype, num_channels=channels, png_level=1)
    data = codec.encode(a)
    img = imagecodecs.png_decode(data)
    assert img.dtype == dtype and img.shape[:2] == (7 * 5, 9)
    np.testing.assert_array_equal(codec.decode(data, a.shape, dtype), a)
    assert len(get_codec("png", dtype=dtype, num_channels=channels, png_level=9).encode(
        np.zeros_like(a))) <= len(get_codec("png", dtype=dtype, num_channels=channels,
                                            png_level=0).encode(np.zeros_like(a)))


def test_png_accepts_other_tile_shapes():
    a = np.random.default_rng(0).integers(0, 255, (8, 6, 4, 3), dtype=np.uint8)
    codec = get_codec("png", dtype="uint8", num_channels=3)
    flat = np.ascontiguousarray(a.transpose(2, 1, 0, 3)).reshape(-1, 3)
    for h, w in [(8, 24), (192, 1), (1, 192)]:
        data = imagecodecs.png_encode(flat.reshape(h, w, 3))
        np.testing.assert_array_equal(codec.decode(data, a.shape, "uint8"), a)


def test_png_bad_input_names_the_chunk():
    a = np.zeros((8, 6, 4, 1), np.uint16)
    codec = get_codec("png", dtype="uint16", num_channels=1)
    data = codec.encode(a)
    forged = bytearray(data)
    forged[16:24] = (100000).to_bytes(4, "big") * 2
    cases = [
        (data, (8, 6, 5, 1), "pixels"),
        (data[:40], a.shape, ""),
        (data[:20], a.shape, "IHDR"),
        (b"GIF89a....", a.shape, "not PNG"),
        (bytes(forged), a.shape, "100000 x 100000"),
        (get_codec("png", dtype="uint8", num_channels=1).encode(a.astype(np.uint8)), a.shape,
         "8-bit"),
        (get_codec("png", dtype="uint16", num_channels=2).encode(np.zeros((8, 6, 4, 2), np.uint16)),
         a.shape, "channel"),
    ]
    for bad, shape, words in cases:
        with pytest.raises(ChunkDecodeError, match="seg/0-8_0-6_0-4") as e:
            codec.decode(bad, shape, "uint16", context="seg/0-8_0-6_0-4")
        assert words in str(e.value)


def test_image_too_tall_for_jpeg_is_an_encode_error():
    codec = get_codec("jpeg", dtype="uint8", num_channels=1)
    with pytest.raises(ChunkEncodeError, match="jpeg"):
        codec.encode(np.zeros((1, 300, 300, 1), np.uint8))  # 90000 rows > JPEG's 65500
