"""Volume: numpy slicing of a Neuroglancer precomputed volume, sharded or not.

``vol[x0:x1, y0:y1, z0:z1]`` returns an ``(x, y, z, channel)`` array in Fortran
order, indexed in the volume's global voxel coordinates (the domain starts at
``voxel_offset``); ``vol[...] = array`` writes any region.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from shardvol.array import labels
from shardvol.array.cache import (
    DEFAULT_REMOTE_CACHE_BYTES,
    ChunkCache,
    cache_budget,
    forget_shared,
    shared_cache,
)
from shardvol.array.chunkstore import ChunkCoord, ChunkStore
from shardvol.array.dask import Source, make_source
from shardvol.array.engine import ChunkedArray
from shardvol.array.futures import AsyncMethods
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import AxisSelection, ChunkPart, chunk_parts, normalize_selection
from shardvol.array.values import cast_scalar
from shardvol.compression import DEFAULT_LEVEL, check_level
from shardvol.errors import AlreadyExistsError, InfoError, InvalidArgumentError
from shardvol.kvstore import KVStore, PrefixStore, open_store
from shardvol.kvstore.job_record import (
    JOB_KEY,
    JobStatus,
    job_status,
    read_job,
    warn_if_unfinished,
)
from shardvol.precomputed.codecs import CODECS, ChunkEncoding, get_codec
from shardvol.precomputed.info import DATA_TYPES, ScaleInfo, VolumeInfo, resolution_key
from shardvol.precomputed.info_file import (
    INFO_KEY,
    Followed,
    follow,
    parse_info,
    read_info,
    write_info,
)
from shardvol.precomputed.objects import link_object, new_object_store, object_store
from shardvol.precomputed.provenance import read_provenance, write_provenance
from shardvol.precomputed.raw_files import RawFileReader
from shardvol.precomputed.shard_boxes import ShardBoxReader
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.precomputed.unsharded import UnshardedChunkStore, chunk_key
from shardvol.sharding import ShardingSpec, auto_sharding, shard_shape

if TYPE_CHECKING:
    import dask.array
    from dask.delayed import Delayed

    from shardvol.precomputed.meshes import Meshes
    from shardvol.precomputed.segment_properties import SegmentProperties
    from shardvol.precomputed.skeletons import Skeletons

#: The Neuroglancer (and CloudVolume) prefix of a precomputed URL: "precomputed://gs://b/em".
URL_PREFIX = "precomputed://"


def _without_prefix(url: str | KVStore) -> str | KVStore:
    if isinstance(url, str) and url[: len(URL_PREFIX)].lower() == URL_PREFIX:
        return url[len(URL_PREFIX):]
    return url


def _scale_store(kv: KVStore, scale: ScaleInfo) -> KVStore:
    key = posixpath.normpath(scale.key.strip("/"))
    if key.startswith("..") or key == ".":
        raise InfoError(f"info: scale key {scale.key!r} points outside the volume at {kv.url}")
    return PrefixStore(kv, key)


class Volume(AsyncMethods):
    """One scale (mip) of a precomputed volume, sliceable like a 4-D numpy array.

    ``url``: a path, a URL (``file://``, ``gs://``, ``s3://``, ``http(s)://``,
    ``memory://``), either with a ``precomputed://`` prefix, or a KVStore.

    ``compress_level``: gzip level (0-12, default 6) of the chunks this object writes to
    shards with gzip data encoding; readers need not know it.  ``cache_bytes``: decoded
    chunks kept for later reads, shared by the handles of this scale in the process (a
    number or a size like "1GB"; 0: none; default 256 MB for remote stores, none for local
    files; see :mod:`shardvol.array.cache`).
    """

    def __init__(
        self,
        url: str | KVStore | Followed,
        mip: int | str | Sequence[float] = 0,
        *,
        fill_value: Any = 0,
        fill_missing: bool = True,
        bounded: bool = True,
        parallel: int | None = None,
        jpeg_quality: int | None = None,
        compress_level: int | None = None,
        cache_bytes: int | str | None = None,
    ) -> None:
        # (a redirect is followed; the record of an unfinished job comes with the info;
        # shardvol.open gives what it read so)
        if not isinstance(url, Followed):
            url = follow(open_store(_without_prefix(url)), (JOB_KEY,))
        self._kv, (raw_info, raw_job, *_) = url.kv, url.values
        self._options = _checked_options(
            self._kv, fill_value=fill_value, fill_missing=fill_missing, bounded=bounded,
            parallel=parallel, jpeg_quality=jpeg_quality, compress_level=compress_level,
            cache_bytes=cache_bytes)
        self._meta = parse_info(self._kv, raw_info)
        self._edits: dict[str, Any] | None = None
        self._provenance: dict[str, Any] | None = None
        self._select(mip)
        warn_if_unfinished(raw_job, self.scale.key, f"{self.url} scale {self.scale.key}",
                           f"{self.url}/{JOB_KEY}")

    def __getstate__(self) -> dict[str, Any]:
        """What a Volume is: its store, options, info and scale (the engine, its caches and
        their listeners are built again where it is unpickled)."""
        return {"kv": self._kv, "options": self._options, "meta": self._meta, "mip": self._mip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._kv, self._options, self._meta = state["kv"], state["options"], state["meta"]
        self._edits = self._provenance = None
        self._select(state["mip"])

    def _select(self, mip: int | str | Sequence[float]) -> None:
        meta = self._meta
        if isinstance(mip, numbers.Integral) and not isinstance(mip, bool):
            mip = int(mip)  # numpy integers too
        self._mip = meta.scale_index(mip)
        scale = meta.scales[self._mip]
        c = meta.num_channels
        grid = ChunkGrid(
            origin=(*scale.voxel_offset, 0),
            shape=(*scale.size, c),
            chunk_shape=(*scale.chunk_size, c),
        )
        kv = _scale_store(self._kv, scale)
        self._spec = ShardingSpec.from_dict(scale.sharding) if scale.sharding else None
        # no encoding stores a chunk in more than a few times its voxels' bytes: gzipped
        # data inflating to more is corrupt (or a "gzip bomb"), not a chunk
        max_chunk = 4 * math.prod(grid.chunk_shape) * meta.dtype.itemsize + (1 << 20)
        store: ChunkStore[int] | ChunkStore[ChunkCoord]
        codec = scale_codec(scale, meta.dtype, c, jpeg_quality=self._options["jpeg_quality"])
        box_reader: RawFileReader | ShardBoxReader | None
        if self._spec is None:
            store = UnshardedChunkStore(
                kv, grid, max_chunk, chunk_nbytes=math.prod(grid.chunk_shape) * meta.dtype.itemsize
            )
            box_reader = RawFileReader.for_scale(kv, grid, codec)
        else:
            store = ShardedChunkStore(
                kv, grid, self._spec, self._options["compress_level"], max_chunk,
                chunk_nbytes=math.prod(grid.chunk_shape) * meta.dtype.itemsize,
            )
            box_reader = ShardBoxReader.for_scale(store, codec)
        self._array = ChunkedArray(
            grid=grid,
            dtype=meta.dtype,
            store=store,
            codec=codec,
            fill_value=_fill_value(self._options["fill_value"], meta.dtype, self.url),
            fill_missing=self._options["fill_missing"],
            parallel=int(self._options["parallel"] or 0),
            box_reader=box_reader,
            cache=(shared_cache((self._kv.url, scale.key), self._options["cache_bytes"])
                   if self._options["cache_bytes"] else None),
        )

    # ---------------------------------------------------------------- metadata
    @property
    def url(self) -> str:
        """The volume's location (the store's URL)."""
        return self._kv.url

    @property
    def store(self) -> KVStore:
        """The key-value store holding the volume (its info file and every scale)."""
        return self._kv

    @property
    def info(self) -> dict[str, Any]:
        """The info file as a dict to edit, as CloudVolume's ``info`` is: the same dict on
        every access, written by :meth:`commit_info`; until then the volume is what it was
        opened as."""
        if self._edits is None:
            self._edits = self._meta.to_dict()
        return self._edits

    def commit_info(self) -> None:
        """Write the edited :attr:`info` (checked whole first: every field, and that this
        host can encode every scale) atomically, under the store's lock on it; this Volume
        then follows it, on the same scale (by key, else by index)."""
        edited = VolumeInfo.from_dict(self.info)
        for scale in edited.scales:
            check_encoder(scale, edited.dtype, edited.num_channels)
        key, index = self.scale.key, self._mip
        with self._kv.lock(INFO_KEY):
            write_info(self._kv, edited)
        for scale in edited.scales:
            forget_shared((self._kv.url, scale.key))
        self._meta, self._edits = edited, None
        keys = [s.key for s in edited.scales]
        self._select(key if key in keys else min(index, len(keys) - 1))

    @property
    def provenance(self) -> dict[str, Any]:
        """The volume's provenance file as a dict to edit (CloudVolume's ``provenance``: a
        description, sources, owners, processing steps), written by
        :meth:`commit_provenance`; shardvol's own jobs add their steps themselves."""
        if self._provenance is None:
            self._provenance = read_provenance(self._kv)
        return self._provenance

    def commit_provenance(self) -> None:
        """Write the edited :attr:`provenance` (checked first), under the store's lock."""
        write_provenance(self._kv, self.provenance)

    # ------------------------------------------------- meshes, skeletons, segment properties

    @property
    def meshes(self) -> Meshes:
        """The meshes of this segmentation, in the directory the info's ``mesh`` names:
        ``vol.meshes[label]`` is a :class:`~shardvol.precomputed.meshes.Mesh`;
        ``vol.meshes[label] = mesh`` writes one.  InfoError if the info names none."""
        from shardvol.precomputed.meshes import Meshes  # (objects: imported when used)

        return Meshes(object_store(self._kv, self._meta, "mesh"))

    def create_meshes(self, directory: str = "mesh", **options: Any) -> Meshes:
        """Create a mesh directory (``options`` as :meth:`Meshes.create`: ``multires``,
        ``sharding``, ...) and name it in the info as ``mesh``."""
        from shardvol.precomputed.meshes import Meshes

        meshes = Meshes.create(new_object_store(self._kv, "mesh", directory), **options)
        self._link("mesh", directory)
        return meshes

    @property
    def skeletons(self) -> Skeletons:
        """The skeletons of this segmentation, in the directory the info's ``skeletons``
        names: ``vol.skeletons[label]`` is a
        :class:`~shardvol.precomputed.skeletons.Skeleton`.  InfoError if it names none."""
        from shardvol.precomputed.skeletons import Skeletons

        return Skeletons(object_store(self._kv, self._meta, "skeletons"))

    def create_skeletons(self, directory: str = "skeletons", **options: Any) -> Skeletons:
        """Create a skeleton directory (``options`` as :meth:`Skeletons.create`:
        ``vertex_attributes``, ``sharding``, ...) and name it in the info."""
        from shardvol.precomputed.skeletons import Skeletons

        skeletons = Skeletons.create(new_object_store(self._kv, "skeletons", directory),
                                     **options)
        self._link("skeletons", directory)
        return skeletons

    @property
    def segment_properties(self) -> SegmentProperties:
        """The segment properties (labels, tags, numbers) the info's
        ``segment_properties`` directory holds.  InfoError if it names none."""
        from shardvol.precomputed.segment_properties import read_segment_properties

        return read_segment_properties(object_store(self._kv, self._meta, "segment_properties"))

    def write_segment_properties(self, props: SegmentProperties,
                                 directory: str = "segment_properties") -> None:
        """Write ``props`` to ``directory`` and name it in the info."""
        from shardvol.precomputed.segment_properties import write_segment_properties

        write_segment_properties(new_object_store(self._kv, "segment_properties", directory),
                                 props)
        self._link("segment_properties", directory)

    def _link(self, key: str, directory: str) -> None:
        current = self.scale.key
        self._meta = link_object(self._kv, key, directory)
        self._edits = None
        self._select(current)

    @property
    def meta(self) -> VolumeInfo:
        """The parsed, validated info."""
        return self._meta

    @property
    def scale(self) -> ScaleInfo:
        """The info's entry of the open scale (key, size, resolution, chunk size, encoding)."""
        return self._meta.scales[self._mip]

    @property
    def mip_level(self) -> int:
        """Index of this scale in ``mips`` (0 is the finest)."""
        return self._mip

    @property
    def mips(self) -> tuple[ScaleInfo, ...]:
        """Every scale, finest first."""
        return self._meta.scales

    @property
    def layer_type(self) -> str:
        """``"image"`` or ``"segmentation"`` (the info's ``type``)."""
        return self._meta.type

    @property
    def dtype(self) -> np.dtype:
        """The voxels' numpy data type."""
        return self._meta.dtype

    @property
    def num_channels(self) -> int:
        """Channels per voxel (the last axis of every array read)."""
        return self._meta.num_channels

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(x, y, z, channel)`` extent of the open scale."""
        return (*self.scale.size, self._meta.num_channels)

    @property
    def voxel_offset(self) -> tuple[int, int, int]:
        """Global coordinates of the open scale's first voxel."""
        return self.scale.voxel_offset

    @property
    def bounds(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(start, stop)`` voxel coordinates of the domain (stop exclusive)."""
        start = self.scale.voxel_offset
        stop = tuple(s + n for s, n in zip(start, self.scale.size))
        return start, stop  # type: ignore[return-value]  # 3 axes

    @property
    def chunk_size(self) -> tuple[int, int, int]:
        """Voxels per chunk along x, y, z."""
        return self.scale.chunk_size

    @property
    def resolution(self) -> tuple[float, float, float]:
        """Nanometres per voxel along x, y, z."""
        return self.scale.resolution

    @property
    def encoding(self) -> str:
        """The chunk encoding of the open scale (``raw``, ``jpeg``, ...)."""
        return self.scale.encoding

    @property
    def sharding(self) -> ShardingSpec | None:
        """The open scale's sharding spec, or None (one file per chunk)."""
        return self._spec

    @property
    def shard_shape(self) -> tuple[int, int, int] | None:
        """Voxel shape of one shard when shards are aligned blocks (else None, also unsharded):
        regions starting at ``voxel_offset + k * shard_shape`` are whole shard files."""
        if self._spec is None:
            return None
        return shard_shape(self._spec, self.scale.grid_size, self.chunk_size)

    @property
    def incomplete(self) -> JobStatus | None:
        """The unfinished job (a copy, a pyramid) that writes this scale, and how far it got
        (read now; its missing parts read as the fill value); None if there is none."""
        record = read_job(self._kv)
        if record is None or not record.covers(self.scale.key):
            return None
        return job_status(self._kv, record)

    @property
    def fill_value(self) -> Any:
        """What missing chunks (and, unbounded, the outside) read as."""
        return self._options["fill_value"]

    @property
    def compress_level(self) -> int:
        """gzip level of the chunks written to shards with gzip data encoding."""
        return self._options["compress_level"]

    @property
    def cache(self) -> ChunkCache | None:
        """The decoded chunks kept for later reads (None when ``cache_bytes`` is 0)."""
        return self._array.cache

    @property
    def chunk_store(self) -> ChunkStore[int] | ChunkStore[ChunkCoord]:
        """The chunk store of this scale (sharded or one file per chunk)."""
        return self._array.store

    @property
    def chunked_array(self) -> ChunkedArray:
        """The chunk engine behind this scale (its grid, chunk store and codec)."""
        return self._array

    def __repr__(self) -> str:
        s = self.scale
        return (f"Volume({self.url!r}, mip={self._mip}, shape={self.shape}, dtype={self.dtype}, "
                f"encoding={s.encoding!r}, sharded={self._spec is not None})")

    # ----------------------------------------------------------------- slicing
    def _selection(self, key: Any, bounded: bool) -> tuple[AxisSelection, ...]:
        g = self._array.grid
        return normalize_selection(key, g.origin, g.shape, bounded=bounded)

    def __getitem__(self, key: Any) -> np.ndarray:
        return self._array.read(self._selection(key, self._options["bounded"]))

    def __setitem__(self, key: Any, value: Any) -> None:
        bounded = self._options["bounded"]
        sel = self._selection(key, bounded)
        self._array.write(sel, self._with_channel_axis(sel, value), bounded=bounded)

    def _with_channel_axis(self, sel: tuple[AxisSelection, ...], value: Any) -> Any:
        """A single-channel volume takes values without the channel axis: an ``(x, y, z)``
        array for ``vol[x0:x1, y0:y1, z0:z1]`` (as ``from_dask`` and CloudVolume take them)."""
        if self.num_channels != 1 or sel[3].drop or np.ndim(value) == 0:
            return value
        want = tuple(a.count for a in sel if not a.drop)
        value = np.asarray(value) if not hasattr(value, "shape") else value
        return value[..., None] if tuple(value.shape) == want[:-1] else value

    # -------------------------------------------------------------------- dask
    def _dask_source(self, order: Literal["C", "F"] | None = None) -> Source:
        opener = functools.partial(Volume, self._kv, self.scale.key, **self._options)
        return make_source(opener, self._meta.to_json(), self._array, self.url, order)

    def _unit_shape(self) -> tuple[int, int, int, int] | None:
        """Voxel shape of a storage unit (a chunk file or an aligned shard); None for hashed
        shards, which are not boxes."""
        unit = self.chunk_size if self._spec is None else self.shard_shape
        return None if unit is None else (*unit, self.num_channels)

    def to_dask(
        self, chunks: Any = None, order: Literal["C", "F"] = "F"
    ) -> dask.array.Array:
        """This scale as a lazy ``dask.array`` of shape ``(x, y, z, channel)``, index 0 at
        ``voxel_offset``, whose blocks are numpy arrays in ``order`` (Fortran order, as
        stored, is the fast one to read; Dask assembles results of several blocks, and
        rechunks, in C order, which copies Fortran-ordered blocks slowly).

        ``chunks=None``: blocks of whole shards (aligned sharding) or whole chunks, grouped
        up to about 32 MiB, on the chunk grid (which starts at ``voxel_offset``); else any
        ``chunks`` of ``dask.array.from_array`` (3 values: x, y, z, all channels).  The
        graph holds the volume's URL, scale and options, never data: each worker opens the
        volume once and reads its blocks (``memory://`` volumes: local schedulers only).
        """
        from shardvol.array.dask import block_shape, read_array

        source = self._dask_source(order)
        if chunks is None:
            unit = self._unit_shape() or (*self.chunk_size, self.num_channels)
            chunks = block_shape(unit, source)
        elif isinstance(chunks, (tuple, list)) and len(chunks) == 3:
            chunks = (*chunks, self.num_channels)
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
        """Write a Dask array of shape ``(x, y, z)`` (one channel) or ``(x, y, z, channel)``
        with its first voxel at ``offset``, in global voxel coordinates as
        ``vol[x0:, y0:, z0:] = array`` takes them (default: ``voxel_offset``, where index 0
        of :meth:`to_dask` is).

        The array is rechunked so that every task owns whole storage units: boxes of whole
        chunk files or aligned shards, or, for hashed shards, the chunks of one shard
        each; units the array covers in part are merged by their one task.  Runs on the
        active Dask scheduler (with its progress bar); ``compute=False`` returns the
        ``Delayed`` instead.  The dtype (a safe cast at most), shape and bounds are checked
        before anything is written.

        The write is a job recorded in the volume (see :mod:`shardvol.ops.jobs`): run again
        after an interruption (the same Dask array, by its name, at the same offset) it
        writes only the units not yet written; another unfinished write there is refused
        unless ``overwrite``.  A write returned with ``compute=False`` is not recorded.
        """
        from shardvol.array.dask import compute as run
        from shardvol.array.dask import store

        c = self.num_channels
        if getattr(array, "ndim", None) == 3:
            if c != 1:
                raise InvalidArgumentError(
                    f"a 3-D array has one channel; {self.url} has {c}: give (x, y, z, channel)"
                )
            array = array[..., None]
        elif getattr(array, "ndim", None) == 4 and array.shape[3] != c:
            raise InvalidArgumentError(
                f"the array has {array.shape[3]} channels; {self.url} has {c}"
            )
        given = _offset(self.voxel_offset if offset is None else offset, 3)
        try:  # (from the domain's start, as the engine indexes)
            local = tuple(int(g) - o for g, o in zip(given, (*self.voxel_offset, 0)))
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"offset must be a sequence of integers, got {offset!r}") from None
        if len(given) != 4:
            local = given  # (the engine names what is wrong with it)
        result = store(array, self._dask_source(), local, engine=self._array,
                       unit_shape=self._unit_shape(), job=self._kv if compute else None,
                       target=self.scale.key, overwrite=overwrite)
        if not compute:
            return result
        run(result, progress)
        return None

    # ---------------------------------------------------------------- labels
    def labels(self, region: Any = ...) -> np.ndarray:
        """The distinct values in ``region`` (every channel), sorted (CloudVolume's
        ``unique``), read a block of whole chunks at a time (not the region at once)."""
        sel = self._selection(region, self._options["bounded"])
        if any(a.step != 1 for a in sel):
            return labels.unique(self.__getitem__, iter([region]))
        box = tuple((a.start, a.start + a.count) for a in sel)
        itemsize = self.dtype.itemsize
        return labels.unique(self.__getitem__, labels.blocks(box, self._array.grid, itemsize))

    def mask(self, region: Any, label: Any) -> np.ndarray:
        """``region`` as a boolean array, true where it holds ``label`` (one or a sequence
        of labels; CloudVolume's ``download(label=)``)."""
        return labels.mask(self[region], label)

    def renumber(self, region: Any = ..., start: int = 1,
                 preserve_zero: bool = True) -> tuple[np.ndarray, dict[int, int]]:
        """``region`` with its labels renumbered from ``start`` (0 kept as 0 if
        ``preserve_zero``), and the mapping from old labels to new (CloudVolume's
        ``download(renumber=True)``); the array keeps the volume's data type."""
        return labels.renumber(self[region], start, preserve_zero)

    def points(self, coords: Any) -> np.ndarray:
        """The values at N voxels (an N x 3 array of global x, y, z coordinates): an N x
        channels array (CloudVolume's ``scattered_points``).  One box is read per chunk
        the points fall in, the boxes at once.  Points outside the volume: an
        OutOfBoundsError, or with ``bounded=False`` the fill value."""
        return labels.points(coords, self._array.grid, self._options["bounded"],
                             self._array.fill_value, self.dtype, self.read_async)

    # ------------------------------------------------------------ chunk level
    def _parts(self, region: Any) -> list[ChunkPart]:
        """The chunks ``region`` meets; a region reaching outside the volume is an
        OutOfBoundsError if the volume is ``bounded``, else clipped to it (as reads are)."""
        sel = self._selection(region, bounded=self._options["bounded"])
        return chunk_parts(sel, self._array.grid)

    def exists(self, region: Any = ...) -> dict[str, bool]:
        """For every chunk overlapping ``region``, whether it is stored (in any form it may
        take: a compressed chunk file counts), keyed as CloudVolume does, by the chunk's file
        name under its scale (``"8_8_40/0-64_0-64_0-64"``).  A region reaching outside the
        volume is an OutOfBoundsError, or with ``bounded=False`` clipped to it (as
        :meth:`delete` takes it)."""
        coords = [p.coord for p in self._parts(region)]
        found = self._array.store.exists(coords)
        return {f"{self.scale.key}/{chunk_key(self._array.grid, c)}": found[c] for c in coords}

    def delete(self, region: Any = ...) -> None:
        """Delete the chunks of ``region``, which must cover whole chunks (as CloudVolume
        requires): they then read as the fill value.  A region reaching outside the volume
        is an OutOfBoundsError, or with ``bounded=False`` clipped to it (as :meth:`exists`
        takes it)."""
        parts = self._parts(region)
        partial = next((p for p in parts if not p.full), None)
        if partial is not None:
            raise InvalidArgumentError(
                f"delete removes whole chunks, and the region covers chunk "
                f"{chunk_key(self._array.grid, partial.coord)} only in part: align it to the "
                f"chunk grid (chunk size {self.chunk_size}, from {self.voxel_offset}), or write "
                "the fill value to clear part of a chunk"
            )
        self._array.delete_chunks([p.coord for p in parts])

    # -------------------------------------------------------------- scales
    def mip(self, mip: int | str | Sequence[float]) -> Volume:
        """The same volume at another scale (by index, key or resolution)."""
        other = object.__new__(Volume)
        other._kv, other._options, other._meta = self._kv, dict(self._options), self._meta
        other._edits = other._provenance = None
        other._select(mip)
        return other

    def refresh(self) -> None:
        """Re-read the info file (after another process added scales)."""
        key = self.scale.key  # (scales are ordered by resolution: indexes may shift)
        self._meta, self._edits = read_info(self._kv), None
        self._select(key)

    def add_scale(
        self,
        resolution: Sequence[float],
        size: Sequence[int],
        voxel_offset: Sequence[int] = (0, 0, 0),
        chunk_size: Sequence[int] | None = None,
        encoding: str | None = None,
        compressed_segmentation_block_size: Sequence[int] | None = None,
        sharding: str | dict[str, Any] | None = None,
        key: str | None = None,
        jpeg_quality: int | None = None,
        png_level: int | None = None,
        encoding_options: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> Volume:
        """Add a scale to the info file (atomically) and return a Volume on it.

        Defaults (chunk size, encoding, block size, jpeg quality, png level, the other
        options of the encoding when it is this scale's) come from this scale.
        """
        base = self.scale
        encoding = (encoding or base.encoding).lower()
        block = compressed_segmentation_block_size
        if encoding == "compressed_segmentation" and block is None:
            block = base.compressed_segmentation_block_size or (8, 8, 8)
        scale = make_scale(
            resolution=resolution, size=size, voxel_offset=voxel_offset,
            chunk_size=chunk_size or base.chunk_size, encoding=encoding,
            compressed_segmentation_block_size=block, sharding=sharding, key=key,
            dtype=self.dtype, num_channels=self.num_channels,
            jpeg_quality=jpeg_quality or base.extra.get("jpeg_quality"),
            png_level=png_level if png_level is not None else base.extra.get("png_level"),
            encoding_options={**_encoding_options(base, encoding), **(encoding_options or {})},
        )
        with self._kv.lock(INFO_KEY):
            meta = read_info(self._kv)
            existing = next((s for s in meta.scales if s.key == scale.key), None)
            if existing is not None and existing != scale and not overwrite:
                raise AlreadyExistsError(
                    f"{self.url}: scale {scale.key!r} exists with other parameters; "
                    "pass overwrite=True (--overwrite) to replace it"
                )
            if existing is not None and overwrite:
                _delete_prefix(self._kv, scale.key)
                forget_shared((self._kv.url, scale.key))
            meta = meta.with_scale(scale)
            VolumeInfo.from_dict(meta.to_dict())  # validate the combination
            check_encoder(scale, self.dtype, self.num_channels)
            write_info(self._kv, meta)
        current = self.scale.key  # (scales are ordered by resolution: indexes may shift)
        self._meta, self._edits = meta, None
        self._select(current)
        return self.mip(scale.key)

    # ------------------------------------------------------------- creation
    @classmethod
    def create(
        cls,
        url: str | KVStore,
        *,
        size: Sequence[int],
        type: str = "image",
        data_type: str = "uint8",
        num_channels: int = 1,
        resolution: Sequence[float] = (1, 1, 1),
        voxel_offset: Sequence[int] = (0, 0, 0),
        chunk_size: Sequence[int] = (64, 64, 64),
        encoding: str = "raw",
        compressed_segmentation_block_size: Sequence[int] | None = None,
        jpeg_quality: int | None = None,
        png_level: int | None = None,
        sharding: str | dict[str, Any] | None = None,
        overwrite: bool = False,
        encoding_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Volume:
        """Write a new info file with one scale and open it.

        ``sharding``: None (unsharded), ``"auto"`` (see :func:`shardvol.sharding.auto_sharding`)
        or a sharding spec dict.  ``encoding_options``: the encoding's other info fields,
        such as ``{"fpzip_precision": 24}`` or ``{"zfpc_tolerance": 0.001}``.  With
        ``overwrite=True`` an existing volume at ``url`` is replaced and its scales' data
        deleted.
        """
        kv = open_store(_without_prefix(url))
        cseg = encoding.lower() == "compressed_segmentation"
        if cseg and compressed_segmentation_block_size is None:
            compressed_segmentation_block_size = (8, 8, 8)
        try:
            dtype = np.dtype(data_type.lower() if isinstance(data_type, str) else data_type)
        except TypeError:
            raise InfoError(f"data_type {data_type!r} is not one of {', '.join(DATA_TYPES)}"
                            ) from None
        data_type = dtype.name
        scale = make_scale(
            resolution=resolution,
            size=size,
            voxel_offset=voxel_offset,
            chunk_size=chunk_size,
            encoding=encoding,
            compressed_segmentation_block_size=compressed_segmentation_block_size,
            sharding=sharding,
            key=None,
            dtype=dtype,
            num_channels=num_channels,
            jpeg_quality=jpeg_quality,
            png_level=png_level,
            encoding_options=encoding_options,
        )
        info = {"@type": "neuroglancer_multiscale_volume", "type": type,
                "data_type": data_type, "num_channels": num_channels,
                "scales": [scale.to_dict()]}
        return cls.create_from_info(kv, info, overwrite=overwrite, **options)

    @classmethod
    def create_from_info(
        cls, url: str | KVStore, info: dict[str, Any], *, overwrite: bool = False,
        **options: Any,
    ) -> Volume:
        """Write a new info file with every scale ``info`` lists (an info dict, as
        CloudVolume's ``create_new_info`` makes, with any scales added) and open its first
        scale.  The info, this host's encoders for every scale and ``options`` (those of
        :class:`Volume`) are checked before anything is written.  With ``overwrite=True``
        an existing volume at ``url`` is replaced and its scales' data deleted."""
        kv = open_store(_without_prefix(url))
        meta = VolumeInfo.from_dict(info)
        for scale in meta.scales:
            check_encoder(scale, meta.dtype, meta.num_channels)
        checked = _checked_options(kv, **options)
        _fill_value(checked["fill_value"], meta.dtype, kv.url)
        with kv.lock(INFO_KEY):
            old = kv.get(INFO_KEY)
            if old is not None:
                if not overwrite:
                    raise AlreadyExistsError(
                        f"{kv.url} already holds a volume (an info file); "
                        "pass overwrite=True (--overwrite)"
                    )
                try:
                    old_keys = [s.key for s in VolumeInfo.from_json(old).scales]
                except InfoError:
                    old_keys = []
                for k in {*old_keys, *(s.key for s in meta.scales)}:
                    _delete_prefix(kv, k)
                    forget_shared((kv.url, k))
            write_info(kv, meta)
        return cls(kv, 0, **options)


def make_scale(
    *,
    resolution: Sequence[float],
    size: Sequence[int],
    voxel_offset: Sequence[int],
    chunk_size: Sequence[int],
    encoding: str,
    compressed_segmentation_block_size: Sequence[int] | None,
    sharding: str | dict[str, Any] | None,
    key: str | None,
    dtype: np.dtype,
    num_channels: int,
    jpeg_quality: int | None = None,
    png_level: int | None = None,
    encoding_options: Mapping[str, Any] | None = None,
) -> ScaleInfo:
    """A validated ScaleInfo; ``sharding="auto"`` picks a spec for this geometry.

    ``jpeg_quality`` / ``png_level`` are stored in the scale as TensorStore does (when the
    encoding uses them); ``encoding_options`` are other fields of the encoding
    (``fpzip_precision``, ``zfpc_tolerance``, ...): InvalidArgumentError for one it has not.
    """
    encoding = encoding.lower()
    if np.dtype(dtype).name not in DATA_TYPES:
        raise InfoError(f"data_type {np.dtype(dtype).name!r} is not one of {', '.join(DATA_TYPES)}")
    res = [float(r) if not float(r).is_integer() else int(r) for r in resolution]
    d: dict[str, Any] = {
        "key": key or resolution_key(tuple(res)),  # type: ignore[arg-type]  # 3 axes
        "size": [_integer(v) for v in size],
        "resolution": res,
        "voxel_offset": [_integer(v) for v in voxel_offset],
        "chunk_sizes": [[_integer(v) for v in chunk_size]],
        "encoding": encoding,
    }
    if compressed_segmentation_block_size is not None:
        d["compressed_segmentation_block_size"] = [
            _integer(v) for v in compressed_segmentation_block_size
        ]
    if encoding == "jpeg" and jpeg_quality is not None:
        d["jpeg_quality"] = _integer(jpeg_quality)
    if encoding == "png" and png_level is not None:
        d["png_level"] = _integer(png_level)
    known = CODECS[encoding].options if encoding in CODECS else ()
    for name, value in (encoding_options or {}).items():
        if name not in known or name == "compressed_segmentation_block_size":
            raise InvalidArgumentError(
                f"{name!r} is not an option of the {encoding!r} encoding; its options: "
                f"{', '.join(known) or 'none'}")
        if value is not None:
            d[name] = list(value) if isinstance(value, tuple) else value
    scale = ScaleInfo.from_dict(d, f"scale {d['key']}")
    if sharding == "auto":
        spec = auto_sharding(
            grid_size=scale.grid_size,
            chunk_bytes=int(np.prod(scale.chunk_size)) * num_channels * np.dtype(dtype).itemsize,
            encoding=scale.encoding,
        )
        d["sharding"] = spec.to_dict()
    elif isinstance(sharding, dict):
        d["sharding"] = ShardingSpec.from_dict(sharding).to_dict()
    elif sharding is not None:
        raise InfoError(f"sharding must be None, 'auto' or a spec dict, got {sharding!r}")
    return ScaleInfo.from_dict(d, f"scale {d['key']}")


def _encoding_options(scale: ScaleInfo, encoding: str) -> dict[str, Any]:
    """``scale``'s fields of ``encoding``'s options other than the jpeg quality, png level
    and block size (empty if ``scale`` has another encoding)."""
    if scale.encoding != encoding:
        return {}
    own = ("jpeg_quality", "png_level", "compressed_segmentation_block_size")
    return {k: scale.extra[k] for k in CODECS[encoding].options
            if k in scale.extra and k not in own}


def check_encoder(scale: ScaleInfo, dtype: np.dtype, num_channels: int) -> None:
    """Raise unless this host can encode the chunks of ``scale`` (its options, such as the
    jpeg quality and png level, in range; the encoder's package installed)."""
    scale_codec(scale, dtype, num_channels).ensure_encoder()


def scale_codec(scale: ScaleInfo, dtype: np.dtype, num_channels: int,
                jpeg_quality: int | None = None) -> ChunkEncoding:
    """The codec of ``scale``'s chunks, with the options its info fields set (and the
    Volume's ``jpeg_quality``, if given, for the chunks it writes)."""
    return get_codec(scale.encoding, dtype=dtype, num_channels=num_channels,
                     **{**scale.extra, "jpeg_quality": jpeg_quality
                        or scale.extra.get("jpeg_quality"),
                        "compressed_segmentation_block_size":
                            scale.compressed_segmentation_block_size})


def _checked_options(
    kv: KVStore,
    *,
    fill_value: Any = 0,
    fill_missing: bool = True,
    bounded: bool = True,
    parallel: int | None = None,
    jpeg_quality: int | None = None,
    compress_level: int | None = None,
    cache_bytes: int | str | None = None,
) -> dict[str, Any]:
    """The options of a Volume on ``kv``, checked (the fill value is checked against the
    data type where the info file is read); InvalidArgumentError names a bad one."""
    if parallel is not None and (
        isinstance(parallel, bool) or not isinstance(parallel, numbers.Integral) or parallel < 1
    ):
        raise InvalidArgumentError(f"parallel must be a positive integer, got {parallel!r}")
    if jpeg_quality is not None:
        get_codec("jpeg", dtype="uint8", num_channels=1, jpeg_quality=jpeg_quality)
    return {
        "fill_value": fill_value, "fill_missing": fill_missing, "bounded": bounded,
        "parallel": parallel, "jpeg_quality": jpeg_quality,
        "compress_level": DEFAULT_LEVEL if compress_level is None else check_level(compress_level),
        "cache_bytes": cache_budget(cache_bytes, 0 if kv.local else DEFAULT_REMOTE_CACHE_BYTES),
    }


def _offset(offset: Sequence[int], spatial: int) -> tuple[Any, ...]:
    """``offset`` as a tuple, with the channel axis's 0 added to ``spatial`` values."""
    try:
        values = tuple(offset)
    except TypeError:
        raise InvalidArgumentError(
            f"offset must be a sequence of integers, got {offset!r}"
        ) from None
    return (*values, 0) if len(values) == spatial else values


def _integer(value: Any) -> Any:
    """``value`` as an int if it is a whole number (4, np.int64(4), 4.0), else unchanged,
    for the info validation to refuse with the field's name (never truncated)."""
    try:
        return operator.index(value)
    except TypeError:
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            return int(value)
        return value


def _fill_value(value: Any, dtype: np.dtype, url: str) -> Any:
    """``value`` as a scalar of ``dtype``, if it is one exactly (else InvalidArgumentError)."""
    try:
        return cast_scalar(value, dtype)
    except InvalidArgumentError:
        raise InvalidArgumentError(f"{url}: fill_value {value!r} is not a {dtype} value") from None


def _delete_prefix(kv: KVStore, key: str) -> None:
    prefix = posixpath.normpath(key.strip("/")) + "/"
    kv.delete_many(kv.list(prefix))
