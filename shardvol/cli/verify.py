"""``shardvol verify URL``: read random regions with shardvol and TensorStore and compare.

Exit code 1 if any region differs (or TensorStore cannot open the volume).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardvol.cli.common import command, note, positive_int, progress
from shardvol.errors import ShardvolError
from shardvol.kvstore import url_scheme
from shardvol.volume import Volume

Region = tuple[slice, slice, slice]


def register(subparsers: Any) -> None:
    p = command(subparsers, "verify", run, help="compare random reads with TensorStore",
                description=__doc__)
    p.add_argument("url", help="volume path or URL")
    p.add_argument("--samples", type=positive_int, default=10,
                   help="random regions per scale (10)")
    p.add_argument("--mip", type=int, action="append",
                   help="scale index to check (repeatable; default: every scale)")
    p.add_argument("--region", type=positive_int, nargs=3, metavar=("X", "Y", "Z"),
                   help="region size in voxels (default: twice the chunk size)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random)")


def tensorstore_kvstore(url: str) -> str:
    """The TensorStore kvstore URL of a shardvol path or URL."""
    if url_scheme(url) == "file":
        path = url.split("://", 1)[1] if "://" in url else url
        return "file://" + os.path.abspath(path).rstrip("/") + "/"
    return url.rstrip("/") + "/"


def random_regions(vol: Volume, n: int, size: Sequence[int] | None,
                   rng: np.random.Generator) -> list[Region]:
    """``n`` random regions of ``vol``'s domain, unaligned to chunks, clipped at its end."""
    start, stop = vol.bounds
    size = size or [2 * c for c in vol.chunk_size]
    regions = []
    for _ in range(n):
        lo = [int(rng.integers(a, b)) for a, b in zip(start, stop)]
        regions.append(tuple(slice(a, min(a + s, b)) for a, s, b in zip(lo, size, stop)))
    return regions  # type: ignore[return-value]


def describe_difference(ours: np.ndarray, theirs: np.ndarray, region: Region) -> str:
    """One line naming how many voxels differ and the first of them (global coordinates)."""
    if ours.shape != theirs.shape:
        return f"shapes differ: shardvol {ours.shape}, TensorStore {theirs.shape}"
    diff = ours != theirs
    if ours.dtype.kind == "f":
        diff &= ~(np.isnan(ours) & np.isnan(theirs))
    where = np.argwhere(diff)
    first = tuple(int(i) for i in where[0])
    at = [r.start + i for r, i in zip(region, first[:3])]
    return (f"{len(where)} voxels differ; first at x,y,z={at} channel {first[3]}: "
            f"shardvol {ours[first]!r}, TensorStore {theirs[first]!r}")


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def run(args: argparse.Namespace) -> int:
    try:
        import tensorstore as ts
    except ImportError:
        raise ShardvolError("verify needs TensorStore: pip install tensorstore") from None
    vol = Volume(args.url)
    mips = args.mip if args.mip is not None else range(len(vol.mips))
    rng = np.random.default_rng(args.seed)
    kvstore = tensorstore_kvstore(args.url)
    failures = 0
    for mip in mips:
        scale = vol.mip(mip)
        try:
            theirs_store = ts.open({
                "driver": "neuroglancer_precomputed", "kvstore": kvstore,
                "scale_index": scale.mip_level,
                "context": {"cache_pool": {"total_bytes_limit": 0}},
            }, read=True).result()
        except ValueError as e:  # TensorStore's errors derive from ValueError
            raise ShardvolError(f"TensorStore cannot open scale {scale.scale.key}: {e}") from None
        regions = random_regions(scale, args.samples, args.region, rng)
        bad = 0
        for region in progress(regions, args.quiet, desc=f"scale {scale.scale.key}", unit="region"):
            ours = scale[region]
            theirs = theirs_store[region].read().result()
            if not _equal(ours, theirs):
                bad += 1
                bounds = ", ".join(f"{r.start}:{r.stop}" for r in region)
                print(f"DIFFERENT scale {scale.scale.key} [{bounds}]: "
                      f"{describe_difference(ours, theirs, region)}")
        failures += bad
        note(args, f"scale {scale.scale.key}: {len(regions) - bad} of {len(regions)} regions "
                   "identical to TensorStore")
    if failures:
        print(f"{failures} region(s) differ from TensorStore")
        return 1
    note(args, "OK: every region read the same with shardvol and TensorStore")
    return 0
