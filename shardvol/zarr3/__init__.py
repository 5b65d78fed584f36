"""Zarr v3 arrays (sharded with ``sharding_indexed`` or not) over shardvol's key-value stores.

:class:`ArrayMetadata` is an array's ``zarr.json``; :func:`create_metadata`
builds one; :class:`ZarrChunkStore` serves its encoded chunks (inner chunks
when sharded) to the slicing layer, and ``ZarrChunkStore.codec`` encodes and
decodes them.  :class:`ZarrArray` (:func:`open`, :func:`create`) is the
user-facing array: numpy slicing reads and writes.
"""

from shardvol.zarr3.array import ZarrArray, create, open
from shardvol.zarr3.chunkstore import ZarrChunkStore
from shardvol.zarr3.codecs import (
    ArrayArrayCodec,
    ArrayBytesCodec,
    BloscCodec,
    BytesBytesCodec,
    BytesCodec,
    ChunkSpec,
    Codec,
    CodecChain,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
    is_fill,
    parse_codecs,
)
from shardvol.zarr3.metadata import (
    DATA_TYPES,
    ZARR_JSON,
    ArrayMetadata,
    ChunkKeyEncoding,
    create_metadata,
)
from shardvol.zarr3.sharding import ShardIndex, ShardingCodec, ShardLayout

__all__ = [
    "DATA_TYPES",
    "ZARR_JSON",
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "ArrayMetadata",
    "BloscCodec",
    "BytesBytesCodec",
    "BytesCodec",
    "ChunkKeyEncoding",
    "ChunkSpec",
    "Codec",
    "CodecChain",
    "Crc32cCodec",
    "GzipCodec",
    "ShardIndex",
    "ShardLayout",
    "ShardingCodec",
    "TransposeCodec",
    "ZarrArray",
    "ZarrChunkStore",
    "ZstdCodec",
    "create",
    "create_metadata",
    "is_fill",
    "open",
    "parse_codecs",
]
