"""Skeletons and meshes by the thousand: shardvol vs CloudVolume, in one run, as ratios.

A segmentation's objects as a proofreading or analysis session reads them:
  read skeletons    N skeletons (about 200 vertices each, with radii) of a sharded
                    skeleton directory, in one batched call
  read meshes       N multi-resolution meshes (Draco fragments, 2 LODs, LOD 0) of a
                    sharded mesh directory, in one batched call
  write skeletons   the N skeletons, unsharded (CloudVolume's upload) and sharded (shardvol)
  write meshes      N legacy meshes, unsharded (CloudVolume's batched mesh.put, uncompressed
                    as shardvol writes them; it has no multi-resolution writer), and
                    shardvol's multi-resolution sharded ones

Reads run on local files and over HTTP from tests/fault_server.py with ``--latency``
seconds before every answer (an object store's time to first byte); the sharded
directories are written by shardvol (CloudVolume's own reads of them are checked against
shardvol's first).  Best of ``--repeat``, libraries interleaved, fresh handles each run.

Run:  python benchmarks/bench_objects.py [--count 1000] [--repeat 3] [--latency 0.025]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from shardvol import Mesh, Skeleton, Volume  # noqa: E402
from shardvol.kvstore.fsspec_store import FsspecStore  # noqa: E402
from tests.fault_server import FaultServer  # noqa: E402

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 6, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
MESH_SHARDING = {**SHARDING, "data_encoding": "raw"}


def skeletons(n: int, seed: int = 0) -> dict[int, Skeleton]:
    rng = np.random.default_rng(seed)
    out = {}
    for label in rng.choice(2**40, n, replace=False).tolist():
        k = int(rng.integers(150, 250))
        vertices = np.cumsum(rng.normal(0, 40, (k, 3)), 0).astype(np.float32) + 5000
        edges = np.stack([np.arange(k - 1), np.arange(1, k)], 1).astype(np.uint32)
        out[label + 1] = Skeleton(vertices=vertices, edges=edges,
                                  attributes={"radius": rng.uniform(20, 200, k)
                                              .astype(np.float32)})
    return out


def meshes(n: int, seed: int = 1) -> dict[int, Mesh]:
    """Lumpy spheres (an icosphere, 642 vertices, scaled and displaced at random)."""
    from tests.test_neuroglancer_objects_e2e import icosphere

    unit, faces = icosphere(3)
    rng = np.random.default_rng(seed)
    out = {}
    for label in rng.choice(2**40, n, replace=False).tolist():
        bumps = 1 + 0.2 * rng.random((len(unit), 1))
        centre = rng.uniform(2000, 30000, 3)
        vertices = (unit * bumps * rng.uniform(300, 1500) + centre).astype(np.float32)
        out[label + 1] = Mesh(vertices=vertices, faces=faces)
    return out


def _cloudvolume(url: str, info: dict[str, Any] | None = None):
    warnings.filterwarnings("ignore", module="cloudvolume")
    from cloudvolume import CloudVolume

    return CloudVolume(url, info=info, progress=False, cache=False, parallel=1)


def segmentation(path: str) -> Volume:
    """A new segmentation volume at ``path`` (anything there before removed)."""
    shutil.rmtree(path, ignore_errors=True)
    return Volume.create(path, size=(4096, 4096, 512), data_type="uint64",
                        type="segmentation", resolution=(8, 8, 40),
                        encoding="compressed_segmentation", overwrite=True)


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def shardvol_volume(url: str) -> Volume:
    if url.startswith("http"):
        return Volume(FsspecStore(url, skip_instance_cache=True))
    return Volume(url)


def row(what: str, where: str, ours: float, theirs: float | None) -> str:
    if theirs is None:
        return f"| {what} | {where} | {ours:.2f} s | n/a | n/a |"
    return f"| {what} | {where} | {ours:.2f} s | {theirs:.2f} s | {theirs / ours:.2f}x |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.025)
    args = ap.parse_args()
    n = args.count
    root = tempfile.mkdtemp(prefix="bench-objects-")
    try:
        skels, mesh_set = skeletons(n), meshes(n)
        print(f"{os.cpu_count()} CPUs, {n} objects, best of {args.repeat}, latency "
              f"{args.latency * 1000:g} ms; ratio: CloudVolume's time over shardvol's\n")
        print("| workload | store | shardvol | CloudVolume | CloudVolume / shardvol |")
        print("|---|---|---:|---:|---:|")

        # ---- writes
        def sv_write_skeletons(sharded: bool) -> None:
            vol = segmentation(os.path.join(root, "w-skel"))
            vol.create_skeletons(sharding=SHARDING if sharded else None, overwrite=True)
            vol.skeletons.put_many(skels)

        def cv_write_skeletons() -> None:
            vol = segmentation(os.path.join(root, "w-skel-cv"))
            vol.create_skeletons(overwrite=True)
            import osteoid

            cv = _cloudvolume(f"file://{root}/w-skel-cv")
            cv.skeleton.upload([osteoid.Skeleton(s.vertices, s.edges, radii=s.radius,
                                                 segid=label)
                                for label, s in skels.items()])

        def sv_write_meshes(multires: bool) -> None:
            vol = segmentation(os.path.join(root, "w-mesh"))
            vol.create_meshes(multires=multires, sharding=MESH_SHARDING if multires else None,
                              overwrite=True)
            vol.meshes.put_many(mesh_set)

        def cv_write_meshes() -> None:
            vol = segmentation(os.path.join(root, "w-mesh-cv"))
            vol.create_meshes(overwrite=True)
            cv = _cloudvolume(f"file://{root}/w-mesh-cv")
            from cloudvolume import Mesh as CVMesh

            cv.mesh.put([CVMesh(m.vertices, m.faces, None, segid=label)
                         for label, m in mesh_set.items()], compress=False)  # (shardvol's: plain)

        cv_skel = best(cv_write_skeletons, args.repeat)
        print(row("write skeletons, unsharded", "local", best(
            lambda: sv_write_skeletons(False), args.repeat), cv_skel), flush=True)
        print(row("write skeletons, sharded", "local", best(
            lambda: sv_write_skeletons(True), args.repeat), cv_skel), flush=True)
        cv_mesh = best(cv_write_meshes, args.repeat)
        print(row("write meshes, legacy", "local", best(
            lambda: sv_write_meshes(False), args.repeat), cv_mesh), flush=True)
        print(row("write meshes, multi-resolution sharded (CloudVolume: legacy)", "local",
                  best(lambda: sv_write_meshes(True), args.repeat), cv_mesh), flush=True)

        # ---- the sharded directories read
        data = os.path.join(root, "data")
        vol = segmentation(os.path.join(data, "seg"))
        vol.create_skeletons(sharding=SHARDING)
        vol.skeletons.put_many(skels)
        vol.create_meshes(multires=True, sharding=MESH_SHARDING)
        vol.meshes.put_many(mesh_set)
        labels = list(skels)
        mesh_labels = list(mesh_set)
        check = _cloudvolume(f"file://{data}/seg")
        some = check.skeleton.get(labels[:5])
        for s in some:
            np.testing.assert_array_equal(s.vertices, skels[int(s.id)].vertices)

        def sv_skel(url: str) -> None:
            got = shardvol_volume(url).skeletons.get_many(labels)
            assert len(got) == n

        def cv_skel_read(url: str) -> None:
            got = _cloudvolume(url).skeleton.get(labels)
            assert len(got) == n

        def sv_mesh(url: str) -> None:
            got = shardvol_volume(url).meshes.get_many(mesh_labels)
            assert len(got) == n

        def cv_mesh_read(url: str) -> None:
            got = _cloudvolume(url).mesh.get(mesh_labels, lod=0)
            assert len(got) == n

        for where in ("local", f"HTTP +{args.latency * 1000:g} ms"):
            if where == "local":
                server = None
                sv_url, cv_url = f"{data}/seg", f"file://{data}/seg"
            else:
                server = FaultServer(data, latency=args.latency)
                sv_url = cv_url = f"{server.url}/seg"
            try:
                print(row("read skeletons, sharded", where,
                          best(functools.partial(sv_skel, sv_url), args.repeat),
                          best(functools.partial(cv_skel_read, cv_url), args.repeat)),
                      flush=True)
                print(row("read meshes, multi-resolution sharded", where,
                          best(functools.partial(sv_mesh, sv_url), args.repeat),
                          best(functools.partial(cv_mesh_read, cv_url), args.repeat)),
                      flush=True)
            finally:
                if server is not None:
                    server.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
