"""The precomputed ``info`` JSON: parse, validate and serialise.

Validation errors are :class:`InfoError` naming the field (``scales[1].size``).
Keys shardvol does not interpret (``mesh``, ``skeletons``, CloudVolume extras)
are kept and written back unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardvol.errors import InfoError
from shardvol.jsondoc import finite_number, load_json

DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
              "float32", "float64")
ENCODINGS = ("raw", "jpeg", "compressed_segmentation", "png", "compresso", "crackle", "fpzip",
             "kempressed", "zfpc")
#: What compresso and crackle (igneous / CloudVolume) store: one channel of unsigned labels.
LABEL_ENCODING_TYPES = ("uint8", "uint16", "uint32", "uint64")
VOLUME_TYPES = ("image", "segmentation")

Vec3 = tuple[int, int, int]


def _int3(value: Any, where: str, positive: bool = False) -> Vec3:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise InfoError(f"info: {where} must be 3 integers, got {value!r}")
    if positive and min(value) <= 0:
        raise InfoError(f"info: {where} must be positive, got {list(value)}")
    return (value[0], value[1], value[2])


def _num3(value: Any, where: str) -> tuple[float, float, float]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 3
        or not all(finite_number(v) and v > 0 for v in value)
    ):
        raise InfoError(f"info: {where} must be 3 positive numbers, got {value!r}")
    return (value[0], value[1], value[2])


def resolution_key(resolution: tuple[float, float, float]) -> str:
    """The conventional scale key for a resolution, e.g. ``"8_8_40"``."""
    return "_".join(f"{r:g}" for r in resolution)


@dataclass(frozen=True)
class ScaleInfo:
    """One entry of ``scales``: a resolution level stored under ``key``."""

    key: str
    size: Vec3
    resolution: tuple[float, float, float]
    chunk_sizes: tuple[Vec3, ...]
    encoding: str
    voxel_offset: Vec3 = (0, 0, 0)
    compressed_segmentation_block_size: Vec3 | None = None
    sharding: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def chunk_size(self) -> Vec3:
        """The (first) chunk size, the one shardvol reads and writes."""
        return self.chunk_sizes[0]

    @property
    def grid_size(self) -> Vec3:
        """Number of chunks along x, y, z."""
        shape = tuple(-(-s // c) for s, c in zip(self.size, self.chunk_size))
        return shape  # type: ignore[return-value]  # 3 axes

    @classmethod
    def from_dict(cls, d: Any, where: str = "scale") -> ScaleInfo:
        if not isinstance(d, dict):
            raise InfoError(f"info: {where} must be an object, got {type(d).__name__}")
        for name in ("key", "size", "resolution", "chunk_sizes", "encoding"):
            if name not in d:
                raise InfoError(f"info: {where} is missing {name!r}")
        key = d["key"]
        if not isinstance(key, str) or not key.strip("/"):
            raise InfoError(f"info: {where}.key must be a non-empty string, got {key!r}")
        size = _int3(d["size"], f"{where}.size", positive=True)
        chunk_sizes = d["chunk_sizes"]
        if not isinstance(chunk_sizes, list) or not chunk_sizes:
            raise InfoError(f"info: {where}.chunk_sizes must be a non-empty list of [x, y, z]")
        chunks = tuple(
            _int3(c, f"{where}.chunk_sizes[{i}]", positive=True) for i, c in enumerate(chunk_sizes)
        )
        encoding = d["encoding"]
        if not isinstance(encoding, str) or encoding.lower() not in ENCODINGS:
            raise InfoError(
                f"info: {where}.encoding {encoding!r} is not one of {', '.join(ENCODINGS)}"
            )
        encoding = encoding.lower()
        block = d.get("compressed_segmentation_block_size")
        if encoding == "compressed_segmentation":
            if block is None:
                raise InfoError(
                    f"info: {where} uses compressed_segmentation but has no "
                    "compressed_segmentation_block_size"
                )
            block = _int3(block, f"{where}.compressed_segmentation_block_size", positive=True)
        elif block is not None:
            raise InfoError(
                f"info: {where}.compressed_segmentation_block_size is only allowed with "
                f"compressed_segmentation, not {encoding!r}"
            )
        sharding = d.get("sharding")
        if sharding is not None:
            if not isinstance(sharding, dict):
                raise InfoError(f"info: {where}.sharding must be an object, got {sharding!r}")
            if len(chunks) != 1:
                raise InfoError(
                    f"info: {where} is sharded but lists {len(chunks)} chunk_sizes; "
                    "a sharded scale must have exactly one"
                )
        known = {"key", "size", "resolution", "chunk_sizes", "encoding", "voxel_offset",
                 "compressed_segmentation_block_size", "sharding"}
        return cls(
            key=key,
            size=size,
            resolution=_num3(d["resolution"], f"{where}.resolution"),
            chunk_sizes=chunks,
            encoding=encoding,
            voxel_offset=_int3(d.get("voxel_offset", [0, 0, 0]), f"{where}.voxel_offset"),
            compressed_segmentation_block_size=block,
            sharding=sharding,
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key,
            "size": list(self.size),
            "resolution": list(self.resolution),
            "voxel_offset": list(self.voxel_offset),
            "chunk_sizes": [list(c) for c in self.chunk_sizes],
            "encoding": self.encoding,
        }
        if self.compressed_segmentation_block_size is not None:
            d["compressed_segmentation_block_size"] = list(self.compressed_segmentation_block_size)
        if self.sharding is not None:
            d["sharding"] = dict(self.sharding)
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class VolumeInfo:
    """The whole info file of a multiscale volume."""

    type: str
    data_type: str
    num_channels: int
    scales: tuple[ScaleInfo, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data_type)

    @classmethod
    def from_dict(cls, d: Any) -> VolumeInfo:
        if not isinstance(d, dict):
            raise InfoError(f"info: must be a JSON object, got {type(d).__name__}")
        kind = d.get("@type", "neuroglancer_multiscale_volume")
        if kind != "neuroglancer_multiscale_volume":
            raise InfoError(f"info: @type is {kind!r}, expected 'neuroglancer_multiscale_volume'")
        for name in ("type", "data_type", "num_channels", "scales"):
            if name not in d:
                raise InfoError(f"info: missing {name!r}")
        vtype = d["type"]
        if vtype not in VOLUME_TYPES:
            raise InfoError(f"info: type {vtype!r} is not one of {', '.join(VOLUME_TYPES)}")
        data_type = d["data_type"]
        if not isinstance(data_type, str) or data_type.lower() not in DATA_TYPES:
            raise InfoError(
                f"info: data_type {data_type!r} is not one of {', '.join(DATA_TYPES)}"
            )
        data_type = data_type.lower()
        channels = d["num_channels"]
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise InfoError(f"info: num_channels must be a positive integer, got {channels!r}")
        scales_in = d["scales"]
        if not isinstance(scales_in, list) or not scales_in:
            raise InfoError("info: scales must be a non-empty list")
        scales = tuple(ScaleInfo.from_dict(s, f"scales[{i}]") for i, s in enumerate(scales_in))
        keys = [s.key for s in scales]
        if len(set(keys)) != len(keys):
            raise InfoError(f"info: scale keys must be unique, got {keys}")
        info = cls(
            type=vtype,
            data_type=data_type,
            num_channels=channels,
            scales=scales,
            extra={k: v for k, v in d.items()
                   if k not in ("@type", "type", "data_type", "num_channels", "scales")},
        )
        itemsize = np.dtype(data_type).itemsize
        for i, scale in enumerate(scales):
            info.check_encoding(scale.encoding, f"scales[{i}].encoding")
            for what, shape in (("size", scale.size), ("chunk_sizes", scale.chunk_size)):
                if math.prod(shape) * channels * itemsize >= 1 << 63:
                    raise InfoError(
                        f"info: scales[{i}].{what} {list(shape)} x num_channels {channels} of "
                        f"{data_type} is 2**63 bytes or more"
                    )
        return info

    def check_encoding(self, encoding: str, where: str) -> None:
        """Raise InfoError if ``encoding`` cannot hold this volume's dtype and channels."""
        dt, nc = self.data_type, self.num_channels
        if encoding == "jpeg" and (dt != "uint8" or nc not in (1, 3)):
            raise InfoError(f"info: {where} jpeg needs uint8 with 1 or 3 channels, not {dt} x {nc}")
        if encoding == "png" and (dt not in ("uint8", "uint16") or not 1 <= nc <= 4):
            raise InfoError(
                f"info: {where} png needs uint8/uint16 with 1-4 channels, not {dt} x {nc}"
            )
        if encoding == "compressed_segmentation" and dt not in ("uint32", "uint64"):
            raise InfoError(f"info: {where} compressed_segmentation needs uint32/uint64, not {dt}")
        if encoding in ("fpzip", "kempressed", "zfpc") and dt not in ("float32", "float64"):
            raise InfoError(f"info: {where} {encoding} needs float32/float64, not {dt}")
        if encoding in ("compresso", "crackle") and (dt not in LABEL_ENCODING_TYPES or nc != 1):
            raise InfoError(
                f"info: {where} {encoding} needs one channel of uint8/16/32/64, not {dt} x {nc}"
            )

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "info") -> VolumeInfo:
        return cls.from_dict(load_json(text, source))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "@type": "neuroglancer_multiscale_volume",
            "type": self.type,
            "data_type": self.data_type,
            "num_channels": self.num_channels,
            "scales": [s.to_dict() for s in self.scales],
        }
        d.update(self.extra)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def scale_index(self, selector: int | str | Sequence[float]) -> int:
        """Index of a scale chosen by position, key, or resolution."""
        if isinstance(selector, int) and not isinstance(selector, bool):
            if not -len(self.scales) <= selector < len(self.scales):
                raise InfoError(
                    f"mip {selector} does not exist; the volume has {len(self.scales)} scales"
                )
            return selector % len(self.scales)
        if isinstance(selector, str):
            for i, s in enumerate(self.scales):
                if s.key == selector:
                    return i
            raise InfoError(
                f"no scale with key {selector!r}; keys are {[s.key for s in self.scales]}"
            )
        try:
            res = tuple(float(r) for r in selector)  # type: ignore[union-attr]  # bool: TypeError
        except (TypeError, ValueError):
            raise InfoError(
                f"a scale is chosen by index, key or resolution (3 numbers), not {selector!r}"
            ) from None
        for i, s in enumerate(self.scales):
            if tuple(float(r) for r in s.resolution) == res:
                return i
        raise InfoError(
            f"no scale with resolution {list(res)}; resolutions are "
            f"{[list(s.resolution) for s in self.scales]}"
        )

    def with_scale(self, scale: ScaleInfo) -> VolumeInfo:
        """A copy with ``scale`` added (or replacing the scale of the same key), ordered by
        resolution."""
        others = [s for s in self.scales if s.key != scale.key]
        scales = sorted([*others, scale], key=lambda s: (math.prod(s.resolution), s.resolution))
        return replace(self, scales=tuple(scales))
