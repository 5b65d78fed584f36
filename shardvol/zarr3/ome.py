"""OmeZarrImage: an OME-Zarr 0.5 multiscale image, sliced like a precomputed Volume.

An OME-Zarr image is a Zarr v3 group whose ``attributes.ome`` describe its
resolution levels, each a Zarr v3 array (see :mod:`shardvol.zarr3.ome_metadata`).
``img = shardvol.open("x.ome.zarr")`` opens level 0; ``img.mip(k)`` another level
(by index, path or voxel size in nanometres), as ``Volume.mip`` does.

``img[x0:x1, y0:y1, z0:z1]`` reads in the frame of :class:`~shardvol.Volume`:
an ``(x, y, z, channel)`` array in Fortran order (an image without a channel
axis has one channel), in global voxel coordinates that start at the level's
``voxel_offset`` (from its translation; 0 without one).  Whatever the arrays'
axis order, the result is the same; for arrays in the specification's
``[t,] [c,] z, y, x`` order it is their C-order data, transposed without a copy.
``img[...] = value`` writes the same way.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shardvol.array.cache import ChunkCache
from shardvol.array.futures import AsyncMethods
from shardvol.array.indexing import AxisSelection, normalize_selection
from shardvol.errors import (
    AlreadyExistsError,
    InfoError,
    InvalidKeyError,
    ReadOnlyStoreError,
)
from shardvol.jsondoc import load_json
from shardvol.kvstore import KVStore, PrefixStore, open_store
from shardvol.zarr3.array import ZarrArray, delete_chunks
from shardvol.zarr3.chunkstore import ZarrChunkStore
from shardvol.zarr3.codecs import JSON, Codec
from shardvol.zarr3.metadata import ZARR_JSON, create_metadata
from shardvol.zarr3.ome_metadata import (
    FRAME,
    Level,
    Multiscale,
    array_axes,
    image_attributes,
    parse_multiscale,
)

Vec3 = tuple[int, int, int]


def read_group(kv: KVStore) -> dict[str, Any]:
    """The parsed ``zarr.json`` of the group at ``kv`` (InfoError if it is not a group)."""
    source = f"{kv.url}/{ZARR_JSON}"
    raw = kv.get(ZARR_JSON)
    if raw is None:
        raise InfoError(f"no OME-Zarr image at {kv.url}: it has no {ZARR_JSON}")
    doc = load_json(raw, source)
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        raise InfoError(f"{source}: an OME-Zarr 0.5 image is a Zarr v3 group (node_type 'group')")
    if not isinstance(doc.get("attributes", {}), Mapping):
        raise InfoError(f"{source}: 'attributes' must be an object")
    return doc


def is_ome_group(doc: Any) -> bool:
    """Whether a parsed ``zarr.json`` is a group with OME-Zarr attributes (of any version)."""
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        return False
    attrs = doc.get("attributes")
    return isinstance(attrs, dict) and "ome" in attrs


class OmeZarrImage(AsyncMethods):
    """One resolution level of an OME-Zarr 0.5 image (see the module docstring).

    ``mode``, ``parallel`` and ``cache_bytes`` are those of every level's
    :class:`ZarrArray`.  Every level's ``zarr.json`` is read and checked against the
    group's metadata when the image is opened.
    """

    def __init__(
        self,
        url_or_store: str | KVStore,
        mip: int | str | Sequence[float] = 0,
        *,
        mode: str = "r+",
        parallel: int | None = None,
        cache_bytes: int | str | None = None,
    ) -> None:
        kv = open_store(url_or_store)
        doc = read_group(kv)
        source = f"{kv.url}/{ZARR_JSON}"
        ms = parse_multiscale(doc.get("attributes", {}), source)
        stores = []
        for lv in ms.levels:
            try:
                stores.append(ZarrChunkStore.open(PrefixStore(kv, lv.path)))
            except InfoError as e:
                raise InfoError(f"{source}: dataset {lv.path!r}: {e}") from None
        ms.check_arrays([s.metadata for s in stores], source)
        self._kv, self._ms = kv, ms
        self._arrays = tuple(
            ZarrArray(s, mode=mode, parallel=parallel, cache_bytes=cache_bytes) for s in stores
        )
        self._mip = self._index(mip)

    def __getstate__(self) -> dict[str, Any]:
        return {"kv": self._kv, "ms": self._ms, "arrays": self._arrays, "mip": self._mip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._kv, self._ms, self._arrays = state["kv"], state["ms"], state["arrays"]
        self._mip = state["mip"]

    # ---------------------------------------------------------------- scales
    def _index(self, selector: int | str | Sequence[float]) -> int:
        levels = self._ms.levels
        if isinstance(selector, numbers.Integral) and not isinstance(selector, bool):
            i = int(selector)
            if not -len(levels) <= i < len(levels):
                raise InfoError(f"mip {i} does not exist; the image has {len(levels)} levels")
            return i % len(levels)
        if isinstance(selector, str):
            for i, lv in enumerate(levels):
                if lv.path == selector:
                    return i
            raise InfoError(
                f"no level with path {selector!r}; paths are {[lv.path for lv in levels]}"
            )
        try:
            res = [float(r) for r in selector]  # type: ignore[union-attr]  # bool: TypeError
        except (TypeError, ValueError):
            raise InfoError(
                f"a level is chosen by index, path or voxel size (3 numbers, nm), not {selector!r}"
            ) from None
        for i, lv in enumerate(levels):
            if len(res) == 3 and all(math.isclose(a, b) for a, b in zip(res, lv.resolution)):
                return i
        raise InfoError(
            f"no level with voxel size {res} nm; sizes are {[list(lv.resolution) for lv in levels]}"
        )

    def mip(self, mip: int | str | Sequence[float]) -> OmeZarrImage:
        """The same image at another level (by index, path or voxel size in nanometres)."""
        other = object.__new__(OmeZarrImage)
        other._kv, other._ms, other._arrays = self._kv, self._ms, self._arrays
        other._mip = self._index(mip)
        return other

    @property
    def mips(self) -> tuple[Level, ...]:
        """Every level (path, voxel size in nm, voxel offset), finest first."""
        return self._ms.levels

    @property
    def scale(self) -> Level:
        """The multiscale's entry of the open level (its path, scale, translation)."""
        return self._ms.levels[self._mip]

    @property
    def mip_level(self) -> int:
        """The index of the open level (0: the finest)."""
        return self._mip

    # ---------------------------------------------------------------- metadata
    @property
    def url(self) -> str:
        """The image's location (the group's URL)."""
        return self._kv.url

    @property
    def store(self) -> KVStore:
        """The key-value store holding the image."""
        return self._kv

    @property
    def multiscale(self) -> Multiscale:
        """The parsed, checked OME metadata (axes and levels)."""
        return self._ms

    @property
    def array(self) -> ZarrArray:
        """This level's Zarr array (in its own axes)."""
        return self._arrays[self._mip]

    @property
    def cache(self) -> ChunkCache | None:
        """The open level's chunk cache (None: no cache)."""
        return self.array.cache

    @property
    def dtype(self) -> np.dtype:
        """The voxels' numpy data type."""
        return self.array.dtype

    @property
    def num_channels(self) -> int:
        """Channels per voxel (1 without a channel axis)."""
        c = self._ms.index("channel")
        return 1 if c is None else self.array.shape[c]

    @property
    def size(self) -> Vec3:
        """Voxels along x, y, z at this level."""
        return self._xyz(self.array.shape)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(x, y, z, channel)`` extent of the open level."""
        return (*self.size, self.num_channels)

    @property
    def voxel_offset(self) -> Vec3:
        """Global coordinates of the open level's first voxel."""
        return self.scale.voxel_offset

    @property
    def resolution(self) -> tuple[float, float, float]:
        """Voxel size in nanometres along x, y, z."""
        return self.scale.resolution

    @property
    def bounds(self) -> tuple[Vec3, Vec3]:
        """``(start, stop)`` voxel coordinates of the domain (stop exclusive)."""
        start = self.voxel_offset
        return start, tuple(s + n for s, n in zip(start, self.size))  # type: ignore[return-value]

    @property
    def chunk_size(self) -> Vec3:
        """The (inner) chunk shape along x, y, z."""
        return self._xyz(self.array.chunks)

    @property
    def shard_shape(self) -> Vec3 | None:
        """The shard shape along x, y, z (None when unsharded)."""
        shards = self.array.shards
        return None if shards is None else self._xyz(shards)

    def _xyz(self, values: Sequence[int]) -> Vec3:
        return tuple(values[self._ms.index(d)] for d in FRAME)  # type: ignore[index,return-value]

    def __repr__(self) -> str:
        return (f"OmeZarrImage({self.url!r}, mip={self._mip}, path={self.scale.path!r}, "
                f"shape={self.shape}, dtype={self.dtype})")

    # ----------------------------------------------------------------- slicing
    def _selections(self, key: Any) -> tuple[tuple[AxisSelection, ...], tuple[AxisSelection, ...]]:
        """The key's selection in the (x, y, z, channel) frame and in the array's axes."""
        frame = normalize_selection(key, (*self.voxel_offset, 0), self.shape, bounded=True)
        out = []
        for a in self._ms.axes:
            if a.type == "time":
                out.append(AxisSelection(0, 1, 1, drop=True))
            elif a.type == "channel":
                out.append(frame[3])
            else:
                d = FRAME.index(a.name.lower())
                s = frame[d]
                out.append(AxisSelection(s.start - self.voxel_offset[d], s.step, s.count, s.drop))
        return frame, tuple(out)

    def __getitem__(self, key: Any) -> np.ndarray:
        frame, sel = self._selections(key)
        data = self.array.chunked_array.read(sel)
        data = data.transpose(self._order(frame, sel))
        if self._ms.index("channel") is None and not frame[3].drop:
            data = data[..., np.newaxis][..., : frame[3].count]
        return data if data.flags.f_contiguous else np.asfortranarray(data)

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.array.mode == "r":
            raise ReadOnlyStoreError(f"cannot write to {self.url}: opened with mode='r'")
        frame, sel = self._selections(key)
        arr = self.array.chunked_array.prepare_value(frame, value)  # (dtype, broadcast)
        arr = arr.reshape(tuple(s.count for s in frame if not s.drop))
        if self._ms.index("channel") is None and not frame[3].drop:
            if frame[3].count == 0:
                return
            arr = arr[..., 0]
        self.array.chunked_array.write(sel, arr.transpose(np.argsort(self._order(frame, sel))))

    def _order(self, frame: Sequence[AxisSelection], sel: Sequence[AxisSelection]) -> list[int]:
        """The permutation taking the array's kept axes to the (x, y, z[, channel]) frame's."""
        roles = [
            3 if a.type == "channel" else FRAME.index(a.name.lower())
            for a, s in zip(self._ms.axes, sel) if not s.drop
        ]  # fmt: skip
        return [roles.index(d) for d in range(4) if d in roles]


# --------------------------------------------------------------------------- creation


def create(
    url_or_store: str | KVStore,
    levels: Sequence[Level],
    sizes: Sequence[Vec3],
    *,
    dtype: Any,
    num_channels: int,
    shard_shapes: Sequence[Vec3 | None],
    chunk_shapes: Sequence[Vec3],
    codecs: Sequence[Codec | JSON] | None = None,
    array_attributes: Sequence[Mapping[str, JSON]] | None = None,
    name: str | None = None,
    overwrite: bool = False,
) -> OmeZarrImage:
    """Write a new image's group and level arrays (no data) and open it.

    Level ``k`` is an array at ``levels[k].path`` of ``sizes[k]`` voxels (x, y, z), axes
    as :func:`~shardvol.zarr3.ome_metadata.array_axes`, chunks of ``chunk_shapes[k]`` (all
    channels in each), sharded in shards of ``shard_shapes[k]`` unless that is None;
    ``codecs`` the chunk codecs (default bytes + zstd); ``array_attributes[k]`` go into
    level ``k``'s ``zarr.json``.  Every array's metadata is checked before anything is written.
    An existing image (or array) there is an AlreadyExistsError unless ``overwrite``; then
    its levels are deleted first.
    """
    kv = open_store(url_or_store)
    names = array_axes(num_channels)

    def order(v: Sequence[int]) -> list[int]:
        by_name = {**dict(zip(FRAME, v)), "c": num_channels}
        return [by_name[n] for n in names]

    metas = [
        create_metadata(
            order(size), dtype, order(shard or chunk), None if shard is None else order(chunk),
            codecs=codecs, fill_value=0, dimension_names=names,
            attributes=dict(attrs),
        )
        for size, shard, chunk, attrs in zip(
            sizes, shard_shapes, chunk_shapes, array_attributes or [{}] * len(levels)
        )
    ]  # fmt: skip
    attributes = image_attributes(levels, num_channels, name)
    parse_multiscale(attributes, f"{kv.url}/{ZARR_JSON}")  # what is written reads back
    group = {"zarr_format": 3, "node_type": "group", "attributes": attributes}
    with kv.lock(ZARR_JSON):
        if kv.exists(ZARR_JSON):
            if not overwrite:
                raise AlreadyExistsError(
                    f"{kv.url} already holds a Zarr {ZARR_JSON}; pass overwrite=True (--overwrite)"
                )
            _delete_image(kv)
        for lv, meta in zip(levels, metas):
            sub = PrefixStore(kv, lv.path)
            delete_chunks(sub)
            ZarrChunkStore.create(sub, meta, overwrite=True)
        kv.set(ZARR_JSON, json.dumps(group, indent=2).encode())
    return OmeZarrImage(kv)


def _delete_image(kv: KVStore) -> None:
    """Delete what an existing ``zarr.json`` describes: an array's chunks, or the levels an
    image group lists."""
    try:
        doc = load_json(kv.get(ZARR_JSON) or b"null", ZARR_JSON)
    except InfoError:
        doc = None
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        delete_chunks(kv)  # an array, or unreadable: its chunks are named as an array's
        return
    try:
        paths = [d.get("path") for ms in doc["attributes"]["ome"]["multiscales"]
                 for d in ms["datasets"]]  # fmt: skip
    except (KeyError, TypeError, AttributeError):
        paths = []
    for path in paths:
        try:
            sub = PrefixStore(kv, path)
        except (InvalidKeyError, AttributeError):
            continue
        delete_chunks(sub)
        sub.delete(ZARR_JSON)


__all__ = ["OmeZarrImage", "create", "is_ome_group", "read_group"]
