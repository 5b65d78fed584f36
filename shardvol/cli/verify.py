"""``shardvol verify URL``: read random regions with shardvol and TensorStore and compare.

Every scale of a precomputed volume, every level array of an OME-Zarr image (in its own
axes), or a Zarr v3 array (any number of dimensions).
Exit code 1 if any region differs, if a job that writes the volume is unfinished (a copy
or pyramid interrupted: run it again), or if TensorStore cannot open the volume.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.cli.common import command, note, positive_int, progress
from shardvol.errors import IncompleteWarning, InvalidArgumentError, ShardvolError
from shardvol.formats import open as open_any
from shardvol.formats import split_format
from shardvol.kvstore import open_store
from shardvol.kvstore.job_record import job_status
from shardvol.ops.ts_spec import tensorstore_kvstore, within_timeout
from shardvol.precomputed.volume import Volume
from shardvol.zarr3 import OmeZarrImage, ZarrArray

Region = tuple[slice, ...]


def register(subparsers: Any) -> None:
    p = command(subparsers, "verify", run, help="compare random reads with TensorStore",
                description=__doc__)
    p.add_argument("url", help="volume or Zarr v3 array path or URL")
    p.add_argument("--samples", type=positive_int, default=10,
                   help="random regions per scale (10)")
    p.add_argument("--mip", type=int, action="append",
                   help="scale index to check (repeatable; default: every scale)")
    p.add_argument("--region", type=positive_int, nargs="+", metavar="N",
                   help="region size in voxels, one per axis (default: twice the chunk size)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random)")


@dataclass
class Target:
    """One array to check: a precomputed scale (x, y, z; the channel axis read whole) or a
    Zarr array (every axis)."""

    name: str
    read: Callable[[Region], np.ndarray]
    ts_spec: dict
    start: Sequence[int]
    stop: Sequence[int]
    chunk: Sequence[int]
    axes: str  # how a difference names its coordinates


def targets(opened: Volume | ZarrArray | OmeZarrImage, mips: list[int] | None) -> list[Target]:
    """What to check of the volume, array or image ``opened``."""
    uncached = {"cache_pool": {"total_bytes_limit": 0}}
    store = opened.store
    kvstore = tensorstore_kvstore(store)
    spec: dict[str, object]
    if isinstance(opened, ZarrArray):
        if mips is not None:
            raise InvalidArgumentError("--mip applies to multiscale volumes, not Zarr arrays")
        spec = {"driver": "zarr3", "kvstore": kvstore, "context": uncached}
        return [Target("array", opened.__getitem__, spec, (0,) * opened.ndim, opened.shape,
                       opened.chunks, "index")]
    if isinstance(opened, OmeZarrImage):
        levels = []
        for mip in mips if mips is not None else range(len(opened.mips)):
            arr = opened.mip(mip).array
            spec = {"driver": "zarr3", "context": uncached,
                    "kvstore": tensorstore_kvstore(store, opened.mips[mip].path)}
            levels.append(Target(f"level {opened.mips[mip].path}", arr.__getitem__, spec,
                                 (0,) * arr.ndim, arr.shape, arr.chunks, "index"))
        return levels
    out = []
    for mip in mips if mips is not None else range(len(opened.mips)):
        scale = opened.mip(mip)
        spec = {"driver": "neuroglancer_precomputed", "kvstore": kvstore,
                "scale_index": scale.mip_level, "context": uncached}
        start, stop = scale.bounds
        out.append(Target(f"scale {scale.scale.key}", scale.__getitem__, spec, start, stop,
                          scale.chunk_size, "x,y,z"))
    return out


def random_regions(t: Target, n: int, size: Sequence[int] | None,
                   rng: np.random.Generator) -> list[Region]:
    """``n`` random regions of the target's domain, unaligned to chunks, clipped at its end."""
    if size is not None and len(size) != len(t.start):
        raise InvalidArgumentError(
            f"--region gives {len(size)} sizes; {t.name} has {len(t.start)} axes")
    size = size or [2 * c for c in t.chunk]
    regions = []
    for _ in range(n):
        lo = [int(rng.integers(a, b)) for a, b in zip(t.start, t.stop)]
        regions.append(tuple(slice(a, min(a + s, b)) for a, s, b in zip(lo, size, t.stop)))
    return regions


def describe_difference(ours: np.ndarray, theirs: np.ndarray, region: Region,
                        axes: str = "x,y,z") -> str:
    """One line naming how many voxels differ and the first of them (domain coordinates)."""
    if ours.shape != theirs.shape:
        return f"shapes differ: shardvol {ours.shape}, TensorStore {theirs.shape}"
    diff = ours != theirs
    if ours.dtype.kind == "f":
        diff &= ~(np.isnan(ours) & np.isnan(theirs))
    where = np.argwhere(diff)
    first = tuple(int(i) for i in where[0])
    at = [r.start + i for r, i in zip(region, first)]
    channel = f" channel {first[3]}" if len(first) > len(region) else ""
    return (f"{len(where)} voxels differ; first at {axes}={at}{channel}: "
            f"shardvol {ours[first]!r}, TensorStore {theirs[first]!r}")


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def run(args: argparse.Namespace) -> int:
    try:
        import tensorstore as ts
    except ImportError:
        raise ShardvolError("verify needs TensorStore: pip install tensorstore") from None
    rng = np.random.default_rng(args.seed)
    failures = 0
    _, location = split_format(args.url)  # without a precomputed:// or zarr3:// prefix
    status = job_status(open_store(location))
    if status is not None:  # (its missing parts read as the fill value in both readers)
        print(f"INCOMPLETE: {status}; run the job again to finish it")
        failures += 1
    with warnings.catch_warnings():  # (said once above)
        warnings.simplefilter("ignore", IncompleteWarning)
        opened = open_any(args.url)
    for t in targets(opened, args.mip):
        try:
            theirs_store = within_timeout(ts.open(t.ts_spec, read=True).result,
                                          f"open {t.name}")
        except ValueError as e:  # TensorStore's errors derive from ValueError
            raise ShardvolError(f"TensorStore cannot open {t.name}: {e}") from None
        regions = random_regions(t, args.samples, args.region, rng)
        bad = 0
        for region in progress(regions, args.quiet, desc=t.name, unit="region"):
            ours = t.read(region)
            theirs = within_timeout(theirs_store[region].read().result, f"read {t.name}")
            if not _equal(ours, theirs):
                bad += 1
                bounds = ", ".join(f"{r.start}:{r.stop}" for r in region)
                print(f"DIFFERENT {t.name} [{bounds}]: "
                      f"{describe_difference(ours, theirs, region, t.axes)}")
        failures += bad
        note(args, f"{t.name}: {len(regions) - bad} of {len(regions)} regions "
                   "identical to TensorStore")
    if failures:
        if failures > (status is not None):
            print(f"{failures - (status is not None)} region(s) differ from TensorStore")
        return 1
    note(args, "OK: every region read the same with shardvol and TensorStore")
    return 0
