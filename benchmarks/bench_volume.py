"""Volume reads and writes: shardvol vs TensorStore vs CloudVolume, side by side, in one run.

Datasets (created under ``--data`` on first use, then reused; written by TensorStore so no
library under test wrote what it reads):

  raw            smooth noisy uint8 image 512^3, 64^3 chunks, raw, unsharded
  raw sharded    the same image, identity hash, preshift 3 / minishard 3 / shard 3 bits,
                 gzip minishard indexes and gzip data (8 shard files of 256^3 voxels)
  jpeg sharded   the same image and spec, jpeg (quality 75) chunks, raw (not gzipped) data
  cseg           blocky uint64 segmentation 512 x 512 x 128, 64^3 chunks,
                 compressed_segmentation with 8^3 blocks, unsharded
  cseg sharded   the same segmentation, murmurhash3_x86_128, preshift 0 / minishard 3 /
                 shard 3 bits, gzip minishard indexes, raw data (cseg is already compact)
  compresso      the same segmentation, 64^3 chunks, compresso, unsharded
  crackle        the same segmentation, 64^3 chunks, crackle, unsharded
                 (both written by CloudVolume, plain chunk files: TensorStore knows neither
                 encoding, so CloudVolume is the one peer; the target is its speed)

Operations, MB/s of decoded output (10^6 bytes of the numpy array):
  full read      the whole volume into a new array
  cutouts        24 random 100^3 boxes (one seeded list, the same for every library),
                 read one after another from one handle
  full write     create a fresh volume and write the whole array into it

Every repetition opens a fresh handle for each library (no index or chunk caches carried
over) outside the timed part, after touching as much memory as a full read returns (see
prefault()); creating the volume is part of the timed write, which starts after os.sync()
(CloudVolume does not fsync: its files would be written back during the next library's
write).  The libraries are interleaved (A B C A B C ...) so they share the machine's load,
and the best of ``--repeat`` runs is kept.  The page cache is warm: every library reads every
dataset once
(untimed) first, and checks that it reads the same array as shardvol; after the timings,
what each library wrote is read back by TensorStore and checked.

Settings, each library's fast path for local files:
  shardvol     Volume(path) defaults (threads = CPU count, fsync'd atomic file writes,
               gzip level 6 like TensorStore's; ``--compress-level`` sets another).
  TensorStore  default context (data_copy_concurrency and file_io_concurrency defaults,
               no cache pool, file_io_sync on: writes are fsync'd); reads ask for
               order="F" (the chunks' and shardvol's layout); sharded writes run in
               one transaction (whole shards written at commit; about as fast as without).
  TensorStore C order
               the same, reading with read()'s default order="C" (what users type; it
               transposes, 5-15x slower on full reads); writes: "n/a" (the same as above).
  CloudVolume  parallel=1 (otherwise it forks processes), fill_missing=True, cache=False,
               progress=False; writes with compress=False (its default gzips raw and cseg
               chunks, which the other two do not).  It cannot write sharded volumes: "n/a".

Also printed: the peak RSS increase of a full shardvol read relative to the output array,
measured in a fresh subprocess: the peak RSS (VmHWM, the figure ru_maxrss reports), reset just
before the read, minus the RSS before it.

Run:  python benchmarks/bench_volume.py [--repeat 3] [--only NAME] [--quick] [--data DIR]
      [--no-cloudvolume]      (shardvol built in place: PYTHONPATH=. from the repository)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorstore as ts

from shardvol import Volume

HERE = os.path.dirname(os.path.abspath(__file__))
MB = 1e6
N_CUTOUTS = 24


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str  # "image" or "segmentation"
    encoding: str
    sharding: dict | None = None
    tensorstore: bool = True  # whether TensorStore knows the encoding (then it writes the data)
    target: float | None = None  # shardvol / best peer to reach (None: 2x reads, 1.5x writes)

    @property
    def block_size(self) -> list[int] | None:
        return [8, 8, 8] if self.encoding == "compressed_segmentation" else None


def _spec(hash_: str, preshift: int, data_encoding: str) -> dict:
    return {
        "@type": "neuroglancer_uint64_sharded_v1", "hash": hash_, "preshift_bits": preshift,
        "minishard_bits": 3, "shard_bits": 3, "minishard_index_encoding": "gzip",
        "data_encoding": data_encoding,
    }


DATASETS = [
    Dataset("raw", "image", "raw"),
    Dataset("raw sharded", "image", "raw", _spec("identity", 3, "gzip")),
    Dataset("jpeg sharded", "image", "jpeg", _spec("identity", 3, "raw")),
    Dataset("cseg", "segmentation", "compressed_segmentation"),
    Dataset("cseg sharded", "segmentation", "compressed_segmentation",
            _spec("murmurhash3_x86_128", 0, "raw")),
    Dataset("compresso", "segmentation", "compresso", tensorstore=False, target=1.0),
    Dataset("crackle", "segmentation", "crackle", tensorstore=False, target=1.0),
]


@dataclass(frozen=True)
class Sizes:
    image: tuple[int, int, int]
    segmentation: tuple[int, int, int]
    cutout: int

    def shape(self, ds: Dataset) -> tuple[int, int, int]:
        return getattr(self, ds.source)


FULL = Sizes(image=(512, 512, 512), segmentation=(512, 512, 128), cutout=100)
QUICK = Sizes(image=(192, 192, 192), segmentation=(192, 192, 128), cutout=64)
CHUNK = [64, 64, 64]


# -- data -----------------------------------------------------------------------------------


def make_image(shape: tuple[int, int, int]) -> np.ndarray:
    """Smooth gradients and waves plus noise, uint8, (x, y, z, 1) Fortran order."""
    rng = np.random.default_rng(0)
    x, y = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij", sparse=True)
    out = np.empty((*shape, 1), dtype=np.uint8, order="F")
    for z in range(shape[2]):
        smooth = (110 + 50 * np.sin(x / 37.0 + z / 53.0) * np.cos(y / 29.0 - z / 71.0)
                  + 0.06 * (x + y) + 20 * np.sin(z / 17.0))
        noise = rng.normal(0, 6, (shape[0], shape[1]))
        out[:, :, z, 0] = np.clip(smooth + noise, 0, 255).astype(np.uint8)
    return out


def make_segmentation(shape: tuple[int, int, int]) -> np.ndarray:
    """Boxes of 8-48 voxels per side with random 64-bit labels, (x, y, z, 1) Fortran order."""
    rng = np.random.default_rng(1)
    cells = []
    for n in shape:
        edges = np.cumsum(rng.integers(8, 49, n))  # far more edges than needed
        cells.append(np.searchsorted(edges, np.arange(n), side="right"))
    labels = rng.integers(1, 2**63, (cells[0][-1] + 1, cells[1][-1] + 1, cells[2][-1] + 1),
                          dtype=np.uint64)
    out = labels[np.ix_(*cells)]
    return np.asfortranarray(out[..., None])


def source_array(ds: Dataset, sizes: Sizes) -> np.ndarray:
    make = make_image if ds.source == "image" else make_segmentation
    return make(sizes.shape(ds))


def ts_spec(path: str) -> dict:
    return {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": path}}


def ts_create_spec(path: str, ds: Dataset, data: np.ndarray) -> dict:
    scale: dict[str, Any] = {
        "size": list(data.shape[:3]), "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
        "chunk_size": CHUNK, "encoding": ds.encoding,
    }
    if ds.block_size:
        scale["compressed_segmentation_block_size"] = ds.block_size
    if ds.sharding:
        scale["sharding"] = ds.sharding
    return {
        **ts_spec(path), "create": True,
        "multiscale_metadata": {"data_type": data.dtype.name, "num_channels": 1,
                                "type": ds.source},
        "scale_metadata": scale,
    }


def ensure_dataset(root: str, ds: Dataset, data: np.ndarray) -> str:
    """Path of the dataset, written by TensorStore (by CloudVolume for the encodings
    TensorStore does not know) unless a complete copy exists."""
    path = os.path.join(root, ds.name.replace(" ", "_") + "_" + "x".join(map(str, data.shape[:3])))
    done = os.path.join(path, ".complete")
    if not os.path.exists(done):
        shutil.rmtree(path, ignore_errors=True)
        print(f"creating {path} ...", flush=True)
        if ds.tensorstore:
            store = ts.open(ts_create_spec(path, ds, data)).result()
            with ts.Transaction() as txn:
                store.with_transaction(txn).write(data).result()
        else:
            CloudVolumeLib().write(path, ds, data)
        with open(done, "w") as f:
            f.write(f"written by {'TensorStore' if ds.tensorstore else 'CloudVolume'}\n")
    return path


# -- the libraries --------------------------------------------------------------------------


class Shardvol:
    name = "shardvol"

    def supports(self, ds: Dataset) -> bool:
        return True

    def __init__(self, compress_level: int | None = None) -> None:
        self.compress_level = compress_level  # of gzip shard data; None: the default (6)

    def open(self, path: str) -> Any:
        return Volume(path)

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return h[...] if box is None else h[box]

    def write(self, path: str, ds: Dataset, data: np.ndarray) -> None:
        vol = Volume.create(
            path, size=data.shape[:3], type=ds.source, data_type=data.dtype.name,
            chunk_size=CHUNK, encoding=ds.encoding,
            compressed_segmentation_block_size=ds.block_size, sharding=ds.sharding,
            compress_level=self.compress_level,
        )
        vol[...] = data


class TensorStore:
    name = "TensorStore"

    def supports(self, ds: Dataset) -> bool:
        return ds.tensorstore

    def open(self, path: str) -> Any:
        return ts.open(ts_spec(path), read=True).result()

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return (h if box is None else h[box]).read(order="F").result()

    def write(self, path: str, ds: Dataset, data: np.ndarray) -> None:
        store = ts.open(ts_create_spec(path, ds, data)).result()
        if ds.sharding:
            with ts.Transaction() as txn:
                store.with_transaction(txn).write(data).result()
        else:
            store.write(data).result()


class TensorStoreDefaultOrder(TensorStore):
    """TensorStore reads as users type them: ``read()`` returns a C-order array."""

    name = "TensorStore C order"

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return (h if box is None else h[box]).read().result()

    def write(self, path: str, ds: Dataset, data: np.ndarray) -> str:
        return "n/a"  # the same as TensorStore's: the written array's layout is the caller's


class CloudVolumeLib:
    name = "CloudVolume"

    def __init__(self) -> None:
        warnings.filterwarnings("ignore", module="cloudvolume")
        from cloudvolume import CloudVolume

        self.cls = CloudVolume

    def supports(self, ds: Dataset) -> bool:
        return True

    def open(self, path: str) -> Any:
        return self.cls(f"file://{path}", mip=0, fill_missing=True, bounded=True, cache=False,
                        progress=False, parallel=1)

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return np.asarray(h[:, :, :] if box is None else h[box[:3]])

    def write(self, path: str, ds: Dataset, data: np.ndarray) -> str | None:
        if ds.sharding:
            return "n/a"
        info = self.cls.create_new_info(
            num_channels=1, layer_type=ds.source, data_type=data.dtype.name,
            encoding=ds.encoding, resolution=[1, 1, 1], voxel_offset=[0, 0, 0],
            volume_size=list(data.shape[:3]), chunk_size=CHUNK,
            compressed_segmentation_block_size=ds.block_size or (8, 8, 8),
        )
        vol = self.cls(f"file://{path}", info=info, compress=False, parallel=1, progress=False,
                       cache=False)
        vol.commit_info()
        vol[:, :, :] = data
        return None


# -- timing ---------------------------------------------------------------------------------


@dataclass
class Op:
    """A timed operation: ``setup()`` (untimed) returns the state ``run(state)`` uses."""

    setup: Callable[[], Any]
    run: Callable[[Any], Any]
    cleanup: Callable[[], None] = lambda: None


def best_times(ops: dict[str, Op], repeat: int) -> dict[str, float | None]:
    """Best wall time per library; libraries interleaved; None when a library cannot.

    A run's result (and open handle) is dropped after its clock stops and before the next
    library's turn: freeing one library's output must not be timed as part of another's
    run (a 256 MiB array in 4 KiB pages takes about 20 ms to unmap here)."""
    best: dict[str, float | None] = dict.fromkeys(ops, float("inf"))
    for _ in range(repeat):
        for name, op in ops.items():
            if best[name] is None:
                continue
            state = op.setup()
            t0 = time.perf_counter()
            result = op.run(state)
            elapsed = time.perf_counter() - t0
            cannot = isinstance(result, str)  # "n/a"
            del result, state
            op.cleanup()
            best[name] = None if cannot else min(best[name], elapsed)  # type: ignore[type-var]
    return best


def prefault(nbytes: int) -> None:
    """Touch and free ``nbytes`` of memory, so that the next large allocation gets pages the
    machine has already backed: on VMs that hand freed memory back to the host (free page
    reporting), a first touch of such memory costs about a second per GB."""
    np.ones(nbytes, dtype=np.uint8)


def cutout_boxes(shape: tuple[int, int, int], size: int) -> list[tuple[slice, ...]]:
    rng = np.random.default_rng(2024)
    boxes = []
    for _ in range(N_CUTOUTS):
        o = [int(rng.integers(0, n - size + 1)) for n in shape]
        boxes.append((*(slice(a, a + size) for a in o), slice(None)))
    return boxes


def bench_dataset(ds: Dataset, path: str, data: np.ndarray, libs: list, sizes: Sizes,
                  write_root: str, repeat: int) -> dict[str, dict[str, float | None]]:
    """{operation: {library: MB/s or None}} for one dataset (the libraries that know its
    encoding)."""
    libs = [lib for lib in libs if lib.supports(ds)]
    expected = Shardvol().read(Shardvol().open(path), None)
    if ds.encoding != "jpeg":
        assert np.array_equal(expected, data), f"{ds.name}: shardvol reads other data"
    for lib in libs:  # warm the page cache; every library must read the same array
        got = lib.read(lib.open(path), None)
        assert np.array_equal(got, expected), f"{ds.name}: {lib.name} reads other data"

    boxes = cutout_boxes(sizes.shape(ds), sizes.cutout)
    cut_bytes = N_CUTOUTS * sizes.cutout**3 * data.itemsize

    def read_ops(boxes_or_none: list | None) -> dict[str, Op]:
        def run_for(lib):
            if boxes_or_none is None:
                return lambda h: lib.read(h, None)
            return lambda h: [lib.read(h, b) for b in boxes_or_none]

        def setup(lib):
            prefault(data.nbytes)
            return lib.open(path)

        return {lib.name: Op(lambda lib=lib: setup(lib), run_for(lib)) for lib in libs}

    def write_op(lib) -> Op:
        target = os.path.join(write_root, lib.name)

        def setup() -> None:
            shutil.rmtree(target, ignore_errors=True)
            os.sync()  # what the previous library left to write back is not this one's

        return Op(setup, lambda _: lib.write(target, ds, data),
                  lambda: shutil.rmtree(target, ignore_errors=True))

    results = {}
    for op_name, ops, nbytes in (
        ("full read", read_ops(None), data.nbytes),
        (f"{N_CUTOUTS} cutouts {sizes.cutout}^3", read_ops(boxes), cut_bytes),
        ("full write", {lib.name: write_op(lib) for lib in libs}, data.nbytes),
    ):
        times = best_times(ops, repeat)
        results[op_name] = {k: None if t is None else nbytes / t / MB for k, t in times.items()}
    check_writes(ds, data, expected, libs, write_root)
    return results


def check_writes(ds: Dataset, data: np.ndarray, expected: np.ndarray, libs: list,
                 write_root: str) -> None:
    """Each library's written volume, read back by TensorStore (CloudVolume for the
    encodings TensorStore does not know), holds the data (untimed)."""
    reader = TensorStore() if ds.tensorstore else CloudVolumeLib()
    for lib in libs:
        target = os.path.join(write_root, lib.name)
        if lib.write(target, ds, data) != "n/a":
            back = reader.read(reader.open(target), None)
            want = expected if ds.encoding == "jpeg" else data  # jpeg: same encoder settings
            assert np.array_equal(back, want), f"{ds.name}: {lib.name} wrote other data"
        shutil.rmtree(target, ignore_errors=True)


# -- memory ---------------------------------------------------------------------------------


# A lean subprocess (no TensorStore or CloudVolume imported) whose peak RSS is reset to its
# current RSS just before the read (Linux /proc/self/clear_refs).
RSS_PROBE = """
import json, os, resource, sys
from shardvol import Volume


def peak_rss():  # VmHWM (what ru_maxrss reports for this process, resettable); else ru_maxrss
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) * 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


vol = Volume(sys.argv[1])
vol[0:1, 0:1, 0:1]  # imports, thread pools
try:  # Linux: reset the peak RSS to the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
with open("/proc/self/statm") as f:
    before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
slack = peak_rss() - before
out = vol[...]
print(json.dumps({"increase": peak_rss() - before, "nbytes": out.nbytes, "slack": slack}))
"""


def peak_memory(path: str) -> float:
    """Peak RSS increase of a full shardvol read / the output array's size (subprocess)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", RSS_PROBE, path], capture_output=True,
                          text=True, env=env, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if r["slack"] > 0.05 * r["nbytes"]:
        print(f"  (RSS probe: the peak before the read was {r['slack'] / MB:.0f} MB above the "
              "RSS; the figure may be too high)")
    return r["increase"] / r["nbytes"]


# -- report ---------------------------------------------------------------------------------


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def print_table(results: dict[str, dict[str, dict[str, float | None]]],
                names: list[str]) -> list[str]:  # (targets: from DATASETS by name)
    """Markdown table; returns the list of missed targets."""
    missed = []
    peers = [n for n in names if n != "shardvol"]
    print(f"\n| dataset | operation | {' | '.join(names)} | shardvol / best peer |")
    print("|---|---|" + "---:|" * (len(names) + 1))
    for ds_name, ops in results.items():
        for op_name, cells in ops.items():
            ours = cells["shardvol"]
            peer_vals = {p: cells[p] for p in peers if cells.get(p) is not None}
            if peer_vals and ours:
                best_peer = max(peer_vals, key=peer_vals.get)  # type: ignore[arg-type]
                ratio = ours / peer_vals[best_peer]
                ratio_text = f"{ratio:.2f}x ({best_peer})"
                target = next((d.target for d in DATASETS if d.name == ds_name), None) or (
                    1.5 if "write" in op_name else 2.0)
                if ratio < target:
                    missed.append(f"{ds_name} {op_name}: {ratio:.2f}x < {target}x")
            else:
                ratio_text = "-"
            row = " | ".join(fmt(cells.get(n)) for n in names)
            print(f"| {ds_name} | {op_name} | {row} | {ratio_text} |")
    return missed


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def dataset_arguments(description: str) -> argparse.ArgumentParser:
    """The options of the scripts that run over these datasets."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="dataset directory")
    ap.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    ap.add_argument("--only", action="append", choices=[d.name for d in DATASETS],
                    help="run only this dataset (repeatable)")
    ap.add_argument("--quick", action="store_true", help="smaller volumes, for smoke runs")
    return ap


def main() -> None:
    ap = dataset_arguments(__doc__.split("\n")[0])
    ap.add_argument("--no-cloudvolume", action="store_true", help="skip CloudVolume")
    ap.add_argument("--compress-level", type=int, default=None, metavar="0-12",
                    help="shardvol's gzip level for gzip shard data (default 6, as TensorStore)")
    args = ap.parse_args()
    sizes = QUICK if args.quick else FULL
    libs: list = [Shardvol(args.compress_level), TensorStore(), TensorStoreDefaultOrder()]
    if not args.no_cloudvolume:
        libs.append(CloudVolumeLib())
    names = [lib.name for lib in libs]
    datasets = [d for d in DATASETS if not args.only or d.name in args.only]
    write_root = os.path.join(args.data, "_writes")
    os.makedirs(write_root, exist_ok=True)
    print(f"{os.cpu_count()} CPUs, load average {load_average()} (1/5/15 min); "
          f"best of {args.repeat}; MB/s (10^6 bytes) of decoded output")
    if args.compress_level is not None:
        print(f"shardvol writes gzip shard data at level {args.compress_level} "
              "(TensorStore at 6)")

    sources: dict[str, np.ndarray] = {}
    results, memory = {}, {}
    for ds in datasets:
        if ds.source not in sources:
            sources[ds.source] = source_array(ds, sizes)
        data = sources[ds.source]
        path = ensure_dataset(args.data, ds, data)
        print(f"{ds.name}: {data.shape[:3]} {data.dtype} ...", flush=True)
        results[ds.name] = bench_dataset(ds, path, data, libs, sizes, write_root, args.repeat)
        memory[ds.name] = peak_memory(path)

    missed = print_table(results, names)
    print("\npeak RSS increase of a full shardvol read / output array size (target <= 1.5):")
    for name, ratio in memory.items():
        print(f"  {name}: {ratio:.2f}")
        if ratio > 1.5:
            missed.append(f"{name} full-read memory {ratio:.2f}x > 1.5x")
    raw_read = results.get("raw", {}).get("full read", {}).get("shardvol")
    if raw_read is not None and raw_read < 2000 and not args.quick:
        missed.append(f"raw full read {raw_read:,.0f} MB/s < 2,000 MB/s")
    print(f"\nload average at the end: {load_average()}")
    print("targets missed:" if missed else "all targets met")
    for m in missed:
        print("  " + m)


if __name__ == "__main__":
    main()
