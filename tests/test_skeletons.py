"""shardvol.precomputed.skeletons against CloudVolume, neuroglancer's Python encoder and
TensorStore's sharded kvstore, on random skeletons, unsharded and sharded; corrupt input.

Oracles: CloudVolume (cloudvolume.datasource.precomputed.skeleton) writes skeletons that
shardvol reads and reads those shardvol writes (compared after CloudVolume applies the
info's transform); ``neuroglancer.skeleton.Skeleton.encode`` gives the expected bytes of
each skeleton, which shardvol's unsharded files and TensorStore's reads of shardvol's
shards (``neuroglancer_uint64_sharded``) must equal byte for byte.
"""

from __future__ import annotations

import json
import struct
import uuid
import warnings

import numpy as np
import pytest

from shardvol.errors import (
    AlreadyExistsError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    MissingChunkError,
)
from shardvol.kvstore import FileStore, open_store
from shardvol.precomputed.segment_properties import SegmentProperties, write_segment_properties
from shardvol.precomputed.skeletons import Skeleton, Skeletons
from shardvol.sharding import ShardingSpec, ShardReader, write_shards

ts = pytest.importorskip("tensorstore")
ng_skeleton = pytest.importorskip("neuroglancer.skeleton")
osteoid = pytest.importorskip("osteoid")

# exact in float32 for the quarter-integer vertices of exact_vertices(): EXACT_TRANSFORM
# applied to them (as readers do), POW2_TRANSFORM both ways (as writers invert it)
EXACT_TRANSFORM = [4, 0, 0, 8, 0, 8, 0, -4, 0, 0, 40, 2]
POW2_TRANSFORM = [4, 0, 0, 8, 0, 0.5, 0, -4, 0, 0, 16, 2]
CV_ATTRIBUTES = [{"id": "radius", "data_type": "float32", "num_components": 1},
                 {"id": "vertex_types", "data_type": "uint8", "num_components": 1}]
MANY_ATTRIBUTES = [{"id": "radius", "data_type": "float32", "num_components": 1},
                   {"id": "color", "data_type": "uint8", "num_components": 3},
                   {"id": "weight", "data_type": "int16", "num_components": 2},
                   {"id": "part", "data_type": "uint32", "num_components": 1}]
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1,
            "hash": "murmurhash3_x86_128", "minishard_bits": 3, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
ONE_SHARD = {**SHARDING, "preshift_bits": 0, "shard_bits": 0}  # CloudVolume writes one shard


def memory(name: str):
    """A new, empty in-memory store."""
    return open_store(f"memory://{name}-{uuid.uuid4().hex}")


def exact_vertices(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.integers(-2000, 2000, (n, 3)) / 4).astype(np.float32)


def random_attributes(rng: np.random.Generator, n: int, attrs: list[dict]) -> dict:
    out = {}
    for a in attrs:
        shape = (n,) if a["num_components"] == 1 else (n, a["num_components"])
        dt = np.dtype(a["data_type"])
        if dt.kind == "f":
            out[a["id"]] = rng.standard_normal(shape).astype(dt)
        else:
            info = np.iinfo(dt)
            out[a["id"]] = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)
    return out


def random_skeleton(rng: np.random.Generator, attrs: list[dict], exact: bool = False,
                    n: int | None = None) -> Skeleton:
    n = int(rng.integers(0, 60)) if n is None else n
    vertices = exact_vertices(rng, n) if exact else (
        rng.standard_normal((n, 3)) * 1000).astype(np.float32)
    m = int(rng.integers(0, 2 * n)) if n else 0
    edges = rng.integers(0, max(n, 1), (m, 2)).astype(np.uint32)
    return Skeleton(vertices, edges, random_attributes(rng, n, attrs))


def random_labels(rng: np.random.Generator, count: int) -> list[int]:
    labels = {int(x) for x in rng.integers(0, 2**63, count, dtype=np.uint64)}
    return sorted(labels | {0, 2**64 - 1})


def assert_same(a: Skeleton, b: Skeleton) -> None:
    np.testing.assert_array_equal(a.vertices, b.vertices)
    assert a.vertices.dtype == b.vertices.dtype == np.float32
    np.testing.assert_array_equal(a.edges, b.edges)
    assert a.edges.dtype == b.edges.dtype == np.uint32
    assert sorted(a.attributes) == sorted(b.attributes)
    for k in a.attributes:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k])


# -- CloudVolume ---------------------------------------------------------------------------


def cv_source(path: str, info_changes: dict | None = None):
    """CloudVolume's skeleton source on a local directory (its info updated first)."""
    from cloudvolume.datasource.precomputed.skeleton import PrecomputedSkeletonSource

    url = f"file://{path}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = PrecomputedSkeletonSource.from_cloudpath(url, progress=False)
        if info_changes:
            src.meta.info.update(info_changes)
            src.meta.commit_info()
            src = PrecomputedSkeletonSource.from_cloudpath(url, progress=False)
    return src


def cv_get(src, label: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return src.get(label)


def cv_skeleton(skel: Skeleton, label: int):
    from cloudvolume import Skeleton as CVSkeleton

    return CVSkeleton(skel.vertices, skel.edges, skel.radius, skel.vertex_types, segid=label)


@pytest.mark.parametrize("sharding", [None, ONE_SHARD], ids=["unsharded", "sharded"])
def test_shardvol_reads_cloudvolume(tmp_path, sharding):
    rng = np.random.default_rng(1)
    path = str(tmp_path / "skeletons")
    src = cv_source(path, {"transform": EXACT_TRANSFORM, "sharding": sharding})
    labels = random_labels(rng, 25)
    written = {k: random_skeleton(rng, CV_ATTRIBUTES, exact=True) for k in labels}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src.upload([cv_skeleton(s, k) for k, s in written.items()])
    skels = Skeletons(FileStore(path))
    assert skels.sharding == (None if sharding is None else ShardingSpec.from_dict(sharding))
    got = skels.get_many([*labels, 12345])
    assert sorted(got) == labels
    for k in labels:
        cv = cv_get(src, k)
        np.testing.assert_array_equal(got[k].vertices, cv.vertices)
        np.testing.assert_array_equal(got[k].edges, cv.edges)
        np.testing.assert_array_equal(got[k].radius, cv.radius)
        np.testing.assert_array_equal(got[k]["vertex_types"], cv.vertex_types)
        assert sorted(got[k].attributes) == ["radius", "vertex_types"]
    assert skels.labels().tolist() == labels
    assert all(k in skels for k in labels) and 12345 not in skels
    if sharding is None:  # CloudVolume stored LABEL.gz files
        assert (tmp_path / "skeletons" / f"{labels[0]}.gz").exists()


@pytest.mark.parametrize("sharding", [None, SHARDING], ids=["unsharded", "sharded"])
@pytest.mark.parametrize("transform", [None, POW2_TRANSFORM], ids=["identity", "scaled"])
def test_cloudvolume_reads_shardvol(tmp_path, sharding, transform):
    rng = np.random.default_rng(2)
    path = str(tmp_path / "skeletons")
    skels = Skeletons.create(path, vertex_attributes=CV_ATTRIBUTES, sharding=sharding,
                             transform=transform)
    labels = random_labels(rng, 30)
    written = {k: random_skeleton(rng, CV_ATTRIBUTES, exact=transform is not None)
               for k in labels}
    half = len(labels) // 2
    skels.put_many({k: written[k] for k in labels[:half]})
    for k in labels[half:]:
        skels[k] = written[k]
    src = cv_source(path)
    for k in labels:
        cv = cv_get(src, k)
        np.testing.assert_array_equal(cv.vertices, written[k].vertices)
        np.testing.assert_array_equal(cv.edges, written[k].edges)
        np.testing.assert_array_equal(cv.radius, written[k].radius)
        np.testing.assert_array_equal(cv.vertex_types, written[k]["vertex_types"])
        assert_same(skels[k], written[k])
    assert skels.labels().tolist() == labels


def test_other_transforms_round_trip_to_float32_rounding():
    rng = np.random.default_rng(16)
    skels = Skeletons.create(memory("skeleton-rounding"), transform=[
        3.8, 0.2, 0, 100.5, 0, 4.1, 0.3, -7, 0.1, 0, 40, 3])
    skel = random_skeleton(rng, [CV_ATTRIBUTES[0]], n=50)
    skels[1] = skel
    np.testing.assert_allclose(skels[1].vertices, skel.vertices, rtol=1e-6, atol=1e-3)


# -- neuroglancer's encoder and TensorStore's sharded kvstore -------------------------------


def ng_bytes(skel: Skeleton, attrs: list[dict]) -> bytes:
    """The encoding of neuroglancer's Python package (vertices as stored: identity)."""
    source = ng_skeleton.SkeletonSource.__new__(ng_skeleton.SkeletonSource)
    source.vertex_attributes = {
        a["id"]: ng_skeleton.VertexAttributeInfo(a["data_type"], a["num_components"])
        for a in attrs}
    return ng_skeleton.Skeleton(skel.vertices, skel.edges, skel.attributes).encode(source)


def test_unsharded_files_are_neuroglancers_encoding(tmp_path):
    rng = np.random.default_rng(3)
    skels = Skeletons.create(str(tmp_path), vertex_attributes=MANY_ATTRIBUTES)
    written = {k: random_skeleton(rng, MANY_ATTRIBUTES) for k in random_labels(rng, 20)}
    written[5] = random_skeleton(rng, MANY_ATTRIBUTES, n=0)
    written[6] = Skeleton(exact_vertices(rng, 3), [], random_attributes(rng, 3, MANY_ATTRIBUTES))
    skels.put_many(written)
    for k, s in written.items():
        assert (tmp_path / str(k)).read_bytes() == ng_bytes(s, MANY_ATTRIBUTES)
        assert_same(skels[k], s)


def test_shardvol_reads_neuroglancers_encoding(tmp_path):
    rng = np.random.default_rng(4)
    skels = Skeletons.create(str(tmp_path), vertex_attributes=MANY_ATTRIBUTES)
    written = {k: random_skeleton(rng, MANY_ATTRIBUTES) for k in random_labels(rng, 20)}
    for k, s in written.items():
        (tmp_path / str(k)).write_bytes(ng_bytes(s, MANY_ATTRIBUTES))
    got = skels.get_many(written)
    for k, s in written.items():
        assert_same(got[k], s)
        assert got[k].color.shape == (len(s.vertices), 3)


def ts_sharded(path: str, spec: dict):
    return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                            "base": {"driver": "file", "path": path + "/"},
                            "metadata": spec}).result()


def test_tensorstore_reads_shardvol_shards(tmp_path):
    rng = np.random.default_rng(5)
    skels = Skeletons.create(str(tmp_path), vertex_attributes=MANY_ATTRIBUTES,
                             sharding=SHARDING)
    labels = random_labels(rng, 200)
    written = {k: random_skeleton(rng, MANY_ATTRIBUTES) for k in labels}
    skels.put_many({k: written[k] for k in labels[:120]})
    skels.put_many({k: written[k] for k in labels[120:]})  # merged into the same shards
    replaced = labels[::7]
    for k in replaced:
        written[k] = random_skeleton(rng, MANY_ATTRIBUTES)
    skels.put_many({k: written[k] for k in replaced})
    kv = ts_sharded(str(tmp_path), SHARDING)
    for k, s in written.items():
        value = kv.read(struct.pack(">Q", k)).result()
        assert value.state == "value"
        assert bytes(value.value) == ng_bytes(s, MANY_ATTRIBUTES), k
    listed = sorted(struct.unpack(">Q", key)[0] for key in kv.list().result())
    assert listed == labels == skels.labels().tolist()
    fresh = Skeletons(str(tmp_path))
    for k, s in fresh.get_many(labels).items():
        assert_same(s, written[k])


def test_shardvol_reads_tensorstore_shards(tmp_path):
    rng = np.random.default_rng(6)
    Skeletons.create(str(tmp_path), vertex_attributes=MANY_ATTRIBUTES, sharding=SHARDING)
    written = {k: random_skeleton(rng, MANY_ATTRIBUTES) for k in random_labels(rng, 100)}
    txn = ts.Transaction()
    kv = ts_sharded(str(tmp_path), SHARDING).with_transaction(txn)
    for k, s in written.items():
        kv[struct.pack(">Q", k)] = ng_bytes(s, MANY_ATTRIBUTES)
    txn.commit_async().result()
    skels = Skeletons(str(tmp_path))
    got = skels.get_many(written)
    assert sorted(got) == sorted(written)
    for k, s in written.items():
        assert_same(got[k], s)


# -- osteoid -------------------------------------------------------------------------------


def test_osteoid_round_trip():
    rng = np.random.default_rng(7)
    skel = random_skeleton(rng, CV_ATTRIBUTES, n=40)
    ost = skel.to_osteoid(segid=9)
    assert ost.id == 9 and ost.space == "physical"
    np.testing.assert_array_equal(ost.radius, skel.radius)
    back = Skeleton.from_osteoid(ost)
    assert_same(back, skel)
    skels = Skeletons.create(memory("osteoid-round-trip"), vertex_attributes=CV_ATTRIBUTES)
    skels[9] = back
    # osteoid's own precomputed encoding of the same skeleton is what shardvol stored
    assert skels.kv.get("9") == ost.to_precomputed()
    assert_same(Skeleton.from_osteoid(osteoid.Skeleton.from_precomputed(
        skels.kv.get("9"), vertex_attributes=CV_ATTRIBUTES)), skel)


def test_from_osteoid_voxel_space_applies_its_transform():
    rng = np.random.default_rng(8)
    vertices = exact_vertices(rng, 10)
    ost = osteoid.Skeleton(vertices, [[0, 1]], transform=np.array(EXACT_TRANSFORM).reshape(3, 4))
    skel = Skeleton.from_osteoid(ost, attributes=["radius"])
    np.testing.assert_array_equal(skel.vertices, ost.physical_space().vertices)
    assert list(skel.attributes) == ["radius"]
    with pytest.raises(InvalidArgumentError, match="no attribute 'color'"):
        Skeleton.from_osteoid(ost, attributes=["color"])


# -- info, create, missing -----------------------------------------------------------------


def test_create_writes_an_info_cloudvolume_reads(tmp_path):
    path = str(tmp_path / "s")
    Skeletons.create(path, vertex_attributes={"radius": "float32", "rgb": ("uint8", 3)},
                     transform=np.array(EXACT_TRANSFORM).reshape(3, 4), sharding=SHARDING,
                     segment_properties="props")
    info = cv_source(path).meta.info
    assert info["@type"] == "neuroglancer_skeletons"
    assert info["transform"] == EXACT_TRANSFORM
    assert info["vertex_attributes"] == [
        {"id": "radius", "data_type": "float32", "num_components": 1},
        {"id": "rgb", "data_type": "uint8", "num_components": 3}]
    assert info["sharding"] == SHARDING and info["segment_properties"] == "props"


def test_create_refuses_to_replace_unless_overwrite(tmp_path):
    rng = np.random.default_rng(9)
    skels = Skeletons.create(str(tmp_path))
    skels[5] = random_skeleton(rng, [CV_ATTRIBUTES[0]])
    with pytest.raises(AlreadyExistsError, match="overwrite"):
        Skeletons.create(str(tmp_path))
    again = Skeletons.create(str(tmp_path), vertex_attributes=CV_ATTRIBUTES, overwrite=True)
    assert again.labels().tolist() == [] and 5 not in again
    assert [a.id for a in again.vertex_attributes] == ["radius", "vertex_types"]


def test_missing_labels():
    skels = Skeletons.create(memory("skeleton-missing"), sharding=SHARDING)
    with pytest.raises(MissingChunkError, match="no skeleton of label 7"):
        skels[7]
    with pytest.raises(KeyError):
        skels[7]
    assert skels.get(7) is None and 7 not in skels and skels.get_many([7, 8]) == {}
    assert skels.labels().tolist() == []


def test_segment_properties_named_by_the_info():
    kv = memory("skeleton-props")
    skels = Skeletons.create(kv, segment_properties="props")
    props = SegmentProperties(np.array([3, 1], np.uint64), labels=["a", "b"])
    write_segment_properties(open_store(kv, "props"), props)
    assert skels.segment_properties == "props"
    assert skels.properties().labels == ["a", "b"]
    assert Skeletons.create(memory("skeleton-no-props")).properties() is None


def test_attribute_access():
    rng = np.random.default_rng(10)
    skel = random_skeleton(rng, MANY_ATTRIBUTES, n=5)
    assert skel.color is skel["color"] is skel.attributes["color"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr(skel, "nope")  # noqa: B009
    with pytest.raises(KeyError, match="nope"):
        skel["nope"]


# -- corrupt input -------------------------------------------------------------------------


@pytest.fixture
def stored():
    """A skeleton directory in memory and a valid encoded skeleton of label 7."""
    rng = np.random.default_rng(11)
    skels = Skeletons.create(memory("skeleton-corrupt"), vertex_attributes=MANY_ATTRIBUTES)
    skel = random_skeleton(rng, MANY_ATTRIBUTES, n=20)
    skels[7] = skel
    return skels, bytearray(skels.kv.get("7"))


def test_truncated_skeletons(stored):
    skels, data = stored
    rng = np.random.default_rng(12)
    for cut in sorted({0, 3, 7, 8, 20, *rng.integers(9, len(data), 20).tolist()}):
        skels.kv.set("7", bytes(data[:cut]))
        with pytest.raises(ChunkDecodeError, match="skeleton 7"):
            skels[7]
    skels.kv.set("7", bytes(data + b"\0"))
    with pytest.raises(ChunkDecodeError, match=r"skeleton 7: .*vertex attributes"):
        skels[7]


def test_counts_past_the_end(stored):
    skels, data = stored
    for n, m in ((21, 0), (0, 1000), (2**32 - 1, 2**32 - 1), (20, 2**31)):
        bad = bytearray(data)
        struct.pack_into("<II", bad, 0, n, m)
        skels.kv.set("7", bytes(bad))
        with pytest.raises(ChunkDecodeError, match="skeleton 7"):
            skels[7]


def test_edge_past_the_vertices(stored):
    skels, data = stored
    n, m = struct.unpack_from("<II", data)
    assert m > 0
    bad = bytearray(data)
    struct.pack_into("<I", bad, 8 + 12 * n + 4 * (2 * m - 1), n)
    skels.kv.set("7", bytes(bad))
    with pytest.raises(ChunkDecodeError, match=r"skeleton 7: edge \d+ .* refers to a vertex"):
        skels[7]


def test_attributes_not_matching_the_info(stored):
    skels, _ = stored
    info = json.loads(skels.kv.get("info"))
    info["vertex_attributes"][1]["num_components"] = 4
    skels.kv.set("info", json.dumps(info).encode())
    with pytest.raises(ChunkDecodeError, match=r"skeleton 7.*vertex attributes"):
        Skeletons(skels.kv)[7]
    info["vertex_attributes"] = info["vertex_attributes"][:2]
    skels.kv.set("info", json.dumps(info).encode())
    with pytest.raises(ChunkDecodeError, match="skeleton 7"):
        Skeletons(skels.kv)[7]


def test_corrupt_values_in_shards(tmp_path):
    rng = np.random.default_rng(13)
    skels = Skeletons.create(str(tmp_path), vertex_attributes=MANY_ATTRIBUTES,
                             sharding=SHARDING)
    good = {k: random_skeleton(rng, MANY_ATTRIBUTES, n=10) for k in (1, 2)}
    skels.put_many(good)
    spec = ShardingSpec.from_dict(SHARDING)
    value = ShardReader(str(tmp_path), spec).get_data(2)
    write_shards(FileStore(str(tmp_path)), spec, {2: value[:-3]})
    with pytest.raises(ChunkDecodeError, match="skeleton 2"):
        Skeletons(str(tmp_path)).get_many([1, 2])


def test_corrupt_compressed_file(tmp_path):
    skels = Skeletons.create(str(tmp_path))
    (tmp_path / "4.gz").write_bytes(np.random.default_rng(14).bytes(50))
    with pytest.raises(ChunkDecodeError, match=r"skeleton 4\.gz"):
        skels[4]


BAD_INFOS = [
    (b"{not json", "not valid JSON"),
    (b"[]", "must be a JSON object"),
    ({"@type": "neuroglancer_mesh"}, "@type"),
    ({"transform": [1, 0, 0]}, "transform must be an array of 12"),
    ({"transform": ["1"] * 12}, "transform"),
    ({"transform": [1e400] * 12}, "transform"),
    ({"vertex_attributes": {}}, "vertex_attributes must be an array"),
    ({"vertex_attributes": [{"id": "", "data_type": "float32", "num_components": 1}]},
     "non-empty"),
    ({"vertex_attributes": [{"id": "a", "data_type": "float64", "num_components": 1}]},
     "data_type"),
    ({"vertex_attributes": [{"id": "a", "data_type": "uint8", "num_components": 0}]},
     "num_components"),
    ({"vertex_attributes": [{"id": "a", "data_type": "uint8", "num_components": 1}] * 2},
     "used twice"),
    ({"sharding": {"@type": "neuroglancer_uint64_sharded_v1"}}, "sharding"),
    ({"segment_properties": 3}, "segment_properties"),
    ({"segment_properties": "../up"}, "segment_properties"),
]


@pytest.mark.parametrize(("change", "message"), BAD_INFOS)
def test_bad_info(change, message):
    kv = memory("skeleton-bad-info")
    doc = {"@type": "neuroglancer_skeletons", "transform": EXACT_TRANSFORM,
           "vertex_attributes": CV_ATTRIBUTES}
    raw = change if isinstance(change, bytes) else json.dumps({**doc, **change}).encode()
    kv.set("info", raw)
    with pytest.raises(InfoError, match=message) as e:
        Skeletons(kv)
    assert str(e.value).startswith(f"{kv.url}/info: ")


def test_no_info():
    with pytest.raises(InfoError, match="no 'info'"):
        Skeletons(memory("skeleton-no-info"))


def test_singular_transform_is_refused():
    with pytest.raises(InfoError, match="not invertible"):
        Skeletons.create(memory("skeleton-singular"), transform=[1, 0, 0, 0] * 3)


def test_writes_are_checked():
    rng = np.random.default_rng(15)
    skels = Skeletons.create(memory("skeleton-write-checks"), vertex_attributes=MANY_ATTRIBUTES)
    skel = random_skeleton(rng, MANY_ATTRIBUTES, n=6)
    bad = [
        (Skeleton(skel.vertices, skel.edges, {**skel.attributes, "extra": skel.radius}),
         "not in the info"),
        (Skeleton(skel.vertices, skel.edges, {"radius": skel.radius}), "missing"),
        (Skeleton(skel.vertices, skel.edges, {**skel.attributes, "color": skel.radius}),
         "shape"),
        (Skeleton(skel.vertices, skel.edges, {**skel.attributes,
                                              "part": np.full(6, -1)}), "not uint32"),
        (Skeleton(skel.vertices, [[0, 6]], skel.attributes), "refers to vertex 6"),
        (skel.to_osteoid(), "expected a Skeleton"),
    ]
    for value, message in bad:
        with pytest.raises(InvalidArgumentError, match=f"skeleton 3: .*{message}"):
            skels.put_many({1: skel, 3: value})
        assert 1 not in skels  # nothing is written when one skeleton is bad
    for label in (-1, True, 2**64, "5", 1.0):
        with pytest.raises(InvalidArgumentError, match="label"):
            skels[label] = skel
    for vertices, edges in (([[0, 0]], []), (skel.vertices, [[0, -1]]), (skel.vertices, [0])):
        with pytest.raises(InvalidArgumentError, match="skeleton"):
            Skeleton(vertices, edges)


def test_labels_of_shards_in_the_obsolete_layout_and_their_overwrite(tmp_path):
    from .test_sharding import split_obsolete

    rng = np.random.default_rng(77)
    attrs = [{"id": "radius", "data_type": "float32", "num_components": 1}]
    skels = Skeletons.create(str(tmp_path), sharding=SHARDING)
    labels = random_labels(rng, 12)
    skels.put_many({k: random_skeleton(rng, attrs) for k in labels})
    split_obsolete(open_store(str(tmp_path)), ShardingSpec.from_dict(SHARDING))
    again = Skeletons(str(tmp_path))
    assert again.labels().tolist() == sorted(labels) and labels[0] in again
    Skeletons.create(str(tmp_path), sharding=SHARDING, overwrite=True)
    assert open_store(str(tmp_path)).list() == ["info"]
    assert Skeletons(str(tmp_path)).labels().tolist() == []
