"""JPEG chunk decoding (csrc/jpeg.c over libjpeg): whole chunks and boxes of chunks decoded
straight into strided views must equal imagecodecs' and TensorStore's decoding of the whole
image, sliced, bit for bit; corrupt, truncated and foreign JPEGs raise ChunkDecodeError
naming the chunk, never garbage or a crash."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import imagecodecs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from shardvol import Volume
from shardvol._ext import _jpeg
from shardvol.errors import ChunkDecodeError, InvalidArgumentError
from shardvol.precomputed.codecs import get_codec

from .c_checkers import run_checker
from .oracles import ts_create, ts_open


def chunk_data(shape, seed=0) -> np.ndarray:
    """Smooth, noisy uint8 voxels (x, y, z, c)."""
    rng = np.random.default_rng(seed)
    x, y, z, c = shape
    g = np.mgrid[0:x, 0:y, 0:z].astype(np.float32)
    f = rng.uniform(0.05, 0.4, (c, 3))
    out = np.stack([128 + 70 * np.sin(f[k, 0] * g[0] + f[k, 1] * g[1]) * np.cos(f[k, 2] * g[2])
                    for k in range(c)], axis=3)
    return np.clip(out + rng.normal(0, 10, out.shape), 0, 255).astype(np.uint8)


def image_of(a: np.ndarray, height: int | None = None) -> np.ndarray:
    """The chunk as an image, rows of X pixels stacked y then z (or ``height`` rows)."""
    _, y, z, c = a.shape
    img = np.ascontiguousarray(a.transpose(2, 1, 0, 3)).reshape(y * z if height is None else height,
                                                               -1, c)
    return img[..., 0] if c == 1 else img


def reference(data: bytes, shape) -> np.ndarray:
    """imagecodecs decodes the whole image with libjpeg-turbo's defaults; voxels (x, y, z, c)."""
    x, y, z, c = shape
    return imagecodecs.jpeg8_decode(data).reshape(z, y, x, c).transpose(2, 1, 0, 3)


def pillow_jpeg(img: np.ndarray, **options) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", **options)
    return buf.getvalue()


def box_size(box) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in box)


def decode_into_view(codec, data, shape, box, context="c") -> np.ndarray:
    """decode_region into a strided view (x step 2, y reversed) of a bigger Fortran array whose
    other elements must stay untouched; returns the decoded box."""
    n = box_size(box)
    big = np.full((2 * n[0] + 3, n[1] + 2, n[2] + 1, n[3] + 1), 77, np.uint8, order="F")

    def window(a):
        return a[1:1 + 2 * n[0]:2, 1:1 + n[1], :n[2], 1:1 + n[3]][:, ::-1]

    view = window(big)
    codec.decode_region(data, shape, box, view, context)
    inside = np.zeros(big.shape, bool)
    window(inside)[...] = True
    assert (big[~inside] == 77).all(), "wrote outside the box"
    return view.copy()


def random_boxes(shape, n, seed=0):
    """Whole chunk, single voxels at the corners, then random boxes."""
    rng = np.random.default_rng(seed)
    yield tuple(slice(0, s) for s in shape)
    yield tuple(slice(0, 1) for s in shape)
    yield tuple(slice(s - 1, s) for s in shape)
    for _ in range(n):
        box = []
        for s in shape:
            a = int(rng.integers(0, s))
            box.append(slice(a, int(rng.integers(a + 1, s + 1))))
        yield tuple(box)


@st.composite
def spans(draw, n):
    kind = draw(st.sampled_from(["all", "one", "head", "tail", "any"]))
    if kind == "all":
        return slice(0, n)
    if kind == "one":
        i = draw(st.integers(0, n - 1))
        return slice(i, i + 1)
    if kind == "head":
        return slice(0, draw(st.integers(1, n)))
    if kind == "tail":
        return slice(draw(st.integers(0, n - 1)), n)
    a = draw(st.integers(0, n - 1))
    return slice(a, draw(st.integers(a + 1, n)))


@st.composite
def chunks_and_boxes(draw):
    c = draw(st.sampled_from([1, 3]))
    shape = (draw(st.integers(1, 70)), draw(st.integers(1, 24)), draw(st.integers(1, 10)), c)
    return shape, tuple(draw(spans(n)) for n in shape), draw(st.integers(0, 2**16))


# ---- bit-exact against imagecodecs and TensorStore --------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks_and_boxes())
def test_boxes_match_imagecodecs_full_decode(case):
    """TensorStore's encoding (codec.encode: q75, 4:2:0, fancy upsampling on decode), odd
    sizes, 1 voxel wide, any box; into a strided view and, whole, into a Fortran array."""
    shape, box, seed = case
    codec = get_codec("jpeg", dtype="uint8", num_channels=shape[3])
    data = codec.encode(chunk_data(shape, seed))
    whole = reference(data, shape)
    np.testing.assert_array_equal(decode_into_view(codec, data, shape, box), whole[box])
    np.testing.assert_array_equal(codec.decode(data, shape), whole)


ENCODERS = {
    "pillow progressive": lambda img: pillow_jpeg(img, quality=80, progressive=True),
    "pillow restart markers every 3 MCUs": lambda img: pillow_jpeg(img, restart_marker_blocks=3),
    "pillow restart markers every MCU row": lambda img: pillow_jpeg(img, restart_marker_rows=1),
    "pillow optimized 4:2:2":
        lambda img: pillow_jpeg(img, quality=90, subsampling=1, optimize=True),
    "pillow 4:1:1": lambda img: pillow_jpeg(img, subsampling="4:1:1"),
    "imagecodecs 4:4:4": lambda img: imagecodecs.jpeg8_encode(img, level=60, subsampling="444"),
    "imagecodecs 4:4:0": lambda img: imagecodecs.jpeg8_encode(img, level=60, subsampling="440"),
    "imagecodecs q5": lambda img: imagecodecs.jpeg8_encode(img, level=5, subsampling="420"),
}


@pytest.mark.parametrize("encoder", list(ENCODERS))
@pytest.mark.parametrize("shape", [(37, 9, 5, 3), (64, 16, 4, 1), (3, 7, 6, 3), (20, 1, 33, 3)])
def test_other_jpeg_flavours_match_imagecodecs(encoder, shape):
    """Progressive scans, restart markers, every usual chroma subsampling (arithmetic coding:
    see test_c_differential_fuzzer)."""
    data = ENCODERS[encoder](image_of(chunk_data(shape, 5)))
    codec = get_codec("jpeg", dtype="uint8", num_channels=shape[3])
    whole = reference(data, shape)
    for box in random_boxes(shape, 25, seed=len(data)):
        np.testing.assert_array_equal(decode_into_view(codec, data, shape, box), whole[box],
                                      err_msg=str(box))


@pytest.mark.parametrize("encoder", ["shardvol", *ENCODERS])
@pytest.mark.parametrize("shape", [(64, 9, 5, 1), (8, 1, 1, 1), (16, 7, 3, 1), (24, 8, 2, 1)])
def test_whole_grayscale_chunks_decoded_as_raw_data(encoder, shape):
    """Whole grayscale chunks of widths that hold whole 8x8 blocks are inverse transformed
    straight into the output (libjpeg's raw data), heights not a multiple of 8 included:
    into a Fortran array and into a staged view, bit for bit as imagecodecs."""
    codec = get_codec("jpeg", dtype="uint8", num_channels=1)
    voxels = chunk_data(shape, 9)
    data = codec.encode(voxels) if encoder == "shardvol" else ENCODERS[encoder](
        image_of(voxels))
    whole = reference(data, shape)
    np.testing.assert_array_equal(codec.decode(data, shape), whole)
    box = tuple(slice(0, n) for n in shape)
    np.testing.assert_array_equal(decode_into_view(codec, data, shape, box), whole)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("height", [720, 1, 24, 45, 8, 90])
def test_images_of_any_width_with_the_chunk_area(channels, height):
    """Readers accept any width x height == X*Y*Z; rows are then not (y, z) lines."""
    shape = (12, 10, 6, channels)
    data = imagecodecs.jpeg8_encode(image_of(chunk_data(shape, 2), height), level=90,
                                    subsampling="420")
    codec = get_codec("jpeg", dtype="uint8", num_channels=channels)
    whole = reference(data, shape)
    for box in random_boxes(shape, 30, seed=height):
        np.testing.assert_array_equal(decode_into_view(codec, data, shape, box), whole[box],
                                      err_msg=str(box))


@pytest.mark.parametrize("channels", [1, 3])
def test_tensorstore_chunks_and_cutouts_are_bit_identical(tmp_path, channels):
    """TensorStore writes and reads a jpeg volume (odd chunk size, clipped edge chunks);
    shardvol's whole-chunk decodes and Volume cutouts (which decode boxes of chunks) equal
    TensorStore's reads exactly."""
    size = (80, 45, 30)
    a = chunk_data((*size, channels), seed=channels)
    store = ts_create(str(tmp_path), data_type="uint8", num_channels=channels, resolution=[1, 1, 1],
                      size=list(size), chunk_size=[37, 19, 13], encoding="jpeg", jpeg_quality=75)
    store.write(a).result()
    ts_all = np.asarray(ts_open(str(tmp_path)).read().result())
    codec = get_codec("jpeg", dtype="uint8", num_channels=channels)
    files = sorted((tmp_path / "1_1_1").iterdir())
    assert len(files) == 3 * 3 * 3
    for f in files:
        (x0, x1), (y0, y1), (z0, z1) = (map(int, p.split("-")) for p in f.name.split("_"))
        shape = (x1 - x0, y1 - y0, z1 - z0, channels)
        np.testing.assert_array_equal(codec.decode(f.read_bytes(), shape, context=f.name),
                                      ts_all[x0:x1, y0:y1, z0:z1])
    vol = Volume(str(tmp_path))
    rng = np.random.default_rng(channels)
    for _ in range(12):
        lo = [int(rng.integers(0, n)) for n in size]
        hi = [int(rng.integers(start + 1, n + 1)) for start, n in zip(lo, size)]
        sel = tuple(slice(start, stop) for start, stop in zip(lo, hi))
        np.testing.assert_array_equal(vol[sel], ts_all[sel], err_msg=str(sel))


def test_threads_decode_concurrently():
    """The GIL is released; concurrent decodes do not share state."""
    shapes = [(40 + i, 9, 5, 3 if i % 2 else 1) for i in range(8)]
    blobs = [get_codec("jpeg", dtype="uint8", num_channels=s[3]).encode(chunk_data(s, i))
             for i, s in enumerate(shapes)]

    def work(i):
        codec = get_codec("jpeg", dtype="uint8", num_channels=shapes[i][3])
        return [codec.decode(blobs[i], shapes[i]) for _ in range(20)]

    with ThreadPoolExecutor(4) as pool:
        for i, results in enumerate(pool.map(work, range(8))):
            for r in results:
                np.testing.assert_array_equal(r, reference(blobs[i], shapes[i]))


def test_c_differential_fuzzer(tmp_path):
    """tests/c/fuzz_jpeg.c (built here against the system libjpeg): chunks encoded by libjpeg
    in every mode it has (arithmetic coding too, which no Python encoder writes), random boxes
    in random layouts equal libjpeg's whole-image decode; mutated streams decode or fail with
    SV_ERR_CORRUPT.  Run it under ASan for long sessions (see the file)."""
    # boxes spanning 4 KiB or more of their output are streamed (copybox.h): both paths taken
    out = run_checker(tmp_path, "fuzz_jpeg", ["jpeg.c"], ["300"], libs=("jpeg",),
                      defines=("SV_STREAM_MIN_SPAN=4096",))
    assert out.startswith("300 chunks, 3600 boxes exact"), out


# ---- corrupt, truncated and foreign data ------------------------------------------------------


def rgb_chunk():
    shape = (64, 16, 8, 3)
    codec = get_codec("jpeg", dtype="uint8", num_channels=3)
    return shape, codec, codec.encode(chunk_data(shape, 9))


def scan_start(data: bytes) -> int:
    """Offset of the first byte of entropy-coded data (after the SOS segment)."""
    sos = data.index(b"\xff\xda")
    return sos + 2 + (data[sos + 2] << 8 | data[sos + 3])


def test_truncated_whole_chunks_always_raise():
    """Cut anywhere (headers, tables, scan data, the end-of-image marker): an error naming the
    chunk, where libjpeg alone pads with gray and imagecodecs returns that silently."""
    shape, codec, data = rgb_chunk()
    cuts = sorted({*range(0, len(data), 97), *range(len(data) - 6, len(data))})
    for n in cuts:
        with pytest.raises(ChunkDecodeError, match=r"^img/0-64_0-16_0-8: ") as e:
            codec.decode(data[:n], shape, context="img/0-64_0-16_0-8")
        if n >= scan_start(data):
            assert "Premature end of JPEG file" in str(e.value)
    gray = imagecodecs.jpeg8_decode(data[: len(data) // 2])  # the silent garbage avoided
    assert (gray[-8:] == 128).all()


def test_truncation_and_boxes():
    """A box is decoded up to its last image row: truncation before or inside its rows raises;
    after them, the box decodes correctly (the rest of the stream is not read)."""
    shape, codec, data = rgb_chunk()
    whole = reference(data, shape)
    early = (slice(10, 50), slice(2, 9), slice(0, 2), slice(0, 3))  # image rows 2..24 of 128
    late = (slice(0, 64), slice(0, 16), slice(7, 8), slice(0, 3))  # rows 112..127
    cut = data[: scan_start(data) + (len(data) - scan_start(data)) * 6 // 10]
    np.testing.assert_array_equal(decode_into_view(codec, cut, shape, early), whole[early])
    for box in (late, (slice(0, 1), slice(15, 16), slice(7, 8), slice(0, 1))):
        with pytest.raises(ChunkDecodeError, match=r"^k: corrupt jpeg data: Premature end"):
            decode_into_view(codec, cut, shape, box, "k")
    with pytest.raises(ChunkDecodeError, match=r"^k: corrupt jpeg data"):
        decode_into_view(codec, data[: scan_start(data) + 50], shape, early, "k")


def test_corrupt_scan_data_raises_where_libjpeg_only_warns():
    shape, codec, data = rgb_chunk()
    mid = (scan_start(data) + len(data)) // 2
    early_eoi = data[:mid] + b"\xff\xd9" + data[mid + 2:]
    junk = bytearray(data)
    junk[mid:mid + 40] = np.random.default_rng(1).integers(0, 255, 40, dtype=np.uint8).tobytes()
    for bad in (early_eoi, bytes(junk), data[:mid] + b"\xff\xd0" + data[mid:]):
        with pytest.raises(ChunkDecodeError, match=r"^c3: corrupt jpeg data: Corrupt JPEG data"):
            codec.decode(bad, shape, context="c3")
        imagecodecs.jpeg8_decode(bad)  # no error there: libjpeg only warned


def test_not_jpeg_and_garbage():
    codec = get_codec("jpeg", dtype="uint8", num_channels=1)
    shape = (8, 8, 8, 1)
    garbage = np.random.default_rng(2).integers(0, 255, 600, dtype=np.uint8).tobytes()
    data = codec.encode(chunk_data(shape))
    sof = data.index(b"\xff\xc0")
    after_frame = data[:sof + 2 + (data[sof + 2] << 8 | data[sof + 3])]
    cases = [(b"", "not JPEG"), (garbage, "not JPEG"), (b"\xff\xd8" + garbage, "frame header"),
             (b"\xff\xd8\xff\xdb\x00\x43" + garbage, "frame header"),
             (after_frame + garbage, "corrupt jpeg data"),
             (data[:scan_start(data)] + garbage, "corrupt jpeg data")]
    for bad, words in cases:
        with pytest.raises(ChunkDecodeError, match=r"^g/1: ") as e:
            codec.decode(bad, shape, context="g/1")
        assert words in str(e.value)


@pytest.mark.parametrize("channels", [1, 3])
def test_foreign_jpegs_are_refused_naming_the_chunk(channels):
    shape = (16, 8, 4, channels)
    codec = get_codec("jpeg", dtype="uint8", num_channels=channels)
    rgb = image_of(chunk_data((16, 8, 4, 3), 4))
    gray = np.ascontiguousarray(rgb[..., 0])
    same, other = (rgb, gray) if channels == 3 else (gray, rgb)
    cmyk = io.BytesIO()
    Image.fromarray(np.dstack([rgb, rgb[..., :1]]), "CMYK").save(cmyk, "JPEG")
    cases = [
        (imagecodecs.jpeg8_encode(other), f"jpeg image has {4 - channels} channel(s)"),
        (cmyk.getvalue(), "jpeg image has 4 channel(s)"),
        (imagecodecs.jpeg8_encode(same.astype(np.uint16) * 16, bitspersample=12),
         "jpeg image has 12-bit samples"),
        (imagecodecs.jpeg8_encode(same, lossless=True), "corrupt jpeg data: Unsupported"),
    ]
    whole = tuple(slice(0, n) for n in shape)
    voxel = (slice(3, 4), slice(1, 2), slice(2, 3), slice(0, 1))
    for bad, words in cases:
        for box in (whole, voxel):
            with pytest.raises(ChunkDecodeError, match=r"^img/16-32_0-8_4-8: ") as e:
                decode_into_view(codec, bad, shape, box, "img/16-32_0-8_4-8")
            assert words in str(e.value)


def test_forged_frame_size_is_checked_before_decoding_in_c_too():
    """The codec checks the frame header first (jpeg_size); the kernel checks what libjpeg
    itself read, before it allocates anything for the image."""
    shape = (16, 8, 4, 1)
    data = bytearray(get_codec("jpeg", dtype="uint8", num_channels=1).encode(chunk_data(shape)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2
    out = np.zeros(shape, np.uint8)
    with pytest.raises(ChunkDecodeError, match=r"^f: jpeg image is 60000 x 60000 = 3600000000 "
                                               r"pixels, the chunk 16 x 8 x 4 needs 512"):
        _jpeg.decode(bytes(data), shape, (0, 0, 0, 0), out, "f")
    huge = (2**40, 2**40, 2**40, 1)
    with pytest.raises(ChunkDecodeError, match="pixels"):
        _jpeg.decode(bytes(data), huge, (0, 0, 0, 0), out, "f")


def test_kernel_argument_checks():
    shape = (8, 8, 8, 1)
    data = get_codec("jpeg", dtype="uint8", num_channels=1).encode(chunk_data(shape))
    read_only = np.zeros(shape, np.uint8)
    read_only.setflags(write=False)
    for out, origin, shp in [
        (np.zeros(shape, np.uint16), (0, 0, 0, 0), shape),  # dtype
        (np.zeros((8, 8, 8), np.uint8), (0, 0, 0, 0), shape),  # 3-D
        (read_only, (0, 0, 0, 0), shape),
        (np.zeros((4, 8, 8, 1), np.uint8), (5, 0, 0, 0), shape),  # box past the chunk
        (np.zeros((1, 1, 1, 1), np.uint8), (-1, 0, 0, 0), shape),
        (np.zeros((8, 8, 8, 2), np.uint8), (0, 0, 0, 0), (8, 8, 8, 2)),  # 2 channels
        (np.zeros(shape, np.uint8), (0, 0, 0, 0), (8, 8)),
    ]:
        with pytest.raises(InvalidArgumentError):
            _jpeg.decode(data, shp, origin, out, "c")


# ---- mutation fuzzing -------------------------------------------------------------------------


def _fuzz_sources():
    out = []
    for shape, enc in [((24, 8, 4, 1), None), ((21, 6, 5, 3), None),
                       ((16, 8, 4, 3), lambda img: pillow_jpeg(img, progressive=True)),
                       ((33, 5, 3, 3), lambda img: pillow_jpeg(img, restart_marker_blocks=2))]:
        a = chunk_data(shape, 7)
        codec = get_codec("jpeg", dtype="uint8", num_channels=shape[3])
        out.append((shape, codec, codec.encode(a) if enc is None else enc(image_of(a))))
    return out


FUZZ_SOURCES = _fuzz_sources()


@st.composite
def mutations(draw):
    source = draw(st.integers(0, len(FUZZ_SOURCES) - 1))
    shape, _, data = FUZZ_SOURCES[source]
    blob = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "cut", "insert", "delete"]))
        pos = draw(st.integers(0, max(0, len(blob) - 1)))
        if kind == "flip" and blob:
            blob[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and blob:
            blob[pos] = draw(st.sampled_from([0x00, 0xFF, 0xD9, 0xDA, 0xC4, 0xDB, 0xC0, 0x7F]))
        elif kind == "cut":
            del blob[pos:]
        elif kind == "insert":
            blob[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del blob[pos:pos + draw(st.integers(1, 16))]
    box = tuple(draw(spans(n)) for n in shape)
    return source, bytes(blob), box


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_chunks_decode_exactly_or_raise(case):
    """A mutated chunk either raises ChunkDecodeError naming it, or decodes without a single
    libjpeg warning up to the box's last row, and then equals what imagecodecs (which decodes
    the same stream, ignoring later warnings) makes of those rows."""
    source, blob, box = case
    shape, codec, _ = FUZZ_SOURCES[source]
    try:
        got = decode_into_view(codec, blob, shape, box, "fuzzed")
    except ChunkDecodeError as e:
        assert str(e).startswith("fuzzed: ")
        return
    try:
        whole = reference(blob, shape)
    except Exception:  # imagecodecs (a newer libjpeg-turbo) refuses it outright: nothing to compare
        return
    np.testing.assert_array_equal(got, whole[box])
