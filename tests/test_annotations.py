"""Precomputed annotations against neuroglancer's Python package and TensorStore.

* neuroglancer's ``AnnotationWriter`` (2.41.2: unsharded only, one spatial cell) writes every
  geometry type with properties and relationships; shardvol reads them back by id, by
  relationship and by region, compared with the generated columns.
* shardvol writes (sharded and unsharded, several spatial levels); neuroglancer's
  ``AnnotationReader`` (TensorStore kvstores, its own Morton codes for sharded cells) reads
  every index; TensorStore's ``neuroglancer_uint64_sharded`` kvstore reads every sharded
  value, compared byte for byte with encodings built here with ``struct`` from the spec.
* Corrupt values and info documents give shardvol errors naming what is wrong.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from shardvol._ext.morton import compressed_morton_code
from shardvol.errors import (
    AlreadyExistsError,
    ChunkDecodeError,
    InfoError,
    InvalidArgumentError,
    UnsupportedCodecError,
)
from shardvol.kvstore import open_store
from shardvol.precomputed.annotation_index import morton_cells, morton_codes
from shardvol.precomputed.annotations import Annotations

neuroglancer = pytest.importorskip("neuroglancer")
ts = pytest.importorskip("tensorstore")
from neuroglancer.read_precomputed_annotations import AnnotationReader  # noqa: E402
from neuroglancer.write_annotations import AnnotationWriter  # noqa: E402

TYPES = ["point", "line", "axis_aligned_bounding_box", "ellipsoid"]
# neuroglancer 2.41.2's writer misplaces a uint32 that follows a 4-byte property (it pads it
# to a multiple of 3 bytes), so uint32 only comes first here (see the report).
PROPS_A = [
    {"id": "score", "type": "float32", "description": "how sure"},
    {"id": "depth", "type": "int32"},
    {"id": "lane", "type": "uint16"},
    {"id": "tilt", "type": "int16"},
    {"id": "kind", "type": "uint8", "enum_values": [0, 1, 2], "enum_labels": ["a", "b", "c"]},
    {"id": "delta", "type": "int8"},
    {"id": "color", "type": "rgb"},
    {"id": "tint", "type": "rgba"},
]
PROPS_B = [{"id": "count", "type": "uint32"}, {"id": "lane", "type": "uint16"},
           {"id": "tint", "type": "rgba"}, {"id": "delta", "type": "int8"}]
FORMATS = {"uint32": "<I", "int32": "<i", "float32": "<f", "uint16": "<H", "int16": "<h",
           "uint8": "<B", "int8": "<b", "rgb": "<3B", "rgba": "<4B"}
SIZE = {"uint32": 4, "int32": 4, "float32": 4, "uint16": 2, "int16": 2}
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1,
            "hash": "murmurhash3_x86_128", "minishard_bits": 2, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
SPATIAL_SHARDING = {**SHARDING, "hash": "identity", "preshift_bits": 0, "data_encoding": "raw"}
DIMS = {"x": [4e-9, "m"], "y": [4e-9, "m"], "z": [4e-8, "m"]}


def columns(kind: str, props: list[dict], seed: int, n: int = 300, rank: int = 3) -> dict:
    """Random annotations in [0, 100)^rank with every property and two relationships."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 100, (n, rank))
    if kind == "point":
        geometry = a
    elif kind == "ellipsoid":
        geometry = np.concatenate([a, rng.uniform(0, 8, (n, rank))], axis=1)
    else:
        geometry = np.concatenate([a, np.clip(a + rng.normal(0, 10, (n, rank)), 0, 99)], 1)
    values = {}
    for p in props:
        t = p["type"]
        if t in ("rgb", "rgba"):
            values[p["id"]] = rng.integers(0, 256, (n, 3 if t == "rgb" else 4), dtype=np.uint8)
        elif t == "float32":
            values[p["id"]] = rng.normal(0, 100, n).astype(np.float32)
        elif "enum_values" in p:
            values[p["id"]] = rng.choice(p["enum_values"], n).astype(t)
        else:
            info = np.iinfo(t)
            values[p["id"]] = rng.integers(info.min, info.max, n, dtype=t, endpoint=True)
    rels = {name: [rng.choice(40, rng.integers(0, 4), replace=False).astype(np.uint64)
                   for _ in range(n)] for name in ("pre", "post")}
    return {"ids": rng.choice(1 << 50, n, replace=False).astype(np.uint64),
            "geometry": geometry.astype(np.float32), "properties": values, "rels": rels}


# -- an oracle of the spec, independent of shardvol ------------------------------------------


def spec_record(kind_size: int, geometry, props: list[dict], values: dict, i: int) -> bytes:
    """One annotation's record per the spec: geometry, 4-, 2-, 1-byte properties, padding."""
    out = struct.pack(f"<{kind_size}f", *geometry[i])
    for group in (4, 2, 1):
        for p in props:
            if SIZE.get(p["type"], 1) == group:
                v = values[p["id"]][i]
                out += struct.pack(FORMATS[p["type"]], *(v.tolist() if v.ndim else [v.item()]))
    return out + b"\0" * (-len(out) % 4)


def spec_single(cols: dict, props: list[dict], i: int) -> bytes:
    out = spec_record(cols["geometry"].shape[1], cols["geometry"], props, cols["properties"], i)
    for name in ("pre", "post"):
        ids = cols["rels"][name][i].tolist()
        out += struct.pack(f"<I{len(ids)}Q", len(ids), *ids)
    return out


def spec_multiple(blob: bytes, record_size: int) -> dict[int, bytes]:
    """{id: record bytes} of a multiple-annotation encoding, decoded with struct."""
    (count,) = struct.unpack_from("<Q", blob)
    assert len(blob) == 8 + count * (record_size + 8)
    ids = struct.unpack_from(f"<{count}Q", blob, 8 + count * record_size)
    return {k: blob[8 + i * record_size: 8 + (i + 1) * record_size] for i, k in enumerate(ids)}


def meets(kind: str, g: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether one annotation meets the closed box [lo, hi] (plain Python, per annotation)."""
    g = g.astype(np.float64)
    r = len(lo)
    if kind == "point":
        return all(lo[d] <= g[d] <= hi[d] for d in range(r))
    if kind == "axis_aligned_bounding_box":
        return all(min(g[d], g[r + d]) <= hi[d] and max(g[d], g[r + d]) >= lo[d]
                   for d in range(r))
    if kind == "ellipsoid":
        total = 0.0
        for d in range(r):
            c, rad = g[d], abs(g[r + d])
            gap = min(max(c, lo[d]), hi[d]) - c
            if rad == 0:
                if gap:
                    return False
            else:
                total += (gap / rad) ** 2
        return total <= 1
    t0, t1 = 0.0, 1.0  # Liang-Barsky clipping of the segment
    for d in range(r):
        a, step = g[d], g[r + d] - g[d]
        for p, q in ((-step, a - lo[d]), (step, hi[d] - a)):
            if p == 0:
                if q < 0:
                    return False
            elif p < 0:
                t0 = max(t0, q / p)
            else:
                t1 = min(t1, q / p)
    return t0 <= t1


def check_columns(got, cols: dict, rows: np.ndarray, relationships: bool) -> None:
    """``got`` holds exactly annotations ``rows`` of ``cols`` (any order)."""
    order = np.argsort(got.ids)
    want = rows[np.argsort(cols["ids"][rows])]
    np.testing.assert_array_equal(got.ids[order], cols["ids"][want])
    np.testing.assert_array_equal(got.geometry[order], cols["geometry"][want])
    for name, v in cols["properties"].items():
        assert got.properties[name].dtype == v.dtype
        np.testing.assert_array_equal(got.properties[name][order], v[want])
    if relationships:
        for name, lists in cols["rels"].items():
            assert [x.tolist() for x in np.array(got.relationships[name], object)[order]] == \
                [lists[i].tolist() for i in want]


def check_reads(ann: Annotations, kind: str, cols: dict, seed: int) -> None:
    """By id, by relationship, by region and all, against the columns."""
    n = len(cols["ids"])
    check_columns(ann.get_many(cols["ids"]), cols, np.arange(n), relationships=True)
    one = ann.get(int(cols["ids"][7]))
    assert one is not None
    assert one.relationships["post"].tolist() == cols["rels"]["post"][7].tolist()
    assert ann.get(int(cols["ids"].max()) + 1) is None
    for name, lists in cols["rels"].items():
        for seg in (0, 3, 17, 39, 1000):
            rows = np.array([i for i in range(n) if seg in lists[i].tolist()], np.int64)
            check_columns(ann.by_relationship(name, seg), cols, rows, relationships=False)
    check_columns(ann.all(), cols, np.arange(n), relationships=False)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        lo = rng.uniform(-10, 90, 3)
        hi = lo + rng.uniform(0, 40, 3)
        rows = np.array([i for i in range(n) if meets(kind, cols["geometry"][i], lo, hi)],
                        np.int64)
        check_columns(ann.in_region(lo, hi), cols, rows, relationships=False)


# -- neuroglancer's writer, read by shardvol ---------------------------------------------------


@pytest.mark.parametrize("kind", TYPES)
def test_reads_neuroglancer_writer(tmp_path, kind):
    props = PROPS_A if kind in ("point", "ellipsoid") else PROPS_B
    cols = columns(kind, props, seed=TYPES.index(kind))
    space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[4, 4, 40])
    writer = AnnotationWriter(space, kind, relationships=["pre", "post"],
                              properties=[neuroglancer.AnnotationPropertySpec(**p) for p in props])
    add = getattr(writer, "add_point" if kind == "point" else f"add_{kind}")
    r = 3
    for i, k in enumerate(cols["ids"].tolist()):
        g = cols["geometry"][i].tolist()
        kw = {p["id"]: cols["properties"][p["id"]][i] for p in props}
        kw.update({name: lists[i].tolist() for name, lists in cols["rels"].items()})
        if kind == "point":
            add(g, id=k, **kw)
        else:
            add(g[:r], g[r:], id=k, **kw)
    writer.write(tmp_path / "ann")
    ann = Annotations(f"file://{tmp_path}/ann")
    assert (ann.type, ann.rank, ann.relationships) == (kind, 3, ("pre", "post"))
    assert {p.id: p.type for p in ann.properties} == {p["id"]: p["type"] for p in props}
    check_reads(ann, kind, cols, seed=11)


# -- shardvol's writer, read by neuroglancer's reader and TensorStore --------------------------


def write_shardvol(url: str, kind: str, cols: dict, props: list[dict], sharded: bool,
                   spatial="auto") -> Annotations:
    writer = Annotations.create(
        url, annotation_type=kind.upper(), dimensions=DIMS, lower_bound=[0, 0, 0],
        upper_bound=[100, 100, 100], properties=props, relationships=["pre", "post"],
        by_id_sharding=SHARDING if sharded else None,
        relationship_sharding=SHARDING if sharded else None,
        spatial=spatial, spatial_limit=20,
        spatial_sharding=SPATIAL_SHARDING if sharded else None)
    return writer.write(cols["ids"], cols["geometry"], cols["properties"], cols["rels"])


def ng_annotation(a, kind: str) -> tuple:
    if kind == "point":
        return tuple(np.asarray(a.point).tolist())
    second = a.radii if kind == "ellipsoid" else a.point_b
    first = a.center if kind == "ellipsoid" else a.point_a
    return (*np.asarray(first).tolist(), *np.asarray(second).tolist())


@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
@pytest.mark.parametrize("kind", TYPES)
def test_neuroglancer_reads_shardvol(tmp_path, kind, sharded):
    props = PROPS_A if kind in ("line", "ellipsoid") else PROPS_B
    cols = columns(kind, props, seed=20 + TYPES.index(kind))
    ann = write_shardvol(f"file://{tmp_path}", kind, cols, props, sharded)
    assert len(ann.info.spatial) > 1
    check_reads(ann, kind, cols, seed=12)

    reader = AnnotationReader(f"file://{tmp_path}/")
    names = [p["id"] for p in props]
    by_name = {p.id: i for i, p in enumerate(reader.properties)}
    for i, k in enumerate(cols["ids"].tolist()):
        a = reader.by_id[k]
        assert ng_annotation(a, kind) == tuple(cols["geometry"][i].tolist())
        for name in names:
            np.testing.assert_array_equal(a.props[by_name[name]], cols["properties"][name][i])
        assert [[int(x) for x in s] for s in a.segments] == [cols["rels"][r][i].tolist()
                                                    for r in ("pre", "post")]
    for r, lists in cols["rels"].items():
        for seg in range(40):
            want = sorted(int(cols["ids"][i]) for i in range(len(lists))
                          if seg in lists[i].tolist())
            got = sorted(int(a.id) for a in reader.relationships[r][seg]) if want else []
            assert got == want
    # every cell of every level: each annotation is found, each point in exactly one cell
    seen: list[int] = []
    for level, index in zip(ann.info.spatial, reader.spatial):
        for cell in np.ndindex(*level.grid_shape):
            if cell in index:
                seen += [int(a.id) for a in index[cell]]
    assert set(seen) == set(cols["ids"].tolist())
    if kind == "point":
        assert len(seen) == len(cols["ids"])


def test_tensorstore_reads_sharded_values_byte_for_byte(tmp_path):
    kind, props = "axis_aligned_bounding_box", PROPS_A
    cols = columns(kind, props, seed=5)
    ann = write_shardvol(f"file://{tmp_path}", kind, cols, props, sharded=True)

    def kvstore(key: str, sharding: dict):
        return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "metadata": sharding,
                                "base": f"file://{tmp_path}/{key}/"}).result()

    def read_all(kv) -> dict[int, bytes]:
        return {struct.unpack(">Q", k)[0]: kv[k] for k in kv.list().result()}

    by_id = read_all(kvstore("by_id", SHARDING))
    assert by_id == {int(k): spec_single(cols, props, i) for i, k in enumerate(cols["ids"])}
    size = len(spec_record(6, cols["geometry"], props, cols["properties"], 0))
    records = {int(k): spec_record(6, cols["geometry"], props, cols["properties"], i)
               for i, k in enumerate(cols["ids"])}
    for r in ("pre", "post"):
        lists = cols["rels"][r]
        got = {seg: spec_multiple(v, size) for seg, v in read_all(kvstore(f"rel_{r}", SHARDING))
               .items()}
        want = {seg: {int(cols["ids"][i]): records[int(cols["ids"][i])]
                      for i in range(len(lists)) if seg in lists[i].tolist()}
                for seg in {s for x in lists for s in x.tolist()}}
        assert got == want
    stored: dict[int, bytes] = {}
    for level in ann.info.spatial:
        for code, blob in read_all(kvstore(level.key, SPATIAL_SHARDING)).items():
            assert code < np.prod(level.grid_shape)
            stored.update(spec_multiple(blob, size))
    assert stored == records


def test_morton_codes_match_the_3d_kernel():
    rng = np.random.default_rng(3)
    for grid in ([1, 1, 1], [2, 8, 1], [5, 3, 17], [64, 64, 8]):
        cells = np.stack([rng.integers(0, n, 50) for n in grid], axis=1)
        codes = morton_codes(cells, grid)
        np.testing.assert_array_equal(codes, compressed_morton_code(cells, grid))
        np.testing.assert_array_equal(morton_cells(codes, grid), cells)


def test_explicit_levels_rank_2_and_overwrite():
    rng = np.random.default_rng(8)
    ids = np.arange(1, 401, dtype=np.uint64)
    geometry = rng.uniform(0, 64, (400, 2)).astype(np.float32)
    url = "memory://annotations-explicit"
    spatial = [{"chunk_size": [64, 64], "limit": 10},
               {"chunk_size": [16, 16], "limit": 10, "sharding": SPATIAL_SHARDING}]
    ann = Annotations.create(url, annotation_type="point", dimensions={"a": [1, ""], "b": [1, ""]},
                             lower_bound=[0, 0], upper_bound=[64, 64],
                             spatial=spatial).write(ids, geometry)
    assert [s.grid_shape for s in ann.info.spatial] == [(1, 1), (4, 4)]
    assert ann.info.spatial[1].limit >= 10
    np.testing.assert_array_equal(ann.all().ids, ids)
    box = ann.in_region([10, 20], [30, 50])
    inside = np.all((geometry >= [10, 20]) & (geometry <= [30, 50]), axis=1)
    np.testing.assert_array_equal(box.ids, ids[inside])
    with pytest.raises(AlreadyExistsError):
        Annotations.create(url, annotation_type="point", dimensions={"a": [1, ""]},
                           lower_bound=[0], upper_bound=[1])
    writer = Annotations.create(url, annotation_type="point", overwrite=True,
                                dimensions={"a": [1, ""], "b": [1, ""]}, lower_bound=[0, 0],
                                upper_bound=[64, 64])
    again = writer.write(ids[:5], geometry[:5])
    np.testing.assert_array_equal(again.all().ids, ids[:5])
    assert again.get(int(ids[10])) is None  # the old indexes are gone


@pytest.mark.parametrize("bad", [
    ({"geometry": np.zeros((3, 3))}, "geometry"),
    ({"geometry": np.full((3, 2), np.nan)}, "geometry"),
    ({"properties": {"score": [1.0, 2.0, 3.0], "kind": [0, 1, 256]}}, "kind"),
    ({"ids": [1, 1, 2]}, "unique"),
    ({"properties": {"score": [1.0, 2.0, 3.0], "kind": [0, 1, 2], "extra": [1]}}, "extra"),
    ({"properties": {"score": [1.0, 2.0], "kind": [0, 1, 2]}}, "score"),
])
def test_bad_columns(bad):
    changes, word = bad
    writer = Annotations.create("memory://annotations-bad-columns", annotation_type="point",
                                dimensions={"x": [1, "m"], "y": [1, "m"]}, lower_bound=[0, 0],
                                upper_bound=[1, 1], properties=[{"id": "score",
                                                                 "type": "float32"},
                                                                {"id": "kind", "type": "uint8"}])
    args = {"ids": [1, 2, 3], "geometry": np.zeros((3, 2)),
            "properties": {"score": [1, 2, 3], "kind": [0, 1, 2]}}
    args.update(changes)
    with pytest.raises(InvalidArgumentError, match=word):
        writer.write(args["ids"], args["geometry"], args["properties"])


# -- corrupt input -----------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path):
    props = PROPS_B
    cols = columns("line", props, seed=9, n=60)
    write_shardvol(f"file://{tmp_path}", "line", cols, props, sharded=False)
    return tmp_path, cols


def test_truncated_by_id_record(written):
    path, cols = written
    k = int(cols["ids"][0])
    blob = (path / "by_id" / str(k)).read_bytes()
    (path / "by_id" / str(k)).write_bytes(blob[:20])
    with pytest.raises(ChunkDecodeError, match=rf"by_id id {k}: 20 bytes are shorter"):
        Annotations(str(path)).get(k)
    (path / "by_id" / str(k)).write_bytes(blob[:-3])
    with pytest.raises(ChunkDecodeError, match=rf"by_id id {k}: .*(truncated|only)"):
        Annotations(str(path)).get(k)
    (path / "by_id" / str(k)).write_bytes(blob + b"\0")
    with pytest.raises(ChunkDecodeError, match="1 bytes follow"):
        Annotations(str(path)).get(k)


def test_count_past_the_end(written):
    path, _ = written
    for name in ("rel_pre/5", "spatial0/0_0_0"):
        f = path / name
        blob = bytearray(f.read_bytes())
        blob[:8] = struct.pack("<Q", struct.unpack_from("<Q", blob)[0] + 1)
        f.write_bytes(bytes(blob))
    ann = Annotations(str(path))
    with pytest.raises(ChunkDecodeError, match=r"rel_pre id 5: a count of \d+ annotations"):
        ann.by_relationship("pre", 5)
    with pytest.raises(ChunkDecodeError, match=r"spatial0/0_0_0: a count of"):
        ann.all()
    (path / "rel_pre" / "5").write_bytes(b"\1\0\0")
    with pytest.raises(ChunkDecodeError, match="cannot hold an annotation count"):
        ann.by_relationship("pre", 5)


@pytest.mark.parametrize("edit, error, word", [
    (lambda d: d.update(annotation_type="SPHERE"), InfoError, "annotation_type"),
    (lambda d: d.update(annotation_type="POLYLINE"), UnsupportedCodecError, "POLYLINE"),
    (lambda d: d["properties"][0].update(type="float64"), InfoError, r"properties\[0\].*type"),
    (lambda d: d["properties"][0].update(id="Bad"), InfoError, "id must match"),
    (lambda d: d["properties"].append({"id": "e", "type": "rgb", "enum_values": [1],
                                       "enum_labels": ["x"]}), InfoError, "enum_values"),
    (lambda d: d.update({"@type": "neuroglancer_annotations_v2"}), InfoError, "@type"),
    (lambda d: d["spatial"][0].update(chunk_size=[1, 0, 1]), InfoError, r"chunk_size\[1\]"),
    (lambda d: d["by_id"].update(sharding={"@type": "x"}), InfoError, "by_id.*sharding"),
    (lambda d: d.pop("by_id"), InfoError, "'by_id' is missing"),
])
def test_bad_info(written, edit, error, word):
    path, _ = written
    doc = json.loads((path / "info").read_text())
    edit(doc)
    (path / "info").write_text(json.dumps(doc))
    with pytest.raises(error, match=word):
        Annotations(f"file://{path}")


def test_index_keys_relative_to_the_info(written):
    path, cols = written
    (path / "by_id").rename(path.parent / f"{path.name}_by_id")
    doc = json.loads((path / "info").read_text())
    doc["by_id"]["key"] = f"../{path.name}_by_id"
    (path / "info").write_text(json.dumps(doc))
    k = int(cols["ids"][3])
    got = Annotations(f"file://{path}").get(k)
    assert got is not None and got.geometry.tolist() == cols["geometry"][3].tolist()
    doc["by_id"]["key"] = "../../../up"
    store = open_store("memory://annotations-climb/a")
    store.set("info", json.dumps(doc).encode())
    with pytest.raises(InfoError, match="climbs above"):
        Annotations(store)
    doc["by_id"]["key"] = "../../other-bucket/x"  # (the bucket is the root: not left)
    store.set("info", json.dumps(doc).encode())
    with pytest.raises(InfoError, match="climbs above"):
        Annotations(store)


def test_no_info_and_not_json(tmp_path):
    with pytest.raises(InfoError, match="no 'info'"):
        Annotations(str(tmp_path))
    (tmp_path / "info").write_text("{not json")
    with pytest.raises(InfoError, match="not valid JSON"):
        Annotations(str(tmp_path))


def test_shardvol_info_describes_a_collection(tmp_path, capsys):
    from shardvol.cli import main

    url = str(tmp_path / "notes")
    cols = columns("point", PROPS_B, seed=21, n=57)
    write_shardvol(url, "point", cols, PROPS_B, sharded=True)
    assert main(["info", url]) == 0
    out = capsys.readouterr().out
    assert "neuroglancer precomputed annotations (point)" in out
    assert f"properties:    {', '.join(p['id'] for p in PROPS_B)}" in out
    assert "relationships: pre, post" in out and "stored:        57 annotations" in out


def test_levels_left_empty_zero_annotations_and_a_property_named_geometry(tmp_path):
    levels = [{"chunk_size": [100, 100, 100], "limit": 1000},
              {"chunk_size": [50, 50, 50], "limit": 1000}]  # (all go to the first)
    rng = np.random.default_rng(41)
    points = rng.uniform(0, 100, (20, 3))
    ann = Annotations.create(str(tmp_path / "a"), annotation_type="point", dimensions=DIMS,
                             lower_bound=[0, 0, 0], upper_bound=[100, 100, 100],
                             spatial=levels).write(np.arange(1, 21), points)
    assert len(ann.info.spatial) == 2 and sorted(ann.all().ids.tolist()) == list(range(1, 21))
    empty = Annotations.create(str(tmp_path / "b"), annotation_type="point", dimensions=DIMS,
                               lower_bound=[0, 0, 0], upper_bound=[100, 100, 100]
                               ).write(np.zeros(0, np.uint64), np.zeros((0, 3)))
    assert len(empty.all()) == 0 and empty.get(1) is None
    with pytest.raises(InvalidArgumentError, match="finite"):
        ann.in_region([0, 0, np.nan], [10, 10, 10])

    # neuroglancer's writer takes a property named "geometry"; so does shardvol
    space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="m",
                                         scales=[1e-9, 1e-9, 1e-9])
    writer = AnnotationWriter(space, "point", properties=[
        neuroglancer.AnnotationPropertySpec(id="geometry", type="float32")])
    writer.add_point([1, 2, 3], id=5, geometry=7.0)
    writer.write(str(tmp_path / "c"))
    got = Annotations(str(tmp_path / "c")).get(5)
    assert got is not None and got.properties == {"geometry": 7.0}
    assert got.geometry.tolist() == [1, 2, 3]


def test_a_failed_overwrite_keeps_the_collection(tmp_path):
    url = str(tmp_path / "a")
    rng = np.random.default_rng(42)
    make: dict = {"annotation_type": "point", "dimensions": DIMS, "lower_bound": [0, 0, 0],
                  "upper_bound": [100, 100, 100]}
    Annotations.create(url, **make).write(np.arange(1, 11), rng.uniform(0, 100, (10, 3)))
    with pytest.raises(InvalidArgumentError):  # (checked before anything is cleared)
        Annotations.create(url, overwrite=True, **make).write([1, 1], np.zeros((2, 3)))
    assert len(Annotations(url).all()) == 10


@pytest.mark.parametrize("field", ["lower_bound", "dimensions"])
def test_integers_too_large_for_a_float_are_info_errors(tmp_path, field):
    url = str(tmp_path / "a")
    Annotations.create(url, annotation_type="point", dimensions=DIMS, lower_bound=[0, 0, 0],
                       upper_bound=[100, 100, 100]).write([1], [[1.0, 2.0, 3.0]])
    doc = json.loads((tmp_path / "a" / "info").read_text())
    if field == "lower_bound":
        doc["lower_bound"][0] = 10**400
    else:
        doc["dimensions"]["x"][0] = 10**400
    (tmp_path / "a" / "info").write_text(json.dumps(doc))
    with pytest.raises(InfoError, match="finite number"):
        Annotations(url)
