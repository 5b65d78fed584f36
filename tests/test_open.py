"""shardvol.open: a precomputed Volume or a ZarrArray, by what is stored at the URL."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

import shardvol
from shardvol import Volume, ZarrArray
from shardvol.errors import InfoError, ReadOnlyStoreError
from shardvol.kvstore import FileStore

from .fault_server import FaultServer
from .oracles import data_path, ts_create, ts_read
from .zarr3_util import ts_read as ts_read_zarr

GOLDEN_ZARR = data_path(
    "google__neuroglancer__zarr3_from_zarrita",
    "data.zarr",
    "3d.chunked.mixed.compressed.sharded.i2",
)


def test_precomputed_is_a_volume_with_options():
    path = data_path("google__tensorstore__golden_raw_uint16_4ch")
    vol = shardvol.open(path, fill_value=0, bounded=False)
    assert isinstance(vol, Volume) and vol.shape == (10, 99, 98, 4)
    assert np.array_equal(vol[...], ts_read(path))
    assert vol[0:2, 2:3, 3:4].shape == (2, 1, 1, 4)  # bounded=False: outside reads as fill
    assert isinstance(shardvol.open("precomputed://" + path, mip=0), Volume)


def test_zarr_array_is_a_zarrarray_with_options(tmp_path):
    arr = shardvol.open(GOLDEN_ZARR, mode="r")
    assert isinstance(arr, ZarrArray)
    assert np.array_equal(arr[...], ts_read_zarr(GOLDEN_ZARR))
    with pytest.raises(ReadOnlyStoreError):
        arr[0, 0, 0] = 1
    assert isinstance(shardvol.open("zarr3://" + GOLDEN_ZARR, mode="r"), ZarrArray)
    assert shardvol.open(GOLDEN_ZARR, mode="r", order="F")[...].flags.f_contiguous


def test_neither_names_what_was_looked_for(tmp_path):
    with pytest.raises(InfoError, match=r"'info' file or a Zarr v3 'zarr.json'"):
        shardvol.open(str(tmp_path))
    with pytest.raises(InfoError, match=r"looked for a Zarr v3 'zarr.json'"):
        shardvol.open("zarr3://" + data_path("google__tensorstore__golden_raw_uint16_4ch"))
    with pytest.raises(InfoError, match="Zarr v2"):
        shardvol.open(
            data_path("scalableminds__webknossos-libs__simple_zarr_dataset", "color", "1-1-1")
        )
    store = FileStore(str(tmp_path / "group"))
    store.set("zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(InfoError, match="node_type is 'group'"):
        shardvol.open(store.root)
    store.set("zarr.json", b"{not json")
    with pytest.raises(InfoError, match="not valid JSON"):
        shardvol.open(store.root)


def test_a_remote_open_reads_the_info_in_one_round_trip(tmp_path):
    """Over HTTP: the info file, the job record and zarr.json are asked for together, and
    no HEAD; a redirect is followed, a Zarr array found from the same answers."""
    data = np.random.default_rng(5).integers(0, 255, (40, 30, 20, 1), dtype=np.uint8)
    t = ts_create(str(tmp_path / "v"), data_type="uint8", num_channels=1, size=[40, 30, 20],
                  chunk_size=[16, 16, 8], encoding="raw")
    t[...] = data
    (tmp_path / "moved").mkdir()
    shutil.copytree(GOLDEN_ZARR, tmp_path / "z")
    with FaultServer(str(tmp_path)) as server:
        (tmp_path / "moved" / "info").write_text(json.dumps({"redirect": f"{server.url}/v"}))
        server.stats(reset=True)
        vol = shardvol.open(f"{server.url}/v")
        stats = server.stats()
        assert isinstance(vol, Volume) and stats["requests"] == stats["GET"] == 3
        assert np.array_equal(vol[...], data)
        moved = shardvol.open(f"{server.url}/moved")
        assert isinstance(moved, Volume) and moved.url == f"{server.url}/v"
        server.stats(reset=True)
        arr = shardvol.open(f"{server.url}/z")
        assert isinstance(arr, ZarrArray) and server.stats()["HEAD"] == 0
        assert np.array_equal(arr[...], ts_read_zarr(GOLDEN_ZARR))


def test_import_shardvol_leaves_zarr_and_the_operations_until_they_are_used(tmp_path):
    """``import shardvol`` is part of every script's start: Zarr v3, the operations, a
    segmentation's objects, the remote stores and the packages only they need are imported
    when first named, as what they are; writing and reading a local volume imports none."""
    script = (
        "import sys, shardvol\n"
        f"vol = shardvol.Volume.create({str(tmp_path / 'v')!r}, size=(80, 64, 64),\n"
        "                             chunk_size=(64, 64, 64), sharding='auto')\n"
        "vol[...] = 3\n"
        "assert (shardvol.Volume(vol.url)[10:70, :, :] == 3).all()\n"
        "heavy = ('shardvol.zarr3', 'shardvol.ops.convert', 'shardvol.ops.dask',\n"
        "         'shardvol.ops.downsample', 'crc32c', 'shardvol.precomputed.meshes',\n"
        "         'shardvol.precomputed.skeletons', 'shardvol.precomputed.annotations',\n"
        "         'shardvol.precomputed.segment_properties', 'shardvol.kvstore.remote',\n"
        "         'asyncio', 'fsspec', 'socket', 'subprocess', 'fastremap')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "from shardvol.ops.convert import copy\n"
        "from shardvol.zarr3 import OmeZarrImage, ZarrArray\n"
        "from shardvol.precomputed.meshes import Mesh\n"
        "print(shardvol.copy is copy, shardvol.ZarrArray is ZarrArray,\n"
        "      shardvol.OmeZarrImage is OmeZarrImage, shardvol.zarr3.ZarrArray is ZarrArray,\n"
        "      shardvol.Mesh is Mesh)\n"
        "try:\n"
        "    shardvol.nosuch\n"
        "except AttributeError as e:\n"
        "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines() == [
        "[]", "True True True True True", "module 'shardvol' has no attribute 'nosuch'"
    ], done.stderr
    assert {"copy", "downsample", "to_dask", "from_dask", "ZarrArray", "OmeZarrImage",
            "zarr3"} <= set(shardvol.__all__) and callable(shardvol.downsample)
