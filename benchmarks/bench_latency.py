"""Hiding an object store's latency: futures, the chunk cache and prefetch, shardvol beside
TensorStore, in one run.

The benchmark volumes of bench_volume.py are served over HTTP by tests/fault_server.py with
``--latency`` seconds (default 0.025) before every answer, as in bench_remote.py.  Each row
opens fresh handles (shardvol's shared chunk cache emptied), keeps the best of ``--repeat``
runs, counts the requests the server answered, and checks every array read.

  24 cutouts    the 24 random 100^3 boxes of bench_volume.py: one after another, and all
                issued at once (shardvol ``read_async``, TensorStore ``read()`` futures)
  16 planes     16 consecutive xy planes in one row of chunks, one read each: the
                chunk cache off (``cache_bytes=0``) and on (the remote default, 256 MB);
                TensorStore by default (no cache) and with a 256 MB cache pool
  loader loop   the 24 cutouts read one after another, each followed by a compute step
                (numpy work on the array, about ``--compute`` seconds): without help,
                with ``prefetch`` of the next box, with ``read_async`` of the next box,
                and TensorStore reading the next box ahead; beside the compute alone

Run:  python benchmarks/bench_latency.py [--quick] [--repeat 2] [--latency 0.025]
      [--only NAME] [--compute 0.08]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorstore as ts

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_remote as br  # noqa: E402
import bench_volume as bv  # noqa: E402

from shardvol import Volume  # noqa: E402
from shardvol.kvstore.fsspec_store import FsspecStore  # noqa: E402
from tests.fault_server import FaultServer  # noqa: E402

CACHE = 256 << 20
Box = tuple[slice, ...]


def open_shardvol(url: str, cache_bytes: int | None = None) -> Volume:
    vol = Volume(FsspecStore(url, skip_instance_cache=True), cache_bytes=cache_bytes)
    if vol.cache is not None:
        vol.cache.clear()  # (the cache is shared with handles of earlier runs)
    return vol


def open_tensorstore(url: str, cache_bytes: int = 0) -> Any:
    spec: dict[str, Any] = {"driver": "neuroglancer_precomputed",
                            "kvstore": {"driver": "http", "base_url": url}}
    if cache_bytes:
        spec["context"] = {"cache_pool": {"total_bytes_limit": cache_bytes}}
    return ts.open(spec, read=True).result()


def sequential(read: Callable[[Box], np.ndarray]) -> Callable[[list[Box]], list[np.ndarray]]:
    return lambda boxes: [read(b) for b in boxes]


def all_at_once(issue: Callable[[Box], Any]) -> Callable[[list[Box]], list[np.ndarray]]:
    def run(boxes: list[Box]) -> list[np.ndarray]:
        futures = [issue(b) for b in boxes]
        return [f.result() for f in futures]

    return run


def compute(a: np.ndarray, seconds: float) -> float:
    """numpy work on ``a`` taking about ``seconds`` (a loader's per-sample step)."""
    f = a.astype(np.float32)
    total = 0.0
    t0 = time.perf_counter()
    while True:
        total += float(np.sqrt(f * f + 1.0).sum())
        if time.perf_counter() - t0 >= seconds:
            return total


def loader(get: Callable[[Box], np.ndarray], ahead: Callable[[Box], Any] | None,
           seconds: float) -> Callable[[list[Box]], list[np.ndarray]]:
    """A loop that reads each box and computes on it; with ``ahead``, the next box is
    started (prefetched or read) before the current one is computed on."""

    def run(boxes: list[Box]) -> list[np.ndarray]:
        out = []
        pending = ahead(boxes[0]) if ahead else None
        for i, box in enumerate(boxes):
            if pending is None:
                a = get(box)
            else:
                result = pending.result()  # (a prefetch's is None: the box is in the cache)
                pending = ahead(boxes[i + 1]) if ahead and i + 1 < len(boxes) else None
                a = get(box) if result is None else np.asarray(result)
            compute(a, seconds)
            out.append(a)
        return out

    return run


def timed_best(run: Callable[[], Callable[[list[Box]], list[np.ndarray]]],
               boxes: list[Box], data: np.ndarray, server: FaultServer,
               repeat: int) -> tuple[float, int, int]:
    """Best seconds of ``repeat`` runs of a fresh workload, with the requests and bytes the
    server answered in that run; every array checked."""
    best: tuple[float, int, int] | None = None
    for _ in range(repeat):
        work = run()  # (a fresh handle, opened untimed)
        server.stats(reset=True)
        t0 = time.perf_counter()
        got = work(boxes)
        elapsed = time.perf_counter() - t0
        stats = server.stats()
        for box, a in zip(boxes, got):
            if not np.array_equal(np.asarray(a).reshape(data[box].shape), data[box]):
                raise AssertionError("a read returned wrong voxels")
        if best is None or elapsed < best[0]:
            best = (elapsed, stats["requests"], stats["bytes"])
    assert best is not None
    return best


def row_planes(depth: int) -> list[Box]:
    """16 consecutive xy planes inside the chunk row through the middle of the volume."""
    z0 = depth // 2 // bv.CHUNK[2] * bv.CHUNK[2] + 8
    return [(slice(None), slice(None), slice(z, z + 1), slice(None))
            for z in range(z0, z0 + br.N_PLANES)]


def cell(r: tuple[float, int, int]) -> str:
    return f"{r[0] * 1000:,.0f} ms, {r[1]} req"


TABLES = {
    "cutouts": "| dataset | shardvol one after another | shardvol `read_async`, all at once "
               "| TensorStore one after another | TensorStore futures, all at once "
               "| one after another / at once | TensorStore at once / shardvol at once |",
    "planes": "| dataset | shardvol, cache off | shardvol, cache on (256 MB) "
              "| TensorStore | TensorStore, 256 MB cache pool | off / on "
              "| TensorStore cached / shardvol cached |",
    "loader": "| dataset | compute alone | shardvol, no help | shardvol, `prefetch` next "
              "| shardvol, `read_async` next | TensorStore, next read ahead "
              "| prefetch loop / compute | TensorStore / shardvol prefetch |",
}


def rows(ds_name: str, url: str, data: np.ndarray, boxes: list[Box], planes: list[Box],
         server: FaultServer, args: argparse.Namespace) -> dict[str, str]:
    """One row of each table for one dataset."""
    rep = args.repeat

    def best(*runs: Callable[[], Any], on: list[Box] = boxes) -> list[tuple[float, int, int]]:
        return [timed_best(run, on, data, server, rep) for run in runs]

    def sv(cache: int | None = None) -> Callable[[Box], np.ndarray]:
        v = open_shardvol(url, cache)
        return lambda b: v[b]

    def tsv(cache: int = 0) -> Callable[[Box], Any]:
        h = open_tensorstore(url, cache)
        return lambda b: h[b].read(order="F")

    def blocking(read: Callable[[Box], Any]) -> Callable[[Box], np.ndarray]:
        return lambda b: read(b).result()

    out = {}
    a, b, c, d = best(
        lambda: sequential(sv()),
        lambda: all_at_once(open_shardvol(url).read_async),
        lambda: sequential(blocking(tsv())),
        lambda: all_at_once(tsv()),
    )
    out["cutouts"] = (f"| {ds_name} | {cell(a)} | **{cell(b)}** | {cell(c)} | {cell(d)} "
                      f"| {a[0] / b[0]:.1f}x | {d[0] / b[0]:.2f}x |")

    a, b, c, d = best(
        lambda: sequential(sv(0)),
        lambda: sequential(sv(CACHE)),
        lambda: sequential(blocking(tsv())),
        lambda: sequential(blocking(tsv(CACHE))),
        on=planes,
    )
    out["planes"] = (f"| {ds_name} | {cell(a)} | **{cell(b)}**, {b[2] / 1e6:.1f} MB "
                     f"| {cell(c)} | {cell(d)} | {a[0] / b[0]:.1f}x | {d[0] / b[0]:.2f}x |")

    s = args.compute
    t0 = time.perf_counter()
    for box in boxes:
        compute(data[box], s)
    alone = time.perf_counter() - t0

    def shardvol_loop(how: str) -> Callable[[list[Box]], list[np.ndarray]]:
        v = open_shardvol(url)
        ahead = {"none": None, "prefetch": v.prefetch, "read_async": v.read_async}[how]
        return loader(lambda b: v[b], ahead, s)

    def ts_loop() -> Callable[[list[Box]], list[np.ndarray]]:
        read = tsv()
        return loader(blocking(read), read, s)

    a, b, c, d = best(lambda: shardvol_loop("none"), lambda: shardvol_loop("prefetch"),
                      lambda: shardvol_loop("read_async"), ts_loop)
    out["loader"] = (f"| {ds_name} | {alone * 1000:,.0f} ms | {cell(a)} | **{cell(b)}** "
                     f"| {cell(c)} | {cell(d)} | {b[0] / alone:.2f}x | {d[0] / b[0]:.2f}x |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.025)
    ap.add_argument("--quick", action="store_true", help="smaller volumes")
    ap.add_argument("--only", action="append", choices=br.REMOTE)
    ap.add_argument("--compute", type=float, default=0.08,
                    help="seconds of compute per box in the loader loop")
    args = ap.parse_args()
    sizes = bv.QUICK if args.quick else bv.FULL
    names = args.only or br.REMOTE
    print(f"{os.cpu_count()} CPUs, latency {args.latency * 1000:g} ms, best of {args.repeat}; "
          "time and the requests the server answered; bold: what the ratios divide by",
          flush=True)
    os.makedirs(args.data, exist_ok=True)
    tables: dict[str, list[str]] = {name: [] for name in TABLES}
    for ds in (d for d in bv.DATASETS if d.name in names):
        path = bv.ensure_dataset(args.data, ds, bv.source_array(ds, sizes))
        data = bv.TensorStore().read(bv.TensorStore().open(path), None)  # (jpeg is lossy)
        boxes = bv.cutout_boxes(data.shape[:3], sizes.cutout)
        planes = row_planes(data.shape[2])
        with FaultServer(args.data, latency=args.latency) as server:
            url = f"{server.url}/{os.path.basename(path)}"
            for name, row in rows(ds.name, url, data, boxes, planes, server, args).items():
                tables[name].append(row)
                print(row, file=sys.stderr, flush=True)
    for name, header in TABLES.items():
        rule = "|---|" + "---:|" * (header.count("|") - 2)
        print("\n" + header + "\n" + rule + "\n" + "\n".join(tables[name]))


if __name__ == "__main__":
    main()
