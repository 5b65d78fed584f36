"""zarr.json parsing, validation and serialisation, checked against zarr-python and TensorStore."""

from __future__ import annotations

import copy
import glob
import json
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol.errors import InfoError, InvalidArgumentError, ShardvolError, UnsupportedCodecError
from shardvol.zarr3 import (
    ArrayMetadata,
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    ZstdCodec,
    create_metadata,
)
from shardvol.zarr3.metadata import ChunkKeyEncoding, fill_value_from_json, fill_value_to_json

TESTDATA = os.path.join(os.path.dirname(__file__), "data", "testdata")
GOLDEN = sorted(
    glob.glob(f"{TESTDATA}/google__neuroglancer__zarr3_from_zarrita/data.zarr/*/zarr.json")
    + glob.glob(f"{TESTDATA}/zarrs__zarrs__sharded_array_write_read/**/array/zarr.json",
                recursive=True)
)

SHARDED = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10, 12],
    "data_type": "uint16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 7,
    "codecs": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [4, 4],
                "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
                ],
                "index_codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "crc32c"},
                ],
                "index_location": "start",
            },
        }
    ],
    "attributes": {"a": 1},
    "dimension_names": ["y", None],
}


def zarr_python_metadata(doc):
    from zarr.core.metadata.v3 import ArrayV3Metadata

    return ArrayV3Metadata.from_dict(copy.deepcopy(doc))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.split("/")[-2])
def test_golden_metadata_round_trip(path):
    with open(path, "rb") as f:
        meta = ArrayMetadata.from_json(f.read(), path)
    again = ArrayMetadata.from_json(meta.to_bytes())
    assert again == meta and again.to_json() == meta.to_json()
    with open(path) as f:
        raw = json.load(f)
    assert list(meta.shape) == raw["shape"] and meta.data_type == raw["data_type"]


def test_sharded_fields_and_zarr_python_agrees():
    meta = ArrayMetadata.from_json(SHARDED)
    assert meta.shape == (10, 12) and meta.dtype == np.uint16 and meta.fill_value == 7
    assert meta.chunk_shape == (8, 8) and meta.inner_chunk_shape == (4, 4)
    assert meta.grid_shape == (2, 2) and meta.dimension_names == ("y", None)
    sharding = meta.sharding
    assert sharding == ShardingCodec(
        (4, 4), (BytesCodec("little"), ZstdCodec(1)), (BytesCodec("little"), Crc32cCodec()), "start"
    )
    # what we write, zarr-python reads with the same meaning
    theirs = zarr_python_metadata(meta.to_json())
    assert theirs.shape == meta.shape and theirs.chunks == (4, 4) and theirs.shards == (8, 8)
    assert theirs.fill_value == 7 and theirs.dimension_names == ("y", None)
    assert json.loads(json.dumps(theirs.to_dict()["codecs"])) == meta.to_json()["codecs"]


def test_tensorstore_metadata_parsed(tmp_path):
    """TensorStore's own serialisation (e.g. a chunk_key_encoding without configuration)."""
    import tensorstore as ts

    doc = copy.deepcopy(SHARDED)
    doc.pop("attributes")
    doc["codecs"][0]["configuration"]["codecs"] = [
        {"name": "transpose", "configuration": {"order": "F"}},
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 3, "shuffle": "bitshuffle"}},
    ]
    path = str(tmp_path / "a")
    ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "metadata": doc},
            create=True).result()
    with open(f"{path}/zarr.json") as f:
        written = json.load(f)
    meta = ArrayMetadata.from_json(written)
    inner = meta.sharding.codecs
    assert inner[0].permutation(2) == (1, 0) and inner[1] == BytesCodec("big")
    assert inner[2] == BloscCodec("lz4", 3, "bitshuffle", 2, 0)
    assert meta.chunk_key_encoding == ChunkKeyEncoding("default", "/")


FILL_CASES = [
    ("float32", "NaN"),
    ("float32", "Infinity"),
    ("float64", "-Infinity"),
    ("float32", "0x3fc00000"),
    ("float16", "0x3c01"),
    ("float64", "0xfff0000000000000"),
    ("float32", -0.0),
    ("float64", 1e300),
    ("float16", 0.5),
    ("int64", -(2**63)),
    ("uint64", 2**64 - 1),
    ("int8", -128),
    ("bool", True),
    ("complex64", [1.5, "NaN"]),
    ("complex128", ["-Infinity", 2.0]),
]


@pytest.mark.parametrize(("dtype", "value"), FILL_CASES)
def test_fill_values_match_zarr_python(dtype, value):
    from zarr.core.dtype import get_data_type_from_json

    zdt = get_data_type_from_json(dtype, zarr_format=3)
    theirs = zdt.from_json_scalar(value, zarr_format=3)
    ours = fill_value_from_json(value, np.dtype(dtype))
    assert ours.dtype == np.dtype(dtype)
    assert np.asarray(ours).tobytes() == np.asarray(theirs, dtype).tobytes()
    expected_json = zdt.to_json_scalar(theirs, zarr_format=3)
    assert fill_value_to_json(ours) == (list(expected_json) if dtype[0] == "c" else expected_json)
    assert (fill_value_from_json(fill_value_to_json(ours), np.dtype(dtype)).tobytes()
            == ours.tobytes())


@pytest.mark.parametrize(
    ("dtype", "value"),
    [("float32", "0x7fc00001"), ("float16", "0x7e01"), ("float64", "0xfff8000000000001")],
)
def test_nan_payloads_kept(dtype, value):
    """Hex fill values keep their exact bits (zarr-python collapses NaN payloads to "NaN")."""
    ours = fill_value_from_json(value, np.dtype(dtype))
    assert np.isnan(ours)
    assert int.from_bytes(np.asarray(ours).tobytes(), "little") == int(value, 16)
    assert fill_value_to_json(ours) == value


@pytest.mark.parametrize(
    ("dtype", "value"),
    [("uint8", 256), ("uint8", -1), ("int16", 1.5), ("int32", "NaN"), ("bool", "yes"),
     ("float32", "nan"), ("float32", "0x7fc0"), ("float32", "0xzzzzzzzz"), ("float64", None),
     ("float32", [1, 2]), ("complex64", 1.0), ("int8", True)],
)
def test_bad_fill_values(dtype, value):
    doc = copy.deepcopy(SHARDED)
    doc["data_type"], doc["fill_value"] = dtype, value
    with pytest.raises(InfoError, match="fill_value"):
        ArrayMetadata.from_json(doc)


@pytest.mark.parametrize(
    "field",
    ["zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
     "fill_value", "codecs"],
)
def test_missing_required_field(field):
    doc = copy.deepcopy(SHARDED)
    del doc[field]
    with pytest.raises(InfoError, match=field):
        ArrayMetadata.from_json(doc, "arr/zarr.json")


def _set(doc, path, value):
    *parents, last = path
    for p in parents:
        doc = doc[p]
    if value is KeyError:
        del doc[last]
    elif isinstance(doc, list) and last == len(doc):
        doc.append(value)
    else:
        doc[last] = value


SHARD_CONF = ("codecs", 0, "configuration")


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("zarr_format",), 2, "zarr_format"),
        (("node_type",), "group", "node_type"),
        (("shape",), [10, -1], "shape"),
        (("shape",), [10], "one entry per dimension"),
        (("shape",), "10", "shape"),
        (("chunk_grid", "configuration", "chunk_shape"), [8, 0], "chunk_shape"),
        (("chunk_grid", "configuration"), KeyError, "chunk_shape"),
        (("chunk_key_encoding", "configuration", "separator"), "-", "separator"),
        (("dimension_names",), ["y"], "dimension_names"),
        (("dimension_names",), [1, 2], "dimension_names"),
        (("attributes",), [], "attributes"),
        (("codecs",), [], "codecs"),
        (("codecs",), {"name": "bytes"}, "codecs"),
        (("unknown_extension",), {"x": 1}, "unknown_extension"),
        ((*SHARD_CONF, "chunk_shape"), [3, 4], "divid"),
        ((*SHARD_CONF, "chunk_shape"), [4], "divid"),
        ((*SHARD_CONF, "index_location"), "middle", "index_location"),
        ((*SHARD_CONF, "index_codecs"), KeyError, "index_codecs"),
        ((*SHARD_CONF, "index_codecs", 1), {"name": "gzip", "configuration": {"level": 1}},
         "fixed size"),
        ((*SHARD_CONF, "codecs", 0), {"name": "bytes"}, "endian"),
        ((*SHARD_CONF, "codecs", 0), {"name": "zstd", "configuration": {"level": 1}}, "bytes"),
        ((*SHARD_CONF, "codecs", 1), {"name": "bytes", "configuration": {"endian": "little"}},
         "only one"),
        ((*SHARD_CONF, "codecs", 1, "configuration", "level"), 99, "level"),
        ((*SHARD_CONF, "codecs", 1, "configuration", "extra"), 1, "extra"),
        ((*SHARD_CONF, "codecs", 1), {"name": "blosc", "configuration": {"cname": "foo"}}, "cname"),
        ((*SHARD_CONF, "codecs", 1), {"name": "blosc", "configuration": {"shuffle": ["shuffle"]}},
         "shuffle"),
        (("shape",), [1 << 31, 1 << 31], r"shape .* 2\*\*63 bytes"),
        (("chunk_grid", "configuration", "chunk_shape"), [1 << 31] * 2, r"chunk_shape .* 2\*\*63"),
        ((*SHARD_CONF, "codecs", 1), {"name": "transpose", "configuration": {"order": [0, 1]}},
         "array -> array"),
        (("codecs", 1), {"name": "transpose", "configuration": {"order": [0, 0]}},
         "array -> array"),
    ],
)
def test_invalid_metadata(path, value, match):
    doc = copy.deepcopy(SHARDED)
    _set(doc, path, value)
    with pytest.raises(InfoError, match=match) as info:
        ArrayMetadata.from_json(doc, "arr/zarr.json")
    assert str(info.value).startswith("arr/zarr.json")


def test_bad_transpose_order():
    doc = copy.deepcopy(SHARDED)
    doc["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0, 0]}})
    with pytest.raises(InfoError, match="permutation"):
        ArrayMetadata.from_json(doc)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("data_type",), "string"),
        (("data_type",), "bfloat16"),
        (("data_type",), "r16"),
        (("data_type",), {"name": "numpy.datetime64", "configuration": {"unit": "s"}}),
        (("chunk_grid", "name"), "rectilinear"),
        (("chunk_key_encoding", "name"), "v9"),
        (("storage_transformers",), [{"name": "x"}]),
        (("codecs", 0, "name"), "sharding_v2"),
        ((*SHARD_CONF, "codecs", 1, "name"), "lz4"),
        ((*SHARD_CONF, "codecs", 1), "vlen-utf8"),
    ],
)
def test_unsupported(path, value):
    doc = copy.deepcopy(SHARDED)
    _set(doc, path, value)
    with pytest.raises(UnsupportedCodecError, match="not supported"):
        ArrayMetadata.from_json(doc)


def test_extensions_that_need_not_be_understood_are_kept():
    doc = copy.deepcopy(SHARDED)
    doc["my_ext"] = {"must_understand": False, "x": [1]}
    meta = ArrayMetadata.from_json(doc)
    assert meta.to_json()["my_ext"] == doc["my_ext"]


def test_not_json():
    with pytest.raises(InfoError, match=re.escape("x/zarr.json: not valid JSON")):
        ArrayMetadata.from_json(b"{", "x/zarr.json")
    with pytest.raises(InfoError, match="JSON object"):
        ArrayMetadata.from_json(b"[1]")


@pytest.mark.parametrize(
    ("encoding", "separator", "coords"),
    [("default", "/", (1, 0, 12)), ("default", ".", (3, 4)), ("v2", ".", (0, 7)),
     ("v2", "/", (5,)), ("default", "/", ()), ("v2", ".", ())],
)
def test_chunk_keys_match_zarr_python(encoding, separator, coords):
    from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

    theirs = parse_chunk_key_encoding({"name": encoding, "configuration": {"separator": separator}})
    ours = ChunkKeyEncoding(encoding, separator)
    assert ours.key(coords) == theirs.encode_chunk_key(coords)
    assert ours.coords(ours.key(coords), len(coords)) == coords
    with pytest.raises(InvalidArgumentError):
        ours.coords("x/y", len(coords))


def test_v2_default_separator():
    enc = ChunkKeyEncoding.from_json({"name": "v2"})
    assert enc.separator == "." and enc.key((1, 2)) == "1.2"


def test_create_metadata():
    meta = create_metadata(
        [100, 50], "uint64", [64, 64], [32, 16], codecs=["gzip"], dimension_names=["y", "x"]
    )
    inner = meta.sharding
    assert inner.codecs == (BytesCodec("little"), GzipCodec())
    assert inner.index_codecs == (BytesCodec("little"), Crc32cCodec())
    assert inner.index_location == "end"
    assert zarr_python_metadata(meta.to_json()).shards == (64, 64)
    plain = create_metadata([10], np.dtype(">i4"), [4], fill_value=-3)
    assert plain.sharding is None and plain.codecs == (BytesCodec("little"), ZstdCodec())
    assert plain.data_type == "int32" and plain.fill_value == -3
    with pytest.raises(InvalidArgumentError, match="fill_value"):
        create_metadata([10], "uint8", [4], fill_value=300)
    with pytest.raises(InvalidArgumentError, match="fill_value"):
        create_metadata([10], "int8", [4], fill_value=0.5)
    with pytest.raises(UnsupportedCodecError):
        create_metadata([10], "U4", [4])
    with pytest.raises(InvalidArgumentError, match="divid"):
        create_metadata([10], "uint8", [8], [3])
    with pytest.raises(InvalidArgumentError, match="index_location"):
        create_metadata([10], "uint8", [8], [4], index_location="middle")
    with pytest.raises(InvalidArgumentError, match="transpose"):
        create_metadata([10], "uint8", [8], codecs=["transpose"])
    assert create_metadata([4], "float32", [4], fill_value="NaN").to_json()["fill_value"] == "NaN"


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(SHARDED) if p]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6)
    | st.sampled_from(["NaN", "0x7fc00000", "bytes", "little", "crc32c", "end", "c"]),
    lambda inner: (st.lists(inner, max_size=4)
                   | st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(PATHS), value=JSON_VALUES)
def test_mutated_metadata_fails_cleanly(path, value):
    """Any JSON value anywhere in a valid zarr.json: parsed, or a shardvol error; never a crash."""
    doc = copy.deepcopy(SHARDED)
    _set(doc, path, value)
    try:
        meta = ArrayMetadata.from_json(json.dumps(doc))
    except ShardvolError:
        return
    assert ArrayMetadata.from_json(meta.to_bytes()) == meta


def test_equality_with_nan_fill():
    meta = create_metadata([4], "float32", [4], fill_value="NaN")
    again = ArrayMetadata.from_json(meta.to_bytes())
    assert again == meta and hash(again) == hash(meta)
    assert again != create_metadata([4], "float32", [4], fill_value=0)
