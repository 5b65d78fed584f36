"""Volume against TensorStore, CloudVolume and a numpy model of the volume."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardvol
from shardvol import Volume
from shardvol.errors import (
    AlreadyExistsError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    MissingChunkError,
    OutOfBoundsError,
    ShardFormatError,
)

from .oracles import cv_read, data_path, ts_create, ts_open, ts_read

# the data types TensorStore's precomputed driver supports (shardvol adds int64, float64)
EXACT = {
    "raw": ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32"],
    "compressed_segmentation": ["uint32", "uint64"],
    "png": ["uint8", "uint16"],
}


def sharding_specs():
    return st.one_of(
        st.none(),
        st.just("auto"),
        st.fixed_dictionaries({
            "@type": st.just("neuroglancer_uint64_sharded_v1"),
            "hash": st.sampled_from(["identity", "murmurhash3_x86_128"]),
            "preshift_bits": st.integers(0, 2),
            "minishard_bits": st.integers(0, 3),
            "shard_bits": st.integers(0, 3),
            "minishard_index_encoding": st.sampled_from(["raw", "gzip"]),
            "data_encoding": st.sampled_from(["raw", "gzip"]),
        }),
    )


@st.composite
def volume_cases(draw, encodings=tuple(EXACT)):
    encoding = draw(st.sampled_from(encodings))
    dtype = draw(st.sampled_from(EXACT[encoding]))
    channels = 1
    if encoding == "raw":
        channels = draw(st.integers(1, 3))
    elif encoding == "png":
        channels = draw(st.integers(1, 4))
    size = [draw(st.integers(1, 40)) for _ in range(3)]
    chunk = [draw(st.integers(1, 13)) for _ in range(3)]
    offset = [draw(st.integers(-20, 20)) for _ in range(3)]
    block = [draw(st.integers(1, 5)) for _ in range(3)]
    return {
        "encoding": encoding, "data_type": dtype, "num_channels": channels, "size": size,
        "chunk_size": chunk, "voxel_offset": offset, "sharding": draw(sharding_specs()),
        "compressed_segmentation_block_size":
            block if encoding == "compressed_segmentation" else None,
        "type": "segmentation" if encoding == "compressed_segmentation" else "image",
    }


def random_values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.normal(0, 100, shape).astype(dtype)
    info = np.iinfo(dtype)
    # a few distinct labels keeps compressed_segmentation tables interesting
    palette = rng.integers(info.min, info.max, 6, dtype=dtype, endpoint=True)
    return palette[rng.integers(0, 6, shape)]


def random_region(rng, offset, size):
    key, local = [], []
    for o, n in zip(offset, size):
        a = int(rng.integers(0, n))
        b = int(rng.integers(a + 1, n + 1))
        key.append(slice(o + a, o + b))
        local.append(slice(a, b))
    return tuple(key), tuple(local)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=volume_cases(), seed=st.integers(0, 2**32 - 1))
def test_matches_tensorstore_both_ways(tmp_path_factory, case, seed):
    path = str(tmp_path_factory.mktemp("vol"))
    rng = np.random.default_rng(seed)
    vol = Volume.create(path, resolution=(4, 4, 40), **case)
    shape = vol.shape
    model = np.zeros(shape, vol.dtype)
    for _ in range(2):
        key, local = random_region(rng, case["voxel_offset"], case["size"])
        value = random_values(rng, model[local].shape, vol.dtype)
        vol[key] = value
        model[local] = value
    np.testing.assert_array_equal(vol[...], model)
    np.testing.assert_array_equal(ts_read(path), model)
    key, local = random_region(rng, case["voxel_offset"], case["size"])
    np.testing.assert_array_equal(vol[key], model[local])

    # TensorStore writes an unaligned region; shardvol reads it back
    store = ts_open(path)
    key, local = random_region(rng, case["voxel_offset"], case["size"])
    value = random_values(rng, model[local].shape, vol.dtype)
    store[key].write(value).result()
    model[local] = value
    np.testing.assert_array_equal(Volume(path)[...], model)


@pytest.mark.parametrize("sharding", [None, {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128", "preshift_bits": 1,
    "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip",
    "data_encoding": "gzip"}])
@pytest.mark.parametrize("encoding, dtype",
                         [("raw", "uint16"), ("compressed_segmentation", "uint64")])
def test_cloudvolume_reads_shardvol(tmp_path, sharding, encoding, dtype):
    rng = np.random.default_rng(1)
    vol = Volume.create(str(tmp_path), size=(50, 37, 21), voxel_offset=(3, -4, 10),
                        chunk_size=(16, 16, 8), data_type=dtype, encoding=encoding,
                        type="segmentation" if encoding != "raw" else "image", sharding=sharding)
    data = random_values(rng, vol.shape, dtype)
    vol[...] = data
    np.testing.assert_array_equal(cv_read(str(tmp_path)), data)


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_wide_types_beyond_tensorstore_vs_cloudvolume(tmp_path, dtype):
    rng = np.random.default_rng(5)
    vol = Volume.create(str(tmp_path), size=(20, 9, 7), voxel_offset=(-3, 0, 2),
                        chunk_size=(8, 4, 4), data_type=dtype, num_channels=2, sharding="auto")
    data = random_values(rng, vol.shape, dtype)
    vol[...] = data
    np.testing.assert_array_equal(vol[...], data)
    np.testing.assert_array_equal(cv_read(str(tmp_path)), data)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("sharded", [False, True])
def test_jpeg_both_ways_within_tolerance(tmp_path, channels, sharded):
    x, y, z = np.meshgrid(np.arange(40), np.arange(30), np.arange(20), indexing="ij")
    smooth = np.stack([(x * 3 + y * 2 + z + 40 * c) % 256 for c in range(channels)], -1)
    smooth = smooth.astype(np.uint8)
    vol = Volume.create(str(tmp_path / "a"), size=(40, 30, 20), chunk_size=(16, 16, 8),
                        num_channels=channels, encoding="jpeg", jpeg_quality=95,
                        sharding="auto" if sharded else None)
    assert vol.info["scales"][0]["jpeg_quality"] == 95  # stored in the scale, as TensorStore does
    vol[...] = smooth
    ours = vol[...]
    theirs = ts_read(str(tmp_path / "a"))
    np.testing.assert_array_equal(ours, theirs)  # same bytes, same libjpeg-turbo decode
    assert np.abs(ours.astype(int) - smooth).mean() < 3

    store = ts_create(str(tmp_path / "b"), data_type="uint8", num_channels=channels,
                      size=[40, 30, 20], resolution=[1, 1, 1], encoding="jpeg",
                      chunk_size=[16, 16, 8])
    store[...].write(smooth).result()
    assert np.abs(Volume(str(tmp_path / "b"))[...].astype(int) - smooth).mean() < 3


@pytest.mark.parametrize("encoding, option, value", [("JPEG", "jpeg_quality", 30),
                                                     ("PNG", "png_level", 1)])
def test_encoding_options_kept_whatever_the_encoding_case(tmp_path, encoding, option, value):
    vol = Volume.create(str(tmp_path), size=(8, 8, 8), encoding=encoding, **{option: value})
    assert vol.encoding == encoding.lower()
    assert vol.info["scales"][0][option] == value
    assert getattr(vol.chunked_array.codec, option) == value


def test_golden_raw_uint16_4ch():
    vol = Volume(data_path("google__tensorstore__golden_raw_uint16_4ch"))
    expected = np.load(data_path("google__tensorstore__golden_raw_uint16_4ch",
                                "expected_x9-11_y7-11_z7-9_c0-3.npy"))
    np.testing.assert_array_equal(vol[9:11, 7:11, 7:9, 0:3], expected)


@pytest.mark.parametrize("bits", ["uint32", "uint64"])
def test_golden_compressed_segmentation(bits):
    folder = f"google__tensorstore__golden_cseg_{bits}"
    vol = Volume(data_path(folder))
    expected = np.load(data_path(folder, "expected_xyz_x0-3_y0-4_z0-3.npy"))
    np.testing.assert_array_equal(vol[0:3, 0:4, 0:3, 0], expected)


def test_golden_png_dataset():
    folder = "scalableminds__webknossos-libs__simple_ng_dataset"
    vol = Volume(data_path(folder, "color"))
    expected = np.load(data_path(folder, "expected_cxyz_from_simple_zarr_dataset.npy"))
    expected = expected.transpose(1, 2, 3, 0)
    got = vol[tuple(slice(o, o + n) for o, n in zip(vol.voxel_offset, expected.shape[:3]))]
    np.testing.assert_array_equal(got, expected)


def test_reads_cloudvolume_gzip_chunks(tmp_path):
    from cloudvolume import CloudVolume

    info = CloudVolume.create_new_info(1, "image", "uint16", "raw", [4, 4, 40], [5, 0, 0],
                                       [30, 20, 10], chunk_size=[16, 16, 8])
    cv = CloudVolume(f"file://{tmp_path}", info=info, compress="gzip", progress=False)
    cv.commit_info()
    data = np.random.default_rng(2).integers(0, 60000, (30, 20, 10, 1)).astype(np.uint16)
    cv[5:35, 0:20, 0:10] = data
    files = os.listdir(tmp_path / "4_4_40")
    assert files and all(f.endswith(".gz") for f in files)
    np.testing.assert_array_equal(Volume(str(tmp_path))[...], data)


def test_indexing_semantics(tmp_path):
    vol = Volume.create(str(tmp_path), size=(20, 10, 6), voxel_offset=(100, -5, 0),
                        chunk_size=(7, 3, 4), data_type="int32", num_channels=2)
    model = np.arange(20 * 10 * 6 * 2, dtype=np.int32).reshape((20, 10, 6, 2), order="F")
    vol[...] = model
    assert vol[105, -5, 0].tolist() == model[5, 0, 0].tolist()
    np.testing.assert_array_equal(vol[..., 1], model[..., 1])
    np.testing.assert_array_equal(vol[100:120:3, :, 5], model[::3, :, -1])
    np.testing.assert_array_equal(vol[119:99:-2, -3:2], model[19::-2, 2:7])  # y: plain coordinates
    out = vol[100:110, -5:5, 0:6]
    assert out.flags.f_contiguous and out.shape == (10, 10, 6, 2)
    with pytest.raises(OutOfBoundsError):
        vol[99:110]
    with pytest.raises(OutOfBoundsError):
        vol[100:121]
    vol2 = Volume(str(tmp_path), bounded=False, fill_value=-7)
    out = vol2[95:105, -5:-4, 0:1, 0]
    assert (out[:5].tolist() == [[[-7]]] * 5
            and out[5:, 0, 0].tolist() == model[:5, 0, 0, 0].tolist())


def test_negative_indices_are_coordinates_on_every_volume(tmp_path):
    """-1 is the coordinate -1, also where the domain starts at 0 (never "the last voxel"):
    bounded, an OutOfBoundsError (a ValueError too, as CloudVolume's callers catch);
    unbounded, the fill value there on reads, clipped away on writes."""
    vol = Volume.create(str(tmp_path), size=(12, 6, 5), chunk_size=(4, 4, 4),
                        data_type="uint16")
    model = np.random.default_rng(4).integers(1, 999, (12, 6, 5, 1)).astype(np.uint16)
    vol[...] = model
    for key in (np.s_[-1:10, 0:1, 0:1], np.s_[-1], np.s_[:, :, -2:], np.s_[5:2:-1, -1]):
        with pytest.raises(OutOfBoundsError, match="global coordinates"):
            vol[key]
        with pytest.raises(ValueError, match="outside the domain"):
            vol[key] = 1
    free = Volume(str(tmp_path), bounded=False, fill_value=7)
    out = free[-1:10, 0:1, 0:1]
    assert out.shape == (11, 1, 1, 1) and out[0, 0, 0, 0] == 7
    np.testing.assert_array_equal(out[1:], model[0:10, 0:1, 0:1])
    assert free[-3, 2, 2].tolist() == [7]
    free[-2:2, 0:2, 0] = np.full((4, 2), 5000, np.uint16)  # the part below 0 is clipped
    model[0:2, 0:2, 0] = 5000
    np.testing.assert_array_equal(vol[...], model)


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_single_channel_volumes_take_xyz_arrays(tmp_path, sharding):
    """(x, y, z) values where the selection is (x, y, z, 1), as from_dask and CloudVolume
    take them; TensorStore reads what was written."""
    vol = Volume.create(str(tmp_path / "v"), size=(20, 18, 9), chunk_size=(8, 8, 4),
                        data_type="uint32", sharding=sharding)
    model = np.zeros((20, 18, 9), np.uint32)
    rng = np.random.default_rng(6)
    for key in (np.s_[0:20, 0:18, 0:9], np.s_[3:11, 2:17, 4:5], np.s_[5, 1:4, 2:8],
                np.s_[19:2:-3, 0:18, 8]):
        value = rng.integers(0, 2**32, model[key].shape, dtype=np.uint32)
        vol[key] = value
        model[key] = value
    vol.write_async(np.s_[1:3, 1:3, 1:3], np.full((2, 2, 2), 7, np.uint32)).result()
    model[1:3, 1:3, 1:3] = 7
    np.testing.assert_array_equal(vol[...][..., 0], model)
    np.testing.assert_array_equal(ts_read(str(tmp_path / "v"))[..., 0], model)
    rgb = Volume.create(str(tmp_path / "rgb"), size=(4, 4, 4), num_channels=3)
    with pytest.raises(InvalidArgumentError, match="shape"):
        rgb[0:4, 0:4, 0:4] = np.zeros((4, 4, 4), np.uint8)


def test_fill_missing_and_scalar_broadcast(tmp_path):
    vol = Volume.create(str(tmp_path), size=(10, 10, 10), chunk_size=(4, 4, 4), data_type="uint8")
    assert (vol[...] == 0).all()
    assert (Volume(str(tmp_path), fill_value=9)[...] == 9).all()
    with pytest.raises(MissingChunkError, match="0-4_0-4_0-4"):
        Volume(str(tmp_path), fill_missing=False)[0:2, 0:2, 0:2]
    vol[2:9, 1:3, 5] = 200
    out = vol[...]
    assert out.sum() == 200 * 7 * 2 and (out[2:9, 1:3, 5] == 200).all()
    assert sorted(k for k, v in vol.exists().items() if v) == [  # CloudVolume's keys
        "1_1_1/0-4_0-4_4-8", "1_1_1/4-8_0-4_4-8", "1_1_1/8-10_0-4_4-8"]
    with pytest.raises(InvalidArgumentError, match="0-4_0-4_4-8 only in part"):
        vol.delete(np.s_[0:1, 0:1, 4:5])  # would delete 63 voxels more: refused
    assert vol.exists(np.s_[0:4, 0:4, 4:8])["1_1_1/0-4_0-4_4-8"]
    vol.delete(np.s_[0:4, 0:4, 4:8])
    assert not vol.exists(np.s_[0:4, 0:4, 4:8])["1_1_1/0-4_0-4_4-8"]
    vol.delete(np.s_[8:10, 0:4, 4:8])  # a chunk cut by the volume's end: whole
    assert not any(vol.exists(np.s_[8:10, 0:4, 4:8]).values())
    for region in (np.s_[8:12, 0:4, 0:4], np.s_[-4:4, 0:4, 0:4], np.s_[20:30]):
        with pytest.raises(OutOfBoundsError):  # (a bounded volume, as its reads)
            vol.exists(region)
        with pytest.raises(OutOfBoundsError):
            vol.delete(region)
    free = Volume(str(tmp_path), bounded=False)  # clipped to the volume, both
    assert free.exists(np.s_[20:30]) == {} and list(free.exists(np.s_[8:12, 0:4, 0:4])) == [
        "1_1_1/8-10_0-4_0-4"]
    free.delete(np.s_[8:12, 0:4, 0:4])
    free.delete(np.s_[20:30])
    assert (vol[4:8, 1:3, 5] == 200).all() and (vol[...] == 200).sum() == 4 * 2  # the rest


def test_fill_value_must_fit_the_data_type(tmp_path):
    Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4), data_type="uint8")
    for bad in (-1, 300, 1.5, float("nan"), None, "a", [1, 2]):
        with pytest.raises(InvalidArgumentError, match="fill_value"):
            Volume(str(tmp_path), fill_value=bad)
    assert (Volume(str(tmp_path), fill_value=255.0)[...] == 255).all()
    assert (Volume(str(tmp_path), fill_value=np.int64(7))[0, 0, 0] == 7).all()


def test_numpy_integer_mips(tmp_path):
    vol = Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4))
    vol.add_scale((2, 2, 2), (4, 4, 4))
    assert Volume(str(tmp_path), mip=np.int64(1)).resolution == (2, 2, 2)
    assert vol.mip(np.uint8(1)).mip_level == 1


def test_write_errors_write_nothing(tmp_path):
    vol = Volume.create(str(tmp_path), size=(10, 10, 10), chunk_size=(4, 4, 4), data_type="uint8")
    with pytest.raises(InvalidArgumentError, match="float64"):
        vol[...] = np.zeros((10, 10, 10, 1))
    with pytest.raises(InvalidArgumentError, match="shape"):
        vol[0:4, 0:4, 0:4] = np.zeros((4, 4, 5, 1), np.uint8)
    with pytest.raises(OutOfBoundsError):
        vol[0:11] = 1
    assert not (tmp_path / "1_1_1").exists() or os.listdir(tmp_path / "1_1_1") == []


def test_create_refuses_existing_and_overwrite_replaces(tmp_path):
    Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4))[...] = 5
    with pytest.raises(AlreadyExistsError):
        Volume.create(str(tmp_path), size=(8, 8, 8))
    vol = Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4), overwrite=True)
    assert (vol[...] == 0).all()


def test_multiscale_add_scale_and_select(tmp_path):
    vol = Volume.create(str(tmp_path), size=(16, 16, 4), resolution=(8, 8, 40),
                        chunk_size=(8, 8, 4))
    low = vol.add_scale(resolution=(16, 16, 40), size=(8, 8, 4), sharding="auto")
    low[...] = 3
    assert [s.key for s in Volume(str(tmp_path)).mips] == ["8_8_40", "16_16_40"]
    assert Volume(str(tmp_path), mip=(16, 16, 40)).shape == (8, 8, 4, 1)
    assert (vol.mip(1)[...] == 3).all()
    assert (ts_read(str(tmp_path), 1) == 3).all()
    with pytest.raises(AlreadyExistsError):
        vol.add_scale(resolution=(16, 16, 40), size=(9, 8, 4))
    with pytest.raises(InfoError, match="mip 5"):
        vol.mip(5)


def test_a_volume_stays_on_its_scale_when_a_finer_one_is_added(tmp_path):
    # scales are ordered by resolution: a finer one added moves this one's index
    vol = Volume.create(str(tmp_path), size=(8, 8, 4), resolution=(4, 4, 40), chunk_size=(4, 4, 4))
    vol[...] = 7
    vol.add_scale(resolution=(2, 2, 40), size=(16, 16, 4))
    assert vol.resolution == (4, 4, 40) and (vol[...] == 7).all()
    Volume(str(tmp_path)).add_scale(resolution=(1, 1, 40), size=(32, 32, 4))  # another handle
    vol.refresh()
    assert vol.resolution == (4, 4, 40) and vol.mip_level == 2 and (vol[...] == 7).all()


def test_scalars_are_written_only_when_exact(tmp_path):
    # numpy compares an integer with a float in float64, where 2**53 + 1 == 2**53
    for dtype, bad in (("float32", 2**60 + 1), ("float32", np.int64(2**40 + 1)),
                       ("float64", 2**53 + 1), ("float64", np.uint64(2**64 - 1)),
                       ("uint8", 2.5), ("float32", 0.1)):
        vol = Volume.create(str(tmp_path / dtype), size=(2, 2, 2), chunk_size=(2, 2, 2),
                            data_type=dtype, overwrite=True)
        with pytest.raises(InvalidArgumentError, match="exactly"):
            vol[0, 0, 0] = bad
        with pytest.raises(InvalidArgumentError, match="fill_value"):
            Volume(str(tmp_path / dtype), fill_value=bad)
        assert (vol[...] == 0).all()
    vol = Volume.create(str(tmp_path / "f"), size=(2, 2, 2), chunk_size=(2, 2, 2),
                        data_type="float64")
    vol[0, 0, 0] = 2**53
    vol[1, 0, 0] = np.uint64(2**63)
    assert vol[0:2, 0, 0, 0].tolist() == [2.0**53, 2.0**63]


def test_create_refuses_fractional_geometry(tmp_path):
    for field in ("size", "voxel_offset", "chunk_size"):
        with pytest.raises(InfoError, match=field.replace("chunk_size", "chunk_sizes")):
            Volume.create(str(tmp_path), **{"size": (8, 8, 8), field: (4.5, 4, 4)})
    vol = Volume.create(str(tmp_path), size=np.array([8.0, 8, 8]), chunk_size=(np.int64(4), 4, 4))
    assert vol.shape == (8, 8, 8, 1) and vol.chunk_size == (4, 4, 4)


def test_mip_selectors_of_the_wrong_kind_are_info_errors(tmp_path):
    Volume.create(str(tmp_path), size=(4, 4, 4), chunk_size=(2, 2, 2))
    for bad in (True, 1.5, None, object()):
        with pytest.raises(InfoError, match="index, key or resolution"):
            Volume(str(tmp_path), mip=bad)


def test_a_read_too_large_for_memory_is_an_invalid_argument(tmp_path, monkeypatch):
    vol = Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4))

    def no_memory(shape, dtype, order="C"):
        raise MemoryError(f"cannot allocate {np.prod(shape)} bytes")

    monkeypatch.setattr("shardvol._ext.hugeblock.empty", no_memory)
    with pytest.raises(InvalidArgumentError, match=r"no memory for the \(8, 8, 8, 1\) array"):
        vol[...]


def test_gzip_bombs_in_place_of_chunks_are_errors_not_allocations(tmp_path):
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = zeros.compress(bytes(256 << 20)) + zeros.flush()  # 256 MiB of zeros, 250 KB
    vol = Volume.create(str(tmp_path / "u"), size=(8, 8, 8), chunk_size=(8, 8, 8),
                        data_type="uint32", encoding="compressed_segmentation")
    (tmp_path / "u" / vol.scale.key).mkdir()
    (tmp_path / "u" / vol.scale.key / "0-8_0-8_0-8.gz").write_bytes(bomb)  # as CloudVolume names
    with pytest.raises(ChunkDecodeError, match=r"0-8_0-8_0-8\.gz: gzip data decodes to more"):
        vol[...]
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 0, "shard_bits": 0, "minishard_index_encoding": "raw",
            "data_encoding": "gzip"}
    vol = Volume.create(str(tmp_path / "s"), size=(8, 8, 8), chunk_size=(8, 8, 8),
                        data_type="uint8", sharding=spec)
    # the same shard layout with raw data encoding stores the bomb as chunk 0's gzip data
    raw = shardvol.sharding.ShardingSpec.from_dict({**spec, "data_encoding": "raw"})
    shardvol.sharding.write_shards(str(tmp_path / "s" / vol.scale.key), raw, {0: bomb})
    with pytest.raises(ShardFormatError, match="gzip data decodes to more than"):
        vol[...]


def test_corrupt_inputs_name_the_culprit(tmp_path):
    vol = Volume.create(str(tmp_path / "u"), size=(8, 8, 8), chunk_size=(4, 4, 4),
                        data_type="uint16")
    vol[...] = 1
    (tmp_path / "u" / "1_1_1" / "0-4_0-4_0-4").write_bytes(b"short")
    with pytest.raises(ChunkDecodeError, match="0-4_0-4_0-4"):
        Volume(str(tmp_path / "u"))[...]
    assert (Volume(str(tmp_path / "u"))[4:8, 4:8, 4:8] == 1).all()  # other chunks still read

    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "raw",
            "data_encoding": "raw"}
    vol = Volume.create(str(tmp_path / "s"), size=(8, 8, 8), chunk_size=(4, 4, 4), sharding=spec)
    vol[...] = 1
    shard = tmp_path / "s" / "1_1_1" / "0.shard"
    shard.write_bytes(shard.read_bytes()[:40])
    with pytest.raises(ShardFormatError, match=re.escape("0.shard")):
        Volume(str(tmp_path / "s"))[...]

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "info").write_text(json.dumps({"type": "image", "data_type": "uint8",
                                                        "num_channels": 1, "scales": [{}]}))
    with pytest.raises(InfoError, match=r"scales\[0\] is missing 'key'"):
        Volume(str(tmp_path / "bad"))
    with pytest.raises(InfoError, match="no 'info' file"):
        Volume(str(tmp_path / "nothing"))


@pytest.mark.parametrize("parallel", [1, 2])  # batches that fetch and decode; fetch, then decode
def test_corrupt_gzip_shard_value_names_the_chunk(tmp_path, parallel):
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
    vol = Volume.create(str(tmp_path), size=(8, 8, 8), chunk_size=(4, 4, 4), sharding=spec)
    vol[...] = np.arange(512, dtype=np.uint8).reshape(8, 8, 8, 1)
    store = vol.chunked_array.store
    code = int(store.codes([(1, 0, 0, 0)])[0])
    name, start, size = store.reader.exists(code, return_byte_range=True)
    shard = tmp_path / "1_1_1" / name
    data = bytearray(shard.read_bytes())
    data[start + size - 8] ^= 0xFF  # the value's CRC32: the deflate stream itself still decodes
    shard.write_bytes(bytes(data))
    vol = Volume(str(tmp_path), parallel=parallel)
    np.testing.assert_array_equal(vol[0:4, 0:4, 0:4, 0],
                                  np.arange(512).reshape(8, 8, 8)[:4, :4, :4])
    with pytest.raises(ShardFormatError, match="corrupt gzip") as e:
        vol[2:6, 0:4, 0:4]
    assert re.search(rf"0\.shard: minishard 1: data of key {code}|id {code}\) in .*0\.shard",
                     str(e.value))


def _write_region(path: str, x0: int, value: int, repeats: int) -> None:
    vol = Volume(path)
    for _ in range(repeats):
        vol[x0 : x0 + 1, 0:4, 0:4] = value


@pytest.mark.parametrize("sharded", [False, True])
def test_concurrent_processes_on_one_unit_lose_nothing(tmp_path, sharded):
    """Four processes each rewrite their own x-plane of the same chunk/shard."""
    vol = Volume.create(str(tmp_path), size=(4, 4, 4), chunk_size=(4, 4, 4),
                        sharding="auto" if sharded else None)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_region, args=(str(tmp_path), x, x + 1, 10))
             for x in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    out = vol[...]
    for x in range(4):
        assert (out[x] == x + 1).all()
    hidden = [f for f in os.listdir(tmp_path / "1_1_1") if f.startswith(".shardvol")]
    assert hidden == [".shardvol-locks"]  # no temp files left, one lock file per directory


def test_public_api():
    assert shardvol.Volume is Volume


def test_volumes_arrays_and_memory_stores_pickle(tmp_path):
    # process pools and Dask send them to their workers
    import pickle

    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    for url in (str(tmp_path / "s"), "memory://pickled-volume"):
        vol = Volume.create(url, size=(8, 8, 8), chunk_size=(4, 4, 4), sharding=spec,
                            overwrite=True)
        vol[...] = 5
        again = pickle.loads(pickle.dumps(vol))
        assert (again[...] == 5).all()  # (memory://: this process's values)
        again[0:4, 0:4, 0:4] = 6
        assert (vol[0:4, 0:4, 0:4] == 6).all()
    arr = shardvol.zarr3.create(str(tmp_path / "z"), (8, 8), "uint8", (8, 8), (4, 4))
    arr[...] = 3
    assert (pickle.loads(pickle.dumps(arr))[...] == 3).all()


def test_common_mistakes_are_shardvol_errors(tmp_path, monkeypatch):
    with pytest.raises(InfoError, match="data_type 'unit8' is not one of"):
        Volume.create(str(tmp_path / "a"), size=(4, 4, 4), data_type="unit8")
    assert Volume.create(str(tmp_path / "b"), size=(4, 4, 4), data_type=np.uint16).dtype == "uint16"
    for bad in ("4", -1, 0, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="parallel"):
            Volume(str(tmp_path / "b"), parallel=bad)
    assert (Volume(str(tmp_path / "b"), parallel=np.int64(3))[...] == 0).all()
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if gcsfs were not installed
    # (a module that imports it)
    monkeypatch.delitem(sys.modules, "shardvol.kvstore.gcs_filesystem", raising=False)
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, "gs", raising=False)
    with pytest.raises(shardvol.errors.UnsupportedSchemeError, match="gcsfs"):
        Volume("gs://bucket/volume")
    vol = Volume(str(tmp_path / "b"))
    vol[...] = 1

    def refused(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "unlink", refused)
    with pytest.raises(shardvol.errors.StoreError, match="cannot delete"):
        vol.delete(...)


def test_memory_volumes_are_refused_by_executors_of_other_processes():
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    vol = Volume.create("memory://executor-check", size=(16, 16, 8), chunk_size=(8, 8, 8),
                        overwrite=True)
    vol[...] = 3
    with ProcessPoolExecutor(1) as pool, pytest.raises(InvalidArgumentError, match="this process"):
        shardvol.downsample(vol, num_mips=1, executor=pool, progress=False)
    assert len(Volume("memory://executor-check").mips) == 1  # nothing added
    with ThreadPoolExecutor(2) as pool:
        shardvol.downsample(vol, num_mips=np.int64(1), executor=pool, progress=False)
    assert (vol.mip(1)[...] == 3).all()
