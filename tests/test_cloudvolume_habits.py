"""What CloudVolume users do daily, done with shardvol and checked with CloudVolume: editing
and committing ``info``, creating every scale at once, following ``redirect``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import (
    AlreadyExistsError,
    InfoError,
    InvalidArgumentError,
    OutOfBoundsError,
    UnsupportedCodecError,
)


def _cloudvolume(url: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        return CloudVolume(url, progress=False, cache=False, **kwargs)


def _new_info(**kwargs):
    from cloudvolume import CloudVolume

    defaults = {"num_channels": 1, "layer_type": "segmentation", "data_type": "uint32",
                "encoding": "compressed_segmentation", "resolution": [8, 8, 40],
                "voxel_offset": [10, 20, 0], "volume_size": [96, 80, 16],
                "chunk_size": [32, 32, 8]}
    defaults.update(kwargs)
    return CloudVolume.create_new_info(**defaults)


def test_create_from_cloudvolumes_info_with_every_scale(tmp_path):
    info = _new_info()
    info["scales"].append({**info["scales"][0], "key": "16_16_40", "resolution": [16, 16, 40],
                           "size": [48, 40, 16], "voxel_offset": [5, 10, 0]})
    url = f"file://{tmp_path}"
    vol = Volume.create_from_info(url, info)
    assert [s.key for s in vol.mips] == ["8_8_40", "16_16_40"]
    data = np.random.default_rng(2).integers(0, 50, (48, 40, 16, 1), dtype=np.uint32)
    vol.mip(1)[...] = data
    np.testing.assert_array_equal(_cloudvolume(url, mip=1)[5:53, 10:50, 0:16], data)
    with pytest.raises(AlreadyExistsError):
        Volume.create_from_info(url, info)
    bad = json.loads(json.dumps(info))
    bad["scales"][1]["encoding"] = "webp"
    with pytest.raises(InfoError, match="webp"):
        Volume.create_from_info(str(tmp_path / "other"), bad)
    assert not (tmp_path / "other").exists()


def test_info_edits_are_committed_and_read_by_cloudvolume(tmp_path):
    url = f"file://{tmp_path}"
    vol = Volume.create(url, size=(64, 64, 8), chunk_size=(32, 32, 8), data_type="uint8",
                        resolution=(4, 4, 40))
    vol[...] = 7
    vol.info["scales"][0]["resolution"] = [4, 4, 45]  # (CloudVolume's habit)
    vol.info["shardvol_note"] = {"by": "a test"}
    assert vol.resolution == (4, 4, 40)  # (not yet committed)
    vol.commit_info()
    assert vol.resolution == (4, 4, 45) and vol[...].min() == 7
    cv = _cloudvolume(url)
    assert list(cv.resolution) == [4, 4, 45] and cv.info["shardvol_note"] == {"by": "a test"}
    assert Volume(url).info["shardvol_note"] == {"by": "a test"}
    vol.info["scales"][0]["encoding"] = "compresso"  # (uint8 one channel: fine)
    vol.info["data_type"] = "float32"  # (compresso cannot hold it)
    with pytest.raises((InfoError, UnsupportedCodecError)):
        vol.commit_info()
    assert Volume(url).encoding == "raw"  # nothing written


def test_redirects_are_followed_and_loops_named(tmp_path):
    target = tmp_path / "moved"
    vol = Volume.create(str(target), size=(16, 16, 16), chunk_size=(8, 8, 8))
    vol[...] = 5
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "info").write_text(json.dumps({"redirect": f"file://{target}"}))
    (tmp_path / "stub2").mkdir()
    (tmp_path / "stub2" / "info").write_text(
        json.dumps({"redirect": f"precomputed://file://{tmp_path / 'stub'}"}))
    for url in (tmp_path / "stub", tmp_path / "stub2"):
        moved = Volume(str(url))
        assert moved.url == f"file://{target}" and (moved[...] == 5).all()
    np.testing.assert_array_equal(
        _cloudvolume(f"file://{tmp_path / 'stub'}")[0:16, 0:16, 0:16][..., 0], 5)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "info").write_text(json.dumps({"redirect": f"file://{tmp_path / 'b'}"}))
    (tmp_path / "b" / "info").write_text(json.dumps({"redirect": f"file://{tmp_path / 'a'}"}))
    with pytest.raises(InfoError, match="redirects loop"):
        Volume(str(tmp_path / "a"))
    (tmp_path / "b" / "info").write_text(json.dumps({"redirect": 5}))
    with pytest.raises(InfoError, match="'redirect' must be a URL"):
        Volume(str(tmp_path / "a"))


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory):
    """A 2x2x2-chunk uint64 segmentation CloudVolume wrote (labels in 6-voxel blocks, some
    large, and zero)."""
    url = f"file://{tmp_path_factory.mktemp('seg')}"
    info = _new_info(data_type="uint64", volume_size=[70, 60, 20], chunk_size=[32, 32, 16])
    cv = _cloudvolume(url, info=info)
    cv.commit_info()
    rng = np.random.default_rng(9)
    table = rng.choice(np.array([0, 1, 2, 5, 2**40 + 3, 2**63 + 1], np.uint64), 300)
    g = np.indices((70, 60, 20)) // 6
    data = table[(g[0] * 11 + g[1] * 7 + g[2] * 3) % 300][..., None]
    cv[10:80, 20:80, 0:20] = data
    return url, data


def test_labels_masks_and_renumbering_equal_cloudvolumes(segmentation):
    url, data = segmentation
    vol, cv = Volume(url), _cloudvolume(url)
    for box in (np.s_[10:80, 20:80, 0:20], np.s_[15:47, 33:38, 4:19], np.s_[70:71, 79:80, 19]):
        bbox = tuple(slice(s.start, s.stop) if isinstance(s, slice) else slice(s, s + 1)
                     for s in box)
        assert vol.labels(box).tolist() == sorted(cv.unique(bbox))
        for label in (2, [5, 2**40 + 3]):
            theirs = np.isin(np.asarray(cv[bbox]), label)
            ours = vol.mask(bbox, label)
            np.testing.assert_array_equal(ours, theirs)
        # renumbering: the same partition of the voxels as CloudVolume's (its numbering
        # order is its own), labels 1..n with 0 kept, and the mapping applied
        ours, mapping = vol.renumber(bbox)
        theirs, _ = cv.download(bbox, renumber=True)
        original = np.asarray(cv[bbox])
        assert ours.dtype == np.uint64 and mapping.get(0, 0) == 0
        assert sorted(v for k, v in mapping.items() if k) == list(
            range(1, len([k for k in mapping if k]) + 1))
        keys = np.array(sorted(mapping), np.uint64)
        values = np.array([mapping[int(k)] for k in keys], np.uint64)
        np.testing.assert_array_equal(ours, values[np.searchsorted(keys, original)])
        pairs = set(zip(ours.ravel().tolist(), np.asarray(theirs).ravel().tolist()))
        assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
    assert vol.labels().tolist() == np.unique(data).tolist()  # (blocks of chunks)


def test_values_at_scattered_points_equal_cloudvolumes(segmentation):
    url, data = segmentation
    vol, cv = Volume(url), _cloudvolume(url)
    rng = np.random.default_rng(4)
    pts = np.stack([rng.integers(10, 80, 400), rng.integers(20, 80, 400),
                    rng.integers(0, 20, 400)], axis=1)
    got = vol.points(pts)
    theirs = cv.scattered_points([tuple(p) for p in pts.tolist()])
    assert got.shape == (400, 1)
    assert [int(v) for v in got[:, 0]] == [int(theirs[tuple(p)]) for p in pts.tolist()]
    with pytest.raises(OutOfBoundsError, match=r"point \[9, 20, 0\] is outside"):
        vol.points([[10, 20, 0], [9, 20, 0]])
    outside = Volume(url, bounded=False, fill_value=7).points([[9, 20, 0], [10, 20, 0]])
    assert outside[:, 0].tolist() == [7, int(data[0, 0, 0, 0])]
    with pytest.raises(InvalidArgumentError, match="N x 3"):
        vol.points([[1.5, 2, 3]])


def test_provenance_read_written_and_kept_by_jobs(tmp_path):
    """CloudVolume's provenance file: edited and committed, read by CloudVolume; shardvol's
    downsample and copy add their steps (and the copy its source), as igneous's tasks do."""
    import shardvol

    src = f"file://{tmp_path / 'src'}"
    vol = Volume.create(src, size=(64, 64, 16), chunk_size=(16, 16, 16), resolution=(4, 4, 40))
    vol[...] = 3
    assert vol.provenance == {"description": "", "sources": [], "owners": [],
                              "processing": []}
    vol.provenance["description"] = "an image"
    vol.provenance["owners"].append("someone@example.org")
    vol.commit_provenance()
    cv = _cloudvolume(src)
    assert cv.provenance.description == "an image"
    assert list(cv.provenance.owners) == ["someone@example.org"]
    shardvol.downsample(vol, (2, 2, 1), 2, progress=False)
    steps = Volume(src).provenance["processing"]
    assert len(steps) == 1 and steps[0]["method"]["task"] == "downsample"
    assert steps[0]["method"]["num_mips"] == 2 and steps[0]["by"].startswith("shardvol ")
    dst = f"file://{tmp_path / 'dst'}"
    shardvol.copy(src, dst, progress=False)
    copied = Volume(dst).provenance
    assert copied["sources"] == [src] and copied["processing"][0]["method"]["task"] == "copy"
    assert list(_cloudvolume(dst).provenance.sources) == [src]
    vol.provenance["owners"].append("someone@example.org")
    with pytest.raises(InfoError, match="'owners' holds a value twice"):
        vol.commit_provenance()
    (tmp_path / "src" / "provenance").write_text("[1]")
    with pytest.raises(InfoError, match="provenance is a JSON object"):
        assert Volume(src).provenance


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_a_region_copied_into_an_existing_volume_keeps_its_info(tmp_path, sharding):
    import shardvol

    rng = np.random.default_rng(7)
    src = Volume.create(str(tmp_path / "src"), size=(96, 80, 16), voxel_offset=(10, 20, 0),
                        resolution=(8, 8, 40), data_type="uint32", chunk_size=(32, 32, 8),
                        type="segmentation", encoding="compressed_segmentation")
    src[...] = source = rng.integers(1, 50, (96, 80, 16, 1), dtype=np.uint32)
    # the destination: CloudVolume's layer, with two scales, a mesh directory and old data
    info = _new_info()
    info["mesh"] = "mesh"
    cv = _cloudvolume(f"file://{tmp_path / 'dst'}", info=info)
    cv.add_scale([16, 16, 40])
    cv.commit_info()
    cv[10:106, 20:100, 0:16] = before = rng.integers(100, 200, (96, 80, 16, 1), dtype=np.uint32)
    if sharding:  # (the same scale, sharded, written by shardvol)
        Volume.create_from_info(str(tmp_path / "dst"), {
            **cv.info, "scales": [{**cv.info["scales"][0], "sharding": {
                "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip",
                "data_encoding": "gzip"}}, cv.info["scales"][1]]}, overwrite=True)
        Volume(str(tmp_path / "dst"))[...] = before
    info_before = Volume(str(tmp_path / "dst")).info

    region = (slice(25, 70), slice(40, 61), slice(3, 12))  # (not chunk-aligned)
    out = shardvol.copy(str(tmp_path / "src"), str(tmp_path / "dst"), region=region,
                        into_existing=True, progress=False)
    assert out.info == info_before  # (scales, mesh key: all kept)
    expected = before.copy()
    expected[15:60, 20:41, 3:12] = source[15:60, 20:41, 3:12]
    theirs = np.asarray(_cloudvolume(f"file://{tmp_path / 'dst'}")[10:106, 20:100, 0:16])
    np.testing.assert_array_equal(theirs, expected)

    with pytest.raises(InvalidArgumentError, match="encoding"):
        shardvol.copy(str(tmp_path / "src"), str(tmp_path / "dst"), into_existing=True,
                      encoding="raw", progress=False)
    with pytest.raises(OutOfBoundsError):
        shardvol.copy(str(tmp_path / "src"), str(tmp_path / "dst"), into_existing=True,
                      region=(slice(0, 20), slice(20, 30), slice(0, 4)), progress=False)
    with pytest.raises(AlreadyExistsError):  # (without into_existing: refused, as before)
        shardvol.copy(str(tmp_path / "src"), str(tmp_path / "dst"), progress=False)
    Volume.create(str(tmp_path / "other"), size=(96, 80, 16), data_type="uint8",
                  resolution=(8, 8, 40))
    with pytest.raises(InvalidArgumentError, match="uint8"):
        shardvol.copy(str(tmp_path / "src"), str(tmp_path / "other"), into_existing=True,
                      progress=False)
    assert Volume(str(tmp_path / "dst")).info == info_before


def test_cp_into_existing_from_the_command_line(tmp_path):
    from shardvol.cli import main

    rng = np.random.default_rng(8)
    src = Volume.create(str(tmp_path / "src"), size=(64, 64, 16), chunk_size=(32, 32, 8))
    src[...] = source = rng.integers(1, 255, (64, 64, 16, 1), dtype=np.uint8)
    dst = Volume.create(str(tmp_path / "dst"), size=(64, 64, 16), chunk_size=(16, 16, 16),
                        sharding="auto")
    dst[...] = 7
    assert main(["cp", str(tmp_path / "src"), str(tmp_path / "dst"), "--into-existing",
                 "--region", "5:40,0:64,2:9", "--quiet"]) == 0
    expected = np.full((64, 64, 16, 1), 7, np.uint8)
    expected[5:40, :, 2:9] = source[5:40, :, 2:9]
    np.testing.assert_array_equal(Volume(str(tmp_path / "dst"))[...], expected)
    with pytest.raises(SystemExit):
        main(["cp", str(tmp_path / "src"), str(tmp_path / "dst"), "--region", "5:40,0:64"])
