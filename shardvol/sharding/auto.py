"""Choosing a sharding spec for a volume scale, and the shape of its shards.

``auto_sharding`` uses the identity hash so that every shard holds one
aligned block of chunks in compressed-Morton order:

* chunks per shard ``2**p``: the largest power of two whose uncompressed size
  stays within ``target_shard_bytes`` (512 MiB by default), capped by the
  number of Morton bits the grid needs;
* those ``p`` bits are split between minishards and chunks per minishard
  (``minishard_bits = ceil(p / 2)``, ``preshift_bits = p - minishard_bits``),
  keeping both the shard index (16 B per minishard) and each minishard index
  (24 B per chunk) small;
* ``shard_bits`` covers all remaining Morton bits, so no two blocks share a file;
* minishard indexes are gzipped; data is gzipped for raw and
  compressed_segmentation chunks and stored as is for jpeg/png.

``shard_shape`` gives the voxel shape of such a block: writes aligned to it
(relative to ``voxel_offset``) own whole shard files.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardvol._ext.morton import morton_bits
from shardvol.sharding.spec import ShardingSpec

TARGET_SHARD_BYTES = 512 * 2**20


def auto_sharding(
    grid_size: Sequence[int],
    chunk_bytes: int,
    encoding: str,
    target_shard_bytes: int = TARGET_SHARD_BYTES,
) -> ShardingSpec:
    """A spec whose shards are aligned blocks of about ``target_shard_bytes`` (uncompressed)."""
    _, total = morton_bits(grid_size)
    p = 0
    while p < total and chunk_bytes * 2 ** (p + 1) <= target_shard_bytes:
        p += 1
    minishard_bits = (p + 1) // 2
    return ShardingSpec.from_dict({
        "@type": "neuroglancer_uint64_sharded_v1",
        "hash": "identity",
        "preshift_bits": p - minishard_bits,
        "minishard_bits": minishard_bits,
        "shard_bits": total - p,
        "minishard_index_encoding": "gzip",
        "data_encoding": "gzip" if encoding in ("raw", "compressed_segmentation") else "raw",
    })


def shard_shape_in_chunks(
    spec: ShardingSpec, grid_size: Sequence[int]
) -> tuple[int, int, int] | None:
    """Chunks per shard along x, y, z when shards are aligned blocks, else None.

    Shards are aligned blocks when the hash is the identity and ``shard_bits``
    covers every Morton bit above ``preshift_bits + minishard_bits``.
    """
    bits, total = morton_bits(grid_size)
    p = spec.preshift_bits + spec.minishard_bits
    if spec.hash != "identity" or spec.shard_bits < total - p:
        return None
    counts = [0, 0, 0]
    j = 0
    i = 0
    while j < min(p, total):
        for d in range(3):
            if i < bits[d] and j < min(p, total):
                counts[d] += 1
                j += 1
        i += 1
    return (2 ** counts[0], 2 ** counts[1], 2 ** counts[2])


def shard_shape(
    spec: ShardingSpec, grid_size: Sequence[int], chunk_size: Sequence[int]
) -> tuple[int, int, int] | None:
    """Voxel shape of one shard (an aligned block), or None if shards are not spatial blocks.

    A region whose start is ``voxel_offset + k * shard_shape`` and whose size is
    ``shard_shape`` (clipped at the volume's end) is exactly one shard file.
    """
    chunks = shard_shape_in_chunks(spec, grid_size)
    if chunks is None:
        return None
    return (chunks[0] * chunk_size[0], chunks[1] * chunk_size[1], chunks[2] * chunk_size[2])
