"""shardvol: Neuroglancer precomputed volumes (sharded or not) and Zarr v3 sharded arrays.

The public API is re-exported here; see README.md for a tour.
"""

from shardvol import errors
from shardvol.errors import ShardvolError
from shardvol.kernels import (
    compressed_morton_code,
    decode_morton_code,
    morton_bits,
    murmurhash3_x86_128_u64,
)
from shardvol.kvstore import KVStore, open_store
from shardvol.volume import Volume
from shardvol.downsample import downsample

__version__ = "0.1.0"

__all__ = [
    "KVStore",
    "ShardvolError",
    "Volume",
    "__version__",
    "compressed_morton_code",
    "decode_morton_code",
    "downsample",
    "errors",
    "morton_bits",
    "murmurhash3_x86_128_u64",
    "open_store",
]
