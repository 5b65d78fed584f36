"""shardvol.copy between precomputed and Zarr v3, checked with TensorStore and zarr-python.

Sources are written by TensorStore (or are golden files written by it); every
output is read by an oracle: Zarr outputs by TensorStore's zarr3 driver and
zarr-python, precomputed outputs by TensorStore's neuroglancer_precomputed
driver.  Round trips precomputed -> zarr3 -> precomputed give back the same
voxels, domain (voxel offset) and resolution.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import tensorstore as ts

import shardvol
from shardvol import Volume
from shardvol.errors import AlreadyExistsError, InfoError, InvalidArgumentError
from shardvol.kvstore import FileStore
from shardvol.ops import convert
from shardvol.precomputed import sharded as sharded_store
from shardvol.zarr3 import ZarrArray

from .oracles import data_path, ts_create, ts_open, ts_read
from .zarr3_util import ts_read as ts_read_zarr
from .zarr3_util import zarr_read

SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
    "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}  # fmt: skip
HASHED = {**SHARDING, "hash": "murmurhash3_x86_128", "preshift_bits": 0, "minishard_bits": 1,
          "shard_bits": 2}  # fmt: skip


def ts_source(path, data, offset, *, chunk_size, sharding=None, encoding="raw", **extra):
    """A precomputed volume written by TensorStore; ``data`` is (x, y, z, c)."""
    kind = "segmentation" if encoding == "compressed_segmentation" else "image"
    scale = dict(size=list(data.shape[:3]), voxel_offset=list(offset), resolution=[4, 5, 40],
                 chunk_size=list(chunk_size), encoding=encoding, **extra)  # fmt: skip
    if sharding:
        scale["sharding"] = sharding
    store = ts_create(path, data_type=data.dtype.name, num_channels=data.shape[3], type=kind,
                      **scale)  # fmt: skip
    store[...].write(data).result()


def voxels(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.normal(0, 100, shape).astype(dtype)
    return rng.integers(0, 200, shape).astype(dtype)  # small labels: segmentation-like


def assert_zarr_output(path, data, offset):
    """The Zarr output as both oracles read it, and its kept geometry."""
    assert np.array_equal(ts_read_zarr(path), data)
    assert np.array_equal(zarr_read(path), data)
    arr = shardvol.open(path)
    assert isinstance(arr, ZarrArray) and arr.dimension_names == ("x", "y", "z", "c")
    assert arr.attrs["precomputed"]["voxel_offset"] == list(offset)
    assert arr.attrs["dimension_units"] == ["4 nm", "5 nm", "40 nm", None]


@pytest.mark.parametrize(
    "case",
    [
        {
            "dtype": "uint16",
            "channels": 2,
            "chunk": (8, 8, 4),
            "sharding": SHARDING,
            "offset": (3, -5, 7),
        },
        {
            "dtype": "uint64",
            "channels": 1,
            "chunk": (8, 4, 4),
            "sharding": None,
            "offset": (0, 0, 0),
            "encoding": "compressed_segmentation",
            "compressed_segmentation_block_size": [4, 4, 2],
        },
        {
            "dtype": "float32",
            "channels": 1,
            "chunk": (16, 8, 8),
            "sharding": None,
            "offset": (-10, 2, 1),
        },
    ],
    ids=["sharded-uint16-2ch", "unsharded-cseg-uint64", "unsharded-float32"],
)
def test_round_trip_precomputed_zarr_precomputed(tmp_path, monkeypatch, case):
    monkeypatch.setattr(convert, "TASK_BYTES", 4096)  # many tasks even on small data
    rng = np.random.default_rng(0)
    data = voxels(rng, (37, 29, 19, case["channels"]), case["dtype"])
    src = str(tmp_path / "src")
    extra = {k: case[k] for k in ("encoding", "compressed_segmentation_block_size") if k in case}
    ts_source(
        src, data, case["offset"], chunk_size=case["chunk"], sharding=case["sharding"], **extra
    )

    zpath = str(tmp_path / "out.zarr")
    arr = shardvol.copy(src, zpath, progress=False)
    assert isinstance(arr, ZarrArray) and arr.chunks == (*case["chunk"], case["channels"])
    assert arr.shards is not None
    assert_zarr_output(zpath, data, case["offset"])

    back = str(tmp_path / "back")
    vol = shardvol.copy(zpath, back, sharding=case["sharding"], progress=False)
    assert isinstance(vol, Volume)
    source = Volume(src)
    assert vol.scale == source.scale  # same geometry, encoding, chunking and sharding
    assert vol.layer_type == source.layer_type and vol.dtype == source.dtype
    assert ts_open(back).domain == ts_open(src).domain
    assert np.array_equal(ts_read(back), data)


def test_golden_volume_round_trip(tmp_path):
    """TensorStore's golden 4-channel uint16 volume (voxel offset 1, 2, 3) through Zarr and back."""
    src = data_path("google__tensorstore__golden_raw_uint16_4ch")
    expected = ts_read(src)
    zpath = str(tmp_path / "g.zarr")
    shardvol.copy(src, zpath, chunk_size=(8, 64, 64), inner_chunk_shape=(4, 32, 16),
                  codecs=["gzip"], progress=False)  # fmt: skip
    assert np.array_equal(ts_read_zarr(zpath), expected)
    meta = shardvol.open(zpath).metadata
    assert meta.chunk_shape == (8, 64, 64, 4) and meta.inner_chunk_shape == (4, 32, 16, 4)
    back = str(tmp_path / "back")
    vol = shardvol.copy(zpath, back, progress=False)  # ~5000 tiny chunks: sharded, few files
    assert vol.sharding is not None
    scale, source = vol.scale, Volume(src).scale
    assert (scale.size, scale.voxel_offset, scale.resolution, scale.chunk_size, scale.encoding) == (
        source.size,
        source.voxel_offset,
        source.resolution,
        source.chunk_size,
        source.encoding,
    )
    assert np.array_equal(ts_read(back), expected)


def test_rechunk_reencode_shard_and_unshard(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "TASK_BYTES", 8192)
    rng = np.random.default_rng(1)
    data = voxels(rng, (30, 22, 17, 1), "uint32")
    src = str(tmp_path / "src")
    ts_source(src, data, (1, 2, 3), chunk_size=(8, 8, 8))
    cases = {
        "sharded": {"sharding": SHARDING, "chunk_size": (4, 8, 2)},
        "auto": {"encoding": "compressed_segmentation", "chunk_size": [16, 16, 4]},
        "hashed": {"sharding": HASHED},
        "unsharded": {"sharding": None, "chunk_size": (7, 5, 3)},
    }
    for name, options in cases.items():
        dst = str(tmp_path / name)
        vol = shardvol.copy(src, dst, format="precomputed", progress=False, **options)
        assert np.array_equal(ts_read(dst), data), name
        assert vol.voxel_offset == (1, 2, 3) and vol.resolution == (4, 5, 40)
        if "chunk_size" in options:
            assert vol.chunk_size == tuple(options["chunk_size"])
    assert Volume(str(tmp_path / "auto")).encoding == "compressed_segmentation"
    assert Volume(str(tmp_path / "hashed")).sharding.hash == "murmurhash3_x86_128"
    # back from sharded to one file per chunk, as TensorStore names them
    assert FileStore(str(tmp_path / "unsharded")).exists("4_5_40/1-8_2-7_3-6")


def test_copy_into_hashed_shards_of_a_grid_too_large_to_enumerate(tmp_path, monkeypatch):
    """Tasks carry only their shard number; each scans the grid for its chunks."""
    monkeypatch.setattr(sharded_store, "_ENUMERATE_LIMIT", 10)
    monkeypatch.setattr(sharded_store, "_ENUMERATE_BLOCK", 7)
    data = voxels(np.random.default_rng(4), (30, 22, 17, 1), "uint16")
    src = str(tmp_path / "src")
    ts_source(src, data, (1, 2, 3), chunk_size=(8, 8, 8))
    dst = str(tmp_path / "hashed")
    shardvol.copy(src, dst, format="precomputed", progress=False, sharding=HASHED)
    assert np.array_equal(ts_read(dst), data)


def test_process_pool_executor(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "TASK_BYTES", 4096)
    rng = np.random.default_rng(2)
    data = voxels(rng, (24, 20, 10, 1), "uint8")
    src = str(tmp_path / "src")
    ts_source(src, data, (5, 0, 2), chunk_size=(8, 8, 4), sharding=SHARDING)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        zpath = str(tmp_path / "p.zarr")
        shardvol.copy(src, zpath, chunk_size=(16, 16, 8), executor=pool, progress=False)
        assert_zarr_output(zpath, data, (5, 0, 2))
        back = str(tmp_path / "back")
        shardvol.copy(zpath, back, sharding=SHARDING, executor=pool, progress=False)
    assert np.array_equal(ts_read(back), data)
    assert ts_open(back).domain == ts_open(src).domain


def test_tasks_own_whole_output_units(tmp_path, monkeypatch):
    """Planned boxes tile the volume, never share an output shard, and respect TASK_BYTES."""
    monkeypatch.setattr(convert, "TASK_BYTES", 6 * 8 * 8 * 4 * 2)
    arr = shardvol.zarr3.create(str(tmp_path / "a.zarr"), (50, 30, 9, 1), "uint16", (8, 8, 4, 1),
                                (4, 4, 2, 1),
                                attributes={"precomputed": {"voxel_offset": [1, 2, 3]}})
    geometry = convert.zarr_geometry(arr)
    frame = convert.ZarrFrame(arr)
    ep = convert.Endpoint("zarr3", arr.url)
    tasks = convert.plan(geometry, frame, "run", ep, ep)
    covered = np.zeros((50, 30, 9), int)
    for t in tasks:
        (x0, y0, z0), (x1, y1, z1) = t.box
        lo = (x0 - 1, y0 - 2, z0 - 3)
        assert all(v % s == 0 for v, s in zip(lo, (8, 8, 4)))  # starts on a shard boundary
        assert (x1 - x0) * (y1 - y0) * (z1 - z0) * 2 <= convert.TASK_BYTES
        covered[x0 - 1 : x1 - 1, y0 - 2 : y1 - 2, z0 - 3 : z1 - 3] += 1
    assert (covered == 1).all()
    assert len(tasks) == 4 * 2 * 3  # blocks of 2 x 2 x 1 shards (16, 16, 4): 2048 bytes each


def test_zarr_with_named_axes_in_another_order(tmp_path):
    """A 3-D array with dimension_names z, y, x (written by TensorStore) lands in x, y, z."""
    data = np.random.default_rng(3).integers(0, 1000, (6, 10, 14)).astype("uint16")  # z, y, x
    path = str(tmp_path / "zyx.zarr")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
            "metadata": {"shape": list(data.shape), "data_type": "uint16",
                         "dimension_names": ["z", "y", "x"],
                         "chunk_grid": {"name": "regular",
                                        "configuration": {"chunk_shape": [4, 4, 4]}}},
            "schema": {"dimension_units": ["40nm", "8nm", "8nm"]}}
    ts.open(spec, create=True).result()[...].write(data).result()
    dst = str(tmp_path / "out")
    vol = shardvol.copy(path, dst, sharding=None, progress=False)
    assert vol.shape == (14, 10, 6, 1) and vol.resolution == (8, 8, 40)
    assert vol.chunk_size == (4, 4, 4) and vol.voxel_offset == (0, 0, 0)
    assert np.array_equal(ts_read(dst)[..., 0], data.transpose(2, 1, 0))
    # and back: a fresh x, y, z, c array (the other axis order is not kept)
    back = str(tmp_path / "back.zarr")
    shardvol.copy(dst, back, progress=False)
    assert np.array_equal(zarr_read(back)[..., 0], data.transpose(2, 1, 0))
    # Zarr to Zarr: re-sharded, unsharded
    for name, options in {"resharded": {"chunk_size": (8, 8, 2), "inner_chunk_shape": (4, 2, 2)},
                          "flat": {"sharding": None, "chunk_size": (5, 5, 5)}}.items():  # fmt: skip
        out = shardvol.copy(path, str(tmp_path / f"{name}.zarr"), progress=False, **options)
        assert out.chunks == (*(options.get("inner_chunk_shape") or options["chunk_size"]), 1)
        assert np.array_equal(ts_read_zarr(out.url.removeprefix("file://"))[..., 0], data.T)


def test_progress_bar_and_neuroglancer_prefixes(tmp_path, capsys):
    data = np.arange(4 * 4 * 4, dtype="uint8").reshape(4, 4, 4, 1)
    src = str(tmp_path / "src")
    ts_source(src, data, (0, 0, 0), chunk_size=(4, 4, 4))
    shardvol.copy("precomputed://" + src, "zarr3://" + str(tmp_path / "plain"), progress=True)
    assert "copy" in capsys.readouterr().err
    assert np.array_equal(ts_read_zarr(str(tmp_path / "plain")), data)


# --------------------------------------------------------------------------- bad input


def test_bad_input(tmp_path):
    data = np.ones((4, 4, 4, 1), "uint8")
    src = str(tmp_path / "src")
    ts_source(src, data, (0, 0, 0), chunk_size=(4, 4, 4))
    dst = str(tmp_path / "d.zarr")
    shardvol.copy(src, dst, progress=False)
    with pytest.raises(AlreadyExistsError, match="overwrite=True"):
        shardvol.copy(src, dst, progress=False)
    shardvol.copy(src, dst, overwrite=True, codecs=["gzip"], progress=False)
    assert "gzip" in str(shardvol.open(dst).metadata.to_json()["codecs"])
    with pytest.raises(InvalidArgumentError, match="cannot be overwritten with precomputed"):
        shardvol.copy(src, dst, format="precomputed", overwrite=True, progress=False)
    with pytest.raises(InfoError, match="looked for"):
        shardvol.copy(str(tmp_path / "nothing"), str(tmp_path / "x"), progress=False)
    with pytest.raises(InvalidArgumentError, match="encoding"):
        shardvol.copy(src, str(tmp_path / "e.zarr"), encoding="raw", progress=False)
    with pytest.raises(InvalidArgumentError, match="codecs"):
        shardvol.copy(src, str(tmp_path / "p"), codecs=["gzip"], progress=False)
    with pytest.raises(InvalidArgumentError, match="sharding"):
        shardvol.copy(src, str(tmp_path / "s.zarr"), sharding=SHARDING, progress=False)
    with pytest.raises(InvalidArgumentError, match="chunk_size"):
        shardvol.copy(src, str(tmp_path / "c.zarr"), chunk_size=(4, 4), progress=False)
    with pytest.raises(InvalidArgumentError, match="format"):
        shardvol.copy(src, str(tmp_path / "f"), format="n5", progress=False)
    with pytest.raises(InvalidArgumentError, match="same"):
        shardvol.copy(src, src, overwrite=True, progress=False)
    os.symlink(src, tmp_path / "link")  # the same directory under another name
    with pytest.raises(InvalidArgumentError, match="same"):
        shardvol.copy(src, str(tmp_path / "link"), overwrite=True, progress=False)
    assert (Volume(src)[...] == 1).all()  # the source is untouched
    flat = shardvol.zarr3.create(str(tmp_path / "2d.zarr"), (4, 4), "uint8", (4, 4))
    with pytest.raises(InvalidArgumentError, match="3-D"):
        shardvol.copy(flat.url, str(tmp_path / "q"), progress=False)
    bad = shardvol.zarr3.create(str(tmp_path / "bad.zarr"), (4, 4, 4), "uint8", (4, 4, 4),
                                attributes={"precomputed": {"voxel_offset": [1, 2]}})  # fmt: skip
    with pytest.raises(InfoError, match="voxel_offset"):
        shardvol.copy(bad.url, str(tmp_path / "r"), progress=False)
    flags = shardvol.zarr3.create(str(tmp_path / "b.zarr"), (4, 4, 4), "bool", (4, 4, 4))
    with pytest.raises(InfoError, match="'bool'"):
        shardvol.copy(flags.url, str(tmp_path / "t"), progress=False)
    assert not os.path.exists(tmp_path / "t" / "info")
