"""Whole-chunk read/write of a Zarr v3 array through ZarrChunkStore, for the zarr3 tests.

Deliberately minimal (every chunk, full array): not a slicing layer.  The
numpy slicing of Zarr arrays lives in shardvol.array.indexing.
"""

from __future__ import annotations

import itertools

import numpy as np

from shardvol.kvstore import KVStore
from shardvol.zarr3 import ArrayMetadata, ZarrChunkStore


def open_chunkstore(url_or_store: str | KVStore) -> ZarrChunkStore:
    return ZarrChunkStore.open(url_or_store)


def chunk_region(cs: ZarrChunkStore, coord) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """(region in the array, region in the full chunk) of chunk ``coord``, clipped to the array."""
    lo = [c * s for c, s in zip(coord, cs.chunk_shape)]
    hi = [min(a + s, n) for a, s, n in zip(lo, cs.chunk_shape, cs.shape)]
    return (
        tuple(slice(a, b) for a, b in zip(lo, hi)),
        tuple(slice(0, b - a) for a, b in zip(lo, hi)),
    )


def all_chunks(cs: ZarrChunkStore) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(g) for g in cs.grid_shape)))


def read_all(cs: ZarrChunkStore) -> np.ndarray:
    """The whole array, read chunk by chunk (absent chunks read as the fill value)."""
    out = np.full(cs.shape, cs.fill_value, cs.dtype)
    coords = all_chunks(cs)
    for coord, data in cs.read_chunks(coords).items():
        dst, src = chunk_region(cs, coord)
        out[dst] = cs.codec.decode(data, context=str(coord))[src]
    return out


def write_all(cs: ZarrChunkStore, array: np.ndarray, replace: bool = True) -> None:
    """Store the whole array; fill-valued chunks are left out (deleted)."""
    coords = all_chunks(cs)
    for unit, members in cs.units(coords).items():
        put, drop = {}, []
        for coord in members:
            dst, src = chunk_region(cs, coord)
            chunk = np.full(cs.chunk_shape, cs.fill_value, cs.dtype)
            chunk[src] = array[dst]
            if cs.codec.is_fill(chunk):
                drop.append(coord)
            else:
                put[coord] = cs.codec.encode(chunk)
        with cs.lock(unit):
            cs.update_unit(unit, put, drop, replace=replace)


def write_metadata(store: KVStore, meta: ArrayMetadata) -> ZarrChunkStore:
    return ZarrChunkStore.create(store, meta, overwrite=True)


# --------------------------------------------------------------------------- oracles


def ts_open(path: str, **kwargs):
    import tensorstore as ts

    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}},
                   **kwargs).result()


def ts_read(path: str) -> np.ndarray:
    return ts_open(path, read=True).read().result()


def ts_write(path: str, meta: ArrayMetadata, data: np.ndarray) -> None:
    """TensorStore creates the array (its own zarr.json) from ``meta`` and writes ``data``."""
    import tensorstore as ts

    doc = meta.to_json()
    doc.pop("attributes", None)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "metadata": doc}
    arr = ts.open(spec, create=True).result()
    arr[...] = data


def zarr_read(path: str) -> np.ndarray:
    import zarr

    return zarr.open_array(path, mode="r")[...]


def zarr_write(path: str, meta: ArrayMetadata, data: np.ndarray) -> None:
    """zarr-python creates the array (its own zarr.json) with ``meta``'s codecs and writes
    ``data``."""
    import zarr
    from zarr.registry import get_codec_class

    from shardvol.zarr3.codecs import ArrayArrayCodec, ArrayBytesCodec

    def zcodec(codec):
        doc = codec.to_json()
        return get_codec_class(doc["name"]).from_dict(doc)

    filters = [zcodec(c) for c in meta.codecs if isinstance(c, ArrayArrayCodec)]
    serializer = next(zcodec(c) for c in meta.codecs if isinstance(c, ArrayBytesCodec))
    after = False
    compressors = []
    for c in meta.codecs:
        if after:
            compressors.append(zcodec(c))
        after = after or isinstance(c, ArrayBytesCodec)
    arr = zarr.create_array(
        store=path,
        shape=meta.shape,
        dtype=meta.dtype,
        chunks=meta.chunk_shape,
        filters=filters or None,
        serializer=serializer,
        compressors=compressors or None,
        fill_value=meta.fill_value,
        chunk_key_encoding=meta.chunk_key_encoding.to_json(),
        dimension_names=meta.dimension_names,
    )
    arr[...] = data


def chunked_array(cs: ZarrChunkStore):
    """The slicing engine (shardvol.array.engine) over a Zarr chunk store, as Zarr semantics need
    it."""
    from shardvol.array.engine import ChunkedArray
    from shardvol.array.grid import ChunkGrid

    grid = ChunkGrid((0,) * len(cs.shape), cs.shape, cs.chunk_shape)
    return ChunkedArray(
        grid=grid, dtype=cs.dtype, store=cs, codec=cs.codec, fill_value=cs.fill_value,
        order="C", padded_chunks=True, skip_fill_chunks=True,
    )  # fmt: skip
