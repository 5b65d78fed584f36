"""Dask arrays: Volume/ZarrArray.to_dask, write_dask, shardvol.to_dask / from_dask.

Volumes to read are written by TensorStore, volumes written through Dask are read back by
TensorStore (precomputed) or zarr-python (Zarr), and every result is compared with numpy
applying the same function to the same generated data.  The Dask work runs on a
two-process LocalCluster (started once for the module) unless a test names another
scheduler.
"""

from __future__ import annotations

import functools
import itertools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("dask.distributed")
zarr = pytest.importorskip("zarr")

import dask  # noqa: E402

import shardvol  # noqa: E402
import shardvol.array.dask as sdask  # noqa: E402
from shardvol.errors import (  # noqa: E402
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    ReadOnlyStoreError,
)
from shardvol.sharding import auto_sharding  # noqa: E402
from tests.oracles import ts_create, ts_read  # noqa: E402
from tests.stores import stored_files  # noqa: E402

CHUNK = (16, 16, 8)
SHAPE = (100, 72, 44)  # 7 x 5 x 6 chunks; not a multiple of the chunk or shard shape
OFFSET = (5, -3, 7)  # the volume's voxel_offset: blocks start there
HASHED = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
    "preshift_bits": 1, "minishard_bits": 2, "shard_bits": 3,
    "minishard_index_encoding": "gzip", "data_encoding": "gzip",
}


def aligned_spec(shape=SHAPE, chunk=CHUNK, itemsize=1):
    """Identity sharding whose shards are blocks of 2 x 2 x 2 chunks."""
    grid = [-(-n // c) for n, c in zip(shape, chunk)]
    return auto_sharding(grid, 2 * int(np.prod(chunk)) * itemsize, "raw",
                         target_shard_bytes=8 * int(np.prod(chunk)) * itemsize).to_dict()


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few shards, so that the small test volumes make several tasks."""
    monkeypatch.setattr(sdask, "BLOCK_BYTES", 32 << 10)


def image(shape=SHAPE, dtype=np.uint8, seed=0, channels=1):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    return rng.integers(0, info.max, (*shape, channels), dtype=dtype, endpoint=True)


def labels(shape=SHAPE, seed=1):
    """Boxes of random uint64 labels (x, y, z, 1)."""
    rng = np.random.default_rng(seed)
    cells = [np.cumsum(rng.integers(3, 12, n)) for n in shape]
    idx = [np.searchsorted(c, np.arange(n), side="right") for c, n in zip(cells, shape)]
    table = rng.integers(1, 2**63, [len(c) + 1 for c in cells], dtype=np.uint64)
    return table[np.ix_(*idx)][..., None]


def ts_volume(path, data, sharding=None, encoding="raw", layer="image"):
    """A volume written by TensorStore (the oracle), domain from OFFSET."""
    scale = {"size": list(data.shape[:3]), "resolution": [4, 4, 40], "chunk_size": list(CHUNK),
             "voxel_offset": list(OFFSET), "encoding": encoding}
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    if sharding:
        scale["sharding"] = sharding
    store = ts_create(str(path), data_type=data.dtype.name, num_channels=data.shape[3],
                      type=layer, **scale)
    store.write(data).result()
    return str(path)


def assert_aligned(chunks, unit):
    """Every block but the last of each axis is a whole number of units."""
    for axis, (c, u) in enumerate(zip(chunks, unit)):
        assert all(n % u == 0 for n in c[:-1]), (axis, c, u)


# --------------------------------------------------------------------------- reads


@pytest.mark.parametrize("sharding", ["aligned", "hashed", None])
def test_read_is_lazy_aligned_and_equal(tmp_path, client, small_blocks, sharding):
    data = image()
    spec = {"aligned": aligned_spec(), "hashed": HASHED, None: None}[sharding]
    vol = shardvol.Volume(ts_volume(tmp_path / "v", data, spec))
    arr = vol.to_dask()
    assert arr.shape == vol.shape and arr.dtype == vol.dtype
    unit = (*(vol.shard_shape or CHUNK), 1)
    assert_aligned(arr.chunks, unit)
    assert arr.npartitions > 1
    got = arr.compute()
    np.testing.assert_array_equal(got, data)
    # index 0 is voxel_offset: a lazy slice reads the same voxels as the volume
    np.testing.assert_array_equal(arr[10:40, 3:9, 20].compute(), vol[15:45, 0:6, 27])


OPENED: list[str] = []  # (in each process) the paths opened by counting_open


def counting_open(path):
    OPENED.append(path)
    return shardvol.Volume(path)


def test_each_worker_opens_a_volume_once(tmp_path, client, small_blocks):
    path = ts_volume(tmp_path / "v", image(seed=13), aligned_spec())
    vol = shardvol.Volume(path)
    source = sdask.make_source(functools.partial(counting_open, path), "test", vol.chunked_array,
                               path)
    arr = sdask.read_array(source, sdask.block_shape((*vol.shard_shape, 1), source))
    assert arr.npartitions >= 8
    np.testing.assert_array_equal(arr.compute(), image(seed=13))
    opened = client.run(lambda: [p for p in sys.modules["tests.test_dask"].OPENED if p == path])
    assert sorted(len(v) for v in opened.values()) in ([1, 1], [0, 1]), opened


def test_block_order(tmp_path, small_blocks):
    data = image()
    path = ts_volume(tmp_path / "v", data, aligned_spec())
    vol = shardvol.Volume(path)
    for order, flag in [("F", "F_CONTIGUOUS"), ("C", "C_CONTIGUOUS")]:
        arr = vol.to_dask(order=order)
        block = arr.to_delayed()[0, 1, 0, 0].compute(scheduler="sync")  # (not reassembled)
        assert block.flags[flag], order
        np.testing.assert_array_equal(arr.compute(scheduler="sync"), data)
    assert vol.to_dask(order="C").name != vol.to_dask().name
    z = shardvol.zarr3.create(str(tmp_path / "z.zarr"), shape=(6, 8), dtype="uint8",
                              chunk_shape=(2, 4), order="F")
    assert z.to_dask().to_delayed()[0, 0].compute(scheduler="sync").flags["F_CONTIGUOUS"]
    block = shardvol.to_dask(z, order="C").to_delayed()[0, 0].compute(scheduler="sync")
    assert block.flags["C_CONTIGUOUS"]
    with pytest.raises(InvalidArgumentError, match="order must be"):
        vol.to_dask(order="A")


def test_explicit_chunks_and_top_level_to_dask(tmp_path, client):
    data = image(channels=2)
    path = ts_volume(tmp_path / "v", data)
    arr = shardvol.to_dask(path, chunks=(30, 30, 30))  # x, y, z: all channels in a block
    assert arr.chunks[0] == (30, 30, 30, 10) and arr.chunks[3] == (2,)
    np.testing.assert_array_equal(arr.compute(), data)
    vol = shardvol.Volume(path)
    assert shardvol.to_dask(vol).name == vol.to_dask().name  # same volume, same graph keys


def test_graph_holds_descriptions_not_arrays(tmp_path, small_blocks):
    data = image()
    vol = shardvol.Volume(ts_volume(tmp_path / "v", data, aligned_spec()))
    arr = vol.to_dask()
    out = shardvol.Volume.create(str(tmp_path / "out"), size=SHAPE, chunk_size=CHUNK,
                                 voxel_offset=OFFSET, sharding=HASHED)
    graphs = {"read": arr, "write": out.write_dask(arr * 2 + 1, compute=False)}
    for what, collection in graphs.items():
        graph = dict(collection.__dask_graph__())
        blob = pickle.dumps(graph)
        assert b"_reconstruct" not in blob and b"_frombuffer" not in blob, what  # no ndarray
        assert len(blob) < 4096 + 400 * len(graph), (what, len(blob), len(graph))
        # (a distributed scheduler sends each task on its own)
        assert max(len(pickle.dumps(task)) for task in graph.values()) < 8192, what


# --------------------------------------------------------------------------- writes


def test_map_and_write_back_sharded_on_the_cluster(tmp_path, client, small_blocks):
    """Read a sharded volume, map it, write it to aligned and to hashed shards (through
    rechunking from the read's blocks), and in place; TensorStore reads what was written."""
    data = image()
    vol = shardvol.Volume(ts_volume(tmp_path / "src", data, aligned_spec()))
    expected = data * np.uint8(2) + np.uint8(1)
    for name, spec in [("aligned", aligned_spec()), ("hashed", HASHED)]:
        out = shardvol.from_dask(vol.to_dask() * 2 + 1, str(tmp_path / name), chunk_size=CHUNK,
                                 voxel_offset=OFFSET, sharding=spec, progress=False)
        assert out.sharding.to_dict() == spec and (out.shard_shape is None) == (name == "hashed")
        np.testing.assert_array_equal(ts_read(str(tmp_path / name)), expected)
    vol.write_dask(vol.to_dask() * 2 + 1, progress=False)  # in place: each block maps itself
    np.testing.assert_array_equal(ts_read(str(tmp_path / "src")), expected)


def test_label_remap_into_hashed_cseg(tmp_path, client):
    seg = labels()
    path = ts_volume(tmp_path / "seg", seg, HASHED, "compressed_segmentation", "segmentation")
    keys = np.unique(seg)
    values = np.random.default_rng(5).permutation(len(keys)).astype(np.uint64) * 1000
    remapped = shardvol.to_dask(path).map_blocks(lambda b: values[np.searchsorted(keys, b)])
    out = shardvol.from_dask(remapped, str(tmp_path / "out"), type="segmentation",
                             encoding="compressed_segmentation", chunk_size=CHUNK,
                             voxel_offset=OFFSET, sharding=HASHED, progress=False)
    assert out.layer_type == "segmentation"
    np.testing.assert_array_equal(ts_read(str(tmp_path / "out")), values[np.searchsorted(keys,
                                                                                          seg)])


@pytest.mark.parametrize("sharding", ["aligned", "hashed", None])
def test_unaligned_write_keeps_every_neighbour(tmp_path, sharding):
    """A write at an offset off the chunk grid, from blocks off the grid too: the chunks and
    shards it shares with the rest of the volume keep what they held."""
    spec = {"aligned": aligned_spec(), "hashed": HASHED, None: None}[sharding]
    before = image(seed=2)
    path = ts_volume(tmp_path / "v", before, spec)
    vol = shardvol.Volume(path)
    piece = image((37, 29, 19), seed=3)[..., 0]
    at = tuple(o + a for o, a in zip(OFFSET, (13, 21, 5)))  # (global voxel coordinates)
    with dask.config.set(scheduler="threads"):
        vol.write_dask(da.from_array(piece, chunks=(7, 9, 11)), offset=at, progress=False)
    assert np.array_equal(vol[at[0]:at[0] + 37, at[1]:at[1] + 29, at[2]:at[2] + 19, 0], piece)
    expected = before.copy()
    expected[13:50, 21:50, 5:24, 0] = piece
    np.testing.assert_array_equal(ts_read(path), expected)


@pytest.mark.parametrize("sharding", ["aligned", "hashed", None])
def test_each_storage_unit_has_one_writing_task(tmp_path, monkeypatch, small_blocks, sharding):
    spec = {"aligned": aligned_spec(), "hashed": HASHED, None: None}[sharding]
    vol = shardvol.Volume.create(str(tmp_path / "v"), size=SHAPE, chunk_size=CHUNK,
                                 voxel_offset=OFFSET, sharding=spec)
    calls = []
    real = sdask.Source.write_many

    def record(self, pieces):
        calls.append([key for key, _ in pieces])
        real(self, pieces)

    monkeypatch.setattr(sdask.Source, "write_many", record)
    piece = da.from_array(image((61, 50, 30), seed=4), chunks=(13, 17, 7, 1))
    at = tuple(o + a for o, a in zip(OFFSET, (9, 3, 6)))
    vol.write_dask(piece, offset=at, progress=False, compute=False).compute(
        scheduler="threads")
    assert len(calls) > 1
    grid = vol.chunked_array.grid
    owner = {}
    for task, keys in enumerate(calls):
        coords = set()
        for key in keys:
            coords.update(itertools.product(*(range(s.start // c, (s.stop - 1) // c + 1)
                                              for s, c in zip(key, grid.chunk_shape))))
        for unit in vol.chunk_store.units(sorted(coords)):
            assert owner.setdefault(unit, task) == task, f"unit {unit} written by two tasks"
    expected = np.zeros(vol.shape, np.uint8)
    expected[9:70, 3:53, 6:36] = piece.compute()
    np.testing.assert_array_equal(vol[...], expected)


def test_threaded_scheduler_and_progress_bar(tmp_path, capsys):
    data = image(seed=6)
    path = ts_volume(tmp_path / "v", data, HASHED)
    with dask.config.set(scheduler="threads"):
        out = shardvol.from_dask(shardvol.to_dask(path) // 3, str(tmp_path / "out"),
                                 chunk_size=(32, 32, 16), sharding="auto", progress=True)
    assert "100% Completed" in capsys.readouterr().out  # dask.diagnostics.ProgressBar
    assert out.voxel_offset == (0, 0, 0)
    np.testing.assert_array_equal(ts_read(str(tmp_path / "out")), data // 3)


def test_distributed_progress(tmp_path, client, capsys):
    path = ts_volume(tmp_path / "v", image(seed=7))
    vol = shardvol.Volume(path)
    vol.write_dask(vol.to_dask() // 2, progress=True)  # distributed.progress's text bar
    assert "100%" in capsys.readouterr().out
    np.testing.assert_array_equal(ts_read(path), image(seed=7) // 2)


# --------------------------------------------------------------------------- Zarr


def test_zarr_round_trip_with_zarr_python(tmp_path, client, small_blocks):
    rng = np.random.default_rng(8)
    data = rng.integers(0, 60000, (50, 61, 33), dtype=np.uint16)
    src = zarr.create_array(str(tmp_path / "src.zarr"), shape=data.shape, dtype=data.dtype,
                            chunks=(8, 8, 8), shards=(16, 32, 16), fill_value=0)
    src[...] = data
    arr = shardvol.to_dask(str(tmp_path / "src.zarr"))
    assert_aligned(arr.chunks, (16, 32, 16))
    assert arr.npartitions > 1
    np.testing.assert_array_equal(arr.compute(), data)

    out = shardvol.zarr3.create(str(tmp_path / "out.zarr"), shape=(60, 70, 40), dtype="uint16",
                                chunk_shape=(16, 16, 16), inner_chunk_shape=(8, 8, 8),
                                fill_value=7)
    out.write_dask((arr + 1).rechunk((11, 13, 9)), offset=(3, 9, 5), progress=False)
    expected = np.full((60, 70, 40), 7, np.uint16)
    expected[3:53, 9:70, 5:38] = data + 1
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out.zarr"))[...], expected)


def test_zarr_read_only_refuses(tmp_path):
    shardvol.zarr3.create(str(tmp_path / "z.zarr"), shape=(8, 8), dtype="uint8",
                          chunk_shape=(4, 4))
    arr = shardvol.zarr3.open(str(tmp_path / "z.zarr"), mode="r")
    with pytest.raises(ReadOnlyStoreError, match="mode='r'"):
        arr.write_dask(da.zeros((8, 8), dtype=np.uint8))


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("value", "offset", "error", "match"), [
    (da.zeros((10, 10, 10), dtype=np.float32), (0, 0, 0), InvalidArgumentError,
     "float32 data to .* \\(uint8\\) without loss"),
    (da.zeros((10, 10, 10), dtype=np.int16), (0, 0, 0), InvalidArgumentError, "int16"),
    (da.zeros((10, 10), dtype=np.uint8), (0, 0, 0), InvalidArgumentError, "2-D array"),
    (da.zeros((10, 10, 10, 3), dtype=np.uint8), (0, 0, 0), InvalidArgumentError,
     "3 channels; .* has 1"),
    (da.zeros((10, 80, 10), dtype=np.uint8), (0, 0, 0), OutOfBoundsError,
     "axis 1: the array's \\[-3, 77\\) is outside .*'s \\[-3, 69\\)"),
    (da.zeros((10, 10, 10), dtype=np.uint8), (95, 0, 0), OutOfBoundsError, "axis 0"),
    (da.zeros((10, 10, 10), dtype=np.uint8), (-1, 0, 0), OutOfBoundsError, "axis 0"),
    (da.zeros((10, 10, 10), dtype=np.uint8), (0, 0), InvalidArgumentError, "offset"),
    (np.zeros((10, 10, 10), dtype=np.uint8), (0, 0, 0), InvalidArgumentError,
     "expected a dask.array.Array, got ndarray"),
])
def test_bad_writes_name_the_problem_and_write_nothing(tmp_path, value, offset, error, match):
    path = ts_volume(tmp_path / "v", image(seed=9), aligned_spec())
    vol = shardvol.Volume(path)
    stored = stored_files(path)
    at = tuple(o + a for o, a in zip(OFFSET, offset)) if len(offset) == 3 else offset
    with pytest.raises(error, match=match):
        vol.write_dask(value, at)  # (offsets from the volume's start, in global coordinates)
    assert stored_files(path) == stored


def test_channel_count_of_a_3d_array(tmp_path):
    vol = shardvol.Volume.create(str(tmp_path / "v"), size=(8, 8, 8), num_channels=3)
    with pytest.raises(InvalidArgumentError, match=r"3-D array has one channel; .* has 3"):
        vol.write_dask(da.zeros((8, 8, 8), dtype=np.uint8))


def test_unknown_shape_is_refused(tmp_path):
    vol = shardvol.Volume.create(str(tmp_path / "v"), size=(8, 8, 8))
    x = da.zeros((8, 8, 8), dtype=np.uint8, chunks=4)
    unknown = x[x[:, 0, 0] >= 0]  # (its length is known only once computed)
    with pytest.raises(InvalidArgumentError, match="compute_chunk_sizes"):
        vol.write_dask(unknown)
    with pytest.raises(InvalidArgumentError, match="compute_chunk_sizes"):
        shardvol.from_dask(unknown, str(tmp_path / "w"))
    assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize(("array", "kwargs", "error", "match"), [
    (da.zeros((4, 4), dtype=np.uint8), {}, InvalidArgumentError, "shape \\(4, 4\\)"),
    (da.zeros((4, 4, 4, 1, 1), dtype=np.uint8), {}, InvalidArgumentError, "\\(x, y, z"),
    (da.zeros((4, 4, 4), dtype=bool), {}, InfoError, "data_type 'bool'"),
    (da.zeros((4, 4, 4), dtype=np.uint8), {"size": (4, 4, 4)}, InvalidArgumentError,
     "size: taken from the array"),
    (da.zeros((4, 4, 4), dtype=np.uint8), {"encoding": "webp"}, InfoError, "webp"),
    (np.zeros((4, 4, 4), dtype=np.uint8), {}, InvalidArgumentError, "dask.array.Array"),
])
def test_from_dask_bad_input_creates_nothing(tmp_path, array, kwargs, error, match):
    with pytest.raises(error, match=match):
        shardvol.from_dask(array, str(tmp_path / "v"), **kwargs)
    assert not os.path.exists(tmp_path / "v" / "info")


def test_bad_chunks_and_mip(tmp_path):
    path = ts_volume(tmp_path / "v", image(seed=10))
    with pytest.raises(InvalidArgumentError, match="chunks"):
        shardvol.to_dask(path, chunks=(7, 7))
    z = shardvol.zarr3.create(str(tmp_path / "z.zarr"), shape=(4,), dtype="uint8",
                              chunk_shape=(2,))
    with pytest.raises(InvalidArgumentError, match="Zarr array: it has no mip"):
        shardvol.to_dask(z, mip=1)


def test_changed_volume_is_refused_in_the_worker(tmp_path):
    path = ts_volume(tmp_path / "v", image(seed=11))
    arr = shardvol.Volume(path).to_dask()
    shardvol.Volume.create(path, size=(8, 8, 8), resolution=(4, 4, 40), overwrite=True)
    sdask._handles.clear()
    with pytest.raises(InvalidArgumentError, match="changed since its Dask graph was made"):
        arr.compute(scheduler="sync")


def test_importing_shardvol_does_not_import_dask():
    code = "import sys, shardvol; print(sorted(m for m in sys.modules if m.split('.')[0] " \
           "in ('dask', 'distributed')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == "[]"


def test_an_ome_zarr_level_as_a_dask_array_in_its_own_axes(tmp_path):
    data = image(seed=12)
    src = shardvol.Volume.create(str(tmp_path / "v"), size=SHAPE, chunk_size=CHUNK,
                                 voxel_offset=OFFSET)
    src[...] = data
    shardvol.downsample(str(tmp_path / "v"), (2, 2, 1), 1, progress=False)
    shardvol.copy(str(tmp_path / "v"), str(tmp_path / "x.ome.zarr"), progress=False)
    level1 = shardvol.Volume(str(tmp_path / "v"), mip=1)[...]
    arr = shardvol.to_dask(str(tmp_path / "x.ome.zarr"), mip=1)
    np.testing.assert_array_equal(arr.compute(), level1[..., 0].T)  # (z, y, x)
