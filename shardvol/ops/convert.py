"""``shardvol.copy``: precomputed <-> Zarr v3 (and precomputed -> precomputed), shard by shard.

Both formats are seen in one frame: voxel coordinates ``(x, y, z)`` plus all
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
import re
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.array.grid import grow_block
from shardvol.compression import check_level
from shardvol.errors import AlreadyExistsError, InfoError, InvalidArgumentError
from shardvol.formats import FORMATS, check_format, detect_format, split_format
from shardvol.kvstore import FileStore, KVStore, open_store
from shardvol.ops.tasks import check_reachable, run_tasks
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.precomputed.volume import Volume
from shardvol.zarr3 import ZarrArray
from shardvol.zarr3 import create as create_zarr
from shardvol.zarr3 import open as open_zarr
from shardvol.zarr3.codecs import JSON, Codec

#: voxel bytes a task aims for (one task holds its region of the source and its encoded output)
TASK_BYTES = 64 << 20
#: attributes key of a Zarr array that keeps a precomputed scale's geometry
ATTRIBUTE = "precomputed"
_DEFAULT_ZARR_CHUNK = 256  # largest default precomputed chunk edge taken from a Zarr chunk

Vec3 = tuple[int, int, int]
Box = tuple[Vec3, Vec3]  # (start, stop) voxel coordinates, stop exclusive


# --------------------------------------------------------------------------- the common frame


@dataclass(frozen=True)
class Geometry:
    """A volume in the (x, y, z, channel) voxel frame, and how it was stored."""

    dtype: np.dtype
    size: Vec3
    voxel_offset: Vec3
    num_channels: int
    resolution: tuple[float, float, float]
    layer_type: str
    encoding: str
    chunk_size: Vec3
    block_size: Vec3 | None  # compressed_segmentation block size

    @property
    def voxel_bytes(self) -> int:
        return self.dtype.itemsize * self.num_channels

    def attributes(self) -> dict[str, JSON]:
        """Zarr attributes that keep this geometry (see the module docstring)."""
        meta: dict[str, JSON] = {
            "type": self.layer_type,
            "voxel_offset": list(self.voxel_offset),
            "resolution": [_number(r) for r in self.resolution],
            "encoding": self.encoding,
            "chunk_size": list(self.chunk_size),
        }
        if self.block_size is not None:
            meta["compressed_segmentation_block_size"] = list(self.block_size)
        units: list[str | None] = [f"{_number(r)} nm" for r in self.resolution]
        return {ATTRIBUTE: meta, "dimension_units": [*units, None]}


def _number(v: float) -> int | float:
    return int(v) if float(v).is_integer() else float(v)


def volume_geometry(vol: Volume) -> Geometry:
    s = vol.scale
    return Geometry(
        dtype=vol.dtype,
        size=s.size,
        voxel_offset=s.voxel_offset,
        num_channels=vol.num_channels,
        resolution=s.resolution,
        layer_type=vol.layer_type,
        encoding=s.encoding,
        chunk_size=s.chunk_size,
        block_size=s.compressed_segmentation_block_size,
    )


def zarr_axes(arr: ZarrArray) -> tuple[int, ...]:
    """The array axis holding x, y, z (and the channel of a 4-D array)."""
    if arr.ndim not in (3, 4):
        raise InvalidArgumentError(
            f"{arr.url}: only 3-D (x, y, z) or 4-D (x, y, z, channel) arrays convert, "
            f"this one has shape {list(arr.shape)}"
        )
    names = [n.lower() if isinstance(n, str) else None for n in arr.dimension_names or ()]
    if not all(a in names for a in "xyz"):
        return tuple(range(arr.ndim))
    axes = [names.index(a) for a in "xyz"]
    return tuple(axes + [i for i in range(arr.ndim) if i not in axes])


def zarr_geometry(arr: ZarrArray) -> Geometry:
    axes = zarr_axes(arr)
    where = f"{arr.url}: attributes[{ATTRIBUTE!r}]"
    kept = arr.attrs.get(ATTRIBUTE, {})
    if not isinstance(kept, Mapping):
        raise InfoError(f"{where} must be an object, got {kept!r}")
    size = tuple(arr.shape[a] for a in axes[:3])
    inner = tuple(min(arr.chunks[a], _DEFAULT_ZARR_CHUNK) for a in axes[:3])
    resolution = kept.get("resolution") or _units_resolution(arr.attrs.get("dimension_units"), axes)
    block = kept.get("compressed_segmentation_block_size")
    labels = arr.dtype in (np.uint32, np.uint64) and (arr.ndim == 3 or arr.shape[axes[3]] == 1)
    default_type = "segmentation" if labels else "image"
    return Geometry(
        dtype=arr.dtype,
        size=size,  # type: ignore[arg-type]  # 3 axes
        voxel_offset=_vec(kept.get("voxel_offset", (0, 0, 0)), int, f"{where}.voxel_offset"),
        num_channels=arr.shape[axes[3]] if arr.ndim == 4 else 1,
        resolution=_vec(resolution, float, f"{where}.resolution"),
        layer_type=str(kept.get("type", default_type)),
        encoding=str(kept.get("encoding", "raw")),
        chunk_size=_vec(kept.get("chunk_size", inner), int, f"{where}.chunk_size"),
        block_size=None if block is None else _vec(block, int, f"{where}.block_size"),
    )


def _vec(value: Any, kind: type, where: str) -> tuple:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or (kind is int and not all(float(v).is_integer() for v in value))
    ):
        raise InfoError(
            f"{where} must be 3 {'integers' if kind is int else 'numbers'}, got {value!r}"
        )
    return tuple(kind(v) for v in value)


_UNIT = re.compile(r"^\s*([0-9.eE+-]*)\s*([a-zA-Zµ]*)\s*$")
_NM = {"nm": 1.0, "um": 1e3, "µm": 1e3, "mm": 1e6, "m": 1e9, "pm": 1e-3}


def _units_resolution(units: Any, axes: Sequence[int]) -> tuple[float, float, float]:
    """Nanometres per voxel from TensorStore-style ``dimension_units`` ("4 nm"); else 1."""
    out = []
    for a in axes[:3]:
        unit = units[a] if isinstance(units, list) and a < len(units) else None
        m = _UNIT.match(unit) if isinstance(unit, str) else None
        if m and m.group(2) in _NM:
            out.append(float(m.group(1) or 1) * _NM[m.group(2)])
        else:
            out.append(1.0)
    return tuple(out)  # type: ignore[return-value]  # 3 axes


# --------------------------------------------------------------------------- endpoints


@dataclass(frozen=True)
class Endpoint:
    """Where one side of a copy lives (picklable when ``url`` is a string)."""

    format: str
    url: str | KVStore
    scale: str | None = None  # precomputed scale key
    compress_level: int | None = None  # gzip level of written precomputed shard data

    def open(self) -> Frame:
        if self.format == "precomputed":
            return PrecomputedFrame(Volume(self.url, self.scale or 0,
                                           compress_level=self.compress_level))
        return ZarrFrame(open_zarr(self.url))


class Frame:
    """Reads and writes boxes of (x, y, z, channel) voxels of one side."""

    def read(self, box: Box) -> np.ndarray:
        raise NotImplementedError

    def write(self, box: Box, data: np.ndarray) -> None:
        raise NotImplementedError


class PrecomputedFrame(Frame):
    def __init__(self, vol: Volume) -> None:
        self.vol = vol

    def read(self, box: Box) -> np.ndarray:
        return self.vol[_slices(box)]

    def write(self, box: Box, data: np.ndarray) -> None:
        self.vol[_slices(box)] = data


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


def _slices(box: Box) -> tuple[slice, slice, slice]:
    return tuple(slice(a, b) for a, b in zip(*box))  # type: ignore[return-value]  # 3 axes


@functools.lru_cache(maxsize=8)
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


def plan(
    geometry: Geometry,
    dst: PrecomputedFrame | ZarrFrame,
    run: str,
    src_ep: Endpoint,
    dst_ep: Endpoint,
) -> list[CopyTask]:
    """Tasks that each own whole output units of ``dst``."""
    g = geometry
    if isinstance(dst, ZarrFrame):
        unit = tuple(dst.arr.metadata.chunk_shape[a] for a in dst.axes[:3])  # shard or chunk
    else:
        vol = dst.vol
        if vol.sharding is None:
            unit = vol.chunk_size
        elif vol.shard_shape is not None:
            unit = vol.shard_shape
        else:
            return _hashed_shard_tasks(vol, run, src_ep, dst_ep)
    block = _blocks(unit, g.size, g.voxel_bytes, TASK_BYTES)
    return [CopyTask(run, src_ep, dst_ep, box) for box in _boxes(g.voxel_offset, g.size, block)]


def _hashed_shard_tasks(vol: Volume, run: str, src: Endpoint, dst: Endpoint) -> list[CopyTask]:
    """One task per shard file when shards are not spatial blocks (hashed chunk ids);
    each task finds its shard's chunks itself (tasks stay small to send)."""
    store = vol.chunk_store
    assert isinstance(store, ShardedChunkStore)  # (a sharded scale)
    return [CopyTask(run, src, dst, None, s) for s in store.all_units()]


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
    g: Geometry,
    *,
    encoding: str | None,
    chunk_size: Vec3 | None,
    sharding: str | dict[str, Any] | None,
    overwrite: bool,
) -> Volume:
    encoding = (encoding or g.encoding).lower()
    block = g.block_size if encoding == "compressed_segmentation" else None
    return Volume.create(
        dst, size=g.size, type=g.layer_type, data_type=g.dtype.name, num_channels=g.num_channels,
        resolution=g.resolution, voxel_offset=g.voxel_offset, chunk_size=chunk_size or g.chunk_size,
        encoding=encoding, compressed_segmentation_block_size=block, sharding=sharding,
        overwrite=overwrite,
    )  # fmt: skip


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
    shape = (*g.size, c)
    if sharding is None:
        chunks, inner_shape = (*(chunk_size or inner or g.chunk_size), c), None
    else:
        inner3 = inner or g.chunk_size
        shard3 = chunk_size or _blocks(inner3, g.size, g.voxel_bytes, TASK_BYTES)
        chunks, inner_shape = (*shard3, c), (*inner3, c)
    return create_zarr(
        dst, shape, g.dtype, chunks, inner_shape, codecs=codecs, fill_value=0,
        dimension_names=["x", "y", "z", "c"], attributes=g.attributes(), overwrite=overwrite,
    )  # fmt: skip


def _output_format(dst: str | KVStore, fmt: str | None, existing: str | None) -> str:
    """The explicit format, else a ``zarr3://`` / ``precomputed://`` prefix, else what is
    already stored at ``dst``, else "zarr3" for names ending in .zarr / .zarr3, else precomputed."""
    prefix, rest = split_format(dst)
    fmt = check_format(fmt) or prefix or existing
    if fmt is None:
        name = (rest if isinstance(rest, str) else rest.url).rstrip("/")
        fmt = (
            "zarr3" if posixpath.splitext(name)[1].lower() in (".zarr", ".zarr3") else "precomputed"
        )
    return fmt


# --------------------------------------------------------------------------- the copy


def copy(
    src: str | KVStore,
    dst: str | KVStore,
    *,
    mip: int | str | Sequence[float] = 0,
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
) -> Volume | ZarrArray:
    """Copy a precomputed scale (``mip``) or a 3-/4-D Zarr v3 array at ``src`` to ``dst``.

    ``format`` of the output: "precomputed" or "zarr3"; default: a
    ``zarr3://``/``precomputed://`` prefix of ``dst``, else the format already
    at ``dst`` (replaced only with ``overwrite=True``), else "zarr3" when ``dst``
    ends in ``.zarr``/``.zarr3``, else "precomputed".

    Precomputed output: ``encoding`` (default: the source's), ``chunk_size``
    (x, y, z; default the source's chunk size), ``sharding`` "auto" (aligned
    shards), None (one file per chunk) or a sharding spec dict, ``compress_level``
    the gzip level of gzip-encoded shard data (default 6).  The resolution, voxel
    offset, layer type and data type are the source's.

    Zarr output (axes x, y, z, c): ``inner_chunk_shape`` (default: the source's
    chunk size), ``chunk_size`` the shard shape (default: the inner chunk
    doubled along x, y, z up to about 64 MiB), ``sharding`` "auto" (sharded) or
    None (unsharded, chunks of ``chunk_size``), ``codecs`` the inner chunk
    codecs (default bytes + zstd).

    ``executor``: None runs the tasks on a thread pool here; any
    ``concurrent.futures.Executor`` (a process pool, a Dask client's
    ``get_executor()``) works when both URLs are reachable from its workers.
    Returns the opened output.
    """
    if compress_level is not None:
        check_level(compress_level)
    _, src_rest = split_format(src)
    src_format = detect_format(src)
    if src_format is None:
        from shardvol.formats import open as open_any

        open_any(src)  # raises InfoError naming what was looked for
    existing = detect_format(dst)
    out_format = _output_format(dst, format, existing)
    _, dst_rest = split_format(dst)
    if existing is not None and not overwrite:
        raise AlreadyExistsError(
            f"{_url(dst_rest)} already holds a {existing} volume; pass overwrite=True (--overwrite)"
        )
    if existing is not None and existing != out_format:
        raise InvalidArgumentError(
            f"{_url(dst_rest)} holds a {existing} volume; "
            f"it cannot be overwritten with {out_format}"
        )
    check_reachable([open_store(src_rest), open_store(dst_rest)], executor)
    if _location(src_rest) == _location(dst_rest):
        raise InvalidArgumentError(f"source and destination are the same: {_url(src_rest)}")

    if src_format == "precomputed":
        vol = Volume(src_rest, mip)
        geometry = volume_geometry(vol)
        src_ep = Endpoint("precomputed", src_rest, vol.scale.key)
    else:
        geometry = zarr_geometry(open_zarr(src_rest, "r"))
        src_ep = Endpoint("zarr3", src_rest)
    c = geometry.num_channels
    chunk3 = _shape3(chunk_size, c, "chunk_size")
    inner3 = _shape3(inner_chunk_shape, c, "inner_chunk_shape")

    out: Volume | ZarrArray
    if out_format == "precomputed":
        _reject(inner_chunk_shape=inner_chunk_shape, codecs=codecs, why="precomputed output")
        out = _create_precomputed(
            dst_rest, geometry, encoding=encoding, chunk_size=chunk3, sharding=sharding,
            overwrite=overwrite,
        )  # fmt: skip
        dst_ep = Endpoint("precomputed", dst_rest, out.scale.key, compress_level)
        frame: PrecomputedFrame | ZarrFrame = PrecomputedFrame(out)
    else:
        _reject(encoding=encoding, compress_level=compress_level, why="Zarr output (use codecs=)")
        if sharding not in ("auto", None):
            raise InvalidArgumentError(
                "sharding for Zarr output is 'auto' (sharded) or None (unsharded), "
                f"got {sharding!r}"
            )
        out = _create_zarr(
            dst_rest, geometry, chunk_size=chunk3, inner=inner3, sharding=sharding, codecs=codecs,
            overwrite=overwrite,
        )  # fmt: skip
        dst_ep = Endpoint("zarr3", dst_rest)
        frame = ZarrFrame(out)
    run = uuid.uuid4().hex
    tasks = plan(geometry, frame, run, src_ep, dst_ep)
    desc = f"copy -> {out_format}"
    run_tasks(run_copy_task, tasks, executor, progress=progress, desc=desc)
    _opened.cache_clear()
    return Volume(dst_rest) if out_format == "precomputed" else open_zarr(dst_rest)


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
