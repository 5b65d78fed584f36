"""Zarr v3 sharded arrays: full reads and writes, shardvol vs TensorStore vs zarr-python.

Two shardvol figures, since no user-facing Zarr array class is wired yet:
``chunk-level``: ZarrChunkStore (batched shard reads, one update_unit per
shard) + the inner chunk codec on a thread pool, copying chunks into / out of
one C-ordered array; ``engine``: the same store and codec driven by the generic
slicing engine (shardvol.chunked.ChunkedArray), as a Zarr array class would.
TensorStore and zarr-python do full-array ``arr[...]`` reads and writes.

Cases (as in the issue): a 512^3 uint8 image and a 512x512x128 uint64
segmentation, shards 256x256x128, inner chunks 64^3, zstd and gzip.  Each
figure is the best of ``--repeat`` runs on a local disk (page cache warm);
MB/s are of uncompressed data.  Run: python benchmarks/bench_zarr3.py
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shardvol.kvstore import FileStore
from shardvol.zarr3 import ZARR_JSON, ArrayMetadata, GzipCodec, ZarrChunkStore, ZstdCodec, create_metadata

SHARD = (256, 256, 128)
INNER = (64, 64, 64)
CODECS = {"zstd": ZstdCodec(level=3), "gzip": GzipCodec(level=6)}


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
    idx = np.ix_(*(np.minimum((np.arange(s) + (7 * d)) // 24, c - 1) for d, (s, c) in enumerate(zip(shape, cells))))  # fmt: skip
    return labels[idx]


def chunk_slices(coord):
    return tuple(slice(c * s, (c + 1) * s) for c, s in zip(coord, INNER))


def shardvol_write(path: str, meta: ArrayMetadata, data: np.ndarray) -> None:
    store = FileStore(path)
    store.set(ZARR_JSON, meta.to_bytes())
    cs = ZarrChunkStore(store, meta)
    coords = list(itertools.product(*(range(g) for g in cs.grid_shape)))

    def encode(coord):
        chunk = data[chunk_slices(coord)]  # the shapes here divide evenly: no padding needed
        return coord, None if cs.codec.is_fill(chunk) else cs.codec.encode(chunk)

    encoded = dict(POOL.map(encode, coords))

    def write_unit(item):
        unit, members = item
        put = {c: encoded[c] for c in members if encoded[c] is not None}
        cs.update_unit(unit, put, [c for c in members if encoded[c] is None], replace=True)

    list(POOL.map(write_unit, cs.units(coords).items()))


def shardvol_read(path: str) -> np.ndarray:
    store = FileStore(path)
    meta = ArrayMetadata.from_json(store.get(ZARR_JSON))
    cs = ZarrChunkStore(store, meta)
    out = np.empty(meta.shape, meta.dtype)
    coords = list(itertools.product(*(range(g) for g in cs.grid_shape)))
    encoded = cs.read_chunks(coords)

    def decode(coord):
        region = out[chunk_slices(coord)]
        data = encoded.get(coord)
        if data is None:
            region[...] = meta.fill_value
        else:
            cs.codec.decode(data, out=region)

    list(POOL.map(decode, coords))
    return out


def engine(path: str):
    from shardvol.chunked import ChunkedArray
    from shardvol.grid import ChunkGrid

    cs = ZarrChunkStore.open(path)
    grid = ChunkGrid((0,) * len(cs.shape), cs.shape, cs.chunk_shape)
    return ChunkedArray(grid=grid, dtype=cs.dtype, store=cs, codec=cs.codec, fill_value=cs.fill_value,
                        order="C", padded_chunks=True, skip_fill_chunks=True)  # fmt: skip


def engine_read(path: str) -> np.ndarray:
    from shardvol.indexing import normalize_selection

    arr = engine(path)
    return arr.read(normalize_selection(..., arr.grid.origin, arr.grid.shape))


def engine_write(path: str, meta: ArrayMetadata, data: np.ndarray) -> None:
    from shardvol.indexing import normalize_selection

    ZarrChunkStore.create(path, meta, overwrite=True)
    arr = engine(path)
    arr.write(normalize_selection(..., arr.grid.origin, arr.grid.shape), data)


def ts_spec(path, meta=None):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}
    if meta is not None:
        doc = meta.to_json()
        doc.pop("attributes")
        spec["metadata"] = doc
    return spec


def ts_write(path, meta, data):
    import tensorstore as ts

    ts.open(ts_spec(path, meta), create=True, delete_existing=True).result()[...].write(data).result()


def ts_read(path):
    import tensorstore as ts

    return ts.open(ts_spec(path), read=True).result().read().result()


def zarr_write(path, meta, data):
    import zarr
    from zarr.registry import get_codec_class

    doc = meta.to_json()["codecs"][0]
    serializer = get_codec_class(doc["name"]).from_dict(doc)
    arr = zarr.create_array(store=path, shape=meta.shape, dtype=meta.dtype, chunks=meta.chunk_shape,
                            serializer=serializer, compressors=None, fill_value=0, overwrite=True)  # fmt: skip
    arr[...] = data


def zarr_read(path):
    import zarr

    return zarr.open_array(path, mode="r")[...]


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


POOL: ThreadPoolExecutor


def main() -> None:
    global POOL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="256^3 / 256x256x128 volumes")
    args = parser.parse_args()
    POOL = ThreadPoolExecutor(args.threads)
    scale = 2 if args.quick else 1
    volumes = {
        "image uint8": image((512 // scale,) * 3),
        "segmentation uint64": segmentation((512 // scale, 512 // scale, 128)),
    }
    tmp = tempfile.mkdtemp(prefix="bench_zarr3_")
    print(f"shardvol (chunk-level: {args.threads} threads; engine: its default) vs TensorStore vs "
          f"zarr-python; {os.cpu_count()} cores; best of {args.repeat}; MB/s uncompressed; "
          f"(xN) = shardvol's speed-up over that peer")  # fmt: skip
    try:
        for (vname, data), (cname, codec) in itertools.product(volumes.items(), CODECS.items()):
            meta = create_metadata(data.shape, data.dtype, SHARD, INNER, codecs=[codec])
            mb = data.nbytes / 1e6
            paths = {k: os.path.join(tmp, f"{k}-{cname}-{vname.split()[0]}")
                     for k in ("sv", "engine", "ts", "zarr")}  # fmt: skip
            w = {
                "chunk-level": best(lambda: shardvol_write(paths["sv"], meta, data), args.repeat),
                "engine": best(lambda: engine_write(paths["engine"], meta, data), args.repeat),
                "tensorstore": best(lambda: ts_write(paths["ts"], meta, data), args.repeat),
                "zarr-python": best(lambda: zarr_write(paths["zarr"], meta, data), 1),
            }
            for path in paths.values():  # every writer's output reads back the same everywhere
                assert np.array_equal(engine_read(path), data) and np.array_equal(ts_read(path), data)
            r = {
                "chunk-level": best(lambda: shardvol_read(paths["ts"]), args.repeat),
                "engine": best(lambda: engine_read(paths["ts"]), args.repeat),
                "tensorstore": best(lambda: ts_read(paths["ts"]), args.repeat),
                "zarr-python": best(lambda: zarr_read(paths["ts"]), 1),
            }
            for what, t in (("read", r), ("write", w)):
                for ours in ("chunk-level", "engine"):
                    line = f"{what:<5} {vname:<19} {cname} shardvol[{ours:<11}] {mb / t[ours]:5.0f} MB/s"
                    for peer in ("tensorstore", "zarr-python"):
                        line += f" | {peer} {mb / t[peer]:5.0f} (x{t[peer] / t[ours]:.2f})"
                    print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        POOL.shutdown()


if __name__ == "__main__":
    main()
