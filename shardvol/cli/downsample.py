"""``shardvol downsample URL --factor 2 2 1 --mips 3``: add and write downsampled scales.

An interrupted run is finished by running the same command again: it writes only what
is not done.  Until then ``shardvol info`` and ``shardvol verify`` say the new scales are
incomplete.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardvol.cli.common import (
    command,
    executor,
    executor_args,
    note,
    positive_int,
    sharding_arg,
)
from shardvol.ops.downsample import downsample
from shardvol.ops.pooling import METHODS
from shardvol.precomputed.info import ENCODINGS
from shardvol.precomputed.volume import Volume


def register(subparsers: Any) -> None:
    p = command(subparsers, "downsample", run, help="write downsampled scales of a volume",
                description=__doc__ + "\n\nexample:\n  shardvol downsample /data/em --factor 2 2 1 "
                "--mips 4 --sharding auto")
    p.add_argument("url", help="the precomputed volume (path or URL)")
    p.add_argument("--mip", default="0", help="source scale: index or key (0)")
    p.add_argument("--factor", type=positive_int, nargs=3, default=(2, 2, 1),
                   metavar=("X", "Y", "Z"), help="downsampling factor per mip (2 2 1)")
    p.add_argument("--mips", type=positive_int, default=3, help="number of new scales (3)")
    p.add_argument("--method", choices=("auto", *METHODS), default="auto",
                   help="auto: mean for images, mode for segmentation")
    p.add_argument("--encoding", choices=ENCODINGS, help="encoding of the new scales (source's)")
    p.add_argument("--chunk-size", type=positive_int, nargs=3, metavar=("X", "Y", "Z"),
                   help="chunk size of the new scales (source's)")
    p.add_argument("--sharding", type=sharding_arg, default="auto", metavar="auto|none|JSON",
                   help="sharding of the new scales (auto)")
    p.add_argument("--compress-level", type=int, default=None, metavar="0-12",
                   help="gzip level of shard data with gzip data encoding (6)")
    p.add_argument("--memory-limit", default="2GB", help="memory for all tasks together (2GB)")
    p.add_argument("--resume", action="store_true", help="skip work whose output exists")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing scales that have other parameters (or an unfinished "
                        "other pyramid job)")
    p.add_argument("--exact", action="store_true",
                   help="refuse to pool a mip from a new mip rather than the source (which "
                        "memory-limit can call for; mean and mode then differ)")
    executor_args(p)


def run(args: argparse.Namespace) -> int:
    mip = int(args.mip) if args.mip.lstrip("-").isdigit() else args.mip
    vol = Volume(args.url, mip=mip, compress_level=args.compress_level)
    with executor(args) as ex:
        new = downsample(
            vol, args.factor, args.mips, method=args.method, encoding=args.encoding,
            chunk_size=args.chunk_size, sharding=args.sharding, memory_limit=args.memory_limit,
            executor=ex, progress=not args.quiet, resume=args.resume,
            overwrite=args.overwrite, exact=args.exact,
        )
    for v in new:
        note(args, f"wrote scale {v.scale.key}: size {'x'.join(map(str, v.scale.size))}")
    return 0
