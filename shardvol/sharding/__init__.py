"""The ``neuroglancer_uint64_sharded_v1`` key-value format: uint64 key -> bytes in shard files.

Example::

    spec = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=6, shard_bits=3,
                        minishard_index_encoding="gzip", data_encoding="gzip")
    reader = ShardReader(store, spec)                   # a KVStore, a path or a URL
    write_shards(store, spec, {1: b"a", 2: b"b"})       # whole shard files
    update_shard(store, spec, {3: b"c"}, {1}, reader)   # merge into existing shards
    reader.get_data_many([1, 2, 3])                     # {2: b"b", 3: b"c"}
"""

from shardvol.sharding.auto import auto_sharding, shard_shape
from shardvol.sharding.format import (
    decode_minishard_index,
    decode_shard_index,
    disassemble_shard,
    encode_shard,
)
from shardvol.sharding.reader import ShardReader, read_shard
from shardvol.sharding.spec import SHARDING_TYPE, ShardingSpec
from shardvol.sharding.writer import (
    ShardWriter,
    rewrite_shard,
    synthesize_shards,
    update_shard,
    write_shards,
)

__all__ = [
    "SHARDING_TYPE",
    "ShardReader",
    "ShardWriter",
    "ShardingSpec",
    "auto_sharding",
    "decode_minishard_index",
    "decode_shard_index",
    "disassemble_shard",
    "encode_shard",
    "read_shard",
    "rewrite_shard",
    "shard_shape",
    "synthesize_shards",
    "update_shard",
    "write_shards",
]
