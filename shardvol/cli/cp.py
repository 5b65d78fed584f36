"""``shardvol cp SRC DST``: copy a precomputed volume, Zarr v3 array or OME-Zarr image,
converting on the way.

Re-chunks, re-encodes, shards or unshards, across stores and formats (precomputed <->
Zarr v3 sharded <-> OME-Zarr 0.5), streaming whole output shards in parallel.  Between
precomputed and OME-Zarr every scale is copied (unless --mip names one); otherwise the
finest scale.

An interrupted copy (Ctrl-C, a killed process or machine) is finished by running the same
command again: it writes only what is not done.  Until then ``shardvol info`` and
``shardvol verify`` say the destination is incomplete.
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
from shardvol.ops.convert import copy
from shardvol.precomputed.info import ENCODINGS


def register(subparsers: Any) -> None:
    p = command(subparsers, "cp", run, help="copy/convert a volume (precomputed, zarr3, ome-zarr)",
                description=__doc__ + "\n\nexamples:\n  shardvol cp /data/em /data/em.zarr\n"
                "  shardvol cp /data/em /data/em.ome.zarr      # every scale\n"
                "  shardvol cp /data/em.ome.zarr /data/em2      # every level\n"
                "  shardvol cp /data/em.zarr /data/em2 --encoding jpeg --sharding auto\n"
                "  shardvol cp /data/em /data/em-proofread --into-existing "
                "--region 0:512,0:512,100:164")
    p.add_argument("src", help="source volume or array (path or URL)")
    p.add_argument("dst", help="destination (path or URL)")
    p.add_argument("--mip", type=int, default=None,
                   help="copy this scale alone (default: every scale between precomputed and "
                        "OME-Zarr, else the finest)")
    p.add_argument("--format", choices=("precomputed", "zarr3", "ome-zarr"),
                   help="output format (default: from DST; *.ome.zarr means ome-zarr, *.zarr "
                        "zarr3)")
    p.add_argument("--encoding", choices=ENCODINGS, help="precomputed output encoding")
    p.add_argument("--sharding", type=sharding_arg, default="auto", metavar="auto|none|JSON",
                   help="shard the output: auto (default), none, or a precomputed JSON spec")
    p.add_argument("--chunk-size", type=positive_int, nargs="+", metavar="N",
                   help="output chunk size (precomputed) or shard shape (zarr3, ome-zarr)")
    p.add_argument("--compress-level", type=int, default=None, metavar="0-12",
                   help="gzip level of precomputed shard data with gzip data encoding (6)")
    p.add_argument("--inner-chunk-shape", type=positive_int, nargs="+", metavar="N",
                   help="zarr3 / ome-zarr inner chunk shape")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing destination (or an unfinished other copy there)")
    p.add_argument("--region", type=region_arg, metavar="X0:X1,Y0:Y1,Z0:Z1",
                   help="copy only this box (global voxel coordinates of the source scale)")
    p.add_argument("--into-existing", action="store_true",
                   help="write into the precomputed volume at DST, keeping its info "
                        "(CloudVolume's transfer_to into an existing layer)")
    executor_args(p)


def region_arg(text: str) -> tuple[slice, slice, slice]:
    """``X0:X1,Y0:Y1,Z0:Z1`` as three slices."""
    try:
        bounds = [tuple(int(v) for v in part.split(":")) for part in text.split(",")]
        if len(bounds) != 3 or any(len(b) != 2 for b in bounds):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a region is X0:X1,Y0:Y1,Z0:Z1 (integers), not {text!r}") from None
    return tuple(slice(a, b) for a, b in bounds)  # type: ignore[return-value]  # 3 axes


def run(args: argparse.Namespace) -> int:
    with executor(args) as ex:
        out = copy(
            args.src, args.dst, mip=args.mip, format=args.format, encoding=args.encoding,
            sharding=args.sharding, chunk_size=args.chunk_size,
            inner_chunk_shape=args.inner_chunk_shape, compress_level=args.compress_level,
            executor=ex, progress=not args.quiet, overwrite=args.overwrite,
            region=args.region, into_existing=args.into_existing,
        )
    note(args, f"copied {args.src} -> {out!r}")
    return 0
