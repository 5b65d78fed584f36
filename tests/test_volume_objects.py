"""A segmentation's meshes, skeletons and segment properties reached from the Volume
(``vol.meshes``, ``vol.skeletons``, ``vol.segment_properties``), linked from its info as
CloudVolume and Neuroglancer look for them: CloudVolume reads what shardvol writes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import InfoError, InvalidArgumentError
from shardvol.precomputed.meshes import Mesh
from shardvol.precomputed.segment_properties import SegmentProperties
from shardvol.precomputed.skeletons import Skeleton


def _segmentation(path) -> Volume:
    return Volume.create(str(path), size=(64, 64, 32), data_type="uint64",
                         type="segmentation", resolution=(8, 8, 40),
                         encoding="compressed_segmentation")


def _cloudvolume(url: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cloudvolume import CloudVolume

        return CloudVolume(url, progress=False, cache=False)


def _mesh(rng) -> Mesh:
    vertices = rng.uniform(0, 500, (30, 3)).astype(np.float32)
    return Mesh(vertices=vertices, faces=rng.integers(0, 30, (40, 3)).astype(np.uint32))


@pytest.mark.parametrize("multires", [False, True])
def test_meshes_written_through_the_volume_are_read_by_cloudvolume(tmp_path, multires):
    rng = np.random.default_rng(0)
    vol = _segmentation(tmp_path)
    with pytest.raises(InfoError, match="no meshes directory"):
        vol.meshes  # noqa: B018
    options = {"multires": True, "vertex_quantization_bits": 16} if multires else {}
    vol.create_meshes(**options)
    assert vol.info["mesh"] == "mesh" and Volume(str(tmp_path)).info["mesh"] == "mesh"
    meshes = {label: _mesh(rng) for label in (5, 2**40 + 3)}
    vol.meshes.put_many(meshes)
    cv = _cloudvolume(f"file://{tmp_path}")
    for label, mesh in meshes.items():
        got = Volume(str(tmp_path)).meshes[label]
        theirs = cv.mesh.get(label)
        theirs = theirs[label] if isinstance(theirs, dict) else theirs
        if not multires:  # (plain fragments: exact)
            np.testing.assert_array_equal(got.vertices, mesh.vertices)
            np.testing.assert_array_equal(got.faces, mesh.faces)
        # CloudVolume's mesh has the same triangles as shardvol's reading of it
        ours = np.sort(got.vertices[got.faces].reshape(-1, 9), axis=0)
        cvs = np.sort(np.asarray(theirs.vertices, np.float32)[np.asarray(theirs.faces)]
                      .reshape(-1, 9), axis=0)
        np.testing.assert_array_equal(ours, cvs)


def test_skeletons_and_properties_through_the_volume(tmp_path):
    rng = np.random.default_rng(1)
    vol = _segmentation(tmp_path)
    vol.create_skeletons(sharding=None)
    skel = Skeleton(vertices=rng.uniform(0, 300, (12, 3)).astype(np.float32),
                    edges=np.stack([np.arange(11), np.arange(1, 12)], 1).astype(np.uint32),
                    attributes={"radius": rng.uniform(1, 5, 12).astype(np.float32)})
    vol.skeletons[77] = skel
    theirs = _cloudvolume(f"file://{tmp_path}").skeleton.get(77)
    np.testing.assert_array_equal(theirs.vertices, skel.vertices)
    np.testing.assert_array_equal(theirs.edges, skel.edges)
    np.testing.assert_array_equal(theirs.radius, skel.radius)
    np.testing.assert_array_equal(Volume(str(tmp_path)).skeletons[77].radius, skel.radius)

    props = SegmentProperties(np.array([77, 5], np.uint64), labels=["axon", "soma"])
    vol.write_segment_properties(props)
    again = Volume(str(tmp_path))
    assert again.info["segment_properties"] == "segment_properties"
    np.testing.assert_array_equal(again.segment_properties.ids, [77, 5])
    assert list(again.segment_properties.labels) == ["axon", "soma"]
    with pytest.raises(InvalidArgumentError):
        vol.create_skeletons(directory="../elsewhere")
    vol.info["mesh"] = "../../etc"
    vol.commit_info()
    with pytest.raises(InfoError, match="directory below the volume"):
        Volume(str(tmp_path)).meshes  # noqa: B018


def test_info_lists_the_objects(tmp_path, capsys):
    from shardvol.cli import main

    rng = np.random.default_rng(2)
    vol = _segmentation(tmp_path)
    vol.create_meshes(multires=True, sharding={
        "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
        "hash": "murmurhash3_x86_128", "minishard_bits": 1, "shard_bits": 1,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"})
    vol.meshes.put_many({label: _mesh(rng) for label in (1, 2, 3)})
    vol.create_skeletons()
    vol.write_segment_properties(SegmentProperties(np.array([1, 2], np.uint64),
                                                   labels=["a", "b"]))
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "meshes:   mesh/, multi-resolution, sharded, 3 labels" in out
    assert "skeletons: skeletons/, unsharded, attributes radius, 0 labels" in out
    assert "segment properties: segment_properties/, 2 segments, properties label" in out
    (tmp_path / "skeletons" / "info").write_text("{")
    assert main(["info", str(tmp_path), "--json"]) == 0
    import json

    desc = json.loads(capsys.readouterr().out)
    assert "not valid JSON" in desc["skeletons"]["error"]
