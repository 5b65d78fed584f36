"""Zarr v3 sharded arrays: full reads, cutouts and writes, shardvol vs TensorStore vs zarr-python.

shardvol is measured through its user-facing array (``shardvol.zarr3.create``
then ``arr[...] = data``; ``shardvol.zarr3.open(path)[...]``); TensorStore's
``zarr3`` driver and zarr-python do the same full-array ``arr[...]`` reads and
writes of the same metadata.  Every read reads the same array (the one
TensorStore wrote); every writer's output is checked to read back equal.

Cases (as in the issue): a 512^3 uint8 image and a 512x512x128 uint64
segmentation, shards 256x256x128, inner chunks 64^3; zstd image, gzip image,
zstd segmentation (``--all`` adds gzip segmentation).  Operations: a full-array read
("read"), 24 random 100^3 boxes read one after another from one fresh handle ("cut";
C order, as each library reads by default), a full-array write.  The libraries run
interleaved (one round = each library once) so that load from elsewhere
affects them alike; each figure is the best of ``--repeat`` rounds (cutouts, some 50 ms
each: 4 rounds per repeat) on a local disk (page cache warm).  MB/s are of uncompressed
data; ``xN`` is shardvol's speed-up.  Run: python benchmarks/bench_zarr3.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np

from shardvol import zarr3
from shardvol.zarr3 import ArrayMetadata, Codec, GzipCodec, ZstdCodec, create_metadata

SHARD = (256, 256, 128)
INNER = (64, 64, 64)
CODECS: dict[str, Codec] = {"zstd": ZstdCodec(level=3), "gzip": GzipCodec(level=6)}
PEERS = ("tensorstore", "zarr-python")
N_CUTOUTS = 24
CUTOUT = 100
CUTOUT_ROUNDS = 4  # rounds of cutouts per --repeat


def image(shape) -> np.ndarray:
    """Smooth intensities plus noise: compresses like EM/light-microscopy data, roughly."""
    rng = np.random.default_rng(0)
    z, y, x = np.meshgrid(*(np.linspace(0, 6, s, dtype=np.float32) for s in shape), indexing="ij")
    base = 100 + 60 * np.sin(x) * np.cos(y) + 30 * np.sin(z)
    return (base + rng.normal(0, 8, shape).astype(np.float32)).clip(0, 255).astype(np.uint8)


def segmentation(shape) -> np.ndarray:
    """Piecewise-constant labels (blocky objects with large ids)."""
    rng = np.random.default_rng(1)
    cells = [s // 24 + 1 for s in shape]
    labels = rng.integers(1, 2**40, cells, dtype=np.uint64)
    idx = np.ix_(*(np.minimum((np.arange(s) + (7 * d)) // 24, c - 1)
                   for d, (s, c) in enumerate(zip(shape, cells))))
    return labels[idx]


# --------------------------------------------------------------------------- the three libraries


def shardvol_write(path: str, meta: ArrayMetadata, data: np.ndarray) -> None:
    codecs = meta.sharding.codecs  # type: ignore[union-attr]
    arr = zarr3.create(path, data.shape, data.dtype, SHARD, INNER, codecs=codecs, overwrite=True)
    arr[...] = data


def shardvol_read(path: str) -> np.ndarray:
    return zarr3.open(path, mode="r")[...]


def ts_spec(path, meta=None):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}
    if meta is not None:
        doc = meta.to_json()
        doc.pop("attributes")
        spec["metadata"] = doc
    return spec


def ts_write(path, meta, data):
    import tensorstore as ts

    ts.open(ts_spec(path, meta), create=True, delete_existing=True).result()[...].write(
        data
    ).result()


def ts_read(path):
    import tensorstore as ts

    return ts.open(ts_spec(path), read=True).result().read().result()


def zarr_write(path, meta, data):
    import zarr
    from zarr.registry import get_codec_class

    doc = meta.to_json()["codecs"][0]
    serializer = get_codec_class(doc["name"]).from_dict(doc)
    arr = zarr.create_array(store=path, shape=meta.shape, dtype=meta.dtype,
                            chunks=meta.chunk_shape, serializer=serializer, compressors=None,
                            fill_value=0, overwrite=True)
    arr[...] = data


def zarr_read(path):
    import zarr

    return zarr.open_array(path, mode="r")[...]


def shardvol_cutouts(path: str, boxes: list[tuple[slice, ...]]) -> list[np.ndarray]:
    arr = zarr3.open(path, mode="r")
    return [arr[box] for box in boxes]


def ts_cutouts(path: str, boxes: list[tuple[slice, ...]]) -> list[np.ndarray]:
    import tensorstore as ts

    arr = ts.open(ts_spec(path), read=True).result()
    return [arr[box].read().result() for box in boxes]


def zarr_cutouts(path: str, boxes: list[tuple[slice, ...]]) -> list[np.ndarray]:
    import zarr

    arr = zarr.open_array(path, mode="r")
    return [arr[box] for box in boxes]


def cutout_boxes(shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """N_CUTOUTS random boxes of CUTOUT^3 (one seeded list for every library)."""
    rng = np.random.default_rng(7)
    corners = rng.integers(0, [s - CUTOUT + 1 for s in shape], size=(N_CUTOUTS, len(shape)))
    return [tuple(slice(int(c), int(c) + CUTOUT) for c in corner) for corner in corners]


WRITERS = {"shardvol": shardvol_write, "tensorstore": ts_write, "zarr-python": zarr_write}
READERS = {"shardvol": shardvol_read, "tensorstore": ts_read, "zarr-python": zarr_read}
CUTOUT_READERS = {
    "shardvol": shardvol_cutouts, "tensorstore": ts_cutouts, "zarr-python": zarr_cutouts,
}


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best time of each function over ``rounds`` rounds of calling each once, in turn."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (best is kept)")
    parser.add_argument("--quick", action="store_true", help="256^3 / 256x256x128 volumes")
    parser.add_argument("--all", action="store_true", help="also gzip segmentation")
    args = parser.parse_args()
    scale = 2 if args.quick else 1
    img = image((512 // scale,) * 3)
    seg = segmentation((512 // scale, 512 // scale, 128))
    cases = [
        ("image uint8", img, "zstd"),
        ("image uint8", img, "gzip"),
        ("segmentation uint64", seg, "zstd"),
    ]
    if args.all:
        cases.append(("segmentation uint64", seg, "gzip"))
    tmp = tempfile.mkdtemp(prefix="bench_zarr3_")
    print(f"shardvol ZarrArray vs TensorStore {_version('tensorstore')} vs zarr-python "
          f"{_version('zarr')}: full-array reads, {N_CUTOUTS} cutouts of {CUTOUT}^3, "
          f"full-array writes; shards {SHARD}, inner {INNER}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; best of {args.repeat} "
          f"interleaved rounds; MB/s of uncompressed data; xN = shardvol's speed-up")  # fmt: skip
    header = (f"{'':5} {'case':<19} {'codec':<5} | {'shardvol':>8} | "
              f"{'tensorstore':>11} {'':>7} | {'zarr-python':>11} {'':>7}")
    print(header)
    try:
        for vname, data, cname in cases:
            meta = create_metadata(data.shape, data.dtype, SHARD, INNER, codecs=[CODECS[cname]])
            mb = data.nbytes / 1e6
            paths = {k: os.path.join(tmp, f"{k}-{cname}-{vname.split()[0]}") for k in WRITERS}
            w = interleaved({k: (lambda f=f, p=paths[k], m=meta, d=data: f(p, m, d))
                             for k, f in WRITERS.items()}, args.repeat)  # fmt: skip
            for path in paths.values():  # every writer's output reads back the same everywhere
                assert np.array_equal(shardvol_read(path), data) and np.array_equal(
                    ts_read(path), data
                )
            source = paths["tensorstore"]
            r = interleaved(
                {k: (lambda f=f, s=source: f(s)) for k, f in READERS.items()}, args.repeat
            )
            boxes = cutout_boxes(data.shape)
            want = [data[box] for box in boxes]
            for f in CUTOUT_READERS.values():
                assert all(np.array_equal(a, b) for a, b in zip(f(source, boxes), want))
            c = interleaved(  # (a cell of some 50 ms: more rounds for as steady a best)
                {k: (lambda f=f, s=source, b=boxes: f(s, b)) for k, f in CUTOUT_READERS.items()},
                CUTOUT_ROUNDS * args.repeat,
            )
            cut_mb = sum(a.nbytes for a in want) / 1e6
            for what, t, size in (("read", r, mb), ("cut", c, cut_mb), ("write", w, mb)):
                line = f"{what:<5} {vname:<19} {cname:<5} | {size / t['shardvol']:8.0f}"
                for peer in PEERS:
                    line += f" | {size / t[peer]:11.0f} (x{t[peer] / t['shardvol']:4.2f})"
                print(line, flush=True)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
