"""Dask arrays: shardvol's ``to_dask`` vs its own eager read vs CloudVolume's ``to_dask``.

Over the bench_volume.py datasets (local files, written by TensorStore), each timed
operation reduces the whole volume to its sum:

  eager          ``Volume(path)[...].sum()``: one read into memory, then numpy's sum
  to_dask        ``Volume(path).to_dask().sum().compute()`` (shardvol's default blocks)
  CloudVolume    ``CloudVolume(path).to_dask().sum().compute()`` (its blocks: one chunk each;
                 parallel=1, as its docs advise under Dask)

on Dask's threaded scheduler (the default; ``--distributed`` adds the same two Dask rows
on a ``LocalCluster`` of one single-threaded worker process per core, started once).
Every sum is checked against the eager one.  Handles are opened outside the clock (a Dask
graph is built inside it); the libraries are interleaved and the best of ``--repeat``
kept.  Printed: seconds, and the ratios to_dask / eager (target <= 1.3) and
CloudVolume / to_dask.

Run:  python benchmarks/bench_dask.py [--repeat 3] [--only NAME] [--quick] [--distributed]
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
from bench_volume import (
    DATASETS,
    FULL,
    QUICK,
    dataset_arguments,
    ensure_dataset,
    load_average,
    source_array,
)

from shardvol import Volume


def cloudvolume(path: str) -> Any:
    warnings.filterwarnings("ignore", module="cloudvolume")
    from cloudvolume import CloudVolume

    return CloudVolume(f"file://{path}", mip=0, fill_missing=True, bounded=True, cache=False,
                       progress=False, parallel=1)


def best(ops: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]],
         repeat: int) -> dict[str, float]:
    """Best seconds of ``run(open())`` per name, the open untimed; names interleaved; every
    result equal to the first name's."""
    times = dict.fromkeys(ops, float("inf"))
    expected = None
    for _ in range(repeat):
        for name, (open_, run) in ops.items():
            handle = open_()
            t0 = time.perf_counter()
            result = int(run(handle))
            times[name] = min(times[name], time.perf_counter() - t0)
            expected = result if expected is None else expected
            assert result == expected, f"{name}: sum {result} != {expected}"
            del handle
    return times


def main() -> None:
    ap = dataset_arguments(__doc__.split("\n")[0])
    ap.add_argument("--distributed", action="store_true",
                    help="also run the Dask rows on a LocalCluster of worker processes")
    args = ap.parse_args()
    sizes = QUICK if args.quick else FULL
    datasets = [d for d in DATASETS if not args.only or d.name in args.only]
    ops: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]
    client = None
    if args.distributed:
        from dask.distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1,
                                     processes=True, dashboard_address=None))
    print(f"{os.cpu_count()} CPUs, load average {load_average()}; dask {dask.__version__}; "
          f"best of {args.repeat}; seconds for the sum of the whole volume")
    rows = []
    sources: dict[str, np.ndarray] = {}
    for ds in datasets:
        if ds.source not in sources:
            sources[ds.source] = source_array(ds, sizes)
        path = ensure_dataset(args.data, ds, sources[ds.source])
        print(f"{ds.name}: {sources[ds.source].shape[:3]} {sources[ds.source].dtype} ...",
              flush=True)
        schedulers = ["threads"] + (["distributed"] if client is not None else [])
        for scheduler in schedulers:
            opts = {"scheduler": client if scheduler == "distributed" else "threads"}
            ops = {
                "eager": (lambda p=path: Volume(p), lambda v: v[...].sum()),
                "to_dask": (lambda p=path: Volume(p),
                            lambda v, o=opts: v.to_dask().sum().compute(**o)),
                "CloudVolume": (lambda p=path: cloudvolume(p),
                                lambda v, o=opts: v.to_dask().sum().compute(**o)),
            }
            t = best(ops, args.repeat)
            rows.append((ds.name, scheduler, t))
    print("\n| dataset | scheduler | eager | to_dask | CloudVolume to_dask "
          "| to_dask / eager | CloudVolume / to_dask |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, scheduler, t in rows:
        print(f"| {name} | {scheduler} | {t['eager']:.3f} | {t['to_dask']:.3f} "
              f"| {t['CloudVolume']:.3f} | {t['to_dask'] / t['eager']:.2f}x "
              f"| {t['CloudVolume'] / t['to_dask']:.2f}x |")
    print(f"\nload average at the end: {load_average()}")
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
