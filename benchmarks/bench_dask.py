"""Dask arrays: shardvol's ``to_dask`` vs its own eager read vs CloudVolume's ``to_dask``.

Over the bench_volume.py datasets (local files, written by TensorStore), "sum" reduces the
whole volume to its sum:

  eager          ``Volume(path)[...].sum()``: one read into memory, then numpy's sum
  to_dask        ``Volume(path).to_dask().sum().compute()`` (shardvol's default blocks)
  CloudVolume    ``CloudVolume(path).to_dask().sum().compute()`` (its blocks: one chunk each;
                 parallel=1, as its docs advise under Dask)

and "write" writes the volume (in memory) into a fresh volume of the dataset's encoding
and sharding: eager ``vol[...] = data`` (``data`` read by ``Volume(path)[...]``) against
``vol.write_dask(blocks)``, ``blocks`` read by ``Volume(path).to_dask(chunks=128^3)`` (off
the storage grid of 64^3 chunks and 256^3 shards; persisted on the workers before the
clock starts).  Both hold Fortran-ordered data, as read; C-ordered data costs both paths
a transposition per chunk.  Every written volume is read back and compared.

The Dask rows run on Dask's threaded scheduler (the default; ``--distributed`` runs them
again on a ``LocalCluster`` of one single-threaded worker process per core, started once).
Every sum is checked against the eager one.  Handles are opened outside the clock (a Dask
graph is built inside it, and a written volume is created inside it); the libraries are
interleaved, each runs once untimed first, and the best of ``--repeat`` is kept.
Printed: seconds, and the ratios to_dask / eager (target <= 1.3 for sums) and
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
    CHUNK,
    DATASETS,
    FULL,
    QUICK,
    Dataset,
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
    for i in range(repeat + 1):  # (the first round warms up, untimed)
        for name, (open_, run) in ops.items():
            handle = open_()
            t0 = time.perf_counter()
            result = int(run(handle))
            if i:
                times[name] = min(times[name], time.perf_counter() - t0)
            expected = result if expected is None else expected
            assert result == expected, f"{name}: sum {result} != {expected}"
            del handle
    return times


def create(path: str, ds: Dataset, data: np.ndarray) -> Volume:
    return Volume.create(path, size=data.shape[:3], type=ds.source, data_type=data.dtype.name,
                         chunk_size=CHUNK, encoding=ds.encoding,
                         compressed_segmentation_block_size=ds.block_size,
                         sharding=ds.sharding, overwrite=True)


def writes(ds: Dataset, source: str, data: np.ndarray, root: str, repeat: int,
           opts: dict[str, Any]) -> dict[str, float]:
    """Best seconds of an eager write and of write_dask, interleaved; each written volume
    equal to the data (jpeg: to the first written, the same encoder's output)."""
    path = os.path.join(root, "_dask_write")
    # (held by the workers before the clock starts, as ``data`` is by this process)
    blocks = Volume(source).to_dask(chunks=(128, 128, 128)).persist(**opts)
    if "scheduler" in opts and not isinstance(opts["scheduler"], str):
        from dask.distributed import wait

        wait(blocks)
    runs: dict[str, Callable[[Volume], Any]] = {
        "eager": lambda v: v.__setitem__(..., data),
        "to_dask": lambda v: v.write_dask(blocks, progress=False, compute=False).compute(**opts),
    }
    times = dict.fromkeys(runs, float("inf"))
    expected = None if ds.encoding == "jpeg" else data
    for i in range(repeat + 1):  # (the first round warms up, untimed)
        for name, run in runs.items():
            os.sync()
            t0 = time.perf_counter()
            run(create(path, ds, data))
            if i:
                times[name] = min(times[name], time.perf_counter() - t0)
            written = Volume(path)[...]
            expected = written if expected is None else expected
            assert np.array_equal(written, expected), name
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
          f"best of {args.repeat}; seconds")
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
            rows.append((ds.name, "sum", scheduler, best(ops, args.repeat)))
            w = writes(ds, path, Volume(path)[...], args.data, args.repeat, opts)
            rows.append((ds.name, "write", scheduler, w))
    print("\n| dataset | operation | scheduler | eager | to_dask | CloudVolume to_dask "
          "| to_dask / eager | CloudVolume / to_dask |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, op, scheduler, t in rows:
        ours = t["to_dask"]
        cv = t.get("CloudVolume")
        cv_cells = ("n/a", "n/a") if cv is None else (f"{cv:.3f}", f"{cv / ours:.2f}x")
        print(f"| {name} | {op} | {scheduler} | {t['eager']:.3f} | {ours:.3f} "
              f"| {cv_cells[0]} | {ours / t['eager']:.2f}x | {cv_cells[1]} |")
    print(f"\nload average at the end: {load_average()}")
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
