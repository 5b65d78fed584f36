"""Info JSON validation: every error names the field at fault."""

from __future__ import annotations

import copy
import json

import pytest

from shardvol.errors import InfoError
from shardvol.precomputed.info import VolumeInfo

GOOD = {
    "@type": "neuroglancer_multiscale_volume",
    "type": "segmentation",
    "data_type": "uint64",
    "num_channels": 1,
    "mesh": "mesh",
    "scales": [
        {
            "key": "8_8_8",
            "size": [100, 80, 60],
            "resolution": [8, 8, 8],
            "voxel_offset": [-4, 0, 3],
            "chunk_sizes": [[64, 64, 64]],
            "encoding": "compressed_segmentation",
            "compressed_segmentation_block_size": [8, 8, 8],
        },
        {
            "key": "16_16_16",
            "size": [50, 40, 30],
            "resolution": [16, 16, 16],
            "chunk_sizes": [[32, 32, 32]],
            "encoding": "raw",
            "sharding": {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                         "preshift_bits": 0, "minishard_bits": 0, "shard_bits": 0,
                         "minishard_index_encoding": "raw", "data_encoding": "raw"},
            "hidden": False,
        },
    ],
}


def test_roundtrip_keeps_unknown_keys():
    info = VolumeInfo.from_json(json.dumps(GOOD))
    again = info.to_dict()
    assert again["mesh"] == "mesh" and again["scales"][1]["hidden"] is False
    assert VolumeInfo.from_dict(again) == info
    assert info.scales[0].grid_size == (2, 2, 1)
    assert info.scale_index((16, 16, 16)) == 1 and info.scale_index("8_8_8") == 0


def mutate(path, value):
    d = copy.deepcopy(GOOD)
    target = d
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


@pytest.mark.parametrize(
    "path, value, match",
    [
        (("scales",), KeyError, "missing 'scales'"),
        (("scales",), [], "scales must be a non-empty list"),
        (("type",), "volume", "type 'volume'"),
        (("data_type",), "complex64", "data_type 'complex64'"),
        (("num_channels",), 0, "num_channels"),
        (("num_channels",), 2**64,
         r"scales\[0\].size .* num_channels 18446744073709551616 .* 2\*\*63"),
        (("scales", 1, "size"), [2**21, 2**21, 2**21], r"scales\[1\].size .* 2\*\*63 bytes"),
        (("scales", 0, "size"), [1, 2], r"scales\[0\].size must be 3 integers"),
        (("scales", 0, "size"), [1, 2, 0], r"scales\[0\].size must be positive"),
        (("scales", 1, "voxel_offset"), [0, 0, 1.5], r"scales\[1\].voxel_offset"),
        (("scales", 0, "resolution"), [8, -8, 8], r"scales\[0\].resolution"),
        (("scales", 1, "encoding"), "zfp", r"scales\[1\].encoding 'zfp'"),
        (("scales", 0, "compressed_segmentation_block_size"), KeyError,
         "no compressed_segmentation_block_size"),
        (("scales", 1, "chunk_sizes"), [[32, 32, 32], [16, 16, 16]], "sharded but lists 2"),
        (("scales", 1, "key"), "8_8_8", "unique"),
        (("scales", 0, "chunk_sizes"), [[64, 0, 64]], r"chunk_sizes\[0\] must be positive"),
        (("scales", 1, "sharding"), "yes", r"scales\[1\].sharding must be an object"),
        (("@type",), "neuroglancer_skeletons", "@type"),
    ],
)
def test_invalid_fields_are_named(path, value, match):
    with pytest.raises(InfoError, match=match):
        VolumeInfo.from_dict(mutate(path, value))


def test_encoding_dtype_combinations():
    d = mutate(("scales", 1, "encoding"), "jpeg")
    with pytest.raises(InfoError, match="jpeg needs uint8"):
        VolumeInfo.from_dict(d)
    d = mutate(("data_type",), "float32")
    with pytest.raises(InfoError, match="compressed_segmentation needs uint32/uint64"):
        VolumeInfo.from_dict(d)


def test_not_json():
    with pytest.raises(InfoError, match="not valid JSON"):
        VolumeInfo.from_json(b"{\"type\": ")
    with pytest.raises(InfoError, match="must be a JSON object"):
        VolumeInfo.from_json(b"[1, 2]")


def test_an_integer_too_large_for_a_float_is_an_info_error():
    doc = {"@type": "neuroglancer_multiscale_volume", "type": "image", "data_type": "uint8",
           "num_channels": 1, "scales": [{
               "key": "a", "size": [1, 1, 1], "resolution": [10**400, 1, 1],
               "voxel_offset": [0, 0, 0], "chunk_sizes": [[1, 1, 1]], "encoding": "raw"}]}
    with pytest.raises(InfoError, match="resolution"):
        VolumeInfo.from_dict(doc)
