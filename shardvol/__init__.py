"""shardvol: Neuroglancer precomputed volumes (sharded or not) and Zarr v3 sharded arrays.

The public API is re-exported here; see README.md for a tour.
"""

from shardvol import errors, zarr3
from shardvol.errors import ShardvolError
from shardvol.formats import open
from shardvol.kernels import (
    compressed_morton_code,
    decode_morton_code,
    morton_bits,
    murmurhash3_x86_128_u64,
)
from shardvol.kvstore import KVStore, open_store
from shardvol.ops.convert import copy
from shardvol.ops.downsample import downsample
from shardvol.precomputed.volume import Volume
from shardvol.zarr3 import ZarrArray

__version__ = "0.1.0"

__all__ = [
    "KVStore",
    "ShardvolError",
    "Volume",
    "ZarrArray",
    "__version__",
    "compressed_morton_code",
    "copy",
    "decode_morton_code",
    "downsample",
    "errors",
    "morton_bits",
    "murmurhash3_x86_128_u64",
    "open",
    "open_store",
    "zarr3",
]
