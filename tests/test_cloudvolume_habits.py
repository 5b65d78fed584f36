"""What CloudVolume users do daily, done with shardvol and checked with CloudVolume: editing
and committing ``info``, creating every scale at once, following ``redirect``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import AlreadyExistsError, InfoError, UnsupportedCodecError


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
