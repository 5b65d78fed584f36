"""shardvol.precomputed.segment_properties: generated documents read and written back, and
what shardvol writes checked against the specification.

Oracle: neither neuroglancer's Python package nor CloudVolume reads or writes segment
properties (only neuroglancer's JavaScript client does), so the JSON shardvol writes is
checked by ``spec_problems`` below, written from the specification
(neuroglancer-precomputed-segment_properties.md) and the checks of neuroglancer's parser
(``parseInlinePropertyMap`` in src/datasource/precomputed/frontend.ts), and documents
generated here from the specification are read and written back unchanged.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from shardvol.errors import InfoError
from shardvol.kvstore import open_store
from shardvol.precomputed.segment_properties import (
    SegmentProperties,
    read_segment_properties,
    write_segment_properties,
)

NUMBER_TYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32"]


def memory():
    return open_store(f"memory://segment-properties-{uuid.uuid4().hex}")


# -- the specification's rules -------------------------------------------------------------


def spec_problems(doc) -> list[str]:
    """What in a segment properties info breaks the specification (empty: nothing)."""
    problems = []
    if not isinstance(doc, dict) or doc.get("@type") != "neuroglancer_segment_properties":
        return ["@type"]
    inline = doc.get("inline")
    if inline is None:
        return problems
    ids = inline.get("ids")
    if not isinstance(ids, list) or not all(
            isinstance(i, str) and i.isdigit() and int(i) < 2**64 for i in ids):
        return ["ids must be base-10 uint64 strings"]
    if len(set(map(int, ids))) != len(ids):
        problems.append("ids not unique")
    seen_ids, seen_types = set(), []
    for p in inline.get("properties", []):
        if not isinstance(p.get("id"), str) or p["id"] in seen_ids:
            problems.append(f"id {p.get('id')!r}")
        seen_ids.add(p.get("id"))
        kind = p.get("type")
        if kind not in ("label", "description", "string", "tags", "number"):
            problems.append(f"type {kind!r}")
            continue
        if kind in ("label", "description", "tags") and kind in seen_types:
            problems.append(f"second {kind}")
        seen_types.append(kind)
        if kind == "tags" and "description" in p:
            problems.append("description of tags")
        if kind != "tags" and ("tags" in p or "tag_descriptions" in p):
            problems.append("tags outside tags")
        values = p.get("values")
        if not isinstance(values, list) or len(values) != len(ids):
            problems.append(f"{p['id']}: values length")
            continue
        if kind == "tags":
            tags = p.get("tags")
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                problems.append("tags must be strings")
                continue
            if any(" " in t or t.startswith("#") for t in tags):
                problems.append("tag with a space or '#'")
            descs = p.get("tag_descriptions")
            if descs is not None and len(descs) != len(tags):
                problems.append("tag_descriptions length")
            problems.extend(
                f"tag indices {v}" for v in values
                if not all(isinstance(t, int) and 0 <= t < len(tags) for t in v)
                or v != sorted(set(v)))
        elif kind == "number":
            dtype = p.get("data_type")
            if dtype not in NUMBER_TYPES:
                problems.append(f"data_type {dtype!r}")
                continue
            for v in values:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    problems.append(f"number {v!r}")
                elif dtype != "float32" and not (isinstance(v, int) and
                                                 np.iinfo(dtype).min <= v <= np.iinfo(dtype).max):
                    problems.append(f"{v!r} is not {dtype}")
        elif not all(isinstance(v, str) for v in values):
            problems.append(f"{p['id']}: values must be strings")
    return problems


# -- generated data ------------------------------------------------------------------------


def random_words(rng: np.random.Generator, count: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzé_-"))
    return ["".join(rng.choice(letters, int(rng.integers(0, 12)))) for _ in range(count)]


def random_numbers(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    if dtype == "float32":
        scale = 10.0 ** rng.integers(-30, 30, n)
        return (rng.standard_normal(n) * scale).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)


def random_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    ids = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    return rng.permutation(ids)


def random_props(seed: int) -> tuple[SegmentProperties, dict]:
    """Properties built with the keyword API, and the columns they were built from."""
    rng = np.random.default_rng(seed)
    ids = random_ids(rng, int(rng.integers(0, 40)))
    n = len(ids)
    tag_names = [f"t{i}" for i in range(int(rng.integers(1, 6)))]
    tags = {int(i): [str(t) for t in rng.choice(
                tag_names, int(rng.integers(0, len(tag_names) + 1)), replace=False)]
            for i in ids if rng.random() < 0.6}
    cols = {
        "labels": random_words(rng, n),
        "descriptions": random_words(rng, n),
        "strings": {f"s{i}": random_words(rng, n) for i in range(int(rng.integers(0, 3)))},
        "numbers": {f"n_{d}": random_numbers(rng, d, n) for d in NUMBER_TYPES},
        "tags": tags,
        "tag_descriptions": {t: f"about {t}" for t in tag_names},
        "property_descriptions": {"n_uint8": "a small number", "labels": "x"}
        if seed % 2 else {"n_uint8": "a small number"},
    }
    if seed % 2:
        cols["strings"]["labels"] = random_words(rng, n)  # a string property named "labels"
    return SegmentProperties(ids, **cols), {"ids": ids, **cols}


@pytest.mark.parametrize("seed", range(6))
def test_written_json_meets_the_spec_and_holds_the_values(seed):
    props, cols = random_props(seed)
    kv = memory()
    write_segment_properties(kv, props)
    doc = json.loads(kv.get("info"))
    assert spec_problems(doc) == []
    inline = doc["inline"]
    assert inline["ids"] == [str(i) for i in cols["ids"].tolist()]
    by_id = {p["id"]: p for p in inline["properties"]}
    assert by_id["label"]["type"] == "label"
    assert by_id["label"]["values"] == cols["labels"]
    assert by_id["description"]["values"] == cols["descriptions"]
    for name, values in cols["strings"].items():
        assert by_id[name] == {"id": name, "type": "string", "values": values,
                               **({"description": "x"} if name == "labels" else {})}
    for name, values in cols["numbers"].items():
        p = by_id[name]
        assert p["data_type"] == values.dtype.name
        # JSON numbers converted to the data type (as neuroglancer does) give the values back
        np.testing.assert_array_equal(np.array(p["values"], dtype=p["data_type"]), values)
    assert by_id["n_uint8"]["description"] == "a small number"
    tags = by_id["tags"]
    assert [tags["tag_descriptions"][tags["tags"].index(t)] for t in tags["tags"]] == [
        f"about {t}" for t in tags["tags"]]
    for i, indices in zip(cols["ids"].tolist(), tags["values"]):
        assert sorted(tags["tags"][j] for j in indices) == sorted(cols["tags"].get(i, []))

    back = read_segment_properties(kv)
    np.testing.assert_array_equal(back.ids, cols["ids"])
    assert back.ids.dtype == np.uint64
    assert back.labels == cols["labels"] and back.descriptions == cols["descriptions"]
    assert back.strings == cols["strings"]
    assert back.numbers.keys() == cols["numbers"].keys()
    for name, values in cols["numbers"].items():
        assert back.numbers[name].dtype == values.dtype
        np.testing.assert_array_equal(back.numbers[name], values)
    assert [sorted(t) for t in back.tags] == [
        sorted(cols["tags"].get(i, [])) for i in cols["ids"].tolist()]
    assert back.tag_descriptions == cols["tag_descriptions"]
    assert back.property_description("n_uint8") == "a small number"
    assert back.to_dict() == doc


def random_document(seed: int) -> dict:
    """A segment properties info generated straight from the specification, its properties
    in random order."""
    rng = np.random.default_rng(100 + seed)
    ids = random_ids(rng, int(rng.integers(1, 30)))
    n = len(ids)
    props = [{"id": "name", "type": "label", "values": random_words(rng, n)},
             {"id": "notes", "type": "description", "description": "free text",
              "values": random_words(rng, n)}]
    tags = random_words(rng, 4)
    tags = [f"{t}{i}" for i, t in enumerate(tags)]
    tagged = {"id": "kinds", "type": "tags", "tags": tags,
              "values": [sorted(rng.choice(4, int(rng.integers(0, 5)), replace=False).tolist())
                         for _ in range(n)]}
    if seed % 2:
        tagged["tag_descriptions"] = random_words(rng, 4)
    props.append(tagged)
    props.extend({"id": f"str{i}", "type": "string", "values": random_words(rng, n)}
                 for i in range(3))
    for d in NUMBER_TYPES:
        values = random_numbers(rng, d, n)
        json_values = ([float(str(v)) for v in values] if d == "float32"
                       else values.tolist())
        props.append({"id": f"num_{d}", "type": "number", "data_type": d,
                      "values": json_values})
    order = rng.permutation(len(props))
    return {"@type": "neuroglancer_segment_properties",
            "inline": {"ids": [str(i) for i in ids.tolist()],
                       "properties": [props[i] for i in order]}}


@pytest.mark.parametrize("seed", range(6))
def test_reads_generated_documents_and_writes_them_back_unchanged(seed):
    doc = random_document(seed)
    assert spec_problems(doc) == []
    kv = memory()
    kv.set("info", json.dumps(doc).encode())
    props = read_segment_properties(kv)
    by_id = {p["id"]: p for p in doc["inline"]["properties"]}
    assert props.ids.tolist() == [int(i) for i in doc["inline"]["ids"]]
    assert props.labels == by_id["name"]["values"]
    assert props.descriptions == by_id["notes"]["values"]
    assert props.property_description("notes") == "free text"
    assert props.strings == {f"str{i}": by_id[f"str{i}"]["values"] for i in range(3)}
    for d in NUMBER_TYPES:
        expected = np.array(by_id[f"num_{d}"]["values"], dtype=d)
        np.testing.assert_array_equal(props.numbers[f"num_{d}"], expected)
        assert props.numbers[f"num_{d}"].dtype == d
    kinds = by_id["kinds"]
    assert props.tag_names == kinds["tags"]
    assert props.tags == [[kinds["tags"][j] for j in v] for v in kinds["values"]]
    if "tag_descriptions" in kinds:
        assert props.tag_descriptions == dict(zip(kinds["tags"], kinds["tag_descriptions"]))
    else:
        assert props.tag_descriptions is None
    assert [p["id"] for p in props.properties] == [p["id"] for p in doc["inline"]["properties"]]

    out = memory()
    write_segment_properties(out, props)
    assert json.loads(out.get("info")) == doc
    assert SegmentProperties(props.ids, props.properties).to_dict() == doc


def test_no_inline_properties():
    kv = memory()
    kv.set("info", b'{"@type": "neuroglancer_segment_properties"}')
    props = read_segment_properties(kv)
    assert len(props) == 0 and props.properties == [] and props.labels is None
    assert props.tags is None and props.numbers == {}


# -- invalid documents ---------------------------------------------------------------------


def base_doc() -> dict:
    return {"@type": "neuroglancer_segment_properties", "inline": {
        "ids": ["1", "2"],
        "properties": [
            {"id": "label", "type": "label", "values": ["a", "b"]},
            {"id": "tags", "type": "tags", "tags": ["x", "y"], "values": [[0, 1], []]},
            {"id": "n", "type": "number", "data_type": "uint8", "values": [1, 2]},
        ]}}


def changed(edit) -> dict:
    doc = base_doc()
    edit(doc["inline"], doc["inline"]["properties"])
    return doc


BAD = [
    ("ids must be unique", lambda i, p: i.update(ids=["1", "1"])),
    ("ids\\[1\\] must be a base-10", lambda i, p: i.update(ids=["1", 2])),
    ("ids\\[0\\] must be a base-10", lambda i, p: i.update(ids=["-1", "2"])),
    ("outside the uint64 range", lambda i, p: i.update(ids=["1", str(2**64)])),
    ("3 values for 2 ids", lambda i, p: p[0].update(values=["a", "b", "c"])),
    ("values of a label property must be strings", lambda i, p: p[0].update(values=["a", 1])),
    ("a second 'label'", lambda i, p: p.append({"id": "l2", "type": "label",
                                                  "values": ["", ""]})),
    ("used twice", lambda i, p: p.append({"id": "n", "type": "string", "values": ["", ""]})),
    ("'type' must be one of", lambda i, p: p[0].update(type="name")),
    ("'id' must be a string", lambda i, p: p[0].pop("id")),
    ("tag index outside", lambda i, p: p[1].update(values=[[0, 2], []])),
    ("increasing order", lambda i, p: p[1].update(values=[[1, 0], []])),
    ("increasing order", lambda i, p: p[1].update(values=[[0, 0], []])),
    ("array of tag indices", lambda i, p: p[1].update(values=[[0.5], []])),
    ("'tags' must be an array of strings", lambda i, p: p[1].pop("tags")),
    ("lists a tag twice", lambda i, p: p[1].update(tags=["x", "x"])),
    ("'tag_descriptions' must be 2 strings", lambda i, p: p[1].update(tag_descriptions=["d"])),
    ("absent for tags", lambda i, p: p[1].update(description="d")),
    ("only for tags", lambda i, p: p[0].update(tags=["x"])),
    ("only for numbers", lambda i, p: p[0].update(data_type="uint8")),
    ("'data_type' must be one of", lambda i, p: p[2].update(data_type="uint64")),
    ("'data_type' must be one of", lambda i, p: p[2].pop("data_type")),
    ("outside the uint8 range", lambda i, p: p[2].update(values=[1, 256])),
    ("not an integer", lambda i, p: p[2].update(values=[1, 2.5])),
    ("must be a finite number", lambda i, p: p[2].update(values=[1, True])),
    ("must be a finite number", lambda i, p: p[2].update(values=[1, "2"])),
    ("inline.ids must be a JSON array", lambda i, p: i.pop("ids")),
    ("inline.properties must be a JSON array", lambda i, p: i.update(properties={})),
]


@pytest.mark.parametrize(("message", "edit"), BAD, ids=[b[0] for b in BAD])
def test_invalid_documents(message, edit):
    doc = changed(edit)
    kv = memory()
    kv.set("info", json.dumps(doc).encode())
    with pytest.raises(InfoError, match=message) as e:
        read_segment_properties(kv)
    assert str(e.value).startswith(f"{kv.url}/info")


@pytest.mark.parametrize(("raw", "message"), [
    (b"{", "not valid JSON"),
    (b"[]", "must be a JSON object"),
    (b'{"@type": "neuroglancer_skeletons"}', "@type"),
    (b'{"@type": "neuroglancer_segment_properties", "inline": []}', "'inline'"),
    (b'{"@type": "neuroglancer_segment_properties", "inline": {"ids": [], "properties": '
     b'[{"id": "f", "type": "number", "data_type": "float32", "values": []}, NaN]}}',
     "not valid JSON|must be a JSON object"),
])
def test_invalid_json(raw, message):
    kv = memory()
    kv.set("info", raw)
    with pytest.raises(InfoError, match=message):
        read_segment_properties(kv)
    with pytest.raises(InfoError, match="no 'info'"):
        read_segment_properties(memory())


def test_float32_values_out_of_range_or_not_finite():
    for values in ([1e39, 0], [-3.5e38, 0]):
        doc = changed(lambda i, p, v=values: p[2].update(data_type="float32", values=v))
        with pytest.raises(InfoError, match="outside the float32 range"):
            SegmentProperties.from_dict(doc)
    largest = float(str(np.finfo(np.float32).max))
    doc = changed(lambda i, p: p[2].update(data_type="float32", values=[largest, 0]))
    assert SegmentProperties.from_dict(doc).numbers["n"][0] == np.finfo(np.float32).max
    with pytest.raises(InfoError, match="finite"):
        SegmentProperties([1], numbers={"f": np.array([np.nan], np.float32)})


def test_keyword_api_checks():
    ids = np.array([4, 5], np.uint64)
    with pytest.raises(InfoError, match="dtype float64"):
        SegmentProperties(ids, numbers={"v": np.array([1.0, 2.0])})
    with pytest.raises(InfoError, match="not in ids"):
        SegmentProperties(ids, tags={6: ["a"]})
    with pytest.raises(InfoError, match="not in tag_names"):
        SegmentProperties(ids, tags=[["a"], ["b"]], tag_names=["a"])
    with pytest.raises(InfoError, match="names no property"):
        SegmentProperties(ids, labels=["a", "b"], property_descriptions={"nope": "x"})
    with pytest.raises(InfoError, match="need tags"):
        SegmentProperties(ids, tag_descriptions={"a": "x"})
    with pytest.raises(InfoError, match="ids must be unique"):
        SegmentProperties(np.array([4, 4], np.uint64))
    with pytest.raises(InfoError, match="must be uint64"):
        SegmentProperties(np.array([-1, 4]))
    with pytest.raises(InfoError, match="2 values for 3 ids"):
        SegmentProperties([1, 2, 3], labels=["a", "b"])
    props = SegmentProperties(ids, tags=[["b", "a"], []], tag_names=["b", "a", "c"])
    assert props.tag_names == ["b", "a", "c"] and props.tags == [["b", "a"], []]
    assert props.properties[0]["values"] == [[0, 1], []]


@pytest.mark.parametrize("tag", ["has space", "#hash", ""])
def test_unusable_tags_are_not_written(tag):
    props = SegmentProperties([1], tags=[[tag]])
    with pytest.raises(InfoError, match="tags must be non-empty"):
        write_segment_properties(memory(), props)
