"""ZarrArray: numpy slicing of a Zarr v3 array (sharded with ``sharding_indexed`` or not).

``arr[0:10, 5, ::2]`` reads in the array's own axes (C order by default) and
``arr[...] = value`` writes any region; both run on the generic chunk engine
(:mod:`shardvol.array.engine`) over a :class:`ZarrChunkStore`.  Shards and chunks
that are absent read as the fill value; chunks that become all fill are not
stored, and a shard left with no chunks is deleted.  A write that covers
only part of a shard reads, merges and rewrites that shard under its lock.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from shardvol.array.cache import (
    DEFAULT_REMOTE_CACHE_BYTES,
    ChunkCache,
    cache_budget,
    forget_shared,
    shared_cache,
)
from shardvol.array.dask import Source, make_source
from shardvol.array.engine import ChunkedArray
from shardvol.array.futures import AsyncMethods
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import AxisSelection, normalize_selection
from shardvol.errors import InvalidArgumentError, ReadOnlyStoreError, ShardvolError
from shardvol.kvstore import KVStore, open_store
from shardvol.zarr3.box_reader import ShardBoxReader
from shardvol.zarr3.chunkstore import ZarrChunkStore
from shardvol.zarr3.codecs import JSON, Codec
from shardvol.zarr3.metadata import ZARR_JSON, ArrayMetadata, ChunkKeyEncoding, create_metadata

if TYPE_CHECKING:
    import dask.array
    from dask.delayed import Delayed

MODES = ("r", "r+")


class ZarrArray(AsyncMethods):
    """One Zarr v3 array, sliceable like a numpy array of :attr:`shape` and :attr:`dtype`."""

    def __init__(
        self,
        store: ZarrChunkStore,
        *,
        mode: str = "r+",
        order: Literal["C", "F"] = "C",
        parallel: int | None = None,
        cache_bytes: int | str | None = None,
    ) -> None:
        if mode not in MODES:
            raise InvalidArgumentError(
                f"mode must be one of {MODES} (use shardvol.zarr3.create for new arrays), "
                f"got {mode!r}"
            )
        if order not in ("C", "F"):
            raise InvalidArgumentError(f"order must be 'C' or 'F', got {order!r}")
        self._store = store
        self._mode = mode
        self._options: dict[str, Any] = {
            "order": order, "parallel": parallel, "cache_bytes": cache_bytes,
        }
        meta = store.metadata
        budget = cache_budget(cache_bytes, DEFAULT_REMOTE_CACHE_BYTES if store.remote else 0)
        self._array = ChunkedArray(
            grid=ChunkGrid((0,) * meta.ndim, meta.shape, store.chunk_shape),
            dtype=meta.dtype,
            store=store,
            codec=store.codec,
            fill_value=meta.fill_value,
            order=order,
            padded_chunks=True,
            skip_fill_chunks=True,
            parallel=parallel or 0,
            box_reader=ShardBoxReader.for_store(store),
            cache=shared_cache(_cache_key(store.kv), budget) if budget else None,
        )

    def __getstate__(self) -> dict[str, Any]:
        """What an array is (its engine, caches and their listeners are built again where
        it is unpickled)."""
        return {"store": self._store, "mode": self._mode, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], mode=state["mode"], **state["options"])  # type: ignore[misc]  # unpickling

    # ---------------------------------------------------------------- metadata
    @property
    def metadata(self) -> ArrayMetadata:
        """The parsed ``zarr.json``."""
        return self._store.metadata

    @property
    def url(self) -> str:
        """The array's location (the store's URL)."""
        return self._store.kv.url

    @property
    def store(self) -> KVStore:
        """The key-value store holding the array (its ``zarr.json``, chunks and shards)."""
        return self._store.kv

    @property
    def cache(self) -> ChunkCache | None:
        """The decoded chunks kept for later reads (None when ``cache_bytes`` is 0)."""
        return self._array.cache

    @property
    def chunk_store(self) -> ZarrChunkStore:
        """The chunk store (encoded chunks by grid coordinate)."""
        return self._store

    @property
    def chunked_array(self) -> ChunkedArray:
        """The chunk engine behind this array (its grid, chunk store and codec)."""
        return self._array

    @property
    def mode(self) -> str:
        """``"r"`` (read only) or ``"r+"`` (read and write)."""
        return self._mode

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's extent per axis."""
        return self.metadata.shape

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return self.metadata.ndim

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes the whole array takes in memory."""
        return self.size * self.dtype.itemsize

    @property
    def dtype(self) -> np.dtype:
        """The elements' numpy data type."""
        return self.metadata.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """Shape of the smallest stored piece: the inner chunk when sharded (as zarr-python)."""
        return self._store.chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        """Shape of a shard (the chunk grid's cells), None when unsharded."""
        return self.metadata.chunk_shape if self._store.sharded else None

    @property
    def fill_value(self) -> Any:
        """What chunks never written read as."""
        return self.metadata.fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The axes' names from ``zarr.json`` (None where unnamed)."""
        return self.metadata.dimension_names

    @property
    def attrs(self) -> dict[str, JSON]:
        """The ``attributes`` of ``zarr.json`` (a copy; see :meth:`update_attributes`)."""
        return dict(self.metadata.attributes)

    def update_attributes(self, new: Mapping[str, JSON]) -> None:
        """Merge ``new`` into the attributes and rewrite ``zarr.json`` (under its lock)."""
        self._writable(ZARR_JSON)
        kv = self._store.kv
        with kv.lock(ZARR_JSON):
            doc = kv.get(ZARR_JSON)
            meta = ArrayMetadata.from_json(doc, f"{self.url}/{ZARR_JSON}") if doc else self.metadata
            meta = replace(meta, attributes={**meta.attributes, **new})
            kv.set(ZARR_JSON, meta.to_bytes())
        self._store.metadata = meta

    def __repr__(self) -> str:
        return (
            f"ZarrArray({self.url!r}, shape={self.shape}, dtype={self.dtype}, "
            f"chunks={self.chunks}, "
            f"shards={self.shards}, mode={self._mode!r})"
        )

    # ----------------------------------------------------------------- slicing
    def _selection(self, key: Any) -> tuple[AxisSelection, ...]:
        # (numpy's, and zarr-python's, rule: the domain always starts at 0, so a negative
        # index, counted from the end, never changes meaning)
        return normalize_selection(key, (0,) * self.ndim, self.shape, bounded=True,
                                   from_end=True)

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._array.read(self._selection(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._writable(repr(key))
        self._array.write(self._selection(key), value)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self[...]
        return data if dtype is None else data.astype(dtype, copy=False)

    # -------------------------------------------------------------------- dask
    def _dask_source(self, order: Literal["C", "F"] | None = None) -> Source:
        opener = functools.partial(open, self._store.kv, self._mode, **self._options)
        return make_source(opener, self.metadata.to_bytes(), self._array, self.url, order)

    def to_dask(
        self, chunks: Any = None, order: Literal["C", "F"] | None = None
    ) -> dask.array.Array:
        """The array as a lazy ``dask.array`` in its own axes, blocks in ``order`` (default:
        the array's ``order``).

        ``chunks=None``: blocks of whole shards (sharded) or whole chunks, grouped up to
        about 32 MiB; else any ``chunks`` of ``dask.array.from_array``.  The graph holds
        the array's URL and options, never data: each worker opens the array once.
        """
        from shardvol.array.dask import block_shape, read_array

        source = self._dask_source(order)
        if chunks is None:
            chunks = block_shape(self.metadata.chunk_shape, source)
        return read_array(source, chunks)

    def write_dask(
        self,
        array: dask.array.Array,
        offset: Sequence[int] | None = None,
        *,
        compute: bool = True,
        progress: bool = True,
        overwrite: bool = False,
    ) -> Delayed | None:
        """Write a Dask array at index ``offset`` (default 0), each task owning whole
        shards (or chunks); the shards the array covers in part are merged by their one
        task.  Runs on the active Dask scheduler (with its progress bar);
        ``compute=False`` returns the ``Delayed``.  dtype (a safe cast at most), shape and
        bounds are checked before anything is written.  Run again after an interruption,
        it writes only what is not written (as :meth:`shardvol.Volume.write_dask`).
        """
        from shardvol.array.dask import compute as run
        from shardvol.array.dask import store

        self._writable("a Dask array")
        offset = (0,) * self.ndim if offset is None else offset
        result = store(array, self._dask_source(), offset, engine=self._array,
                       unit_shape=self.metadata.chunk_shape,
                       job=self.store if compute else None, overwrite=overwrite)
        if not compute:
            return result
        run(result, progress)
        return None

    def _writable(self, what: str) -> None:
        if self._mode == "r":
            raise ReadOnlyStoreError(f"cannot write {what} of {self.url}: opened with mode='r'")


def open(
    url_or_store: str | KVStore,
    mode: str = "r+",
    *,
    order: Literal["C", "F"] = "C",
    parallel: int | None = None,
    cache_bytes: int | str | None = None,
) -> ZarrArray:
    """Open the Zarr v3 array whose ``zarr.json`` is at ``url_or_store``.

    ``mode``: "r" (read only) or "r+" (read and write).  ``order``: memory
    layout of the arrays reads return.  ``parallel``: decode/encode threads
    (default: one per core).  ``cache_bytes``: decoded chunks kept for later reads, as
    for :class:`~shardvol.Volume` (default 256 MB remote, none local).  InfoError if
    there is no array there.
    """
    return ZarrArray(ZarrChunkStore.open(url_or_store), mode=mode, order=order,
                     parallel=parallel, cache_bytes=cache_bytes)


def create(
    url_or_store: str | KVStore,
    shape: Sequence[int],
    dtype: Any,
    chunk_shape: Sequence[int],
    inner_chunk_shape: Sequence[int] | None = None,
    *,
    codecs: Sequence[Codec | JSON] | None = None,
    index_codecs: Sequence[Codec | JSON] | None = None,
    index_location: str = "end",
    fill_value: Any = 0,
    dimension_names: Sequence[str | None] | None = None,
    attributes: Mapping[str, JSON] | None = None,
    chunk_key_encoding: str = "default",
    separator: str | None = None,
    overwrite: bool = False,
    order: Literal["C", "F"] = "C",
    parallel: int | None = None,
) -> ZarrArray:
    """Create a new array and open it for reading and writing.

    ``chunk_shape`` is the chunk grid: the shard shape when ``inner_chunk_shape``
    is given (the array is then sharded with inner chunks of that shape, which
    must divide it), else the chunk shape.  ``codecs`` are the (inner) chunk
    codecs as objects, JSON objects or names ("zstd", "gzip", "blosc",
    "crc32c", "transpose" objects...), default ``bytes`` + ``zstd``;
    ``index_codecs`` default ``bytes`` + ``crc32c``; ``index_location``
    "end" or "start".  With ``overwrite=True`` an existing array at the URL is
    replaced and its chunks deleted; otherwise AlreadyExistsError.
    """
    meta = create_metadata(
        shape,
        dtype,
        chunk_shape,
        inner_chunk_shape,
        codecs=codecs,
        index_codecs=index_codecs,
        index_location=index_location,
        fill_value=fill_value,
        dimension_names=dimension_names,
        chunk_key_encoding=chunk_key_encoding,
        separator=separator,
        attributes=attributes,
    )
    kv = open_store(url_or_store)
    with kv.lock(ZARR_JSON):
        if overwrite:
            delete_chunks(kv)
            forget_shared(_cache_key(kv))
        store = ZarrChunkStore.create(kv, meta, overwrite=overwrite)
    return ZarrArray(store, mode="r+", order=order, parallel=parallel)


def _cache_key(kv: KVStore) -> tuple[str, str]:
    return (kv.url, ZARR_JSON)


def delete_chunks(kv: KVStore) -> None:
    """Delete the stored chunks (shards) of the array whose ``zarr.json`` is in ``kv``, if any."""
    doc = kv.get(ZARR_JSON)
    if doc is None:
        return
    try:
        meta = ArrayMetadata.from_json(doc, f"{kv.url}/{ZARR_JSON}")
        encoding, ndim = meta.chunk_key_encoding, meta.ndim
    except ShardvolError:  # an unreadable array: its chunks are still named one of the two ways
        encoding, ndim = None, None
    encodings = (
        [encoding]
        if encoding
        else [ChunkKeyEncoding("default", s) for s in "/."]
        + [ChunkKeyEncoding("v2", s) for s in "./"]
    )
    kv.delete_many([key for key in kv.list("")
                    if any(_is_chunk_key(e, key, ndim) for e in encodings)])


def _is_chunk_key(encoding: ChunkKeyEncoding, key: str, ndim: int | None) -> bool:
    parts = key.split(encoding.separator)
    n = len(parts) - (encoding.name == "default") if ndim is None else ndim
    try:
        encoding.coords(key, n)
    except InvalidArgumentError:
        return False
    return True


__all__ = ["ZarrArray", "create", "open"]
