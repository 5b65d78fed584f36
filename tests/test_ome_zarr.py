"""OME-Zarr 0.5: precomputed pyramids copied to OME-Zarr images and back, OmeZarrImage reads.

Pyramids are generated (Volume.create + shardvol.downsample).  Every image written is
validated by ome-zarr-models and read by ome-zarr-py, zarr-python and TensorStore's zarr3
driver; round trips back to precomputed are read by TensorStore's
neuroglancer_precomputed driver.  Images written by ome-zarr-py are read by shardvol.
Metadata that lies is refused by name, and a failed copy writes nothing.
"""

from __future__ import annotations

import copy as deepcopy_module
import json
import shutil
import warnings

import numpy as np
import pytest
import tensorstore as ts
import zarr
from ome_zarr_models.v05 import Image

import shardvol
from shardvol import OmeZarrImage, Volume
from shardvol.cli import main
from shardvol.errors import (
    AlreadyExistsError,
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    ReadOnlyStoreError,
)
from shardvol.kvstore import FileStore
from shardvol.ops import convert

from .oracles import ts_open, ts_read

OFFSET = (3, -5, 7)
RESOLUTION = (4, 5, 40)


def make_pyramid(path, *, dtype="uint8", channels=1, encoding="raw", seed=0, mips=2):
    """A precomputed volume of generated voxels and ``mips`` downsampled (2, 2, 1) scales."""
    rng = np.random.default_rng(seed)
    shape = (67, 45, 23, channels)
    if np.dtype(dtype) == np.uint64:  # segmentation: blocks of labels
        coarse = rng.integers(1, 2**40, (9, 6, 4, channels), dtype="uint64")
        data = coarse.repeat(8, 0).repeat(8, 1).repeat(6, 2)[: shape[0], : shape[1], : shape[2]]
        layer = "segmentation"
    else:
        data = rng.integers(0, np.iinfo(dtype).max, shape).astype(dtype)
        layer = "image"
    vol = Volume.create(
        path, type=layer, data_type=dtype, num_channels=channels, size=shape[:3],
        resolution=RESOLUTION, voxel_offset=OFFSET, chunk_size=(16, 16, 8), encoding=encoding,
        sharding="auto",
    )  # fmt: skip
    vol[...] = np.ascontiguousarray(data)
    shardvol.downsample(vol, (2, 2, 1), mips, progress=False)
    return Volume(path)


def array_order(block, channels):
    """(x, y, z, c) voxels as an image shardvol writes stores them: [c,] z, y, x."""
    return block.transpose(3, 2, 1, 0) if channels > 1 else block[..., 0].transpose(2, 1, 0)


def ome_py_levels(path):
    """Every level as ome-zarr-py reads it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its dependencies' deprecations
        from ome_zarr.io import parse_url
        from ome_zarr.reader import Reader

        location = parse_url(path)
        assert location is not None and location.version == "0.5"
        node = next(iter(Reader(location)()))
        return [np.asarray(level) for level in node.data], node.metadata


@pytest.mark.parametrize(
    "case",
    [
        {"dtype": "uint8", "channels": 1},
        {"dtype": "uint16", "channels": 3},
        {"dtype": "uint64", "channels": 1, "encoding": "compressed_segmentation"},
    ],
    ids=["uint8", "uint16-3ch", "segmentation-cseg"],
)
def test_pyramid_to_ome_zarr_and_back(tmp_path, monkeypatch, case):
    monkeypatch.setattr(convert, "TASK_BYTES", 16384)  # many tasks even on small data
    src_path = str(tmp_path / "em")
    src = make_pyramid(src_path, **case)
    c = case["channels"]
    out = str(tmp_path / "em.ome.zarr")
    img = shardvol.copy(src.url, out, progress=False)
    assert isinstance(img, OmeZarrImage) and len(img.mips) == len(src.mips) == 3
    sources = [src.mip(k) for k in range(len(src.mips))]

    # the metadata, as ome-zarr-models validates it
    model = Image.from_zarr(zarr.open_group(out, mode="r"))
    ms = model.attributes.ome.multiscales[0]
    names = [a.name for a in ms.axes]
    assert names == (["c", "z", "y", "x"] if c > 1 else ["z", "y", "x"])
    assert [a.type for a in ms.axes] == ["channel"] * (c > 1) + ["space"] * 3
    assert [a.unit for a in ms.axes if a.type == "space"] == ["nanometer"] * 3
    for dataset, s in zip(ms.datasets, sources):
        scale, shift = (t.model_dump() for t in dataset.coordinateTransformations)
        r, o = s.resolution, s.voxel_offset
        assert scale["scale"][-3:] == [r[2], r[1], r[0]]
        assert shift["translation"][-3:] == [(o[d] + 0.5) * r[d] for d in (2, 1, 0)]

    # every level, as ome-zarr-py, zarr-python and TensorStore read it
    levels, meta = ome_py_levels(out)
    assert meta["axes"] == [a.model_dump(exclude_none=True) for a in ms.axes]
    group = zarr.open_group(out, mode="r")
    for k, s in enumerate(sources):
        expected = array_order(s[...], c)
        assert np.array_equal(levels[k], expected)
        assert np.array_equal(group[str(k)][...], expected)
        assert group[str(k)].metadata.dimension_names == tuple(names)
        assert group[str(k)].shards is not None  # sharded Zarr v3
        kv = {"driver": "file", "path": f"{out}/{k}"}
        assert np.array_equal(ts.open({"driver": "zarr3", "kvstore": kv}).result().read().result(),
                              expected)  # fmt: skip

    # shardvol's view: the same (x, y, z, c) frame and coordinates as the Volume's
    rng = np.random.default_rng(1)
    opened = shardvol.open(out)
    assert isinstance(opened, OmeZarrImage)
    for k, s in enumerate(sources):
        level = opened.mip(k)
        assert level.bounds == s.bounds and level.resolution == s.resolution
        assert level.shape == s.shape and level.dtype == s.dtype
        whole = level[...]
        assert whole.flags.f_contiguous and np.array_equal(whole, s[...])
        lo, hi = s.bounds
        for _ in range(5):
            a = [int(rng.integers(lo[d], hi[d])) for d in range(3)]
            b = [int(rng.integers(a[d], hi[d])) + 1 for d in range(3)]
            box = tuple(slice(a[d], b[d]) for d in range(3))
            assert np.array_equal(level[box], s[box])
        point = (lo[0], slice(lo[1], lo[1] + 3), hi[2] - 1, 0)  # dropped axes
        assert np.array_equal(level[point], s[point])
    assert opened.mip("2").mip_level == 2
    assert opened.mip(list(sources[1].resolution)).mip_level == 1

    # back to a multiscale precomputed volume: every scale, its geometry and its voxels
    back = shardvol.copy(out, str(tmp_path / "back"), progress=False)
    assert isinstance(back, Volume) and len(back.mips) == 3
    assert back.layer_type == src.layer_type and back.dtype == src.dtype
    for k, s in enumerate(sources):
        b = back.mip(k).scale
        assert (b.key, b.size, b.voxel_offset, b.resolution, b.chunk_size, b.encoding) == (
            s.scale.key, s.scale.size, s.voxel_offset, s.resolution, s.chunk_size, s.encoding)
        theirs = ts_open(str(tmp_path / "back"), k)
        assert theirs.domain == ts_open(src_path, k).domain
        assert np.array_equal(theirs.read().result(), s[...])


def test_image_written_by_ome_zarr_py(tmp_path):
    """A 5-D (t, c, z, y, x) image in micrometres with named paths, written by ome-zarr-py."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecations
        from ome_zarr.format import FormatV05
        from ome_zarr.writer import write_multiscale

    rng = np.random.default_rng(2)
    pyramid = [rng.integers(0, 255, (1, 2, 12, 20, 24)).astype("uint8"),
               rng.integers(0, 255, (1, 2, 12, 10, 12)).astype("uint8")]  # fmt: skip
    path = str(tmp_path / "f.ome.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_multiscale(
            pyramid, zarr.open_group(path, mode="w", zarr_format=3), fmt=FormatV05(),
            axes="tczyx", axes_units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
            coordinate_transformations=[
                [{"type": "scale", "scale": [1, 1, 0.5, 0.25, 0.25]}],
                [{"type": "scale", "scale": [1, 1, 0.5, 0.5, 0.5]},
                 {"type": "translation", "translation": [0, 0, 2.0, 0.125, 5.25]}],
            ],
        )  # fmt: skip
    img = shardvol.open(path)
    assert isinstance(img, OmeZarrImage)
    assert [lv.path for lv in img.mips] == ["s0", "s1"]
    assert img.resolution == (250, 250, 500) and img.voxel_offset == (0, 0, 0)
    assert img.mip("s1").resolution == (500, 500, 500)
    # centres at 5.25 / 0.125 / 2.0 um: voxels 10 (x), 0 (y), 4 (z) of the 0.5 um grid
    assert img.mip(1).voxel_offset == (10, 0, 4)
    for k, level in enumerate(pyramid):
        expected = level[0].transpose(3, 2, 1, 0)  # (x, y, z, c)
        assert np.array_equal(img.mip(k)[...], expected)
        lo = img.mip(k).voxel_offset
        assert np.array_equal(img.mip(k)[lo[0] + 1, lo[1] : lo[1] + 4, lo[2] + 2, 1],
                              expected[1, :4, 2, 1])  # fmt: skip

    vol = shardvol.copy(path, str(tmp_path / "pre"), progress=False)
    assert len(vol.mips) == 2 and vol.num_channels == 2
    for k, level in enumerate(pyramid):
        ours = ts_open(str(tmp_path / "pre"), k)
        assert list(ours.domain.inclusive_min[:3]) == list(img.mip(k).voxel_offset)
        assert np.array_equal(ours.read().result(), level[0].transpose(3, 2, 1, 0))
    assert vol.mip(1).resolution == (500, 500, 500)


def test_single_level_writes_and_overwrite(tmp_path):
    src = make_pyramid(str(tmp_path / "em"), channels=2)
    out = str(tmp_path / "one.ome.zarr")
    img = shardvol.copy(src.url, out, mip=1, progress=False)
    assert [lv.resolution for lv in img.mips] == [src.mip(1).resolution]
    assert np.array_equal(img[...], src.mip(1)[...])

    with pytest.raises(AlreadyExistsError, match="overwrite=True"):
        shardvol.copy(src.url, out, progress=False)
    img = shardvol.copy(src.url, out, overwrite=True, progress=False)
    assert len(img.mips) == 3
    shardvol.copy(src.url, out, mip=2, overwrite=True, progress=False)  # fewer levels
    assert {k.split("/")[0] for k in FileStore(out).list()} == {"0", "zarr.json"}
    img = shardvol.open(out)
    assert np.array_equal(img[...], src.mip(2)[...])

    # writes in the (x, y, z, c) frame land where TensorStore reads them
    lo = img.voxel_offset
    value = np.arange(2 * 3 * 4 * 2, dtype="uint8").reshape(2, 3, 4, 2)
    img[lo[0] + 1 : lo[0] + 3, lo[1] : lo[1] + 3, lo[2] + 5 : lo[2] + 9] = value
    img[lo[0], lo[1], lo[2], 1] = 77
    stored = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{out}/0"}})
    czyx = stored.result().read().result()
    assert np.array_equal(czyx[:, 5:9, 0:3, 1:3], value.transpose(3, 2, 1, 0))
    assert czyx[1, 0, 0, 0] == 77
    with pytest.raises(InvalidArgumentError, match="shape"):
        img[lo[0] : lo[0] + 2, lo[1], lo[2]] = np.zeros((3, 2), "uint8")
    with pytest.raises(ReadOnlyStoreError, match="mode='r'"):
        shardvol.open(out, mode="r")[...] = 0


def test_ome_zarr_to_a_single_array_and_to_another_image(tmp_path):
    src = make_pyramid(str(tmp_path / "em"), dtype="uint16", channels=2)
    img = shardvol.copy(src.url, str(tmp_path / "a.ome.zarr"), progress=False)
    arr = shardvol.copy(img.url, str(tmp_path / "one.zarr"), mip=1, progress=False)
    assert arr.dimension_names == ("x", "y", "z", "c")
    assert arr.attrs["precomputed"]["voxel_offset"] == list(src.mip(1).voxel_offset)
    assert np.array_equal(arr[...], src.mip(1)[...])
    again = shardvol.copy(img.url, str(tmp_path / "b.ome.zarr"), chunk_size=(32, 32, 16),
                          inner_chunk_shape=(8, 8, 8), codecs=["gzip"], progress=False)
    assert [lv.resolution for lv in again.mips] == [lv.resolution for lv in img.mips]
    for k in range(3):
        level = again.mip(k)
        assert level.shard_shape == (32, 32, 16) and level.chunk_size == (8, 8, 8)
        assert np.array_equal(level[...], src.mip(k)[...])
        kv = {"driver": "file", "path": str(tmp_path / "b.ome.zarr" / str(k))}
        stored = ts.open({"driver": "zarr3", "kvstore": kv}).result().read().result()
        assert np.array_equal(stored, array_order(src.mip(k)[...], 2))


def test_cli_cp_both_ways(tmp_path, capsys):
    src = make_pyramid(str(tmp_path / "em"), dtype="uint16", channels=1)
    out = str(tmp_path / "em.ome.zarr")
    assert main(["-q", "cp", src.url, out]) == 0
    assert json.loads((tmp_path / "em.ome.zarr" / "zarr.json").read_text())["node_type"] == "group"
    assert main(["-q", "cp", out, str(tmp_path / "back")]) == 0
    for k in range(3):
        assert np.array_equal(ts_read(str(tmp_path / "back"), k), src.mip(k)[...])
    other = str(tmp_path / "other")  # no .ome.zarr suffix: --format decides
    assert main(["-q", "cp", src.url, other, "--format", "ome-zarr", "--mip", "1"]) == 0
    assert [lv.resolution for lv in shardvol.open(other).mips] == [src.mip(1).resolution]
    assert main(["-q", "verify", out, "--samples", "2"]) == 0
    assert main(["-q", "cp", src.url, out]) == 1  # exists, no --overwrite
    assert "already holds" in capsys.readouterr().err
    assert main(["info", out]) == 0
    assert "OME-Zarr 0.5 image (3 levels), axes z, y, x" in capsys.readouterr().out
    assert main(["info", "--json", out]) == 0
    described = json.loads(capsys.readouterr().out)
    for level, s in zip(described["levels"], (src.mip(k) for k in range(3))):
        assert level["voxel_offset"] == list(s.voxel_offset)
        assert level["resolution_nm"] == list(s.resolution)
        assert level["array"]["shape"] == list(s.shape[2::-1]) and level["array"]["sharded"]


# ------------------------------------------------------------------------ bad metadata


def _ms(doc):
    return doc["attributes"]["ome"]["multiscales"][0]


def _set(path, value):
    def edit(doc):
        *head, last = path
        node = doc
        for key in head:
            node = node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


_DELETE = object()
_A = ("attributes", "ome", "multiscales", 0)

# (name, edit of the group's zarr.json, error, whether the specification forbids it)
BAD_GROUPS = [
    ("version", _set(("attributes", "ome", "version"), "0.4"), r"version is '0\.4'", True),
    ("axes-count", lambda d: (_ms(d)["axes"].pop(0),
                              [t.update({k: t[k][1:]}) for ds in _ms(d)["datasets"]
                               for t in ds["coordinateTransformations"]
                               for k in ("scale", "translation") if k in t]),
     r"has 4 dimensions .* 'axes' has 3 entries", True),
    ("no-datasets", _set((*_A, "datasets"), _DELETE), "datasets must be a non-empty list", True),
    ("empty-datasets", _set((*_A, "datasets"), []), "datasets must be a non-empty list", True),
    ("no-transforms", _set((*_A, "datasets", 1, "coordinateTransformations"), _DELETE),
     r"datasets\[1\] has no coordinateTransformations", True),
    ("translation-only", lambda d: _ms(d)["datasets"][0]["coordinateTransformations"].pop(0),
     r"one 'scale' optionally followed by one 'translation'", True),
    ("translation-first", lambda d: _ms(d)["datasets"][2]["coordinateTransformations"].reverse(),
     r"datasets\[2\]\.coordinateTransformations must be one 'scale'", True),
    ("affine", _set((*_A, "datasets", 0, "coordinateTransformations", 1, "type"), "affine"),
     r"got types \['scale', 'affine'\]", True),
    ("scale-length", _set((*_A, "datasets", 1, "coordinateTransformations", 0, "scale"),
                          [1, 2, 3]), r"scale must be 4 numbers", True),
    ("zero-scale", _set((*_A, "datasets", 1, "coordinateTransformations", 0, "scale"),
                        [1, 0, 10, 8]), "must be positive", False),
    ("levels-out-of-order", lambda d: _ms(d)["datasets"].reverse(), "is not coarser", False),
    ("unknown-axis-type", _set((*_A, "axes", 1, "type"), "angle"), "has type 'angle'", False),
    ("unknown-unit", _set((*_A, "axes", 2, "unit"), "furlong"), "'furlong' is not a length", False),
    ("axes-order", lambda d: _ms(d)["axes"].append(_ms(d)["axes"].pop(0)),
     "ordered time, channel, then space", True),
    ("space-names", _set((*_A, "axes", 3, "name"), "w"), "named x, y and z", False),
    ("missing-array", _set((*_A, "datasets", 2, "path"), "9"), r"dataset '9': no zarr\.json", True),
    ("path-outside", _set((*_A, "datasets", 2, "path"), "../em"), "relative path", False),
]


@pytest.fixture(scope="module")
def good_image(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    src = make_pyramid(str(root / "em"), channels=2)
    shardvol.copy(src.url, str(root / "em.ome.zarr"), progress=False)
    return root / "em.ome.zarr"


def _spec_rejects(path) -> bool:
    """Whether ome-zarr-models refuses the image (independent of shardvol)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.from_zarr(zarr.open_group(str(path), mode="r"))
    except Exception:
        return True
    return False


@pytest.mark.parametrize("name, edit, error, forbidden", BAD_GROUPS,
                         ids=[c[0] for c in BAD_GROUPS])
def test_lying_metadata_is_refused_and_nothing_is_written(tmp_path, good_image, name, edit,
                                                          error, forbidden):
    bad = tmp_path / "bad.ome.zarr"
    shutil.copytree(good_image, bad)
    doc = json.loads((bad / "zarr.json").read_text())
    edit(doc)
    (bad / "zarr.json").write_text(json.dumps(doc))
    if forbidden:
        assert _spec_rejects(bad)
    with pytest.raises(InfoError, match=error):
        shardvol.open(str(bad))
    for dst in ("pre", "again.ome.zarr", "one.zarr"):
        with pytest.raises(InfoError, match=error):
            shardvol.copy(str(bad), str(tmp_path / dst), progress=False)
        assert not (tmp_path / dst).exists()


def test_arrays_that_contradict_the_group(tmp_path, good_image):
    bad = tmp_path / "bad.ome.zarr"
    shutil.copytree(good_image, bad)
    level = json.loads((bad / "1" / "zarr.json").read_text())
    renamed = deepcopy_module.deepcopy(level)
    renamed["dimension_names"] = ["c", "z", "x", "y"]
    (bad / "1" / "zarr.json").write_text(json.dumps(renamed))
    assert _spec_rejects(bad)
    with pytest.raises(InfoError, match=r"dataset '1': dimension_names \['c', 'z', 'x', 'y'\] do "
                                        r"not match the axes \['c', 'z', 'y', 'x'\]"):
        shardvol.open(str(bad))
    fewer = deepcopy_module.deepcopy(level)
    fewer["shape"][0] = 1  # one channel at level 1, two at level 0
    (bad / "1" / "zarr.json").write_text(json.dumps(fewer))
    with pytest.raises(InfoError, match="has 1 channels, dataset '0' 2"):
        shardvol.copy(str(bad), str(tmp_path / "pre"), progress=False)
    assert not (tmp_path / "pre").exists()


def test_bad_options_write_nothing_and_level_selection(tmp_path, good_image):
    src = make_pyramid(str(tmp_path / "em"))
    dst = tmp_path / "x.ome.zarr"
    with pytest.raises(InvalidArgumentError, match="dividing"):  # inner chunks must divide shards
        shardvol.copy(src.url, str(dst), chunk_size=(16, 16, 8), inner_chunk_shape=(7, 7, 7),
                      progress=False)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="encoding"):
        shardvol.copy(src.url, str(dst), encoding="jpeg", progress=False)
    assert not dst.exists()
    img = shardvol.open(str(good_image))
    with pytest.raises(InfoError, match="mip 3 does not exist; the image has 3 levels"):
        img.mip(3)
    with pytest.raises(InfoError, match=r"no level with path 'x'; paths are \['0', '1', '2'\]"):
        img.mip("x")
    with pytest.raises(InfoError, match="no level with voxel size"):
        img.mip((1, 2, 3))
    with pytest.raises(OutOfBoundsError):
        img[0:1000]
