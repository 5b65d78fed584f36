"""The precomputed annotation format without storage: the ``info`` document
(``neuroglancer_annotations_v1``), the binary encodings of one annotation (by-id index) and
of lists of annotations (related-object and spatial indexes), geometry bounds and box
intersection, and the names of spatial index cells.

An annotation record is its geometry (float32le), then its properties (4-byte types, then
2-byte, then 1-byte ones, each group in ``info`` order), zero padded to a multiple of 4 bytes.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardvol.errors import ChunkDecodeError, InfoError, UnsupportedCodecError
from shardvol.jsondoc import finite_number
from shardvol.sharding import ShardingSpec

ANNOTATIONS_TYPE = "neuroglancer_annotations_v1"
#: The record field of the geometry: a name no property id can have (they start with a-z).
GEOMETRY = "_geometry"
TYPES = ("point", "line", "axis_aligned_bounding_box", "ellipsoid")
#: numpy dtype of each property type, in the order the record groups them (by size)
PROPERTY_DTYPES: dict[str, Any] = {
    "uint32": "<u4", "int32": "<i4", "float32": "<f4", "uint16": "<u2", "int16": "<i2",
    "uint8": "u1", "int8": "i1", "rgb": ("u1", (3,)), "rgba": ("u1", (4,)),
}
_GROUP = {"uint32": 0, "int32": 0, "float32": 0, "uint16": 1, "int16": 1}
_PROPERTY_ID = re.compile(r"^[a-z][a-zA-Z0-9_]*$")


def _fail(where: str, message: str) -> InfoError:
    return InfoError(f"{where}: {message}")


def _number(value: Any, where: str, positive: bool = False) -> float:
    if not finite_number(value):
        raise _fail(where, f"must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise _fail(where, f"must be positive, got {value!r}")
    return float(value)


def _integer(value: Any, where: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise _fail(where, f"must be an integer >= {low}, got {value!r}")
    return int(value)


def _vector(value: Any, rank: int, where: str, positive: bool = False) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != rank:
        raise _fail(where, f"must be an array of {rank} numbers, got {value!r}")
    return tuple(_number(v, f"{where}[{i}]", positive) for i, v in enumerate(value))


def _key(doc: Any, where: str) -> str:
    if not isinstance(doc, dict):
        raise _fail(where, f"must be a JSON object, got {doc!r}")
    key = doc.get("key")
    if not isinstance(key, str) or not key.strip("/"):
        raise _fail(f"{where}.key", f"must be a non-empty string, got {key!r}")
    return key


@dataclass(frozen=True)
class PropertySpec:
    """One annotation property: ``id``, ``type`` (a key of PROPERTY_DTYPES), and optional
    ``description`` and ``enum_values`` with their ``enum_labels``."""

    id: str
    type: str
    description: str | None = None
    enum_values: tuple[float, ...] | None = None
    enum_labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        where = f"property {self.id!r}"
        if not isinstance(self.id, str) or not _PROPERTY_ID.match(self.id):
            raise _fail(where, "id must match ^[a-z][a-zA-Z0-9_]*$")
        if self.type not in PROPERTY_DTYPES:
            raise _fail(where, f"type must be one of {list(PROPERTY_DTYPES)}, got {self.type!r}")
        if self.description is not None and not isinstance(self.description, str):
            raise _fail(where, f"description must be a string, got {self.description!r}")
        if (self.enum_values is None) != (self.enum_labels is None):
            raise _fail(where, "enum_values and enum_labels must be given together")
        if self.enum_values is not None and self.enum_labels is not None:
            self._check_enum(where, list(self.enum_values), list(self.enum_labels))

    def _check_enum(self, where: str, values: list, labels: list) -> None:
        if self.type in ("rgb", "rgba"):
            raise _fail(where, f"a {self.type} property cannot have enum_values")
        if len(values) != len(labels) or not all(isinstance(s, str) for s in labels):
            raise _fail(where, "enum_labels must be as many strings as enum_values")
        dtype = np.dtype(PROPERTY_DTYPES[self.type])
        for v in values:
            if dtype.kind == "f":
                _number(v, f"{where} enum value")
            elif not (isinstance(v, numbers.Integral) and not isinstance(v, bool)
                      and np.iinfo(dtype).min <= int(v) <= np.iinfo(dtype).max):
                raise _fail(where, f"enum value {v!r} is not a {self.type}")
        object.__setattr__(self, "enum_values", tuple(values))
        object.__setattr__(self, "enum_labels", tuple(labels))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of one value (a subarray dtype for rgb and rgba)."""
        return np.dtype(PROPERTY_DTYPES[self.type])

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> PropertySpec:
        if not isinstance(doc, dict):
            raise _fail(where, f"must be a JSON object, got {doc!r}")
        unknown = set(doc) - {"id", "type", "description", "enum_values", "enum_labels"}
        if unknown:
            raise _fail(where, f"unknown member(s) {sorted(unknown)}")
        values, labels = doc.get("enum_values"), doc.get("enum_labels")
        for name, v in (("enum_values", values), ("enum_labels", labels)):
            if v is not None and not isinstance(v, list):
                raise _fail(where, f"{name} must be an array, got {v!r}")
        try:
            return cls(doc.get("id"), doc.get("type"),  # type: ignore[arg-type]
                       doc.get("description"), None if values is None else tuple(values),
                       None if labels is None else tuple(labels))
        except InfoError as e:
            raise _fail(where, str(e)) from None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.description is not None:
            doc["description"] = self.description
        if self.enum_values is not None and self.enum_labels is not None:
            doc["enum_values"], doc["enum_labels"] = list(self.enum_values), list(self.enum_labels)
        return doc


@dataclass(frozen=True)
class IndexSpec:
    """Where a uint64 index lives (``key``, relative to the info's directory) and its
    sharding (None: one file per id); for a relationship index, ``id`` names it."""

    key: str
    sharding: ShardingSpec | None = None
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id} if self.id else {}
        doc["key"] = self.key
        if self.sharding is not None:
            doc["sharding"] = self.sharding.to_dict()
        return doc


@dataclass(frozen=True)
class SpatialLevel:
    """One level of the spatial index: a grid of ``grid_shape`` cells of ``chunk_size``
    from ``lower_bound``, at most ``limit`` annotations a cell, stored under ``key``."""

    key: str
    grid_shape: tuple[int, ...]
    chunk_size: tuple[float, ...]
    limit: int
    sharding: ShardingSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"key": self.key, "grid_shape": list(self.grid_shape),
                               "chunk_size": list(self.chunk_size), "limit": self.limit}
        if self.sharding is not None:
            doc["sharding"] = self.sharding.to_dict()
        return doc


@dataclass(frozen=True)
class AnnotationInfo:
    """The parsed ``info`` of an annotation collection (``annotation_type`` lower case)."""

    dimensions: dict[str, tuple[float, str]]
    lower_bound: tuple[float, ...]
    upper_bound: tuple[float, ...]
    annotation_type: str
    properties: tuple[PropertySpec, ...]
    relationships: tuple[IndexSpec, ...]
    by_id: IndexSpec
    spatial: tuple[SpatialLevel, ...]

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def geometry_size(self) -> int:
        """float32 values of one annotation's geometry."""
        return self.rank if self.annotation_type == "point" else 2 * self.rank

    @classmethod
    def from_dict(cls, doc: Any, source: str) -> AnnotationInfo:
        """Parse and check an info document; InfoError ``"<source>: ..."`` names the fault."""
        if not isinstance(doc, dict):
            raise _fail(source, f"must be a JSON object, got {type(doc).__name__}")
        if doc.get("@type") != ANNOTATIONS_TYPE:
            raise _fail(f"{source} @type", f"must be {ANNOTATIONS_TYPE!r}, got "
                        f"{doc.get('@type')!r}")
        for name in ("dimensions", "lower_bound", "upper_bound", "annotation_type", "by_id",
                     "spatial"):
            if name not in doc:
                raise _fail(source, f"{name!r} is missing")
        dims = doc["dimensions"]
        if not isinstance(dims, dict) or not dims:
            raise _fail(f"{source} dimensions", f"must be a non-empty object, got {dims!r}")
        dimensions = {}
        for name, v in dims.items():
            if not (isinstance(v, list) and len(v) == 2 and isinstance(v[1], str)):
                raise _fail(f"{source} dimensions.{name}", f"must be [scale, unit], got {v!r}")
            dimensions[name] = (_number(v[0], f"{source} dimensions.{name}", True), v[1])
        rank = len(dimensions)
        kind = doc["annotation_type"]
        if isinstance(kind, str) and kind.lower() == "polyline":
            raise UnsupportedCodecError(f"{source}: POLYLINE annotations are not supported")
        if not isinstance(kind, str) or kind.lower() not in TYPES:
            raise _fail(f"{source} annotation_type", f"must be one of "
                        f"{[t.upper() for t in TYPES]}, got {kind!r}")
        props = _list(doc.get("properties", []), f"{source} properties")
        rels = _list(doc.get("relationships", []), f"{source} relationships")
        levels = _list(doc["spatial"], f"{source} spatial")
        info = cls(
            dimensions,
            _vector(doc["lower_bound"], rank, f"{source} lower_bound"),
            _vector(doc["upper_bound"], rank, f"{source} upper_bound"),
            kind.lower(),
            tuple(PropertySpec.from_dict(p, f"{source} properties[{i}]")
                  for i, p in enumerate(props)),
            tuple(_relationship(r, f"{source} relationships[{i}]") for i, r in enumerate(rels)),
            IndexSpec(_key(doc["by_id"], f"{source} by_id"),
                      ShardingSpec.member(doc["by_id"], f"{source} by_id")),
            tuple(_level(s, rank, f"{source} spatial[{i}]") for i, s in enumerate(levels)),
        )
        info.check_names(source)
        return info

    def check_names(self, source: str) -> None:
        """Property and relationship ids must be unique."""
        for what, names in (("property", [p.id for p in self.properties]),
                            ("relationship", [r.id for r in self.relationships])):
            if len(set(names)) != len(names):
                raise _fail(source, f"{what} ids are not unique: {names}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "@type": ANNOTATIONS_TYPE,
            "dimensions": {k: [s, u] for k, (s, u) in self.dimensions.items()},
            "lower_bound": list(self.lower_bound),
            "upper_bound": list(self.upper_bound),
            "annotation_type": self.annotation_type.upper(),
            "properties": [p.to_dict() for p in self.properties],
            "relationships": [r.to_dict() for r in self.relationships],
            "by_id": self.by_id.to_dict(),
            "spatial": [s.to_dict() for s in self.spatial],
        }


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise _fail(where, f"must be an array, got {value!r}")
    return value


def _relationship(doc: Any, where: str) -> IndexSpec:
    key = _key(doc, where)
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid:
        raise _fail(f"{where}.id", f"must be a non-empty string, got {rid!r}")
    return IndexSpec(key, ShardingSpec.member(doc, where), rid)


def _level(doc: Any, rank: int, where: str) -> SpatialLevel:
    key = _key(doc, where)
    shape = doc.get("grid_shape")
    if not isinstance(shape, list) or len(shape) != rank:
        raise _fail(f"{where}.grid_shape", f"must be an array of {rank} integers, got {shape!r}")
    return SpatialLevel(
        key, tuple(_integer(v, f"{where}.grid_shape[{i}]") for i, v in enumerate(shape)),
        _vector(doc.get("chunk_size"), rank, f"{where}.chunk_size", positive=True),
        _integer(doc.get("limit"), f"{where}.limit"), ShardingSpec.member(doc, where))


# -- binary encodings ----------------------------------------------------------------------


def record_dtype(info: AnnotationInfo) -> np.dtype:
    """The structured dtype of one encoded record: ``geometry`` then each property by id."""
    names, formats, offsets = [GEOMETRY], [("<f4", (info.geometry_size,))], [0]
    offset = 4 * info.geometry_size
    for group in (0, 1, 2):
        for p in info.properties:
            if _GROUP.get(p.type, 2) == group:
                names.append(p.id)
                formats.append(PROPERTY_DTYPES[p.type])
                offsets.append(offset)
                offset += p.dtype.itemsize
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": -(-offset // 4) * 4})


def encode_multiple(rows: np.ndarray, ids: np.ndarray) -> bytes:
    """The multiple-annotation encoding: count, the records (``rows``: their bytes, one row
    each), then the ids (uint64le)."""
    return b"".join((np.uint64(len(ids)).astype("<u8").tobytes(), rows.tobytes(),
                     ids.astype("<u8").tobytes()))


def decode_multiple(data: bytes | memoryview, dtype: np.dtype,
                    where: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, records) of a multiple-annotation encoding; ChunkDecodeError names ``where``."""
    size = len(data)
    if size < 8:
        raise ChunkDecodeError(f"{where}: {size} bytes cannot hold an annotation count")
    count = int(np.frombuffer(data, "<u8", 1)[0])
    need = 8 + count * (dtype.itemsize + 8)
    if need != size:
        raise ChunkDecodeError(
            f"{where}: a count of {count} annotations of {dtype.itemsize} + 8 bytes needs "
            f"{need} bytes, but it holds {size}")
    records = np.frombuffer(data, dtype, count, 8)
    ids = np.frombuffer(data, "<u8", count, 8 + count * dtype.itemsize).astype(np.uint64)
    return ids, records


def encode_single(record: bytes, related: Sequence[np.ndarray]) -> bytes:
    """The by-id encoding: the record, then each relationship's count (uint32le) and ids."""
    parts = [record]
    for ids in related:
        parts += [np.uint32(len(ids)).astype("<u4").tobytes(), ids.astype("<u8").tobytes()]
    return b"".join(parts)


def decode_single(data: bytes | memoryview, dtype: np.dtype, relationships: int,
                  where: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """(record, related id arrays) of a by-id encoding; ChunkDecodeError names ``where``."""
    size = len(data)
    if size < dtype.itemsize:
        raise ChunkDecodeError(f"{where}: {size} bytes are shorter than the "
                               f"{dtype.itemsize}-byte annotation record")
    record = np.frombuffer(data, dtype, 1)[0]
    offset, related = dtype.itemsize, []
    for r in range(relationships):
        if offset + 4 > size:
            raise ChunkDecodeError(f"{where}: truncated before the count of relationship {r}")
        count = int(np.frombuffer(data, "<u4", 1, offset)[0])
        offset += 4
        if offset + 8 * count > size:
            raise ChunkDecodeError(f"{where}: relationship {r} counts {count} ids, but only "
                                   f"{size - offset} bytes follow")
        related.append(np.frombuffer(data, "<u8", count, offset).astype(np.uint64))
        offset += 8 * count
    if offset != size:
        raise ChunkDecodeError(f"{where}: {size - offset} bytes follow the annotation")
    return record, related


# -- geometry -----------------------------------------------------------------------------


def bounds(kind: str, geometry: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) corners (float64, (N, rank)) of each annotation's geometry."""
    g = geometry.astype(np.float64)
    if kind == "point":
        return g, g
    a, b = g[:, :rank], g[:, rank:]
    if kind == "ellipsoid":
        return a - np.abs(b), a + np.abs(b)
    return np.minimum(a, b), np.maximum(a, b)


def intersects(kind: str, geometry: np.ndarray, rank: int, lower: np.ndarray,
               upper: np.ndarray) -> np.ndarray:
    """Whether each annotation's geometry meets the closed box ``[lower, upper]``."""
    g = geometry.astype(np.float64)
    if kind == "line":
        return _segment_meets(g[:, :rank], g[:, rank:], lower, upper)
    if kind == "ellipsoid":
        center, radii = g[:, :rank], np.abs(g[:, rank:])
        gap = np.clip(center, lower, upper) - center
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.where(radii > 0, (gap / radii) ** 2, np.where(gap == 0, 0.0, np.inf))
        return term.sum(axis=1) <= 1
    lo, hi = bounds(kind, geometry, rank)
    return np.all((lo <= upper) & (hi >= lower), axis=1)


def _segment_meets(a: np.ndarray, b: np.ndarray, lower: np.ndarray,
                   upper: np.ndarray) -> np.ndarray:
    """Whether segments ``a``-``b`` meet the box (clipping ``a + t (b - a)``, t in [0, 1])."""
    d = b - a
    flat = d == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t1, t2 = (lower - a) / d, (upper - a) / d
    enter = np.where(flat, -np.inf, np.minimum(t1, t2)).max(axis=1, initial=-np.inf)
    leave = np.where(flat, np.inf, np.maximum(t1, t2)).min(axis=1, initial=np.inf)
    inside = np.all(~flat | ((a >= lower) & (a <= upper)), axis=1)
    return inside & (np.maximum(enter, 0) <= np.minimum(leave, 1))


# -- spatial cells ------------------------------------------------------------------------


def cell_range(level: SpatialLevel, origin: np.ndarray, lower: np.ndarray,
               upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last cells (inclusive, int64) of ``level`` meeting ``[lower, upper]`` (rows
    of boxes or one box); cells at the grid's edges stand for all space beyond it."""
    size, last = np.asarray(level.chunk_size), np.asarray(level.grid_shape) - 1
    first = np.clip(np.floor((lower - origin) / size), 0, last).astype(np.int64)
    return first, np.clip(np.floor((upper - origin) / size), 0, last).astype(np.int64)


def cell_name(cell: Sequence[int]) -> str:
    """The unsharded file name of a cell (``1_2_3``)."""
    return "_".join(str(int(c)) for c in cell)


def _morton_dims(grid_shape: Sequence[int]) -> list[tuple[int, int]]:
    """(bit, dimension) of each bit of the compressed Morton code, low to high."""
    out = [(bit, d) for bit in range(64) for d, n in enumerate(grid_shape) if (n - 1) >> bit]
    if len(out) > 64:
        raise InfoError(f"spatial grid {list(grid_shape)} needs {len(out)} bits of compressed "
                        "Morton code; at most 64 fit in a uint64")
    return out


def morton_codes(cells: np.ndarray, grid_shape: Sequence[int]) -> np.ndarray:
    """Compressed Morton codes (uint64) of ``cells`` (N, rank) in a grid of any rank."""
    c = cells.astype(np.uint64)
    out = np.zeros(len(c), np.uint64)
    for j, (bit, d) in enumerate(_morton_dims(grid_shape)):
        out |= ((c[:, d] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(j)
    return out


def morton_cells(codes: np.ndarray, grid_shape: Sequence[int]) -> np.ndarray:
    """The cells (N, rank, int64) whose compressed Morton codes are ``codes``."""
    out = np.zeros((len(codes), len(grid_shape)), np.uint64)
    for j, (bit, d) in enumerate(_morton_dims(grid_shape)):
        out[:, d] |= ((codes >> np.uint64(j)) & np.uint64(1)) << np.uint64(bit)
    return out.astype(np.int64)
