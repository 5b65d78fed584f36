"""Batch kernels on chunk identifiers: compressed Morton codes and murmurhash3.

All run in C with the GIL released; see ``csrc/morton.h`` and
``csrc/murmurhash3.h`` for the exact bit layouts.
"""

from shardvol._ext.hashing import murmurhash3_x86_128_u64
from shardvol._ext.morton import compressed_morton_code, decode_morton_code, morton_bits

__all__ = [
    "compressed_morton_code",
    "decode_morton_code",
    "morton_bits",
    "murmurhash3_x86_128_u64",
]
