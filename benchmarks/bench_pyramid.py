"""End-to-end pyramid: 3 new sharded gzip scales of the 512^3 sharded image,
shardvol vs TensorStore.

Source: bench_volume's "raw sharded" dataset (smooth noisy uint8 512^3, 64^3 chunks, identity
hash, preshift 3 / minishard 3 / shard 3, gzip), written by TensorStore.  Each repetition
copies it to a scratch directory (untimed), then times writing mips 1-3 with factor (2, 2, 1)
and the mean, every new scale sharded with the same spec as the source:

  shardvol     shardvol.downsample(vol, (2, 2, 1), 3, sharding=spec): one pass over the source
  TensorStore  for each mip k: create the scale, write ts.downsample(mip 0, [2**k, 2**k, 1, 1],
               "mean") into it in one transaction (the way to make scales with TensorStore)

Both results are checked equal.  The peak RSS increase of the shardvol run (in a fresh
subprocess) is printed against its memory_limit.

Run: python benchmarks/bench_pyramid.py [--repeat 3] [--quick] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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
LIMIT = "2GB"


def run_shardvol(path: str, spec: dict) -> None:
    shardvol.downsample(shardvol.Volume(path), FACTOR, MIPS, sharding=spec, progress=False,
                        memory_limit=LIMIT)


def run_tensorstore(path: str, spec: dict) -> None:
    base = ts.open(bv.ts_spec(path)).result()
    lo = base.domain.inclusive_min[:3]
    hi = base.domain.exclusive_max[:3]
    for k in range(1, MIPS + 1):
        f = [FACTOR[d] ** k for d in range(3)]
        view = ts.downsample(base, [*f, 1], "mean")
        offset = [lo[d] // f[d] for d in range(3)]
        size = [-(-hi[d] // f[d]) - offset[d] for d in range(3)]
        dst = ts.open({
            **bv.ts_spec(path), "create": True,
            "scale_metadata": {"size": size, "voxel_offset": offset, "chunk_size": bv.CHUNK,
                               "resolution": [f[0], f[1], f[2]], "encoding": "raw",
                               "sharding": spec},
        }).result()
        with ts.Transaction() as txn:
            dst.with_transaction(txn).write(view).result()


RSS_PROBE = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
import bench_pyramid as b
with open("/proc/self/clear_refs", "w") as f:  # reset the peak RSS (VmHWM) to the RSS
    f.write("5")
with open("/proc/self/statm") as f:
    before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
b.run_shardvol(sys.argv[2], json.loads(sys.argv[3]))
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) * 1024
print(peak - before)
"""


def peak_rss_of_shardvol(path: str, spec: dict) -> float:
    """Peak RSS increase (bytes) of one shardvol run, in a fresh process (Linux)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", RSS_PROBE, here, path, json.dumps(spec)],
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


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
    source = bv.ensure_dataset(args.data, ds, data)
    runs = {"shardvol": run_shardvol, "TensorStore": run_tensorstore}
    best = dict.fromkeys(runs, float("inf"))
    results = {}
    with tempfile.TemporaryDirectory(dir=args.data) as scratch:
        for _ in range(args.repeat):
            for name, fn in runs.items():  # interleaved
                path = os.path.join(scratch, name)
                shutil.rmtree(path, ignore_errors=True)
                shutil.copytree(source, path)
                t0 = time.perf_counter()
                fn(path, ds.sharding)
                best[name] = min(best[name], time.perf_counter() - t0)
                results[name] = path
        for k in range(1, MIPS + 1):
            ours = shardvol.Volume(results["shardvol"], mip=k)[...]
            theirs = ts.open({**bv.ts_spec(results["TensorStore"]), "scale_index": k}).result()
            assert np.array_equal(ours, theirs.read(order="F").result()), f"mip {k} differs"
        path = os.path.join(scratch, "rss")
        shutil.copytree(source, path)
        rss = peak_rss_of_shardvol(path, ds.sharding)
    print(f"pyramid of {data.shape[:3]} uint8, {MIPS} mips {FACTOR}, sharded gzip outputs; "
          f"best of {args.repeat}; load average {bv.load_average()}")
    for name, t in best.items():
        print(f"  {name:<12} {t:7.3f} s")
    print(f"  shardvol is {best['TensorStore'] / best['shardvol']:.2f}x TensorStore; every mip "
          f"identical; peak RSS increase {rss / 1e6:.0f} MB (memory_limit {LIMIT})")


if __name__ == "__main__":
    main()
