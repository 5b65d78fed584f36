"""The common frame of :func:`shardvol.copy`: a volume as (x, y, z, channel) voxels.

:class:`Geometry` is what a copy needs to know of one side's scale (data type, size,
voxel offset, channels, resolution, and how precomputed stores it); it is read from a
precomputed scale, a Zarr v3 array (see :mod:`shardvol.ops.convert` for the
attributes it keeps) or an OME-Zarr level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.errors import InfoError, InvalidArgumentError
from shardvol.precomputed.volume import Volume
from shardvol.zarr3 import OmeZarrImage, ZarrArray
from shardvol.zarr3.codecs import JSON

#: attributes key of a Zarr array that keeps a precomputed scale's geometry
ATTRIBUTE = "precomputed"
_DEFAULT_ZARR_CHUNK = 256  # largest default precomputed chunk edge taken from a Zarr chunk

Vec3 = tuple[int, int, int]


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

    def kept(self) -> dict[str, JSON]:
        """What a Zarr array keeps of a precomputed scale besides its place: layer type,
        encoding, chunk size (and compressed-segmentation block size)."""
        meta: dict[str, JSON] = {
            "type": self.layer_type, "encoding": self.encoding, "chunk_size": list(self.chunk_size),
        }  # fmt: skip
        if self.block_size is not None:
            meta["compressed_segmentation_block_size"] = list(self.block_size)
        return meta

    def attributes(self) -> dict[str, JSON]:
        """Attributes of a single Zarr array that keep this geometry (see the module
        docstring)."""
        meta: dict[str, JSON] = {
            **self.kept(),
            "voxel_offset": list(self.voxel_offset),
            "resolution": [_number(r) for r in self.resolution],
        }
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
    kept = _kept(arr)
    where = f"{arr.url}: attributes[{ATTRIBUTE!r}]"
    resolution = kept.get("resolution") or _units_resolution(arr.attrs.get("dimension_units"), axes)
    return _array_geometry(
        arr, kept,
        size=tuple(arr.shape[a] for a in axes[:3]),  # type: ignore[arg-type]  # 3 axes
        chunks=tuple(arr.chunks[a] for a in axes[:3]),  # type: ignore[arg-type]  # 3 axes
        channels=arr.shape[axes[3]] if arr.ndim == 4 else 1,
        voxel_offset=_vec(kept.get("voxel_offset", (0, 0, 0)), int, f"{where}.voxel_offset"),
        resolution=_vec(resolution, float, f"{where}.resolution"),
    )  # fmt: skip


def ome_geometry(img: OmeZarrImage) -> Geometry:
    """The geometry of an OME-Zarr image's level: its place from the OME transformations,
    the rest from its array's ``attributes["precomputed"]`` when there."""
    return _array_geometry(
        img.array, _kept(img.array), size=img.size, chunks=img.chunk_size,
        channels=img.num_channels, voxel_offset=img.voxel_offset, resolution=img.resolution,
    )  # fmt: skip


def _kept(arr: ZarrArray) -> Mapping[str, Any]:
    kept = arr.attrs.get(ATTRIBUTE, {})
    if not isinstance(kept, Mapping):
        raise InfoError(f"{arr.url}: attributes[{ATTRIBUTE!r}] must be an object, got {kept!r}")
    return kept


def _array_geometry(
    arr: ZarrArray,
    kept: Mapping[str, Any],
    *,
    size: Vec3,
    chunks: Vec3,
    channels: int,
    voxel_offset: Vec3,
    resolution: tuple[float, float, float],
) -> Geometry:
    where = f"{arr.url}: attributes[{ATTRIBUTE!r}]"
    inner = tuple(min(c, _DEFAULT_ZARR_CHUNK) for c in chunks)
    block = kept.get("compressed_segmentation_block_size")
    labels = arr.dtype in (np.uint32, np.uint64) and channels == 1
    return Geometry(
        dtype=arr.dtype,
        size=size,
        voxel_offset=voxel_offset,
        num_channels=channels,
        resolution=resolution,
        layer_type=str(kept.get("type", "segmentation" if labels else "image")),
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
