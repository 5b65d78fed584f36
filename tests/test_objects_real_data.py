"""Meshes and annotations written by other implementations, read with shardvol and compared
with an independent reading (CloudVolume, DracoPy, neuroglancer's annotation reader) and with
the values the source repositories' own tests state.

The data is in tests/data/testdata (each folder's SOURCE.txt names its origin and licence).
Where a real object has no ``info`` wrapping it as a volume, the test copies its files,
unchanged, into a minimal directory in tmp_path.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import DracoPy
import numpy as np
import pytest
from cloudvolume import CloudVolume, from_cloudpath
from neuroglancer.read_precomputed_annotations import AnnotationReader

from shardvol.errors import InfoError
from shardvol.kvstore import open_store
from shardvol.precomputed.annotations import Annotations
from shardvol.precomputed.meshes import Meshes
from shardvol.precomputed.volume import Volume

from .oracles import data_path

LABEL = 648518346349515986  # the one object of cloud-volume's graphene mesh test data
GZ_MESH = data_path("seung-lab__cloud-volume__legacy_mesh_gz_fragments", "mesh_mip_2_err_40_sv16")
DRACO_MESH = data_path("seung-lab__cloud-volume__legacy_mesh_draco_fragments",
                       "mesh_mip_2_draco_sv16")
MULTIRES = "yigityargili991__haberkernlab_mesh_repo__multires_mesh_{}"
H01 = data_path("seung-lab__cloud-volume__h01_point_annotations")


def soup(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """The triangles as rows of 9 coordinates, sorted: a mesh independent of vertex order."""
    tri = np.asarray(vertices, np.float32)[np.asarray(faces, np.int64)].reshape(-1, 9)
    return tri[np.lexsort(tri.T[::-1])]


def components(vertices: np.ndarray, faces: np.ndarray) -> int:
    """Connected components of the mesh once equal vertices are merged (min-label
    propagation along the triangles' edges, with pointer jumping)."""
    _, inverse = np.unique(vertices, axis=0, return_inverse=True)
    tri = inverse.reshape(-1)[faces.astype(np.int64)]
    a, b = tri.reshape(-1), np.roll(tri, -1, axis=1).reshape(-1)
    label = np.arange(int(inverse.max()) + 1)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        new = new[new]
        if np.array_equal(new, label):
            return len(np.unique(label))
        label = new


def segmentation(root: Path, mesh_dir: str, scales: int = 1) -> None:
    """A minimal segmentation info naming ``mesh_dir`` (CloudVolume's Igneous meshes name
    a ``mip``, so several identical scales can be asked for)."""
    info = {"type": "segmentation", "data_type": "uint64", "num_channels": 1, "mesh": mesh_dir,
            "scales": [{"key": f"s{i}", "resolution": [8, 8, 40], "size": [64, 64, 64],
                        "voxel_offset": [0, 0, 0], "chunk_sizes": [[64, 64, 64]],
                        "encoding": "raw"} for i in range(scales)]}
    (root / "info").write_text(json.dumps(info))


def cloudvolume(root: Path) -> Any:
    return CloudVolume(f"file://{root}", progress=False, cache=False)


# -- legacy meshes -------------------------------------------------------------------------


def test_legacy_gzip_fragments_match_cloudvolume(tmp_path):
    shutil.copytree(GZ_MESH, tmp_path / "mesh")
    segmentation(tmp_path, "mesh")
    mesh = Volume(str(tmp_path)).meshes[LABEL]
    cv = cloudvolume(tmp_path).mesh.get(LABEL, fuse=False, remove_duplicate_vertices=False)[LABEL]
    assert (len(mesh.vertices), len(mesh.faces)) == (11963, 21696)
    assert np.array_equal(soup(mesh.vertices, mesh.faces), soup(cv.vertices, cv.faces))
    # cloud-volume's test_graphene_mesh_get_precomputed asserts 3 for this fragment set
    assert components(mesh.vertices, mesh.faces) == 3


def test_legacy_fragment_file_is_no_manifest():
    """A fragment stored under a manifest-like name ``<id>:0`` is reported, not decoded."""
    meshes = Meshes(open_store(GZ_MESH))
    assert LABEL in meshes
    with pytest.raises(InfoError, match="9185457065798402451:0"):
        meshes.get(9185457065798402451)


def test_legacy_draco_fragments_match_dracopy(tmp_path):
    """The manifest names its fragments ``mesh_mip_2_draco_sv16/<file>``: they go one
    directory below it, as the names say."""
    manifest = f"{LABEL}:0"
    frags = tmp_path / "mesh" / "mesh_mip_2_draco_sv16"
    frags.mkdir(parents=True)
    for name in os.listdir(DRACO_MESH):
        dest = tmp_path / "mesh" / name if name == manifest else frags / name
        shutil.copyfile(os.path.join(DRACO_MESH, name), dest)
    names = json.loads((tmp_path / "mesh" / manifest).read_bytes())["fragments"]
    decoded = [DracoPy.decode((tmp_path / "mesh" / n).read_bytes()) for n in names]
    starts = np.cumsum([0] + [len(d.points) for d in decoded[:-1]])
    vertices = np.concatenate([np.asarray(d.points, np.float32) for d in decoded])
    faces = np.concatenate([np.asarray(d.faces, np.int64) + s for d, s in zip(decoded, starts)])

    meshes = Meshes(open_store(str(tmp_path / "mesh")))
    mesh = meshes[LABEL]
    assert meshes.kind == "legacy" and meshes.labels() == [LABEL]
    assert len(names) == 21 and (len(vertices), len(faces)) == (6289, 10370)
    assert np.array_equal(mesh.vertices, vertices)
    assert np.array_equal(mesh.faces, faces)


# -- multi-resolution meshes (Igneous) -----------------------------------------------------


@pytest.mark.parametrize("layout", ["unsharded", "sharded"])
def test_igneous_multires_meshes_match_cloudvolume(tmp_path, layout):
    shutil.copytree(data_path(MULTIRES.format(layout), "mesh"), tmp_path / "mesh")
    segmentation(tmp_path, "mesh", scales=2)  # the unsharded info says "mip": 1
    meshes = Volume(str(tmp_path)).meshes
    assert meshes.kind == "multires" and meshes.sharded == (layout == "sharded")
    cv = cloudvolume(tmp_path).mesh
    labels = meshes.labels()
    assert labels == ([12, 20, 21] if layout == "unsharded" else list(range(1, 22)))
    for label in labels:
        assert meshes.manifest(label).num_lods == 1
        mesh = meshes.get(label)
        expected = cv.get(label, lod=0)[label]
        assert len(mesh.vertices) == len(expected.vertices)
        assert np.array_equal(soup(mesh.vertices, mesh.faces),
                              soup(expected.vertices, expected.faces)), label


def test_igneous_shard_labels_match_its_label_list():
    """Igneous lists the labels it wrote to ``0.shard`` in ``0.labels.gz``."""
    root = data_path(MULTIRES.format("sharded"), "mesh")
    with open(os.path.join(root, "0.labels.gz"), "rb") as f:
        listed = json.loads(gzip.decompress(f.read()))
    meshes = Meshes(open_store(root))
    assert meshes.labels() == sorted(listed)
    assert all(label in meshes for label in listed) and 22 not in meshes


# -- annotations (H01 points, via CloudVolume's test data) -------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> str:
    """The collection as an HTTP server sends it: each ``NAME.gz`` is an object ``NAME``
    stored with Content-Encoding gzip, which the client decodes."""
    root = tmp_path_factory.mktemp("h01")
    for path in Path(H01).rglob("*"):
        if path.is_file():
            rel = path.relative_to(H01)
            data = path.read_bytes()
            if rel.suffix == ".gz":
                rel, data = rel.with_suffix(""), gzip.decompress(data)
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
    return str(root)


@pytest.fixture(scope="module")
def cv_h01() -> Any:
    return from_cloudpath(f"file://{H01}")


def test_h01_annotations_match_cloudvolume(served, cv_h01):
    ann = Annotations(served)
    assert ann.type == "point" and ann.relationships == ("skeleton_id",)
    (spec,) = ann.properties
    assert spec.id == "class_label" and spec.enum_labels is not None and spec.enum_values

    one = ann.get(3867588737)
    expected = cv_h01.get_by_id(3867588737)
    assert one is not None
    # cloud-volume's test_annotation states this point
    assert np.allclose(one.geometry, [1.937760e06, 1.318752e06, 9.692100e04])
    assert np.array_equal(one.geometry, expected.geometry[0])
    assert one.properties["class_label"] == expected.properties["class_label"][0]

    related = ann.by_relationship("skeleton_id", 243895108)
    expected = cv_h01.get_by_relationship("skeleton_id", 243895108)
    assert np.array_equal(related.ids, np.asarray(expected.ids, np.uint64))
    assert np.array_equal(related.geometry, expected.geometry)
    names = dict(zip(spec.enum_values, spec.enum_labels))
    assert len(related) == 4 and {names[v] for v in related.properties["class_label"]} == {"axon"}

    everything = ann.all()
    expected = cv_h01.get_all(mip=0)
    order = np.argsort(np.asarray(expected.ids, np.uint64))
    assert len(everything) == 10043
    assert np.array_equal(everything.ids, np.asarray(expected.ids, np.uint64)[order])
    assert np.array_equal(everything.geometry, expected.geometry[order])
    assert np.array_equal(everything.properties["class_label"],
                          expected.properties["class_label"][order])
    assert len({names[v] for v in everything.properties["class_label"]}) == 7


def test_h01_annotations_match_neuroglancer(served):
    ann = Annotations(served)
    reader = AnnotationReader(f"file://{served}/")
    ng = reader.by_id[3867588737]
    one = ann.get(3867588737)
    assert one is not None
    assert np.array_equal(one.geometry, np.float32(ng.point))
    assert [int(s) for s in ng.segments[0]] == one.relationships["skeleton_id"].tolist()
    related = reader.relationships["skeleton_id"][243895108]
    assert ann.by_relationship("skeleton_id", 243895108).ids.tolist() == [
        int(a.id) for a in related]

    # small boxes around random annotations (neuroglancer's reader visits every cell of
    # every level a box meets, one read each: large boxes take it seconds)
    rng = np.random.default_rng(33)
    points = ann.all().geometry
    half = 0.04 * (np.array(ann.info.upper_bound) - np.array(ann.info.lower_bound))
    for center in points[rng.choice(len(points), 4, replace=False)]:
        got = ann.in_region(center - half, center + half)
        expected = reader.get_within_spatial_bounds(lower_bound=center - half,
                                                    upper_bound=center + half)
        assert len(got) > 0
        assert sorted(got.ids.tolist()) == sorted(int(a.id) for a in expected)


def test_h01_annotations_in_cloudvolume_layout(cv_h01):
    ann = Annotations(H01)
    one = ann.get(3867588737)
    assert one is not None
    assert np.array_equal(one.geometry, cv_h01.get_by_id(3867588737).geometry[0])
    assert len(ann.by_relationship("skeleton_id", 243895108)) == 4
    assert len(ann.all()) == 10043
