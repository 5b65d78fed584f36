"""TensorStore as oracle: it writes precomputed volumes whose chunk files shardvol decodes,
and reads volumes whose chunk files shardvol encoded.  Chunk files are compared byte for
byte where both writers are deterministic and configured alike (raw, compressed_segmentation,
jpeg)."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from shardvol.precomputed.codecs import get_codec

FIB25 = (Path(__file__).parent / "data" / "testdata" / "google__neuroglancer__cseg_raw_input"
         / "64x64x64-raw-uint64-segmentation.dat")


def smooth(shape, seed=0):
    x, y, z, c = shape
    g = np.mgrid[0:x, 0:y, 0:z].astype(np.float64)
    out = np.stack([120 + 70 * np.sin(0.11 * g[0] + 0.07 * g[1] + ch) * np.cos(0.09 * g[2])
                    for ch in range(c)], axis=3)
    return out.astype(np.uint8)


def labels(shape, dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype, endpoint=True)
    g = np.mgrid[0:shape[0], 0:shape[1], 0:shape[2]]
    key = (g[0] // 5 * 7 + g[1] // 3 * 13 + g[2] // 4 * 29)[..., None] + np.arange(shape[3])
    return ids[key % n]


def fib25(shape):
    a = np.fromfile(FIB25, dtype="<u8").reshape((64, 64, 64), order="F")
    return a[: shape[0], : shape[1], : shape[2], None].repeat(shape[3], 3)


CASES = {
    # name: (encoding, data, chunk_size, voxel_offset, scale options)
    "raw-uint8-3ch": ("raw", lambda: smooth((37, 20, 11, 3)), (16, 16, 4), (3, 0, 5), {}),
    "raw-int16": ("raw", lambda: (labels((20, 9, 7, 1), np.uint16, 50).astype(np.int16) - 999),
                  (8, 8, 8), (0, 0, 0), {}),
    "raw-float32-2ch": ("raw", lambda: smooth((10, 11, 12, 2)).astype(np.float32) / 7,
                        (4, 5, 6), (1, 2, 3), {}),
    "raw-uint64": ("raw", lambda: labels((19, 17, 5, 1), np.uint64, 9), (8, 8, 8), (0, 0, 0), {}),
    "cseg-uint64-fib25": ("compressed_segmentation", lambda: fib25((50, 61, 64, 1)),
                          (32, 32, 32), (0, 0, 0),
                          {"compressed_segmentation_block_size": [8, 8, 8]}),
    "cseg-uint32-2ch-odd-blocks": ("compressed_segmentation", lambda: labels((23, 17, 9, 2),
                                   np.uint32, 40), (10, 9, 8), (5, 0, 1),
                                   {"compressed_segmentation_block_size": [3, 2, 5]}),
    "cseg-uint64-32bit-indices": ("compressed_segmentation", lambda: np.arange(
        70000, dtype=np.uint64).reshape((50, 40, 35, 1), order="F") * 2**40,
        (50, 40, 35), (0, 0, 0), {"compressed_segmentation_block_size": [64, 64, 64]}),
    "jpeg-1ch": ("jpeg", lambda: smooth((40, 30, 20, 1)), (32, 16, 8), (0, 0, 0), {}),
    "jpeg-3ch-q90": ("jpeg", lambda: smooth((40, 30, 20, 3)), (32, 16, 8), (2, 3, 4),
                     {"jpeg_quality": 90}),
    "png-uint8-1ch": ("png", lambda: smooth((21, 13, 9, 1)), (16, 8, 8), (0, 0, 0), {}),
    "png-uint8-2ch": ("png", lambda: smooth((21, 13, 9, 2)), (16, 8, 8), (0, 0, 0),
                      {"png_level": 1}),
    "png-uint8-4ch": ("png", lambda: smooth((21, 13, 9, 4)), (16, 8, 8), (0, 0, 0),
                      {"png_level": 9}),
    "png-uint16-3ch": ("png", lambda: smooth((21, 13, 9, 3)).astype(np.uint16) * 257,
                       (16, 8, 8), (0, 0, 0), {}),
}
BYTE_IDENTICAL = ("raw", "compressed_segmentation", "jpeg")


def codec_for(encoding, array, opts):
    return get_codec(encoding, dtype=array.dtype, num_channels=array.shape[3], **opts)


def chunk_regions(shape, chunk):
    """(name-in-volume-coordinates-without-offset, slices) of every chunk."""
    grid = [range(0, shape[d], chunk[d]) for d in range(3)]
    for x0, y0, z0 in itertools.product(*grid):
        lo = (x0, y0, z0)
        hi = tuple(min(lo[d] + chunk[d], shape[d]) for d in range(3))
        yield lo, hi, tuple(slice(lo[d], hi[d]) for d in range(3))


def chunk_name(lo, hi, offset):
    return "_".join(f"{lo[d] + offset[d]}-{hi[d] + offset[d]}" for d in range(3))


def open_ts(path, array=None, encoding=None, chunk=None, offset=None, opts=None):
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}}
    if array is not None:
        spec.update(
            create=True,
            multiscale_metadata={
                "data_type": array.dtype.name, "num_channels": array.shape[3],
                "type": "segmentation" if encoding == "compressed_segmentation" else "image"},
            scale_metadata={"resolution": [1, 1, 1], "encoding": encoding,
                            "chunk_size": list(chunk), "size": list(array.shape[:3]),
                            "voxel_offset": list(offset), **opts},
        )
    return ts.open(spec).result()


@pytest.mark.parametrize("case", list(CASES))
def test_shardvol_decodes_tensorstore_chunks(tmp_path, case):
    encoding, make, chunk, offset, opts = CASES[case]
    array = make()
    store = open_ts(tmp_path, array, encoding, chunk, offset, opts)
    store.write(array).result()
    reread = store.read().result()  # TensorStore's own decoding (jpeg is lossy)
    info = json.loads((tmp_path / "info").read_text())
    key = info["scales"][0]["key"]
    codec = codec_for(encoding, array, opts)
    n = 0
    for lo, hi, sl in chunk_regions(array.shape, chunk):
        name = chunk_name(lo, hi, offset)
        data = (tmp_path / key / name).read_bytes()
        got = codec.decode(data, reread[sl].shape, array.dtype, context=name)
        np.testing.assert_array_equal(got, reread[sl])  # jpeg: the same libjpeg-turbo decoding
        if encoding != "jpeg":  # lossy
            np.testing.assert_array_equal(got, array[sl])
        if encoding in BYTE_IDENTICAL:
            assert codec.encode(array[sl]) == data, name
        n += 1
    assert n == len(list((tmp_path / key).iterdir()))


@pytest.mark.parametrize("case", list(CASES))
def test_tensorstore_reads_shardvol_chunks(tmp_path, case):
    encoding, make, chunk, offset, opts = CASES[case]
    array = make()
    codec = codec_for(encoding, array, opts)
    scale = {"key": "s0", "resolution": [1, 1, 1], "size": list(array.shape[:3]),
             "voxel_offset": list(offset), "chunk_sizes": [list(chunk)], "encoding": encoding,
             **opts}
    info = {"@type": "neuroglancer_multiscale_volume", "data_type": array.dtype.name,
            "num_channels": array.shape[3], "scales": [scale],
            "type": "segmentation" if encoding == "compressed_segmentation" else "image"}
    (tmp_path / "s0").mkdir()
    (tmp_path / "info").write_text(json.dumps(info))
    ours = np.zeros_like(array)
    for lo, hi, sl in chunk_regions(array.shape, chunk):
        data = codec.encode(array[sl])
        (tmp_path / "s0" / chunk_name(lo, hi, offset)).write_bytes(data)
        ours[sl] = codec.decode(data, array[sl].shape, array.dtype)
    got = open_ts(tmp_path).read().result()
    assert got.shape == array.shape
    if encoding == "jpeg":
        np.testing.assert_array_equal(got, ours)
        assert np.abs(got.astype(int) - array).mean() < 3
    else:
        np.testing.assert_array_equal(got, array)
