"""Boxes copied into large outputs with non-temporal stores (csrc/copybox.h): the C checker,
and reads large enough to take that path equal to TensorStore's data and reads."""

from __future__ import annotations

import numpy as np
import pytest

from shardvol import Volume
from tests.c_checkers import run_checker
from tests.oracles import ts_create, ts_open

#: csrc/copybox.h SV_STREAM_MIN_SPAN: boxes spanning this many output bytes are streamed
STREAM_MIN_SPAN = 2 << 20


def test_c_copy_checker(tmp_path):
    """tests/c/check_copybox.c: random boxes, item sizes, strides and destination alignments
    copied exactly with and without streaming; spans exact.  Run it under ASan for long
    sessions (see the file)."""
    out = run_checker(tmp_path, "check_copybox", [], ["5000"])
    rounds, streamed = int(out.split()[0]), int(out.split()[2])
    assert rounds == 5000 and streamed > 10_000, out


def _data(shape, dtype, rng) -> np.ndarray:
    if np.dtype(dtype).kind == "u" and np.dtype(dtype).itemsize >= 4:  # labels in 6-voxel boxes
        labels = rng.integers(1, 2**31, (shape[0] // 6 + 1, shape[1] // 6 + 1, shape[2] // 6 + 1),
                              dtype=dtype)
        g = np.indices(shape[:3]) // 6
        return np.asfortranarray(labels[g[0], g[1], g[2]][..., None])
    x, y, z = np.meshgrid(*(np.arange(n) for n in shape[:3]), indexing="ij", sparse=True)
    return np.asfortranarray(((x * 3 + y * 2 + z) % 251).astype(dtype)[..., None])


CASES = [  # encoding, dtype, sharded
    ("raw", "uint8", False),
    ("compressed_segmentation", "uint32", False),
    ("compressed_segmentation", "uint64", True),
    ("jpeg", "uint8", True),
]


@pytest.mark.parametrize("encoding, dtype, sharded", CASES)
def test_large_unaligned_reads_match_tensorstore(tmp_path, encoding, dtype, sharded):
    """A volume TensorStore wrote, read by shardvol in unaligned boxes whose chunk parts span
    more than STREAM_MIN_SPAN bytes of the output (streamed) and in small ones (not)."""
    size = (300, 290, 75)
    rng = np.random.default_rng(5)
    data = _data(size, dtype, rng)
    extra = {}
    if encoding == "compressed_segmentation":
        extra["compressed_segmentation_block_size"] = [8, 8, 8]
    if sharded:
        extra["sharding"] = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1,
                             "hash": "identity", "minishard_bits": 1, "shard_bits": 4,
                             "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    store = ts_create(str(tmp_path), data_type=dtype, num_channels=1,
                      type="image" if encoding != "compressed_segmentation" else "segmentation",
                      size=list(size), resolution=[1, 1, 1], encoding=encoding,
                      chunk_size=[64, 64, 64], voxel_offset=[5, -7, 3], **extra)
    store[...].write(data).result()
    theirs = ts_open(str(tmp_path)).read(order="F").result()
    if encoding != "jpeg":
        np.testing.assert_array_equal(theirs, data)
    vol = Volume(str(tmp_path))
    big = (slice(8, 300), slice(-4, 280), slice(4, 77))  # global coordinates
    local = (slice(3, 295), slice(3, 287), slice(1, 74))
    z_stride = 292 * 284 * np.dtype(dtype).itemsize
    assert 60 * z_stride >= STREAM_MIN_SPAN  # a whole chunk's part spans more than that
    got = vol[big]
    assert got.flags.f_contiguous
    np.testing.assert_array_equal(got, theirs[local])
    np.testing.assert_array_equal(vol[...], theirs)
    for x0, y0, z0 in [(5, -7, 3), (66, 60, 40), (250, 200, 70)]:
        box = (slice(x0, x0 + 30), slice(y0, y0 + 31), slice(z0, z0 + 7))
        ref = (slice(x0 - 5, x0 + 25), slice(y0 + 7, y0 + 38), slice(z0 - 3, z0 + 4))
        np.testing.assert_array_equal(vol[box], theirs[ref])
