"""Floors: the work no library can skip, timed on this machine next to TensorStore.

For the datasets and operations of bench_volume.py, this times the parts of each operation
that every library must do, with the fastest code shardvol has for them, on all CPUs:

  decode    every stored chunk the operation touches, already in memory, decoded (gunzipped
            first for gzip shard data) into an output array that is already in memory: the
            codec's work alone (libjpeg-turbo, libdeflate, shardvol's cseg and copy kernels;
            raw chunk files are copied from the page cache, which no reader can avoid); for
            cutouts only the part of each chunk the box needs, as shardvol decodes it
  encode    every chunk encoded (and gzipped at level 6 for gzip shard data)
  disk      files of the encoded sizes (one per chunk, or one per shard) written and
            fsync'd by 8 threads: what a durable write costs at this disk's speed

A read's floor is its decode time, a write's max(encode, disk) (as if the two overlapped
perfectly); both leave out the cost of fresh output memory and of finding the chunks, so
the floor is a lower bound.  TensorStore's time over the floor is then an upper bound on
the speed-up over TensorStore that any library could reach with these codecs on this
machine: where it is below the issue's target (2x reads, 1.5x writes), the target cannot be
met here without a faster codec or disk.  Libraries and floors are interleaved, best of N.

Run:  python benchmarks/bench_floors.py [--repeat 5] [--only NAME] [--quick] [--data DIR]
      (shardvol built in place: PYTHONPATH=. from the repository)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np
from bench_volume import (
    DATASETS,
    FULL,
    MB,
    N_CUTOUTS,
    QUICK,
    Dataset,
    Shardvol,
    Sizes,
    TensorStore,
    cutout_boxes,
    dataset_arguments,
    ensure_dataset,
    prefault,
    source_array,
)

from shardvol import Volume
from shardvol._parallel import run_parallel
from shardvol.array.indexing import ChunkPart, chunk_parts, normalize_selection
from shardvol.compression import gzip_compress

THREADS = os.cpu_count() or 1
DISK_WRITERS = 8


def timed(fn: Callable[..., object], *args: object) -> float:
    """Seconds ``fn(*args)`` takes to return; freeing its result is not timed (as in
    bench_volume)."""
    t0 = time.perf_counter()
    result = fn(*args)
    elapsed = time.perf_counter() - t0
    del result
    return elapsed


def read_cutouts(lib: object, h: object, boxes: list) -> list:
    return [lib.read(h, b) for b in boxes]  # type: ignore[attr-defined]


class Floors:
    """The unskippable parts of reading and writing one dataset."""

    def __init__(self, path: str, ds: Dataset, data: np.ndarray, boxes: list) -> None:
        self.ds, self.data = ds, data
        self.array = Volume(path).chunked_array  # the grid, store and codec shardvol reads with
        self.full = self._parts((slice(None),) * 4)
        self.cutouts = [self._parts(b) for b in boxes]
        coords = [p.coord for p in self.full]
        self.stored = {c: (bytes(b), name) for c, b, name in self.array.store.iter_stored(coords)}
        self.out = np.empty(data.shape, data.dtype, order="F")
        self.out[...] = 0  # in memory before timing
        self.cut_out = [np.zeros((*(s.stop - s.start for s in b[:3]), 1), data.dtype, order="F")
                        for b in boxes]

    def _parts(self, box: tuple) -> list[ChunkPart]:
        g = self.array.grid
        return chunk_parts(normalize_selection(box, g.origin, g.shape), g)

    def _decode(self, parts: list[ChunkPart], out: np.ndarray) -> None:
        """``parts`` decoded into ``out`` by THREADS threads, each taking an equal share."""
        arr = self.array

        def share(i: int) -> None:
            mine = parts[i::THREADS]
            if arr.box_reader is not None:  # raw chunk files: read the boxes straight into out
                mine = arr.box_reader.read_into(mine, out)
            for p in mine:
                blob, name = self.stored[p.coord]
                arr._decode_part(p, arr.store.decode_stored(blob, name), name, out)

        run_parallel(share, range(THREADS), THREADS)

    def decode_full(self) -> None:
        self._decode(self.full, self.out)

    def decode_cutouts(self) -> None:
        for parts, out in zip(self.cutouts, self.cut_out):
            self._decode(parts, out)

    def encode(self) -> list[int]:
        """Encoded sizes of every chunk (timed by the caller)."""
        sizes = [0] * len(self.full)
        gzip = (self.ds.sharding or {}).get("data_encoding") == "gzip"

        def one(i: int) -> None:
            p = self.full[i]
            blob = self.array.codec.encode(self.data[p.out_sel])  # a view, as writes pass it
            sizes[i] = len(gzip_compress(blob) if gzip else blob)

        run_parallel(one, range(len(self.full)), THREADS)
        return sizes

    def disk(self, sizes: list[int], directory: str) -> float:
        """Seconds to write and fsync files of the stored sizes (a file per chunk, or the
        chunks' bytes split over the shard files) with DISK_WRITERS threads."""
        if self.ds.sharding:
            n_shards = 2 ** self.ds.sharding["shard_bits"]
            files = [sum(sizes[i::n_shards]) for i in range(n_shards)]
        else:
            files = sizes
        payload = os.urandom(max(files))
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        os.sync()

        def write(i: int) -> None:
            fd = os.open(os.path.join(directory, str(i)), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                view = memoryview(payload)[: files[i]]
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)

        t0 = time.perf_counter()
        run_parallel(write, range(len(files)), DISK_WRITERS)
        elapsed = time.perf_counter() - t0
        shutil.rmtree(directory, ignore_errors=True)
        return elapsed


def bench(ds: Dataset, path: str, data: np.ndarray, sizes: Sizes, scratch: str,
          repeat: int) -> list[tuple[str, float, float, float, float, float | None]]:
    """Rows (operation, target, TensorStore s, shardvol s, decode or encode s, disk s)."""
    boxes = cutout_boxes(sizes.shape(ds), sizes.cutout)
    floors = Floors(path, ds, data, boxes)
    libs = {"TensorStore": TensorStore(), "shardvol": Shardvol()}
    t = {k: {"full": np.inf, "cut": np.inf, "write": np.inf} for k in libs}
    f = dict.fromkeys(("decode", "cut", "encode", "disk"), np.inf)
    for _ in range(repeat):  # interleaved: libraries and floors share the machine's load
        for name, lib in libs.items():
            prefault(data.nbytes)
            t[name]["full"] = min(t[name]["full"], timed(lib.read, lib.open(path), None))
            prefault(data.nbytes)
            t[name]["cut"] = min(t[name]["cut"], timed(read_cutouts, lib, lib.open(path), boxes))
            target = os.path.join(scratch, name)
            shutil.rmtree(target, ignore_errors=True)
            os.sync()  # as in bench_volume
            t[name]["write"] = min(t[name]["write"], timed(lib.write, target, ds, data))
            shutil.rmtree(target, ignore_errors=True)
        f["decode"] = min(f["decode"], timed(floors.decode_full))
        f["cut"] = min(f["cut"], timed(floors.decode_cutouts))
        t0 = time.perf_counter()
        encoded = floors.encode()
        f["encode"] = min(f["encode"], time.perf_counter() - t0)
        f["disk"] = min(f["disk"], floors.disk(encoded, os.path.join(scratch, "floor")))
    return [
        ("full read", 2.0, t["TensorStore"]["full"], t["shardvol"]["full"], f["decode"], None),
        (f"{N_CUTOUTS} cutouts {sizes.cutout}^3", 2.0, t["TensorStore"]["cut"],
         t["shardvol"]["cut"], f["cut"], None),
        ("full write", 1.5, t["TensorStore"]["write"], t["shardvol"]["write"], f["encode"],
         f["disk"]),
    ]


def main() -> None:
    args = dataset_arguments(__doc__.split("\n")[0]).parse_args()
    sizes = QUICK if args.quick else FULL
    print(f"{THREADS} CPUs; best of {args.repeat}; MB/s (10^6 bytes) of decoded output")
    print("\n| dataset | operation | TensorStore | shardvol | decode or encode | disk | floor "
          "| TensorStore / floor time | shardvol / TensorStore | target |")
    print("|---|---|" + "---:|" * 8)
    sources: dict[str, np.ndarray] = {}
    scratch = tempfile.mkdtemp(dir=os.path.join(args.data))
    try:
        for ds in DATASETS:
            if (args.only and ds.name not in args.only) or not ds.tensorstore:
                continue  # (floors are set beside TensorStore)
            if ds.source not in sources:
                sources[ds.source] = source_array(ds, sizes)
            data = sources[ds.source]
            path = ensure_dataset(args.data, ds, data)
            for op, target, ts_s, sv_s, a, b in bench(ds, path, data, sizes, scratch,
                                                      args.repeat):
                nbytes = data.nbytes if "cutouts" not in op else (
                    N_CUTOUTS * sizes.cutout**3 * data.itemsize)
                floor = a if b is None else max(a, b)
                cells = [None if s is None else nbytes / s / MB for s in (ts_s, sv_s, a, b, floor)]
                print(f"| {ds.name} | {op} | "
                      + " | ".join("-" if c is None else f"{c:,.0f}" for c in cells)
                      + f" | {ts_s / floor:.2f}x | {ts_s / sv_s:.2f}x | {target}x |", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
