"""Volumes at users' scale: 1, 2, 4 and 8 GiB (16 with --big), shardvol vs TensorStore.

Each volume is a uint8 image (1 GiB: 1024^3, 2: 1024^2 x 2048, 4: 2048^2 x 1024, 8: 2048^3,
16: 2048^2 x 4096) of 64^3 chunks, sharded with the spec shardvol's "auto" picks
for it (identity hash: shards are aligned blocks), raw or jpeg (quality 75), written once
by TensorStore under ``--data`` and reused.  ``--unsharded`` stores them as CloudVolume
does by default instead: a file per chunk (32,768 in one directory at 8 GiB; the
pyramid's scales are then unsharded too).  Every operation runs in a fresh process, one
library at a time, and the parent reads the child's resource use as the kernel counts it
(wait4): user and system CPU time and minor page faults; the child reports its own wall
time of the operation and its peak RSS (VmHWM).

Operations:
  read      the whole volume into one array (Fortran order, as stored)
  cutouts   64 random 256^3 boxes (one seeded list), one after another from one handle
  write     a fresh volume written in slabs of 256 z planes (each slab made before its
            write, untimed: the child times its writes alone; RSS includes the slab)
  pyramid   3 mips of factor (2, 2, 2), mean, aligned sharded raw output (TensorStore:
            tensorstore.downsample views of the base written scale by scale)
  zarr      a copy to a Zarr v3 array, shards of 256^3 of 64^3 zstd chunks (TensorStore:
            its zarr3 driver written from the precomputed one)
  first     what a script does first: import the library, open the volume and read one
            64^3 chunk in its middle (timed from the import)

``--remote`` reads (read, cutouts, first) and writes (write) the volumes through S3
instead: the S3 API of tests/fault_server.py, which answers path-style GETs, PUTs and
multipart uploads of the files under ``--data`` (bucket: its name) after ``--latency``
seconds (default 0.025), in its own process.

The page cache is warm (every file of the volume is read, untimed, before each run: a
previous run may have evicted some), and outputs go under ``--data``/scratch, removed after
each run.  Each line of the table is one run; "per GiB" is the wall time divided by the
volume's size, for the cost as it grows.

Run:  python benchmarks/bench_scale.py [--sizes 1 2 4 8] [--big] [--encodings raw jpeg]
      [--ops read cutouts write pyramid zarr first] [--libs shardvol tensorstore]
      [--data DIR] [--unsharded]
      [--remote [--latency 0.025]]
(shardvol built in place: PYTHONPATH=. from the repository)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

GIB = 1 << 30
CHUNK = (64, 64, 64)
SLAB = 256  # z planes per written slab
N_CUTOUTS = 64
CUTOUT = 256
ZARR_SHARD = (256, 256, 256)
LIBS = ("shardvol", "tensorstore")
SHAPES = {0.125: (512, 512, 512), 1: (1024, 1024, 1024), 2: (1024, 1024, 2048),
          4: (2048, 2048, 1024), 8: (2048, 2048, 2048), 16: (2048, 2048, 4096)}
OPS = ("read", "cutouts", "write", "pyramid", "zarr", "first")
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Case:
    gib: float
    encoding: str
    sharded: bool = True

    @property
    def shape(self) -> tuple[int, int, int]:
        """x, y, z of ``gib`` GiB of uint8 (a cube, or two cubes side by side)."""
        return SHAPES[self.gib]

    @property
    def name(self) -> str:
        return f"{self.gib:g}GiB-{self.encoding}" + ("" if self.sharded else "-unsharded")


def sharding_spec(shape: tuple[int, int, int]) -> dict:
    from shardvol.sharding import auto_sharding

    grid = [-(-n // c) for n, c in zip(shape, CHUNK)]
    return auto_sharding(grid_size=grid, chunk_bytes=int(np.prod(CHUNK)), encoding="raw"
                         ).to_dict()


def scale_metadata(case: Case) -> dict:
    meta: dict[str, object] = {
        "size": list(case.shape), "voxel_offset": [0, 0, 0], "chunk_size": list(CHUNK),
        "resolution": [8, 8, 8], "encoding": case.encoding}
    if case.sharded:
        meta["sharding"] = sharding_spec(case.shape)
    if case.encoding == "jpeg":
        meta["jpeg_quality"] = 75
    return meta


def ts_spec(path: str, **extra) -> dict:
    """TensorStore's spec of the volume at ``path``: a directory, or an ``s3://`` URL of
    the S3 server at ``$BENCH_S3_ENDPOINT`` (--remote)."""
    kvstore: dict = {"driver": "file", "path": path}
    if path.startswith("s3://"):
        bucket, _, key = path.removeprefix("s3://").partition("/")
        kvstore = {"driver": "s3", "bucket": bucket, "path": key + "/", "aws_region": "us-east-1",
                   "endpoint": os.environ["BENCH_S3_ENDPOINT"]}
    return {"driver": "neuroglancer_precomputed", "kvstore": kvstore, **extra}


def sv_store(path: str):  # (-> str | FsspecStore: shardvol is imported in the child only)
    """What shardvol opens for ``path`` (see ts_spec; a local path imports no remote store,
    as a user's script reading one does not)."""
    if path.startswith("s3://"):
        from shardvol.kvstore.fsspec_store import FsspecStore

        return FsspecStore(path, endpoint_url=os.environ["BENCH_S3_ENDPOINT"])
    return path


def sv_volume(path: str):  # (-> shardvol.Volume)
    """shardvol's volume at ``path`` (see ts_spec)."""
    import shardvol

    return shardvol.Volume(sv_store(path))


def slab(shape: tuple[int, int, int], z0: int, z1: int) -> np.ndarray:
    """z planes [z0, z1) of a smooth noisy image (the same wherever it is made), made a plane
    at a time: the slab is the only large array."""
    x = np.arange(shape[0], dtype=np.float32)[:, None]
    y = np.arange(shape[1], dtype=np.float32)[None, :]
    plane = (100 + 60 * np.sin(x / 37) * np.cos(y / 53)).astype(np.uint8)
    out = np.empty((shape[0], shape[1], z1 - z0, 1), np.uint8, order="F")
    rng = np.random.default_rng(z0)
    for k, z in enumerate(range(z0, z1)):
        noise = np.frombuffer(rng.bytes(shape[0] * shape[1]), np.uint8).reshape(shape[:2])
        np.add(plane, noise & 15, out=out[:, :, k, 0])
        out[:, :, k, 0] += np.uint8(40 + 40 * np.sin(z / 29)) // 2
    return out


def ensure_source(root: str, case: Case) -> str:
    """The case's volume, written by TensorStore on first use."""
    import tensorstore as ts

    path = os.path.join(root, case.name)
    if os.path.exists(os.path.join(path, ".complete")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    print(f"writing {case.name} {case.shape} with TensorStore ...", flush=True)
    store = ts.open({**ts_spec(path), "create": True,
                     "multiscale_metadata": {"type": "image", "data_type": "uint8",
                                             "num_channels": 1},
                     "scale_metadata": scale_metadata(case)}).result()
    for z0 in range(0, case.shape[2], SLAB):
        z1 = min(z0 + SLAB, case.shape[2])
        with ts.Transaction() as txn:
            store.with_transaction(txn)[:, :, z0:z1].write(slab(case.shape, z0, z1)).result()
    open(os.path.join(path, ".complete"), "w").close()
    return path


def warm(path: str) -> None:
    """Read every file below ``path`` (into the page cache: the previous run, TensorStore's
    whole read of 8 GiB in 15 GiB of memory say, may have evicted some)."""
    for folder, _, names in os.walk(path):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(16 << 20):
                    pass


def cutout_boxes(shape: tuple[int, int, int]) -> list[tuple[slice, ...]]:
    rng = np.random.default_rng(1)
    return [tuple(slice(int(a), int(a) + CUTOUT)
                  for a in (rng.integers(0, n - CUTOUT + 1) for n in shape))
            for _ in range(N_CUTOUTS)]


# ----------------------------------------------------------------------- the child


def first_box(shape: tuple[int, int, int]) -> tuple[slice, ...]:
    """The chunk in the middle of a volume of ``shape``."""
    return tuple(slice(s // 2 // c * c, s // 2 // c * c + c) for s, c in zip(shape, CHUNK))


def child(op: str, lib: str, src: str, dst: str, case: Case) -> float:
    """Run one operation; returns the seconds it took (the write: its writes alone; first:
    from the library's import)."""
    started = time.perf_counter()
    if lib == "shardvol":
        import shardvol

        if op == "first":
            sv_volume(src)[first_box(case.shape)]
            return time.perf_counter() - started
        if op == "read":
            t0 = time.perf_counter()
            sv_volume(src)[...]
            return time.perf_counter() - t0
        if op == "cutouts":
            vol = sv_volume(src)
            t0 = time.perf_counter()
            for box in cutout_boxes(case.shape):
                vol[box]
            return time.perf_counter() - t0
        if op == "write":
            meta = scale_metadata(case)
            vol = shardvol.Volume.create(
                sv_store(dst), size=case.shape, chunk_size=CHUNK, resolution=(8, 8, 8),
                encoding=case.encoding, jpeg_quality=meta.get("jpeg_quality"),
                sharding=meta.get("sharding"))
            spent = 0.0
            for z0 in range(0, case.shape[2], SLAB):
                z1 = min(z0 + SLAB, case.shape[2])
                data = slab(case.shape, z0, z1)
                t0 = time.perf_counter()
                vol[:, :, z0:z1] = data
                spent += time.perf_counter() - t0
                del data
            return spent
        if op == "pyramid":
            t0 = time.perf_counter()
            shardvol.downsample(shardvol.Volume(dst), (2, 2, 2), 3, encoding="raw",
                                sharding="auto" if case.sharded else None, progress=False)
            return time.perf_counter() - t0
        if op == "zarr":
            t0 = time.perf_counter()
            shardvol.copy(src, dst, chunk_size=ZARR_SHARD, inner_chunk_shape=CHUNK,
                          progress=False)
            return time.perf_counter() - t0
    import tensorstore as ts

    if op == "first":
        ts.open(ts_spec(src)).result()[first_box(case.shape)].read(order="F").result()
        return time.perf_counter() - started
    if op == "read":
        t0 = time.perf_counter()
        ts.open(ts_spec(src)).result().read(order="F").result()
        return time.perf_counter() - t0
    if op == "cutouts":
        store = ts.open(ts_spec(src)).result()
        t0 = time.perf_counter()
        for box in cutout_boxes(case.shape):
            store[box].read(order="F").result()
        return time.perf_counter() - t0
    if op == "write":
        store = ts.open({**ts_spec(dst), "create": True,
                         "multiscale_metadata": {"type": "image", "data_type": "uint8",
                                                 "num_channels": 1},
                         "scale_metadata": scale_metadata(case)}).result()
        spent = 0.0
        for z0 in range(0, case.shape[2], SLAB):
            z1 = min(z0 + SLAB, case.shape[2])
            data = slab(case.shape, z0, z1)
            t0 = time.perf_counter()
            with ts.Transaction() as txn:
                store.with_transaction(txn)[:, :, z0:z1].write(data).result()
            spent += time.perf_counter() - t0
            del data
        return spent
    if op == "pyramid":
        t0 = time.perf_counter()
        base = ts.open(ts_spec(dst)).result()
        for k in range(1, 4):
            f = 2 ** k
            size = [-(-n // f) for n in case.shape]
            scale: dict[str, object] = {
                "size": size, "voxel_offset": [0, 0, 0], "chunk_size": list(CHUNK),
                "resolution": [8 * f] * 3, "encoding": "raw"}
            if case.sharded:
                scale["sharding"] = sharding_spec(tuple(size))
            out = ts.open({**ts_spec(dst), "create": True, "scale_metadata": scale}).result()
            with ts.Transaction() as txn:
                out.with_transaction(txn).write(
                    ts.downsample(base, [f, f, f, 1], "mean")).result()
        return time.perf_counter() - t0
    if op == "zarr":
        t0 = time.perf_counter()
        source = ts.open(ts_spec(src)).result()
        shape = [*case.shape, 1]
        out = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": dst},
                       "create": True, "metadata": {
                           "shape": shape, "data_type": "uint8",
                           "chunk_grid": {"name": "regular",
                                          "configuration": {"chunk_shape": [*ZARR_SHARD, 1]}},
                           "codecs": [{"name": "sharding_indexed", "configuration": {
                               "chunk_shape": [*CHUNK, 1],
                               "codecs": [{"name": "bytes"}, {"name": "zstd"}]}}]}}).result()
        out.write(source).result()
        return time.perf_counter() - t0
    raise ValueError(op)


# ----------------------------------------------------------------------- the parent


def run_child(op: str, lib: str, src: str, dst: str, case: Case) -> dict:
    """One operation in a fresh process: its timing and the kernel's counts of it."""
    argv = [sys.executable, os.path.abspath(__file__), "--child", op, lib, src, dst,
            str(case.gib), case.encoding, str(int(case.sharded))]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read() if proc.stdout else ""
    if proc.stdout:
        proc.stdout.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{lib} {op} {case.name} failed")
    timed, peak = json.loads(out.strip().splitlines()[-1])
    return {"timed": timed, "process": wall, "user": usage.ru_utime, "sys": usage.ru_stime,
            "rss": peak, "minflt": usage.ru_minflt}


def machine() -> str:
    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return "?"

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return (f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB; THP enabled "
            f"{read('/sys/kernel/mm/transparent_hugepage/enabled')}, defrag "
            f"{read('/sys/kernel/mm/transparent_hugepage/defrag')}; load "
            f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4, 8],
                        choices=sorted(SHAPES))
    parser.add_argument("--big", action="store_true", help="add 16 GiB")
    parser.add_argument("--encodings", nargs="+", default=["raw", "jpeg"],
                        choices=["raw", "jpeg"])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    parser.add_argument("--data", default=os.path.join(HERE, "data", "scale"))
    parser.add_argument("--quick", action="store_true", help="one 1/8 GiB raw volume")
    parser.add_argument("--unsharded", action="store_true",
                        help="a file per chunk (CloudVolume's default) instead of shards")
    parser.add_argument("--remote", action="store_true",
                        help="read and write through S3 (see above)")
    parser.add_argument("--latency", type=float, default=0.025)
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        op, lib, src, dst, gib, encoding, sharded = args.child
        seconds = child(op, lib, src, dst, Case(float(gib), encoding, sharded == "1"))
        with open("/proc/self/status") as f:  # (the peak RSS of this program, not the
            peak = next(int(line.split()[1]) for line in f  # parent's at the fork)
                        if line.startswith("VmHWM")) * 1024
        print(json.dumps([seconds, peak]))
        return
    sizes = [0.125] if args.quick else [*args.sizes, *([16] if args.big else [])]
    encodings = ["raw"] if args.quick else args.encodings
    os.makedirs(args.data, exist_ok=True)
    server = None
    if args.remote:
        sys.path.insert(0, os.path.dirname(HERE))
        from tests.fault_server import FaultServer

        args.ops = [op for op in args.ops if op in ("read", "cutouts", "first", "write")]
        server = FaultServer(os.path.dirname(os.path.abspath(args.data)), latency=args.latency)
        os.environ.update(BENCH_S3_ENDPOINT=server.url, AWS_ACCESS_KEY_ID="bench",
                          AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
        print(f"through S3: the fault server's API, {args.latency * 1000:g} ms latency",
              flush=True)
    try:
        run_cases(args, sizes, encodings)
    finally:
        if server is not None:
            server.close()


def run_cases(args: argparse.Namespace, sizes: list[float], encodings: list[str]) -> None:
    bucket = os.path.basename(os.path.abspath(args.data))
    print(f"machine: {machine()}", flush=True)
    print(f"{'case':<12} {'op':<8} {'library':<12} {'wall s':>8} {'user s':>8} {'sys s':>8} "
          f"{'peak RSS':>9} {'faults':>10} {'per GiB':>8} {'TS/shardvol':>11}", flush=True)
    for gib in sizes:
        for encoding in encodings:
            case = Case(gib, encoding, not args.unsharded)
            src = ensure_source(args.data, case)
            run_child("read", "shardvol", src, "", case)  # (warms the page cache)
            for op in args.ops:
                walls = {}
                for lib in args.libs:
                    dst = os.path.join(args.data, "scratch", f"{lib}-{op}" +
                                       (".zarr" if op == "zarr" else ""))
                    shutil.rmtree(dst, ignore_errors=True)
                    if op == "pyramid":
                        shutil.copytree(src, dst)
                    warm(dst if op == "pyramid" else src)
                    os.sync()
                    remote = f"s3://{bucket}/{os.path.relpath(dst, args.data)}"
                    r = run_child(op, lib, f"s3://{bucket}/{os.path.basename(src)}"
                                  if args.remote else src,
                                  remote if args.remote else dst, case)
                    shutil.rmtree(dst, ignore_errors=True)
                    walls[lib] = r["timed"]
                    ratio = (f"{walls['tensorstore'] / walls['shardvol']:.2f}x"
                             if len(walls) == 2 else "")
                    print(f"{case.name:<12} {op:<8} {lib:<12} {r['timed']:8.2f} "
                          f"{r['user']:8.2f} {r['sys']:8.2f} {r['rss'] / GIB:7.2f}Gi "
                          f"{r['minflt']:10d} {r['timed'] / gib:8.2f} {ratio:>11}",
                          flush=True)


if __name__ == "__main__":
    main()
