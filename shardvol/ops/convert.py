"""``shardvol.copy``: precomputed <-> Zarr v3 arrays <-> OME-Zarr 0.5 images, shard by shard.

Every format is seen in one frame: voxel coordinates ``(x, y, z)`` plus all
channels, as a precomputed scale has them.

* A precomputed scale is that frame itself (its domain starts at ``voxel_offset``).
* A Zarr array written by :func:`copy` has axes ``x, y, z, c`` in that order
  (``dimension_names`` ``["x", "y", "z", "c"]``), starts at index 0, and keeps
  the source's ``voxel_offset`` (with ``type``, ``resolution``, ``encoding``,
  ``chunk_size`` and the compressed-segmentation block size) in its
  ``attributes["precomputed"]``, and the resolution as TensorStore's
  ``attributes["dimension_units"]`` (``"4 nm"``).  Array index ``i`` is voxel
  ``voxel_offset + i``, so a round trip restores the domain exactly.
* Reading any other 3-D or 4-D Zarr array: axes named ``x``, ``y``, ``z`` in
  ``dimension_names`` are used whatever their order (the remaining axis of a
  4-D array is the channel); without names the order is ``x, y, z[, c]``.
  Without ``attributes["precomputed"]`` the voxel offset is 0 and the
  resolution comes from ``dimension_units`` (else 1 nm).
* An OME-Zarr image (:mod:`shardvol.zarr3.ome`) is one array per scale; each is seen
  through :class:`~shardvol.zarr3.OmeZarrImage`, in the frame of a precomputed scale
  with the voxel offset and resolution of its transformations.  The arrays
  :func:`copy` writes have axes ``[c,] z, y, x`` and keep ``type``, ``encoding``,
  ``chunk_size`` (and the compressed-segmentation block size) in
  ``attributes["precomputed"]``.  Between precomputed and OME-Zarr every scale is
  copied (one task list for all of them).

The copy is planned as tasks that each own whole output units (Zarr shards or
chunks, precomputed shard files or chunk files), grouped up to about
:data:`TASK_BYTES` of voxels: a task reads the source region its units
cover, then writes them whole, so no two tasks write the same file and memory
stays bounded by the tasks running at once.  Tasks are small picklable
descriptions run by :func:`shardvol.ops.tasks.run_tasks` on any executor.
"""

from __future__ import annotations

import functools
import os
import posixpath
import uuid
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.array.grid import grow_block
from shardvol.compression import check_level
from shardvol.errors import AlreadyExistsError, InvalidArgumentError, OutOfBoundsError
from shardvol.formats import FORMATS, check_format, detect_format, split_format
from shardvol.kvstore import FileStore, KVStore, open_store
from shardvol.kvstore.job_record import (
    begin_job,
    clear_job,
    preparing,
    read_job,
    set_tasks,
    within_job,
)
from shardvol.ops.geometry import (
    ATTRIBUTE,
    Geometry,
    Vec3,
    ome_geometry,
    volume_geometry,
    zarr_axes,
    zarr_geometry,
)
from shardvol.ops.jobs import run_job
from shardvol.ops.tasks import check_reachable
from shardvol.precomputed.provenance import record_step
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.precomputed.volume import Volume, check_encoder, make_scale
from shardvol.zarr3 import OmeZarrImage, ZarrArray
from shardvol.zarr3 import create as create_zarr
from shardvol.zarr3 import open as open_zarr
from shardvol.zarr3.codecs import JSON, Codec
from shardvol.zarr3.ome import create as create_ome
from shardvol.zarr3.ome_metadata import Level

#: voxel bytes a task aims for (one task holds its region of the source and its encoded output)
TASK_BYTES = 64 << 20

Box = tuple[Vec3, Vec3]  # (start, stop) voxel coordinates, stop exclusive


# --------------------------------------------------------------------------- endpoints


@dataclass(frozen=True)
class Endpoint:
    """Where one side of a copy lives (picklable when ``url`` is a string)."""

    format: str
    url: str | KVStore
    scale: str | None = None  # precomputed scale key, OME-Zarr level path
    compress_level: int | None = None  # gzip level of written precomputed shard data

    def open(self) -> Frame:
        if self.format == "precomputed":
            return PrecomputedFrame(Volume(self.url, self.scale or 0,
                                           compress_level=self.compress_level))
        if self.format == "ome-zarr":
            return OmeFrame(OmeZarrImage(self.url, self.scale or 0))
        return ZarrFrame(open_zarr(self.url))


class Frame:
    """Reads and writes boxes of (x, y, z, channel) voxels of one side."""

    def read(self, box: Box) -> np.ndarray:
        raise NotImplementedError

    def write(self, box: Box, data: np.ndarray) -> None:
        raise NotImplementedError

    def unit(self) -> Vec3 | None:
        """Voxel shape of the blocks written as whole files (shards or chunks), from the
        volume's origin; None when files are not blocks (hashed shards)."""
        raise NotImplementedError


class PrecomputedFrame(Frame):
    def __init__(self, vol: Volume) -> None:
        self.vol = vol

    def read(self, box: Box) -> np.ndarray:
        return self.vol[_slices(box)]

    def write(self, box: Box, data: np.ndarray) -> None:
        self.vol[_slices(box)] = data

    def unit(self) -> Vec3 | None:
        return self.vol.chunk_size if self.vol.sharding is None else self.vol.shard_shape


class OmeFrame(Frame):
    def __init__(self, img: OmeZarrImage) -> None:
        self.img = img

    def read(self, box: Box) -> np.ndarray:
        return self.img[_slices(box)]

    def write(self, box: Box, data: np.ndarray) -> None:
        self.img[_slices(box)] = data

    def unit(self) -> Vec3 | None:
        return self.img.shard_shape or self.img.chunk_size


class ZarrFrame(Frame):
    def __init__(self, arr: ZarrArray) -> None:
        self.arr = arr
        self.axes = zarr_axes(arr)
        self.offset = zarr_geometry(arr).voxel_offset

    def _key(self, box: Box) -> tuple[slice, ...]:
        key = [slice(None)] * self.arr.ndim
        for d, a in enumerate(self.axes[:3]):
            key[a] = slice(box[0][d] - self.offset[d], box[1][d] - self.offset[d])
        return tuple(key)

    def read(self, box: Box) -> np.ndarray:
        data = self.arr[self._key(box)].transpose(self.axes)
        return data if data.ndim == 4 else data[..., np.newaxis]

    def write(self, box: Box, data: np.ndarray) -> None:
        if self.arr.ndim == 3:
            data = data[..., 0]
        self.arr[self._key(box)] = data.transpose(np.argsort(self.axes))

    def unit(self) -> Vec3 | None:
        return tuple(self.arr.metadata.chunk_shape[a] for a in self.axes[:3])  # type: ignore[return-value]  # 3 axes


def _slices(box: Box) -> tuple[slice, slice, slice]:
    return tuple(slice(a, b) for a, b in zip(*box))  # type: ignore[return-value]  # 3 axes


@functools.lru_cache(maxsize=32)
def _opened(run: str, endpoint: Endpoint) -> Frame:
    """Each worker opens each side once per run (``run`` keeps runs apart)."""
    return endpoint.open()


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class CopyTask:
    """Copy ``box`` (whole output units); or, with a hashed precomputed output, the chunks
    of one output ``shard``."""

    run: str
    src: Endpoint
    dst: Endpoint
    box: Box | None
    shard: int | None = None
    where: str = ""  # the output's URL (and scale), for the name

    @property
    def name(self) -> str:
        """What the task writes (the same in every run of the same job)."""
        if self.box is None:
            return f"{self.where}: shard {self.shard}"
        (x0, y0, z0), (x1, y1, z1) = self.box
        return f"{self.where}: [{x0}:{x1}, {y0}:{y1}, {z0}:{z1}]"


def run_copy_task(task: CopyTask) -> None:
    """Execute one task (module-level, so that process pools and Dask can pickle it)."""
    src, dst = _opened(task.run, task.src), _opened(task.run, task.dst)
    if task.box is not None:
        dst.write(task.box, src.read(task.box))
        return
    assert isinstance(dst, PrecomputedFrame)
    engine = dst.vol.chunked_array  # the shard is replaced whole: its chunks are encoded here
    store = dst.vol.chunk_store
    assert isinstance(store, ShardedChunkStore) and task.shard is not None  # (hashed shards)
    put = {}
    for coord in store.scan_unit_chunks(task.shard):
        start = engine.grid.chunk_start(coord)[:3]
        stop = tuple(s + e for s, e in zip(start, engine.grid.chunk_extent(coord)[:3]))
        box = (start, stop)
        put[coord] = engine.codec.encode(src.read(box))  # type: ignore[arg-type]  # 3 axes
    store.update_unit(task.shard, put, replace=True)


def _blocks(unit: Sequence[int], size: Sequence[int], voxel_bytes: int, target: int) -> Vec3:
    """``unit`` grown along x, y, z up to ``target`` bytes (see :func:`grow_block`)."""
    return grow_block(unit, size, voxel_bytes, target)  # type: ignore[return-value]  # 3 axes


def _boxes(origin: Vec3, size: Vec3, block: Sequence[int]) -> list[Box]:
    """The volume cut into ``block``-shaped boxes from ``origin`` (clipped at its end)."""
    ranges = [range(0, n, b) for n, b in zip(size, block)]
    out = []
    for i in ranges[0]:
        for j in ranges[1]:
            for k in ranges[2]:
                lo = (i, j, k)
                start = tuple(o + v for o, v in zip(origin, lo))
                stop = tuple(o + min(v + b, n) for o, v, b, n in zip(origin, lo, block, size))
                out.append((start, stop))
    return out  # type: ignore[return-value]  # boxes of 3 axes


def plan(geometry: Geometry, dst: Frame, run: str, src_ep: Endpoint,
         dst_ep: Endpoint, region: Box | None = None) -> list[CopyTask]:
    """Tasks that each own whole output units of ``dst`` (of ``region`` only, if given:
    the units it covers in part are written in part)."""
    g = geometry
    unit = dst.unit()
    where = _url(dst_ep.url) + (f" scale {dst_ep.scale}" if dst_ep.scale else "")
    if region is None and unit is None:
        assert isinstance(dst, PrecomputedFrame)  # (hashed shards)
        return _hashed_shard_tasks(dst.vol, run, src_ep, dst_ep, where)
    if region is None:
        block = _blocks(unit, g.size, g.voxel_bytes, TASK_BYTES)  # type: ignore[arg-type]
        return [CopyTask(run, src_ep, dst_ep, box, where=where)
                for box in _boxes(g.voxel_offset, g.size, block)]
    assert isinstance(dst, PrecomputedFrame)  # (regions are copied into precomputed scales)
    vol = dst.vol
    size: Vec3 = vol.shape[:3]
    block = _blocks(unit or vol.chunk_size, size, g.voxel_bytes, TASK_BYTES)
    boxes = []
    for start, stop in _boxes(vol.voxel_offset, size, block):  # (on the output's grid)
        lo = tuple(max(a, r) for a, r in zip(start, region[0]))
        hi = tuple(min(b, r) for b, r in zip(stop, region[1]))
        if all(a < b for a, b in zip(lo, hi)):
            boxes.append((lo, hi))
    return [CopyTask(run, src_ep, dst_ep, box, where=where)  # type: ignore[arg-type]
            for box in boxes]


def _hashed_shard_tasks(vol: Volume, run: str, src: Endpoint, dst: Endpoint,
                        where: str) -> list[CopyTask]:
    """One task per shard file when shards are not spatial blocks (hashed chunk ids);
    each task finds its shard's chunks itself (tasks stay small to send)."""
    store = vol.chunk_store
    assert isinstance(store, ShardedChunkStore)  # (a sharded scale)
    return [CopyTask(run, src, dst, None, s, where) for s in store.all_units()]


# --------------------------------------------------------------------------- destinations


def _shape3(value: Sequence[int] | None, channels: int, name: str) -> Vec3 | None:
    """An (x, y, z) shape from 3 values or 4 whose last is the channel count."""
    if value is None:
        return None
    v = [int(x) for x in value]
    if len(v) == 4 and v[3] == channels:
        v = v[:3]
    if len(v) != 3 or any(x <= 0 for x in v):
        raise InvalidArgumentError(
            f"{name} must be 3 positive sizes (x, y, z) or 4 ending in the channel count "
            f"{channels}, got {list(value)}"
        )
    return tuple(v)  # type: ignore[return-value]  # 3 axes (length checked above)


def _create_precomputed(
    dst: str | KVStore,
    scales: Sequence[Geometry],
    *,
    encoding: str | None,
    chunk_size: Vec3 | None,
    sharding: str | dict[str, Any] | None,
    overwrite: bool,
) -> list[Volume]:
    """A new volume with one scale per geometry (each scale checked before anything is
    written); a Volume on each."""
    g = scales[0]
    encoding = (encoding or g.encoding).lower()
    block = (g.block_size or (8, 8, 8)) if encoding == "compressed_segmentation" else None
    params: list[dict[str, Any]] = [
        {"resolution": s.resolution, "size": s.size, "voxel_offset": s.voxel_offset,
         "chunk_size": chunk_size or s.chunk_size, "encoding": encoding,
         "compressed_segmentation_block_size": block, "sharding": sharding}
        for s in scales
    ]  # fmt: skip
    for p in params:
        scale = make_scale(**p, key=None, dtype=g.dtype, num_channels=g.num_channels)
        check_encoder(scale, g.dtype, g.num_channels)
    vol = Volume.create(dst, type=g.layer_type, data_type=g.dtype.name,
                        num_channels=g.num_channels, overwrite=overwrite, **params[0])
    return [vol, *(vol.add_scale(**p) for p in params[1:])]


def _zarr_chunks(g: Geometry, chunk_size: Vec3 | None, inner: Vec3 | None,
                 sharding: str | None) -> tuple[Vec3 | None, Vec3]:
    """(shard shape or None when unsharded, chunk shape) of a Zarr array written for ``g``:
    chunks of the source's chunk size, shards of them up to about TASK_BYTES."""
    if sharding is None:
        return None, chunk_size or inner or g.chunk_size
    inner3 = inner or g.chunk_size
    return chunk_size or _blocks(inner3, g.size, g.voxel_bytes, TASK_BYTES), inner3


def _create_zarr(
    dst: str | KVStore,
    g: Geometry,
    *,
    chunk_size: Vec3 | None,
    inner: Vec3 | None,
    sharding: str | None,
    codecs: Sequence[Codec | JSON] | None,
    overwrite: bool,
) -> ZarrArray:
    c = g.num_channels
    shard3, chunk3 = _zarr_chunks(g, chunk_size, inner, sharding)
    chunks = (*(shard3 or chunk3), c)
    inner_shape = None if shard3 is None else (*chunk3, c)
    return create_zarr(
        dst, (*g.size, c), g.dtype, chunks, inner_shape, codecs=codecs, fill_value=0,
        dimension_names=["x", "y", "z", "c"], attributes=g.attributes(), overwrite=overwrite,
    )  # fmt: skip


def _create_ome(
    dst: str | KVStore,
    scales: Sequence[Geometry],
    *,
    chunk_size: Vec3 | None,
    inner: Vec3 | None,
    sharding: str | None,
    codecs: Sequence[Codec | JSON] | None,
    name: str | None,
    overwrite: bool,
) -> OmeZarrImage:
    """A new OME-Zarr image with one level ("0", "1", ...) per geometry."""
    chunking = [_zarr_chunks(g, chunk_size, inner, sharding) for g in scales]
    return create_ome(
        dst,
        [Level(str(k), g.resolution, g.voxel_offset) for k, g in enumerate(scales)],
        [g.size for g in scales],
        dtype=scales[0].dtype, num_channels=scales[0].num_channels,
        shard_shapes=[shard for shard, _ in chunking], chunk_shapes=[c for _, c in chunking],
        codecs=codecs, array_attributes=[{ATTRIBUTE: g.kept()} for g in scales], name=name,
        overwrite=overwrite,
    )  # fmt: skip


def _output_format(dst: str | KVStore, fmt: str | None, existing: str | None) -> str:
    """The explicit format, else a ``zarr3://`` / ``precomputed://`` prefix, else what is
    already stored at ``dst``, else "ome-zarr" for names ending in .ome.zarr, "zarr3" for
    names ending in .zarr / .zarr3, else precomputed."""
    prefix, rest = split_format(dst)
    fmt = check_format(fmt) or prefix or existing
    if fmt is None:
        name = (rest if isinstance(rest, str) else rest.url).rstrip("/").lower()
        if name.endswith(".ome.zarr"):
            fmt = "ome-zarr"
        elif posixpath.splitext(name)[1] in (".zarr", ".zarr3"):
            fmt = "zarr3"
        else:
            fmt = "precomputed"
    return fmt


def _sources(
    fmt: str, url: str | KVStore, mip: int | str | Sequence[float] | None, out_format: str
) -> list[tuple[Geometry, Endpoint]]:
    """The scales to copy, each with its geometry: all of them between multiscale formats
    (precomputed, OME-Zarr; not precomputed to precomputed) when ``mip`` is None, else
    the one ``mip`` names (default the finest)."""
    every = mip is None and (out_format == "ome-zarr" or (fmt, out_format) == ("ome-zarr",
                                                                               "precomputed"))
    if fmt == "precomputed":
        vol = Volume(url, 0 if mip is None else mip)
        vols = [vol.mip(k) for k in range(len(vol.mips))] if every else [vol]
        return [(volume_geometry(v), Endpoint(fmt, url, v.scale.key)) for v in vols]
    if fmt == "ome-zarr":
        img = OmeZarrImage(url, 0 if mip is None else mip, mode="r")
        imgs = [img.mip(k) for k in range(len(img.mips))] if every else [img]
        return [(ome_geometry(i), Endpoint(fmt, url, i.scale.path)) for i in imgs]
    if mip not in (None, 0):
        raise InvalidArgumentError(f"a single Zarr array has one scale: mip {mip!r}")
    return [(zarr_geometry(open_zarr(url, "r")), Endpoint(fmt, url))]


# --------------------------------------------------------------------------- the copy


def copy(
    src: str | KVStore,
    dst: str | KVStore,
    *,
    mip: int | str | Sequence[float] | None = None,
    format: str | None = None,
    encoding: str | None = None,
    sharding: str | dict[str, Any] | None = "auto",
    chunk_size: Sequence[int] | None = None,
    inner_chunk_shape: Sequence[int] | None = None,
    codecs: Sequence[Codec | JSON] | None = None,
    compress_level: int | None = None,
    executor: Executor | None = None,
    progress: bool = True,
    overwrite: bool = False,
    region: Sequence[slice] | Box | None = None,
    into_existing: bool = False,
) -> Volume | ZarrArray | OmeZarrImage:
    """Copy a precomputed volume, a 3-/4-D Zarr v3 array or an OME-Zarr 0.5 image at
    ``src`` to ``dst``.

    Scales: between precomputed and OME-Zarr (either way, and OME-Zarr to OME-Zarr)
    every scale is copied; otherwise the finest.  ``mip`` (index, key/path or
    resolution) copies that scale alone.

    ``format`` of the output: "precomputed", "zarr3" or "ome-zarr"; default: a
    ``zarr3://``/``precomputed://`` prefix of ``dst``, else the format already
    at ``dst`` (replaced only with ``overwrite=True``), else "ome-zarr" when ``dst``
    ends in ``.ome.zarr``, "zarr3" when it ends in ``.zarr``/``.zarr3``, else
    "precomputed".

    Precomputed output: ``encoding`` (default: the source's), ``chunk_size``
    (x, y, z; default the source's chunk size), ``sharding`` "auto" (aligned
    shards), None (one file per chunk) or a sharding spec dict, ``compress_level``
    the gzip level of gzip-encoded shard data (default 6).  The resolution, voxel
    offset, layer type and data type are the source's.

    Zarr output (a single array with axes x, y, z, c; or an OME-Zarr image whose
    arrays have axes [c,] z, y, x): ``inner_chunk_shape`` (x, y, z; default: the
    source's chunk size), ``chunk_size`` the shard shape (default: the inner chunk
    doubled along x, y, z up to about 64 MiB), ``sharding`` "auto" (sharded) or
    None (unsharded, chunks of ``chunk_size``), ``codecs`` the inner chunk
    codecs (default bytes + zstd).

    ``executor``: None runs the tasks on a thread pool here; any
    ``concurrent.futures.Executor`` (a process pool, a Dask client's
    ``get_executor()``) works when both URLs are reachable from its workers.
    Everything about the source is read and checked before anything is written.
    Returns the opened output (its finest scale).

    ``region``: copy only this box of one scale (x, y, z slices, or ``(start, stop)``, in
    the source's global voxel coordinates), written at the same coordinates.
    ``into_existing=True`` (CloudVolume's ``transfer_to`` into an existing layer): write
    into the precomputed volume at ``dst``, keeping its info (its scales, encodings,
    meshes, ...); it needs a scale of each copied scale's resolution, data type and
    channels that holds the region, and takes no output options.
    """
    if compress_level is not None:
        check_level(compress_level)
    _, src_rest = split_format(src)
    src_format = detect_format(src)
    if src_format is None:
        from shardvol.formats import open as open_any

        open_any(src)  # raises InfoError naming what was looked for
    assert src_format is not None
    existing = detect_format(dst)
    out_format = _output_format(dst, format, existing)
    _, dst_rest = split_format(dst)
    dst_kv = open_store(dst_rest)
    if into_existing:
        _reject(why="a copy into an existing volume (its info is kept)", format=format,
                encoding=encoding, chunk_size=chunk_size, inner_chunk_shape=inner_chunk_shape,
                codecs=codecs, overwrite=overwrite or None,
                sharding=None if sharding == "auto" else sharding)
        if existing != "precomputed" or out_format != "precomputed":
            raise InvalidArgumentError(
                f"into_existing copies into a precomputed volume; {_url(dst_rest)} holds "
                f"{'a ' + existing + ' volume' if existing else 'none'}")
    elif existing is not None and not overwrite and read_job(dst_kv) is None:
        raise AlreadyExistsError(
            f"{_url(dst_rest)} already holds a {existing} volume; pass overwrite=True (--overwrite)"
        )
    if existing is not None and existing != out_format:
        raise InvalidArgumentError(
            f"{_url(dst_rest)} holds a {existing} volume; "
            f"it cannot be overwritten with {out_format}"
        )
    check_reachable([open_store(src_rest), dst_kv], executor)
    if _location(src_rest) == _location(dst_rest):
        raise InvalidArgumentError(f"source and destination are the same: {_url(src_rest)}")

    sources = _sources(src_format, src_rest, mip, out_format)
    scales = [g for g, _ in sources]
    box = None if region is None else _region_box(region, scales, _url(src_rest))
    c = scales[0].num_channels
    chunk3 = _shape3(chunk_size, c, "chunk_size")
    inner3 = _shape3(inner_chunk_shape, c, "inner_chunk_shape")
    params = {
        "source": _url(src_rest), "source_scales": [_summary(g) for g in scales],
        "format": out_format, "encoding": encoding, "sharding": sharding,
        "chunk_size": chunk3, "inner_chunk_shape": inner3, "compress_level": compress_level,
        "codecs": None if codecs is None else [
            c.to_json() if isinstance(c, Codec) else c for c in codecs],
        "region": box, "into_existing": into_existing,
    }
    with within_job():
        with preparing(dst_kv) as prep:
            # (a different unfinished copy here is refused before anything is written)
            record = begin_job(dst_kv, "copy", params, overwrite=overwrite)
            prep.new = record is None
            resume = into_existing or (record is not None and existing == out_format)
            tasks = _copy(sources, scales, src_rest, dst_rest, out_format, resume, chunk3,
                          inner3, encoding=encoding, sharding=sharding, codecs=codecs,
                          compress_level=compress_level, inner_chunk_shape=inner_chunk_shape,
                          overwrite=overwrite, region=box)
        set_tasks(dst_kv, len(tasks))
        run_job(dst_kv, run_copy_task, tasks, executor, resumed=record is not None,
                progress=progress, desc=f"copy -> {out_format}", finish=False)
        if out_format == "precomputed":  # (the file is precomputed's: a Zarr array has none)
            record_step(dst_kv, {"task": "copy", **{k: v for k, v in params.items()
                                                    if k != "source_scales"}},
                        sources=(_url(src_rest),))
        clear_job(dst_kv)
    _opened.cache_clear()
    if out_format == "precomputed":
        return Volume(dst_rest)
    return open_zarr(dst_rest) if out_format == "zarr3" else OmeZarrImage(dst_rest)


def _summary(g: Geometry) -> list[Any]:
    """What a job record keeps of a source scale (a rerun from a changed source differs)."""
    return [g.dtype.name, list(g.size), list(g.voxel_offset), g.num_channels,
            list(g.resolution)]


def _copy(
    sources: list[tuple[Geometry, Endpoint]],
    scales: list[Geometry],
    src_rest: str | KVStore,
    dst_rest: str | KVStore,
    out_format: str,
    resume: bool,
    chunk3: Vec3 | None,
    inner3: Vec3 | None,
    *,
    encoding: str | None,
    sharding: str | dict[str, Any] | None,
    codecs: Sequence[Codec | JSON] | None,
    compress_level: int | None,
    inner_chunk_shape: Sequence[int] | None,
    overwrite: bool,
    region: Box | None,
) -> list[CopyTask]:
    """The destination created (or, ``resume``, opened as the job left it or as it was)
    and the copy's tasks (of ``region`` only, if given), in the order of its scales."""
    frames: list[Frame]
    if out_format == "precomputed":
        _reject(inner_chunk_shape=inner_chunk_shape, codecs=codecs, why="precomputed output")
        if resume:
            vols = [_existing_scale(dst_rest, g, region) for g in scales]
        else:
            vols = _create_precomputed(
                dst_rest, scales, encoding=encoding, chunk_size=chunk3, sharding=sharding,
                overwrite=overwrite,
            )  # fmt: skip
        dst_eps = [Endpoint("precomputed", dst_rest, v.scale.key, compress_level) for v in vols]
        frames = [PrecomputedFrame(v) for v in vols]
    else:
        _reject(encoding=encoding, compress_level=compress_level, why="Zarr output (use codecs=)")
        if sharding not in ("auto", None):
            raise InvalidArgumentError(
                "sharding for Zarr output is 'auto' (sharded) or None (unsharded), "
                f"got {sharding!r}"
            )
        zarr_options: dict[str, Any] = {"chunk_size": chunk3, "inner": inner3,
                                        "sharding": sharding, "codecs": codecs,
                                        "overwrite": overwrite}  # fmt: skip
        if out_format == "zarr3":
            arr = open_zarr(dst_rest) if resume else _create_zarr(dst_rest, scales[0],
                                                                 **zarr_options)
            dst_eps, frames = [Endpoint("zarr3", dst_rest)], [ZarrFrame(arr)]
        else:
            img = OmeZarrImage(dst_rest) if resume else _create_ome(
                dst_rest, scales, name=_name(src_rest), **zarr_options)
            levels = [img.mip(k) for k in range(len(img.mips))]
            dst_eps = [Endpoint("ome-zarr", dst_rest, lv.scale.path) for lv in levels]
            frames = [OmeFrame(lv) for lv in levels]
    run = uuid.uuid4().hex
    return [
        task
        for (g, src_ep), frame, dst_ep in zip(sources, frames, dst_eps)
        for task in plan(g, frame, run, src_ep, dst_ep, region)
    ]


def _region_box(region: Sequence[slice] | Box, scales: list[Geometry], src: str) -> Box:
    """``region`` as a (start, stop) box inside the one source scale."""
    if len(scales) != 1:
        raise InvalidArgumentError(
            f"a region is copied from one scale; {src} has {len(scales)}: pass mip=")
    g = scales[0]
    try:
        if all(isinstance(s, slice) for s in region):
            slices: list[slice] = list(region)  # type: ignore[arg-type]  # (checked)
            start, stop = tuple(int(s.start) for s in slices), tuple(int(s.stop) for s in slices)
            steps = {s.step for s in slices}
        else:
            lo, hi = region
            start, stop = tuple(int(v) for v in lo), tuple(int(v) for v in hi)  # type: ignore[union-attr]
            steps = {None}
    except (TypeError, ValueError):
        start = stop = ()
        steps = {None}
    if len(start) != 3 or len(stop) != 3 or steps - {None, 1}:
        raise InvalidArgumentError(
            f"region must be 3 slices (x, y, z) with start and stop, or (start, stop); "
            f"got {region!r}")
    end = tuple(o + n for o, n in zip(g.voxel_offset, g.size))
    if not all(o <= a < b <= e for o, a, b, e in zip(g.voxel_offset, start, stop, end)):
        raise OutOfBoundsError(
            f"region {list(start)}-{list(stop)} is not inside {src}'s "
            f"{list(g.voxel_offset)}-{list(end)}")
    return start, stop


def _existing_scale(dst: str | KVStore, g: Geometry, region: Box | None) -> Volume:
    """The scale of the volume at ``dst`` that a copy of ``g`` (``region`` of it) writes:
    of ``g``'s resolution, data type and channels, holding what is copied."""
    vol = Volume(dst)
    matches = [m for m in range(len(vol.mips))
               if np.allclose(vol.mip(m).resolution, g.resolution)]
    if not matches:
        raise InvalidArgumentError(
            f"{vol.url} has no scale of resolution {list(g.resolution)} to copy into")
    vol = vol.mip(matches[0])
    if vol.dtype != g.dtype or vol.num_channels != g.num_channels:
        raise InvalidArgumentError(
            f"{vol.url} scale {vol.scale.key} holds {vol.dtype.name} x {vol.num_channels} "
            f"channels, the source {g.dtype.name} x {g.num_channels}")
    start, stop = region or (g.voxel_offset, tuple(o + n for o, n in zip(g.voxel_offset, g.size)))
    end = vol.bounds[1]
    if not all(o <= a and b <= e for o, a, b, e in zip(vol.voxel_offset, start, stop, end)):
        raise OutOfBoundsError(
            f"{vol.url} scale {vol.scale.key} ({list(vol.voxel_offset)}-{list(end)}) does not "
            f"hold {list(start)}-{list(stop)}")
    return vol


def _name(url_or_store: str | KVStore) -> str | None:
    """A name for the image: the last component of the source's location."""
    return posixpath.basename(_url(url_or_store).rstrip("/")) or None


def _url(url_or_store: str | KVStore) -> str:
    return open_store(url_or_store).url


def _location(url_or_store: str | KVStore) -> str:
    """Where a store's values are: its URL, with local paths resolved (symbolic links too)."""
    store = open_store(url_or_store)
    if isinstance(store, FileStore):
        return "file://" + os.path.realpath(store.root)
    return store.url


def _reject(*, why: str, **options: Any) -> None:
    given = [k for k, v in options.items() if v is not None]
    if given:
        raise InvalidArgumentError(f"{', '.join(given)} do(es) not apply to {why}")


__all__ = ["ATTRIBUTE", "FORMATS", "TASK_BYTES", "CopyTask", "Geometry", "copy", "run_copy_task"]
