"""A precomputed image pyramid copied to one OME-Zarr 0.5 image, shardvol vs TensorStore.

Source: bench_volume's "raw sharded" dataset (smooth noisy uint8 512^3, 64^3 chunks, sharded
gzip, written by TensorStore) with 3 downsampled scales (2, 2, 1) added by shardvol, as
bench_pyramid makes them (untimed, once).  Each repetition copies all 4 scales to a fresh
OME-Zarr image: every level a Zarr v3 array sharded with sharding_indexed (inner chunks
64^3, shards up to 64 MiB, bytes + zstd level 3, crc32c index), axes z, y, x.

  shardvol     shardvol.copy(pyramid, "x.ome.zarr")
  TensorStore  for each scale: open it (neuroglancer_precomputed), create the zarr3 array
               with the same zarr.json as shardvol's level (same shape, shards, inner chunks,
               codecs), write the scale into it, transposed to z, y, x, in one transaction;
               then write the group's zarr.json (the same OME attributes)

Both outputs are checked equal, level by level (TensorStore reads shardvol's and the other
way round), and their stored bytes are printed, with the CPU time (user + system, all
threads of this process) of each library's best run: the cores are shared with other work,
and CPU time varies less with it than wall time.

Run: python benchmarks/bench_ome_zarr.py [--repeat 3] [--quick] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorstore as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_volume as bv

import shardvol

FACTOR = (2, 2, 1)
MIPS = 3


def make_pyramid(root: str, source: str, sharding: dict) -> str:
    """The source with its downsampled scales (made once, kept next to the dataset)."""
    path = source + "_pyramid"
    done = os.path.join(path, ".complete")
    if not os.path.exists(done):
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(source, path)
        shardvol.downsample(shardvol.Volume(path), FACTOR, MIPS, sharding=sharding,
                            progress=False)
        with open(done, "w") as f:
            f.write("downsampled by shardvol\n")
    return path


def run_shardvol(src: str, dst: str) -> None:
    shardvol.copy(src, dst, progress=False)


def run_tensorstore(src: str, dst: str, template: str) -> None:
    """The same image written by TensorStore; ``template`` is shardvol's output, whose
    metadata (not data) it copies."""
    os.makedirs(dst)
    with open(os.path.join(template, "zarr.json")) as f:
        group = json.load(f)
    levels = [d["path"] for d in group["attributes"]["ome"]["multiscales"][0]["datasets"]]
    for k, path in enumerate(levels):
        with open(os.path.join(template, path, "zarr.json")) as f:
            meta = json.load(f)
        source = ts.open({**bv.ts_spec(src), "scale_index": k}).result()
        view = source[ts.d[:].translate_to[0]][..., 0].T  # (x, y, z, c=1) -> (z, y, x)
        out = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                      "path": os.path.join(dst, path)},
                       "metadata": meta, "create": True}).result()
        with ts.Transaction() as txn:
            out.with_transaction(txn).write(view).result()
    with open(os.path.join(dst, "zarr.json"), "w") as f:
        json.dump(group, f, indent=2)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stored_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files if not f.startswith("."))


def check_equal(ours: str, theirs: str) -> int:
    """Every level of both outputs read by the other library; the number of levels."""
    a, b = shardvol.open(ours), shardvol.open(theirs)
    assert isinstance(a, shardvol.OmeZarrImage) and isinstance(b, shardvol.OmeZarrImage)
    for k, level in enumerate(a.mips):
        kv = {"driver": "file", "path": os.path.join(ours, level.path)}
        mine = ts.open({"driver": "zarr3", "kvstore": kv}).result().read().result()
        assert np.array_equal(mine, b.mip(k).array[...]), f"level {level.path} differs"
    return len(a.mips)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a 192^3 image")
    parser.add_argument("--data", default=os.path.join(bv.HERE, "data"))
    args = parser.parse_args()
    sizes = bv.QUICK if args.quick else bv.FULL
    ds = next(d for d in bv.DATASETS if d.name == "raw sharded")
    data = bv.source_array(ds, sizes)
    pyramid = make_pyramid(args.data, bv.ensure_dataset(args.data, ds, data), ds.sharding)
    best = {"shardvol": (float("inf"), 0.0), "TensorStore": (float("inf"), 0.0)}
    with tempfile.TemporaryDirectory(dir=args.data) as scratch:
        ours, theirs = os.path.join(scratch, "sv.ome.zarr"), os.path.join(scratch, "ts.ome.zarr")
        runs = {"shardvol": (ours, lambda: run_shardvol(pyramid, ours)),
                "TensorStore": (theirs, lambda: run_tensorstore(pyramid, theirs, ours))}
        for _ in range(args.repeat):  # interleaved (TensorStore copies shardvol's metadata)
            for name, (out, run) in runs.items():
                shutil.rmtree(out, ignore_errors=True)
                c0, t0 = cpu_seconds(), time.perf_counter()
                run()
                took = (time.perf_counter() - t0, cpu_seconds() - c0)
                best[name] = min(best[name], took)
        levels = check_equal(ours, theirs)
        sizes_mb = {name: stored_bytes(p) / 1e6 for name, p in
                    (("shardvol", ours), ("TensorStore", theirs))}
    voxels = sum(int(np.prod(shardvol.Volume(pyramid, k).shape)) for k in range(levels))
    print(f"precomputed pyramid of {data.shape[:3]} uint8 ({levels} scales, {voxels / 1e6:.0f} "
          f"MB of voxels) -> OME-Zarr 0.5, sharded zstd; best of {args.repeat}; "
          f"load average {bv.load_average()}")
    for name, (t, cpu) in best.items():
        print(f"  {name:<12} {t:7.3f} s  {voxels / 1e6 / t:7.0f} MB/s  CPU {cpu:5.2f} s  "
              f"stored {sizes_mb[name]:.1f} MB")
    ratio = best["TensorStore"][0] / best["shardvol"][0]
    cpu_ratio = best["TensorStore"][1] / best["shardvol"][1]
    print(f"  shardvol is {ratio:.2f}x TensorStore ({cpu_ratio:.2f}x in CPU time); "
          "every level identical")


if __name__ == "__main__":
    main()
