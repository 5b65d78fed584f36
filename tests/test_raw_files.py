"""Raw chunk files read straight into the output (shardvol.precomputed.raw_files, csrc/rawfile).

TensorStore writes the volumes; every read is compared with the array it wrote.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from shardvol import Volume
from shardvol._ext import rawfile
from shardvol.errors import ChunkDecodeError, InvalidArgumentError, MissingChunkError
from shardvol.precomputed.raw_files import RawFileReader
from tests.c_checkers import run_checker
from tests.oracles import RANDOM_VOLUMES, random_values, ts_create


def _ts_volume(path, data, offset, chunk):
    store = ts_create(
        str(path), data_type=data.dtype.name, num_channels=data.shape[3],
        size=list(data.shape[:3]), resolution=[1, 1, 1], voxel_offset=list(offset),
        chunk_size=list(chunk), encoding="raw",
    )
    store.write(data).result()
    return Volume(str(path))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM_VOLUMES)
def test_random_boxes_match_tensorstore_data(tmp_path_factory, dtype, channels, shape, chunk,
                                             offset, seed):
    rng = np.random.default_rng(seed)
    data = random_values((*shape, channels), dtype, rng)
    vol = _ts_volume(tmp_path_factory.mktemp("v"), data, offset, chunk)
    assert vol.chunked_array.box_reader is not None
    for _ in range(6):
        lo = [int(rng.integers(0, n)) for n in shape]
        hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, shape)]
        c0 = int(rng.integers(0, channels))
        c1 = int(rng.integers(c0 + 1, channels + 1))
        box = tuple(slice(o + a, o + b) for o, a, b in zip(offset, lo, hi))
        got = vol[(*box, slice(c0, c1))]
        want = data[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2], c0:c1]
        np.testing.assert_array_equal(got, want)
        assert got.flags.f_contiguous
    np.testing.assert_array_equal(vol[...], data)
    # steps and integers go the generic way (or directly, for unit steps) with the same result
    o = offset
    np.testing.assert_array_equal(vol[o[0]::2, o[1] + shape[1] - 1, o[2]::3], data[::2, -1, ::3])


def test_missing_gzipped_and_odd_files_go_the_generic_way(tmp_path):
    data = np.arange(16 * 16 * 8, dtype=np.uint16).reshape((16, 16, 8, 1), order="F")
    vol = _ts_volume(tmp_path, data, (0, 0, 0), (8, 8, 8))
    scale = tmp_path / vol.scale.key
    expected = data.copy()
    # a missing chunk reads as the fill value, or raises when fill_missing is off
    os.remove(scale / "0-8_0-8_0-8")
    expected[0:8, 0:8] = 7
    # CloudVolume's gzipped chunk file, NAME.gz
    b = scale / "8-16_0-8_0-8"
    b.with_suffix(".gz").write_bytes(gzip.compress(b.read_bytes()))
    os.remove(b)
    # gzipped voxels under the plain name
    c = scale / "0-8_8-16_0-8"
    c.write_bytes(gzip.compress(c.read_bytes()))
    # raw voxels that merely start with the gzip magic bytes (little-endian 0x8b1f)
    expected[8, 8, 0, 0] = 0x8B1F
    (scale / "8-16_8-16_0-8").write_bytes(expected[8:16, 8:16].tobytes(order="F"))
    vol = Volume(str(tmp_path), fill_value=7)
    for box in [(slice(None),) * 3, (slice(3, 13), slice(2, 15), slice(1, 7))]:
        np.testing.assert_array_equal(vol[box], expected[box])
    with pytest.raises(MissingChunkError, match="0-8_0-8_0-8"):
        Volume(str(tmp_path), fill_missing=False)[0:4, 0:4, 0:4]
    # a directory where a chunk file should be reads as missing, as in the generic path
    os.mkdir(scale / "0-8_0-8_0-8")
    np.testing.assert_array_equal(vol[0:8, 0:8, 0:8], expected[0:8, 0:8, 0:8])


@pytest.mark.parametrize("size", [0, 1, 1023, 1025, 2048 * 3])
def test_wrong_size_chunk_names_the_file(tmp_path, size):
    data = np.zeros((16, 16, 8, 1), dtype=np.uint16)
    vol = _ts_volume(tmp_path, data, (0, 0, 0), (8, 8, 8))
    path = tmp_path / vol.scale.key / "8-16_0-8_0-8"
    path.write_bytes(b"\x05" * size)
    with pytest.raises(ChunkDecodeError, match="8-16_0-8_0-8"):
        Volume(str(tmp_path))[10:12, 2:3, 4:8]


def test_a_chunk_size_no_file_can_have_goes_the_generic_way(tmp_path):
    # the box's span in the claimed 2**60-byte chunk is not allocated as read scratch
    n = 1 << 20
    info = {"@type": "neuroglancer_multiscale_volume", "type": "image", "data_type": "uint8",
            "num_channels": 1, "scales": [{"key": "s", "size": [n, n, n], "resolution": [1, 1, 1],
                                           "chunk_sizes": [[n, n, n]], "encoding": "raw"}]}
    (tmp_path / "s").mkdir()
    (tmp_path / "info").write_text(json.dumps(info))
    (tmp_path / "s" / f"0-{n}_0-{n}_0-{n}").write_bytes(bytes(64))
    with pytest.raises(ChunkDecodeError, match=f"0-{n}_0-{n}_0-{n}.*needs {n**3} bytes, got 64"):
        Volume(str(tmp_path))[0:2, 0:2, 0:2]


def test_file_reader_only_for_local_raw_unsharded(tmp_path):
    data = np.zeros((8, 8, 8, 1), dtype=np.uint8)
    assert _ts_volume(tmp_path / "a", data, (0, 0, 0), (4, 4, 4)).chunked_array.box_reader
    mem = Volume.create("memory://raw-files-test", size=[8, 8, 8], data_type="uint8",
                        chunk_size=[4, 4, 4])
    assert mem.chunked_array.box_reader is None
    sharded = Volume.create(str(tmp_path / "b"), size=[8, 8, 8], data_type="uint8",
                            chunk_size=[4, 4, 4], sharding="auto")
    assert not isinstance(sharded.chunked_array.box_reader, RawFileReader)  # (shard_boxes')
    cseg = Volume.create(str(tmp_path / "c"), size=[8, 8, 8], data_type="uint32",
                         chunk_size=[4, 4, 4], type="segmentation",
                         encoding="compressed_segmentation",
                         compressed_segmentation_block_size=[4, 4, 4])
    assert cseg.chunked_array.box_reader is None


def test_read_into_returns_what_it_did_not_read(tmp_path):
    data = np.arange(8 * 8 * 8, dtype=np.uint8).reshape((8, 8, 8, 1), order="F")
    vol = _ts_volume(tmp_path, data, (0, 0, 0), (4, 4, 8))
    os.remove(tmp_path / vol.scale.key / "4-8_4-8_0-8")
    reader = vol.chunked_array.box_reader
    assert isinstance(reader, RawFileReader)
    from shardvol.array.indexing import chunk_parts, normalize_selection

    arr = vol.chunked_array
    sel = normalize_selection((slice(1, 7), slice(0, 8), slice(2, 6), slice(None)),
                              arr.grid.origin, arr.grid.shape, True)
    out = np.zeros((6, 8, 4, 1), np.uint8, order="F")
    left = reader.read_into(chunk_parts(sel, arr.grid), out)
    assert [p.coord for p in left] == [(1, 1, 0, 0)]
    want = data[1:7, 0:8, 2:6].copy()
    want[3:, 4:] = 0
    np.testing.assert_array_equal(out, want)


def test_kernel_checks_its_arguments(tmp_path):
    path = tmp_path / "c"
    path.write_bytes(bytes(range(64)))
    out = np.zeros((4, 4, 4, 1), np.uint8, order="F")
    good = np.array([[4, 4, 4, 1, 0, 0, 0, 0, 4, 4, 4, 1, 0, 0, 0, 0]], np.int64)
    assert rawfile.read_boxes([str(path)], good, out).tolist() == [0]
    np.testing.assert_array_equal(out.ravel(order="F"), np.arange(64))
    for bad in (
        [4, 4, 4, 1, 1, 0, 0, 0, 4, 4, 4, 1, 0, 0, 0, 0],  # box past the chunk's end
        [4, 4, 4, 1, 0, 0, 0, 0, 4, 4, 4, 1, 1, 0, 0, 0],  # box past out's end
        [4, 4, 4, 1, -1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0],  # negative origin
    ):
        with pytest.raises(InvalidArgumentError):
            rawfile.read_boxes([str(path)], np.array([bad], np.int64), out)
    with pytest.raises(InvalidArgumentError):
        rawfile.read_boxes([str(path)], good[:, :12].copy(), out)
    with pytest.raises(InvalidArgumentError):
        rawfile.read_boxes([str(path)], good, out[::-1])
    assert rawfile.read_boxes([str(tmp_path / "none")], good, out).tolist() == [rawfile.MISSING]
    path.write_bytes(bytes(63))
    assert rawfile.read_boxes([str(path)], good, out).tolist() == [rawfile.OTHER]


def test_c_kernel_checker(tmp_path):
    """tests/c/fuzz_rawfile.c: random files, boxes and output layouts read exactly; odd files
    left to the caller; a short scratch buffer refused.  Run it under ASan for long sessions."""
    # boxes spanning 4 KiB or more of their output are streamed (copybox.h): both paths taken
    out = run_checker(tmp_path, "fuzz_rawfile", ["rawfile.c"], ["3000", str(tmp_path / "chunk")],
                      defines=("SV_STREAM_MIN_SPAN=4096",))
    words = out.split()  # "<n> read, <m> left to the generic path"
    read, left = int(words[0]), int(words[2])
    assert read + left == 3000 and read > 1500 and left > 500, out
