"""Volumes read over HTTP from a slow, faulty object store: shardvol vs TensorStore vs
CloudVolume, side by side, in one run.

The benchmark volumes of bench_volume.py (written by TensorStore) are served by
tests/fault_server.py, an aiohttp server in its own process, with ``--latency`` seconds
(default 0.025, an object store's time to first byte) before every answer, strong ETags
and Range support.  Each library reads through ``http://127.0.0.1:PORT/NAME`` with its
defaults and a fresh handle (no caches carried over); the best of ``--repeat`` runs is
kept, the libraries interleaved.  The server counts the requests of each run, and every
result is checked against the array that was written.

Workloads, as a viewer or an analysis would issue them:
  full read     the whole volume
  24 cutouts    24 random 100^3 boxes, one after another
  16 planes     16 consecutive xy planes through the middle of the volume, one read each

The floor of a workload is what no library can beat here: shardvol's time for the same
reads of the local files (fresh handle), plus one latency per read, plus one more for a
sharded volume's first shard index.  ``--faults`` runs everything again with 5% of the
requests answered 503 and 2.5% of the connections dropped before any answer.
``--backends`` times the raw request path through shardvol's store and through obstore
(Rust object_store), at the same latency: a burst of 256 ranged GETs, 8 whole shards, and
the chunk files of the raw volume's 24 cutouts.
``--s3`` reads the volumes through the S3 API of a fast server (the fault server answering
path-style GETs of the files), and reads and writes the raw volumes through moto's S3
server in its own process (behind the fault server's latency): shardvol and TensorStore.
``--gcs`` reads the volumes through GCS's JSON API of a fast server (the fault server
answering media downloads of the files): shardvol, shardvol through gcsfs, TensorStore;
then through GCS (gcp-storage-emulator in its own process, behind the latency), without
and with the faults: shardvol, shardvol with gcsfs's reads and their retry loop (as it
was), and TensorStore.

Run:  python benchmarks/bench_remote.py [--quick] [--repeat 2] [--latency 0.025]
      [--faults] [--backends] [--s3] [--gcs] [--only NAME] [--no-cloudvolume]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import fsspec
import numpy as np
import tensorstore as ts

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_volume as bv  # noqa: E402

from shardvol import Volume  # noqa: E402
from shardvol.kvstore.fsspec_store import FsspecStore  # noqa: E402
from tests.fault_server import FaultServer  # noqa: E402

REMOTE = ["raw sharded", "jpeg sharded", "cseg sharded", "raw"]
N_PLANES = 16


class Lib:
    name = ""
    sharded_ok = True

    def open(self, url: str) -> Any:
        raise NotImplementedError

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        raise NotImplementedError


class Shardvol(Lib):
    name = "shardvol"

    def open(self, url: str) -> Any:
        if url.startswith("http"):
            vol = Volume(FsspecStore(url, skip_instance_cache=True))
            if vol.cache is not None:
                vol.cache.clear()  # (the process's cache of the volume outlives handles)
            return vol
        return Volume(url)

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return h[...] if box is None else h[box]


class TensorStore(Lib):
    name = "TensorStore"

    def open(self, url: str) -> Any:
        kv = {"driver": "http", "base_url": url}
        return ts.open({"driver": "neuroglancer_precomputed", "kvstore": kv},
                       read=True).result()

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return (h if box is None else h[box]).read(order="F").result()


class CloudVolumeLib(Lib):
    name = "CloudVolume"

    def __init__(self) -> None:
        warnings.filterwarnings("ignore", module="cloudvolume")
        from cloudvolume import CloudVolume

        self.cls = CloudVolume

    def open(self, url: str) -> Any:
        return self.cls(url, mip=0, fill_missing=True, bounded=True, cache=False,
                        progress=False, parallel=1)

    def read(self, h: Any, box: tuple[slice, ...] | None) -> np.ndarray:
        return np.asarray(h[:, :, :] if box is None else h[box[:3]])


def workloads(shape: tuple[int, int, int], sizes: bv.Sizes) -> dict[str, list]:
    """Name -> the boxes read one after another (None: the whole volume)."""
    z0 = shape[2] // 2 - N_PLANES // 2
    planes = [(slice(None), slice(None), slice(z, z + 1), slice(None))
              for z in range(z0, z0 + N_PLANES)]
    return {"full read": [None], "24 cutouts": bv.cutout_boxes(shape, sizes.cutout),
            f"{N_PLANES} planes": planes}


def run_reads(lib: Lib, url: str, boxes: list, data: np.ndarray) -> float:
    """Seconds to open a fresh handle's reads (the open is untimed); checks every result."""
    h = lib.open(url)
    t0 = time.perf_counter()
    results = [lib.read(h, box) for box in boxes]  # one after another
    elapsed = time.perf_counter() - t0
    for box, got in zip(boxes, results):
        want = data if box is None else data[box]
        if not np.array_equal(np.asarray(got).reshape(want.shape), want):
            raise AssertionError(f"{lib.name} read wrong voxels")
    return elapsed


def measure(libs: list[Lib], server: FaultServer, url_of: Callable[[str], str],
            local: str, data: np.ndarray, boxes: list, repeat: int,
            sharded: bool, latency: float) -> dict[str, Any]:
    """Best time and requests of each library, and the floor."""
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeat):
        for lib in libs:
            server.stats(reset=True)
            t = run_reads(lib, url_of(lib.name), boxes, data)
            n = server.stats()["requests"]
            if lib.name not in best or t < best[lib.name][0]:
                best[lib.name] = (t, n)
    local_t = min(run_reads(Shardvol(), local, boxes, data) for _ in range(repeat))
    floor = local_t + latency * (len(boxes) + (1 if sharded else 0))
    return {"best": best, "floor": floor}


def fmt_row(name: str, op: str, r: dict[str, Any], libs: list[Lib]) -> str:
    best = r["best"]
    cells = []
    for lib in libs:
        t, n = best[lib.name]
        cells.append(f"{t * 1000:,.0f} ms, {n} req")
    mine = best["shardvol"][0]
    peers = [best[lib.name][0] for lib in libs if lib.name != "shardvol"]
    ratio = f"{min(peers) / mine:.2f}x" if peers else "-"
    return (f"| {name} | {op} | " + " | ".join(cells)
            + f" | {ratio} | {r['floor'] * 1000:,.0f} ms ({mine / r['floor']:.2f}x) |")


def bench_backends(root: str, sharded: str, unsharded: str, latency: float,
                   cutout: int) -> None:
    """The raw request path, shardvol's store against obstore (Rust object_store): a burst
    of 256 ranged GETs of one sharded volume's shards, its 8 whole shards, and the whole
    chunk files of the 24 cutouts of the unsharded raw volume, cutout after cutout.

    obstore is timed through its blocking calls from a pool of 64 threads (they release
    the GIL and run on its own Rust runtime: its efficient mode) and through its asyncio
    calls, which poll the Rust futures holding the GIL on Python's event loop.
    """
    try:
        import obstore
        from obstore.store import HTTPStore
    except ImportError:
        print("obstore not installed: backends skipped")
        return
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from shardvol.array.indexing import chunk_parts
    from shardvol.precomputed.unsharded import chunk_key

    shards = sorted(os.path.relpath(os.path.join(d, f), sharded)
                    for d, _, files in os.walk(sharded) for f in files if f.endswith(".shard"))
    sizes = [os.path.getsize(os.path.join(sharded, f)) for f in shards]
    rng = np.random.default_rng(5)
    ranges = []
    for _ in range(256):
        i = int(rng.integers(len(shards)))
        a = int(rng.integers(0, sizes[i] - 65536))
        ranges.append((shards[i], a, a + 65536))
    vol = Volume(unsharded)
    grid, scale = vol.chunked_array.grid, vol.info["scales"][0]["key"]
    cutouts = [[f"{scale}/{chunk_key(grid, p.coord)}" for p in
                chunk_parts(vol._selection(box, True), grid)]
               for box in bv.cutout_boxes(vol.shape[:3], cutout)]
    threads = ThreadPoolExecutor(64)
    with FaultServer(root, latency=latency) as server:
        def stores(path: str) -> tuple[FsspecStore, Any]:
            base = f"{server.url}/{os.path.basename(path)}"
            return (FsspecStore(base, skip_instance_cache=True),
                    HTTPStore.from_url(base, client_options={"allow_http": True}))

        ours, theirs = stores(sharded)
        ours_u, theirs_u = stores(unsharded)

        def blocking(store: Any, keys: list[str]) -> list:
            return list(threads.map(lambda k: obstore.get(store, k).bytes(), keys))

        async def whole_async(store: Any, keys: list[str]) -> list:
            async def one(key: str) -> Any:
                return await (await obstore.get_async(store, key)).bytes_async()
            return await asyncio.gather(*(one(k) for k in keys))

        async def ranges_async() -> list:
            return await asyncio.gather(*(obstore.get_range_async(theirs, f, start=a, end=b)
                                          for f, a, b in ranges))

        cases = {
            "256 ranged GETs of 64 KiB": (
                lambda: ours.get_many([(f, (a, b)) for f, a, b in ranges]),
                lambda: list(threads.map(
                    lambda r: obstore.get_range(theirs, r[0], start=r[1], end=r[2]), ranges)),
                lambda: asyncio.run(ranges_async())),
            f"{len(shards)} whole shards ({sum(sizes) / 1e6:.0f} MB)": (
                lambda: ours.get_many(shards), lambda: blocking(theirs, shards),
                lambda: asyncio.run(whole_async(theirs, shards))),
            f"{sum(map(len, cutouts))} chunk files of 24 cutouts, cutout after cutout": (
                lambda: [ours_u.get_many(keys) for keys in cutouts],
                lambda: [blocking(theirs_u, keys) for keys in cutouts],
                lambda: [asyncio.run(whole_async(theirs_u, keys)) for keys in cutouts]),
        }
        for faults in (False, True):
            server.set(error=0.05 if faults else 0.0, reset=0.025 if faults else 0.0, seed=1)
            for name, fns in cases.items():
                t = [min(_timed(fn) for _ in range(3)) for fn in fns]
                label = name + (", 5% 503 + 2.5% resets" if faults else "")
                print(f"| {label} | " + " | ".join(f"{x * 1000:,.0f} ms" for x in t)
                      + f" | {t[1] / t[0]:.2f}x |", flush=True)
    threads.shutdown()


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    """A server in its own process (``args`` get ``PORT``), once it answers; its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, *(a.replace("PORT", str(port)) for a in args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).close()
            break
        except urllib.error.HTTPError:  # (it answers)
            break
        except OSError:
            time.sleep(0.1)
    return proc, url


class S3:
    """moto's S3 server in its own process, behind a fault server with the latency."""

    def __init__(self, data: str, latency: float) -> None:
        os.environ.update(_AWS_ENV)
        self.moto, self.upstream = _start(["-m", "moto.server", "-H", "127.0.0.1", "-p", "PORT"])
        self.proxy = FaultServer(data, latency=latency, upstream=self.upstream)
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.upstream)
        self.client.create_bucket(Bucket="bench")

    def upload(self, path: str) -> str:
        """Copy a local dataset into the bucket (untimed); its name there."""
        name = os.path.basename(path)
        for d, _, files in os.walk(path):
            for f in files:
                local = os.path.join(d, f)
                key = f"{name}/{os.path.relpath(local, path)}"
                self.client.upload_file(local, "bench", key)
        return name

    def close(self) -> None:
        self.proxy.close()
        self.moto.kill()
        self.moto.wait()


class GCS:
    """gcp-storage-emulator in its own process (in memory, bucket ``bench``), behind a fault
    server with the latency.  TensorStore reaches it through ``TENSORSTORE_GCS_HTTP_URL``,
    with a fixed token (no credentials are looked up)."""

    def __init__(self, data: str, latency: float) -> None:
        # gcsfs's bucket-type probe speaks gRPC, which the emulator does not (each probe
        # waits a minute): off, before gcsfs is imported
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        # (the emulator answers one connection at a time, with a listen backlog of 5: the
        # SYNs of a sixth concurrent request were dropped and resent a second later; here
        # it answers each connection in a thread, as an object store would)
        self.emulator, self.upstream = _start(
            ["-c", "import http.server as s, sys; s.HTTPServer = s.ThreadingHTTPServer; "
                   "s.HTTPServer.request_queue_size = 1024; "
                   "from gcp_storage_emulator.__main__ import main; main(sys.argv[1:])",
             "start", "--host", "127.0.0.1", "--port", "PORT", "--in-memory",
             "--default-bucket", "bench", "-q"])
        self.proxy = FaultServer(data, latency=latency, upstream=self.upstream)
        os.environ.update(TENSORSTORE_GCS_HTTP_URL=self.proxy.url,
                          GOOGLE_AUTH_TOKEN_FOR_TESTING="bench")

    def upload(self, path: str) -> str:
        """Copy a local dataset into the bucket (untimed); its name there."""
        name = os.path.basename(path)
        fs = fsspec.filesystem("gs", token="anon", endpoint_url=self.upstream,
                               skip_instance_cache=True)
        for d, _, files in os.walk(path):  # (one at a time, each one request: the
            for f in files:  # emulator loses resumable uploads made concurrently)
                with open(os.path.join(d, f), "rb") as src:
                    key = os.path.relpath(os.path.join(d, f), path)
                    fs.pipe_file(f"bench/{name}/{key}", src.read())
        return name

    def close(self) -> None:
        self.proxy.close()
        self.emulator.kill()
        self.emulator.wait()


def _best_reads(opens: dict[str, Callable[[str], Any]],
                reads: dict[str, Callable[[Any, Any], Any]], name: str,
                boxes: list, data: np.ndarray, repeat: int) -> dict[str, float]:
    """Each library's best time over ``repeat`` runs of reading ``boxes`` (None: the whole
    volume) of dataset ``name`` through a fresh handle, every result checked."""
    best = {}
    for lib in opens:
        times = []
        for _ in range(repeat):
            h = opens[lib](name)
            t0 = time.perf_counter()
            got = [reads[lib](h, b) for b in boxes]
            times.append(time.perf_counter() - t0)
            for b, g in zip(boxes, got):
                want = data if b is None else data[b]
                assert np.array_equal(np.asarray(g).reshape(want.shape), want), lib
        best[lib] = min(times)
    return best


_READS: dict[str, Callable[[Any, Any], Any]] = {
    "shardvol": lambda h, b: h[...] if b is None else h[b],
    "TensorStore": lambda h, b: (h if b is None else h[b]).read(order="F").result(),
}


def bench_gcs(args: argparse.Namespace, sizes: bv.Sizes) -> None:
    """Full reads and cutouts through GCS (the emulator behind the latency), without and
    with faults (5% 503s, 2.5% resets): shardvol; shardvol as it was with gcsfs's reads
    and its own retries inside each of shardvol's attempts; TensorStore (full reads: its
    ranged reads fail on the emulator's answers, "Malformed StorageGeneration")."""
    gcs = GCS(args.data, args.latency)
    from shardvol.kvstore import (
        gcs_filesystem as gcs_filesystems,  # (gcsfs: after GCS() set its env)
    )

    def shardvol(n: str, **kw: Any) -> Volume:
        return _fresh(Volume(FsspecStore(f"gs://bench/{n}", token="anon",
                                         endpoint_url=gcs.proxy.url, skip_instance_cache=True,
                                         **kw)))

    def gcsfs_retrying(n: str) -> Volume:
        saved = gcs_filesystems.filesystem
        gcs_filesystems.filesystem = fsspec.core.url_to_fs  # (gcsfs's own class)
        try:  # (an aiohttp option shardvol's client does not take: gcsfs's reads)
            return shardvol(n, session_kwargs={"trust_env": False})
        finally:
            gcs_filesystems.filesystem = saved

    opens: dict[str, Callable[[str], Any]] = {
        "shardvol": shardvol, "gcsfs retrying": gcsfs_retrying,
        "TensorStore": lambda n: ts.open({
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "gcs", "bucket": "bench", "path": n + "/"}},
            read=True).result(),
    }
    reads = {**_READS, "gcsfs retrying": _READS["shardvol"]}
    try:
        print("\nGCS (gcp-storage-emulator in its own process, behind the same latency)\n"
              "| dataset | operation | faults | shardvol | shardvol with gcsfs's retries "
              "| TensorStore | gcsfs's retries / shardvol |\n|---|---|---|---:|---:|---:|---:|")
        for ds in [d for d in bv.DATASETS if d.name in ("raw sharded", "raw")]:
            path = bv.ensure_dataset(args.data, ds, bv.source_array(ds, sizes))
            data = bv.TensorStore().read(bv.TensorStore().open(path), None)
            name = gcs.upload(path)
            for faults in ("none", "5% 503 + 2.5% resets"):
                on = faults != "none"
                for op, boxes in (("full read", [None]), ("24 cutouts", bv.cutout_boxes(
                        data.shape[:3], sizes.cutout))):
                    libs = {k: v for k, v in opens.items()
                            if k != "TensorStore" or op == "full read"}
                    gcs.proxy.set(error=0.05 if on else 0.0, reset=0.025 if on else 0.0,
                                  seed=1)
                    best = _best_reads(libs, reads, name, boxes, data, args.repeat)
                    theirs = best.get("TensorStore")
                    print(f"| {ds.name} | {op} | {faults} | {best['shardvol'] * 1000:,.0f} ms "
                          f"| {best['gcsfs retrying'] * 1000:,.0f} ms "
                          f"| {'n/a' if theirs is None else f'{theirs * 1000:,.0f} ms'} "
                          f"| {best['gcsfs retrying'] / best['shardvol']:.2f}x |", flush=True)
    finally:
        gcs.close()


def bench_s3_files(args: argparse.Namespace, sizes: bv.Sizes) -> None:
    """Full reads, cutouts and full writes through the S3 API of a fast server: the fault
    server answers path-style GETs and PUTs of bucket ``basename(--data)`` as the
    benchmark's files, behind the latency (moto, a Python server, bounds every client's
    requests).  shardvol (its client,
    signing each request), shardvol with its reads through botocore (as before, and as
    for options its client does not follow), TensorStore."""
    os.environ.update(_AWS_ENV)
    bucket = os.path.basename(os.path.abspath(args.data))
    with FaultServer(os.path.dirname(os.path.abspath(args.data)),
                     latency=args.latency) as server:
        def store(n: str, **kw: Any) -> FsspecStore:
            return FsspecStore(f"s3://{bucket}/{n}", endpoint_url=server.url,
                               skip_instance_cache=True, **kw)

        botocore = {"config_kwargs": {"retries": {"total_max_attempts": 1},
                                      "tcp_keepalive": True}}
        opens: dict[str, Callable[[str], Any]] = {
            "shardvol": lambda n: _fresh(Volume(store(n))),
            "shardvol via botocore": lambda n: _fresh(Volume(store(n, **botocore))),
            "TensorStore": lambda n: ts.open({
                "driver": "neuroglancer_precomputed",
                "kvstore": _ts_s3(server.url, n, bucket)},
                read=True).result(),
        }
        _api_table(args, sizes, opens, "S3 API of the fault server (path-style GETs of the "
                   "files, behind the same latency)")
        _writes_table(args, sizes, "s3", server.url, bucket, "botocore", botocore,
                      "writes through the same S3 API (PUTs of the files)")


def bench_gcs_files(args: argparse.Namespace, sizes: bv.Sizes) -> None:
    """Full reads and cutouts through the JSON API of a fast server: the fault server
    answers GCS's media downloads of bucket ``basename(--data)`` from the benchmark's
    files, behind the latency (the emulator, a Python server, bounds every client's
    reads).  shardvol (its client), shardvol with its reads through gcsfs (as before, and
    as for options its client does not follow), TensorStore."""
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # (see GCS)
    bucket = os.path.basename(os.path.abspath(args.data))
    with FaultServer(os.path.dirname(os.path.abspath(args.data)),
                     latency=args.latency) as server:
        os.environ.update(TENSORSTORE_GCS_HTTP_URL=server.url,
                          GOOGLE_AUTH_TOKEN_FOR_TESTING="bench")

        def store(n: str, **kw: Any) -> FsspecStore:
            return FsspecStore(f"gs://{bucket}/{n}", token="anon", endpoint_url=server.url,
                               skip_instance_cache=True, **kw)

        opens: dict[str, Callable[[str], Any]] = {
            "shardvol": lambda n: _fresh(Volume(store(n))),
            # (an aiohttp option the client does not take: gcsfs's reads)
            "shardvol via gcsfs": lambda n: _fresh(Volume(store(
                n, session_kwargs={"trust_env": False}))),
            "TensorStore": lambda n: ts.open({
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "gcs", "bucket": bucket, "path": n + "/"}},
                read=True).result(),
        }
        _api_table(args, sizes, opens, "GCS JSON API of the fault server (media downloads "
                   "of the files, behind the same latency)")
        _writes_table(args, sizes, "gs", server.url, bucket, "gcsfs",
                      {"session_kwargs": {"trust_env": False}},
                      "writes through the same GCS API (uploads of the files)")


def _api_table(args: argparse.Namespace, sizes: bv.Sizes,
               opens: dict[str, Callable[[str], Any]], title: str) -> None:
    """Full reads and 24 cutouts of the raw, raw sharded and jpeg sharded volumes through
    ``opens``: "shardvol", shardvol through the client library it replaced (the second
    entry), "TensorStore"; best of ``--repeat``."""
    before = next(k for k in opens if k not in ("shardvol", "TensorStore"))
    reads = {**_READS, before: _READS["shardvol"]}
    print(f"\n{title}\n| dataset | operation | shardvol | {before} | TensorStore "
          "| TensorStore / shardvol |\n|---|---|---:|---:|---:|---:|")
    for ds in [d for d in bv.DATASETS if d.name in ("raw", "raw sharded", "jpeg sharded")]:
        path = bv.ensure_dataset(args.data, ds, bv.source_array(ds, sizes))
        data = bv.TensorStore().read(bv.TensorStore().open(path), None)
        for op, boxes in (("full read", [None]),
                          ("24 cutouts", bv.cutout_boxes(data.shape[:3], sizes.cutout))):
            best = _best_reads(opens, reads, os.path.basename(path), boxes, data, args.repeat)
            print(f"| {ds.name} | {op} | {best['shardvol'] * 1000:,.0f} ms "
                  f"| {best[before] * 1000:,.0f} ms | {best['TensorStore'] * 1000:,.0f} ms "
                  f"| {best['TensorStore'] / best['shardvol']:.2f}x |", flush=True)


def bench_s3(args: argparse.Namespace, sizes: bv.Sizes) -> None:
    """Full reads, cutouts and full writes through S3 (moto behind the latency): shardvol and
    TensorStore (CloudVolume needs its own endpoint configuration: not measured)."""
    s3 = S3(args.data, args.latency)
    try:
        print("\nS3 (moto in its own process, behind the same latency)\n"
              "| dataset | operation | shardvol | TensorStore | TensorStore / shardvol |\n"
              "|---|---|---:|---:|---:|")
        for ds in [d for d in bv.DATASETS if d.name in ("raw sharded", "raw")]:
            source = bv.source_array(ds, sizes)
            path = bv.ensure_dataset(args.data, ds, source)
            data = bv.TensorStore().read(bv.TensorStore().open(path), None)
            name = s3.upload(path)
            opens = {
                "shardvol": lambda n: _fresh(Volume(FsspecStore(f"s3://bench/{n}",
                                                                endpoint_url=s3.proxy.url,
                                                                skip_instance_cache=True))),
                "TensorStore": lambda n: ts.open({"driver": "neuroglancer_precomputed",
                                                  "kvstore": _ts_s3(s3.proxy.url, n)},
                                                 read=True).result(),
            }
            for op, boxes in (("full read", [None]),
                              ("24 cutouts", bv.cutout_boxes(data.shape[:3], sizes.cutout))):
                best = _best_reads(opens, _READS, name, boxes, data, args.repeat)
                print(f"| {ds.name} | {op} | {best['shardvol'] * 1000:,.0f} ms | "
                      f"{best['TensorStore'] * 1000:,.0f} ms | "
                      f"{best['TensorStore'] / best['shardvol']:.2f}x |", flush=True)
            best = _best_writes(ds, source, {
                lib: partial(_remote_write, ds, source, lib, "s3", s3.proxy.url, "bench")
                for lib in ("shardvol", "TensorStore")},
                lambda out: Volume(FsspecStore(f"s3://bench/{out}", endpoint_url=s3.upstream,
                                               skip_instance_cache=True))[...],
                name, args.repeat)
            print(f"| {ds.name} | full write | {best['shardvol'] * 1000:,.0f} ms | "
                  f"{best['TensorStore'] * 1000:,.0f} ms | "
                  f"{best['TensorStore'] / best['shardvol']:.2f}x |", flush=True)
    finally:
        s3.close()


def _writes_table(args: argparse.Namespace, sizes: bv.Sizes, scheme: str, endpoint: str,
                  bucket: str, before: str, options: dict[str, Any], title: str) -> None:
    """Full writes of the raw and raw sharded volumes into the fault server's files through
    its S3 or GCS API (``scheme``): shardvol, shardvol through the client library it
    replaced (``before``: the store's ``options`` keep it), TensorStore; best of
    ``--repeat``."""
    root = os.path.abspath(args.data)
    print(f"\n{title}\n| dataset | operation | shardvol | shardvol via {before} "
          "| TensorStore | TensorStore / shardvol |\n|---|---|---:|---:|---:|---:|")
    for ds in [d for d in bv.DATASETS if d.name in ("raw", "raw sharded")]:
        source = bv.source_array(ds, sizes)
        writes = {lib: partial(_remote_write, ds, source, lib, scheme, endpoint, bucket)
                  for lib in ("shardvol", "TensorStore")}
        writes[f"shardvol via {before}"] = partial(_remote_write, ds, source, "shardvol",
                                                   scheme, endpoint, bucket, **options)
        best = _best_writes(ds, source, writes,
                            lambda out: Volume(os.path.join(root, out))[...],
                            ds.name.replace(" ", "-"), args.repeat,
                            lambda out: shutil.rmtree(os.path.join(root, out)))
        print(f"| {ds.name} | full write | {best['shardvol'] * 1000:,.0f} ms "
              f"| {best[f'shardvol via {before}'] * 1000:,.0f} ms "
              f"| {best['TensorStore'] * 1000:,.0f} ms "
              f"| {best['TensorStore'] / best['shardvol']:.2f}x |", flush=True)


def _remote_write(ds: bv.Dataset, source: np.ndarray, lib: str, scheme: str, endpoint: str,
                  bucket: str, out: str, **options: Any) -> None:
    """Write ``source`` as ``ds`` at ``out`` in ``bucket`` of the S3 or GCS API
    (``scheme``) at ``endpoint`` with ``lib`` (shardvol's store ``options``; TensorStore
    finds a GCS endpoint in its environment)."""
    if lib == "TensorStore":
        spec = bv.ts_create_spec("", ds, source)
        spec["kvstore"] = (_ts_s3(endpoint, out, bucket) if scheme == "s3" else
                           {"driver": "gcs", "bucket": bucket, "path": out + "/"})
        store = ts.open(spec).result()
        with ts.Transaction() as txn:
            store.with_transaction(txn).write(source).result()
        return
    if scheme == "gs":
        options = {"token": "anon", **options}
    vol = Volume.create(FsspecStore(f"{scheme}://{bucket}/{out}", endpoint_url=endpoint,
                                    skip_instance_cache=True, **options),
                        size=source.shape[:3], type=ds.source, data_type=source.dtype.name,
                        chunk_size=bv.CHUNK, encoding=ds.encoding, sharding=ds.sharding)
    vol[...] = source


def _best_writes(ds: bv.Dataset, source: np.ndarray, writes: dict[str, Callable[[str], None]],
                 read: Callable[[str], np.ndarray], name: str, repeat: int,
                 drop: Callable[[str], None] | None = None) -> dict[str, float]:
    """The best time of each of ``writes`` (each writes ``source`` at the name it is given),
    interleaved, ``repeat`` times; each output read back (``read``) and checked, then
    ``drop``-ped."""
    times: dict[str, list[float]] = {lib: [] for lib in writes}
    for k in range(repeat):
        for lib, write in writes.items():
            out = f"w-{lib.replace(' ', '-')}-{k}-{name}"
            t0 = time.perf_counter()
            write(out)
            times[lib].append(time.perf_counter() - t0)
            assert np.array_equal(read(out), source), f"{lib} wrote wrong voxels ({ds.name})"
            if drop is not None:
                drop(out)
    return {lib: min(t) for lib, t in times.items()}


def _fresh(vol: Volume) -> Volume:
    """``vol`` without the chunks an earlier handle of it cached (the process's cache of a
    volume outlives its handles): each run reads from S3."""
    if vol.cache is not None:
        vol.cache.clear()
    return vol


#: the dummy credentials and region of the benchmark's S3 servers
_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}


def _ts_s3(endpoint: str, path: str, bucket: str = "bench") -> dict:
    return {"driver": "s3", "bucket": bucket, "path": path + "/", "endpoint": endpoint,
            "aws_region": "us-east-1"}


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--latency", type=float, default=0.025)
    ap.add_argument("--quick", action="store_true", help="smaller volumes")
    ap.add_argument("--only", action="append", choices=REMOTE)
    ap.add_argument("--faults", action="store_true", help="also with 5%% 503s, 2.5%% resets")
    ap.add_argument("--backends", action="store_true", help="also the raw request path")
    ap.add_argument("--s3", action="store_true", help="also reads and writes through S3")
    ap.add_argument("--gcs", action="store_true", help="also reads through GCS, with faults")
    ap.add_argument("--no-cloudvolume", action="store_true")
    args = ap.parse_args()
    sizes = bv.QUICK if args.quick else bv.FULL
    libs: list[Lib] = [Shardvol(), TensorStore()]
    if not args.no_cloudvolume:
        libs.append(CloudVolumeLib())
    names = args.only or REMOTE
    datasets = [d for d in bv.DATASETS if d.name in names]
    print(f"{os.cpu_count()} CPUs, latency {args.latency * 1000:g} ms, best of {args.repeat}; "
          "time of the reads and requests the server counted; ratio: best peer's time over "
          "shardvol's; floor: shardvol's local-file time + one latency per read (+1 sharded)")
    os.makedirs(args.data, exist_ok=True)
    header = ("| dataset | workload | " + " | ".join(lib.name for lib in libs)
              + " | best peer / shardvol | floor (shardvol / floor) |")
    rule = "|---|---|" + "---:|" * (len(libs) + 2)
    for faults in ([False, True] if args.faults else [False]):
        print(("\nwith 5% of requests answered 503 and 2.5% of connections dropped\n"
               if faults else "\n") + header + "\n" + rule)
        for ds in datasets:
            path = bv.ensure_dataset(args.data, ds, bv.source_array(ds, sizes))
            # the truth: what TensorStore reads from the local files (jpeg is lossy)
            data = bv.TensorStore().read(bv.TensorStore().open(path), None)
            with FaultServer(args.data, latency=args.latency) as server:
                if faults:
                    server.set(error=0.05, reset=0.025, seed=11)
                base = f"{server.url}/{os.path.basename(path)}"

                def url_of(lib_name: str, base: str = base) -> str:
                    return base

                for op, boxes in workloads(data.shape[:3], sizes).items():
                    r = measure(libs, server, url_of, path, data, boxes, args.repeat,
                                ds.sharding is not None, args.latency)
                    print(fmt_row(ds.name, op, r, libs), flush=True)
    if args.s3:
        bench_s3_files(args, sizes)
        bench_s3(args, sizes)
    if args.gcs:
        bench_gcs_files(args, sizes)
        bench_gcs(args, sizes)
    if args.backends:
        paths = [bv.ensure_dataset(args.data, ds, bv.source_array(ds, sizes))
                 for name in ("raw sharded", "raw") for ds in bv.DATASETS if ds.name == name]
        print("\n| request path | shardvol | obstore, 64 threads "
              "| obstore, asyncio | threads / shardvol |\n|---|---:|---:|---:|---:|")
        bench_backends(args.data, *paths, args.latency, sizes.cutout)


if __name__ == "__main__":
    main()
