"""Precomputed meshes (shardvol.precomputed.meshes) against CloudVolume, DracoPy and
TensorStore.

Meshes are generated with numpy (a noisy sphere, random triangles).  Legacy meshes go both
ways through CloudVolume's mesh source; multi-resolution meshes written by shardvol
(unsharded, sharded with raw and gzip data) are read by CloudVolume, and files laid out by
CloudVolume's own manifest and shard writers (what igneous uses: CloudVolume has no
multi-resolution mesh writer) are read by shardvol.  Meshes are compared as sets of
triangles (coordinate triples, orientation kept), so vertex order does not matter.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from shardvol.errors import ChunkDecodeError, InfoError, InvalidArgumentError, MissingChunkError
from shardvol.kvstore import FileStore, open_store
from shardvol.precomputed.meshes import Mesh, Meshes, encode_legacy
from shardvol.precomputed.multires_mesh import Manifest, MultiresInfo, encode_mesh
from shardvol.sharding import ShardingSpec

DracoPy = pytest.importorskip("DracoPy")
ts = pytest.importorskip("tensorstore")
cloudvolume = pytest.importorskip("cloudvolume")

TRANSFORM = [8.0, 0.0, 0.0, 100.0, 0.0, 8.0, 0.0, -40.0, 0.0, 0.0, 40.0, 0.0]
SHARDINGS = {
    "raw": ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=1, shard_bits=1,
                        minishard_index_encoding="gzip"),
    "gzip": ShardingSpec(hash="identity", preshift_bits=1, minishard_bits=2, shard_bits=0,
                         data_encoding="gzip"),
}


# -- generated meshes and comparison -----------------------------------------------------------


def sphere(rng: np.random.Generator, n: int = 16, radius: float = 300.0,
           center: tuple = (900.0, 700.0, 2000.0)) -> Mesh:
    """A closed, noisy UV sphere (nanometres)."""
    theta = np.linspace(0, np.pi, n)[1:-1]
    phi = np.linspace(0, 2 * np.pi, n, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1).reshape(-1, 3)
    v = np.concatenate([[[0, 0, 1]], ring, [[0, 0, -1]]])
    v = v * radius * rng.uniform(0.8, 1.2, (len(v), 1)) + center
    rows, faces = n - 2, []
    for j in range(n):
        faces.append([0, 1 + j, 1 + (j + 1) % n])
        faces.append([len(v) - 1, 1 + (rows - 1) * n + (j + 1) % n, 1 + (rows - 1) * n + j])
    for i in range(rows - 1):
        for j in range(n):
            a, b = 1 + i * n + j, 1 + i * n + (j + 1) % n
            c, d = a + n, b + n
            faces += [[a, c, d], [a, d, b]]
    return Mesh(v, np.array(faces))


def random_triangles(rng: np.random.Generator, count: int = 40) -> Mesh:
    """Separate random triangles, in random vertex order."""
    v = rng.uniform(-500, 3000, (count * 3, 3)).astype(np.float32)
    return Mesh(v, rng.permutation(count * 3).reshape(count, 3))


def canon(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Triangles as sorted rows of 9 float32 coordinates, each rotated to start at its
    smallest corner (orientation kept)."""
    tri = np.asarray(vertices, dtype=np.float32)[np.asarray(faces, dtype=np.int64)]
    keys = [tuple(map(tuple, t)) for t in tri]
    rolled = [np.roll(t, -min(range(3), key=k.__getitem__), axis=0) for t, k in zip(tri, keys)]
    rows = np.array(rolled, dtype=np.float32).reshape(-1, 9)
    return rows[np.lexsort(rows.T[::-1])] if len(rows) else rows


def assert_same(a, b) -> None:
    np.testing.assert_array_equal(canon(a.vertices, a.faces), canon(b.vertices, b.faces))


def area(vertices: np.ndarray, faces: np.ndarray) -> float:
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces, dtype=np.int64)]
    return float(np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]),
                                axis=1).sum() / 2)


# -- CloudVolume ------------------------------------------------------------------------------


def cv_volume(root: str, mesh_info: dict | None = None):
    """A CloudVolume segmentation volume at ``root`` whose mesh directory is ``mesh``."""
    from cloudvolume import CloudVolume

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = CloudVolume.create_new_info(1, "segmentation", "uint64", "raw", [8, 8, 40],
                                           [0, 0, 0], [64, 64, 64], mesh="mesh")
        CloudVolume(f"file://{root}", info=info, progress=False, cache=False).commit_info()
        if mesh_info is not None:
            os.makedirs(f"{root}/mesh", exist_ok=True)
            with open(f"{root}/mesh/info", "w") as f:
                json.dump(mesh_info, f)
        return CloudVolume(f"file://{root}", progress=False, cache=False)


def cv_get(vol, label: int, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vol.mesh.get(label, **kwargs)[label]


def mesh_store(root) -> Meshes:
    return Meshes(open_store(str(root / "mesh")))


# -- legacy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", ["gzip", False])
def test_shardvol_reads_cloudvolume_legacy(tmp_path, compress):
    from cloudvolume.mesh import Mesh as CVMesh

    rng = np.random.default_rng(1)
    vol = cv_volume(str(tmp_path))
    meshes = {7: sphere(rng), 2**40 + 3: random_triangles(rng)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vol.mesh.put([CVMesh(m.vertices, m.faces, segid=k) for k, m in meshes.items()],
                     compress=compress)
    reader = mesh_store(tmp_path)
    assert reader.kind == "legacy" and not reader.sharded
    assert reader.labels() == sorted(meshes)
    got = reader.get_many(meshes)
    for k, m in meshes.items():
        np.testing.assert_array_equal(got[k].vertices, m.vertices)
        np.testing.assert_array_equal(got[k].faces, m.faces)
        assert k in reader
    assert 8 not in reader
    with pytest.raises(MissingChunkError, match="label 8"):
        reader[8]


def test_cloudvolume_reads_shardvol_legacy(tmp_path):
    rng = np.random.default_rng(2)
    meshes = Meshes.create(open_store(str(tmp_path / "mesh")))
    expected = {5: sphere(rng), 6: random_triangles(rng)}
    meshes.put_many(expected)
    vol = cv_volume(str(tmp_path))
    for k, m in expected.items():
        got = cv_get(vol, k, fuse=False)
        np.testing.assert_array_equal(got.vertices, m.vertices)
        np.testing.assert_array_equal(got.faces, m.faces)
    # rewritten: the old fragment list goes, CloudVolume's compressed copies too
    meshes[5] = expected[6]
    del meshes[6]
    assert meshes.labels() == [5]
    assert sorted(os.listdir(tmp_path / "mesh")) == ["5:0", "5:0:1", "info"]
    assert_same(cv_get(vol, 5, fuse=False), expected[6])


def test_legacy_draco_and_several_fragments(tmp_path):
    """Draco fragments (detected by their magic) next to plain ones, merged in order."""
    rng = np.random.default_rng(3)
    kv = open_store(str(tmp_path))
    plain, draco_mesh = sphere(rng), sphere(rng, n=8)
    draco = DracoPy.encode(draco_mesh.vertices, draco_mesh.faces, quantization_bits=16)
    kv.set("4:0:a", encode_legacy(plain))
    kv.set("4:0:b", draco)
    kv.set("4:0", json.dumps({"fragments": ["4:0:a", "4:0:b"]}).encode())
    oracle = DracoPy.decode(draco)
    got = Meshes(kv)[4]
    assert_same(got, Mesh.concatenate(plain, Mesh(oracle.points, oracle.faces)))


# -- multi-resolution -------------------------------------------------------------------------


def lods(rng: np.random.Generator) -> list[Mesh]:
    return [sphere(rng, n=24), sphere(rng, n=12), sphere(rng, n=6)]


@pytest.mark.parametrize("sharding", [None, "raw", "gzip"])
def test_cloudvolume_reads_shardvol_multires(tmp_path, sharding):
    rng = np.random.default_rng(4)
    spec = None if sharding is None else SHARDINGS[sharding]
    meshes = Meshes.create(open_store(str(tmp_path / "mesh")), multires=True, sharding=spec,
                           transform=TRANSFORM)
    written = {11: lods(rng), 12: [random_triangles(rng)], 2**50 + 1: lods(rng)[:2]}
    meshes.put_many(written, chunk_shape=None)
    written[13] = [sphere(rng)]
    meshes[13] = written[13][0]
    vol = cv_volume(str(tmp_path))
    assert meshes.labels() == sorted(written)
    for k, ms in written.items():
        for lod in range(len(ms)):
            got = meshes.get(k, lod)
            assert_same(got, cv_get(vol, k, lod=lod))
            assert len(got.faces) >= len(ms[lod].faces)
            assert area(got.vertices, got.faces) == pytest.approx(
                area(ms[lod].vertices, ms[lod].faces), rel=1e-3)
    assert_same(meshes[11], cv_get(vol, 11, lod=0))


def test_multires_round_trip_geometry():
    """Every input vertex comes back within the quantization step; the surface is the same."""
    rng = np.random.default_rng(5)
    meshes = Meshes.create(open_store("memory://meshes-geometry"), multires=True,
                           transform=TRANSFORM, vertex_quantization_bits=10)
    mesh = sphere(rng, n=20)
    meshes.put_many({1: [mesh, sphere(rng, n=10)]}, chunk_shape=[20, 20, 5])
    manifest = meshes.manifest(1)
    assert manifest.num_lods == 2 and len(manifest.positions[0]) > 8
    got = meshes[1]
    step = manifest.chunk_shape.astype(np.float64) * np.diag(np.reshape(TRANSFORM, (3, 4)))[:3]
    distance = np.abs(mesh.vertices[:, None, :] - got.vertices[None]).max(axis=2).min(axis=1)
    assert distance.max() <= step.max() / 1023 + 1e-3
    assert area(got.vertices, got.faces) == pytest.approx(area(mesh.vertices, mesh.faces),
                                                          rel=1e-2)
    frags = meshes.get_fragments(1, 0)
    assert [p for p, _ in frags] == [tuple(p) for p in manifest.positions[0].tolist()
                                     if frags and tuple(p) in dict(frags)]
    assert_same(Mesh.concatenate(*(m for _, m in frags)), got)


def test_lod_fragments_partition_for_neuroglancer():
    """LOD > 0 fragments: no triangle crosses the 2x2x2 split at 2**(bits-1) (Neuroglancer's
    partition point); every LOD 0 node has its parent listed at LOD 1; Z-order positions."""
    rng = np.random.default_rng(6)
    bits = 16
    data, manifest = encode_mesh([(m.vertices, m.faces) for m in lods(rng)], bits,
                                 np.eye(3, 4), np.array([100.0, 90.0, 80.0]))
    half = 2 ** (bits - 1)
    offset = 0
    for lod in range(manifest.num_lods):
        pos = manifest.positions[lod].astype(np.int64)
        code = sum(((pos[:, a] >> b) & 1) << (3 * b + a) for b in range(16) for a in range(3))
        assert (np.diff(code) > 0).all()
        if lod:
            parents = {tuple(p) for p in (manifest.positions[lod - 1] // 2).tolist()}
            assert parents <= {tuple(p) for p in pos.tolist()}
        for size in manifest.sizes[lod].tolist():
            if size and lod:
                frag = DracoPy.decode(data[offset:offset + size])
                q = np.asarray(frag.points)[np.asarray(frag.faces, dtype=np.int64)]
                assert (q == np.rint(q)).all() and q.min() >= 0 and q.max() < 2**bits
                low, high = (q < half).any(axis=1), (q > half).any(axis=1)
                assert not (low & high).any()
            offset += size
    assert offset == len(data)


def cv_manifest_and_data(mesh: Mesh, bits: int, matrix: np.ndarray) -> tuple[bytes, bytes]:
    """(fragment data, manifest) of a 2-LOD mesh laid out with CloudVolume's manifest class and
    quantizer: LOD 0 in up to 2x2x2 fragments (triangles by centroid), LOD 1 one fragment."""
    from cloudvolume.datasource.precomputed.mesh.multilod import (
        MultiLevelPrecomputedMeshManifest,
        to_stored_model_space,
    )

    inverse = np.linalg.inv(np.vstack([matrix, [0, 0, 0, 1]]))[:3]
    stored = mesh.vertices @ inverse[:, :3].T + inverse[:, 3]
    lo, hi = stored.min(axis=0).astype(np.float32), stored.max(axis=0)
    chunk = ((hi - lo) / 2 * 1.001).astype(np.float32)
    cells = np.floor((stored[mesh.faces].mean(axis=1) - lo) / chunk).astype(np.int64)
    nodes = np.unique(cells, axis=0)
    nodes = nodes[np.argsort(nodes[:, 0] + 2 * nodes[:, 1] + 4 * nodes[:, 2])]  # Z-order
    groups = [[mesh.faces[(cells == n).all(axis=1)] for n in nodes], [mesh.faces]]

    def manifest(sizes: list[int]) -> MultiLevelPrecomputedMeshManifest:
        return MultiLevelPrecomputedMeshManifest(
            0, chunk, lo, 2, [1.0, 2.0], np.zeros((2, 3)), [len(nodes), 1],
            [nodes, np.zeros((1, 3), np.int64)], sizes)

    layout = manifest([0] * (len(nodes) + 1))
    blobs = [DracoPy.encode(to_stored_model_space(stored, layout, lod, bits, i), faces,
                            quantization_bits=bits, quantization_range=2**bits - 1,
                            quantization_origin=[0, 0, 0])
             for lod, faces_of_lod in enumerate(groups) for i, faces in enumerate(faces_of_lod)]
    return b"".join(blobs), manifest([len(b) for b in blobs]).to_binary()


@pytest.mark.parametrize("sharded", [False, True])
def test_shardvol_reads_cloudvolume_multires(tmp_path, sharded):
    from cloudvolume.datasource.precomputed.sharding import ShardingSpecification

    rng = np.random.default_rng(7)
    matrix = np.reshape(TRANSFORM, (3, 4))
    spec = SHARDINGS["raw"]
    info = MultiresInfo(16, tuple(TRANSFORM), 1.0, spec if sharded else None).to_dict()
    vol = cv_volume(str(tmp_path), info)
    built = {k: cv_manifest_and_data(sphere(rng, n=14), 16, matrix) for k in (3, 2**33 + 9)}
    if sharded:
        files = ShardingSpecification.from_dict(spec.to_dict()).synthesize_shards(
            {k: d + m for k, (d, m) in built.items()}, {k: len(m) for k, (_, m) in built.items()})
        for name, blob in files.items():
            (tmp_path / "mesh" / name).write_bytes(blob)
    else:
        for k, (data, manifest) in built.items():
            (tmp_path / "mesh" / str(k)).write_bytes(data)
            (tmp_path / "mesh" / f"{k}.index").write_bytes(manifest)
    meshes = mesh_store(tmp_path)
    assert meshes.kind == "multires" and meshes.sharded == sharded
    assert meshes.labels() == sorted(built)
    for k in built:
        for lod in range(2):
            assert_same(meshes.get(k, lod), cv_get(vol, k, lod=lod))
        assert Manifest.decode(built[k][1], "x").encode() == built[k][1]


def ts_values(path: str, spec: ShardingSpec) -> dict[int, bytes]:
    store = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                             "base": {"driver": "file", "path": path + "/"},
                             "metadata": spec.to_dict()}).result()
    return {int.from_bytes(key, "big"): bytes(store.read(key).result().value)
            for key in store.list().result()}


@pytest.mark.parametrize("encoding", ["raw", "gzip"])
def test_tensorstore_reads_shard_values(tmp_path, encoding):
    """Each label's value in the shards is exactly its manifest (TensorStore's reading), also
    after rewrites that keep the other labels' fragment data in place."""
    rng = np.random.default_rng(8)
    spec = SHARDINGS[encoding]
    meshes = Meshes.create(FileStore(str(tmp_path / "mesh")), multires=True, sharding=spec)
    written = {k: lods(rng)[: 1 + k % 3] for k in (1, 2, 3, 4, 5, 77, 2**63 + 5)}
    meshes.put_many(written)
    meshes[2] = written[2] = [random_triangles(rng)]
    del meshes[3]
    del written[3]
    expected = {k: encode_mesh([(m.vertices, m.faces) for m in ms], 16, np.eye(3, 4))[1].encode()
                for k, ms in written.items()}
    assert ts_values(str(tmp_path / "mesh"), spec) == expected
    vol = cv_volume(str(tmp_path))
    for k in written:
        assert_same(meshes[k], cv_get(vol, k, lod=0))


# -- API details ------------------------------------------------------------------------------


def test_mesh_class():
    rng = np.random.default_rng(9)
    a, b = sphere(rng), random_triangles(rng)
    both = Mesh.concatenate(a, b)
    assert both.vertices.dtype == np.float32 and both.faces.dtype == np.uint32
    np.testing.assert_array_equal(both.faces[len(a.faces):], b.faces + len(a.vertices))

    class Duck:  # what trimesh.Trimesh offers
        vertices, faces = a.vertices.astype(np.float64), a.faces.astype(np.int64)

    assert_same(Mesh.from_trimesh(Duck()), a)
    with pytest.raises(InvalidArgumentError, match="face indices"):
        Mesh(np.zeros((3, 3)), [[0, 1, 3]])
    with pytest.raises(InvalidArgumentError, match=r"\(N, 3\)"):
        Mesh(np.zeros((3, 2)), [[0, 1, 2]])


def test_create_and_info(tmp_path):
    kv = open_store(str(tmp_path))
    assert Meshes(kv).kind == "legacy"  # no info at all
    Meshes.create(kv, multires=True, segment_properties="props", lod_scale_multiplier=2.0)
    info = json.loads(kv.get("info"))
    assert info["@type"] == "neuroglancer_multilod_draco" and info["segment_properties"] == "props"
    with pytest.raises(FileExistsError):
        Meshes.create(kv)
    with pytest.raises(InvalidArgumentError, match="sharded"):
        Meshes.create(kv, sharding=SHARDINGS["raw"].to_dict(), overwrite=True)
    with pytest.raises(InvalidArgumentError, match="vertex_quantization_bits"):
        Meshes.create(kv, multires=True, vertex_quantization_bits=12, overwrite=True)
    with pytest.raises(InvalidArgumentError, match="not invertible"):
        Meshes.create(kv, multires=True, transform=[0] * 12, overwrite=True)


@pytest.mark.parametrize("info, match", [
    (b"{", "not valid JSON"),
    (b"[]", "JSON object"),
    (b'{"@type": "neuroglancer_mesh"}', "@type"),
    (b'{"@type": "neuroglancer_legacy_mesh", "sharding": {}}', "no sharded format"),
    (b'{"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 8, '
     b'"transform": [1,0,0,0,0,1,0,0,0,0,1,0], "lod_scale_multiplier": 1}',
     "vertex_quantization_bits"),
    (b'{"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 10, '
     b'"transform": [1,0,0], "lod_scale_multiplier": 1}', "transform"),
    (b'{"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 10, '
     b'"transform": [1,0,0,0,0,1,0,0,0,0,1,0], "lod_scale_multiplier": "1"}',
     "lod_scale_multiplier"),
    (b'{"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 10, '
     b'"transform": [1,0,0,0,0,1,0,0,0,0,1,0], "lod_scale_multiplier": 1, '
     b'"sharding": {"@type": "neuroglancer_uint64_sharded_v1"}}', "sharding"),
])
def test_bad_info(info, match):
    kv = open_store("memory://meshes-bad-info")
    kv.set("info", info)
    with pytest.raises(InfoError, match=match):
        Meshes(kv)


# -- corrupt input ----------------------------------------------------------------------------


def legacy_with(fragment: bytes) -> Meshes:
    kv = open_store("memory://meshes-corrupt-legacy")
    kv.set("info", b'{"@type": "neuroglancer_legacy_mesh"}')
    kv.set("9:0", b'{"fragments": ["9:0:1"]}')
    kv.set("9:0:1", fragment)
    return Meshes(kv)


def test_corrupt_legacy():
    rng = np.random.default_rng(10)
    good = encode_legacy(sphere(rng))
    n_vertices = int.from_bytes(good[:4], "little")
    cases = {
        "too short for a vertex count": good[:3],
        "not a multiple of 12": good[:-5],
        f"{n_vertices + 1000} vertices need": (n_vertices + 1000).to_bytes(4, "little")
        + good[4:],
        "face index": good[:-4] + (n_vertices).to_bytes(4, "little"),
        "not a valid Draco mesh": b"DRACO" + rng.bytes(40),
    }
    for match, blob in cases.items():
        with pytest.raises(ChunkDecodeError, match=f"mesh of label 9.*{match}"):
            legacy_with(blob)[9]
    meshes = legacy_with(good)
    meshes.kv.set("9:0", b'{"fragments": "9:0:1"}')
    with pytest.raises(InfoError, match=r"9:0 .*fragments"):
        meshes[9]
    meshes.kv.set("9:0", b'{"fragments": ["9:0:2"]}')
    with pytest.raises(ChunkDecodeError, match=r"9:0:2 .*label 9.*missing"):
        meshes[9]
    meshes.kv.set("9:0", b'{"fragments": ["../x"]}')
    with pytest.raises(InfoError, match="bad fragment"):
        meshes[9]


@pytest.mark.parametrize("sharding", [None, "raw"])
def test_corrupt_multires(sharding):
    rng = np.random.default_rng(11)
    spec = None if sharding is None else SHARDINGS[sharding]
    kv = open_store(f"memory://meshes-corrupt-{sharding}")
    meshes = Meshes.create(kv, multires=True, sharding=spec, overwrite=True)
    meshes[4] = lods(rng)[:2]
    data, manifest = encode_mesh([(m.vertices, m.faces) for m in lods(rng)[:2]], 16,
                                 np.eye(3, 4))
    raw = manifest.encode()

    def store(data: bytes, manifest: bytes) -> None:
        if spec is None:
            kv.set("4", data)
            kv.set("4.index", manifest)
        else:
            from shardvol.sharding import update_shard

            kv.delete(spec.filename(4))
            update_shard(kv, spec, {4: manifest}, reader=meshes._reader, prefixes={4: data})

    store(data, raw[:20])
    with pytest.raises(ChunkDecodeError, match=r"label 4.*shorter than its 28-byte header"):
        meshes[4]
    store(data, raw[:24] + (10**6).to_bytes(4, "little") + raw[28:])
    with pytest.raises(ChunkDecodeError, match=r"label 4.*has 1000000 LODs, not 1 to 64"):
        meshes[4]
    store(data, raw[:24] + (60).to_bytes(4, "little") + raw[28:])
    with pytest.raises(ChunkDecodeError, match=r"label 4.*too short for 60 LODs"):
        meshes[4]
    store(data, raw[:-4])
    with pytest.raises(ChunkDecodeError, match=r"label 4.*manifest has .* bytes, but 2 LODs"):
        meshes[4]
    if spec is None:
        store(data[:-10], raw)
        with pytest.raises(ChunkDecodeError, match="label 4 is shorter than its manifest"):
            meshes.get(4, lod=1)
        kv.delete("4")
        with pytest.raises(ChunkDecodeError, match="fragment data of label 4 is missing"):
            meshes[4]
    else:
        store(b"", raw)
        with pytest.raises(ChunkDecodeError, match=r"label 4.*bytes of fragments but is stored"):
            meshes[4]
    bad = bytearray(data)
    first = int(manifest.sizes[0][0])
    bad[5:first] = rng.bytes(first - 5)
    store(bytes(bad), raw)
    with pytest.raises(ChunkDecodeError, match=r"label 4, lod 0, fragment .*Draco"):
        meshes[4]
    store(data, raw)
    with pytest.raises(InvalidArgumentError, match="label 4 has LODs 0 to 1, not 2"):
        meshes.get(4, lod=2)
    with pytest.raises(MissingChunkError, match="label"):
        meshes[5]


def test_trimesh_objects_in_and_out(tmp_path):
    import trimesh

    sphere_tm = trimesh.creation.icosphere(subdivisions=3, radius=250.0)
    sphere_tm.apply_translation([1000, 2000, 3000])
    meshes = Meshes.create(open_store(str(tmp_path)))
    meshes[5] = Mesh.from_trimesh(sphere_tm)
    back = meshes[5].to_trimesh()
    assert isinstance(back, trimesh.Trimesh) and back.is_watertight
    assert back.volume == pytest.approx(sphere_tm.volume, rel=1e-6)  # (float32 vertices)
    np.testing.assert_array_equal(back.faces, sphere_tm.faces)


def test_rewrites_delete_only_the_labels_own_fragments_and_overwrite_clears(tmp_path):
    rng = np.random.default_rng(12)
    kv = open_store(str(tmp_path))
    meshes = Meshes.create(kv)
    meshes[7] = sphere(rng)
    kv.set("7:0", json.dumps({"fragments": ["info", "7:0:1"]}).encode())  # (a lying manifest)
    meshes[7] = sphere(rng)
    del meshes[7]
    assert kv.get("info") is not None  # (named by the manifest, not the label's own)
    multires = Meshes.create(kv, multires=True, overwrite=True)
    assert kv.list() == ["info"] and multires.kind == "multires"
    bad = sphere(rng)
    bad.vertices[0, 0] = np.nan
    with pytest.raises(InvalidArgumentError, match="finite"):
        multires[8] = bad
    with pytest.raises(InvalidArgumentError, match="fragments along an axis"):
        multires.put_many({9: sphere(rng)}, chunk_shape=[1e-3, 1e-3, 1e-3])


def test_a_shard_rewritten_during_a_read_is_read_again(tmp_path):
    """The manifest and the fragment data of a sharded mesh come from one version of its
    shard: another writer replacing the shard between the reads makes them start over."""
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
            "minishard_bits": 0, "shard_bits": 0, "minishard_index_encoding": "raw",
            "data_encoding": "raw"}
    rng = np.random.default_rng(13)
    kv = FileStore(str(tmp_path))
    meshes = Meshes.create(kv, multires=True, sharding=spec)
    meshes.put_many({3: random_triangles(rng), 5: random_triangles(rng)})
    expected = Meshes(FileStore(str(tmp_path)))[5]
    meshes = Meshes(kv)
    meshes.get_many([3])  # (its shard index cached)
    other = Meshes(FileStore(str(tmp_path)))
    original, calls = kv.get_many_if, []

    def racing(requests, versions):
        calls.append(1)
        if len(calls) == 1:  # another writer replaces the shard before the first read
            other[3] = random_triangles(rng)
        return original(requests, versions)

    kv.get_many_if = racing  # type: ignore[method-assign]
    assert_same(meshes[5], expected)
    assert len(calls) >= 3  # (the manifest read, refused, then manifest and fragments again)
