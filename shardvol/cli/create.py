"""``shardvol create URL --size X Y Z ...``: a new, empty precomputed volume (one scale)."""

from __future__ import annotations

import argparse
from typing import Any

from shardvol.cli.common import command, note, positive_int, sharding_arg
from shardvol.precomputed.info import DATA_TYPES, ENCODINGS, VOLUME_TYPES
from shardvol.precomputed.volume import Volume


def register(subparsers: Any) -> None:
    p = command(subparsers, "create", run, help="create an empty precomputed volume",
                description=__doc__ + "\n\nexample:\n  shardvol create /data/em --type image "
                "--dtype uint8 --size 2048 2048 512 --resolution 8 8 40 --encoding jpeg "
                "--sharding auto")
    p.add_argument("url", help="where to create it (path or URL)")
    p.add_argument("--size", type=positive_int, nargs=3, required=True, metavar=("X", "Y", "Z"),
                   help="size in voxels")
    p.add_argument("--type", choices=VOLUME_TYPES, default="image", help="layer type (image)")
    p.add_argument("--dtype", choices=DATA_TYPES, default="uint8", help="data type (uint8)")
    p.add_argument("--channels", type=positive_int, default=1, help="number of channels (1)")
    p.add_argument("--resolution", type=float, nargs=3, default=(1, 1, 1), metavar=("X", "Y", "Z"),
                   help="voxel size in nanometres (1 1 1)")
    p.add_argument("--voxel-offset", type=int, nargs=3, default=(0, 0, 0),
                   metavar=("X", "Y", "Z"), help="coordinates of the first voxel (0 0 0)")
    p.add_argument("--chunk-size", type=positive_int, nargs=3, default=(64, 64, 64),
                   metavar=("X", "Y", "Z"), help="chunk size in voxels (64 64 64)")
    p.add_argument("--encoding", choices=ENCODINGS, default="raw", help="chunk encoding (raw)")
    p.add_argument("--block-size", type=positive_int, nargs=3, metavar=("X", "Y", "Z"),
                   help="compressed_segmentation block size (8 8 8)")
    p.add_argument("--jpeg-quality", type=int, help="jpeg quality 1-100 (75)")
    p.add_argument("--png-level", type=int, help="png compression level 0-9")
    p.add_argument("--sharding", type=sharding_arg, default=None, metavar="auto|none|JSON",
                   help="shard the scale: auto (a spec for this geometry), none (default), "
                   "or a JSON sharding spec")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing volume at URL (deleting its data)")


def run(args: argparse.Namespace) -> int:
    vol = Volume.create(
        args.url,
        size=args.size,
        type=args.type,
        data_type=args.dtype,
        num_channels=args.channels,
        resolution=args.resolution,
        voxel_offset=args.voxel_offset,
        chunk_size=args.chunk_size,
        encoding=args.encoding,
        compressed_segmentation_block_size=args.block_size,
        jpeg_quality=args.jpeg_quality,
        png_level=args.png_level,
        sharding=args.sharding,
        overwrite=args.overwrite,
    )
    note(args, f"created {vol!r}")
    return 0
