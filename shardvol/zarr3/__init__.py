"""Zarr v3 arrays (sharded with ``sharding_indexed`` or not) over shardvol's key-value stores,
and OME-Zarr 0.5 images made of them.

:class:`ArrayMetadata` is an array's ``zarr.json``; :func:`create_metadata`
builds one; :class:`ZarrChunkStore` serves its encoded chunks (inner chunks
when sharded) to the slicing layer, and ``ZarrChunkStore.codec`` encodes and
decodes them.  :class:`ZarrArray` (:func:`open`, :func:`create`) is the
user-facing array: numpy slicing reads and writes.  The codec classes are exported
for ``create(codecs=[...])``.  :class:`OmeZarrImage` is an OME-Zarr 0.5 multiscale
image (a group of such arrays), sliced like a precomputed Volume.  The machinery (codec
chains, shard layouts and indexes) stays in its modules.
"""

from shardvol.zarr3.array import ZarrArray, create, open
from shardvol.zarr3.chunkstore import ZarrChunkStore
from shardvol.zarr3.codecs import (
    BloscCodec,
    BytesCodec,
    Codec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)
from shardvol.zarr3.metadata import DATA_TYPES, ZARR_JSON, ArrayMetadata, create_metadata
from shardvol.zarr3.ome import OmeZarrImage
from shardvol.zarr3.sharding import ShardingCodec

__all__ = [
    "DATA_TYPES",
    "ZARR_JSON",
    "ArrayMetadata",
    "BloscCodec",
    "BytesCodec",
    "Codec",
    "Crc32cCodec",
    "GzipCodec",
    "OmeZarrImage",
    "ShardingCodec",
    "TransposeCodec",
    "ZarrArray",
    "ZarrChunkStore",
    "ZstdCodec",
    "create",
    "create_metadata",
    "open",
]
